"""The journal writer: segments, rotation, crash recovery, drop accounting, lifecycle."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest

from runtime.errors import UsageError
from runtime.host.journal import (
    Event,
    Journal,
    JournalFlusher,
    NullJournal,
    closed_segments,
    journal_summary,
    open_segments,
    recover_segments,
)
from runtime.host.metrics import Registry, Value
from runtime.kernel.actor import Actor
from runtime.kernel.clock import FakeClock
from runtime.kernel.gate import Gate
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem

decoder = msgspec.json.Decoder(Event)


def read_events(directory: Path) -> list[Event]:
    return [
        decoder.decode(line)
        for path in closed_segments(directory)
        for line in path.read_bytes().splitlines()
    ]


def fetched(offset: int) -> Event:
    return Event(type="fetched", ts_ms=1_700_000_000_000 + offset, subscription="s",
                 topic="t", partition=0, offset=offset)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_journal(
    tmp_path: Path, clock: FakeClock
) -> Callable[..., Journal]:
    def make(**options: int) -> Journal:
        return Journal(tmp_path / "journal", clock=clock, **options)

    return make


@pytest.fixture
async def journal(make_journal: Callable[..., Journal]) -> AsyncIterator[Journal]:
    j = make_journal()
    await j.open()
    yield j
    await j.stop()


async def test_stop_writes_every_event_to_a_closed_segment(journal: Journal) -> None:
    events = [fetched(i) for i in range(100)]
    for event in events:
        journal.emit(event)
    await journal.stop()

    assert read_events(journal.directory) == events
    assert open_segments(journal.directory) == []
    assert (journal.written, journal.dropped) == (100, 0)


async def test_lines_hold_only_the_fields_that_are_set(journal: Journal) -> None:
    journal.emit(Event(type="actor_crashed", ts_ms=5, actor="a", reason="boom"))
    await journal.stop()

    (segment,) = closed_segments(journal.directory)
    assert segment.read_bytes() == (
        b'{"type":"actor_crashed","ts_ms":5,"actor":"a","reason":"boom"}\n'
    )


async def test_segment_is_rotated_when_it_reaches_max_bytes(
    make_journal: Callable[..., Journal],
) -> None:
    journal = make_journal(max_segment_bytes=1_000)
    await journal.open()
    events = [fetched(i) for i in range(60)]
    for batch in range(6):
        for event in events[batch * 10:(batch + 1) * 10]:
            journal.emit(event)
        await journal.flush()
    await journal.stop()

    segments = closed_segments(journal.directory)
    assert len(segments) >= 3
    # a segment is closed once it reaches the limit, so it overshoots by at most a batch
    assert all(p.stat().st_size < 1_000 + 10 * 100 for p in segments)
    assert read_events(journal.directory) == events


async def test_segment_is_rotated_by_age_even_when_idle(
    make_journal: Callable[..., Journal], clock: FakeClock
) -> None:
    journal = make_journal(max_segment_age_ms=60_000)
    await journal.open()
    journal.emit(fetched(1))
    await journal.flush()
    assert len(open_segments(journal.directory)) == 1

    clock.advance(59_999)
    await journal.flush()
    assert len(open_segments(journal.directory)) == 1
    clock.advance(1)
    await journal.flush()  # nothing buffered: the age alone closes the segment
    assert open_segments(journal.directory) == []
    assert read_events(journal.directory) == [fetched(1)]

    journal.emit(fetched(2))
    await journal.stop()
    assert len(closed_segments(journal.directory)) == 2
    assert read_events(journal.directory) == [fetched(1), fetched(2)]


async def test_start_recovers_the_complete_lines_of_a_torn_leftover(
    tmp_path: Path, clock: FakeClock
) -> None:
    directory = tmp_path / "journal"
    directory.mkdir()
    encoder = msgspec.json.Encoder()
    torn = directory / "segment-0000000000001-dead0000-000000.jsonl.open"
    torn.write_bytes(encoder.encode_lines([fetched(1), fetched(2)]) + b'{"type":"fetch')
    empty = directory / "segment-0000000000002-dead0000-000001.jsonl.open"
    empty.write_bytes(b'{"type":"no newline"')

    journal = Journal(directory, clock=clock)
    await journal.open()
    await journal.stop()

    assert not torn.exists() and not empty.exists()
    assert closed_segments(directory) == [directory / torn.name.removesuffix(".open")]
    assert read_events(directory) == [fetched(1), fetched(2)]


async def test_start_leaves_a_segment_held_by_a_live_writer_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    directory = tmp_path / "journal"
    live = Journal(directory, clock=clock)
    await live.open()
    live.emit(fetched(1))
    await live.flush()
    (live_segment,) = open_segments(directory)

    other = Journal(directory, clock=clock)
    await other.open()
    assert open_segments(directory) == [live_segment]

    live.emit(fetched(2))
    await live.stop()
    await other.stop()
    assert read_events(directory) == [fetched(1), fetched(2)]


def test_recovery_skips_a_locked_file(tmp_path: Path) -> None:
    held = tmp_path / "segment-0000000000001-aaaa0000-000000.jsonl.open"
    held.write_bytes(b'{"type":"fetched","ts_ms":1}\n')
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert recover_segments(tmp_path) == []
    finally:
        os.close(fd)
    assert recover_segments(tmp_path) == [tmp_path / held.name.removesuffix(".open")]


async def test_a_full_buffer_keeps_every_event_and_wakes_its_flusher_without_a_tick(
        tmp_path: Path, clock: FakeClock) -> None:
    """Full before its flusher starts (or while a crashed one restarts): the flusher
    catches up as it starts; full again while it runs: it is told at once. The clock
    never moves, so no timer flush does it."""
    journal = Journal(tmp_path, clock=clock, max_buffered=10)
    await journal.open()
    for i in range(12):
        journal.emit(fetched(i))
    assert (journal.dropped, journal.buffered, journal.gate.open) == (0, 12, False)
    system = ActorSystem(clock=clock)
    await system.start()
    await system.spawn(ChildSpec("journal", lambda: JournalFlusher("journal", journal)))
    await journal.gate.wait()
    for i in range(12, 25):
        journal.emit(fetched(i))
    assert not journal.gate.open
    await journal.gate.wait()
    await system.stop()
    await journal.stop()
    assert (journal.written, journal.dropped, journal.held) == (25, 0, 2)
    assert read_events(tmp_path) == [fetched(i) for i in range(25)]


async def test_paced_actors_wait_for_a_journal_behind_and_lose_nothing(
        tmp_path: Path) -> None:
    """The burst of issue 35 in small: actors emit far more per step than the buffer
    holds; they are held between steps instead of the journal dropping."""
    clock = FakeClock()
    system = ActorSystem(clock=clock, pace=Gate())
    journal = Journal(tmp_path, clock=clock, max_buffered=100, pace=system.root.context.pace)
    await journal.open()
    system.root.context.emit = journal.emit
    await system.start()

    class Burst(Actor):
        async def handle(self, message: object) -> None:
            assert isinstance(message, int)
            for i in range(250):
                self.context.emit(fetched(message * 1000 + i))

    await system.spawn(ChildSpec("journal", lambda: JournalFlusher("journal", journal)))
    burst = [await system.spawn(ChildSpec(f"b{n}", lambda n=n: Burst(f"b{n}")))
             for n in range(4)]
    for step in range(10):
        for actor in burst:
            await actor.tell(step)
    await asyncio.gather(*(actor.ask(0) for actor in burst))  # every step handled
    await system.stop()
    await journal.stop()
    assert (journal.dropped, journal.written) == (0, 4 * 11 * 250)
    assert journal.held > 1  # it fell behind, more than once, and held the actors
    assert len(read_events(tmp_path)) == 4 * 11 * 250


async def test_a_paced_actor_takes_no_message_while_the_gate_is_closed() -> None:
    gate = Gate()
    system = ActorSystem(pace=gate)
    await system.start()
    seen: list[object] = []

    class Note(Actor):
        async def handle(self, message: object) -> None:
            seen.append(message)

    class Free(Note):
        paced = False

    paced = await system.spawn(ChildSpec("paced", lambda: Note("paced")))
    free = await system.spawn(ChildSpec("free", lambda: Free("free")))
    gate.close()
    await paced.tell("held")
    assert await free.ask("free") is None
    assert seen == ["free"]  # the paced one waits; the unpaced one went on
    gate.reopen()
    assert await paced.ask("after") is None
    assert seen == ["free", "held", "after"]
    await system.stop()


async def test_a_write_error_counts_the_batch_and_the_journal_keeps_running(
    make_journal: Callable[..., Journal], caplog: pytest.LogCaptureFixture
) -> None:
    journal = make_journal()
    await journal.open()
    shutil.rmtree(journal.directory)  # the next segment cannot be created
    journal.emit(fetched(1))
    journal.emit(fetched(2))
    with caplog.at_level(logging.WARNING, logger="runtime.host.journal"):
        await journal.flush()
    assert (journal.dropped, journal.written) == (2, 0)
    assert any("write_error" in r.message for r in caplog.records)
    assert journal_summary(journal) == "journal 0 events written, 2 DROPPED"  # stop line

    journal.directory.mkdir()
    journal.emit(fetched(3))
    await journal.stop()
    events = read_events(journal.directory)
    assert events[0] == fetched(3)
    assert [(e.type, e.count, e.reason) for e in events[1:]] == [
        ("journal_dropped", 2, "write_error")
    ]


async def test_supervisors_restart_a_crashed_child_while_the_gate_is_closed() -> None:
    """Supervisors are not paced: a crash while the journal holds the actors is handled
    (the flusher's own restart depends on it)."""
    gate = Gate()
    system = ActorSystem(pace=gate, period_ms=60_000)
    await system.start()

    class Quiet(Actor):
        paced = False  # the child answers so the test can see the new one

        async def handle(self, message: object) -> object:
            return self

    ref = await system.spawn(ChildSpec("quiet", lambda: Quiet("quiet")))
    first = await ref.ask("who")
    gate.close()
    first.kill("chaos")
    for _ in range(100):  # the restart takes a few loop turns, no clock time
        await asyncio.sleep(0)
        if system.root.child("quiet") is not first:
            break
    assert system.root.child("quiet") is not first
    assert await ref.ask("who") is system.root.child("quiet")
    gate.reopen()
    await system.stop()


async def test_every_drop_is_logged_with_its_count_one_line_per_interval_at_most(
    make_journal: Callable[..., Journal], clock: FakeClock,
    caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 35: "1 dropped in total", then "50801 dropped in total" with no line for the
    50,800 between. Each line now counts what it did not say before."""
    journal = make_journal()
    await journal.open()
    shutil.rmtree(journal.directory)
    with caplog.at_level(logging.WARNING, logger="runtime.host.journal"):
        for batch in ([1], [2, 3], [4, 5, 6]):
            for offset in batch:
                journal.emit(fetched(offset))
            await journal.flush()
        lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
        assert len(lines) == 1 and "dropped 1 event(s) (write_error: 1" in lines[0]

        await clock.advance_settled(10_000)
        await journal.flush()  # the next flush after the interval logs the rest
        lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
        assert len(lines) == 2
        assert "dropped 5 event(s) since the last warning (write_error: 5" in lines[1]
        assert lines[1].endswith("6 dropped in total")

        journal.directory.mkdir()
        await journal.stop()
    events = read_events(journal.directory)
    assert [(e.type, e.count, e.reason, e.gap_from_ms, e.gap_to_ms) for e in events] == [
        ("journal_dropped", 6, "write_error", fetched(1).ts_ms, fetched(6).ts_ms)]


async def test_emit_after_stop_is_counted_and_harmless(journal: Journal) -> None:
    journal.emit(fetched(1))
    await journal.stop()
    journal.emit(fetched(2))
    await journal.stop()  # idempotent

    assert journal.dropped == 1
    assert read_events(journal.directory) == [fetched(1)]
    assert open_segments(journal.directory) == []


async def test_opening_twice_says_what_to_do(journal: Journal) -> None:
    with pytest.raises(UsageError, match="open it once"):
        await journal.open()


async def test_events_emitted_before_open_are_kept(
    make_journal: Callable[..., Journal],
) -> None:
    journal = make_journal()
    journal.emit(fetched(1))
    await journal.open()
    await journal.stop()
    assert read_events(journal.directory) == [fetched(1)]


async def test_repr_shows_state(journal: Journal) -> None:
    journal.emit(fetched(1))
    assert "running buffered=1/100000 written=0 dropped=0 held=0" in repr(journal)
    await journal.flush()
    assert "written=1" in repr(journal) and ".jsonl.open" in repr(journal)


async def test_null_journal_does_nothing() -> None:
    journal = NullJournal()
    await journal.open()
    journal.emit(fetched(1))
    await journal.stop()
    assert (journal.written, journal.dropped, repr(journal)) == (0, 0, "<NullJournal>")


async def test_an_unencodable_event_is_dropped_and_its_batch_kept(journal: Journal) -> None:
    journal.emit(fetched(1))
    journal.emit(Event(type="actor_crashed", ts_ms=2, reason=object()))  # type: ignore[arg-type]
    journal.emit(Event(type="stalled", ts_ms=object()))  # type: ignore[arg-type]
    journal.emit(fetched(3))
    await journal.stop()

    assert journal.dropped == 2
    events = read_events(journal.directory)
    assert events[:2] == [fetched(1), fetched(3)]
    assert [(e.type, e.count, e.reason, e.gap_from_ms, e.gap_to_ms) for e in events[2:]] == [
        ("journal_dropped", 2, "unencodable", 2, 2)  # the span of the stamps it could read
    ]


async def test_a_hosted_journal_is_flushed_by_its_supervised_actor_on_timer_messages(
        tmp_path: Path, clock: FakeClock) -> None:
    journal = Journal(tmp_path, clock=clock, flush_interval_ms=200)
    await journal.open()
    system = ActorSystem(clock=clock)
    await system.start()
    metrics = Registry()
    await system.spawn(ChildSpec("journal", lambda: JournalFlusher("journal", journal,
                                                                   metrics)))
    journal.emit(fetched(1))
    await clock.advance_settled(199)
    assert journal.written == 0 and journal.buffered == 1
    await clock.advance_settled(1)
    assert journal.buffered == 0  # taken by the flusher; written in a worker thread
    await system.stop()  # a stop message: the flush in progress finishes first
    [written] = metrics.series("hookstream_journal_events_written_total")
    assert isinstance(written, Value) and written.value == 1  # set after the flush
    await journal.stop()
    assert [e.offset for e in read_events(tmp_path)] == [1]
