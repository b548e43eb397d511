"""Leaving: the control actor's room for unsubscribes under way (issue 32, item 12).

A tree's stop drains and commits (about a second); asked one after another in the control
actor's mailbox, 50 unsubscribes under load took 40 s. Here an unsubscribe is answered
with a `Pending` future: the mailbox marks the subscription `stopping` and takes its seat
off its member's record at once, one owned task stops the trees of every unsubscribe
asked so far together (the `delivery` supervisor stops them in parallel) and tells the
mailbox `TreesStopped`, which forgets them and answers. What is asked meanwhile starts a
batch of its own at once, beside the one stopping (waiting for it made 50 unsubscribes
two rounds of drains: 6 s where one took 3). Any other change to a subscription that is
leaving waits for the leave and is then asked again, as if it had queued behind it.

`LeaveBook` holds the decisions (pure); `Leaving` performs them on the actor's task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from actors.delivery.control.messages import Pending, TreesStopped, asked_again
from actors.delivery.document.subscription import Consumer
from actors.delivery.errors import DeliveryError
from runtime.errors import ActorDeadError
from runtime.kernel.actor import Actor

T = TypeVar("T")


@dataclass(slots=True)
class LeaveBook(Generic[T]):
    """Unsubscribes asked and the answers waiting for them: `queued` wait for the next
    batch, `stopping` are those of every batch whose trees stop now (each key in one)."""

    queued: dict[str, list[T]] = field(default_factory=dict)
    stopping: dict[str, list[T]] = field(default_factory=dict)

    def ask(self, key: str, answer: T) -> bool:
        """Another answer waits for `key`'s leave; True when it is a new leave."""
        for book in (self.stopping, self.queued):
            if key in book:
                book[key].append(answer)
                return False
        self.queued[key] = [answer]
        return True

    def leaving(self, key: str) -> bool:
        return key in self.stopping or key in self.queued

    def take(self) -> list[str]:
        """The next batch to stop: every leave queued (none stops twice at once)."""
        self.stopping.update(self.queued)
        batch, self.queued = list(self.queued), {}
        return batch

    def stopped(self, keys: tuple[str, ...]) -> dict[str, list[T]]:
        """A batch stopped: its leaves and their answers (the book forgets them)."""
        return {key: self.stopping.pop(key) for key in keys if key in self.stopping}

    def abandon(self) -> list[T]:
        """Every answer still waiting (the actor stops before they are done)."""
        batches = [*self.stopping.values(), *self.queued.values()]
        self.stopping, self.queued = {}, {}
        return [answer for batch in batches for answer in batch]


class Leaving:
    def __init__(self, control: Actor, stop: Callable[[list[str]], Awaitable[None]],
                 release: Callable[[Consumer], Awaitable[None]],
                 forget: Callable[..., Awaitable[None]],
                 known: Callable[[str], Consumer]) -> None:
        self.control = control
        self._stop = stop  # stops these trees, in parallel (a task, not the mailbox)
        self._release = release  # a subscription's member seat, once its tree stopped
        self._forget = forget  # the mailbox's end of unsubscribes: forgets them together
        self._known = known  # the subscription of a key (`DeliveryError`: none)
        self.book: LeaveBook[asyncio.Future[Consumer]] = LeaveBook()

    def ask(self, key: str, begin: Callable[[], None]) -> Pending:
        """Unsubscribe `key` (`begin` marks it stopping, on a new leave only)."""
        answer: asyncio.Future[Consumer] = asyncio.get_running_loop().create_future()
        if self.book.ask(key, answer):
            begin()
        self._next()
        return Pending(answer)

    def leaving(self, key: str) -> bool:
        return self.book.leaving(key)

    def after(self, key: str, message: object) -> Pending:
        """`message` changes a subscription that is leaving: asked again once it left."""
        left: asyncio.Future[Consumer] = asyncio.get_running_loop().create_future()
        self.book.ask(key, left)
        return asked_again(self.control, left, message)

    async def stopped(self, keys: tuple[str, ...]) -> None:
        """The mailbox's turn: a batch's trees stopped; each is forgotten and answered
        (a refusal or failure goes to its askers). An unexpected failure crashes the
        actor once every answer is settled."""
        unexpected: Exception | None = None
        waiting = self.book.stopped(keys)
        for key, outcome in (await self._forget_all(tuple(waiting))).items():
            for answer in waiting[key]:
                if isinstance(outcome, Exception):
                    _settle(answer, outcome)
                elif not answer.done():
                    answer.set_result(outcome)
            if isinstance(outcome, Exception) and not isinstance(outcome, DeliveryError):
                unexpected = unexpected or outcome
        if unexpected is not None:
            self.abandon()
            raise unexpected

    async def _forget_all(self, keys: tuple[str, ...]) -> dict[str, Consumer | Exception]:
        """Each subscription's member released, then all forgotten together (one batch of
        file deletes); per key, what it was or why it could not be forgotten."""
        outcome: dict[str, Consumer | Exception] = {}
        left: list[Consumer] = []
        for key in keys:
            try:
                consumer = self._known(key)
                await self._release(consumer)
            except Exception as exc:
                outcome[key] = exc
            else:
                left.append(consumer)
        try:
            await self._forget(*left)
        except Exception as exc:
            outcome.update((consumer.key, exc) for consumer in left)
        else:
            outcome.update((consumer.key, consumer) for consumer in left)
        return outcome

    def abandon(self) -> None:
        for answer in self.book.abandon():
            _settle(answer, ActorDeadError(f"{self.control.path} stopped"))

    def _next(self) -> None:
        keys = self.book.take()
        if keys:
            self.control.spawn(self._stop_batch(keys), name=f"{self.control.path}:leave")

    async def _stop_batch(self, keys: list[str]) -> None:
        with contextlib.suppress(ActorDeadError):  # the delivery supervisor restarts:
            await self._stop(keys)  # their trees went with it
        await self.control.tell(TreesStopped(tuple(keys)))


def _settle(answer: asyncio.Future[T], exc: BaseException) -> None:
    if not answer.done():
        answer.set_exception(exc)
