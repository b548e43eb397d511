"""What the member's rooms (cursors.py, topics.py) see of the member: its books and the
few acts they perform through it. A protocol, so the rooms do not import the actor that
holds them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.path.fanout import CatchUp, Fanout, Feed
from actors.delivery.path.member.commits import CommitBook, Seat
from actors.delivery.path.member.positions import Incarnations
from actors.delivery.path.member.refusals import RefusalSeries
from actors.delivery.path.member.seats import Seats
from actors.delivery.path.member.writers import Writers
from actors.delivery.path.roster import Roster
from actors.shared.group_consumer import Wiring
from actors.shared.messages import FlowControl
from actors.shared.rebalance import RebalanceListener
from runtime.host.journal import EventType
from runtime.host.metrics import Value
from runtime.kafka.group_offsets import GroupOffsets
from runtime.kernel import Ref
from runtime.kernel.actor import ActorContext
from runtime.kernel.clock import Alarm

T = TypeVar("T")


class Member(Ref, Protocol):
    roster: Roster
    fanouts: dict[TopicPartition, Fanout]
    owned: set[TopicPartition]
    kafka: AIOKafkaConsumer | None
    offsets: GroupOffsets | None
    wiring: Wiring
    commits: CommitBook
    seats: Seats
    incarnations: Incarnations
    writers: Writers
    refusals: RefusalSeries
    listener: RebalanceListener
    context: ActorContext
    rebalances: int
    m_rebalances: Value
    m_generation: Value
    m_assigned: Value
    m_riders: Value
    m_awaiting: Value

    @property
    def path(self) -> str: ...

    @property
    def listening(self) -> bool: ...

    def feed(self, tp: TopicPartition, decision: Feed | CatchUp) -> None: ...

    def on_flow(self, flow: FlowControl) -> None: ...

    def highwater(self, tp: TopicPartition) -> int | None: ...

    def feed_records(self, tp: TopicPartition, feed: Feed, highwater: int | None) -> None: ...

    def tell_system(self, message: object) -> None: ...

    def schedule(self, deadline_ms: int, message: object) -> Alarm: ...

    def spawn(self, coro: Coroutine[object, None, T], name: str | None = None,
              ) -> asyncio.Task[T]: ...

    def journal(self, kind: EventType, tp: TopicPartition, *, subscription: str | None = None,
                offset: int | None = None, reason: str | None = None,
                actor: str | None = None) -> None: ...

    def generation(self) -> int: ...

    def cancel_read(self, seat: Seat) -> None: ...

    def flush(self) -> None: ...
