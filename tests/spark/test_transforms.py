"""The pure transforms on small hand-made frames."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from runtime.host.journal import Event
from runtime.report import transforms
from tests.spark.conftest import SPARK

pytestmark = SPARK

SUB, TOPIC, URL = "orders-hook", "orders", "http://hook"


def frame(spark: SparkSession, events: list[Event]) -> DataFrame:
    schema = T.StructType(
        [f for f in transforms.event_schema().fields if f.name != transforms.CORRUPT]
    )
    return spark.createDataFrame([msgspec.structs.astuple(e) for e in events], schema)


def rec(type_: str, ts_ms: int, offset: int, **fields: Any) -> Event:
    fields.setdefault("subscription", SUB)
    return Event(type=type_, ts_ms=ts_ms, topic=TOPIC, partition=0, offset=offset, **fields)


def rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def test_schema_has_every_event_field_with_its_type() -> None:
    schema = {f.name: f.dataType for f in transforms.event_schema().fields}
    assert list(schema) == [*Event.__struct_fields__, transforms.CORRUPT]
    assert schema["offset"] == T.LongType()
    assert schema["latency_ms"] == T.DoubleType()
    assert schema["type"] == T.StringType()


def test_malformed_lines_are_dropped(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "segment-1.jsonl"
    path.write_text(
        '{"type":"fetched","ts_ms":1}\n'
        '{"foo":1}\n'
        '{"type":"fetched"}\n'
        '{"type":"delivered","ts_ms":2}\n'
        '{"type":"deliv'
    )
    raw = spark.read.schema(transforms.event_schema()).json(str(path)).cache()
    assert [r["type"] for r in transforms.valid_events(raw).collect()] == ["fetched", "delivered"]


def test_audit_finds_lost_and_duplicate_offsets_only(spark: SparkSession) -> None:
    events = frame(spark, [
        # 1: fetched, abandoned by a crash, fetched again and delivered: not lost
        rec("fetched", 10, 1), rec("fetched", 50, 1), rec("delivered", 60, 1, endpoint=URL),
        rec("fetched", 11, 2),  # 2: never finished: lost
        rec("fetched", 12, 3), rec("dead_lettered", 30, 3),  # 3: dead-lettered is finished
        # 4: delivered twice: one duplicate
        rec("fetched", 13, 4), rec("delivered", 20, 4, endpoint=URL),
        rec("delivered", 70, 4, endpoint=URL),
        # 5: delivered three times: two duplicates
        rec("fetched", 14, 5), *(rec("delivered", t, 5, endpoint=URL) for t in (21, 71, 72)),
    ])
    records = transforms.record_outcomes(events)
    commits = transforms.committed_offsets(events)

    (row,) = rows(transforms.audit(records, commits))
    assert row["lost_offsets"] == [2] and row["lost"] == 1
    assert row["duplicate_offsets"] == [4, 5] and row["duplicates"] == 3
    assert (row["records_fetched"], row["delivered"], row["dead_lettered"]) == (5, 3, 1)
    problems = [(r["offset"], r["problem"], r["deliveries"])
                for r in rows(transforms.audit_offsets(records, commits))]
    assert problems == [(2, "lost", 0), (4, "duplicate", 2), (5, "duplicate", 3)]
    (total,) = rows(transforms.totals(records))
    assert (total["delivered"], total["duplicates"], total["lost"], total["dead_lettered"]) == (
        3, 3, 1, 1)


def test_the_same_offset_is_a_different_record_per_subscription(spark: SparkSession) -> None:
    events = frame(spark, [
        rec("fetched", 1, 7, subscription="a"), rec("delivered", 2, 7, subscription="a"),
        rec("fetched", 1, 7, subscription="b"),
    ])
    records = transforms.record_outcomes(events)
    audit = rows(transforms.audit(records, transforms.committed_offsets(events)))
    assert [(r["subscription"], r["lost_offsets"], r["duplicates"]) for r in audit] == [
        ("a", [], 0), ("b", [7], 0)
    ]


def test_lost_below_the_committed_offset_is_lost_for_good(spark: SparkSession) -> None:
    events = frame(spark, [
        rec("fetched", 1, 2), rec("fetched", 2, 5),
        rec("committed", 3, 3), rec("committed", 4, 4),  # committed = next offset to read
    ])
    records = transforms.record_outcomes(events)
    commits = transforms.committed_offsets(events)
    (row,) = rows(transforms.audit(records, commits))
    assert (row["lost_offsets"], row["lost_committed_past"], row["committed_offset"]) == (
        [2, 5], 1, 4)
    past = {r["offset"]: r["committed_past"]
            for r in rows(transforms.audit_offsets(records, commits))}
    assert past == {2: True, 5: False}


def test_delivery_summary_counts_and_latencies(spark: SparkSession) -> None:
    events = frame(spark, [
        rec("fetched", 1_010, 1, record_ts_ms=1_000),
        rec("dispatched", 1_011, 1, endpoint=URL),
        rec("sent", 1_013, 1, endpoint=URL, attempt=1, fetched_ts_ms=1_010),
        rec("failed", 1_020, 1, endpoint=URL, attempt=1, status=503, latency_ms=7.0),
        rec("retry_scheduled", 1_020, 1, endpoint=URL, attempt=2),
        rec("sent", 1_300, 1, endpoint=URL, attempt=2, fetched_ts_ms=1_010),  # not overhead
        rec("delivered", 1_305, 1, endpoint=URL, attempt=2, status=200, latency_ms=5.0),
        rec("fetched", 2_000, 2, record_ts_ms=1_990),
        rec("dead_lettered", 2_500, 2),  # no endpoint on it: filled from the subscription
    ])
    (row,) = rows(transforms.delivery_summary(transforms.record_outcomes(events), events))
    assert (row["subscription"], row["endpoint"]) == (SUB, URL)
    assert (row["records_fetched"], row["delivered"], row["dead_lettered"], row["lost"]) == (
        2, 1, 1, 0)
    assert (row["attempts"], row["failed_attempts"], row["retries"]) == (2, 1, 1)
    assert row["e2e_p50_ms"] == row["e2e_max_ms"] == 305
    assert row["added_p50_ms"] == row["added_max_ms"] == 3
    assert row["http_p99_ms"] == 5.0


def test_endpoint_stays_unknown_when_a_subscription_used_several(spark: SparkSession) -> None:
    events = frame(spark, [
        rec("delivered", 1, 1, endpoint="http://a"), rec("delivered", 1, 2, endpoint="http://b"),
        rec("fetched", 1, 3),
    ])
    summary = rows(transforms.delivery_summary(transforms.record_outcomes(events), events))
    assert [(r["endpoint"], r["records_fetched"]) for r in summary] == [
        ("", 1), ("http://a", 0), ("http://b", 0)
    ]


def test_throughput_counts_per_bucket_with_error_rate(spark: SparkSession) -> None:
    events = frame(spark, [
        rec("delivered", 1_000, 1), rec("delivered", 1_999, 2), rec("failed", 1_500, 3),
        rec("failed", 2_000, 3), rec("fetched", 2_100, 4),
        rec("delivered", 1_200, 1, subscription="other"),
    ])
    got = [(r["bucket_start_ms"], r["subscription"], r["delivered"], r["failed"],
            r["delivered_per_s"], r["error_rate"])
           for r in rows(transforms.throughput(events, 1_000))]
    assert got == [
        (1_000, SUB, 2, 1, 2.0, pytest.approx(1 / 3)),
        (1_000, "other", 1, 0, 1.0, 0.0),
        (2_000, SUB, 0, 1, 0.0, 1.0),
    ]


def test_actor_restarts_and_partition_movements(spark: SparkSession) -> None:
    events = frame(spark, [
        Event(type="actor_started", ts_ms=1, actor="p0"),
        Event(type="actor_crashed", ts_ms=2, actor="p0", reason="KeyError"),
        Event(type="actor_restarted", ts_ms=3, actor="p0"),
        Event(type="actor_crashed", ts_ms=4, actor="p0", reason="ValueError"),
        Event(type="actor_restarted", ts_ms=5, actor="p0"),
        Event(type="actor_started", ts_ms=1, actor="c"),
        Event(type="partition_assigned", ts_ms=1, actor="p0", subscription=SUB, topic=TOPIC,
              partition=0),
        Event(type="partition_revoked", ts_ms=6, actor="p0", subscription=SUB, topic=TOPIC,
              partition=0),
        Event(type="partition_assigned", ts_ms=7, actor="p0", subscription=SUB, topic=TOPIC,
              partition=0),
    ])
    actors = [(r["actor"], r["started"], r["crashed"], r["restarted"], r["last_crash_reason"])
              for r in rows(transforms.actor_lifecycle(events))]
    assert actors == [("p0", 1, 2, 2, "ValueError"), ("c", 1, 0, 0, None)]
    (moves,) = rows(transforms.partition_movements(events))
    assert (moves["actor"], moves["partition"], moves["assigned"], moves["revoked"]) == (
        "p0", 0, 2, 1)


def test_delay_lateness_per_level_topic(spark: SparkSession) -> None:
    events = frame(spark, [
        Event(type="delay_forwarded", ts_ms=i, topic="delay.5s", lateness_ms=float(i))
        for i in range(1, 101)
    ])
    (row,) = rows(transforms.delay_lateness(events))
    assert (row["topic"], row["forwarded"], row["lateness_max_ms"]) == ("delay.5s", 100, 100.0)
    assert (row["lateness_p50_ms"], row["lateness_p99_ms"]) == (50.0, 99.0)
