"""The subscription registry's persistence: one JSON file per subscription.

Files are named after `<id>_<group.id>` (validated to letters, digits, `.`, `_`, `-`, so
no path tricks), written atomically (temp file, fsync, rename, fsync of the directory),
and read back at start. A file that does not decode is reported, moved aside as
`*.corrupt` so it is not retried forever, and skipped; it never stops startup.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from actors.delivery.subscription import SAFE_ID, Consumer, InvalidSubscription, decode_consumer

log = logging.getLogger(__name__)
SUFFIX = ".json"


class SubscriptionStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        if not SAFE_ID.match(key) or key in (".", ".."):
            raise InvalidSubscription("invalid subscription name", repr(key))
        return self.directory / f"{key}{SUFFIX}"

    def save(self, consumer: Consumer) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(consumer.key)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as file:
            file.write(msgspec.json.encode(consumer))
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        self._sync_directory()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
        self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load_all(self) -> tuple[list[Consumer], list[str]]:
        """Every stored subscription, plus a message per file that could not be read."""
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
