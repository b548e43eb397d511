"""The attempts API reads a record's journal: a batch's `fetched` (offset ranges, issue 35)
says its records were fetched, so one without an attempt yet is pending, not unknown."""

from __future__ import annotations

from pathlib import Path

from actors.delivery.control.attempts import Scan, read_record
from runtime.host.journal import Event, Journal, offset_ranges
from runtime.kernel.clock import FakeClock

SUB = "s_g"


async def test_a_batch_fetched_event_counts_for_every_offset_it_names(tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=FakeClock())
    await journal.open()
    offsets = [3, 4, 5, 9]
    journal.emit(Event(type="fetched", ts_ms=1, subscription=SUB, topic="t", partition=0,
                       offset=3, count=4, offsets=offset_ranges(offsets)))
    await journal.stop()
    scan = Scan(tmp_path, SUB)
    assert [read_record(scan, ("t", 0, o)).fetched for o in (3, 5, 9)] == [True] * 3
    assert [read_record(scan, (t, p, o)).fetched
            for t, p, o in (("t", 0, 6), ("t", 1, 4), ("u", 0, 4))] == [False] * 3
