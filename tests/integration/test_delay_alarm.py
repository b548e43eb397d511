"""The delay actor's alarm when the wall clock steps (issue 13): deadlines are wall-clock
times, sleeps are monotonic. A real delay actor and forward producer on the real broker,
driven by a fake clock whose wall clock can step while monotonic time does not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from actors.delay.actor import ALARM_RECHECK_MS, DelayActor, DelayPeers, DelaySettings
from actors.delay.book import DELAY_DUE_MS, DELAY_TARGET
from actors.delay.forwarder import ForwardProducerActor
from actors.shared.messages import Assigned, Batch, Record
from runtime.host.config import DelayLevel
from runtime.host.metrics import Registry
from runtime.kernel import Actor, ActorSystem, ChildSpec, FakeClock
from tests.conftest import TopicFactory
from tests.integration.test_delay import _read

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HOUR_MS = 3_600_000
LEVEL = DelayLevel(name="1h", delay_ms=HOUR_MS, topics=["d.1h"])


class SteppingClock(FakeClock):
    """`FakeClock` whose wall clock steps by `step_ms` (NTP, a resumed VM); monotonic
    time, which sleeps run on, still moves only when advanced."""

    def __init__(self) -> None:
        super().__init__()
        self.step_ms = 0

    def wall_ms(self) -> int:
        return super().wall_ms() + self.step_ms


class Consumer(Actor):
    """Stands in for the DelayConsumerActor: never started, it only collects requests."""


@dataclass
class Rig:
    clock: SteppingClock
    actor: DelayActor
    target: str

    async def hold(self, due_wall_ms: int) -> None:
        headers = ((DELAY_TARGET, self.target.encode()), (DELAY_DUE_MS, b"%d" % due_wall_ms))
        record = Record("d.1h", 0, 0, b"k", b"v", headers, self.clock.wall_ms(), 0)
        await self.actor.ask(Batch([record], None))

    @property
    def waiting(self) -> int:
        assert self.actor.book is not None
        return self.actor.book.waiting


@pytest.fixture
async def rig(kafka_bootstrap: str, topic_factory: TopicFactory) -> AsyncIterator[Rig]:
    target = await topic_factory(prefix="target")
    clock = SteppingClock()
    system = ActorSystem(clock=clock)
    await system.start()
    try:
        producer = await system.spawn(ChildSpec(
            "producer", lambda: ForwardProducerActor("producer", kafka_bootstrap)))
        settings = DelaySettings(bootstrap=kafka_bootstrap, group_id="g", levels=(LEVEL,),
                                 dead_letter_topic="dlt", max_waiting=100, drain_ms=1000)
        actor = DelayActor("d.1h-0", "d.1h", 0, 1, settings,
                           DelayPeers(Consumer("consumer"), producer), Registry())
        await system.spawn(ChildSpec("d.1h-0", lambda: actor, restart="temporary"))
        await actor.tell(Assigned(position=0, epoch=1))
        yield Rig(clock, actor, target)
    finally:
        await system.stop(deadline_ms=5000)


async def test_a_forward_wall_clock_step_forwards_at_once_not_after_the_old_interval(
        rig: Rig, kafka_bootstrap: str) -> None:
    await rig.hold(rig.clock.wall_ms() + HOUR_MS // 2)
    await rig.clock.advance_settled(ALARM_RECHECK_MS)
    assert rig.waiting == 1  # half an hour to go

    rig.clock.step_ms = HOUR_MS  # the wall clock jumps an hour ahead: the record is due
    await rig.clock.advance_settled(ALARM_RECHECK_MS)

    assert rig.waiting == 0  # within one recheck, not 29 minutes of sleep later
    [forwarded] = await _read(kafka_bootstrap, rig.target, 1)
    assert forwarded.value == b"v"


async def test_a_backward_step_never_forwards_early_and_the_alarm_catches_up_after_it(
        rig: Rig, kafka_bootstrap: str) -> None:
    await rig.hold(rig.clock.wall_ms() + 10_000)
    rig.clock.step_ms = -HOUR_MS  # the wall clock steps an hour back

    await rig.clock.advance_settled(10_000)  # the monotonic interval passes...
    assert rig.waiting == 1  # ...but by the wall clock it is not due: never early
    await rig.clock.advance_settled(10_000)
    assert rig.waiting == 1

    rig.clock.step_ms = 0  # the wall clock is right again: 10 s past the due time
    await rig.clock.advance_settled(ALARM_RECHECK_MS)

    assert rig.waiting == 0
    [forwarded] = await _read(kafka_bootstrap, rig.target, 1)
    assert forwarded.value == b"v"
