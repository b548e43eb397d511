"""The in-process outlet (actors/delivery/egress/handler.py): a real HandlerActor calling real
async functions, on a fake clock; what it tells the partition actor for each answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from actors.delivery.document.signing import webhook_id
from actors.delivery.egress.handler import ConsumedRecord, HandlerActor, HandlerDestination
from actors.delivery.egress.outlet import WORKER_IDLE_MS
from actors.shared.messages import Deliver, Delivered, DeliverMany, Failed, Record
from runtime.errors import DeadLetter, Skip
from runtime.host.journal import Event
from runtime.host.metrics import Registry
from runtime.kernel import Actor, ActorSystem, ChildSpec, FakeClock

TIMEOUT_MS = 5000
Outcome = Delivered | Failed


class Partition(Actor):
    """Stands where the partition actor stands: keeps every outcome it is told."""

    def __init__(self) -> None:
        super().__init__("partition")
        self.outcomes: asyncio.Queue[Outcome] = asyncio.Queue()

    async def handle(self, message: Any) -> None:
        self.outcomes.put_nowait(message)


@dataclass
class Harness:
    clock: FakeClock
    system: ActorSystem
    partition: Partition
    events: list[Event]

    async def outlet(self, handler: Callable[[ConsumedRecord], Awaitable[object]]
                     ) -> HandlerActor:
        destination = HandlerDestination(handler, 4, TIMEOUT_MS)
        actor = destination.outlet("egress", "billing_g1", Registry())
        await self.system.spawn(ChildSpec("egress", lambda: actor, restart="temporary"))
        return actor

    async def push(self, outlet: HandlerActor, record: Record) -> Outcome:
        await outlet.tell(Deliver(record, epoch=2, reply_to=self.partition))
        async with asyncio.timeout(5):
            return await self.partition.outcomes.get()

    async def raising(self, error: BaseException) -> Outcome:
        """The outcome of a handler that raises `error`."""

        async def handle(item: ConsumedRecord) -> None:
            raise error

        return await self.push(await self.outlet(handle), record())

    async def hanging(self, handle: Callable[[ConsumedRecord], Awaitable[object]],
                      started: asyncio.Event) -> HandlerActor:
        """An outlet with `handle` busy on a record (`handle` sets `started`)."""
        outlet = await self.outlet(handle)
        await outlet.tell(Deliver(record(), epoch=2, reply_to=self.partition))
        await started.wait()
        return outlet


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    clock = FakeClock()
    events: list[Event] = []
    system = ActorSystem(clock=clock, emit=events.append)
    await system.start()
    partition = Partition()
    await system.spawn(ChildSpec("partition", lambda: partition))
    try:
        yield Harness(clock, system, partition, events)
    finally:
        await system.stop(deadline_ms=1000)


def record(offset: int = 7, attempt: int = 1) -> Record:
    return Record("orders", 3, offset, b"user-7", b"hello", (("trace", b"t1"),),
                  timestamp_ms=1_699_999_000_000, fetched_ms=0, attempt=attempt)


async def test_the_handler_gets_the_record_with_its_stable_id_and_returning_delivers(
        harness: Harness) -> None:
    seen: list[ConsumedRecord] = []

    async def handle(item: ConsumedRecord) -> None:
        seen.append(item)

    outlet = await harness.outlet(handle)
    outcome = await harness.push(outlet, record(attempt=2))

    assert isinstance(outcome, Delivered) and outcome.epoch == 2
    assert seen == [ConsumedRecord("orders", 3, 7, b"user-7", b"hello", (("trace", b"t1"),),
                                   1_699_999_000_000, 2)]
    assert seen[0].id == webhook_id("orders", 3, 7, 1_699_999_000_000)
    assert [e.type for e in harness.events if isinstance(e, Event)] == ["delivered"]
    assert outlet.counters() == {"delivered": 1, "failed_attempts": 0}


async def test_skip_finishes_the_record_without_a_retry_and_says_why(
        harness: Harness) -> None:
    outcome = await harness.raising(Skip("duplicate order"))

    assert isinstance(outcome, Delivered)
    [delivered] = [e for e in harness.events if e.type == "delivered"]
    assert delivered.reason == "skipped: duplicate order"


async def test_dead_letter_gives_the_record_up_now(harness: Harness) -> None:
    outcome = await harness.raising(DeadLetter("unknown customer"))

    assert isinstance(outcome, Failed) and outcome.failure.give_up
    assert outcome.failure.error == "DeadLetter: unknown customer"


async def test_an_error_fails_the_attempt_naming_where_the_handler_raised(
        harness: Harness) -> None:
    outcome = await harness.raising(ValueError("bad amount"))

    assert isinstance(outcome, Failed) and not outcome.failure.give_up
    assert outcome.failure.error.startswith("ValueError: bad amount (at test_handler_actor.py:")
    assert outcome.failure.error.endswith(" in handle)")


async def test_a_hanging_handler_is_bounded_by_timeout_ms_on_the_injected_clock(
        harness: Harness) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handle(item: ConsumedRecord) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: hangs
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await harness.hanging(handle, started)
    await harness.clock.advance_settled(TIMEOUT_MS - 1)
    assert harness.partition.outcomes.empty()

    await harness.clock.advance_settled(1)

    outcome = harness.partition.outcomes.get_nowait()
    assert isinstance(outcome, Failed) and not outcome.failure.give_up
    assert outcome.failure.error == f"handler did not finish within {TIMEOUT_MS} ms"
    assert cancelled.is_set()


async def test_a_timeout_the_handler_raises_itself_is_its_own_error_not_ours(
        harness: Harness) -> None:
    outcome = await harness.raising(TimeoutError("the database did not answer"))

    assert isinstance(outcome, Failed)
    assert outcome.failure.error.startswith("TimeoutError: the database did not answer (at ")


async def test_a_stray_cancelled_error_fails_the_attempt_and_the_worker_lives_on(
        harness: Harness) -> None:
    calls = 0

    async def handle(item: ConsumedRecord) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError  # a bug in the handler's own task handling

    outlet = await harness.outlet(handle)
    first = await harness.push(outlet, record(offset=1))
    second = await harness.push(outlet, record(offset=2))

    assert isinstance(first, Failed) and "CancelledError" in first.failure.error
    assert isinstance(second, Delivered) and outlet.alive


async def test_each_call_times_out_at_its_own_deadline(harness: Harness) -> None:
    started: asyncio.Queue[int] = asyncio.Queue()

    async def handle(item: ConsumedRecord) -> None:
        started.put_nowait(item.offset)
        await asyncio.Event().wait()

    outlet = await harness.outlet(handle)
    await outlet.tell(Deliver(record(offset=1), epoch=2, reply_to=harness.partition))
    assert await started.get() == 1
    await harness.clock.advance_settled(2000)
    await outlet.tell(Deliver(record(offset=2), epoch=2, reply_to=harness.partition))
    assert await started.get() == 2

    await harness.clock.advance_settled(TIMEOUT_MS - 2000)  # the first one's deadline
    first = harness.partition.outcomes.get_nowait()
    assert isinstance(first, Failed) and first.record.offset == 1
    assert harness.partition.outcomes.empty()
    await harness.clock.advance_settled(1999)
    assert harness.partition.outcomes.empty()

    await harness.clock.advance_settled(1)  # the second one's

    second = harness.partition.outcomes.get_nowait()
    assert isinstance(second, Failed) and second.record.offset == 2
    assert second.failure.error == f"handler did not finish within {TIMEOUT_MS} ms"


async def test_a_handler_that_swallows_the_timeout_and_returns_late_still_failed(
        harness: Harness) -> None:
    started = asyncio.Event()

    async def handle(item: ConsumedRecord) -> None:
        if started.is_set():
            return
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return  # swallowed: its answer comes after the deadline

    outlet = await harness.hanging(handle, started)
    await harness.clock.advance_settled(TIMEOUT_MS)

    outcome = harness.partition.outcomes.get_nowait()
    assert isinstance(outcome, Failed)
    assert outcome.failure.error == f"handler did not finish within {TIMEOUT_MS} ms"
    assert isinstance(await harness.push(outlet, record(offset=8)), Delivered)  # worker fine


async def test_stopping_the_actor_cancels_a_running_handler(harness: Harness) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handle(item: ConsumedRecord) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    outlet = await harness.hanging(handle, started)

    await harness.system.root.stop_child("egress")

    assert cancelled.is_set() and outlet.state == "stopped"
    assert harness.partition.outcomes.empty()  # no outcome: the partition drains itself


async def test_a_handler_that_swallows_the_actors_cancellation_does_not_keep_it_alive(
        harness: Harness) -> None:
    started = asyncio.Event()

    async def handle(item: ConsumedRecord) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return  # swallowed

    outlet = await harness.hanging(handle, started)

    await harness.system.root.stop_child("egress")

    assert outlet.state == "stopped" and harness.partition.outcomes.empty()


def live_workers(outlet: HandlerActor) -> int:
    return sum(1 for task in outlet._tasks or () if task.get_name().endswith(":worker")
               and not task.done())


async def test_workers_idle_for_worker_idle_ms_end_and_new_records_start_new_ones(
        harness: Harness) -> None:
    async def handle(item: ConsumedRecord) -> None:
        return None

    outlet = await harness.outlet(handle)
    assert isinstance(await harness.push(outlet, record(1)), Delivered)
    await harness.clock.settle()
    assert live_workers(outlet) == 1
    await harness.clock.advance_settled(WORKER_IDLE_MS - 1)
    assert live_workers(outlet) == 1  # not idle long enough yet
    await harness.clock.advance_settled(1)
    assert live_workers(outlet) == 0 and outlet._workers == 0
    assert isinstance(await harness.push(outlet, record(2)), Delivered)  # a new worker
    await harness.clock.settle()
    assert live_workers(outlet) == 1


async def test_a_record_since_the_trim_was_set_keeps_the_workers_another_period(
        harness: Harness) -> None:
    async def handle(item: ConsumedRecord) -> None:
        return None

    outlet = await harness.outlet(handle)
    await harness.push(outlet, record(1))  # parks: the trim is set for WORKER_IDLE_MS
    await harness.clock.advance_settled(WORKER_IDLE_MS // 2)
    await harness.push(outlet, record(2))  # taken since: the trim looks again later
    await harness.clock.advance_settled(WORKER_IDLE_MS // 2)
    assert live_workers(outlet) == 1
    await harness.clock.advance_settled(WORKER_IDLE_MS)
    assert live_workers(outlet) == 0


async def test_a_cursors_dispatch_in_one_message_is_called_and_answered_record_by_record(
        harness: Harness) -> None:
    seen: list[int] = []

    async def handle(item: ConsumedRecord) -> None:
        seen.append(item.offset)

    outlet = await harness.outlet(handle)
    records = [record(offset=offset) for offset in (5, 6, 7)]
    await outlet.tell(DeliverMany(records, epoch=2, reply_to=harness.partition))
    async with asyncio.timeout(5):
        outcomes = [await harness.partition.outcomes.get() for _ in records]
    assert sorted(seen) == [5, 6, 7]
    assert all(isinstance(o, Delivered) and o.epoch == 2 for o in outcomes)
    assert sorted(o.record.offset for o in outcomes) == [5, 6, 7]
