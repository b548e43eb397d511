"""Which journal files a report reads: one or several journal directories, read as one.

Each runtime instance writes its own journal directory (runtime/host/journal.py); a report
over several instances lists each directory and reads the union of their segments. Segment
names carry a random writer id, so files of different directories never clash, and every
event names its subscription, topic, partition and offset, so the union is the same journal
a single instance would have written.

Per directory: closed segments (`segment-*.jsonl`), plus crash leftovers (`*.jsonl.open`
that no live writer holds), read up to their last complete line; segments a live writer
holds are skipped (they would show its in-flight records as lost). The directories are
listed on the driver, so with a cluster master they must be on storage every executor
mounts at the same path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

    def counts(self) -> dict[str, int]:
        return {"closed": len(self.closed), "recovered_tails": len(self.recovered_tails),
                "skipped_live": len(self.skipped_live)}


def journal_directories(journal_dirs: Path | Sequence[Path]) -> tuple[Path, ...]:
    """The directories as absolute paths, each once; UsageError for a missing one."""
    dirs = (journal_dirs,) if isinstance(journal_dirs, Path) else tuple(journal_dirs)
    if not dirs:
        raise UsageError("name at least one journal directory")
    resolved = tuple(d.resolve() for d in dirs)
    for given, path in zip(dirs, resolved, strict=True):
        if not path.is_dir():
            raise UsageError(f"journal directory {given} does not exist")
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
