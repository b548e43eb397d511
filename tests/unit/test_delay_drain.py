"""A delay actor drained twice (a revoke and a shutdown at once) answers both. No Kafka: a
fake clock jumps straight to the drain deadline, so nothing is forwarded."""

from __future__ import annotations

import asyncio

import pytest

from actors.delay.actor import DelayActor, DelayPeers, DelaySettings
from actors.delay.book import DELAY_DUE_MS, DELAY_TARGET
from actors.shared.messages import Assigned, Batch, Drain, Record
from runtime.host.config import DelayLevel
from runtime.host.metrics import Registry
from runtime.kernel import Actor, ActorSystem, ChildRef, ChildSpec, FakeClock, Supervisor

LEVEL = DelayLevel(name="1s", delay_ms=1000, topics=["d.1s"])
SETTINGS = DelaySettings(bootstrap="unused:9092", group_id="g", levels=(LEVEL,),
                         dead_letter_topic="dlt", max_waiting=100, drain_ms=5000)


class Consumer(Actor):
    """Stands in for the DelayConsumerActor: never started, it only collects requests."""


def waiting_record(offset: int, due_wall_ms: int) -> Record:
    headers = ((DELAY_TARGET, b"orders"), (DELAY_DUE_MS, str(due_wall_ms).encode()))
    return Record("d.1s", 0, offset, b"k", b"v", headers, due_wall_ms - 1000, 0)


async def started_actor(clock: FakeClock) -> tuple[ActorSystem, DelayActor]:
    system = ActorSystem(clock=clock)
    await system.start()
    peers = DelayPeers(Consumer("consumer"), ChildRef(Supervisor("delay"), "producer"))
    actor = DelayActor("d.1s-0", "d.1s", 0, 1, SETTINGS, peers, Registry())
    await system.spawn(ChildSpec("d.1s-0", lambda: actor, restart="temporary"))
    await actor.tell(Assigned(position=0, epoch=1))
    # due in 3 s: the drain waits for it (it falls due before the deadline)
    await actor.ask(Batch([waiting_record(0, clock.wall_ms() + 3000)], None))
    return system, actor


def drain(clock: FakeClock, after_ms: int) -> Drain:
    return Drain(clock.monotonic_ms() + after_ms, asyncio.get_running_loop().create_future())


@pytest.mark.parametrize("second_after_ms", [5000, 9000])
async def test_a_second_drain_does_not_lose_the_first_waiter(second_after_ms: int) -> None:
    """Both waiters get the position at the first deadline: the consumer waits for the
    first one no longer than that."""
    clock = FakeClock()
    system, actor = await started_actor(clock)
    try:
        revoke, shutdown = drain(clock, 5000), drain(clock, second_after_ms)
        await actor.tell(revoke)
        await actor.tell(shutdown)
        await clock.settle()
        assert not revoke.done.done() and not shutdown.done.done()
        await clock.advance_settled(5000)  # straight past the due time to the deadline
        assert revoke.done.result() == 0 and shutdown.done.result() == 0  # not forwarded
    finally:
        await system.stop()
