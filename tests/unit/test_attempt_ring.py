"""The attempts ring (actors/delivery/egress/attempts.py): bounded, newest last, snippets
kept for the newest failures only, and the state of a record from its attempts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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
    for offset in range(3):
        ring.add(attempt(offset))
    assert [a.response for a in ring] == [None, "no", "no"]
    assert [a.error for a in ring] == [None, None, None]


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


def test_the_ring_wraps_and_gives_back_every_field_as_added() -> None:
    ring = AttemptRing(capacity=4, responses=3)
    added = [Attempt("orders" if n % 2 else "billing", n % 3, 10_000_000_000 + n,
                     1_700_000_000_000 + n, 1_800_000_000_000 + n, n + 1,
                     ("delivered", "failed", "skipped")[n % 3],  # type: ignore[arg-type]
                     None if n % 3 == 1 else 200 + n, None if n == 5 else n / 3,
                     f"e{n}" if n % 3 else None, f"r{n}" if n % 3 == 1 else None)
             for n in range(10)]
    for a in added:
        ring.add(a)
    kept = list(ring)
    assert len(ring) == 4 and [a.offset for a in kept] == [10_000_000_006 + i for i in range(4)]
    assert kept == added[6:]  # every field, None included, after wrapping twice
    assert ring.recent(2) == added[8:] and ring.oldest_at == added[6].at
    assert ring.of_record(("billing", 0, 10_000_000_006)) == ([added[6]], None)
    assert ring.failed(10) == [added[7]]
    assert ring.find(added[9].webhook_id) == added[9].coordinates


def test_a_response_leaves_with_its_slot_and_only_the_newest_are_kept() -> None:
    ring = AttemptRing(capacity=3, responses=1)
    for offset in range(3):
        ring.add(attempt(offset))
    assert [a.response for a in ring] == [None, None, "no"]
    ring.add(attempt(3, outcome="delivered", response=None))  # overwrites offset 0's slot
    ring.add(attempt(4, outcome="delivered", response=None))
    assert [(a.offset, a.response) for a in ring] == [(2, "no"), (3, None), (4, None)]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 90_000), st.floats(0, 70_000)),
                max_size=60))
def test_a_delivered_attempt_is_kept_as_record_keeps_it(
        steps: list[tuple[bool, int, float]]) -> None:
    general, fast = AttemptRing(capacity=7, responses=2), AttemptRing(capacity=7, responses=2)
    at = 0
    for offset, (ok, step, latency) in enumerate(steps):
        at += step
        if ok:
            general.record("t", 1, offset, 5, at, 1, "delivered", 200, latency, None, None)
            fast.delivered("t", 1, offset, 5, at, 1, 200, latency)
        else:
            for ring in (general, fast):
                ring.record("t", 1, offset, 5, at, 2, "failed", 503, latency, "HTTP 503",
                            "busy")
    assert list(fast) == list(general)
    assert fast.failed(10) == general.failed(10)
    assert fast.series.as_dict(at) == general.series.as_dict(at)
    assert repr(fast) == repr(general)
