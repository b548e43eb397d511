"""Timers with slack (`Actor.schedule(..., slack_ms=)`, `SharedTimers`): the ones due
within one slack share one clock alarm, never ring early, at most the slack late, and a
cancelled one never rings (issue 37: a cursor's commit tick, set and given up at every
burst)."""

from __future__ import annotations

import asyncio

from runtime.kernel.actor import Actor
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem


class Ticked(Actor):
    def __init__(self, name: str, rung: list[tuple[str, int]], clock: FakeClock) -> None:
        super().__init__(name)
        self.rung, self.clock = rung, clock

    async def handle(self, message: object) -> None:
        self.rung.append((f"{self.name}:{message}", self.clock.monotonic_ms()))


async def actors(clock: FakeClock, *names: str) -> tuple[ActorSystem, list[Ticked],
                                                          list[tuple[str, int]]]:
    system, rung = ActorSystem(clock=clock), []
    await system.start()
    made = [Ticked(name, rung, clock) for name in names]
    for actor in made:
        await system.spawn(ChildSpec(actor.name, lambda actor=actor: actor))
    return system, made, rung


async def turns() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_timers_due_within_one_slack_share_an_alarm_and_ring_at_its_end() -> None:
    clock = FakeClock(start_ms=1_000)
    system, (a, b), rung = await actors(clock, "a", "b")
    a.schedule(1_010, "x", slack_ms=50)
    b.schedule(1_049, "y", slack_ms=50)
    assert len(a.context.timers) == 2 and a.context.timers is b.context.timers
    clock.advance(49)  # 1_049: due, but the slack's instant is 1_050
    await turns()
    assert rung == []
    clock.advance(1)
    await turns()
    assert sorted(rung) == [("a:x", 1_050), ("b:y", 1_050)]
    assert len(a.context.timers) == 0
    await system.stop()


async def test_a_timer_on_a_slack_instant_rings_then_and_a_later_one_at_the_next() -> None:
    clock = FakeClock(start_ms=0)
    system, (a,), rung = await actors(clock, "a")
    a.schedule(100, "on", slack_ms=50)
    a.schedule(101, "after", slack_ms=50)
    clock.advance(100)
    await turns()
    assert rung == [("a:on", 100)]
    clock.advance(50)
    await turns()
    assert rung == [("a:on", 100), ("a:after", 150)]
    await system.stop()


async def test_a_cancelled_timer_with_slack_never_rings_and_the_others_still_do() -> None:
    clock = FakeClock(start_ms=0)
    system, (a, b), rung = await actors(clock, "a", "b")
    a.schedule(10, "gone", slack_ms=50).cancel()
    b.schedule(20, "kept", slack_ms=50)
    assert not a.timers_pending() and b.timers_pending()
    assert len(a.context.timers) == 1  # the cancelled one left at once, not at its instant
    clock.advance(50)
    await turns()
    assert rung == [("b:kept", 50)]
    await system.stop()


async def test_an_actor_that_ended_gets_none_of_its_timers_with_slack() -> None:
    clock = FakeClock(start_ms=0)
    system, (a,), rung = await actors(clock, "a")
    a.schedule(10, "never", slack_ms=50)
    await system.root.stop_child("a")
    clock.advance(100)
    await turns()
    assert rung == []
    await system.stop()
