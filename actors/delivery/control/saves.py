"""Saves: the control actor's room for the subscriptions' files.

An fsync each: 10,000 one after another took 30 s, so a subscribe is answered once its
file is written while the mailbox goes on. A later write or delete of that file waits
for it (`written`); a failed write is told back to the control actor as `Unsaved`, which
stops and forgets the subscription. Unsubscribes forgotten together delete their files
together, and the paused/disabled flags are stored only when they changed (every
unsubscribe rewrote both: three fsynced writes in the mailbox each).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final, Protocol

from actors.delivery.control.messages import Unsaved
from actors.delivery.document.subscription import Consumer
from runtime.kernel.actor import Actor

SAVES_TRACKED: Final = 256
"""Writes remembered before the finished ones are dropped."""


class Files(Protocol):
    """Where the subscriptions are kept (`SubscriptionSource`'s file part)."""

    def save(self, consumer: Consumer) -> asyncio.Future[None]: ...

    async def delete(self, *keys: str) -> None: ...

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None: ...


class Flags(Protocol):
    def paused_keys(self) -> list[str]: ...

    def disabled_reasons(self) -> dict[str, str]: ...


class Saves:
    """Owned by the control actor: its writes are the store's futures."""

    def __init__(self, control: Actor, files: Files) -> None:
        self.control, self.files = control, files
        self.saving: dict[str, asyncio.Future[None]] = {}
        self._flags_kept: tuple[list[str], dict[str, str]] | None = None  # as stored

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        """Start writing `consumer`'s file; done once written. The store's own future,
        no task of ours between: each was a loop turn before the subscribe's answer, and
        at 10,000 subscribers a loop turn is long (issue 32). The write goes on if this
        actor stops (it answers nobody then: `Joining.abandon` fails the subscribes)."""
        if len(self.saving) >= SAVES_TRACKED:
            self.saving = {k: f for k, f in self.saving.items() if not f.done()}
        key, control = consumer.key, self.control
        try:
            saved = self.files.save(consumer)
        except Exception as exc:  # refused before any write: the same path as a failed one
            saved = asyncio.get_running_loop().create_future()
            saved.set_exception(exc)
        self.saving[key] = saved

        def failed(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is not None:
                control.tell_system(Unsaved(key))

        saved.add_done_callback(failed)
        return saved

    async def written(self, key: str) -> None:
        """Until the write of `key`'s file started earlier, if any, ended (either way)."""
        saving = self.saving.pop(key, None)
        if saving is not None:
            with contextlib.suppress(Exception):
                await saving

    async def forget(self, keys: list[str], flags: Flags) -> None:
        """Delete these subscriptions' files together (once writes under way ended), then
        store the flags if they changed."""
        for key in keys:
            await self.written(key)
        if keys:
            await self.files.delete(*keys)
            await self.keep_flags(flags)

    async def keep_flags(self, flags: Flags) -> None:
        """Store the paused and disabled subscriptions, when they changed since."""
        kept = (flags.paused_keys(), flags.disabled_reasons())
        if kept != self._flags_kept:
            await self.files.keep_flags(*kept)
            self._flags_kept = kept
