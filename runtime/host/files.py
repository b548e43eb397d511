"""Durable file writes: the journal's segments and the subscription files use these.

Blocking: call them from a worker thread (`asyncio.to_thread`), never on the event loop.

- `atomic_write(path, data)`: readers, and a crash at any point, see the old file or the
  new one, never a mix. The data goes to a temp file in the same directory, is fsynced,
  renamed over `path`, and then the directory is fsynced so the rename itself survives a
  power loss. The file is readable by its owner only (`FILE_MODE`, 0600): what we persist
  may hold secrets (issue 13).
- `fsync_directory(directory)`: make renames and unlinks in `directory` durable.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TEMP_SUFFIX = ".tmp"
FILE_MODE = 0o600


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace `path` with `data`, a file of `mode` (less the umask). On error the temp
    file is removed and `path` untouched.

    The temp file is a hidden sibling with a random part (`.<name>.<hex>.tmp`), so two
    writers never share one; a process killed mid-write leaves it behind, and nothing
    that globs for `*<suffix of path>` picks it up.
    """
    replace_synced(path, data, mode)
    fsync_directory(path.parent)


def replace_synced(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """`atomic_write` but for the fsync of the directory, which the caller owes (once
    for several files of one directory: `SubscriptionStore`'s batches)."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        _write_synced(temp, data, mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    # the mode is set at creation: the data is never readable by others, not even briefly
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with open(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
