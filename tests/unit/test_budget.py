"""RestartBudget: OTP intensity/period with exact virtual times."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.kernel.budget import RestartBudget


def record_all(budget: RestartBudget, times: list[int]) -> list[bool]:
    return [budget.record(t) for t in times]


def test_a_fourth_restart_within_the_period_exceeds_an_intensity_of_three() -> None:
    budget = RestartBudget(intensity=3, period_ms=5000)
    assert record_all(budget, [0, 1000, 2000, 3000]) == [True, True, True, False]


def test_restarts_older_than_the_period_no_longer_count() -> None:
    budget = RestartBudget(intensity=3, period_ms=5000)
    assert record_all(budget, [0, 1000, 2000, 6000]) == [True, True, True, True]


def test_a_restart_exactly_one_period_ago_still_counts_as_in_otp() -> None:
    budget = RestartBudget(intensity=3, period_ms=5000)
    assert record_all(budget, [0, 1000, 2000, 5000]) == [True, True, True, False]
    budget = RestartBudget(intensity=3, period_ms=5000)
    assert record_all(budget, [0, 1000, 2000, 5001]) == [True, True, True, True]


def test_intensity_zero_allows_no_restart() -> None:
    assert RestartBudget(intensity=0, period_ms=5000).record(0) is False


def test_restarts_at_the_same_instant_count_separately() -> None:
    budget = RestartBudget(intensity=2, period_ms=1000)
    assert record_all(budget, [7, 7, 7]) == [True, True, False]


def test_a_steady_trickle_below_the_rate_never_exceeds() -> None:
    budget = RestartBudget(intensity=3, period_ms=5000)
    assert all(record_all(budget, list(range(0, 100_000, 1700))))


def test_the_budget_recovers_after_a_quiet_period() -> None:
    budget = RestartBudget(intensity=1, period_ms=1000)
    assert record_all(budget, [0, 10, 2000]) == [True, False, True]


def test_time_going_backwards_is_rejected() -> None:
    budget = RestartBudget(intensity=3, period_ms=5000)
    budget.record(1000)
    with pytest.raises(ValueError, match="backwards"):
        budget.record(999)


@pytest.mark.parametrize(("intensity", "period_ms"), [(-1, 1000), (3, 0)])
def test_an_invalid_budget_is_rejected(intensity: int, period_ms: int) -> None:
    with pytest.raises(ValueError):
        RestartBudget(intensity, period_ms)


def test_repr_shows_recent_restarts_and_the_limits() -> None:
    budget = RestartBudget(intensity=3, period_ms=5000)
    record_all(budget, [0, 1000])
    assert repr(budget) == "<RestartBudget recent=2 intensity=3 period=5000ms>"


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 4),
    st.integers(1, 50),
    st.lists(st.integers(0, 30), max_size=40),
)
def test_budget_agrees_with_counting_every_restart_in_the_window(
    intensity: int, period_ms: int, steps: list[int]
) -> None:
    budget, times, now = RestartBudget(intensity, period_ms), [], 0
    for step in steps:
        now += step
        times.append(now)
        in_window = sum(1 for t in times if now - t <= period_ms)
        assert budget.record(now) is (in_window <= intensity)
