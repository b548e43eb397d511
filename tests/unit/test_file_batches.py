"""The subscription store's file batches (actors/delivery/document/batches.py), driven by a
hypothesis state machine: changes asked to a few paths, files stages and directory
stages begun and ended in any order the book allows; after every step, one files stage
and one directory stage at most are under way, a change is answered only by a directory
fsync that began after its files stage ended, a path's changes are written in the order
they were asked (never two in one batch), and nothing is lost: every change is queued,
being written, written, syncing or answered."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.delivery.document.batches import FileBatches

PATHS = st.sampled_from(["a", "b", "c"])


class FileBatchesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book: FileBatches[str, int] = FileBatches()
        self.asked: dict[int, str] = {}  # change -> its path
        self.renamed: list[int] = []  # changes in the order their files stage ended
        self.answered: list[int] = []
        self.files: list[tuple[str, int]] | None = None  # the files stage under way
        self.directory: list[int] | None = None  # the directory stage under way
        self.failing: set[int] = set()

    @rule(path=PATHS)
    def ask(self, path: str) -> None:
        change = len(self.asked)
        self.asked[change] = path
        self.book.ask(path, change)

    @precondition(lambda self: self.files is None)
    @rule()
    def write(self) -> None:
        queued = [change for _, change in self.book.queued]
        batch = self.book.write()
        assert (batch is None) == (not queued)
        if batch is not None:
            paths = [path for path, _ in batch]
            assert len(paths) == len(set(paths))
            self.files = batch

    @precondition(lambda self: self.files is not None)
    @rule(fail=st.booleans())
    def files_done(self, fail: bool) -> None:
        assert self.files is not None and self.book.write() is None  # one at a time
        changes = [change for _, change in self.files]
        if fail and changes:
            self.failing.add(changes[0])
            self.answered.append(changes[0])  # the store answers a failed file at once
        self.renamed += [c for c in changes if c not in self.failing]
        self.book.files_done([c for c in changes if c not in self.failing])
        self.files = None

    @precondition(lambda self: self.directory is None)
    @rule()
    def sync(self) -> None:
        changes = self.book.sync()
        if changes is not None:
            assert changes and all(c in self.renamed for c in changes)
            self.directory = list(changes)

    @precondition(lambda self: self.directory is not None)
    @rule()
    def synced(self) -> None:
        assert self.book.sync() is None  # one directory fsync at a time
        done = self.book.synced()
        assert done == self.directory
        self.answered += done
        self.directory = None

    @invariant()
    def a_path_is_renamed_in_the_order_asked(self) -> None:
        for path in set(self.asked.values()):
            done = [c for c in self.renamed if self.asked[c] == path]
            assert done == sorted(done)

    @invariant()
    def nothing_is_lost_nor_answered_twice(self) -> None:
        places = ([c for _, c in self.book.queued] + [c for _, c in self.files or []]
                  + self.book.written + list(self.directory or []) + self.answered)
        assert sorted(places) == sorted(self.asked)

    @invariant()
    def answered_only_after_a_directory_fsync_or_a_failure(self) -> None:
        assert all(c in self.failing or c in self.renamed for c in self.answered)


TestFileBatches = FileBatchesMachine.TestCase
TestFileBatches.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_the_next_batch_is_written_while_the_directory_of_the_last_is_synced() -> None:
    book: FileBatches[str, int] = FileBatches()
    book.ask("a", 1)
    assert book.write() == [("a", 1)]
    book.ask("b", 2)
    book.ask("a", 3)
    assert book.write() is None  # one files stage at a time
    book.files_done([1])
    assert book.sync() == [1]
    assert book.write() == [("b", 2), ("a", 3)]  # beside the directory's fsync
    book.files_done([2, 3])
    assert book.sync() is None  # one directory fsync at a time: 2 and 3 wait for it
    assert book.synced() == [1]
    assert book.sync() == [2, 3]
