"""The subscription registry's persistence: one JSON file per subscription.

Files are named after the subscription's key (`<id>_<group.id>` with `_` of `group.id`
as `%5F`: actors/delivery/document/identity.py), `.json`. Both parts are checked with
full-string matches (`SAFE_ID`: letters, digits, `.`, `_`, `-`, starting with a letter or
digit, at most 200 together), so a name can neither leave the directory nor end in a
newline, and `decode_consumer` refuses what could not be stored, before anything starts.
A key longer than `MAX_STEM` (the encoding makes keys up to three times longer) is cut
and completed with a hash of the whole key: file names stay under the file system's 255
bytes, temp names included. The content is
the Queue-Over-Http document (`document(consumer, redact=False)`), secrets included, so
the directory is made 0700 and every file is written 0600 (issue 13).

Writes are atomic (`runtime.host.files.atomic_write`: temp file, fsync, rename, fsync of
the directory). At start every file is read back: one that does not decode is reported,
moved aside as `*.corrupt` so it is not retried forever, and skipped, never stopping
startup; one written by an earlier version (the flat `group.id`, 0644) is rewritten in
the current form; one whose name is not its subscription's is renamed (the joined name of
a version before issue 25 for a `group.id` with a `_`, say).

The API is async: every file operation runs in a worker thread, because an fsync can take
tens of milliseconds on a busy disk and the event loop runs the delivery actors meanwhile.
Saves asked while others are written go together, in one batch (a group commit): the
directory is prepared and fsynced once for all of them, each file still written to its
own temp file, fsynced and renamed; each save is answered once its batch is durable,
with its own error if its file could not be. 10,000 subscribes, one job and two fsyncs
each, held the event loop a tenth of the time in thread hand-offs. One writer (a job of
the loop's thread pool) takes batch after batch until nothing is queued
(actors/delivery/document/writes.py): the next batch never waits for the loop to run the
last one's completion, and a batch's answers reach the loop in one callback (issue 32:
in the rebalance window at 10,000 subscribers a loop turn is long, and each hop between
the thread and an answer was one).
For one subscription the last rename wins, so only the control actor writes here: its
mailbox orders the changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import stat
import threading
from pathlib import Path
from typing import Final

import msgspec

from actors.delivery.document.identity import legacy_name, pair_of_key
from actors.delivery.document.subscription import SAFE_ID, Consumer, decode_consumer, document
from actors.delivery.document.writes import WriteQueue
from actors.delivery.errors import InvalidSubscription
from runtime.host.files import FILE_MODE, atomic_write, fsync_directory, replace_all_synced

log = logging.getLogger(__name__)
SUFFIX: Final = ".json"
DIRECTORY_MODE: Final = 0o700
MAX_STEM: Final = 200
"""The longest file name stem: every key of a version before issue 25 fits."""


def encode(consumer: Consumer) -> bytes:
    """A subscription file's content."""
    return msgspec.json.encode(document(consumer, redact=False))


def file_stem(key: str) -> str:
    """`key` as a file name without suffix: itself, or when longer than `MAX_STEM` its
    start and a hash (`~` is never in a key, so no key is such a stem)."""
    try:
        pair = pair_of_key(key)
    except ValueError:
        raise InvalidSubscription("invalid subscription name", repr(key)) from None
    if not all(SAFE_ID.fullmatch(name) for name in (*pair, legacy_name(*pair))):
        raise InvalidSubscription("invalid subscription name", repr(key))
    if len(key) <= MAX_STEM:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:40]
    return f"{key[:MAX_STEM - len(digest) - 1]}~{digest}"


Change = tuple["bytes | None", "asyncio.Future[None]"]
"""A file's new content (None: delete it) and who waits for it."""


class SubscriptionStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        # one writer at a time: four side by side made every fsync slower (1,000
        # subscribes 8 at a time: p50 16 ms against 9; bench/RESULTS.md)
        self._writes: WriteQueue[Change] = WriteQueue()
        self._lock = threading.Lock()  # guards `_writes`: the loop asks, the writer takes

    @property
    def batches(self) -> int:
        """Batches written (each one group commit)."""
        return self._writes.batches

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        """Start writing `consumer`'s file; the future is done once it is durable (or
        failed with the error of its write)."""
        return self._queue([(self.path(consumer.key), encode(consumer))])[0]

    async def delete(self, *keys: str) -> None:
        """Remove these subscriptions' files (in one batch when asked together); the
        first failure is raised once all are done."""
        paths = [self.path(key) for key in keys]  # a bad name refuses before any
        outcomes = self._queue([(path, None) for path in paths])
        errors = [error for error in await asyncio.gather(*outcomes, return_exceptions=True)
                  if error is not None]
        if errors:
            raise errors[0]

    def _queue(self, changes: list[tuple[Path, bytes | None]]) -> list[asyncio.Future[None]]:
        """Queue changes asked together, all before the writer may take any (started
        after the first, it took that one alone now and then under load); the writer is
        started unless one is under way (it takes what is queued until nothing is: no
        loop turn between its batches)."""
        loop = asyncio.get_running_loop()
        dones: list[asyncio.Future[None]] = [loop.create_future() for _ in changes]
        start = False
        with self._lock:
            for (path, data), done in zip(changes, dones, strict=True):
                start = self._writes.ask(path, (data, done)) or start
        if start:
            writer = loop.run_in_executor(None, self._write_until_none, loop)
            writer.add_done_callback(self._writer_ended)
        return dones

    def _writer_ended(self, writer: asyncio.Future[None]) -> None:
        """On the loop: a writer that failed outside its batches (their write errors go to
        their savers) leaves no save waiting: what it left queued fails with its error."""
        error = None if writer.cancelled() else writer.exception()
        if error is None:
            return
        log.error("subscription store %s: the writer failed", self.directory, exc_info=error)
        with self._lock:
            stranded = self._writes.abandon()
        _answer([done for _, (_, done) in stranded], [error] * len(stranded))

    # -- the writer: a worker thread ------------------------------------------------------
    def _write_until_none(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write batch after batch until none is queued; each batch is answered on the
        loop once written (one loop callback sets its futures: the answer waits for one
        loop turn, the next batch for none)."""
        while True:
            with self._lock:
                batch = self._writes.take()
            if not batch:
                return
            files = [(path, data) for path, (data, _) in batch]
            try:
                errors: list[BaseException | None] = list(self._write_all(files))
            except Exception as exc:  # its savers get it, and the writer goes on
                errors = [exc] * len(batch)
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(_answer, [done for _, (_, done) in batch], errors)

    async def load_all(self) -> tuple[list[Consumer], list[str]]:
        """Every stored subscription, plus a message per file that could not be read."""
        return await asyncio.to_thread(self._load_all)

    def path(self, key: str) -> Path:
        """Where subscription `key` is stored; `InvalidSubscription` for a key no valid
        pair has (too long, path tricks)."""
        return self.directory / f"{file_stem(key)}{SUFFIX}"

    # -- blocking: run in a worker thread ----------------------------------------------
    def _private_directory(self) -> None:
        """Create the directory 0700, or make it so (preflight may have made it 0755)."""
        with contextlib.suppress(FileNotFoundError):  # one system call when it is so
            found = os.stat(self.directory)  # (each call is a wait for the GIL in a busy loop)
            if stat.S_ISDIR(found.st_mode) and stat.S_IMODE(found.st_mode) == DIRECTORY_MODE:
                return
        self.directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        if stat.S_IMODE(self.directory.stat().st_mode) != DIRECTORY_MODE:
            os.chmod(self.directory, DIRECTORY_MODE)

    def _write_all(self, files: list[tuple[Path, bytes | None]]) -> list[OSError | None]:
        """Each file written and renamed (or removed), then the directory fsynced once;
        per file, its error (every file fails when the directory cannot be prepared or
        synced)."""
        self._private_directory()
        written = iter(replace_all_synced([(p, d) for p, d in files if d is not None]))
        errors = [next(written) if data is not None else _unlink(path)
                  for path, data in files]
        if any(error is None for error in errors):
            fsync_directory(self.directory)
        return errors

    def _load_all(self) -> tuple[list[Consumer], list[str]]:
        if not self.directory.is_dir():
            return [], []
        self._private_directory()
        consumers: list[Consumer] = []
        problems: list[str] = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                consumers.append(self._load(path))
            except (InvalidSubscription, OSError) as exc:
                problems.append(f"{path.name}: {exc}")
                log.error("skipping corrupt subscription file %s: %s", path, exc)
                path.rename(path.with_name(path.name + ".corrupt"))
        return consumers, problems

    def _load(self, path: Path) -> Consumer:
        """The subscription in `path`, its file brought up to date (name, form, mode)."""
        raw = path.read_bytes()
        consumer = decode_consumer(raw)
        target = self.path(consumer.key)
        if target != path:
            if target.exists():
                raise InvalidSubscription("a second file for subscription", consumer.key)
            log.warning("subscription file %s renamed to %s", path.name, target.name)
            atomic_write(target, encode(consumer))
            path.unlink(missing_ok=True)
            fsync_directory(self.directory)
        elif raw != encode(consumer) or stat.S_IMODE(path.stat().st_mode) != FILE_MODE:
            atomic_write(path, encode(consumer))  # the current form, 0600
        return consumer

    def __repr__(self) -> str:
        return f"<SubscriptionStore {self.directory}>"


def _answer(saves: list[asyncio.Future[None]], errors: list[BaseException | None]) -> None:
    """On the loop: each save of a written batch answered, with its own error if any."""
    for done, error in zip(saves, errors, strict=True):
        if done.done():
            continue  # its asker was cancelled: the file is written (or not) anyway
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


def _unlink(path: Path) -> OSError | None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        return exc
    return None
