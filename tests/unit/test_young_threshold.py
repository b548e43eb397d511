"""The young generation grows with the objects kept out of the collector, within bounds."""

from __future__ import annotations

from runtime.host.app import GC_YOUNG_MAX, GC_YOUNG_THRESHOLD, young_threshold


def test_a_small_runtime_keeps_the_base_threshold() -> None:
    assert young_threshold(0) == GC_YOUNG_THRESHOLD
    assert young_threshold(450_000) == GC_YOUNG_THRESHOLD  # a thousand subscriptions


def test_it_grows_with_what_is_kept_and_stops_at_the_maximum() -> None:
    assert young_threshold(1_500_000) == 50_000
    assert young_threshold(3_000_000) == GC_YOUNG_MAX  # ten thousand subscriptions
    assert young_threshold(30_000_000) == GC_YOUNG_MAX
    sizes = [young_threshold(n) for n in range(0, 5_000_000, 100_000)]
    assert sizes == sorted(sizes)
