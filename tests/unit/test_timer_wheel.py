"""TimerWheel: exact expiry against a sorted-list model, and the edges retries and delays hit."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from runtime.kernel.timer_wheel import TimerHandle, TimerWheel

SECOND = 1_000
DAY = 86_400 * SECOND


def test_a_deadline_in_the_past_expires_on_the_next_advance() -> None:
    wheel = TimerWheel[str](start_ms=1_000)
    wheel.schedule(400, "late")
    assert wheel.next_deadline() == 400
    assert wheel.advance(1_000) == ["late"]


def test_a_deadline_equal_to_now_expires_on_an_advance_to_now() -> None:
    wheel = TimerWheel[str](start_ms=50)
    handle = wheel.schedule(50, "now")
    assert wheel.advance(50) == ["now"]
    assert handle.expired


def test_a_timer_seven_days_out_expires_exactly_then_and_not_a_millisecond_early() -> None:
    wheel = TimerWheel[str]()
    wheel.schedule(7 * DAY, "week")
    assert "levels=1>" not in repr(wheel)  # overflow wheels were added for it
    assert wheel.advance(7 * DAY - 1) == []
    assert wheel.next_deadline() == 7 * DAY
    assert wheel.advance(7 * DAY) == ["week"]


@pytest.mark.timeout(60)  # a hang bound, not a budget: ticking would take hours
def test_advancing_days_over_empty_time_jumps_instead_of_ticking() -> None:
    # Ticking 1 ms slots through 30 days would be 2.6e9 steps; jumping is a few dozen.
    wheel = TimerWheel[int]()
    for day in range(1, 31):
        wheel.schedule(day * DAY + 7, day)
    assert wheel.advance(30 * DAY + 7) == list(range(1, 31))


def test_cancel_after_expiry_returns_false_and_keeps_the_handle_expired() -> None:
    wheel = TimerWheel[str]()
    handle = wheel.schedule(10, "x")
    wheel.advance(10)
    assert wheel.cancel(handle) is False
    assert handle.expired and not handle.cancelled


def test_cancel_twice_returns_false_the_second_time() -> None:
    wheel = TimerWheel[str]()
    handle = wheel.schedule(10, "x")
    assert wheel.cancel(handle) is True
    assert wheel.cancel(handle) is False
    assert handle.cancelled and not handle.expired
    assert wheel.advance(10) == []


def test_advancing_backwards_raises_and_changes_nothing() -> None:
    wheel = TimerWheel[str](start_ms=100)
    wheel.schedule(150, "x")
    with pytest.raises(ValueError, match="backwards"):
        wheel.advance(99)
    assert "now=100ms" in repr(wheel)
    assert wheel.advance(150) == ["x"]


def test_next_deadline_is_exact_for_timers_in_coarse_buckets() -> None:
    wheel = TimerWheel[str]()
    assert wheel.next_deadline() is None
    later = wheel.schedule(5_000, "later")
    first = wheel.schedule(4_099, "first")  # both in one level-2 bucket starting at 4_096
    assert wheel.next_deadline() == 4_099
    wheel.cancel(first)
    assert wheel.next_deadline() == 5_000
    wheel.cancel(later)
    assert wheel.next_deadline() is None


def test_next_deadline_after_an_advance_is_the_earliest_remaining_deadline() -> None:
    wheel = TimerWheel[int]()
    for deadline in (3 * DAY, 70_000, 64, 65, 4_095):
        wheel.schedule(deadline, deadline)
    assert wheel.advance(64) == [64]
    assert wheel.next_deadline() == 65
    assert wheel.advance(69_999) == [65, 4_095]
    assert wheel.next_deadline() == 70_000


def test_len_counts_only_pending_timers() -> None:
    wheel = TimerWheel[int]()
    handles = [wheel.schedule(d, d) for d in (5, 10, 20, DAY)]
    assert len(wheel) == 4
    wheel.cancel(handles[1])
    assert len(wheel) == 3
    wheel.advance(20)
    assert len(wheel) == 1


def test_cancelling_every_timer_in_a_bucket_leaves_nothing_to_expire() -> None:
    wheel = TimerWheel[int]()
    handles = [wheel.schedule(100_000 + i % 7, i) for i in range(1_000)]
    survivor = wheel.schedule(200_000, -1)
    for handle in handles:
        assert wheel.cancel(handle)
    assert len(wheel) == 1
    assert wheel.next_deadline() == 200_000
    assert wheel.advance(199_999) == []
    assert wheel.advance(200_000) == [-1]
    assert survivor.expired


def test_equal_deadlines_come_out_in_schedule_order() -> None:
    wheel = TimerWheel[str](start_ms=0)
    wheel.schedule(5_000, "a")  # placed in a coarse level, cascades down later
    wheel.advance(4_990)
    wheel.schedule(5_000, "b")  # placed straight into the finest level
    wheel.schedule(4_999, "c")
    assert wheel.advance(6_000) == ["c", "a", "b"]


def test_equal_deadlines_keep_schedule_order_when_a_cascade_arrives_second() -> None:
    wheel = TimerWheel[str]()
    wheel.schedule(5_000, "first")  # level-2 bucket [4_096, 8_192)
    wheel.advance(4_000)
    wheel.schedule(5_000, "second")  # level-1 bucket [4_992, 5_056)
    wheel.advance(4_100)  # "first" cascades into that level-1 bucket, behind "second"
    assert wheel.advance(6_000) == ["first", "second"]


def test_cancelling_most_of_a_bucket_keeps_the_rest_in_order() -> None:
    wheel = TimerWheel[int]()
    handles = [wheel.schedule(100_000 + i % 50, i) for i in range(1_000)]
    for handle in handles:
        if handle.item % 10:
            wheel.cancel(handle)
    kept = sorted(range(0, 1_000, 10), key=lambda i: (i % 50, i))
    assert len(wheel) == len(kept)
    assert wheel.next_deadline() == 100_000
    assert wheel.advance(100_049) == kept


def test_a_coarse_tick_is_still_never_early_nor_late() -> None:
    wheel = TimerWheel[str](tick_ms=10)
    wheel.schedule(13, "x")
    wheel.schedule(17, "y")
    wheel.advance(12)
    assert wheel.next_deadline() == 13
    assert wheel.advance(16) == ["x"]
    assert wheel.next_deadline() == 17
    assert wheel.advance(17) == ["y"]


def test_repr_shows_now_pending_and_levels() -> None:
    wheel = TimerWheel[int](start_ms=7)
    wheel.schedule(10 * SECOND, 1)
    assert repr(wheel).startswith("<TimerWheel now=7ms pending=1 levels=3 ")


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(0, 64), (1, 1)])
def test_a_wheel_without_resolution_or_width_is_refused(tick_ms: int, wheel_size: int) -> None:
    with pytest.raises(ValueError):
        TimerWheel[int](tick_ms=tick_ms, wheel_size=wheel_size)


# Deadlines relative to now: past, the next few ticks, seconds, and up to several days.
OFFSETS = st.one_of(
    st.integers(-100, 0),
    st.integers(1, 300),
    st.integers(1, 70 * SECOND),
    st.integers(1, 8 * DAY),
)
STEPS = st.one_of(
    st.integers(0, 5),
    st.integers(0, 500),
    st.integers(0, 100 * SECOND),
    st.integers(0, 3 * DAY),
)


class WheelAgainstSortedList(RuleBasedStateMachine):
    """The wheel must expire exactly what a sorted list of (deadline, seq, item) expires."""

    handles = Bundle("handles")

    @initialize(
        start=st.integers(0, 10**7),
        tick_ms=st.sampled_from([1, 1, 1, 3, 10]),
        wheel_size=st.sampled_from([2, 4, 64]),
    )
    def create(self, start: int, tick_ms: int, wheel_size: int) -> None:
        self.wheel = TimerWheel[int](start_ms=start, tick_ms=tick_ms, wheel_size=wheel_size)
        self.start = self.now = start
        self.model: list[tuple[int, int]] = []  # (deadline, item); items rise in schedule order
        self.items_made = 0

    @rule(target=handles, offset=OFFSETS)
    def schedule(self, offset: int) -> TimerHandle[int]:
        item = self._next_item()
        handle = self.wheel.schedule(self.now + offset, item)
        bisect.insort(self.model, (self.now + offset, item))
        return handle

    # Shared absolute deadlines make ties common, so schedule order on ties is tested.
    @rule(target=handles, k=st.integers(0, 12))
    def schedule_at_a_shared_deadline(self, k: int) -> TimerHandle[int]:
        deadline = self.start + k * 300
        item = self._next_item()
        handle = self.wheel.schedule(deadline, item)
        bisect.insort(self.model, (deadline, item))
        return handle

    @rule(handle=handles)
    def cancel(self, handle: TimerHandle[int]) -> None:
        entry = (handle.deadline_ms, handle.item)
        pending = entry in self.model
        assert self.wheel.cancel(handle) is pending
        if pending:
            self.model.remove(entry)
        assert handle.cancelled or handle.expired

    @rule(step=STEPS)
    def advance(self, step: int) -> None:
        self.now += step
        due = bisect.bisect_left(self.model, (self.now + 1, 0))  # items start at 1
        expected = [item for _, item in self.model[:due]]
        del self.model[:due]
        assert self.wheel.advance(self.now) == expected

    @precondition(lambda self: self.now > 0)
    @rule(back=st.integers(1, 1_000))
    def advance_backwards(self, back: int) -> None:
        try:
            self.wheel.advance(self.now - back)
        except ValueError:
            return
        raise AssertionError("advance went backwards")

    # A rule, not an invariant: next_deadline reshapes buckets, and runs without it must
    # be checked too.
    @rule()
    def next_deadline_is_exact(self) -> None:
        assert self.wheel.next_deadline() == (self.model[0][0] if self.model else None)

    @invariant()
    def len_counts_pending(self) -> None:
        assert len(self.wheel) == len(self.model)

    def _next_item(self) -> int:
        self.items_made += 1
        return self.items_made


WheelAgainstSortedList.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,  # two shared cores: wall-time per example is noise here
    suppress_health_check=[HealthCheck.too_slow],
)
test_wheel_against_sorted_list = WheelAgainstSortedList.TestCase
