"""The subscription files' write queue: which changes the writer takes next (pure).

The event loop asks for changes; one writer (a worker thread) takes them in batches
until none is left, each batch one group commit (actors/delivery/document/store.py). The
writer takes its next batch itself, as soon as the last one is written: when the loop
chose it (the loop started the next batch once it ran the last one's completion), a
subscribe that arrived while a batch was written waited for that batch, then for a loop
turn, then for its own batch, and in the rebalance window of 10,000 subscribers a loop
turn is long (issue 32, item 12). Both sides call this object under the store's lock; it
does no I/O and knows no threads, so it is tested as a state machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class WriteQueue(Generic[T]):
    """Changes asked and not yet taken, in the order asked, and whether a writer is under
    way (`writing`). Invariant: a change is never queued without a writer under way."""

    queued: list[tuple[Path, T]] = field(default_factory=list)
    writing: bool = False
    batches: int = 0
    """Batches taken (each one group commit)."""

    def ask(self, path: Path, change: T) -> bool:
        """Queue a change of `path`; True when the asker must start a writer (none was
        under way: the asker now owns the `writing` it set)."""
        self.queued.append((path, change))
        if self.writing:
            return False
        self.writing = True
        return True

    def take(self) -> list[tuple[Path, T]]:
        """The writer's next batch: the first change of each file queued, in the order
        asked (a file's next change waits for the next batch, so a file's changes are
        written in the order asked and never side by side). Empty when nothing is queued:
        the writer ends (`writing` is False, and the next `ask` starts one)."""
        batch: list[tuple[Path, T]] = []
        later: list[tuple[Path, T]] = []
        paths: set[Path] = set()
        for queued in self.queued:
            (later if queued[0] in paths else batch).append(queued)
            paths.add(queued[0])
        self.queued = later
        if batch:
            self.batches += 1
        else:
            self.writing = False
        return batch

    def abandon(self) -> list[tuple[Path, T]]:
        """The writer ended without taking the rest: all that is queued, and no writer
        under way (the next `ask` starts one)."""
        queued, self.queued, self.writing = self.queued, [], False
        return queued
