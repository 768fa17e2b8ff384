"""A controller cut off from the other nodes catches up with the metadata as soon as the cut
heals (nodes in network namespaces; root needed, skipped in one line otherwise).

Found by controller-isolated, seed 18: the voters' connection attempts made during the cut sat in
SYN-SENT on the kernel's SYN retransmissions (1, 2, 4, 8, 16 s apart), which the Raft library never
timed out, so for up to tens of seconds after the heal the formerly isolated node did not hear
from the new leader. Its broker went on answering Metadata, ListOffsets and Fetch as the leader
of partitions it had lost, with its old high watermark: a consumer that asked it saw the log end
seconds of acknowledged records early (the nemesis reported them lost).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from broker.tools.client import ClientError
from broker.tools.metadata import ToolError, describe_image, describe_quorum
from tests.replication.netns import CLIENT, NetnsUnavailable, Network
from tests.replication.netns_cluster import NetnsFaultCluster

pytestmark = [pytest.mark.timeout(300)]

#: Long enough for the SYN retransmissions of connects made during the cut to be 8-16 s apart.
CUT_S = 20.0
#: A reconnect after the heal: one connection timeout (2 s) and one retry (0.5 s), with margin.
CATCH_UP_S = 6.0
#: SYNs an attempt sends within one connection timeout: the first, and a retransmission at 1 s.
#: An attempt made early in the cut and never given up has sent 5 by the end of it.
MOST_RETRANSMISSIONS = 2
_SYN_SENT = re.compile(r"(\S+):(\d+)\s+timer:\(on,[^,]*,(\d+)\)")


@pytest.fixture(autouse=True)
def namespaces_available() -> None:
    try:
        Network.check_available()
    except NetnsUnavailable as ex:
        pytest.skip(str(ex))


def test_an_isolated_controller_catches_up_promptly_after_the_heal(tmp_path: Path) -> None:
    with NetnsFaultCluster(tmp_path) as cluster:
        cluster.create_topic("rejoin", 3)
        old = cluster.active_controller()
        others = [n for n in cluster.nodes if n != old.node_id]
        cluster.network.isolate(old.node_id, [*others, CLIENT])
        time.sleep(CUT_S)  # the new controller fences the cut-off broker: records the old one lacks
        survivor = cluster.nodes[others[0]]

        def lag_of_old() -> int | None:
            """The cut-off voter's lag as the active controller sees it (None: no answer in time)."""
            try:
                with cluster.client(survivor, timeout_s=5.0) as client:
                    quorum = describe_quorum(client, wait_s=2.0)
            except (ClientError, ToolError, OSError):
                return None
            lag: int | None = next(v["lag"] for v in quorum["voters"] if v["node_id"] == old.node_id)
            return lag

        behind = lag_of_old()
        for _ in range(5):
            if behind is not None:
                break
            behind = lag_of_old()
        assert behind, f"the cut-off voter did not fall behind (lag {behind})"
        # The connects between controllers made during the cut are retried afresh, not left to
        # the kernel's SYN retransmissions (which would decide when the link comes back).
        controller_ports = {str(node.controller_port) for node in cluster.nodes.values()}
        stale = []
        for node_id in cluster.nodes:
            listing = subprocess.run([*cluster.network.exec_prefix(node_id), "ss", "-tnoH", "state", "syn-sent"],
                                     capture_output=True, text=True, timeout=20, check=True).stdout
            stale += [f"node {node_id} -> {peer}:{port} ({sent} retransmissions)"
                      for peer, port, sent in _SYN_SENT.findall(listing)
                      if port in controller_ports and int(sent) > MOST_RETRANSMISSIONS]
        assert not stale, stale
        cluster.network.heal()
        healed = time.monotonic()
        while lag_of_old() != 0:
            assert time.monotonic() - healed < CATCH_UP_S, (
                f"node {old.node_id} not back in the metadata quorum {CATCH_UP_S} s after the heal")
            time.sleep(0.2)

        # And its broker says what the others say about the partitions it led.
        def views_agree() -> bool:
            views = []
            for node in cluster.nodes.values():
                try:
                    with cluster.client(node, timeout_s=5.0) as client:
                        topic = next(t for t in describe_image(client)["topics"] if t["name"] == "rejoin")
                except (ClientError, OSError):
                    return False
                views.append([(p["leader"], p["leader_epoch"]) for p in topic["partitions"]])
            return all(v == views[0] for v in views)

        while not views_agree():
            assert time.monotonic() - healed < CATCH_UP_S + 5.0, "the brokers' metadata still differs"
            time.sleep(0.2)
