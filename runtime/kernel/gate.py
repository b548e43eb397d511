"""Gate: backpressure from a sink to the actors that feed it.

The domain's event sink (`ActorContext.emit`, the journal in a host) is synchronous: an
actor emits in the middle of its step and cannot wait there. When the sink falls behind
it closes the gate instead of forgetting events; a paced actor (`Actor.paced`, the
default) takes its next message only while the gate is open. Its mailbox then fills and
its senders wait, as behind any slow actor, so the slowdown reaches the data path's
source. The sink reopens the gate when it has caught up.

Not paced: supervisors (their exit notices restart whoever drains the sink) and the
sink's own flusher. One gate is shared by every actor of a system; an open gate costs
an attribute read per message.
"""

from __future__ import annotations

import asyncio


class Gate:
    """Open or closed; `wait()` returns once it is open. Closing and opening are the
    sink's, on the event loop's thread."""

    __slots__ = ("_opened", "closed_count", "open")

    def __init__(self) -> None:
        self.open = True
        self.closed_count = 0  # how often it closed: how often the sink fell behind
        self._opened: asyncio.Event | None = None  # made when the first actor waits

    def close(self) -> None:
        if self.open:
            self.open = False
            self.closed_count += 1
            if self._opened is not None:
                self._opened.clear()

    def reopen(self) -> None:
        if not self.open:
            self.open = True
            if self._opened is not None:
                self._opened.set()

    async def wait(self) -> None:
        while not self.open:
            if self._opened is None:
                self._opened = asyncio.Event()
            await self._opened.wait()

    def __repr__(self) -> str:
        return f"<Gate {'open' if self.open else 'closed'} closed {self.closed_count}x>"


OPEN = Gate()
"""The gate of actors nobody paces (never closed)."""
