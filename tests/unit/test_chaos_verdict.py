"""The chaos verdict (tests/chaos/harness.py, `judge`): it finds what a run lost, what came
unasked, and duplicates no fault explains; it forgives a duplicate that came after a fault
which found the record uncommitted."""

from __future__ import annotations

from tests.chaos.harness import Snapshot, Verdict, judge

T = "topic"
SUB = "s_g-s"


def test_a_clean_run_is_clean_and_counted() -> None:
    verdict = Verdict(seed=1)
    judge(verdict, "s", SUB, {(T, 0, 0), (T, 0, 1), (T, 0, 2)},
          {(T, 0, 0): [1.0], (T, 0, 1): [1.1]}, {(T, 0, 2)}, [])
    assert verdict.clean
    assert (verdict.delivered, verdict.dead_lettered) == (2, 1)


def test_a_record_neither_delivered_nor_dead_lettered_is_lost() -> None:
    verdict = Verdict(seed=1)
    judge(verdict, "s", SUB, {(T, 0, 0), (T, 0, 1)}, {(T, 0, 0): [1.0]}, set(), [])
    assert verdict.lost == {"s": [(T, 0, 1)]}
    assert not verdict.clean and "LOST s" in verdict.summary()


def test_a_record_the_filter_left_out_must_not_arrive() -> None:
    verdict = Verdict(seed=1)
    judge(verdict, "s", SUB, {(T, 0, 0)}, {(T, 0, 0): [1.0], (T, 0, 1): [1.0]}, set(), [])
    assert verdict.unexpected == {"s": [(T, 0, 1)]}


def test_a_duplicate_is_forgiven_only_after_a_fault_that_found_it_uncommitted() -> None:
    fault = Snapshot(at=5.0, commits={(SUB, T, 0): 3})  # offsets 0-2 were committed then
    expected = {(T, 0, o) for o in range(5)}
    again_after = {(T, 0, o): [1.0, 6.0] for o in range(5)}  # all came twice, after it
    verdict = Verdict(seed=1)
    judge(verdict, "s", SUB, expected, again_after, set(), [fault])
    assert verdict.unexplained_duplicates == {"s": [(T, 0, 0), (T, 0, 1), (T, 0, 2)]}
    assert verdict.explained_duplicates == 2  # offsets 3 and 4

    before = {(T, 0, 4): [1.0, 2.0]}  # twice, but before any fault
    verdict = Verdict(seed=1)
    judge(verdict, "s", SUB, {(T, 0, 4)}, before, set(), [fault])
    assert verdict.unexplained_duplicates == {"s": [(T, 0, 4)]}
