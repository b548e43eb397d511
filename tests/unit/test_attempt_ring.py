"""The attempts ring (actors/delivery/egress/attempts.py): bounded, newest last, snippets
kept for the newest failures only, and the state of a record from its attempts."""

from __future__ import annotations

from actors.delivery.document.signing import webhook_id
from actors.delivery.egress.attempts import (
    Attempt,
    AttemptRing,
    GiveUp,
    Outcome,
    Series,
    snippet,
    state_of,
)


def attempt(offset: int, number: int = 1, outcome: Outcome = "failed", at: int = 0,
            response: str | None = "no") -> Attempt:
    return Attempt("orders", 0, offset, 1_700_000_000_000 + offset, at, number, outcome,
                   500 if outcome == "failed" else 200, 1.5, None, response)


def test_the_ring_keeps_the_newest_attempts_and_finds_a_record_by_webhook_id() -> None:
    ring = AttemptRing(capacity=3)
    for offset in range(5):
        ring.add(attempt(offset, at=offset))
    assert [a.offset for a in ring] == [2, 3, 4] and ring.oldest_at == 2
    assert ring.of_record(("orders", 0, 1)) == ([], None)
    assert ring.find(webhook_id("orders", 0, 3, 1_700_000_000_003)) == ("orders", 0, 3)
    assert ring.find(webhook_id("orders", 0, 0, 1_700_000_000_000)) is None


def test_only_the_newest_failures_keep_their_response() -> None:
    ring = AttemptRing(capacity=10, responses=2)
    added = [attempt(offset) for offset in range(3)]
    for a in added:
        ring.add(a)
    assert [a.response for a in added] == [None, "no", "no"]


def test_failed_lists_the_newest_failures_oldest_first() -> None:
    ring = AttemptRing()
    for offset, outcome in enumerate(["failed", "delivered", "failed", "failed"]):
        ring.add(attempt(offset, outcome=outcome))  # type: ignore[arg-type]
    assert [a.offset for a in ring.failed(2)] == [2, 3]
    assert [a.offset for a in ring.failed(10)] == [0, 2, 3]


def test_the_state_follows_the_last_attempt_and_a_later_give_up() -> None:
    failed, ok = attempt(0, 1, "failed", at=10), attempt(0, 2, "delivered", at=20)
    assert state_of([failed], None) == "retrying"
    assert state_of([failed, ok], None) == "delivered"
    assert state_of([attempt(0, 1, "skipped")], None) == "skipped"
    assert state_of([failed], GiveUp(15, "dead_lettered", "gave up")) == "dead_lettered"
    assert state_of([failed, ok], GiveUp(15, "dead_lettered", "x")) == "delivered"  # replayed
    assert state_of([failed], GiveUp(15, "retry_scheduled", "moved")) == "retrying"
    assert state_of([], None) == "unknown"


def test_a_snippet_is_the_first_kib_as_text() -> None:
    assert snippet(b"") is None and snippet(None) is None
    text = snippet("é".encode() * 600)
    assert text is not None and len(text.encode()) <= 1024 and text.startswith("éé")


def test_the_series_counts_deliveries_per_minute_and_the_latency_steps() -> None:
    series = Series(bucket_ms=60_000, buckets=3)
    for latency in (1.0, 1.5, 3.0, 40.0):
        series.add(120_000 + 5, latency, delivered=True)
    series.add(120_010, 4000.0, delivered=False)  # a failed attempt: latency, no delivery
    series.add(0, 1.0, delivered=True)  # the oldest minute
    shown = series.as_dict(now_ms=150_000)
    assert shown["start_ms"] == 0 and shown["bucket_ms"] == 60_000
    assert shown["delivered_per_s"] == [round(1 / 60, 3), 0, round(4 / 60, 3)]
    assert shown["p50_ms"] == [1.0, None, 5.0]  # 3 ms is in the step up to 5 ms
    assert shown["p99_ms"] == [1.0, None, 5000.0]
    assert series.as_dict(now_ms=400_000)["p50_ms"] == [None, None, None]  # all gone by
