"""The subscription files' write queue (actors/delivery/document/writes.py), driven by a
hypothesis state machine: random changes asked of a few files, batches taken by the one
writer, whose end comes when a take finds nothing (or on an error of its own, which answers the
rest); after every step, a change is never
queued without a writer under way (no save waits forever), there is one writer at most,
each file's changes are written in the order asked and never two in one batch, and
every change asked is written exactly once."""

from __future__ import annotations

from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.delivery.document.writes import WriteQueue

PATHS = st.sampled_from([Path(f"/persist/s{i}.json") for i in range(4)])


class WriteQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue: WriteQueue[int] = WriteQueue()
        self.writer = False  # a writer runs (it was started and has not found nothing)
        self.asked: dict[Path, list[int]] = {}  # per file, the changes in the order asked
        self.written: dict[Path, list[int]] = {}
        self.changes = 0

    @rule(path=PATHS)
    def ask(self, path: Path) -> None:
        self.changes += 1
        start = self.queue.ask(path, self.changes)
        assert start != self.writer  # started exactly when none ran
        self.writer = True
        self.asked.setdefault(path, []).append(self.changes)

    @precondition(lambda self: self.writer)
    @rule()
    def take(self) -> None:
        batch = self.queue.take()
        paths = [path for path, _ in batch]
        assert len(paths) == len(set(paths))  # a file's changes never side by side
        for path, change in batch:
            self.written.setdefault(path, []).append(change)
        if not batch:
            self.writer = False  # the writer ends

    @precondition(lambda self: self.writer)
    @rule()
    def writer_fails(self) -> None:
        """The writer ends on an error of its own: the rest is answered (with it)."""
        for path, change in self.queue.abandon():
            self.written.setdefault(path, []).append(change)
        self.writer = False

    @invariant()
    def nothing_waits_without_a_writer(self) -> None:
        assert self.queue.writing == self.writer
        assert not self.queue.queued or self.writer

    @invariant()
    def each_file_written_in_the_order_asked_once(self) -> None:
        queued = {change for _, change in self.queue.queued}
        for path, asked in self.asked.items():
            written = self.written.get(path, [])
            assert asked[:len(written)] == written
            assert set(asked[len(written):]) <= queued
        assert len(queued) == len(self.queue.queued)


TestWriteQueue = WriteQueueMachine.TestCase
TestWriteQueue.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_a_batch_takes_each_files_first_change_and_the_writer_ends_on_an_empty_take() -> None:
    queue: WriteQueue[str] = WriteQueue()
    a, b = Path("a.json"), Path("b.json")
    assert queue.ask(a, "a1") and not queue.ask(b, "b1") and not queue.ask(a, "a2")
    assert queue.take() == [(a, "a1"), (b, "b1")]
    assert queue.take() == [(a, "a2")]
    assert queue.take() == [] and not queue.writing and queue.batches == 2
    assert queue.ask(b, "b2")  # a new writer
