"""The summary's rows (actors/delivery/control/overview.py): read from the partition
actors' metric series and the origins' breakers; why a subscription needs attention, the
order, nulls for what was not counted, secrets kept out of the endpoint, whether its
attempts fail from how its counters move, readiness, search and paging."""

from __future__ import annotations

import json

from actors.delivery.control.overview import (
    LAGGING_RECORDS,
    Measured,
    Outcomes,
    Rows,
    measured,
    overview,
    readiness,
    row_of,
    select,
)
from actors.delivery.control.status import SubscriptionStatus
from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.egress.status import OriginStatus
from runtime.host.metrics import Registry, label_key

STALL_MS = 60_000


def consumer(sub_id: str, uri: str = "https://hooks.example/in?key=secret",
             topic: str = "orders") -> Consumer:
    return decode_consumer(json.dumps({
        "id": sub_id, "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": topic}],
        "subscriptionMethod": {"type": "http", "uri": uri}}).encode())


def origin(breaker: str = "closed", name: str = "https://hooks.example:443") -> OriginStatus:
    return OriginStatus(origin=name, breaker=breaker,  # type: ignore[arg-type]
                        breaker_enabled=True, opened_at=None, probe_at=None,
                        failure_ratio=0.5, min_requests=20, open_ms=10_000,
                        throttled_until=None, rate_limit=None, max_connections=1000,
                        transitions=[])


def status(state: str = "running") -> SubscriptionStatus:
    return SubscriptionStatus(state=state, since_ms=0)  # type: ignore[arg-type]


def series(lag: float = 0, oldest_s: float = 0, delivered: float = 7) -> Measured:
    return Measured(partitions=1, delivered=delivered, lag=lag, oldest_s=oldest_s)


def reasons(shown: Measured | None, state: str = "running", failing: bool = False,
            breaker: str = "closed") -> list[str]:
    return row_of(consumer("a"), status(state), shown, {"https://hooks.example:443": breaker},
                  failing, STALL_MS).attention


def test_each_reason_for_attention_and_none_for_a_healthy_one() -> None:
    assert reasons(series()) == []
    assert reasons(series(), failing=True) == ["failing"]
    assert reasons(series(), breaker="half_open") == ["breaker_open"]
    assert reasons(series(oldest_s=STALL_MS / 1000)) == ["stalled"]
    assert reasons(series(oldest_s=STALL_MS / 1000 - 1)) == []
    assert reasons(series(lag=LAGGING_RECORDS)) == ["lagging"]
    assert reasons(series(lag=LAGGING_RECORDS - 1)) == []
    assert reasons(None, "paused") == ["paused"]
    assert reasons(None, "waiting_for_broker") == ["failing"]
    assert reasons(None, "disabled") == ["failing"]


def test_the_series_are_summed_per_subscription_from_the_metrics() -> None:
    metrics = Registry()
    for partition, lag in ((0, 3), (1, 4)):
        key = label_key(subscription="a_g", topic="orders", partition=partition)
        metrics.gauge("hookstream_lag", "").child(key).set(lag)
        metrics.gauge("hookstream_oldest_pending_seconds", "").child(key).set(lag * 10)
        metrics.counter("hookstream_delivered_total", "").child(key).inc(5)
    found = measured(metrics)
    assert found == {"a_g": Measured(partitions=2, delivered=10, lag=7, oldest_s=40)}


def test_a_subscription_without_series_shows_nulls_and_a_redacted_endpoint() -> None:
    row = row_of(consumer("a"), status("paused"), None, {}, False, STALL_MS)
    assert (row.lag, row.delivered, row.oldest_pending_ms, row.breaker) == \
        (None, None, None, None)
    assert row.endpoint == "https://hooks.example/in?key=***"
    assert row.origin == "https://hooks.example:443"


def test_attempts_fail_when_failures_outgrow_deliveries_and_stay_so_while_nothing_moves(
        ) -> None:
    outcomes = Outcomes()
    assert outcomes.failing("a", delivered=0, failed=2)  # first seen: failed, none ok
    assert outcomes.failing("a", delivered=0, failed=2)  # nothing moved: as before
    assert not outcomes.failing("a", delivered=3, failed=3)  # more deliveries
    assert not outcomes.failing("a", delivered=3, failed=3)
    assert outcomes.failing("a", delivered=4, failed=6)  # more failures
    assert not outcomes.failing("a", delivered=0, failed=0)  # started anew: nothing yet
    assert not outcomes.failing("b", delivered=5, failed=2)
    outcomes.keep(["b"])
    assert outcomes.failing("a", delivered=0, failed=1)  # forgotten: seen anew


def test_rows_needing_attention_come_first_most_urgent_first_and_totals_count_all() -> None:
    consumers = {c.key: c for c in (consumer("ok1"), consumer("paused"), consumer("ok2"),
                                    consumer("broken", uri="https://down.test/x"),
                                    consumer("slow"))}
    statuses = {k: status("paused" if k.startswith("paused") else "running")
                for k in consumers}
    shown = {"ok1_g": series(), "ok2_g": series(lag=3), "slow_g": series(lag=5000),
             "broken_g": Measured(partitions=1, failed_attempts=4)}
    origins = [origin(), origin("open", "https://down.test:443")]
    view = overview(10, Rows().gather(consumers, statuses, shown, origins, STALL_MS),
                    origins)
    assert [r.key for r in view.rows] == ["broken_g", "slow_g", "paused_g", "ok1_g", "ok2_g"]
    assert view.rows[0].attention == ["failing", "breaker_open"]
    assert view.totals.needing_attention == 3 and view.totals.lag == 5003
    assert view.totals.states == {"paused": 1, "running": 4}
    assert view.totals.attention["breaker_open"] == 1
    assert [o.origin for o in view.origins] == ["https://down.test:443", "https://hooks.example:443"]


def test_readiness_from_the_rows_names_what_is_not_running_or_has_no_partition() -> None:
    consumers = {c.key: c for c in (consumer("up"), consumer("idle"), consumer("down"),
                                    consumer("rest"), consumer("stuck"))}
    statuses = {"up_g": status(), "idle_g": status(), "down_g": status("failed"),
                "rest_g": status("paused"), "stuck_g": status()}
    shown = {"up_g": series(), "stuck_g": series(oldest_s=STALL_MS)}
    rows = Rows().gather(consumers, statuses, shown, [], STALL_MS)
    assert readiness(rows, STALL_MS) == [
        "subscription down_g is failed",
        "subscription idle_g has no partitions assigned yet",
        "subscription stuck_g stalled: a record pending for over 60 s"]


def test_select_searches_id_group_topic_endpoint_and_state_and_pages() -> None:
    consumers = {c.key: c for c in (consumer("a1"), consumer("a2", topic="refunds"),
                                    consumer("b1", uri="http://other.test/x"))}
    rows = Rows().gather(consumers, {k: status() for k in consumers}, {}, [], STALL_MS)
    view = overview(0, rows, [])
    assert [r.key for r in select(view, text="REFUNDS").items] == ["a2_g"]
    assert [r.key for r in select(view, text="other.test").items] == ["b1_g"]
    assert select(view, text="running").matched == 3
    assert select(view, state="paused").matched == 0
    page = select(view, offset=1, limit=1)
    assert [r.key for r in page.items] == ["a2_g"] and page.matched == 3


def test_rows_are_built_again_only_when_what_they_show_changed() -> None:
    consumers = {c.key: c for c in (consumer("a"), consumer("b"))}
    statuses = {k: status() for k in consumers}
    rows = Rows()
    first = rows.gather(consumers, statuses, {"a_g": series(), "b_g": series()}, [],
                        STALL_MS)
    again = rows.gather(consumers, statuses, {"a_g": series(), "b_g": series(lag=5)}, [],
                        STALL_MS)
    assert again[0] is first[0]  # a: nothing moved
    assert again[1] is not first[1] and again[1].lag == 5
    statuses["a_g"] = status("paused")  # the registry replaces a changed status
    paused = rows.gather(consumers, statuses, {"b_g": series(lag=5)}, [], STALL_MS)
    assert paused[0].state == "paused" and paused[0].delivered is None
    assert paused[1] is again[1]


def test_reading_the_series_makes_no_family() -> None:
    metrics = Registry()
    assert measured(metrics) == {}
    assert "hookstream_lag" not in metrics.render()  # its help text comes with its owner


def test_refused_commits_are_read_from_the_members_series_until_kafka_takes_one() -> None:
    """#34 item 16: the row shows each refused position beside the last one Kafka
    accepted from this instance, and needs attention while any is refused."""
    from aiokafka import TopicPartition

    from actors.delivery.control.overview import refusals
    from actors.delivery.control.status import RefusedCommit
    from actors.delivery.path.member.commits import Position
    from actors.delivery.path.member.refusals import RefusalSeries

    metrics = Registry()
    shown = RefusalSeries(metrics)
    seat0, seat1 = ("a_g", TopicPartition("orders", 0)), ("a_g", TopicPartition("orders", 1))
    held = {("g", TopicPartition("orders", 1)): 12}
    shown.settled({seat0: Position("g", 30, 1), seat1: Position("g", 40, 1)}, [], [],
                  lambda group, tp: held.get((group, tp)))
    found = refusals(metrics)
    assert found == {"a_g": [
        RefusedCommit(topic="orders", partition=0, position=30, accepted=None),
        RefusedCommit(topic="orders", partition=1, position=40, accepted=12)]}
    row = row_of(consumer("a"), status(), series(), {}, False, STALL_MS,
                 refused=found["a_g"])
    assert row.attention == ["commit_refused"]
    shown.settled({seat0: Position("g", 31, 1)}, [seat0], [], lambda group, tp: 31)
    assert [c.partition for c in refusals(metrics)["a_g"]] == [1]
    shown.clear([seat1])  # its cursor retired
    assert refusals(metrics) == {}
    assert "hookstream_commit_refused_offset{" not in metrics.render()
