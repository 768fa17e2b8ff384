"""The first rebalance waits ``group.initial.rebalance.delay.ms`` (Kafka's 3000 ms default), and
a member that left during a rebalance has its commits refused, on a single node and on the
group's coordinator in a 3-node cluster.

- Members that join within the delay form one first generation together (the delay is
  extended while members keep coming, as Kafka's InitialDelayedJoin).
- During a rebalance a member that is still in the group commits with its generation (Kafka
  accepts it: the heartbeat tells it to rejoin); one that left (LeaveGroup) or was dropped for
  not rejoining within the rebalance timeout gets UNKNOWN_MEMBER_ID, before and after the
  next generation; a remaining member's old generation is ILLEGAL_GENERATION after it, and
  REBALANCE_IN_PROGRESS answers commits before the new generation is synced.

Real clients (eager and cooperative members of Java and confluent-kafka) are in
compat_tests/test_cluster_mode.py.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_group_apis import commit, create_topic, subscription, sync
from tests.replication.fault_cluster import FaultCluster
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_011_join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from wire.generated.api_012_heartbeat import HeartbeatRequest, HeartbeatResponse
from wire.generated.api_013_leave_group import (
    LeaveGroupRequest,
    LeaveGroupRequestMemberIdentity,
    LeaveGroupResponse,
)

pytestmark = [pytest.mark.timeout(300)]

DELAY_S = 3.0
TOPIC = "rebalanced"
NONE = ErrorCode.NONE
_serial = itertools.count()


class Target:
    def __init__(self, bootstraps: list[str]) -> None:
        self.bootstraps = bootstraps

    def coordinator(self, group: str) -> str:
        """The bootstrap address of ``group``'s coordinator."""
        deadline = time.monotonic() + 30
        while True:
            with KafkaClient.connect(self.bootstraps[0], timeout_s=10) as client:
                r = client.send(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 3)
            if r.error_code == NONE:
                return f"{r.host}:{r.port}"
            assert time.monotonic() < deadline, f"no coordinator for {group}: {ErrorCode.for_code(r.error_code)}"
            time.sleep(0.2)

    def topic_known_to(self, server: str) -> None:
        deadline = time.monotonic() + 30
        while True:
            with KafkaClient.connect(server, timeout_s=10) as client:
                r = client.send(MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, 9)
            if r.topics[0].error_code == NONE:
                return
            assert time.monotonic() < deadline, f"{server} does not know {TOPIC}"
            time.sleep(0.2)


@pytest.fixture(scope="module", params=["single", "cluster"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    # Kafka's default delay, set explicitly so the test does not depend on the catalog.
    settings = {"group.initial.rebalance.delay.ms": str(int(DELAY_S * 1000))}
    base: Path = tmp_path_factory.mktemp(f"rebalances-{request.param}")
    if request.param == "single":
        broker = BrokerProcess(base / "data", settings).start()
        try:
            with KafkaClient.connect(broker.bootstrap, timeout_s=20) as client:
                create_topic(client, TOPIC, 2)
            yield Target([broker.bootstrap])
        finally:
            assert broker.stop() == 0
        return
    with FaultCluster(base, overrides=settings) as cluster:
        servers = cluster.bootstrap()
        with KafkaClient.connect(servers[0], timeout_s=20) as client:
            create_topic(client, TOPIC, 2)
        yield Target(servers)


def join(client: KafkaClient, group: str, member_id: str = "", rebalance_timeout_ms: int = 30_000) -> JoinGroupResponse:
    """A JoinGroup (v9) through MEMBER_ID_REQUIRED; returns the answer once the generation forms."""
    def send(member: str) -> JoinGroupResponse:
        request = JoinGroupRequest(group_id=group, session_timeout_ms=30_000,
                                   rebalance_timeout_ms=rebalance_timeout_ms, member_id=member,
                                   protocol_type="consumer",
                                   protocols=[JoinGroupRequestProtocol(name="range", metadata=subscription(TOPIC))])
        return client.send(request, JoinGroupResponse, 9)

    r = send(member_id)
    if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        r = send(r.member_id)
    return r


def in_thread(work: Callable[[], JoinGroupResponse]) -> tuple[threading.Thread, list[JoinGroupResponse]]:
    out: list[JoinGroupResponse] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    return thread, out


def leave(client: KafkaClient, group: str, member_id: str) -> None:
    r = client.send(LeaveGroupRequest(group_id=group, members=[LeaveGroupRequestMemberIdentity(member_id=member_id)]),
                    LeaveGroupResponse, 5)
    assert (r.error_code, [m.error_code for m in r.members]) == (NONE, [NONE])


def heartbeat(client: KafkaClient, group: str, generation: int, member_id: str) -> int:
    return client.send(HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id),
                       HeartbeatResponse, 4).error_code


def stable_pair(target: Target, group: str, rebalance_timeout_ms: int = 30_000
                ) -> tuple[str, JoinGroupResponse, JoinGroupResponse]:
    """Two members that joined within the delay, synced in generation 1: (server, leader, follower)."""
    server = target.coordinator(group)
    target.topic_known_to(server)
    threads = []
    for _ in range(2):
        def work() -> JoinGroupResponse:
            with KafkaClient.connect(server, timeout_s=30) as c:
                return join(c, group, rebalance_timeout_ms=rebalance_timeout_ms)
        threads.append(in_thread(work))
    for thread, _ in threads:
        thread.join(30)
    answers = [out[0] for _, out in threads]
    assert [a.error_code for a in answers] == [NONE, NONE]
    assert {a.generation_id for a in answers} == {1}
    leader = next(a for a in answers if a.member_id == a.leader)
    follower = next(a for a in answers if a.member_id != a.leader)
    with KafkaClient.connect(server, timeout_s=30) as c:
        assert sync(c, group, 1, leader.member_id).error_code == NONE
        assert sync(c, group, 1, follower.member_id).error_code == NONE
    return server, leader, follower


def test_members_joining_within_the_delay_form_one_first_generation(target: Target) -> None:
    group = f"delayed-{next(_serial)}"
    server = target.coordinator(group)
    started: dict[str, float] = {}
    joined: dict[str, tuple[JoinGroupResponse, float]] = {}

    def member(name: str, after_s: float) -> None:
        time.sleep(after_s)
        with KafkaClient.connect(server, timeout_s=30) as c:
            started[name] = time.monotonic()
            r = join(c, group)
            joined[name] = (r, time.monotonic())

    threads = [threading.Thread(target=member, args=(name, after), daemon=True)
               for name, after in (("a", 0.0), ("b", 1.0), ("c", 2.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert sorted(joined) == ["a", "b", "c"], joined
    answers = [r for r, _ in joined.values()]
    assert [a.error_code for a in answers] == [NONE] * 3
    assert {a.generation_id for a in answers} == {1}
    assert len({a.leader for a in answers}) == 1
    [leader] = [a for a in answers if a.member_id == a.leader]
    assert sorted(m.member_id for m in leader.members) == sorted(a.member_id for a in answers)
    # Nobody was answered before the delay ran out after the first join.
    first_answer = min(at for _, at in joined.values())
    assert first_answer - started["a"] >= DELAY_S - 0.1


def test_a_member_that_left_during_a_rebalance_cannot_commit(target: Target) -> None:
    group = f"left-{next(_serial)}"
    server, a, b = stable_pair(target, group)
    offsets = {(TOPIC, 0): 7}
    with KafkaClient.connect(server, timeout_s=30) as ca, KafkaClient.connect(server, timeout_s=30) as cb:
        # A third member starts a rebalance (its JoinGroup waits for a and b to rejoin).
        def third() -> JoinGroupResponse:
            with KafkaClient.connect(server, timeout_s=30) as c:
                return join(c, group)
        c_thread, c_out = in_thread(third)
        deadline = time.monotonic() + 10
        while heartbeat(cb, group, 1, b.member_id) != ErrorCode.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline, "no rebalance started"
            time.sleep(0.1)
        # Members still in the group commit with their generation during the rebalance.
        assert commit(ca, group, offsets, generation=1, member_id=a.member_id) == {(TOPIC, 0): NONE}
        leave(ca, group, a.member_id)
        assert commit(ca, group, offsets, generation=1, member_id=a.member_id) == {
            (TOPIC, 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert commit(cb, group, offsets, generation=1, member_id=b.member_id) == {(TOPIC, 0): NONE}
        # b rejoins: generation 2 is b and the third member, not a.
        b2 = join(cb, group, b.member_id)
        c_thread.join(30)
        [c] = c_out
        assert (b2.error_code, c.error_code, b2.generation_id, c.generation_id) == (NONE, NONE, 2, 2)
        leader = b2 if b2.member_id == b2.leader else c
        assert sorted(m.member_id for m in leader.members) == sorted([b.member_id, c.member_id])
        # Before generation 2 is synced, commits wait for it; an old generation is illegal.
        assert commit(cb, group, offsets, generation=2, member_id=b.member_id) == {
            (TOPIC, 0): ErrorCode.REBALANCE_IN_PROGRESS}
        assert commit(cb, group, offsets, generation=1, member_id=b.member_id) == {
            (TOPIC, 0): ErrorCode.ILLEGAL_GENERATION}
        for gen in (1, 2):
            assert commit(ca, group, offsets, generation=gen, member_id=a.member_id) == {
                (TOPIC, 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert sync(cb, group, 2, leader.member_id).error_code == NONE
        assert commit(cb, group, offsets, generation=2, member_id=b.member_id) == {(TOPIC, 0): NONE}
        assert heartbeat(ca, group, 2, a.member_id) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_member_dropped_for_not_rejoining_in_time_cannot_commit(target: Target) -> None:
    group = f"dropped-{next(_serial)}"
    rebalance_timeout_ms = 4000
    server, a, b = stable_pair(target, group, rebalance_timeout_ms)
    offsets = {(TOPIC, 1): 3}
    with KafkaClient.connect(server, timeout_s=30) as ca, KafkaClient.connect(server, timeout_s=30) as cb:
        def third() -> JoinGroupResponse:
            with KafkaClient.connect(server, timeout_s=30) as c:
                return join(c, group, rebalance_timeout_ms=rebalance_timeout_ms)
        c_thread, c_out = in_thread(third)
        deadline = time.monotonic() + 10
        while heartbeat(cb, group, 1, b.member_id) != ErrorCode.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline, "no rebalance started"
            time.sleep(0.1)
        # b rejoins, a never does: the rebalance timeout drops a and forms generation 2.
        b2 = join(cb, group, b.member_id, rebalance_timeout_ms=rebalance_timeout_ms)
        c_thread.join(30)
        [c] = c_out
        assert (b2.error_code, c.error_code, b2.generation_id) == (NONE, NONE, 2)
        leader = b2 if b2.member_id == b2.leader else c
        assert a.member_id not in {m.member_id for m in leader.members}
        for gen in (1, 2):
            assert commit(ca, group, offsets, generation=gen, member_id=a.member_id) == {
                (TOPIC, 1): ErrorCode.UNKNOWN_MEMBER_ID}
        assert heartbeat(ca, group, 1, a.member_id) == ErrorCode.UNKNOWN_MEMBER_ID
