"""Seats: which cursor incarnation is current for each (subscription, partition), and the
retirements under way (issue 32, items 9 and 10). Pure logic.

An epoch is allocated when a cursor is built (`next_epoch`, before it starts: a restart by
its supervisor takes a new one without touching the member's state); the cursor's
`Rewind` tells the member, and a newer epoch replaces an older one. Only the current
epoch's commits, flow requests and positions count.

A retirement is one leave, revoke or stop: its cursors drain (`Drain`), their final
positions are committed in one round, then they stop and whoever waits is answered.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from actors.delivery.path.member.commits import Seat
from actors.delivery.path.roster import Rider

_EPOCHS = itertools.count(1)


def next_epoch() -> int:
    """A new cursor's epoch: unique in this process, larger than every earlier one."""
    return next(_EPOCHS)


@dataclass(slots=True)
class Retirement:
    number: int
    riders: dict[Seat, Rider]
    """The seats retired, with their riders (which may have left the roster already)."""
    epochs: dict[Seat, int]
    done: Callable[[], None]
    """Called once the cursors are stopped."""
    stage: str = "draining"  # -> committing -> stopping
    keep: bool = False
    """Only drain and commit: the cursors stay (a rebalance under way, issue 32 item 6)."""


@dataclass(slots=True)
class Seats:
    epochs: dict[Seat, int] = field(default_factory=dict)
    retiring: dict[int, Retirement] = field(default_factory=dict)
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def started(self, seat: Seat, epoch: int) -> bool:
        """A cursor incarnation said it runs; True if it is the newest of its seat."""
        if epoch <= self.epochs.get(seat, 0):
            return False
        self.epochs[seat] = epoch
        return True

    def current(self, seat: Seat, epoch: int) -> bool:
        return self.epochs.get(seat) == epoch

    def end(self, seat: Seat, epoch: int | None = None) -> None:
        """The seat's cursor is gone (only that incarnation, when `epoch` is given)."""
        if epoch is None or self.epochs.get(seat) == epoch:
            self.epochs.pop(seat, None)

    def retire(self, riders: dict[Seat, Rider], done: Callable[[], None], *,
               keep: bool = False) -> Retirement:
        epochs = {seat: e for seat in riders if (e := self.epochs.get(seat)) is not None}
        retirement = Retirement(next(self._numbers), riders, epochs, done, keep=keep)
        self.retiring[retirement.number] = retirement
        return retirement

    def retired(self, number: int) -> Retirement | None:
        return self.retiring.pop(number, None)


def resolve(future: asyncio.Future[None]) -> Callable[[], None]:
    """A retirement's `done` that answers a waiting future."""

    def done() -> None:
        if not future.done():
            future.set_result(None)

    return done
