"""The invariants of the network fault suite on made-up histories: unavailability windows and
acknowledgements given while the leader's ISR was below min.insync.replicas."""

from __future__ import annotations

from tests.replication.fault_checker import Outcome, Send
from tests.replication.fault_invariants import IsrSample, acks_below_min_isr, unavailability_windows


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


def sample(at: float, node: int, leader: int, isr: tuple[int, ...]) -> IsrSample:
    return IsrSample(at, node, "t", 0, leader, isr)


def test_an_ack_between_two_samples_of_a_lone_leader_is_flagged() -> None:
    samples = [sample(0.0, 1, 1, (1, 2, 3)), sample(0.5, 1, 1, (1,)), sample(1.0, 1, 1, (1,)),
               sample(1.5, 1, 1, (1, 2))]
    flagged = acks_below_min_isr([ack(0, 0.25), ack(1, 0.75), ack(2, 1.25)], samples, min_isr=2)
    assert len(flagged) == 1 and flagged[0].startswith("w:1 ")


def test_no_flag_when_another_leader_had_a_full_isr_or_samples_are_far_apart() -> None:
    samples = [sample(0.0, 1, 1, (1,)), sample(0.2, 2, 2, (2, 3)), sample(0.5, 1, 1, (1,))]
    assert acks_below_min_isr([ack(0, 0.25)], samples, min_isr=2) == []
    far = [sample(0.0, 1, 1, (1,)), sample(5.0, 1, 1, (1,))]
    assert acks_below_min_isr([ack(0, 2.0)], far, min_isr=2) == []
    # Followers' views are not the leader's: ignored.
    views = [sample(0.0, 2, 1, (1,)), sample(0.5, 2, 1, (1,))]
    assert acks_below_min_isr([ack(0, 0.25)], views, min_isr=2) == []
