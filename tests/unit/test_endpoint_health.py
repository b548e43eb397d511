"""EndpointHealth: the error rate over a sliding window, failing, recent failures."""

from __future__ import annotations

from actors.delivery.egress.outlet import HEALTH_WINDOW, RECENT_FAILURES, EndpointHealth
from actors.delivery.egress.status import RecentFailure


def test_the_error_rate_is_over_the_last_window_of_outcomes() -> None:
    health = EndpointHealth()
    assert health.error_rate == 0.0 and not health.failing
    for _ in range(HEALTH_WINDOW):
        health.record(False, 500, "boom", 1)
    assert health.error_rate == 1.0 and health.failing
    for i in range(HEALTH_WINDOW // 4):  # a quarter of the failures leave the window
        health.record(True, 200, None, 2 + i)
    assert health.error_rate == 0.75
    assert not health.failing  # the last answer was a success
    assert health.last_success_at == 1 + HEALTH_WINDOW // 4
    for _ in range(HEALTH_WINDOW):
        health.record(True, 200, None, 3)
    assert health.error_rate == 0.0


def test_failing_needs_half_the_window_and_the_last_answer() -> None:
    health = EndpointHealth()
    for ok in (True, True, False):
        health.record(ok, 200 if ok else 503, None if ok else "unavailable", 1)
    assert not health.failing  # a third failed
    health.record(False, 503, "unavailable", 2)
    assert health.failing  # half, and the last one


def test_recent_failures_keep_the_newest_first_and_only_a_few() -> None:
    health = EndpointHealth()
    assert health.status().recent_failures == []
    for at in range(RECENT_FAILURES + 3):
        health.record(False, 500, f"e{at}", at)
    failures = health.status().recent_failures
    assert len(failures) == RECENT_FAILURES
    assert failures[0] == RecentFailure(at=RECENT_FAILURES + 2, status=500,
                                        error=f"e{RECENT_FAILURES + 2}")
    assert health.last_error == f"e{RECENT_FAILURES + 2}"
