"""A subscription's life as the control plane tracks it, on plain `now` integers."""

from __future__ import annotations

from actors.delivery.control.status import SubscriptionStatus


def test_since_changes_with_the_state_not_with_the_reason() -> None:
    status = SubscriptionStatus("failed", since_ms=5, reason="a")
    assert status.move("failed", 50, "b") is False and status.since_ms == 5
    assert status.move("running", 60) is True and status.since_ms == 60


def test_a_retry_shows_its_wall_time_until_the_subscription_runs_or_pauses() -> None:
    status = SubscriptionStatus("starting", since_ms=0)
    status.retrying(100, "no broker", broker_down=True, delay_ms=500)
    assert (status.state, status.reason, status.retry_at_ms) == ("waiting_for_broker",
                                                                 "no broker", 600)
    assert status.as_dict()["next_attempt_at"] == 600
    status.move("paused", 700, "paused by request")
    assert status.retry_at_ms is None and status.as_dict()["next_attempt_at"] is None
