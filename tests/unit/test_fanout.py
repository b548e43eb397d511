"""The decisions of one fetched partition shared by many cursors (actors/delivery/path/
fanout.py, issue 24): independent progress, the bounded buffer, catch-up entry and exit."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.delivery.path.fanout import CatchUp, Fanout
from actors.shared.messages import Record


def records(first: int, count: int) -> list[Record]:
    return [Record("t", 0, o, None, b"v", (), 0, 0) for o in range(first, first + count)]


def offsets(feed: object) -> dict[str, list[int]]:
    assert isinstance(feed, list)
    return {key: [r.offset for r in part] for key, part in feed}


def positioned(capacity: int = 10, **cursors: int | None) -> Fanout:
    fanout = Fanout(capacity)
    for key in cursors:
        fanout.add(key)
    target = fanout.seek_target(dict(cursors))
    if target is not None:
        fanout.seeked(target)
    for key, position in cursors.items():
        fanout.position(key, position)
    return fanout


def test_every_live_cursor_gets_each_record_once_from_its_own_position() -> None:
    fanout = positioned(a=0, b=3)
    assert fanout.head == 0  # the shared fetch starts at the lowest position
    assert offsets(fanout.append(records(0, 5))) == {"a": [0, 1, 2, 3, 4], "b": [3, 4]}
    assert offsets(fanout.append(records(5, 2))) == {"a": [5, 6], "b": [5, 6]}


def test_a_waiting_cursor_gets_nothing_and_fetching_waits_for_a_live_one() -> None:
    fanout = Fanout(10)
    fanout.add("a")
    assert not fanout.fetching
    assert fanout.append(records(0, 3)) == []
    fanout.position("a", 0)
    assert fanout.fetching


def test_a_paused_cursor_holds_only_itself_and_resumes_from_the_buffer() -> None:
    fanout = positioned(a=0, b=0)
    fanout.append(records(0, 2))
    fanout.pause("b")
    assert fanout.fetching  # a is still live
    assert offsets(fanout.append(records(2, 3))) == {"a": [2, 3, 4]}
    assert offsets(fanout.resume("b")) == {"b": [2, 3, 4]}
    assert offsets(fanout.append(records(5, 1))) == {"a": [5], "b": [5]}


def test_fetching_pauses_when_every_cursor_is_paused() -> None:
    fanout = positioned(a=0)
    fanout.append(records(0, 2))
    fanout.pause("a")
    assert not fanout.fetching
    assert fanout.resume("a") == []  # nothing was fetched meanwhile: live at the head
    assert fanout.fetching


def test_the_buffer_is_bounded_and_a_cursor_behind_it_needs_a_catch_up_reader() -> None:
    fanout = positioned(capacity=4, a=0, b=0)
    fanout.append(records(0, 1))
    fanout.pause("b")
    fanout.append(records(1, 10))
    assert len(fanout.ring) == 4  # bounded, whatever the paused cursor does
    assert fanout.resume("b") == CatchUp("b", 1)
    assert fanout.behind() == ["b"]
    assert offsets(fanout.append(records(11, 1))) == {"a": [11]}  # b is not fed


def test_a_catch_up_reader_hands_over_once_the_buffer_reaches_back_to_it() -> None:
    fanout = positioned(capacity=4, a=0, b=0)
    fanout.pause("b")
    fanout.append(records(0, 10))  # the buffer holds 6..9
    assert fanout.resume("b") == CatchUp("b", 0)
    assert fanout.caught_up("b", 3) is None  # still below the buffer: read on
    assert offsets(fanout.caught_up("b", 7)) == {"b": [7, 8, 9]}
    assert offsets(fanout.append(records(10, 1))) == {"a": [10], "b": [10]}


def test_a_late_cursor_behind_the_head_catches_up_and_one_ahead_skips() -> None:
    fanout = positioned(capacity=3, a=5)
    fanout.append(records(5, 5))  # buffer 7..9, head 10
    fanout.add("old")
    fanout.add("ahead")
    assert fanout.position("old", 2) == CatchUp("old", 2)
    assert offsets(fanout.position("ahead", 8)) == {"ahead": [8, 9]}
    fanout.add("further")
    assert fanout.position("further", 11) == []
    assert offsets(fanout.append(records(10, 1))) == {"a": [10], "ahead": [10]}
    assert offsets(fanout.append(records(11, 1))) == {"a": [11], "ahead": [11],
                                                      "further": [11]}
    fanout.add("new")
    assert fanout.position("new", None) == []  # reset to latest: from the head
    assert offsets(fanout.append(records(12, 2))) == {"a": [12, 13], "ahead": [12, 13],
                                                      "further": [12, 13], "new": [12, 13]}


def test_offsets_with_gaps_are_sliced_by_value() -> None:
    fanout = positioned(a=0, b=4)
    batch = [records(0, 1)[0], records(3, 1)[0], records(7, 1)[0]]
    assert offsets(fanout.append(batch)) == {"a": [0, 3, 7], "b": [7]}
    assert fanout.head == 8


def test_a_removed_cursor_gets_nothing_and_its_late_answers_are_ignored() -> None:
    fanout = positioned(a=0, b=0)
    fanout.remove("b")
    assert offsets(fanout.append(records(0, 2))) == {"a": [0, 1]}
    assert fanout.resume("b") == []
    assert fanout.caught_up("b", 0) == []


def test_a_read_for_a_restarted_cursor_ends_without_feeding_it() -> None:
    fanout = positioned(capacity=2, a=0, b=0)
    fanout.pause("b")
    fanout.append(records(0, 5))
    assert fanout.resume("b") == CatchUp("b", 0)
    fanout.add("b")  # restarted: it waits for its position again
    assert fanout.caught_up("b", 4) == []
    assert fanout.cursors["b"].state == "waiting"


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Fanout(0)


def test_a_latest_cursor_with_nothing_fetched_yet_starts_at_the_first_high_watermark() -> None:
    fanout = Fanout(10)
    fanout.add("new")
    assert fanout.position("new", None) == []
    assert fanout.fetching  # it needs a fetch to learn where the end is
    assert fanout.append(records(0, 5), highwater=8) == []  # history: not for it
    assert offsets(fanout.append(records(5, 5))) == {"new": [8, 9]}


def test_fetching_agrees_with_the_cursor_states_whatever_happens() -> None:
    rand = random.Random(3)
    fanout = Fanout(5)
    next_offset = 0
    for _ in range(2000):
        key = f"c{rand.randrange(6)}"
        action = rand.randrange(7)
        if action == 0:
            fanout.add(key)
        elif action == 1:
            fanout.remove(key)
        elif action == 2:
            fanout.position(key, rand.choice([None, 0, next_offset, next_offset + 3]))
        elif action == 3:
            fanout.pause(key)
        elif action == 4:
            fanout.resume(key)
        elif action == 5:
            fanout.caught_up(key, rand.randrange(next_offset + 1))
        else:
            fanout.append(records(next_offset, 3), highwater=next_offset + 3)
            next_offset += 3
        states = [c.state for c in fanout.cursors.values()]
        assert fanout.fetching == any(s in ("live", "latest") for s in states)


def test_copies_of_a_record_share_one_filter_memo_and_start_their_attempts_afresh() -> None:
    original = records(0, 1)[0]
    original.attempt = 3
    first, second = original.clone(), original.clone()
    assert first.memo is second.memo is original.memo is not None
    assert (first.attempt, second.attempt) == (0, 0)


def test_cursors_without_batches_are_told_the_high_watermark_once() -> None:
    fanout = positioned(capacity=10, a=0, b=0, c=None)
    fanout.append(records(0, 5), highwater=5)
    assert fanout.highwater == 5
    assert fanout.note_highwater(5) == []  # every cursor is live: batches tell them
    fanout.pause("a")
    assert fanout.note_highwater(9) == ["a"]
    assert fanout.note_highwater(9) == []  # heard already
    assert fanout.note_highwater(7) == []  # an older reading lowers nothing
    fanout.append(records(5, 2), highwater=30)  # b's fetch saw the log grow
    assert fanout.note_highwater(12) == ["a"] and fanout.highwater == 30


def test_a_cursor_behind_the_buffer_is_told_the_high_watermark_too() -> None:
    fanout = positioned(capacity=3, a=0)
    fanout.append(records(0, 10), highwater=10)
    fanout.add("late")
    assert isinstance(fanout.position("late", 0), CatchUp)
    assert fanout.note_highwater(100) == ["late"]


@given(gaps=st.lists(st.integers(1, 4), min_size=1, max_size=60),
       capacity=st.integers(1, 40), start=st.integers(0, 250))
def test_a_resume_gets_exactly_the_buffered_records_at_or_above_its_position(
        gaps: list[int], capacity: int, start: int) -> None:
    fanout = positioned(capacity, a=0)
    fetched = [Record("t", 0, o, None, b"v", (), 0, 0)
               for o in itertools.accumulate(gaps, initial=0)]
    fanout.pause("a")
    fanout.append(fetched)
    fanout.cursors["a"].next = start  # where the paused cursor stopped
    buffered = fetched[-capacity:]
    expected = [r.offset for r in buffered if r.offset >= start]
    got = fanout.resume("a")
    if start < buffered[0].offset:
        assert got == CatchUp("a", start)
    else:
        assert offsets(got) == ({"a": expected} if expected else {})
