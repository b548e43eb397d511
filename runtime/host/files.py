"""Durable file writes: the journal's segments and the subscription files use these.

Blocking: call them from a worker thread (`asyncio.to_thread`), never on the event loop.

- `atomic_write(path, data)`: readers, and a crash at any point, see the old file or the
  new one, never a mix. The data goes to a temp file in the same directory, is fsynced,
  renamed over `path`, and then the directory is fsynced so the rename itself survives a
  power loss. The file is readable by its owner only (`FILE_MODE`, 0600): what we persist
  may hold secrets (issue 13).
- `replace_all_synced(files)`: `atomic_write` of several files of one directory, their
  fsyncs side by side, but for the directory's fsync (the caller's, once for them all).
- `fsync_directory(directory)`: make renames and unlinks in `directory` durable.
"""

from __future__ import annotations

import os
import random
import secrets
from concurrent.futures import ThreadPoolExecutor
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


def replace_all_synced(files: list[tuple[Path, bytes]],
                       mode: int = FILE_MODE) -> list[OSError | None]:
    """`replace_synced` for several files of one directory, their fsyncs side by side
    (the file system commits them together: one batch of eight took about three times one
    file's fsync where eight in a row took eight); per file, its error. The directory's
    fsync is still the caller's."""
    written: list[tuple[Path, Path, int] | OSError] = [_open_written(p, d, mode)
                                                        for p, d in files]
    opened = [entry for entry in written if not isinstance(entry, OSError)]
    synced = list(_SYNCS.map(_sync_and_close, [fd for _, _, fd in opened]))
    outcome = dict(zip([temp for _, temp, _ in opened], synced, strict=True))
    errors: list[OSError | None] = []
    for entry in written:
        if isinstance(entry, OSError):
            errors.append(entry)
            continue
        path, temp, _ = entry
        errors.append(_rename(temp, path) if outcome[temp] is None else outcome[temp])
        if errors[-1] is not None:
            temp.unlink(missing_ok=True)
    return errors


_SYNCS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fsync")


def _open_written(path: Path, data: bytes, mode: int) -> tuple[Path, Path, int] | OSError:
    # the random part without a system call (`secrets` asks the kernel: one more wait for
    # the GIL per file in a busy process); `O_EXCL` refuses a name taken all the same
    temp = path.with_name(f".{path.name}.{random.getrandbits(32):08x}{TEMP_SUFFIX}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except OSError as exc:
        return exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        os.close(fd)
        temp.unlink(missing_ok=True)
        return exc
    return path, temp, fd


def _sync_and_close(fd: int) -> OSError | None:
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    return None


def _rename(temp: Path, path: Path) -> OSError | None:
    try:
        os.replace(temp, path)
    except OSError as exc:
        return exc
    return None


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    # the mode is set at creation: the data is never readable by others, not even briefly
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with open(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
