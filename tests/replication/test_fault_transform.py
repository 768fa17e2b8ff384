"""The consume-transform-produce checks on synthetic histories: each anomaly must be reported."""

from __future__ import annotations

from tests.replication.fault_invariants import OffsetCommit, TxnOutcome
from tests.replication.fault_transform import TransformTxn, output_value, transform_problems

SOURCE = "chaos"
# Partition 0 holds a, b, c at offsets 0-2; partition 1 holds d at offset 0.
INPUTS = {(0, 0): "w0:0", (0, 1): "w0:1", (0, 2): "w0:2", (1, 0): "w1:0"}
ENDS = {0: 3, 1: 1}


def txn(n: int, values: list[str], offsets: dict[int, int], outcome: TxnOutcome, at: float) -> TransformTxn:
    return TransformTxn(tuple(output_value("x0", n, v) for v in values), tuple(sorted(offsets.items())), outcome,
                        at, at + 0.1)


def commits(transactions: list[TransformTxn]) -> list[OffsetCommit]:
    return [OffsetCommit("x0", SOURCE, p, o, t.sent_at, t.done_at)
            for t in transactions if t.outcome is TxnOutcome.COMMITTED for p, o in t.offsets]


def check(transactions: list[TransformTxn], outputs: list[str], final: dict[int, int],
          read_by_members: tuple[str, ...] = (), caught_up: bool = True) -> list[str]:
    return transform_problems(SOURCE, transactions, commits(transactions), INPUTS, outputs, final, ENDS,
                              read_by_members, caught_up).problems


# An aborted first try of w0:0, w0:1, then both committed again, then the rest.
HISTORY = [
    txn(1, ["w0:0", "w0:1"], {0: 2}, TxnOutcome.ABORTED, 1.0),
    txn(2, ["w0:0", "w0:1"], {0: 2}, TxnOutcome.COMMITTED, 2.0),
    txn(3, ["w0:2", "w1:0"], {0: 3, 1: 1}, TxnOutcome.COMMITTED, 3.0),
]
GOOD_OUTPUTS = [o for t in HISTORY[1:] for o in t.outputs]


def test_a_clean_history_passes() -> None:
    report = transform_problems(SOURCE, HISTORY, commits(HISTORY), INPUTS, GOOD_OUTPUTS, ENDS, ENDS)
    assert report.problems == []
    assert (report.inputs, report.outputs, report.transactions["aborted"]) == (4, 4, 1)


def test_a_consumed_input_without_output_is_missing() -> None:
    problems = check(HISTORY, GOOD_OUTPUTS[1:], ENDS)
    assert any(p.startswith("transform missing: 1") and "w0:0" in p for p in problems), problems


def test_an_input_transformed_twice_is_duplicated() -> None:
    problems = check(HISTORY, [*GOOD_OUTPUTS, output_value("x0", 9, "w1:0")], ENDS)
    assert any(p.startswith("transform duplicated: 1") and "w1:0 x2" in p for p in problems), problems


def test_output_beyond_the_committed_offset_is_reported() -> None:
    # The offsets say w0:2 was not consumed, yet its output is committed.
    problems = check(HISTORY, GOOD_OUTPUTS, {0: 2, 1: 1})
    assert any(p.startswith("transform output of an unconsumed input: 1") for p in problems), problems


def test_aborted_output_read_by_the_drain_or_a_member_is_reported() -> None:
    aborted = HISTORY[0].outputs[0]
    assert any(p.startswith("transform aborted output read") for p in check(HISTORY, [*GOOD_OUTPUTS, aborted], ENDS))
    assert any(p.startswith("transform aborted output read")
               for p in check(HISTORY, GOOD_OUTPUTS, ENDS, read_by_members=(aborted,)))


def test_committed_offsets_going_backwards_are_reported() -> None:
    back = [*HISTORY, txn(4, [], {0: 1}, TxnOutcome.COMMITTED, 4.0)]
    problems = check(back, GOOD_OUTPUTS, ENDS)
    assert any("chaos-0" in p and "got 1" in p for p in problems), problems


def test_a_committed_offset_lost_after_the_heal_is_reported() -> None:
    problems = check(HISTORY, GOOD_OUTPUTS[:2], {0: 2, 1: 0})
    assert any("committed 0 after the heal, 1 was acknowledged" in p for p in problems), problems


def test_a_transformer_that_never_caught_up_is_reported() -> None:
    assert "transformer did not catch up with its input" in check(HISTORY, GOOD_OUTPUTS, ENDS, caught_up=False)


def test_an_input_value_in_the_log_twice_needs_one_output_per_copy() -> None:
    """A writer that resent a value under a new producer epoch put it in the log twice: two input
    records, two outputs — neither a duplicate nor a loss of the transformer."""
    inputs = {**INPUTS, (1, 1): "w1:0"}
    ends = {0: 3, 1: 2}
    history = [*HISTORY, txn(4, ["w1:0"], {1: 2}, TxnOutcome.COMMITTED, 4.0)]
    outputs = [o for t in history[1:] for o in t.outputs]

    def problems(outs: list[str]) -> list[str]:
        return transform_problems(SOURCE, history, commits(history), inputs, outs, ends, ends).problems

    assert problems(outputs) == []
    assert any(p.startswith("transform missing: 1") and "w1:0" in p for p in problems(outputs[:-1]))
    assert any(p.startswith("transform duplicated: 1") and "w1:0 x3 (in the input x2)" in p
               for p in problems([*outputs, output_value("x0", 9, "w1:0")]))
