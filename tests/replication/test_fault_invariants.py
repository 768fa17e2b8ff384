"""The invariants of the network fault suite on made-up histories: unavailability windows,
acknowledgements given while the leader's ISR was below min.insync.replicas, consumer-group offsets
going backwards, lost or beyond the high watermark, and transactions read wrongly."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from tests.replication.fault_checker import Outcome, Send
from tests.replication.fault_invariants import (
    IsrSample,
    OffsetCommit,
    OffsetObservation,
    PendingIsr,
    Transaction,
    TxnOutcome,
    acks_below_min_isr,
    duplicate_causes,
    group_offset_problems,
    transaction_problems,
    unavailability_windows,
)
from tests.replication.nemeses import cut_off_windows, fenced_windows, pending_isr_windows
from tests.replication.netns import Cut, Network


def ack(seq: int, done: float, partition: int = 0, sent: float | None = None) -> Send:
    return Send("w", seq, "t", partition, done - 0.01 if sent is None else sent, done, Outcome.ACKED, seq)


def test_windows_are_gaps_between_acks_with_a_write_waiting() -> None:
    sends = [ack(0, 1.0), ack(1, 1.5), ack(2, 6.5, sent=1.6), ack(3, 7.0),
             # partition 1: a long gap with nothing sent in it is no unavailability
             ack(4, 1.0, 1), ack(5, 9.0, 1, sent=8.9)]
    windows = unavailability_windows(sends, threshold_s=1.0)
    assert [(w.partition, w.start, w.end) for w in windows.windows] == [(0, 1.6, 6.5)]
    assert round(windows.max_s, 6) == 4.9 and windows.median_s == windows.max_s
    assert unavailability_windows([ack(0, 1.0), ack(1, 1.5)]).windows == []
    # Writes never acknowledged again before the writers stopped: a window open until the last outcome.
    stuck = [ack(0, 1.0), ack(1, 1.5), Send("w", 2, "t", 0, 1.6, 31.6, Outcome.UNKNOWN),
             Send("w", 3, "t", 0, 1.7, 31.7, Outcome.UNKNOWN)]
    assert [(w.start, w.end) for w in unavailability_windows(stuck).windows] == [(1.6, 31.7)]
    never = [Send("w", 0, "t", 1, 1.0, 31.0, Outcome.UNKNOWN), Send("w", 1, "t", 1, 2.0, 32.0, Outcome.UNKNOWN)]
    assert [(w.partition, w.start, w.end) for w in unavailability_windows(never).windows] == [(1, 1.0, 32.0)]


def sample(at: float, node: int, leader: int, isr: tuple[int, ...]) -> IsrSample:
    return IsrSample(at, node, "t", 0, leader, isr)


def test_an_ack_between_two_samples_of_a_lone_leader_is_flagged() -> None:
    samples = [sample(0.0, 1, 1, (1, 2, 3)), sample(0.5, 1, 1, (1,)), sample(1.0, 1, 1, (1,)),
               sample(1.5, 1, 1, (1, 2))]
    flagged = acks_below_min_isr([ack(0, 0.25), ack(1, 0.75), ack(2, 1.25)], samples, min_isr=2)
    assert len(flagged) == 1 and flagged[0].startswith("w:1 ")


def test_an_ack_answered_late_is_not_flagged_when_the_leader_had_enough_replicas_after_the_send() -> None:
    # Sent at 0.1 while the ISR was [1, 2], answered at 0.9 after it shrank to [1]: the leader may
    # have acknowledged before the shrink. Sent after the shrink, the same answer is flagged.
    samples = [sample(0.0, 1, 1, (1, 2)), sample(0.25, 1, 1, (1, 2)), sample(0.5, 1, 1, (1,)),
               sample(0.75, 1, 1, (1,)), sample(1.0, 1, 1, (1,))]
    assert acks_below_min_isr([ack(0, 0.9, sent=0.1)], samples, min_isr=2) == []
    assert acks_below_min_isr([ack(0, 0.9, sent=0.3)], samples, min_isr=2) == []  # the sample before it: [1, 2]
    assert len(acks_below_min_isr([ack(0, 0.9, sent=0.6)], samples, min_isr=2)) == 1


def test_no_flag_when_another_leader_had_a_full_isr_or_samples_are_far_apart() -> None:
    samples = [sample(0.0, 1, 1, (1,)), sample(0.2, 2, 2, (2, 3)), sample(0.5, 1, 1, (1,))]
    assert acks_below_min_isr([ack(0, 0.25)], samples, min_isr=2) == []
    far = [sample(0.0, 1, 1, (1,)), sample(5.0, 1, 1, (1,))]
    assert acks_below_min_isr([ack(0, 2.0)], far, min_isr=2) == []
    # Followers' views are not the leader's: ignored.
    views = [sample(0.0, 2, 1, (1,)), sample(0.5, 2, 1, (1,))]
    assert acks_below_min_isr([ack(0, 0.25)], views, min_isr=2) == []


def test_an_ack_while_the_leader_was_adding_a_caught_up_replica_is_not_flagged() -> None:
    # The metadata said ISR [1] before and after; the leader had asked to add 2, which had reached
    # its high watermark: Kafka's maximal ISR, which its acks=all check counts.
    samples = [sample(0.0, 1, 1, (1,)), sample(0.5, 1, 1, (1,))]
    adding = PendingIsr(0.1, 0.6, 1, "t", 0, (1,), (1, 2))
    assert acks_below_min_isr([ack(0, 0.25)], samples, min_isr=2, pending=[adding]) == []
    # The same ack is flagged when the request was another node's, too small, over before it was
    # sent, for another partition, or ended by a committed change the leader's samples show.
    shrunk = [sample(0.0, 1, 1, (1, 3)), sample(0.15, 1, 1, (1,)), sample(0.5, 1, 1, (1,))]
    for other, seen in ((PendingIsr(0.1, 0.6, 2, "t", 0, (1,), (1, 2)), samples),
                        (PendingIsr(0.1, 0.6, 1, "t", 0, (1,), (1,)), samples),
                        (PendingIsr(0.0, 0.1, 1, "t", 0, (1,), (1, 2)), samples),
                        (PendingIsr(0.1, 0.6, 1, "t", 1, (1,), (1, 2)), samples),
                        (PendingIsr(0.05, 0.6, 1, "t", 0, (1, 3), (1, 2, 3)), shrunk)):
        assert len(acks_below_min_isr([ack(0, 0.25, sent=0.2)], seen, min_isr=2, pending=[other])) == 1, other


def test_pending_isr_windows_run_from_an_expansion_to_its_outcome() -> None:
    now = datetime.now(UTC)

    def at(seconds: float) -> str:
        return (now + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    def proposed(seconds: float, isr: list[int], new: list[int], partition: int = 0) -> dict[str, object]:
        return {"event": "isr_change_proposed", "topic": "t", "partition": partition, "isr": isr,
                "proposed": new, "timestamp": at(seconds)}

    leader = LoggedNode([
        proposed(-30, [1], [1, 2]),  # ends at the next request for the partition
        proposed(-28, [1, 2], [1]),  # a shrink: no window
        proposed(-20, [1], [1, 3]),  # ends when the request fails
        {"event": "isr_change_failed", "reason": "timeout", "timestamp": at(-19)},
        proposed(-10, [1], [1, 2], partition=1),  # ends when the controller refuses it
        {"event": "isr_change_refused", "topic": "t", "partition": 1, "error": "X", "timestamp": at(-8)},
        proposed(-5, [1], [1, 3], partition=1),  # no outcome: the leader's own give-up time
        proposed(-40, [1], [1, 3], partition=2),  # ends when the committed change reaches the leader
        {"event": "partition_isr_changed", "topic": "t", "partition": 2, "isr": [1, 3], "timestamp": at(-39.5)},
    ])
    cluster = SimpleNamespace(nodes={1: leader, 2: LoggedNode([])})
    windows = pending_isr_windows(cluster, timeout_s=10.0)  # type: ignore[arg-type]
    got = [(w.node, w.partition, w.isr, round(w.end - w.start, 1)) for w in windows]
    assert [w.committed for w in windows] == [(1,)] * 5
    assert got == [(1, 0, (1, 2), 2.0), (1, 0, (1, 3), 1.0), (1, 1, (1, 2), 2.0), (1, 1, (1, 3), 10.0),
                   (1, 2, (1, 3), 0.5)]
    assert abs(time.monotonic() - windows[0].start - 30.0) < 2.0


def commit(offset: int, sent: float, done: float, partition: int = 0) -> OffsetCommit:
    return OffsetCommit("m0", "t", partition, offset, sent, done)


def seen(offset: int, sent: float, done: float, node: int = 1) -> OffsetObservation:
    return OffsetObservation(node, "t", 0, offset, sent, done)


def test_group_offsets_going_back_are_flagged_only_in_real_time_order() -> None:
    commits = [commit(10, 0.0, 0.1), commit(20, 1.0, 1.1)]
    # Read 10 while the commit of 20 was in flight: overlapping, not an anomaly.
    fine = group_offset_problems(commits, [seen(10, 1.05, 1.2), seen(20, 1.3, 1.4)], {("t", 0): 20},
                                 {("t", 0): 25})
    assert fine.problems == [] and fine.commits == 2 and fine.observations == 2
    # Read 10 after the commit of 20 had been acknowledged: gone back.
    back = group_offset_problems(commits, [seen(20, 1.3, 1.4), seen(10, 2.0, 2.1, node=3)], {("t", 0): 20},
                                 {("t", 0): 25})
    assert len(back.went_back) == 1 and "node 3" in back.went_back[0] and "commit by m0" in back.went_back[0]
    # An acknowledged commit lower than an earlier acknowledged one (a member that started from a stale offset).
    regressed = group_offset_problems([*commits, commit(15, 3.0, 3.1)], [], {("t", 0): 20}, {("t", 0): 25})
    assert len(regressed.went_back) == 1 and "got 15" in regressed.went_back[0]


def test_a_lower_answer_from_a_coordinator_cut_off_from_the_quorum_is_a_stale_read() -> None:
    commits = [commit(10, 0.0, 0.1), commit(20, 1.0, 1.1)]
    reads = [seen(10, 2.0, 2.1, node=1), seen(10, 2.0, 2.1, node=2)]
    report = group_offset_problems(commits, reads, {("t", 0): 20}, {("t", 0): 25}, cut_off={1: [(1.5, 3.0)]})
    assert len(report.stale_reads) == 1 and "node 1 (cut off" in report.stale_reads[0]
    assert len(report.went_back) == 1 and "node 2" in report.went_back[0]  # node 2 was not cut off
    # ... but an acknowledged commit that goes back is a violation whoever was cut off.
    late = group_offset_problems([*commits, commit(15, 2.0, 2.1)], [], {("t", 0): 20}, {("t", 0): 25},
                                 cut_off={1: [(0.0, 9.0)], 2: [(0.0, 9.0)]})
    assert len(late.went_back) == 1


def test_group_offsets_lost_or_beyond_the_high_watermark_are_flagged() -> None:
    commits = [commit(10, 0.0, 0.1), commit(30, 1.0, 1.1)]
    report = group_offset_problems(commits, [], {("t", 0): 10}, {("t", 0): 25})
    assert len(report.lost_commits) == 1 and "30 was acknowledged" in report.lost_commits[0]
    assert len(report.beyond_high_watermark) == 1 and "high watermark 25" in report.beyond_high_watermark[0]
    assert group_offset_problems(commits, [], {("t", 0): 30}, {("t", 0): 30}).problems == []


def txn(outcome: TxnOutcome, *values: str) -> Transaction:
    return Transaction("p", values, outcome, 0.0, 1.0)


def test_transactions_committed_once_aborted_never_unknown_whole_or_nothing() -> None:
    history = [txn(TxnOutcome.COMMITTED, "a", "b"), txn(TxnOutcome.ABORTED, "c", "d"),
               txn(TxnOutcome.UNKNOWN, "e", "f"), txn(TxnOutcome.UNKNOWN, "g", "h")]
    good = transaction_problems(history, ["a", "b", "e", "f"])
    assert good.problems == [] and (good.committed, good.aborted, good.unknown) == (1, 1, 2)
    bad = transaction_problems(history, ["a", "a", "c", "g"], live_reads=["d"])
    assert len(bad.duplicated) == 1 and bad.duplicated[0] == "a read 2 times"
    assert bad.committed_missing and "'b'" in bad.committed_missing[0]
    assert bad.aborted_read and "'c', 'd'" in bad.aborted_read[0]  # the drain read c, a live consumer d
    assert bad.partial and "1 of 2" in bad.partial[0]


def test_nodes_cut_off_from_the_quorum_and_their_windows() -> None:
    net = Network([1, 2, 3, 4, 5])
    assert net.cut_off([1, 2, 3]) == set()
    for a, b in ((1, 2), (2, 1), (1, 3), (3, 1)):
        net.cuts.add(Cut(a, b))
    assert net.cut_off([1, 2, 3]) == {1}
    net.cuts.add(Cut(4, 2))  # one way is enough to break a connection; 4 still reaches 1 and 3
    assert net.cut_off([1, 2, 3]) == {1}
    net.cuts.add(Cut(3, 4))
    assert net.cut_off([1, 2, 3]) == {1, 4}
    windows = cut_off_windows([(10.0, frozenset({1})), (20.0, frozenset({1, 4})), (30.0, frozenset())], 5.0)
    assert windows == {1: [(10.0, 35.0)], 4: [(20.0, 35.0)]}


def test_a_value_written_twice_is_told_resent_by_the_client_or_written_twice_by_the_broker() -> None:
    causes = duplicate_causes({"w:1": [(5, 7, 0), (90, 7, 2)], "w:2": [(6, 7, 0), (7, 7, 0)], "w:3": [(8, 7, 0)]})
    assert causes["new producer epoch"] == ["w:1 at 5 (producer 7 epoch 0), 90 (producer 7 epoch 2)"]
    assert causes["same producer epoch"] == ["w:2 at 6 (producer 7 epoch 0), 7 (producer 7 epoch 0)"]


class LoggedNode:
    """A node as :func:`fenced_windows` reads it: the events of its log."""

    def __init__(self, events: list[dict[str, object]]) -> None:
        self._events = events

    def events(self, name: str) -> list[dict[str, object]]:
        return [e for e in self._events if e["event"] == name]


def test_fenced_windows_run_from_fencing_to_after_unfencing() -> None:
    now = datetime.now(UTC)

    def at(seconds: float) -> str:
        return (now + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    controller = LoggedNode([{"event": "broker_fenced", "broker_id": 1, "timestamp": at(-20)},
                             {"event": "broker_unfenced", "broker_id": 1, "timestamp": at(-10)},
                             {"event": "broker_fenced", "broker_id": 2, "timestamp": at(-5)}])
    cluster = SimpleNamespace(nodes={1: controller, 2: LoggedNode([])})
    windows = fenced_windows(cluster, grace_s=5.0)  # type: ignore[arg-type]
    (start, end), = windows[1]
    assert abs((end - start) - 15.0) < 0.01 and abs(time.monotonic() - start - 20.0) < 2.0
    assert windows[2][0][1] == float("inf")  # still fenced
