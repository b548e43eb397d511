"""Issue 35: the journal writes a cursor's first-attempt deliveries between two commits as
one ranged `delivered` event, and the egress no longer writes `sent`. The report of such a
journal is the report of the per-record journal it stands for: the same records
delivered, lost and duplicated, the same latencies, in both engines; and a journal from
before (`sent` events, one `delivered` per record) still reads alongside."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from runtime.host.journal import (
    Delivery,
    Event,
    Journal,
    Position,
    closed_segments,
    commit_round,
    offset_ranges,
)
from runtime.kernel.clock import FakeClock
from tests.spark.conftest import SPARK

pytestmark = SPARK
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


def report(journal: Path, out: Path, engine: str) -> dict[str, Any]:
    from runtime.report import main

    assert main([str(journal), "--out", str(out), "--engine", engine]) == 0
    summary = json.loads((out / "summary.json").read_text())
    with (out / "csv" / "delivery_summary.csv").open() as table:
        summary["delivery_summary"] = list(csv.DictReader(table))
    return summary


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_ranged_journal_reports_what_its_per_record_journal_does(
        spark: Any, tmp_path: Path, engine: str) -> None:
    per_record = all_events()
    write_raw(tmp_path / "per-record", [*before_issue_35(), *per_record])
    write_through_journal(tmp_path / "ranged", per_record)
    ranged_lines = sum(len(p.read_bytes().splitlines())
                       for p in closed_segments(tmp_path / "ranged"))
    assert ranged_lines < len(per_record) / 2
    # the older journal's events next to the ranged ones: one journal, read alike
    write_raw(tmp_path / "old", before_issue_35())
    (tmp_path / "old" / "segment-1700000000000-00000000-000000.jsonl").rename(
        tmp_path / "ranged" / "segment-1699999999999-00000000-000000.jsonl")

    want = report(tmp_path / "per-record", tmp_path / "out-per-record", engine)
    got = report(tmp_path / "ranged", tmp_path / "out-ranged", engine)

    fetched = len(SUBS) * 2 * RECORDS + 5
    assert (got["records_fetched"], got["delivered"], got["lost"], got["duplicates"]) == \
        (fetched, fetched - 1, 1, 1)
    [lost] = [p for p in got["audit"] if p["lost"]]
    assert (lost["subscription"], lost["partition"], lost["lost_offsets"]) == \
        ("a_g", 0, [7])
    for key in ("records_fetched", "delivered", "lost", "duplicates", "event_types",
                "audit", "delivery_summary"):
        assert got[key] == want[key], key
    old = next(row for row in got["delivery_summary"] if row["subscription"] == "old_g")
    assert float(old["added_p50_ms"]) == 4.0  # from the `sent` events


def as_commit_rounds(events: list[Event | Delivery]) -> list[Event | Delivery]:
    """The same journal as a member writes it since commit rounds (issue 35): every
    outcome first, then round k holds each cursor's k-th commit, in one event."""
    rounds: dict[tuple[str, int], int] = {}
    by_round: dict[int, list[Position]] = {}
    others: list[Event | Delivery] = []
    for one in events:
        if isinstance(one, Event) and one.type == "committed":
            k = rounds[(one.subscription or "", one.partition or 0)] = \
                rounds.get((one.subscription or "", one.partition or 0), -1) + 1
            by_round.setdefault(k, []).append(
                (one.subscription or "", one.topic or "", one.partition or 0, one.offset or 0))
        else:
            others.append(one)
    return [*others, *(commit_round(T0 + 1000 + k, by_round[k]) for k in sorted(by_round))]


def test_commit_rounds_report_what_per_cursor_commits_do(spark: Any, tmp_path: Path) -> None:
    per_record = all_events()
    write_raw(tmp_path / "per-record", per_record)
    rounds = as_commit_rounds(per_record)
    write_through_journal(tmp_path / "rounds", rounds)
    round_lines = [line for p in closed_segments(tmp_path / "rounds")
                   for line in p.read_bytes().splitlines() if b'"positions"' in line]
    assert len(round_lines) == len([e for e in rounds if isinstance(e, Event)
                                    and e.positions is not None]) > 1

    want = report(tmp_path / "per-record", tmp_path / "out-per-record", "fast")
    got = report(tmp_path / "rounds", tmp_path / "out-rounds", "fast")

    assert (got["lost"], got["duplicates"]) == (1, 1)
    for key in ("records_fetched", "delivered", "lost", "duplicates", "audit",
                "delivery_summary"):
        assert got[key] == want[key], key
    assert got["event_types"]["committed"] == want["event_types"]["committed"]
