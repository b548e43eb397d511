"""Issue 35: the journal writes a cursor's first-attempt deliveries between two commits as
one ranged `delivered` event, and the egress no longer writes `sent`. The report of such a
journal is the report of the per-record journal it stands for: the same records
delivered, lost and duplicated, the same latencies, in both engines; and a journal from
before (`sent` events, one `delivered` per record) still reads alongside."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from runtime.host.journal import (
    Delivery,
    Event,
    Position,
    closed_segments,
    commit_round,
)
from tests.spark.conftest import SPARK
from tests.spark.reference_journal import (
    RECORDS,
    SUBS,
    T0,
    SharedReports,
    all_events,
    part,
    report,
    write_through_journal,
)

pytestmark = SPARK


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_ranged_journal_reports_what_its_per_record_journal_does(
        tmp_path: Path, engine: str, shared_reports: Callable[[str], SharedReports]) -> None:
    per_record = all_events()
    write_through_journal(tmp_path / "ranged-alone", per_record)
    ranged_lines = sum(len(p.read_bytes().splitlines())
                       for p in closed_segments(tmp_path / "ranged-alone"))
    assert ranged_lines < len(per_record) / 2

    shared = shared_reports(engine)  # one report each, with two other files' journals
    want, got = shared.per_record, shared.ranged

    subs = (*SUBS, "old_g")
    totals = [got.subscription(sub) for sub in subs]
    fetched = len(SUBS) * 2 * RECORDS + 5
    assert tuple(sum(t[key] for t in totals) for key in (
        "records_fetched", "delivered", "lost", "duplicates")) == (fetched, fetched - 1, 1, 1)
    [lost] = [p for p in got.summary["audit"] if p["lost"] and p["subscription"] in subs]
    assert (lost["subscription"], lost["partition"], lost["lost_offsets"]) == \
        ("a_g", 0, [7])
    for key in ("records_fetched", "delivered", "lost", "duplicates", "event_types",
                "audit", "delivery_summary"):
        assert got.summary[key] == want.summary[key], key
    old = next(row for row in got.summary["delivery_summary"]
               if row["subscription"] == "old_g")
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


def test_commit_rounds_report_what_per_cursor_commits_do(
        tmp_path: Path, shared_reports: Callable[[str], SharedReports]) -> None:
    per_record = all_events()
    rounds = as_commit_rounds(per_record)
    write_through_journal(tmp_path / "rounds", rounds)
    round_lines = [line for p in closed_segments(tmp_path / "rounds")
                   for line in p.read_bytes().splitlines() if b'"positions"' in line]
    assert len(round_lines) == len([e for e in rounds if isinstance(e, Event)
                                    and e.positions is not None]) > 1

    want = part(shared_reports("fast").per_record, SUBS)  # the same records, per record
    rounds_report = report([tmp_path / "rounds"], tmp_path / "out-rounds", "fast")
    got = part(rounds_report, SUBS)

    assert (got["lost"], got["duplicates"]) == (1, 1)
    assert got == want
    commits = sum(1 for e in per_record if isinstance(e, Event) and e.type == "committed")
    assert rounds_report.summary["event_types"]["committed"] == commits
