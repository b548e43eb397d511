"""Joining: the control actor's room for subscribes under way (issue 32, item 12).

A subscribe asked one after another in the control actor's mailbox waited for every tree
started before it: a tree's actors start one after another, a loop cycle each, and at
10,000 subscribers of one topic the loop is shared with thousands of cursor starts (the
slowest 1% of subscribes waited 54-59 ms for the mailbox). Here the mailbox lists the
subscription and answers with a `Pending` future; the trees of the subscribes asked so
far are built on the mailbox's task (`Trees.prepare`: building records the seats) and
started together on an owned task (`Trees.launch`: the supervisors start them in
parallel), which tells the mailbox `TreesStarted`; the mailbox settles them and starts
the next batch with what was asked meanwhile. A stored subscription's file is written
while its tree starts (the fsync took as long as the start, one after the other); one
that did not start is forgotten and its file deleted before the answer (so a subscribe
of it asked next finds nothing; a crash in that moment restores it like any stored one,
and it starts or is retried). Subscriptions that ride the instance member and those with
a Kafka client of their own (pinned partitions: a client's start waits for the broker)
are separate lanes, so a rider never waits for a client. Every other change to a
subscription that is joining waits until its start settled and is then asked again, as
if it had queued behind it.

`JoinBook` holds the decisions (pure); `Joining` performs them on the actor's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from actors.delivery.control.messages import Pending, TreesStarted, asked_again
from actors.delivery.control.registry import SubscriptionRegistry
from actors.delivery.control.saves import Saves
from actors.delivery.control.trees import Plant, Starting, rides
from actors.delivery.document.subscription import Consumer, summary
from runtime.errors import ActorDeadError
from runtime.kernel.actor import Actor

log = logging.getLogger(__name__)
T = TypeVar("T")
W = TypeVar("W")
JOIN_BATCH: Final = 64
"""Subscribes started together at most (a batch's trees are built in one turn)."""


@dataclass(slots=True)
class JoinBook(Generic[T, W]):
    """Subscribes asked and not settled: `queued` wait for their lane's next batch,
    `starting` are in a batch under way (one per lane at most); `waiting` are the other
    changes asked meanwhile about a joining key, to ask again once it settled."""

    batch: int = JOIN_BATCH
    queued: dict[str, tuple[bool, T]] = field(default_factory=dict)
    starting: dict[str, tuple[bool, T]] = field(default_factory=dict)
    waiting: dict[str, list[W]] = field(default_factory=dict)

    def ask(self, key: str, lane: bool, join: T) -> None:
        """A subscribe of `key` (which is not joining) in `lane`."""
        assert not self.joining(key), key
        self.queued[key] = (lane, join)

    def joining(self, key: str) -> bool:
        return key in self.queued or key in self.starting

    def wait(self, key: str, waiter: W) -> None:
        """`waiter` is told when `key`'s start settled (`key` is joining)."""
        self.waiting.setdefault(key, []).append(waiter)

    def take(self) -> list[list[T]]:
        """The next batches to start: per lane with none under way, the first `batch`
        subscribes queued in it, in the order they were asked."""
        busy = {lane for lane, _ in self.starting.values()}
        taken: dict[bool, list[str]] = {}
        for key, (lane, _) in self.queued.items():
            keys = taken.setdefault(lane, [])
            if lane not in busy and len(keys) < self.batch:
                keys.append(key)
        batches = []
        for keys in taken.values():
            if keys:
                self.starting.update((key, self.queued.pop(key)) for key in keys)
                batches.append([self.starting[key][1] for key in keys])
        return batches

    def settled(self, keys: list[str]) -> tuple[list[T], list[W]]:
        """A batch's starts settled: its subscribes and the waiters of their keys."""
        joins = [self.starting.pop(key)[1] for key in keys if key in self.starting]
        waiters = [w for key in keys for w in self.waiting.pop(key, [])]
        return joins, waiters

    def abandon(self) -> tuple[list[T], list[W]]:
        """Everything still waiting (the actor stops before it is done)."""
        joins = [join for _, join in [*self.starting.values(), *self.queued.values()]]
        waiters = [w for ws in self.waiting.values() for w in ws]
        self.queued, self.starting, self.waiting = {}, {}, {}
        return joins, waiters


@dataclass(slots=True)
class Join:
    """A subscribe under way: its subscription, its file's write (None: not stored) and
    its answer."""

    consumer: Consumer
    saved: asyncio.Future[None] | None
    answer: asyncio.Future[None]


class Joining:
    def __init__(self, control: Actor, trees: Plant, registry: SubscriptionRegistry,
                 saves: Saves, programmed: dict[str, Consumer]) -> None:
        self.control, self.trees, self.registry = control, trees, registry
        self.saves = saves
        self.programmed = programmed  # the in-process subscriptions, by key
        self.book: JoinBook[Join, asyncio.Future[None]] = JoinBook()

    def ask(self, consumer: Consumer, saved: asyncio.Future[None] | None) -> Pending:
        """Start `consumer`'s tree (it is listed, and its file is being written when
        `saved`); the answer comes once it settled."""
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.book.ask(consumer.key, rides(consumer), Join(consumer, saved, answer))
        self._next()
        return Pending(answer)

    def joining(self, key: str) -> bool:
        return self.book.joining(key)

    def after(self, key: str, message: object) -> Pending:
        """`message` changes a subscription that is joining: asked again once it settled."""
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.book.wait(key, settled)
        return asked_again(self.control, settled, message)

    async def started(self, starting: Starting) -> None:
        """The mailbox's turn: a batch's trees started (or not); each subscribe settles,
        then the next batch of its lane starts."""
        failed = await self.trees.settle(starting)
        joins, waiters = self.book.settled([c.key for c in starting.consumers])
        for join in joins:
            await self._joined(join, failed.get(join.consumer.key))
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._next()

    async def _joined(self, join: Join, error: Exception | None) -> None:
        """A subscribe's tree started (the answer: once its file is written, when stored)
        or did not (it is forgotten, its file deleted, and the error is the answer)."""
        consumer, key = join.consumer, join.consumer.key
        if error is not None:
            self.trees.handlers.pop(key, None)
            self.registry.remove(key)
            if join.saved is not None:
                await self.saves.forget([key], self.registry)
            _settle(join.answer, error)
            return
        self.registry.started(key)
        if self.registry.in_process(key):
            self.programmed[key] = consumer
        log.info("subscribed %s: %s", key, summary(consumer))
        if join.saved is None:
            _settle(join.answer)
            return
        if join.saved.done():  # no callback's loop turn when it is known now
            _settle_saved(join.answer, join.saved)
        else:
            join.saved.add_done_callback(lambda saved: _settle_saved(join.answer, saved))

    def abandon(self) -> None:
        joins, waiters = self.book.abandon()
        for future in [join.answer for join in joins] + waiters:
            if not future.done():
                future.set_exception(ActorDeadError(f"{self.control.path} stopped"))

    def _next(self) -> None:
        for batch in self.book.take():
            starting = self.trees.prepare([join.consumer for join in batch])
            self.control.spawn(self._launch(starting), name=f"{self.control.path}:join")

    async def _launch(self, starting: Starting) -> None:
        with contextlib.suppress(ActorDeadError):
            await self.trees.launch(starting)
        await self.control.tell(TreesStarted(starting))


def _settle_saved(answer: asyncio.Future[None], saved: asyncio.Future[None]) -> None:
    """Answer a subscribe whose tree started once its file's write `saved` ended: a 2xx
    only when the file is durable (a cancelled write is not)."""
    if saved.cancelled():
        _settle(answer, ActorDeadError("the subscription's file was not written"))
    else:
        _settle(answer, saved.exception())


def _settle(answer: asyncio.Future[None], error: BaseException | None = None) -> None:
    """Answer a subscribe (None, or its error) unless its asker went."""
    if answer.done():
        return
    if error is None:
        answer.set_result(None)
    else:
        answer.set_exception(error)
