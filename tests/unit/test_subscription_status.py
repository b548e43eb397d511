"""A subscription's life as the service tracks it, on plain `now` integers."""

from __future__ import annotations

from actors.delivery.control.status import RETRY_CAP_MS, SubscriptionStatus


def test_failed_starts_back_off_to_a_cap_and_running_resets_the_count() -> None:
    status = SubscriptionStatus("starting", since_ms=0)
    delays = [status.failed(now, "boom", broker_down=False) for now in range(0, 8000, 1000)]
    assert delays[:4] == [500, 1000, 2000, 4000]
    assert set(delays[4:]) == {RETRY_CAP_MS}
    status.move("running", 9000)
    assert status.failures == 0 and status.retry_at_ms is None
    assert status.failed(10_000, "boom", broker_down=False) == 500


def test_a_start_is_due_only_when_failed_and_its_time_has_come() -> None:
    status = SubscriptionStatus("running", since_ms=0)
    assert not status.due(10**9)
    status.failed(100, "no broker", broker_down=True)
    assert status.state == "waiting_for_broker" and status.reason == "no broker"
    assert not status.due(599) and status.due(600)
    status.move("paused", 700)
    assert not status.due(10**9)


def test_since_changes_with_the_state_not_with_the_reason() -> None:
    status = SubscriptionStatus("failed", since_ms=5, reason="a")
    assert status.move("failed", 50, "b") is False and status.since_ms == 5
    assert status.move("running", 60) is True and status.since_ms == 60
