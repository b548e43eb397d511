"""The follow job's state (runtime/report/follow_state.py) on hand-made micro-batches: what
a record's stamps count, lost against in flight, and replays that must not count twice.

Plain Python, except the last test, which runs `StateKeeper` on Spark frames.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.report import tables
from runtime.report.follow_state import FollowState, nearest_rank, round3
from tests.spark.conftest import SPARK

# plain Python but the last test, which needs Spark; SPARK puts them on one worker
pytestmark = SPARK

SUB, TOPIC, URL = "orders-hook", "orders", "http://hook"
EH = 77  # the endpoint's hash, as Spark's xxhash64 would give it
MEASURES = {
    "n": 1, "fetches": 0, "deliveries": 0, "failures": 0, "retries": 0, "dead_letters": 0,
    "record_ts_ms": None, "first_fetched_ms": None, "last_fetched_ms": None,
    "first_delivered_ms": None, "eh": None, "eh_max": None, "started": 0, "crashed": 0,
    "restarted": 0, "stopped": 0, "assigned": 0, "revoked": 0, "first_ms": None,
    "last_ms": None, "max_offset": None, "count_sum": None, "first_fetch_stamp": None,
    "first_delivery_stamp": None, "first_dead_letter_stamp": None, "last_stamp": None,
}
KEYS = {"kind": None, "s1": None, "s2": None, "s3": None, "n1": None, "n2": None, "v": None}


def record(offset: int, stamp: int, **measures: Any) -> dict[str, Any]:
    """A record's row as the update-mode aggregation emits it in the batch `stamp`."""
    return {**KEYS, **MEASURES, "kind": "record", "s1": SUB, "s2": TOPIC, "n1": 0,
            "n2": offset, "last_stamp": stamp, **measures}


def tick(type_: str, second: int, n: int, last_ms: int) -> dict[str, Any]:
    return {**KEYS, **MEASURES, "kind": "tick", "s1": type_, "s2": SUB, "n1": second,
            "n": n, "first_ms": second, "last_ms": last_ms}


def endpoint(deliveries: int) -> dict[str, Any]:
    return {**KEYS, **MEASURES, "kind": "endpoint", "s1": SUB, "s2": URL, "n1": EH,
            "deliveries": deliveries, "n": deliveries}


FETCHED_0 = record(1, 100, fetches=1, first_fetch_stamp=100, first_fetched_ms=1_000,
                   last_fetched_ms=1_000, record_ts_ms=990)
DELIVERED_1 = record(1, 200, fetches=1, deliveries=1, first_fetch_stamp=100,
                     first_delivery_stamp=200, first_fetched_ms=1_000, last_fetched_ms=1_000,
                     first_delivered_ms=1_030, record_ts_ms=990, eh=EH, eh_max=EH)
REDELIVERED_2 = {**DELIVERED_1, "deliveries": 2, "last_stamp": 300}


def groups(state: FollowState, grace_ms: int = 0) -> dict[str, dict[str, Any]]:
    agg = state.aggregates(grace_ms, bucket_ms=1_000)
    return {g["view"]: g for g in agg.groups}


def test_a_record_counts_once_when_its_first_fetch_and_delivery_arrive() -> None:
    state = FollowState()
    state.apply([FETCHED_0, tick("fetched", 1_000, 1, 1_000)], batch_id=0)
    assert groups(state)["partition"]["records_fetched"] == 1
    assert groups(state)["partition"]["delivered"] == 0
    assert list(state.open) == [(SUB, TOPIC, 0, 1)]

    state.apply([DELIVERED_1, endpoint(1), tick("delivered", 1_000, 1, 1_030)], batch_id=1)
    view = groups(state)
    assert (view["partition"]["records_fetched"], view["partition"]["delivered"]) == (1, 1)
    assert view["endpoint"]["k2"] == URL and view["endpoint"]["e2e_pct"] == [40, 40, 40]
    assert state.open == {} and state.version == 1


def test_a_later_delivery_of_a_delivered_record_is_a_duplicate_not_a_new_record() -> None:
    state = FollowState()
    state.apply([FETCHED_0], 0)
    state.apply([DELIVERED_1, endpoint(1)], 1)
    state.apply([REDELIVERED_2, endpoint(2)], 2)
    report = tables.build(state.aggregates(0, 1_000))
    assert (report.totals["delivered"], report.totals["duplicates"]) == (1, 1)
    (audit,) = report.table("audit").rows
    assert audit["duplicate_offsets"] == [1] and audit["duplicates"] == 1


def test_an_open_record_is_in_flight_until_the_grace_period_after_its_last_fetch() -> None:
    state = FollowState()
    state.apply([FETCHED_0, tick("fetched", 1_000, 1, 1_000)], 0)
    state.apply([tick("sent", 1_000, 1, 1_999)], 1)  # the newest event: 999 ms later
    assert state.lost_and_in_flight(grace_ms=1_000) == ([], [(SUB, TOPIC, 0, 1)])
    state.apply([tick("sent", 1_000, 2, 2_000)], 2)
    assert state.lost_and_in_flight(grace_ms=1_000) == ([(SUB, TOPIC, 0, 1)], [])
    report = tables.build(state.aggregates(1_000, 1_000))
    assert report.totals["lost"] == 1
    assert report.table("audit_offsets").rows[0]["problem"] == "lost"


def test_an_open_record_fetched_before_a_journal_gap_is_unknown_not_lost() -> None:
    """Issue 35: the live audit too says "unknown: journal gap" for a record whose outcome
    may be among dropped events; one fetched after the gap is lost."""
    fetched_later = record(2, 100, fetches=1, first_fetch_stamp=100, first_fetched_ms=1_600,
                           last_fetched_ms=1_600)
    dropped = {**tick("journal_dropped", 1_000, 1, 1_500), "s2": None, "first_ms": 1_500,
               "count_sum": 40}
    state = FollowState()
    state.apply([FETCHED_0, fetched_later, dropped, tick("sent", 5_000, 1, 5_000)], 0)
    assert state.lost_and_unknown(grace_ms=1_000) == ([(SUB, TOPIC, 0, 2)],
                                                      [(SUB, TOPIC, 0, 1)])
    report = tables.build(state.aggregates(1_000, 1_000))
    assert (report.totals["lost"], report.totals["unknown"]) == (1, 1)
    assert {r["offset"]: r["problem"] for r in report.table("audit_offsets").rows} == {
        1: "unknown: journal gap", 2: "lost"}
    assert report.gap == {"dropped": 40, "from_ms": 1_500, "to_ms": 1_500}


def test_a_batch_applied_again_to_the_stored_previous_version_counts_once() -> None:
    state = FollowState()
    state.apply([FETCHED_0, tick("fetched", 1_000, 1, 1_000)], 0)
    version_0 = state.encode()
    state.apply([DELIVERED_1, endpoint(1)], 1)
    once = state.encode()

    replayed = FollowState.decode(version_0)  # Spark runs batch 1 again after a crash
    replayed.apply([DELIVERED_1, endpoint(1)], 1)
    assert replayed.encode() == once
    assert groups(replayed)["endpoint"]["delivered"] == 1


def test_deliveries_without_an_endpoint_go_to_the_subscriptions_only_endpoint() -> None:
    state = FollowState()
    state.apply([endpoint(2), tick("delivered", 1_000, 3, 1_000)], 0)  # one without endpoint
    (row,) = [g for g in state.aggregates(0, 1_000).groups if g["view"] == "endpoint"]
    assert (row["k2"], row["deliveries"]) == (URL, 3)


@pytest.mark.parametrize(("value", "rounded"), [
    (0, 0.0), (4.3, 4.3), (1234.5, 1230.0), (0.012345, 0.0123), (999.5, 1000.0), (-12.34, -12.3),
])
def test_latencies_are_kept_to_three_significant_digits(value: float, rounded: float) -> None:
    assert round3(value) == pytest.approx(rounded)


def test_nearest_rank_percentiles_match_percentile_approx_on_exact_data() -> None:
    assert nearest_rank({float(v): 1 for v in range(1, 101)}) == ([50.0, 95.0, 99.0], 100.0)
    assert nearest_rank({5.0: 3, 7.0: 1}) == ([5.0, 7.0, 7.0], 7.0)
    assert nearest_rank({}) == (None, None)


def test_the_keeper_stores_a_version_per_batch_and_replays_from_the_previous_one(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import types as T

    from runtime.report.follow import StateKeeper

    def kind(name: str) -> T.DataType:
        strings, doubles = ("kind", "s1", "s2", "s3"), ("v",)
        return (T.StringType() if name in strings else T.DoubleType() if name in doubles
                else T.LongType())

    schema = T.StructType([T.StructField(name, kind(name)) for name in FETCHED_0])

    def frame(rows: list[dict[str, Any]]) -> Any:
        return spark.createDataFrame([[r[name] for name in FETCHED_0] for r in rows], schema)

    keeper = StateKeeper(tmp_path)
    keeper.apply(frame([FETCHED_0]), 0)
    keeper.apply(frame([DELIVERED_1]), 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "000000000000.msgpack", "000000000001.msgpack"]

    restarted = StateKeeper(tmp_path)  # killed after storing version 1, before Spark's commit
    assert restarted.version == 1
    restarted.apply(frame([DELIVERED_1]), 1)
    report, _, _ = restarted.render(grace_ms=0)
    assert (report.totals["records_fetched"], report.totals["delivered"]) == (1, 1)


def test_dead_letters_and_replays_survive_the_stored_state_and_reach_their_tables() -> None:
    dead = {**KEYS, **MEASURES, "kind": "dead_letter", "s1": SUB, "s2": TOPIC,
            "s3": "gave up after 3 attempts: 500", "n1": 0, "n2": 7, "v": 3.0,
            "first_ms": 2_000, "last_ms": 2_000}
    again = {**dead, "kind": "replay", "s3": "r-1: delivered again", "v": 1.0,
             "first_ms": 9_000, "last_ms": 9_000}
    state = FollowState()
    state.apply([dead], 0)
    state.apply([again], 1)
    report = tables.build(FollowState.decode(state.encode()).aggregates(0, 1_000))
    assert report.table("dead_letters").rows == [{
        "subscription": SUB, "topic": TOPIC, "partition": 0, "offset": 7,
        "reason": "gave up after 3 attempts: 500", "status": None, "response": None,
        "attempts": 3, "dead_lettered": 1, "last_ms": 2_000, "replayed": 1}]
    assert report.table("replays").rows == [{
        "replay_id": "r-1", "subscription": SUB, "records": 1, "delivered": 1, "failed": 0,
        "first_ms": 9_000, "last_ms": 9_000}]


def test_a_filtered_event_closes_the_open_records_its_ranges_hold() -> None:
    state = FollowState()
    fetched = [record(o, 100, fetches=1, first_fetch_stamp=100, first_fetched_ms=1_000,
                      last_fetched_ms=1_000) for o in (1, 3, 8)]
    state.apply(fetched, 0)
    filtered = {**KEYS, **MEASURES, "kind": "filtered", "s1": SUB, "s2": TOPIC,
                "s3": "0-3,5", "n1": 0}
    other = {**filtered, "n1": 1, "s3": "8"}  # another partition: closes nothing here
    state.apply([filtered, other, tick("filtered", 1_000, 2, 60_000)], 1)
    assert list(state.open) == [(SUB, TOPIC, 0, 8)]
    assert all(f["kind"] != "filtered" for f in state.facts.values())
    lost, _ = state.lost_and_in_flight(grace_ms=1_000)
    assert lost == [(SUB, TOPIC, 0, 8)]
