"""The subscription registry's persistence: one JSON file per subscription.

Files are named after `<id>_<group.id>` (validated to letters, digits, `.`, `_`, `-`, so
no path tricks), written atomically (`runtime.host.files.atomic_write`: temp file, fsync,
rename, fsync of the directory), and read back at start. A file that does not decode is
reported, moved aside as `*.corrupt` so it is not retried forever, and skipped; it never
stops startup.

The API is async: every file operation (write, delete, fsync, the load at start) runs in a
worker thread, because an fsync can take tens of milliseconds on a busy disk and the event
loop runs the delivery actors meanwhile. Saves may run at once, each with its own temp
file; for one subscription the last rename wins, so the DeliveryService orders its changes
with its lock.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec

from actors.delivery.errors import InvalidSubscription
from actors.delivery.subscription import SAFE_ID, Consumer, decode_consumer
from runtime.host.files import atomic_write, fsync_directory

log = logging.getLogger(__name__)
SUFFIX = ".json"


class SubscriptionStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    async def save(self, consumer: Consumer) -> None:
        path = self.path(consumer.key)
        await asyncio.to_thread(self._write, path, msgspec.json.encode(consumer))

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._unlink, self.path(key))

    async def load_all(self) -> tuple[list[Consumer], list[str]]:
        """Every stored subscription, plus a message per file that could not be read."""
        return await asyncio.to_thread(self._load_all)

    def path(self, key: str) -> Path:
        """Where subscription `key` is stored; `InvalidSubscription` for a name that is not
        safe as a file name (too long, path tricks)."""
        if not SAFE_ID.match(key) or key in (".", ".."):
            raise InvalidSubscription("invalid subscription name", repr(key))
        return self.directory / f"{key}{SUFFIX}"

    # -- blocking: run in a worker thread ----------------------------------------------
    def _write(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)

    def _unlink(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        fsync_directory(self.directory)

    def _load_all(self) -> tuple[list[Consumer], list[str]]:
        if not self.directory.is_dir():
            return [], []
        consumers: list[Consumer] = []
        problems: list[str] = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                consumers.append(decode_consumer(path.read_bytes()))
            except (InvalidSubscription, OSError) as exc:
                problems.append(f"{path.name}: {exc}")
                log.error("skipping corrupt subscription file %s: %s", path, exc)
                path.rename(path.with_name(path.name + ".corrupt"))
        return consumers, problems

    def __repr__(self) -> str:
        return f"<SubscriptionStore {self.directory}>"
