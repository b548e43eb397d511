"""The fast report on ranges (runtime/report/ranges.py, issue 35 item 4): a clean cursor is
counted from sums, every other one record by record, and both give what the per-record
expansion of the same journal gives; a cursor whose sums would hide a fault (a missing
offset and a duplicate in one range) is still found offset by offset."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.host.journal import Event
from runtime.report import batch, facts, ranges, transforms
from tests.spark.conftest import SPARK
from tests.spark.test_facts import raw_frame

pytestmark = SPARK

SUB, OTHER, TOPIC, URL = "orders-hook", "clean-hook", "orders", "http://hook"
T0 = 1_700_000_000_990  # 10 ms before a second ends: a range's records span two seconds


def fetched(sub: str, partition: int, offsets: str, **more: Any) -> Event:
    count = sum(1 for part in offsets.split(",") for _ in _span(part))
    return Event(type="fetched", ts_ms=T0, subscription=sub, topic=TOPIC, partition=partition,
                 offset=int(offsets.split("-")[0].split(",")[0]), count=count, offsets=offsets,
                 **more)


def _span(part: str) -> range:
    first, _, last = part.partition("-")
    return range(int(first), int(last or first) + 1)


def delivered(sub: str, partition: int, offsets: str, ts_ms: int, **more: Any) -> Event:
    """A cursor's ranged deliveries, with per-record latencies and times."""
    named = [o for part in offsets.split(",") for o in _span(part)]
    return Event(type="delivered", ts_ms=ts_ms, subscription=sub, topic=TOPIC,
                 partition=partition, endpoint=URL, offset=named[0], attempt=1, status=200,
                 record_ts_ms=T0 - 500, fetched_ts_ms=T0, count=len(named), offsets=offsets,
                 latencies_us=[1000 + 37 * o for o in named],
                 ts_deltas_ms=[3 * i for i in range(len(named))],
                 record_ts_deltas_ms=[o % 4 for o in named],
                 fetched_ts_deltas_ms=[0] * len(named), **more)


def journal() -> list[Event]:
    """Partition 0 and `OTHER`: clean. 1: offset 4 missing and 5 twice (the same count).
    2: offset 4 missing. 3: offset 7 twice. 4: a retried record. 5: a journal from before
    issue 35 (a `fetched` per record, with the Kafka time)."""
    clean = [event for partition in (0, 1) for event in (
        fetched(OTHER, partition, "0-9"),
        delivered(OTHER, partition, "1,3,5", T0 + 2),
        delivered(OTHER, partition, "0,2,4,6-9", T0 + 30))]
    return [
        *clean,
        fetched(SUB, 0, "0-9"), delivered(SUB, 0, "0-4", T0 + 5),
        delivered(SUB, 0, "5-9", T0 + 40),
        fetched(SUB, 1, "0-9"), delivered(SUB, 1, "0-3,5,5-9", T0 + 5),
        fetched(SUB, 2, "0-9"), delivered(SUB, 2, "0-3,5-9", T0 + 5),
        fetched(SUB, 3, "0-9"), delivered(SUB, 3, "0-9", T0 + 5),
        delivered(SUB, 3, "7", T0 + 60),
        fetched(SUB, 4, "0-2"),
        Event(type="failed", ts_ms=T0 + 3, subscription=SUB, topic=TOPIC, partition=4,
              offset=1, endpoint=URL, attempt=1, status=503, latency_ms=2.0),
        Event(type="retry_scheduled", ts_ms=T0 + 3, subscription=SUB, topic=TOPIC,
              partition=4, offset=1),
        delivered(SUB, 4, "0-2", T0 + 90),
        *(Event(type="fetched", ts_ms=T0, subscription=SUB, topic=TOPIC, partition=5,
                offset=o, record_ts_ms=T0 - 100) for o in range(3)),
        *(Event(type="delivered", ts_ms=T0 + 5 + o, subscription=SUB, topic=TOPIC,
                partition=5, offset=o, endpoint=URL, attempt=1, status=200,
                latency_ms=1.5, record_ts_ms=T0 - 90) for o in range(3)),
    ]


def _small(raw: DataFrame) -> list[dict[str, Any]]:
    return facts.small_facts([r.asDict() for r in facts.tick_totals(facts.tick_facts(raw))
                              .collect()])


def _sorted(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for group in groups:
        group["problems"] = sorted(group["problems"], key=lambda p: p["offset"])
    return sorted(groups, key=lambda g: (g["view"], g["k1"], g["k2"], g["k3"] or -1))


def expanded_groups(raw: DataFrame) -> list[dict[str, Any]]:
    """The groups as the report computed them before ranges: every record a row."""
    per_record = transforms.one_row_per_record(raw)
    events = transforms.valid_events(per_record)
    return batch.record_groups(facts.record_facts(events), events, _small(per_record))


def ranged_groups(raw: DataFrame) -> list[dict[str, Any]]:
    return batch.audit_groups(transforms.valid_events(raw), None,
                              _small(ranges.tick_rows(raw)))


def clean_of(raw: DataFrame) -> dict[tuple[str, int], bool]:
    hashes = raw.select("subscription", facts.name_hash(F.col("subscription")).alias("sh"))
    names = {r["sh"]: r["subscription"] for r in hashes.distinct().collect()}
    return {(names[r["sh"]], r["partition"]): r["clean"]
            for r in ranges.cursor_states(transforms.valid_events(raw)).collect()}


def test_only_a_cursor_whose_fetched_and_delivered_offsets_agree_exactly_is_clean(
        spark: SparkSession) -> None:
    clean = clean_of(raw_frame(spark, journal()))
    assert clean == {(OTHER, 0): True, (OTHER, 1): True, (SUB, 0): True, (SUB, 1): False,
                     (SUB, 2): False, (SUB, 3): False, (SUB, 4): False, (SUB, 5): False}


def test_clean_cursors_from_sums_and_the_others_by_record_give_the_expanded_groups(
        spark: SparkSession) -> None:
    raw = raw_frame(spark, journal())
    got = _sorted(ranged_groups(raw))
    assert got == _sorted(expanded_groups(raw))
    # `OTHER` is made of clean cursors only: its latencies came from the ranged lists
    [other] = [g for g in got if g["view"] == "endpoint" and g["k1"] == OTHER]
    assert (other["records_fetched"], other["deliveries"], other["attempts"]) == (20, 20, 20)
    # offset 9, the 7th record of its event: delivered 30 + 3 * 6 ms after T0, produced
    # 500 - 9 % 4 ms before it
    assert other["e2e_max"] == 30 + 3 * 6 + 500 - 1


def test_a_missing_offset_and_a_duplicate_inside_ranges_are_found_exactly(
        spark: SparkSession) -> None:
    groups = ranged_groups(raw_frame(spark, journal()))
    audit = {g["k3"]: g for g in groups if g["view"] == "partition" and g["k1"] == SUB}
    problems = {partition: [(p["offset"], p["deliveries"], p["lost"])
                            for p in sorted(g["problems"], key=lambda p: p["offset"])]
                for partition, g in audit.items()}
    assert problems == {0: [], 1: [(4, 0, True), (5, 2, False)], 2: [(4, 0, True)],
                        3: [(7, 2, False)], 4: [], 5: []}
    assert [(audit[p]["records_fetched"], audit[p]["delivered"], audit[p]["lost"])
            for p in range(6)] == [(10, 10, 0), (10, 9, 1), (10, 9, 1), (10, 10, 0),
                                   (3, 3, 0), (3, 3, 0)]
    assert (audit[4]["attempts"], audit[4]["retries"]) == (4, 1)


def test_ticks_and_latencies_of_ranged_events_are_those_of_their_records(
        spark: SparkSession) -> None:
    raw = raw_frame(spark, journal())
    per_record = transforms.one_row_per_record(raw)
    ticks = facts.tick_facts(ranges.tick_rows(raw))
    want = facts.tick_facts(per_record)
    assert sorted(map(repr, ticks.collect())) == sorted(map(repr, want.collect()))
    seconds = {r["second"] for r in ticks.collect() if r["type"] == "delivered"}
    assert seconds == {T0 // 1000 * 1000, T0 // 1000 * 1000 + 1000}
    latencies = facts.latency_percentiles(ranges.latency_rows(transforms.valid_events(raw)))
    expected = facts.latency_percentiles(transforms.valid_events(per_record))
    assert sorted(map(repr, latencies.collect())) == sorted(map(repr, expected.collect()))


def test_the_follow_jobs_micro_batches_count_what_the_batch_report_counts(
        spark: SparkSession) -> None:
    """The follow job audits on ranges too (runtime/report/follow_batch.py, follow_state.py):
    after each micro-batch, its groups are the batch report's of the journal so far (with
    no grace, an open record is lost, as the batch report calls it)."""
    from runtime.report import follow_batch
    from runtime.report.follow_state import FollowState

    def counted(groups: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        names = ("records_fetched", "delivered", "dead_lettered", "lost", "unknown")
        more = ("deliveries", "attempts", "retries", "failed_attempts")
        return sorted((g["view"], g["k1"], g["k2"], g["k3"],
                       *(g[n] for n in names + (more if g["view"] == "endpoint" else ())),
                       sorted((p["offset"], p["deliveries"], p["lost"]) for p in g["problems"]))
                      for g in groups)

    events = journal()
    bounds = [0, len(events) // 2, len(events)]  # two micro-batches, cutting cursors apart
    state = FollowState()
    for batch_id, (start, end) in enumerate(itertools.pairwise(bounds)):
        state.apply(follow_batch.changes(raw_frame(spark, events[start:end])), batch_id)
        so_far = raw_frame(spark, events[:end])
        assert counted(state.aggregates(0, 1_000).groups) == counted(ranged_groups(so_far))
    assert sum(len(runs) for runs in state.cursors.values()) < len(state.cursors) * 4
