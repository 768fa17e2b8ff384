"""The console in headless Chromium against a 3-node cluster: brokers and the metadata quorum
are shown, and a killed broker's partitions show up under-replicated within seconds, live."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.console.harness import (
    chromium,
    chromium_or_skip,
    console_errors,
    live_text,
    running_console,
    save_screenshot,
    screenshots_dir,
    wait_until,
)
from tests.integration.quorum_cluster import QuorumCluster

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

pytestmark = pytest.mark.timeout(300)
#: Under-replicated partitions must show within this long of a broker's death.
SHOWN_WITHIN_S = 15.0
OVERRIDES = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "auto.create.topics.enable": "false",
    "replica.lag.time.max.ms": "3000",
}


def _text(driver: Any, element_id: str) -> str:
    return live_text(driver, element_id)


def test_killed_broker_shows_its_partitions_under_replicated(tmp_path: Path) -> None:
    chromium_or_skip()
    shots = screenshots_dir(tmp_path)
    with QuorumCluster(tmp_path / "cluster", session_timeout_ms=3000, overrides=OVERRIDES) as cluster:
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic("replicated", 3, 3), NewTopic("solo", 2, replica_assignment=[[3], [1]],
                                                                       config={"min.insync.replicas": "1"})],
                                      operation_timeout=30)
        futures["replicated"].result(30)
        futures["solo"].result(30)
        with running_console(tmp_path, bootstrap) as console, chromium() as browser:
            browser.get(console.url + "/cluster")
            assert console_errors(browser) == []
            wait_until(lambda: _text(browser, "broker-count") == "3", 30, "three brokers")
            def three_voters() -> str | None:
                text = _text(browser, "voters")
                return text if len(text.splitlines()) == 4 else None

            voters = wait_until(three_voters, 30, "three voters")
            assert "Leader" in voters and voters.count("Follower") == 2
            wait_until(lambda: browser.find_elements("id", "all-healthy"), 30, "a healthy cluster")
            save_screenshot(browser, shots, "cluster-3-nodes")

            victim = cluster.nodes[3]
            victim.kill9()
            killed = time.monotonic()
            wait_until(lambda: _text(browser, "urp-count") != "0", SHOWN_WITHIN_S,
                       "under-replicated partitions after a broker died")
            seen_after = time.monotonic() - killed
            trouble = _text(browser, "trouble")
            assert "replicated-" in trouble and "under-replicated" in trouble
            # Every partition of the topic had a replica on node 3.
            wait_until(lambda: sum(f"replicated-{p}" in _text(browser, "trouble") for p in range(3)) == 3,
                       30, "all three partitions listed")
            wait_until(lambda: _text(browser, "broker-count") == "2", 30, "the dead broker leaves the list")
            # The single-replica partition that lived on node 3 has no leader: offline.
            wait_until(lambda: _text(browser, "offline-count") == "1", 30, "an offline partition")
            offline = [r for r in _text(browser, "trouble").splitlines() if r.startswith("solo-")]
            assert len(offline) == 1 and offline[0].startswith("solo-0 none") and "offline" in offline[0]
            save_screenshot(browser, shots, "cluster-under-replicated")
            assert console_errors(browser) == []
            print(f"under-replicated shown {seen_after:.1f}s after the kill")
