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
from collections.abc import Coroutine
from typing import Final, Protocol

from actors.delivery.control.messages import Unsaved
from actors.delivery.document.subscription import Consumer
from runtime.kernel.actor import Actor

SAVES_TRACKED: Final = 256
"""Writes remembered before the finished ones are dropped."""


class Files(Protocol):
    """Where the subscriptions are kept (`SubscriptionSource`'s file part)."""

    def save(self, consumer: Consumer) -> Coroutine[object, None, None]: ...

    async def delete(self, *keys: str) -> None: ...

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None: ...


class Flags(Protocol):
    def paused_keys(self) -> list[str]: ...

    def disabled_reasons(self) -> dict[str, str]: ...


class Saves:
    """Owned by the control actor: its writes run as answers it spawned."""

    def __init__(self, control: Actor, files: Files) -> None:
        self.control, self.files = control, files
        self.saving: dict[str, asyncio.Future[None]] = {}
        self._flags_kept: tuple[list[str], dict[str, str]] | None = None  # as stored

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        """Start writing `consumer`'s file; done once written."""
        if len(self.saving) >= SAVES_TRACKED:
            self.saving = {k: f for k, f in self.saving.items() if not f.done()}
        key, control = consumer.key, self.control
        saved = self.saving[key] = control.spawn_answer(self.files.save(consumer),
                                                        name=f"{control.path}:save")

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
