"""The follow job's state (runtime/report/follow_state.py) on hand-made micro-batches: what
a record's runs count, lost against in flight, and replays that must not count twice.

Plain Python, except the keeper's test, which runs `StateKeeper` on Spark frames.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pandas as pd
import pytest

from runtime.host.journal import Event
from runtime.report import tables, transforms
from runtime.report.follow_batch import NO_HASH_HIGH, NO_HASH_LOW, cursor_changes, prepared
from runtime.report.follow_state import BatchChanges, FollowState, nearest_rank, round3
from tests.spark.conftest import SPARK

# plain Python but the keeper's test, which needs Spark; SPARK puts them on one worker
pytestmark = SPARK

SUB, TOPIC, URL = "orders-hook", "orders", "http://hook"
EH = 77  # the endpoint's hash, as Spark's xxhash64 would give it
MEASURES = {
    "n": 1, "fetches": 0, "deliveries": 0, "failures": 0, "retries": 0, "dead_letters": 0,
    "started": 0, "crashed": 0, "restarted": 0, "stopped": 0, "assigned": 0, "revoked": 0,
    "first_ms": None, "last_ms": None, "max_offset": None, "count_sum": None,
}
KEYS = {"kind": None, "s1": None, "s2": None, "s3": None, "n1": None, "n2": None, "v": None}


def rec(type_: str, offset: int, ts: int, *, ranges: str | None = None, eh: int | None = None,
        e2e: float | None = None) -> dict[str, Any]:
    """A record row as runtime/report/follow_batch.py `record_rows` collects it."""
    return {"type": type_, "subscription": SUB, "topic": TOPIC, "partition": 0,
            "cursor_id": 1, "offset": offset, "ranges": ranges, "ts_ms": ts,
            "eh_low": NO_HASH_LOW if eh is None else eh,
            "eh_high": NO_HASH_HIGH if eh is None else eh, "e2e_ms": e2e}


def batch(*rows: dict[str, Any], facts: list[dict[str, Any]] | None = None) -> BatchChanges:
    changes = cursor_changes(pd.DataFrame(list(rows))) if rows else BatchChanges()
    changes.facts = facts or []
    return changes


def tick(type_: str, second: int, n: int, last_ms: int) -> dict[str, Any]:
    return {**KEYS, **MEASURES, "kind": "tick", "s1": type_, "s2": SUB, "n1": second,
            "n": n, "first_ms": second, "last_ms": last_ms}


def endpoint(deliveries: int) -> dict[str, Any]:
    return {**KEYS, **MEASURES, "kind": "endpoint", "s1": SUB, "s2": URL, "n1": EH,
            "deliveries": deliveries, "n": deliveries}


FETCHED = rec("fetched", 1, 1_000)
DELIVERED = rec("delivered", 1, 1_030, eh=EH, e2e=40.0)


def groups(state: FollowState, grace_ms: int = 0) -> dict[str, dict[str, Any]]:
    agg = state.aggregates(grace_ms, bucket_ms=1_000)
    return {g["view"]: g for g in agg.groups}


def open_keys(state: FollowState) -> list[tuple[str, str, int, int]]:
    return [key for run in state.open_runs() for key in run.records()]


def test_a_record_counts_once_when_its_first_fetch_and_delivery_arrive() -> None:
    state = FollowState()
    state.apply(batch(FETCHED, facts=[tick("fetched", 1_000, 1, 1_000)]), 0)
    assert groups(state)["partition"]["records_fetched"] == 1
    assert groups(state)["partition"]["delivered"] == 0
    assert open_keys(state) == [(SUB, TOPIC, 0, 1)]

    state.apply(batch(DELIVERED, facts=[endpoint(1), tick("delivered", 1_000, 1, 1_030)]), 1)
    view = groups(state)
    assert (view["partition"]["records_fetched"], view["partition"]["delivered"]) == (1, 1)
    assert view["endpoint"]["k2"] == URL and view["endpoint"]["e2e_pct"] == [40, 40, 40]
    assert open_keys(state) == [] and state.version == 1


def test_a_later_delivery_of_a_delivered_record_is_a_duplicate_not_a_new_record() -> None:
    state = FollowState()
    state.apply(batch(FETCHED), 0)
    state.apply(batch(DELIVERED, facts=[endpoint(1)]), 1)
    state.apply(batch(rec("delivered", 1, 2_000, eh=EH, e2e=900.0), facts=[endpoint(1)]), 2)
    report = tables.build(state.aggregates(0, 1_000))
    assert (report.totals["delivered"], report.totals["duplicates"]) == (1, 1)
    (audit,) = report.table("audit").rows
    assert audit["duplicate_offsets"] == [1] and audit["duplicates"] == 1
    assert state.e2e == {(SUB, EH): {40.0: 1}}  # the first delivery's latency only


def test_an_open_record_is_in_flight_until_the_grace_period_after_its_last_fetch() -> None:
    state = FollowState()
    state.apply(batch(FETCHED, facts=[tick("fetched", 1_000, 1, 1_000)]), 0)
    state.apply(batch(facts=[tick("sent", 1_000, 1, 1_999)]), 1)  # the newest: 999 ms later
    lost, in_flight = state.lost_and_in_flight(grace_ms=1_000)
    assert (lost, [k for run in in_flight for k in run.records()]) == ([], [(SUB, TOPIC, 0, 1)])
    state.apply(batch(facts=[tick("sent", 1_000, 1, 2_000)]), 2)
    lost, in_flight = state.lost_and_in_flight(grace_ms=1_000)
    assert ([k for run in lost for k in run.records()], in_flight) == ([(SUB, TOPIC, 0, 1)], [])
    report = tables.build(state.aggregates(1_000, 1_000))
    assert report.totals["lost"] == 1
    assert report.table("audit_offsets").rows[0]["problem"] == "lost"


def test_an_open_record_fetched_before_a_journal_gap_is_unknown_not_lost() -> None:
    """Issue 35: the live audit too says "unknown: journal gap" for a record whose outcome
    may be among dropped events; one fetched after the gap is lost."""
    dropped = {**tick("journal_dropped", 1_000, 1, 1_500), "s2": None, "first_ms": 1_500,
               "count_sum": 40}
    state = FollowState()
    state.apply(batch(FETCHED, rec("fetched", 2, 1_600),
                      facts=[dropped, tick("sent", 5_000, 1, 5_000)]), 0)
    lost, unknown = state.lost_and_unknown(grace_ms=1_000)
    assert [(r.first, r.last) for r in lost] == [(2, 2)]
    assert [(r.first, r.last) for r in unknown] == [(1, 1)]
    report = tables.build(state.aggregates(1_000, 1_000))
    assert (report.totals["lost"], report.totals["unknown"]) == (1, 1)
    assert {r["offset"]: r["problem"] for r in report.table("audit_offsets").rows} == {
        1: "unknown: journal gap", 2: "lost"}
    assert report.gap == {"dropped": 40, "from_ms": 1_500, "to_ms": 1_500}


def test_a_batch_applied_again_to_the_stored_previous_version_counts_once() -> None:
    state = FollowState()
    state.apply(batch(FETCHED, facts=[tick("fetched", 1_000, 1, 1_000)]), 0)
    version_0 = state.encode()
    state.apply(batch(DELIVERED, facts=[endpoint(1)]), 1)
    once = state.encode()

    replayed = FollowState.decode(version_0)  # Spark runs batch 1 again after a crash
    replayed.apply(batch(DELIVERED, facts=[endpoint(1)]), 1)
    assert replayed.encode() == once
    assert groups(replayed)["endpoint"]["delivered"] == 1


def test_deliveries_without_an_endpoint_go_to_the_subscriptions_only_endpoint() -> None:
    state = FollowState()
    state.apply(batch(facts=[endpoint(2), tick("delivered", 1_000, 3, 1_000)]), 0)
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
    from runtime.report.follow import StateKeeper

    def frame(*events: Event) -> Any:
        rows = [[*msgspec.structs.astuple(e), None, None] for e in events]
        return prepared(spark.createDataFrame(rows, transforms.stored_schema()))

    fetched = Event(type="fetched", ts_ms=1_000, subscription=SUB, topic=TOPIC, partition=0,
                    offset=0, count=3, offsets="0-2")
    delivered = [Event(type="delivered", ts_ms=1_010 + o, subscription=SUB, topic=TOPIC,
                       partition=0, offset=o, endpoint=URL, latency_ms=1.0, record_ts_ms=990)
                 for o in range(3)]
    keeper = StateKeeper(tmp_path)
    keeper.apply(frame(fetched), 0)
    keeper.apply(frame(*delivered), 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "000000000000.msgpack", "000000000001.msgpack"]

    restarted = StateKeeper(tmp_path)  # killed after storing version 1, before Spark's commit
    assert restarted.version == 1
    restarted.apply(frame(*delivered), 1)
    report, _, _ = restarted.render(grace_ms=0)
    assert (report.totals["records_fetched"], report.totals["delivered"]) == (3, 3)
    assert report.totals["duplicates"] == 0
    assert [len(runs) for runs in restarted._state.cursors.values()] == [1]


def test_dead_letters_and_replays_survive_the_stored_state_and_reach_their_tables() -> None:
    dead = {**KEYS, **MEASURES, "kind": "dead_letter", "s1": SUB, "s2": TOPIC,
            "s3": "gave up after 3 attempts: 500", "n1": 0, "n2": 7, "v": 3.0,
            "first_ms": 2_000, "last_ms": 2_000}
    again = {**dead, "kind": "replay", "s3": "r-1: delivered again", "v": 1.0,
             "first_ms": 9_000, "last_ms": 9_000}
    state = FollowState()
    state.apply(batch(facts=[dead]), 0)
    state.apply(batch(facts=[again]), 1)
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
    state.apply(batch(rec("fetched", 1, 1_000, ranges="1,3,8")), 0)
    other = {**rec("filtered", 8, 60_000, ranges="8"), "partition": 1}  # closes nothing here
    state.apply(batch(rec("filtered", 0, 60_000, ranges="0-3,5"), other,
                      facts=[tick("filtered", 1_000, 2, 60_000)]), 1)
    assert open_keys(state) == [(SUB, TOPIC, 0, 8)]
    assert all(f["kind"] != "filtered" for f in state.facts.values())
    lost, _ = state.lost_and_in_flight(grace_ms=1_000)
    assert [k for run in lost for k in run.records()] == [(SUB, TOPIC, 0, 8)]
