"""The fast path's transforms (runtime/report/facts.py) on small hand-made frames, checked
against the reference transforms where both compute the same thing."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.host.journal import Event
from runtime.report import batch, facts, tables, transforms
from tests.spark.conftest import SPARK

pytestmark = SPARK

SUB, TOPIC, URL = "orders-hook", "orders", "http://hook"


def raw_frame(spark: SparkSession, events: list[Event], malformed: int = 0) -> DataFrame:
    """Raw journal rows: the events, then `malformed` lines that are not events."""
    rows = [[*msgspec.structs.astuple(e), None] for e in events]
    rows += [[None] * len(Event.__struct_fields__) + ['{"typ'] for _ in range(malformed)]
    return spark.createDataFrame(rows, transforms.event_schema())


def rec(type_: str, ts_ms: int, offset: int, **fields: Any) -> Event:
    fields.setdefault("subscription", SUB)
    return Event(type=type_, ts_ms=ts_ms, topic=TOPIC, partition=0, offset=offset, **fields)


def small_of(raw: DataFrame) -> list[dict[str, Any]]:
    return facts.small_facts([r.asDict() for r in facts.tick_totals(facts.tick_facts(raw))
                              .collect()])


def test_records_count_like_the_reference_record_outcomes(spark: SparkSession) -> None:
    raw = raw_frame(spark, [
        rec("fetched", 10, 1, record_ts_ms=5), rec("fetched", 50, 1),
        rec("delivered", 60, 1, endpoint=URL),
        rec("fetched", 11, 2),
        rec("fetched", 12, 3), rec("failed", 20, 3, endpoint=URL),
        rec("retry_scheduled", 20, 3), rec("dead_lettered", 30, 3),
        rec("fetched", 13, 4), rec("delivered", 20, 4, endpoint=URL),
        rec("delivered", 70, 4, endpoint=URL),
    ])
    events = transforms.valid_events(raw)
    columns = ["offset", "fetches", "deliveries", "failures", "retries", "dead_letters",
               "attempts", "e2e_latency_ms", "lost", "first_fetched_ms"]
    fast = facts.record_facts(events).select(*columns).orderBy("offset").collect()
    reference = transforms.record_outcomes(events).select(*columns).orderBy("offset").collect()
    assert fast == reference
    assert [r["lost"] for r in fast] == [False, True, False, False]


def test_small_facts_count_types_actors_moves_and_commits(spark: SparkSession) -> None:
    raw = raw_frame(spark, [
        Event(type="actor_started", ts_ms=1, actor="p0"),
        Event(type="actor_crashed", ts_ms=2, actor="p0", reason="KeyError"),
        Event(type="actor_restarted", ts_ms=3, actor="p0"),
        Event(type="actor_crashed", ts_ms=4, actor="p0", reason="ValueError"),
        Event(type="partition_assigned", ts_ms=1, actor="p0", subscription=SUB, topic=TOPIC,
              partition=0),
        rec("committed", 5, 40), rec("committed", 6, 30),
        Event(type="journal_dropped", ts_ms=7, count=12, reason="buffer_full"),
    ], malformed=2)
    small = small_of(raw)
    types = {r["type"]: r for r in batch.type_rows(small)}
    assert types[None]["events"] == 2  # the malformed lines
    assert (types["journal_dropped"]["count_sum"], types["committed"]["events"]) == (12, 2)
    (actor,) = tables.actors(small).rows
    assert (actor["crashed"], actor["restarted"], actor["last_crash_reason"]) == (
        2, 1, "ValueError")
    assert tables.committed_offsets(small) == {(SUB, TOPIC, 0): 40}
    (move,) = tables.partition_movements(small).rows
    assert (move["actor"], move["assigned"], move["revoked"]) == ("p0", 1, 0)


def test_a_record_whose_events_name_two_endpoints_gets_the_smallest(
    spark: SparkSession,
) -> None:
    raw = raw_frame(spark, [
        rec("fetched", 1, 1), rec("failed", 2, 1, endpoint="http://b"),
        rec("delivered", 3, 1, endpoint="http://a"),
        rec("fetched", 1, 2), rec("delivered", 3, 2, endpoint="http://b"),
        rec("fetched", 1, 3),  # no endpoint, and the subscription used two: stays ""
    ])
    events = transforms.valid_events(raw)
    groups = batch.record_groups(facts.record_facts(events), events, small_of(raw))
    per_endpoint = {g["k2"]: g["records_fetched"] for g in groups if g["view"] == "endpoint"}
    reference = transforms.delivery_summary(transforms.record_outcomes(events), events)
    assert per_endpoint == {"http://a": 1, "http://b": 1, "": 1}
    assert per_endpoint == {r["endpoint"]: r["records_fetched"] for r in reference.collect()}


def test_keyed_rows_carry_the_batch_stamp_of_a_records_first_fetch_and_delivery(
    spark: SparkSession,
) -> None:
    raw = raw_frame(spark, [rec("fetched", 1, 1), rec("delivered", 3, 1, endpoint=URL),
                            rec("sent", 2, 1, endpoint=URL, attempt=1, fetched_ts_ms=1)])
    rows = {r["kind"]: r for r in facts.aggregate(facts.keyed(raw, stamp=F.lit(5))).collect()}
    record = rows["record"]
    assert (record["first_fetch_stamp"], record["first_delivery_stamp"],
            record["last_stamp"], record["first_dead_letter_stamp"]) == (5, 5, 5, None)
    assert rows["added"]["v"] == 1.0 and rows["http"]["v"] is None
    assert set(rows) == {"record", "tick", "endpoint", "added", "http"}


def test_dead_letters_and_replays_agree_on_the_three_paths(spark: SparkSession) -> None:
    """Reference transforms, the batch's small facts and the follow job's keyed facts."""
    from runtime.report.follow_state import BatchChanges, FollowState

    raw = raw_frame(spark, [
        rec("fetched", 1, 3), rec("dead_lettered", 5, 3, attempt=2, reason="exhausted"),
        rec("fetched", 9, 3), rec("dead_lettered", 12, 3, attempt=3, reason="gave up"),
        rec("fetched", 2, 4), rec("dead_lettered", 6, 4, reason=None),
        rec("fetched", 3, 5), rec("dead_lettered", 7, 5, attempt=3, reason="gave up",
                                  status=503, response='{"error": "ledger | locked"}\n'),
        rec("fetched", 4, 6), rec("dead_lettered", 8, 6, attempt=3, reason="gave up",
                                  response="<html>no status: a reset</html>"),
        rec("replayed", 20, 3, attempt=1, reason="r-9: delivered again"),
        rec("replayed", 21, 4, attempt=4, reason="r-9: failed after 4 attempts"),
        rec("replayed", 30, 3, attempt=1, reason="r-10: delivered again",
            subscription="other"),
    ])
    events = transforms.valid_events(raw)
    reference = {
        name: [r.asDict() for r in frame.collect()]
        for name, frame in (("dead_letters", transforms.dead_letters(events)),
                            ("replays", transforms.replays(events)))}
    state = FollowState()
    state.apply(BatchChanges(facts=[r.asDict() for r in facts.aggregate(
        facts.keyed(raw, stamp=F.lit(1))).collect()]), 0)
    follow = state.aggregates(0, 1_000).small
    for small in (small_of(raw), follow):
        assert tables.dead_letters(small).rows == reference["dead_letters"]
        assert tables.replays(small).rows == reference["replays"]
    assert [(r["offset"], r["reason"], r["attempts"], r["dead_lettered"], r["replayed"])
            for r in reference["dead_letters"]][:2] == [(3, "gave up", 3, 2, 1),
                                                        (4, None, None, 1, 0)]
    # issue 36: the last answer's status and snippet, absent from journals before it
    assert [(r["offset"], r["reason"], r["status"], r["response"])
            for r in reference["dead_letters"]] == [
        (3, "gave up", None, None), (4, None, None, None),
        (5, "gave up", 503, '{"error": "ledger | locked"}\n'),
        (6, "gave up", None, "<html>no status: a reset</html>")]
    assert [(r["replay_id"], r["subscription"], r["delivered"], r["failed"])
            for r in reference["replays"]] == [("r-10", "other", 1, 0), ("r-9", SUB, 1, 1)]


def test_the_follow_jobs_facts_of_a_batch_are_those_of_one_row_per_record(
    spark: SparkSession,
) -> None:
    """runtime/report/follow_batch.py makes the deliveries' small facts in pandas and a
    ranged `fetched` one weighted row: the same facts as every record a row of its own."""
    from runtime.report import follow_batch
    from runtime.report.follow_state import BatchChanges, FollowState

    columnar = Event(
        type="delivered", ts_ms=2_000, topic=TOPIC, attempt=1, status=200, endpoint=URL,
        record_ts_ms=1_000, fetched_ts_ms=1_500, count=3, subscriptions=[SUB, "other"],
        keys=[0, 1, 0], partitions=[0, 0, 1], record_offsets=[1, 1, 7],
        latencies_us=[1_500, 2_500, 999_999], ts_deltas_ms=[0, 700, 1_200])
    raw = raw_frame(spark, [
        rec("fetched", 1_000, 1, offsets="1-3,7", count=4), columnar,
        rec("delivered", 3_100, 2, endpoint=URL, attempt=2, latency_ms=4.5,
            fetched_ts_ms=1_000, record_ts_ms=900),
        rec("delivered", 3_200, 3, latency_ms=0.5, fetched_ts_ms=3_000),
        rec("failed", 3_300, 7, endpoint=URL, attempt=1, latency_ms=30.0, fetched_ts_ms=3_200),
        Event(type="committed", ts_ms=3_400, topic=TOPIC, subscriptions=[SUB, SUB],
              partitions=[0, 1], positions=[4, 8]),
    ], malformed=1)

    def folded(rows: list[dict[str, Any]]) -> dict[Any, Any]:
        state = FollowState()
        state.apply(BatchChanges(facts=rows), 0)
        return state.facts

    reference = facts.aggregate(facts.keyed(transforms.one_row_per_record(raw), records=False))
    expected = folded([r.asDict() for r in reference.collect()])
    assert folded(follow_batch.changes(raw).facts) == expected
    assert {k[0] for k in expected} >= {"tick", "endpoint", "added", "http", "commit"}
