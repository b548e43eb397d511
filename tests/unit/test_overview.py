"""The summary's rows (actors/delivery/control/overview.py): why a subscription needs
attention, the order, nulls for what was not counted, secrets kept out of the endpoint,
search and paging."""

from __future__ import annotations

import json

from actors.delivery.control.overview import (
    LAGGING_RECORDS,
    overview,
    row_of,
    rows_of,
    select,
)
from actors.delivery.control.status import Counters, Live, SubscriptionStatus
from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.egress.status import EndpointStatus, OriginStatus, RecentFailure
from actors.delivery.path.status import PartitionStatus


def consumer(sub_id: str, uri: str = "https://hooks.example/in?key=secret",
             topic: str = "orders") -> Consumer:
    return decode_consumer(json.dumps({
        "id": sub_id, "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": topic}],
        "subscriptionMethod": {"type": "http", "uri": uri}}).encode())


def origin(breaker: str = "closed", name: str = "https://hooks.example") -> OriginStatus:
    return OriginStatus(origin=name, breaker=breaker,  # type: ignore[arg-type]
                        breaker_enabled=True, opened_at=None, probe_at=None,
                        failure_ratio=0.5, min_requests=20, open_ms=10_000,
                        throttled_until=None, rate_limit=None, max_connections=1000,
                        transitions=[])


def running(lag: int | None = 0, last_status: int | None = 200, error_rate: float = 0.0,
            breaker: str = "closed", stalled: bool = False) -> Live:
    failures = [RecentFailure(at=1, status=500, error="HTTP 500")] if error_rate else []
    endpoint = EndpointStatus(last_status=last_status, last_error="HTTP 500" if failures
                              else None, last_success_at=None, error_rate=error_rate,
                              recent_failures=failures, origin=origin(breaker))
    partition = PartitionStatus(topic="orders", partition=0, committed=None, highwater=None,
                                lag=lag, stalled_for_ms=60_000 if stalled else None)
    return Live(partitions=[partition], endpoint=endpoint,
                counters=Counters(delivered=7, failed_attempts=1, dead_lettered=0))


def status(state: str = "running") -> SubscriptionStatus:
    return SubscriptionStatus(state=state, since_ms=0)  # type: ignore[arg-type]


def test_each_reason_for_attention_and_none_for_a_healthy_one() -> None:
    def reasons(live: Live, state: str = "running") -> list[str]:
        return row_of(consumer("a"), status(state), live).attention

    assert reasons(running()) == []
    assert reasons(running(last_status=500, error_rate=0.6)) == ["failing"]
    assert reasons(running(last_status=200, error_rate=0.6)) == []  # it recovered
    assert reasons(running(breaker="open")) == ["breaker_open"]
    assert reasons(running(stalled=True)) == ["stalled"]
    assert reasons(running(lag=LAGGING_RECORDS)) == ["lagging"]
    assert reasons(running(lag=LAGGING_RECORDS - 1)) == []
    assert reasons(Live(), "paused") == ["paused"]
    assert reasons(Live(), "waiting_for_broker") == ["failing"]
    assert reasons(Live(), "disabled") == ["failing"]


def test_a_stopped_subscription_shows_null_counters_and_a_redacted_endpoint() -> None:
    row = row_of(consumer("a"), status("paused"), Live())
    assert (row.lag, row.delivered, row.error_rate, row.breaker) == (None, None, None, None)
    assert row.endpoint == "https://hooks.example/in?key=***"
    quiet = row_of(consumer("b"), status(), running(lag=None))
    assert quiet.lag is None and quiet.delivered == 7


def test_rows_needing_attention_come_first_most_urgent_first_and_totals_count_all() -> None:
    consumers = {c.key: c for c in (consumer("ok1"), consumer("paused"), consumer("ok2"),
                                    consumer("broken"), consumer("slow"))}
    statuses = {k: status("paused" if k.startswith("paused") else "running")
                for k in consumers}
    lives = {"ok1_g": running(), "ok2_g": running(lag=3), "slow_g": running(lag=5000),
             "broken_g": running(last_status=503, error_rate=1.0, breaker="open")}
    view = overview(10, rows_of(consumers, statuses, lives), [origin(), origin("open", "x")])
    assert [r.key for r in view.rows] == ["broken_g", "slow_g", "paused_g", "ok1_g", "ok2_g"]
    assert view.totals.needing_attention == 3 and view.totals.lag == 5003
    assert view.totals.states == {"paused": 1, "running": 4}
    assert view.totals.attention["breaker_open"] == 1
    assert [o.origin for o in view.origins] == ["x", "https://hooks.example"]


def test_select_searches_id_group_topic_endpoint_and_state_and_pages() -> None:
    consumers = {c.key: c for c in (consumer("a1"), consumer("a2", topic="refunds"),
                                    consumer("b1", uri="http://other.test/x"))}
    view = overview(0, rows_of(consumers, {k: status() for k in consumers}, {}), [])
    assert [r.key for r in select(view, text="REFUNDS").items] == ["a2_g"]
    assert [r.key for r in select(view, text="other.test").items] == ["b1_g"]
    assert select(view, text="running").matched == 3
    assert select(view, state="paused").matched == 0
    page = select(view, offset=1, limit=1)
    assert [r.key for r in page.items] == ["a2_g"] and page.matched == 3
