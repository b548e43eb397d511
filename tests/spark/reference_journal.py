"""The journals of four Spark test files (issue 35) and each engine's reports of them all
at once (issue 33).

A report costs seconds of CPU in planning and writing whatever its data (a `--engine
reference` one about 9, a fast one about 6, nearly all of it in the JVM). So the cases of
`test_ranged_deliveries`, `test_attempt_latency`, `test_journal_gaps` and
`test_columnar_deliveries` share two reports per engine (the `shared_reports` fixture),
each over the three journals below:

- `per-record`: the per-record journal of the ranged-deliveries test (with an older
  journal's `sent` events), the attempt-latency journal and the journal with a gap, their
  segments in one directory;
- `ranged`: the same, with the journal writer's own output (ranged fetches, columnar
  deliveries) in place of the per-record one.

Each test still asserts its own facts, on the rows of its subscriptions (and the gap's,
which only the gap journal has); `part` takes a report's figures for some subscriptions.
The parts keep apart: different subscriptions, and the gap journal's events are ten
seconds older than the others' (the gap makes lost-looking records fetched before its end
"unknown", whichever journal they are in).
"""

from __future__ import annotations

import asyncio
import csv
import errno
import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime.host import journal as journal_module
from runtime.host.journal import Delivery, Event, Journal, closed_segments, offset_ranges
from runtime.kernel.clock import FakeClock

# -- the ranged deliveries' journal (tests/spark/test_ranged_deliveries.py) ---------------
TOPIC, T0, URL = "orders", 1_700_000_000_000, "http://127.0.0.1:9/hook"
SUBS = ("a_g", "b_g", "c_g")
RECORDS = 20
LOST = ("a_g", 0, 7)
TWICE = ("b_g", 1, 3)
RETRIED = ("c_g", 0, 5)
SHIFT = FakeClock().wall_ms() - FakeClock().monotonic_ms()  # fetched_ms is monotonic


def event(kind: str, sub: str, partition: int, offset: int, ts_ms: int,
          **more: Any) -> Event:
    return Event(type=kind, ts_ms=ts_ms, subscription=sub, topic=TOPIC,  # type: ignore[arg-type]
                 partition=partition, offset=offset, **more)


def outcome(kind: str, sub: str, partition: int, offset: int, ts_ms: int, attempt: int,
            status: int) -> Event | Delivery:
    """As the egress emits it: a plain first-attempt delivery as a `Delivery`."""
    latency_us = 1000 + (offset * 37 + partition * 11) % 4000
    if kind == "delivered" and attempt == 1:
        return Delivery(sub, f"{URL}/{sub}", TOPIC, partition, offset, status, ts_ms,
                        latency_us, T0 - 900 + offset, T0 + partition - SHIFT)
    return event(kind, sub, partition, offset, ts_ms, endpoint=f"{URL}/{sub}",
                 attempt=attempt, latency_ms=latency_us / 1000, status=status,
                 record_ts_ms=T0 - 900 + offset,
                 fetched_ts_ms=T0 + partition if attempt == 1 else None)


def cursor_events(sub: str, partition: int) -> list[Event | Delivery]:
    """A batch fetched, its records delivered out of order, a commit every five answers."""
    events: list[Event | Delivery] = [Event(
        type="fetched", ts_ms=T0 + partition, subscription=sub, topic=TOPIC,
        partition=partition, offset=0, count=RECORDS,
        offsets=offset_ranges(list(range(RECORDS))))]
    order = sorted(range(RECORDS), key=lambda o: (o * 7) % RECORDS)
    for n, offset in enumerate(order):
        at = T0 + 10 + n * 3
        key = (sub, partition, offset)
        if key == LOST:
            continue
        if key == RETRIED:
            events.append(outcome("failed", sub, partition, offset, at, 1, status=503))
            events.append(outcome("delivered", sub, partition, offset, at + 50, 2,
                                  status=200))
        else:
            events.append(outcome("delivered", sub, partition, offset, at, 1, status=200))
        if key == TWICE:
            events.append(outcome("delivered", sub, partition, offset, at + 1, 1, status=200))
        if n % 5 == 4:
            events.append(event("committed", sub, partition, min(order[n + 1:] or [RECORDS]),
                                at + 2))
    return events


def before_issue_35() -> list[Event | Delivery]:
    """An older journal's shape: `sent` per attempt, `delivered` per record."""
    events: list[Event | Delivery] = []
    for offset in range(5):
        events.append(event("fetched", "old_g", 0, offset, T0, record_ts_ms=T0 - 10))
        events.append(event("sent", "old_g", 0, offset, T0 + 4, endpoint=URL, attempt=1,
                            fetched_ts_ms=T0))
        events.append(event("delivered", "old_g", 0, offset, T0 + 6, endpoint=URL,
                            attempt=1, status=200, latency_ms=2.0))
    return events


def all_events() -> list[Event | Delivery]:
    return [e for sub in SUBS for partition in (0, 1) for e in cursor_events(sub, partition)]


def write_raw(directory: Path, events: list[Event | Delivery]) -> None:
    """One event per record, as journals before issue 35 hold them."""
    directory.mkdir(parents=True)
    (directory / "segment-1700000000000-00000000-000000.jsonl").write_bytes(
        msgspec.json.Encoder().encode_lines(
            [e.event(SHIFT) if isinstance(e, Delivery) else e for e in events]))


def write_through_journal(directory: Path, events: list[Event | Delivery]) -> None:
    async def run() -> None:
        journal = Journal(directory, clock=FakeClock())
        await journal.open()
        for one in events:
            journal.emit(one)
        await journal.stop()
    asyncio.run(run())


def write_ranged_journals(base: Path) -> tuple[Path, Path]:
    """`base/per-record` (with the older journal's events) and `base/ranged` (the same
    records through the journal writer, with the older journal's segment beside)."""
    per_record = all_events()
    write_raw(base / "per-record", [*before_issue_35(), *per_record])
    write_through_journal(base / "ranged", per_record)
    # the older journal's events next to the ranged ones: one journal, read alike
    write_raw(base / "old", before_issue_35())
    (base / "old" / "segment-1700000000000-00000000-000000.jsonl").rename(
        base / "ranged" / "segment-1699999999999-00000000-000000.jsonl")
    return base / "per-record", base / "ranged"


# -- the attempt latency's journal (tests/spark/test_attempt_latency.py) -------------------
LATENCY_TOPIC, LATENCY_URL = "t", "http://h/x"


def attempts(sub: str, with_sent: bool) -> list[Event]:
    """Records 0-9 fetched at T0 and sent `offset` ms later (the added latency), answered
    4 ms after; record 9's first attempt failed and its retry does not count."""
    def event(kind: str, offset: int, ts_ms: int, **more: Any) -> Event:
        return Event(type=kind, ts_ms=ts_ms, subscription=sub,  # type: ignore[arg-type]
                     topic=LATENCY_TOPIC, partition=0, offset=offset, endpoint=LATENCY_URL,
                     **more)

    events = []
    for offset in range(10):
        sent_at, first = T0 + offset, offset != 9
        fetched = {"fetched_ts_ms": T0}
        if with_sent:
            events.append(event("sent", offset, sent_at, attempt=1, **fetched))
        events.append(event("delivered" if first else "failed", offset, sent_at + 4,
                            attempt=1, latency_ms=4.0, status=200 if first else 500,
                            **({} if with_sent else fetched)))
        if not first:  # the retry, 100 ms later: policy, not overhead
            events.append(event("delivered", offset, sent_at + 104, attempt=2,
                                latency_ms=4.0, status=200, **({} if with_sent else fetched)))
    return events


def latency_events() -> list[Event]:
    return attempts("one_g", False) + attempts("two_g", True)


# -- the journal with a gap (tests/spark/test_journal_gaps.py) -----------------------------
GAP_SUB, GAP_TOPIC = "s_g", "events"
GAP_T0 = T0 - 10_000  # before every other part's events: the gap concerns only its own
GAP_FROM, GAP_TO = "2023-11-14T22:13:10.110", "2023-11-14T22:13:10.119"  # GAP_T0 + 110, 119


def fetched_batch(offsets: list[int], ts_ms: int) -> Event:
    return Event(type="fetched", ts_ms=ts_ms, subscription=GAP_SUB, topic=GAP_TOPIC,
                 partition=0, offset=offsets[0], count=len(offsets),
                 offsets=offset_ranges(offsets))


def record(kind: str, offset: int, ts_ms: int) -> Event:
    more: dict[str, Any] = {"endpoint": "http://h/x", "status": 200, "latency_ms": 1.0} \
        if kind == "delivered" else {}
    return Event(type=kind, ts_ms=ts_ms, subscription=GAP_SUB,  # type: ignore[arg-type]
                 topic=GAP_TOPIC, partition=0, offset=offset, **more)


def disk_full(fd: int, data: bytes, offset: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


async def write_with_a_gap(directory: Path) -> Journal:
    journal = Journal(directory, clock=FakeClock())
    await journal.open()
    journal.emit(fetched_batch(list(range(30)), GAP_T0))  # one event for offsets 0-29
    for offset in range(10):
        journal.emit(record("delivered", offset, GAP_T0 + 10 + offset))
    await journal.flush()
    for offset in range(10, 20):  # these deliveries hit a full disk
        journal.emit(record("delivered", offset, GAP_T0 + 100 + offset))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(journal_module, "_pwrite_all", disk_full)
        await journal.flush()
    for offset in range(20, 28):  # 28 and 29: no outcome, fetched before the gap
        journal.emit(record("delivered", offset, GAP_T0 + 200 + offset))
    for offset in (30, 31):  # the old shape; fetched after the gap, never delivered: lost
        journal.emit(record("fetched", offset, GAP_T0 + 300 + offset))
    await journal.stop()
    return journal


# -- reports --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Report:
    out: Path
    summary: dict[str, Any]

    def csv(self, table: str) -> list[dict[str, str]]:
        with (self.out / "csv" / f"{table}.csv").open() as rows:
            return list(csv.DictReader(rows))

    def subscription(self, name: str) -> dict[str, int]:
        """The subscription's totals (its rows of `subscriptions` summed)."""
        rows = [r for r in self.summary["subscriptions"] if r["subscription"] == name]
        assert rows, f"no rows for {name}"
        return {key: sum(int(r[key] or 0) for r in rows)
                for key in ("records_fetched", "delivered", "lost", "duplicates")}


def report(journals: list[Path], out: Path, engine: str) -> Report:
    from runtime.report import main

    assert main([*map(str, journals), "--out", str(out), "--engine", engine]) == 0
    summary = json.loads((out / "summary.json").read_text())
    with (out / "csv" / "delivery_summary.csv").open() as table:
        summary["delivery_summary"] = list(csv.DictReader(table))
    return Report(out, summary)


def part(of: Report, subs: Iterable[str]) -> dict[str, Any]:
    """What a report says of some subscriptions: their totals, audit and delivery rows."""
    keep = set(subs)
    totals = [of.subscription(sub) for sub in sorted(keep)]
    return {**{key: sum(t[key] for t in totals) for key in TOTALS},
            **{table: [row for row in of.summary[table] if row["subscription"] in keep]
               for table in ("audit", "delivery_summary")}}


TOTALS = ("records_fetched", "delivered", "lost", "duplicates")


@dataclass(frozen=True)
class SharedReports:
    per_record: Report  # the per-record journal, the latency journal, the gap journal
    ranged: Report  # the writer's output in place of the per-record journal
    dropped: int  # what the gap journal's writer counted as dropped


def shared_reports(base: Path, engine: str) -> SharedReports:
    per_record, ranged = write_ranged_journals(base)
    write_through_journal(base / "latency", list(latency_events()))
    gap = asyncio.run(write_with_a_gap(base / "gap"))
    # one journal directory each: a report over three directories cost about as much as
    # the three reports (every directory is an instance, with tables of its own)
    for segment in [*closed_segments(base / "latency"), *closed_segments(base / "gap")]:
        for journal in (per_record, ranged):
            shutil.copy(segment, journal / segment.name)  # writer-made names: unique
    return SharedReports(report([per_record], base / "out-per-record", engine),
                         report([ranged], base / "out-ranged", engine), gap.dropped)
