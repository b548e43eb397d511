"""The small decisions every partition actor makes the same way, delivery or delay: when to
pause and resume fetching, when a commit position is worth requesting, and who waits for
the final position of a drain. Pure and synchronous; the books own them, the actors
perform what they return.
"""

from __future__ import annotations

import asyncio

from actors.shared.errors import InvalidArgument


class PauseGate:
    """Pause fetching at `limit` held records, resume at `limit // 2` (hysteresis, so a
    partition near its limit does not flip between the two on every record)."""

    __slots__ = ("limit", "paused")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise InvalidArgument(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.paused = False

    def update(self, level: int) -> bool | None:
        """True: pause now; False: resume now; None: no change."""
        if not self.paused and level >= self.limit:
            self.paused = True
            return True
        if self.paused and level <= self.limit // 2:
            self.paused = False
            return False
        return None

    def open(self) -> None:
        """Forget a pause without asking to resume (a draining partition fetches nothing
        more; its next owner starts unpaused)."""
        self.paused = False

    def __repr__(self) -> str:
        return f"<PauseGate paused={self.paused} limit={self.limit}>"


class CommitPoint:
    """The last position requested for commit. A request is worth sending only when the
    position moved forward: the consumer commits the latest one anyway."""

    __slots__ = ("position",)

    def __init__(self, position: int | None = None) -> None:
        self.position = position

    def advance(self, position: int | None) -> int | None:
        """`position` if it is past the last one (it becomes the last one), else None."""
        if position is None or (self.position is not None and position <= self.position):
            return None
        self.position = position
        return position

    def __repr__(self) -> str:
        return f"<CommitPoint {self.position}>"


class DrainWaiters:
    """The drains of one partition actor. A revoke and a shutdown may both drain it: the
    first one starts the drain (its deadline counts), every one gets the final position."""

    __slots__ = ("_waiters", "deadline_ms")

    def __init__(self) -> None:
        self.deadline_ms: int | None = None
        self._waiters: list[asyncio.Future[int | None]] = []

    @property
    def draining(self) -> bool:
        return self.deadline_ms is not None

    @property
    def pending(self) -> bool:
        """Someone waits for the final position."""
        return bool(self._waiters)

    def join(self, deadline_ms: int, done: asyncio.Future[int | None]) -> bool:
        """Note a drain; True if it is the first (the caller starts draining)."""
        self._waiters.append(done)
        if self.deadline_ms is not None:
            return False
        self.deadline_ms = deadline_ms
        return True

    def resolve(self, position: int | None) -> None:
        """Every waiter so far gets `position`; later drains wait for the next resolve."""
        waiters, self._waiters = self._waiters, []
        for done in waiters:
            if not done.done():  # the consumer gave up waiting (its own deadline)
                done.set_result(position)

    def __repr__(self) -> str:
        return f"<DrainWaiters deadline={self.deadline_ms} waiting={len(self._waiters)}>"
