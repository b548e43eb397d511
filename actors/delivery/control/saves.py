"""Saves: the subscribes' files being written, off the control actor's mailbox.

An fsync each: 10,000 one after another took 30 s, so a subscribe is answered once its
file is written while the mailbox goes on. A later write or delete of that file waits
for it (`written`); a failed write is told back to the control actor as `Unsaved`, which
stops and forgets the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Final

from actors.delivery.control.messages import Unsaved
from actors.delivery.document.subscription import Consumer
from runtime.kernel.actor import Actor

SAVES_TRACKED: Final = 256
"""Writes remembered before the finished ones are dropped."""


class Saves:
    """Owned by the control actor: its writes run as answers it spawned."""

    def __init__(self, control: Actor,
                 save: Callable[[Consumer], Coroutine[object, None, None]]) -> None:
        self.control, self._save = control, save
        self.saving: dict[str, asyncio.Future[None]] = {}

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        """Start writing `consumer`'s file; done once written."""
        if len(self.saving) >= SAVES_TRACKED:
            self.saving = {k: f for k, f in self.saving.items() if not f.done()}
        key, control = consumer.key, self.control
        saved = self.saving[key] = control.spawn_answer(self._save(consumer),
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
