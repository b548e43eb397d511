"""A cursor's commit tick rests while nothing is pending (issue 37): one that finished a
burst is not woken again a second later, and one with records still out keeps ticking
(its periodic commit and the stall watchdog). Real actors on a fake clock; the consumer
and the outlet are a recorder standing where they stand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from actors.delivery.document.settings import cursor_settings
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.path.partition import IDLE_COMMIT_PERIOD_MS, PartitionActor, PartitionPeers
from actors.shared.messages import (
    Assigned,
    Batch,
    CommitRequest,
    Deliver,
    Delivered,
    DeliverMany,
    Record,
)
from runtime.host.metrics import Registry
from runtime.kernel.actor import Actor
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from tests.waits import until


class Recorder(Actor):
    def __init__(self) -> None:
        super().__init__("recorder")
        self.seen: list[object] = []

    async def handle(self, message: object) -> None:
        self.seen.append(message)

    def sent(self) -> list[Record]:
        """The records told to go out, in order."""
        out: list[Record] = []
        for message in self.seen:
            if isinstance(message, Deliver):
                out.append(message.record)
            elif isinstance(message, DeliverMany):
                out += message.records
        return out


@dataclass
class Cursor:
    actor: PartitionActor
    peer: Recorder
    clock: FakeClock


@pytest.fixture
async def cursor() -> AsyncIterator[Cursor]:
    clock = FakeClock(1_000)
    system = ActorSystem(clock=clock)
    await system.start()
    peer = Recorder()
    await system.spawn(ChildSpec("recorder", lambda: peer))
    sub = decode_consumer({
        "id": "s", "group": {"id": "g", "name": "g"}, "broker": "Kafka",
        "topics": [{"name": "t", "config": {"concurrencyFactor": 10}}],
        "subscriptionMethod": {"type": "http", "uri": "http://127.0.0.1:9/hook"}})
    actor = PartitionActor("t-0", cursor_settings(sub, "t"), "t", 0, 1,
                           PartitionPeers(peer, peer, None), Registry())
    await system.spawn(ChildSpec("t-0", lambda: actor))
    await actor.tell(Assigned(0, 1))
    try:
        yield Cursor(actor, peer, clock)
    finally:
        await system.stop(deadline_ms=3000)


def records(*offsets: int) -> list[Record]:
    return [Record("t", 0, o, None, b"v", (), timestamp_ms=0, fetched_ms=1_000)
            for o in offsets]


async def burst(cursor: Cursor, *offsets: int) -> list[Record]:
    """A batch of these offsets, each told to go out; returns them."""
    before = len(cursor.peer.sent())
    await cursor.actor.tell(Batch(records(*offsets), None))
    return (await until(lambda: cursor.peer.sent()[before:] or None, timeout_s=5,
                        poll_s=0.001, what="the records sent"))


async def test_a_cursor_that_finished_its_burst_has_no_tick_to_come(cursor: Cursor) -> None:
    cursor.clock.advance(IDLE_COMMIT_PERIOD_MS)  # the start's tick rings and is handled
    sent = await burst(cursor, 0, 1, 2)
    assert cursor.actor.timers_pending()  # records wait: the tick is set
    for record in sent:
        await cursor.actor.tell(Delivered(record, 1, 200, 1.0))
    await until(lambda: any(isinstance(m, CommitRequest) and m.offset == 3
                            for m in cursor.peer.seen), timeout_s=5, poll_s=0.001,
                what="the commit of 3")
    assert not cursor.actor.timers_pending()  # given up: no turn a second later
    assert cursor.actor.m_oldest.value == 0
    assert cursor.actor.book.stalled_since is None


async def test_a_cursor_with_records_out_keeps_ticking(cursor: Cursor) -> None:
    cursor.clock.advance(IDLE_COMMIT_PERIOD_MS)
    first, second = await burst(cursor, 0, 1)
    await cursor.actor.tell(Delivered(first, 1, 200, 1.0))
    await until(lambda: cursor.actor.book.inflight == 1, timeout_s=5, poll_s=0.001,
                what="offset 0 finished")
    assert cursor.actor.timers_pending()  # offset 1 is still out: the tick stays
    cursor.clock.advance(IDLE_COMMIT_PERIOD_MS)
    await until(lambda: any(isinstance(m, CommitRequest) and m.offset == 1
                            for m in cursor.peer.seen), timeout_s=5, poll_s=0.001,
                what="the tick's commit of 1")
    assert cursor.actor.m_oldest.value > 0  # the tick's oldest pending age
    assert cursor.actor.timers_pending()  # and set again: records still wait
    await cursor.actor.tell(Delivered(second, 1, 200, 1.0))
    await until(lambda: not cursor.actor.timers_pending(), timeout_s=5, poll_s=0.001,
                what="the tick given up once nothing is pending")
    assert cursor.actor.m_oldest.value == 0
