"""SideTopicActor: the base of the actors that write a given-up or moved-aside record to a
side topic, then tell the partition actor that asked (issue 23).

Two write that way: the dead-letter actor (deadletter.py: `WriteDeadLetter` to the
dead-letter topic, answered `DeadLettered`) and the retry-topic actor (retrytopic.py:
`MoveAside` through the delay queue to the retry topic, answered `MovedAside`). What they
share lives here:

- once per record: the `DeadLetterLedger` answers a record asked for again by a restarted
  partition actor (whose predecessor's write is done or still running) with the first
  write instead of a second one;
- the answer goes only after the broker acknowledged the write, so the partition's commit
  position never passes a record that is neither delivered nor safely written aside;
- a write that fails is retried with a capped backoff, never dropped, logged and journaled
  (`dead_letter_failed`) each time: meanwhile the partition's commit position waits at
  the record (the stall watchdog names it in `/readyz`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from actors.shared.deadletter import DeadLetterLedger
from actors.shared.errors import UnexpectedMessage
from actors.shared.messages import Record
from runtime.host.journal import Event
from runtime.kernel import Actor, Ref

log = logging.getLogger(__name__)
RETRY_FIRST_MS = 100
RETRY_CAP_MS = 5000


class SideWrite(Protocol):
    """A partition's request: write `record` aside, then answer `reply_to`."""

    @property
    def record(self) -> Record: ...

    @property
    def epoch(self) -> int: ...

    @property
    def reply_to(self) -> Ref: ...


W = TypeVar("W", bound=SideWrite)


class SideTopicActor(Actor, Generic[W]):
    """Subclasses set `request` (the message type taken) and `topic` (where records go),
    and implement `write` (the broker acknowledged when it returns) and `answer`."""

    mailbox_capacity = 1024
    request: type[W]

    def __init__(self, name: str, topic: str, subscription: str | None) -> None:
        super().__init__(name)
        self.topic = topic
        self.subscription = subscription
        self.ledger = DeadLetterLedger()

    async def write(self, message: W) -> None:
        raise NotImplementedError

    def answer(self, message: W) -> object:
        """What the partition actor is told once `message`'s record is written."""
        raise NotImplementedError

    async def handle(self, message: object) -> None:
        if not isinstance(message, self.request):
            raise UnexpectedMessage(self.path, message)
        earlier = self.ledger.find(message.record)
        if earlier is None:
            write = self.spawn(self.write(message), name=f"{self.path}:write")
            earlier = self.ledger.track(message.record, write)
        # Told once the (first) write is done, whichever incarnation of the partition asks:
        # a restarted partition actor gets its answer from its predecessor's write.
        earlier.add_done_callback(lambda entry: self._answer(entry, message))

    def _answer(self, entry: asyncio.Future[None], message: W) -> None:
        """The write is done: tell the partition actor that asked (a write that did not
        finish was cancelled with this actor, and nobody is told: the record is given up
        or moved aside again)."""
        if not entry.cancelled() and entry.exception() is None:
            message.reply_to.tell_system(self.answer(message))

    async def until_written(self, record: Record, send: Callable[[], Awaitable[object]],
                            final: tuple[type[BaseException], ...] = ()) -> None:
        """Call `send` until it passes. The errors in `final` belong to the record (no
        retry can help): they go to the caller; every other one is logged, journaled and
        retried with a capped backoff, never dropped."""
        delay_ms = RETRY_FIRST_MS
        while True:
            try:
                await send()
                return
            except final:
                raise
            except Exception as exc:  # never dropped: retried, loudly, until it is written
                log.error("%s: writing %s-%d@%d to %s failed (%r); retrying in %.1fs",
                          self.path, record.topic, record.partition, record.offset,
                          self.topic, exc, delay_ms / 1000)
                self.journal_failure(record, repr(exc))
                await self.context.clock.sleep_ms(delay_ms)
                delay_ms = min(delay_ms * 2, RETRY_CAP_MS)

    def journal_failure(self, record: Record, reason: str) -> None:
        self.context.emit(Event(
            type="dead_letter_failed", ts_ms=self.context.clock.wall_ms(),
            subscription=self.subscription, topic=record.topic, partition=record.partition,
            offset=record.offset, attempt=record.attempt, reason=reason))
