"""Issue 35: a commit round's plain deliveries as one columnar `delivered` event. The
report of such a journal is the report of the per-record journal it stands for (the
planted loss and duplicate, exactly), and older shapes (ranged
`delivered`, per-record `delivered` with `sent`) read alongside it give the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from runtime.host.journal import (
    Delivery,
    DeliveryRanges,
    DeliveryRow,
    Event,
    closed_segments,
    columnar,
    committed_cursors,
)
from tests.spark.conftest import SPARK
from tests.spark.reference_journal import (
    RECORDS,
    SHIFT,
    SUBS,
    SharedReports,
    all_events,
    before_issue_35,
    part,
    write_raw,
    write_through_journal,
)
from tests.spark.reference_journal import report as report_of

pytestmark = SPARK


def as_columnar(events: list[Event | Delivery]) -> list[Event]:
    """The journal with every run of deliveries before a commit as one columnar event."""
    out: list[Event] = []
    rows: list[DeliveryRow] = []
    for one in events:
        if isinstance(one, Delivery):
            rows.append(one.row())
            continue
        if one.type == "committed":
            out += columnar(rows, SHIFT)
            rows = []
        out.append(one)
    return [*out, *columnar(rows, SHIFT)]


def as_ranged(events: list[Event | Delivery]) -> list[Event]:
    """The journal as the writer wrote it before columnar deliveries: a cursor's
    deliveries as one ranged event ahead of its commit."""
    book, out = DeliveryRanges(), []
    for one in events:
        if isinstance(one, Delivery):
            out += book.file([one.row()], SHIFT)
            continue
        if one.type == "committed":
            out += book.file([], SHIFT, set(committed_cursors(one)))
        out.append(one)
    return [*out, *book.release_all(SHIFT)]


def write_lines(directory: Path, events: list[Event], name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(msgspec.json.Encoder().encode_lines(events))


def test_a_columnar_journal_reports_its_planted_loss_and_duplicate_exactly(
        tmp_path: Path, shared_reports: Callable[[str], SharedReports]) -> None:
    # The reference engine on a columnar journal: `test_ranged_deliveries`'s reference case
    # (the writer's own output is columnar, beside an older journal's lines).
    events = as_columnar(all_events())
    assert sum(1 for e in events if e.record_offsets is not None) > 1
    write_lines(tmp_path / "columnar", events, "segment-1700000000001-00000000-000000.jsonl")
    write_raw(tmp_path / "old", before_issue_35())  # an older journal's lines alongside
    (tmp_path / "old" / "segment-1700000000000-00000000-000000.jsonl").rename(
        tmp_path / "columnar" / "segment-1699999999999-00000000-000000.jsonl")

    got = report_of([tmp_path / "columnar"], tmp_path / "out-columnar", "fast")
    subs = (*SUBS, "old_g")

    fetched = len(SUBS) * 2 * RECORDS + 5
    assert (got.summary["records_fetched"], got.summary["delivered"], got.summary["lost"],
            got.summary["duplicates"]) == (fetched, fetched - 1, 1, 1)
    [lost] = [p for p in got.summary["audit"] if p["lost"]]
    assert (lost["subscription"], lost["partition"], lost["lost_offsets"]) == ("a_g", 0, [7])
    [twice] = [p for p in got.summary["audit"] if p["duplicates"]]
    assert (twice["subscription"], twice["partition"], twice["duplicate_offsets"]) == \
        ("b_g", 1, [3])
    # the per-record journal's report (shared, with other journals beside: their parts)
    assert part(got, subs) == part(shared_reports("fast").per_record, subs)


def test_a_ranged_journal_reads_as_before_alone_and_next_to_a_columnar_one(
        tmp_path: Path, shared_reports: Callable[[str], SharedReports]) -> None:
    per_record = all_events()
    old = as_ranged(per_record)
    assert sum(1 for e in old if e.offsets is not None and e.type == "delivered") > 1
    write_lines(tmp_path / "ranged", old, "segment-1700000000000-00000000-000000.jsonl")
    half = len(per_record) // 2
    write_lines(tmp_path / "mixed", as_ranged(per_record[:half]),
                "segment-1700000000000-00000000-000000.jsonl")
    write_through_journal(tmp_path / "tail", per_record[half:])  # columnar
    for n, path in enumerate(closed_segments(tmp_path / "tail")):
        path.rename(tmp_path / "mixed" / f"segment-17000000001{n:02d}-00000000-000000.jsonl")

    # the per-record journal's report (shared, with other journals beside: their parts)
    want = part(shared_reports("fast").per_record, SUBS)
    ranged = part(report_of([tmp_path / "ranged"], tmp_path / "out-ranged", "fast"), SUBS)
    mixed = part(report_of([tmp_path / "mixed"], tmp_path / "out-mixed", "fast"), SUBS)

    assert (ranged["lost"], ranged["duplicates"]) == (1, 1)
    assert ranged == want
    assert mixed == want
