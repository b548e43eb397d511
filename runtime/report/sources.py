"""Which journal files a report reads: one or several journal directories, read as one.

Each runtime instance writes its own journal directory (runtime/host/journal.py); a report
over several instances lists each directory and reads the union of their segments. Segment
names carry a random writer id, so files of different directories never clash, and every
event names its subscription, topic, partition and offset, so the union is the same journal
a single instance would have written.

Every event is tagged with the directory it came from (`instance`, see
runtime/report/transforms.py); the audit keys records by subscription, topic, partition
and offset only, so a record fetched by one instance and delivered by another is
delivered, and a second successful delivery by any instance is a duplicate. A quoted
pattern (`'journals/*'`) names every directory it matches.

Per directory: closed segments (`segment-*.jsonl`), plus crash leftovers (`*.jsonl.open`
that no live writer holds), read up to their last complete line; segments a live writer
holds are skipped (they would show its in-flight records as lost). The directories are
listed on the driver, so with a cluster master they must be on storage every executor
mounts at the same path.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import UsageError
from runtime.host.journal import closed_segments, is_held_by_writer, open_segments


@dataclass(frozen=True, slots=True)
class JournalFiles:
    directories: tuple[Path, ...]
    closed: list[Path]
    recovered_tails: list[Path]  # crash leftovers, read up to their last complete line
    skipped_live: list[Path]  # held by a running writer

    @property
    def directory(self) -> Path:
        """The first directory (the only one, for a single-instance journal)."""
        return self.directories[0]

    @property
    def label(self) -> str:
        """How the summary names the journal: the directory, or the directories."""
        return ", ".join(str(d) for d in self.directories)

    @property
    def paths(self) -> list[Path]:
        return self.closed + self.recovered_tails

    def skipped(self) -> list[dict[str, Any]]:
        """The segments a live writer held: `path` and `bytes` (None if it closed since)."""
        return [{"path": str(path), "bytes": _size(path)} for path in self.skipped_live]

    def counts(self) -> dict[str, int]:
        return {"closed": len(self.closed), "recovered_tails": len(self.recovered_tails),
                "skipped_live": len(self.skipped_live)}


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:  # renamed when its writer closed it meanwhile
        return None


GLOB_CHARACTERS = frozenset("*?[")


def expand_globs(given: Sequence[Path]) -> tuple[Path, ...]:
    """A path that does not exist and holds `*`, `?` or `[` is a pattern (quoted, so the
    shell left it): its matching directories, sorted; UsageError if none match."""
    dirs: list[Path] = []
    for path in given:
        if path.exists() or not GLOB_CHARACTERS & set(str(path)):
            dirs.append(path)
            continue
        matches = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_dir())
        if not matches:
            raise UsageError(f"no journal directory matches {path}")
        dirs += matches
    return tuple(dirs)


def journal_directories(journal_dirs: Path | Sequence[Path]) -> tuple[Path, ...]:
    """The directories (or patterns, `expand_globs`) as absolute paths, each once;
    UsageError for a missing one."""
    given = (journal_dirs,) if isinstance(journal_dirs, Path) else tuple(journal_dirs)
    dirs = expand_globs(given)
    if not dirs:
        raise UsageError("name at least one journal directory")
    resolved = tuple(d.resolve() for d in dirs)
    for name, path in zip(dirs, resolved, strict=True):
        if not path.is_dir():
            raise UsageError(f"journal directory {name} does not exist")
    if len(set(resolved)) != len(resolved):
        raise UsageError("a journal directory is named twice")
    return resolved


def find_journal_files(journal_dirs: Path | Sequence[Path]) -> JournalFiles:
    """List the segments to read; UsageError for a missing directory or no segments."""
    dirs = journal_directories(journal_dirs)
    closed: list[Path] = []
    tails: list[Path] = []
    live: list[Path] = []
    for directory in dirs:
        closed += closed_segments(directory)
        for leftover in open_segments(directory):
            (live if is_held_by_writer(leftover) else tails).append(leftover)
    files = JournalFiles(dirs, closed, tails, live)
    if not files.paths:
        where = "journal directory" if len(dirs) == 1 else "journal directories"
        still = f" ({len(live)} segment(s) still being written)" if live else ""
        raise UsageError(f"{where} {files.label} has no segments{still}")
    return files
