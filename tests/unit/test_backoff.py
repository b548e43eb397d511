"""Backoff and Retry-After: exact delays from a fake random source and a fake wall clock."""

from __future__ import annotations

import pytest

from runtime.kernel.backoff import HARD_CAP_MS, Backoff, RestartBackoff, parse_retry_after

NOW = 1_700_000_000_000  # epoch ms: 2023-11-14T22:13:20Z


def no_jitter() -> float:
    return 0.0


def test_a_constant_delay_is_the_same_for_every_attempt() -> None:
    backoff = Backoff(initial_ms=500)
    assert [backoff.delay_ms(n, no_jitter) for n in (1, 2, 10)] == [500, 500, 500]


def test_exponential_delays_grow_by_the_multiplier_from_the_first_retry() -> None:
    backoff = Backoff(initial_ms=100, multiplier=2.0)
    assert [backoff.delay_ms(n, no_jitter) for n in (1, 2, 3, 4)] == [100, 200, 400, 800]


def test_delays_stop_growing_at_max_ms() -> None:
    backoff = Backoff(initial_ms=100, multiplier=2.0, max_ms=1000)
    assert [backoff.delay_ms(n, no_jitter) for n in (4, 5, 6)] == [800, 1000, 1000]


def test_without_max_ms_delays_stop_at_the_hard_cap() -> None:
    backoff = Backoff(initial_ms=1000, multiplier=10.0)
    assert backoff.delay_ms(30, no_jitter) == HARD_CAP_MS


def test_a_retry_forever_record_never_overflows() -> None:
    backoff = Backoff(initial_ms=100, multiplier=2.0, max_ms=60_000)
    assert backoff.delay_ms(100_000, no_jitter) == 60_000


def test_jitter_only_shortens_the_delay_by_at_most_its_fraction() -> None:
    backoff = Backoff(initial_ms=1000, jitter=0.25)
    assert backoff.delay_ms(1, lambda: 0.0) == 1000
    assert backoff.delay_ms(1, lambda: 0.5) == 875
    assert backoff.delay_ms(1, lambda: 0.999999) == 750


def test_full_jitter_spreads_over_the_whole_delay() -> None:
    backoff = Backoff(initial_ms=1000, jitter=1.0)
    assert backoff.delay_ms(1, lambda: 0.9) == 100


def test_retry_after_is_a_lower_bound() -> None:
    backoff = Backoff(initial_ms=100)
    assert backoff.delay_ms(1, no_jitter, retry_after_ms=5000) == 5000


def test_a_short_retry_after_does_not_shorten_the_delay() -> None:
    backoff = Backoff(initial_ms=3000)
    assert backoff.delay_ms(1, no_jitter, retry_after_ms=1000) == 3000


def test_an_absurd_retry_after_is_capped_at_an_hour() -> None:
    backoff = Backoff(initial_ms=100, max_ms=1000)
    assert backoff.delay_ms(1, no_jitter, retry_after_ms=10**12) == HARD_CAP_MS


def test_a_max_ms_above_an_hour_also_raises_the_retry_after_cap() -> None:
    backoff = Backoff(initial_ms=100, max_ms=2 * HARD_CAP_MS)
    assert backoff.delay_ms(1, no_jitter, retry_after_ms=10**12) == 2 * HARD_CAP_MS


def test_jitter_never_undercuts_retry_after() -> None:
    backoff = Backoff(initial_ms=10_000, jitter=1.0)
    assert backoff.delay_ms(1, lambda: 0.99, retry_after_ms=2000) == 2000


def test_attempt_counts_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        Backoff(initial_ms=100).delay_ms(0)


def test_the_default_random_source_stays_within_the_jitter_range() -> None:
    backoff = Backoff(initial_ms=1000, jitter=0.5)
    assert all(500 <= backoff.delay_ms(1) <= 1000 for _ in range(100))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_ms": -1}, "initial_ms"),
        ({"initial_ms": 100, "multiplier": 0.5}, "multiplier"),
        ({"initial_ms": 100, "multiplier": float("nan")}, "multiplier"),
        ({"initial_ms": 100, "max_ms": 50}, "max_ms"),
        ({"initial_ms": 100, "max_ms": -1}, "max_ms"),
        ({"initial_ms": 100, "jitter": 1.5}, "jitter"),
        ({"initial_ms": 100, "jitter": -0.1}, "jitter"),
    ],
)
def test_an_invalid_policy_is_rejected_with_the_field_name(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_retry_after_in_seconds_becomes_milliseconds() -> None:
    assert parse_retry_after("120", NOW) == 120_000
    assert parse_retry_after(" 0 ", NOW) == 0
    assert parse_retry_after("1.5", NOW) == 1500


def test_retry_after_as_an_http_date_is_read_against_now() -> None:
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:50 GMT", NOW) == 30_000


def test_retry_after_in_the_past_means_retry_now() -> None:
    assert parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", NOW) == 0


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "soon", "-5", "1e3", "12 seconds", "Tue, 99 Nov 2023", "9" * 400, "٣"],
)
def test_a_bad_retry_after_is_ignored(value: str | None) -> None:
    assert parse_retry_after(value, NOW) is None


def test_restart_backoff_doubles_per_failure_in_a_row_to_its_cap_and_a_success_resets() -> None:
    restarts = RestartBackoff(Backoff(initial_ms=500, multiplier=2.0, max_ms=5000))
    assert [restarts.failed() for _ in range(6)] == [500, 1000, 2000, 4000, 5000, 5000]
    assert restarts.failures == 6
    restarts.succeeded()
    assert restarts.failures == 0 and restarts.failed() == 500


def test_the_supervisors_restart_backoff_starts_at_200_ms_and_stops_at_5_s() -> None:
    restarts = RestartBackoff()
    assert [restarts.failed() for _ in range(7)] == [200, 400, 800, 1600, 3200, 5000, 5000]
