"""Clock alarms (`call_at`): what actors' timers are made of, on both clocks."""

from __future__ import annotations

import asyncio
import gc

from runtime.kernel.clock import FakeClock, RealClock, settle_within
from tests.waits import until


async def test_fake_alarms_ring_in_deadline_order_inside_advance() -> None:
    clock, rung = FakeClock(), []
    clock.call_at(30, rung.append, "c")
    clock.call_at(10, rung.append, "a")
    clock.call_at(10, rung.append, "b")  # same deadline: in the order they were set
    clock.advance(9)
    assert rung == []
    clock.advance(21)
    assert rung == ["a", "b", "c"]


async def test_an_alarm_set_by_a_ringing_one_for_a_time_passed_rings_next_turn() -> None:
    clock, rung = FakeClock(), []
    clock.call_at(5, lambda: clock.call_at(8, rung.append, "second"))
    clock.call_at(20, rung.append, "later")
    clock.advance(10)
    assert rung == []
    await asyncio.sleep(0)
    assert rung == ["second"]


async def test_a_cancelled_fake_alarm_never_rings() -> None:
    clock, rung = FakeClock(), []
    alarm = clock.call_at(10, rung.append, "x")
    alarm.cancel()
    clock.advance(100)
    assert rung == []


async def test_a_fake_alarm_due_already_rings_on_the_next_loop_turn() -> None:
    clock, rung = FakeClock(start_ms=50), []
    clock.call_at(40, rung.append, "late")
    assert rung == []  # never inside call_at: the caller finishes first
    await asyncio.sleep(0)
    assert rung == ["late"]


async def test_real_alarms_ring_at_their_deadline_and_cancel() -> None:
    clock, rung = RealClock(), []
    now = clock.monotonic_ms()

    def ring(what: str) -> None:
        rung.append((what, clock.monotonic_ms()))

    clock.call_at(now + 20, ring, "on time")
    clock.call_at(now + 5, ring, "cancelled").cancel()
    await until(lambda: rung, timeout_s=5, poll_s=0.005)
    [(what, at)] = rung  # the cancelled one, due first, would have rung before
    assert what == "on time"
    assert at >= now + 19  # not early (milliseconds are floored on both sides)


async def test_settle_within_leaves_no_unread_error_behind_when_it_times_out() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        never: asyncio.Future[None] = loop.create_future()
        await settle_within(RealClock(), [never], 10)
        assert never.cancelled()  # the unanswered one is cancelled
        del never
        await asyncio.sleep(0)
        gc.collect()
        assert reported == []  # asyncio said nothing about an error never retrieved
    finally:
        loop.set_exception_handler(None)
