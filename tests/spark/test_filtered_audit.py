"""The audit accounts for the records a subscription's filter left out (issue 26): a
`filtered` event per batch names their offsets as ranges, and an offset it holds is not
lost even when it was fetched before (a filter changed between two fetches). The
reference transforms and the default (fast) report agree; after a real run of three
filtered subscribers with failures, the audit says nothing lost for each."""

from __future__ import annotations

import asyncio
import csv
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from pyspark.sql import SparkSession

from runtime.host.journal import Event, Journal, offset_ranges, ranges_of
from runtime.report import batch, facts, transforms
from runtime.report.job import JournalFiles, find_journal_files, read_raw
from tests.conftest import TopicFactory
from tests.integration.test_filters import PARTITIONS, run_three_subscribers
from tests.spark.conftest import SPARK

WriteJournal = Callable[..., Journal]

pytestmark = SPARK
SUB, TOPIC = "s_g", "events"


def events() -> Iterator[Event]:
    """Offsets 0-19 of one partition: even ones delivered; odd ones filtered out in two
    batches, except 13 (fetched, never delivered: lost); 1, 3 and 5 were fetched before a
    filter change and filtered when fetched again."""
    ts = 1_700_000_000_000

    def event(kind: str, offset: int, **more: object) -> Event:
        return Event(type=kind, ts_ms=ts + offset, subscription=SUB, topic=TOPIC,
                     partition=0, offset=offset, **more)  # type: ignore[arg-type]
    for offset in (1, 3, 5, 13):
        yield event("fetched", offset)
    for offset in range(0, 20, 2):
        yield event("fetched", offset)
        yield event("delivered", offset, endpoint="http://h/x", status=200, latency_ms=1.0)
    for first, last in ((1, 9), (11, 19)):
        filtered = [o for o in range(first, last + 1, 2) if o != 13]
        yield Event(type="filtered", ts_ms=ts + 100, subscription=SUB, topic=TOPIC,
                    partition=0, offset=filtered[0], count=len(filtered),
                    offsets=offset_ranges(filtered))
    yield event("committed", 13)


def test_offset_ranges_are_ascending_runs() -> None:
    assert offset_ranges([3, 4, 5, 6, 7, 9, 12, 13]) == "3-7,9,12-13"
    assert offset_ranges([5]) == "5"


def test_filtered_offsets_are_accounted_for_and_only_the_unfinished_one_is_lost(
        spark: SparkSession, tmp_path: Path, journal_writer: WriteJournal) -> None:
    journal_writer(tmp_path / "journal", list(events()))
    files = find_journal_files(tmp_path / "journal")
    raw = read_raw(spark, files)
    valid = transforms.valid_events(raw)
    records = transforms.record_outcomes(valid)
    assert [r["offset"] for r in records.filter("lost").collect()] == [13]
    assert records.columns == transforms.record_outcomes(valid.filter("type != 'filtered'")
                                                         ).columns
    fast = facts.record_facts(valid)
    assert [r["offset"] for r in fast.filter("lost").collect()] == [13]
    summary = batch.run_report(spark, files, tmp_path / "out", progress=lambda _: None)
    assert summary["lost"] == 1 and summary["delivered"] == 10


def journaled_filtered(files: JournalFiles) -> dict[str, set[tuple[int, int]]]:
    """Per subscription, the (partition, offset)s its `filtered` events name."""
    found: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for path in files.paths:
        with path.open("rb") as lines:
            for line in lines:
                event = msgspec.json.decode(line, type=Event)
                if event.type == "filtered":
                    assert event.subscription is not None and event.offsets is not None
                    found[event.subscription].update(
                        (event.partition, offset) for first, last in ranges_of(event.offsets)
                        for offset in range(first, last + 1))
    return found


async def test_on_the_real_broker_the_audit_says_nothing_lost_for_each_subscriber(
        spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory,
        tmp_path: Path, fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    run = await run_three_subscribers(kafka_bootstrap, topic, tmp_path, fast_group_kwargs)
    print(run.summary())
    files = find_journal_files(run.journal)
    summary = await asyncio.to_thread(batch.run_report, spark, files, tmp_path / "out",
                                      progress=lambda _: None)
    with (tmp_path / "out" / "csv" / "audit.csv").open() as table:
        audit = list(csv.DictReader(table))
    per_subscription: dict[str, Counter[str]] = defaultdict(Counter)
    for row in audit:
        assert row["topic"] == topic
        assert int(row["committed_offset"]) == run.ends[int(row["partition"])], row
        for column in ("delivered", "lost", "records_fetched", "duplicates"):
            per_subscription[row["subscription"]][column] += int(row[column])
    filtered = journaled_filtered(files)
    for key, counts in per_subscription.items():
        print(f"audit {key}: {dict(counts)}, journaled filtered {len(filtered[key])}")
    assert set(per_subscription) == set(run.expected)
    assert len(audit) == len(run.expected) * PARTITIONS
    for key, subset in run.expected.items():
        counts = per_subscription[key]
        assert (counts["lost"], counts["delivered"], counts["records_fetched"]) == (
            0, len(subset), len(subset)), key
        assert filtered[key] == set(run.types) - subset, key  # the rest is accounted for
    assert summary["lost"] == 0
    assert summary["delivered"] == sum(len(s) for s in run.expected.values())
