"""The audit on a synthetic journal written by the real journal writer: it names exactly
the offsets that were lost or delivered twice, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from pyspark.sql import SparkSession

from runtime.host.journal import Journal
from runtime.report import transforms
from runtime.report.job import find_journal_files, read_raw
from runtime.report.synthetic import SyntheticJournal
from tests.spark.conftest import SPARK

WriteJournal = Callable[..., Journal]  # the `journal_writer` fixture (conftest.py)


pytestmark = SPARK

LOST = ("orders-hook", 1, 17)
DUPLICATE = ("audit-hook", 2, 40)


def test_audit_names_exactly_the_lost_and_the_duplicated_offsets(
    spark: SparkSession, tmp_path: Path, journal_writer: WriteJournal
) -> None:
    synthetic = SyntheticJournal(
        records_per_partition=120, dead_letter_every=40, outage=(0.2, 0.3),
        lost=frozenset({LOST}), duplicates=frozenset({DUPLICATE}),
        crash_partition=("orders-hook", 0), crash_inflight=5,
    )
    journal_writer(tmp_path / "journal", synthetic.events(), max_segment_bytes=50_000)

    events = transforms.valid_events(read_raw(spark, find_journal_files(tmp_path / "journal")))
    records = transforms.record_outcomes(events).cache()
    commits = transforms.committed_offsets(events)
    problems = [
        (r["subscription"], r["topic"], r["partition"], r["offset"], r["problem"],
         r["committed_past"])
        for r in transforms.audit_offsets(records, commits).collect()
    ]
    assert problems == [
        ("audit-hook", "orders", 2, 40, "duplicate", True),
        ("orders-hook", "orders", 1, 17, "lost", True),
    ]
    # the records fetched just before the crash were fetched twice and are not lost
    crashed = records.filter("subscription = 'orders-hook' AND partition = 0 AND fetches = 2")
    assert crashed.filter("deliveries = 1").count() == 5
    (totals,) = transforms.totals(records).collect()
    records_in_run = 2 * 4 * 120
    assert totals["records_fetched"] == records_in_run
    assert totals["lost"] == 1 and totals["duplicates"] == 1
    assert totals["delivered"] + totals["dead_lettered"] + totals["lost"] == records_in_run
