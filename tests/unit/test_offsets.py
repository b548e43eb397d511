"""OffsetTracker: the commit position never passes an unfinished record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.shared.offsets import OffsetTracker


def tracker_with(offsets: list[int], start: int | None = None) -> OffsetTracker:
    tracker = OffsetTracker(start)
    for offset in offsets:
        tracker.add(offset)
    return tracker


def test_the_worked_example_from_the_issue() -> None:
    tracker = tracker_with(list(range(10)))
    for offset in (2, 0, 9):
        tracker.finish(offset)
    assert tracker.committable() == 1
    for offset in (1, 4, 5, 3, 7):
        tracker.finish(offset)
    assert tracker.committable() == 6
    assert tracker.pending() == 2


def test_watermark_never_passes_an_unfinished_record() -> None:
    tracker = tracker_with(list(range(5)))
    for offset in (1, 2, 3, 4):
        tracker.finish(offset)
    assert tracker.committable() == 0


def test_all_finished_commits_one_past_the_last_received() -> None:
    tracker = tracker_with([0, 1, 2])
    for offset in (2, 1, 0):
        tracker.finish(offset)
    assert tracker.committable() == 3
    assert tracker.pending() == 0


def test_gaps_in_offsets_neither_block_nor_count_as_finished() -> None:
    tracker = tracker_with([0, 5, 9])
    tracker.finish(0)
    assert tracker.committable() == 5
    tracker.finish(9)
    assert tracker.committable() == 5
    tracker.finish(5)
    assert tracker.committable() == 10


def test_finishing_a_gap_offset_is_refused() -> None:
    tracker = tracker_with([0, 5])
    assert tracker.finish(3) is False
    assert tracker.committable() == 0


def test_nothing_received_and_no_start_has_no_position() -> None:
    assert OffsetTracker().committable() is None


def test_nothing_received_commits_the_start_position() -> None:
    assert OffsetTracker(start=42).committable() == 42


def test_a_gap_before_the_first_record_keeps_the_position_at_or_above_start() -> None:
    tracker = tracker_with([45, 46], start=42)
    assert tracker.committable() == 45
    tracker.finish(46)
    assert tracker.committable() == 45
    tracker.finish(45)
    assert tracker.committable() == 47


def test_finish_is_idempotent_so_stale_outcomes_are_harmless() -> None:
    tracker = tracker_with([0, 1])
    assert tracker.finish(1) is True
    assert tracker.finish(1) is False
    assert tracker.pending() == 1
    assert tracker.finish(0) is True
    assert tracker.finish(0) is False
    assert tracker.pending() == 0
    assert tracker.committable() == 2


def test_finishing_an_offset_never_received_is_refused() -> None:
    tracker = tracker_with([0])
    assert tracker.finish(7) is False
    assert tracker.finish(-1) is False
    assert tracker.pending() == 1


@pytest.mark.parametrize("offsets", [[3, 3], [3, 2]])
def test_offsets_that_do_not_increase_are_rejected(offsets: list[int]) -> None:
    tracker = OffsetTracker()
    tracker.add(offsets[0])
    with pytest.raises(ValueError, match="must increase"):
        tracker.add(offsets[1])


def test_an_offset_below_the_start_position_is_rejected() -> None:
    with pytest.raises(ValueError, match="new OffsetTracker"):
        tracker_with([3], start=10)


def test_is_finished_answers_for_received_and_forgotten_offsets() -> None:
    tracker = tracker_with([0, 2, 4])
    tracker.finish(0)
    tracker.finish(4)
    assert tracker.is_finished(0)
    assert tracker.is_finished(4)
    assert not tracker.is_finished(2)
    assert not tracker.is_finished(3)  # a gap above the position was never received
    assert not tracker.is_finished(5)  # not received yet


def test_memory_holds_only_offsets_from_the_lowest_unfinished_one() -> None:
    tracker = OffsetTracker(0)
    for offset in range(10_000):
        tracker.add(offset)
        tracker.finish(offset)
    assert tracker.committable() == 10_000
    assert tracker._window is None and tracker._done == {}  # nothing held once all finished


def test_repr_shows_position_and_pending() -> None:
    tracker = tracker_with([0, 1])
    tracker.finish(1)
    assert repr(tracker) == "<OffsetTracker committable=0 pending=1 last=1>"


class NaiveTracker:
    """Remembers everything and scans: obviously right, slow."""

    def __init__(self, start: int | None) -> None:
        self.start = start
        self.received: list[int] = []
        self.finished: set[int] = set()

    def committable(self) -> int | None:
        unfinished = [o for o in self.received if o not in self.finished]
        if unfinished:
            return min(unfinished)
        return self.received[-1] + 1 if self.received else self.start


@st.composite
def histories(draw: st.DrawFn) -> tuple[int | None, list[int], list[int]]:
    start = draw(st.none() | st.integers(0, 5))
    gaps = draw(st.lists(st.integers(0, 3), max_size=40))
    offsets, next_offset = [], (start or 0)
    for gap in gaps:
        next_offset += gap
        offsets.append(next_offset)
        next_offset += 1
    finish_order = draw(st.permutations(offsets))
    noise = draw(st.lists(st.integers(0, next_offset + 2), max_size=10))
    return start, offsets, list(finish_order) + noise


@settings(max_examples=200, deadline=None)
@given(histories())
def test_tracker_agrees_with_a_naive_model(
    history: tuple[int | None, list[int], list[int]],
) -> None:
    start, offsets, finishes = history
    tracker, model = OffsetTracker(start), NaiveTracker(start)
    for offset in offsets:
        tracker.add(offset)
        model.received.append(offset)
    previous = tracker.committable()
    for offset in finishes:
        newly = offset in model.received and offset not in model.finished
        assert tracker.finish(offset) is newly
        model.finished.add(offset)
        position = tracker.committable()
        assert position == model.committable()
        assert previous is None or (position is not None and position >= previous)
        if start is not None:
            assert position is not None and position >= start
        previous = position
    assert tracker.pending() == 0


def test_finished_above_lists_what_finished_beyond_the_commit_position() -> None:
    tracker = OffsetTracker(0)
    for offset in range(6):
        tracker.add(offset)
    for offset in (0, 2, 3, 5):
        tracker.finish(offset)
    assert tracker.committable() == 1
    assert tracker.finished_above() == [2, 3, 5]
