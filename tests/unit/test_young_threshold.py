"""The young generation grows with the objects kept out of the collector, within bounds."""

from __future__ import annotations

import gc

import pytest

from runtime.host import app
from runtime.host.app import (
    GC_YOUNG_MAX,
    GC_YOUNG_SIZING_MS,
    GC_YOUNG_THRESHOLD,
    Runtime,
    young_threshold,
)
from runtime.host.config import parse_config
from runtime.kernel.clock import FakeClock


def test_a_small_runtime_keeps_the_base_threshold() -> None:
    assert young_threshold(0) == GC_YOUNG_THRESHOLD
    assert young_threshold(450_000) == GC_YOUNG_THRESHOLD  # a thousand subscriptions


def test_it_grows_with_what_is_kept_and_stops_at_the_maximum() -> None:
    assert young_threshold(1_500_000) == 50_000
    assert young_threshold(3_000_000) == GC_YOUNG_MAX  # ten thousand subscriptions
    assert young_threshold(30_000_000) == GC_YOUNG_MAX
    sizes = [young_threshold(n) for n in range(0, 5_000_000, 100_000)]
    assert sizes == sorted(sizes)


async def test_keeps_asked_between_two_sizings_size_it_once_more_when_it_may(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of subscribes (each asks to keep its actors) sizes the young generation at
    its first keep and, once `GC_YOUNG_SIZING_MS` has passed, again for what the later
    ones kept: once, not once per keep."""
    clock = FakeClock()
    runtime = Runtime(parse_config({"brokers": [
        {"name": "Kafka", "bootstrap_servers": "127.0.0.1:9"}]}), clock=clock)
    frozen = iter(range(1_000_000, 10_000_000, 1_000_000))  # grows with every keep
    sized: list[int] = []
    monkeypatch.setattr(gc, "get_freeze_count", lambda: next(frozen))
    monkeypatch.setattr(app, "young_threshold", lambda count: sized.append(count) or 700)
    before = gc.get_threshold()
    try:
        runtime.keep_long_lived()
        for _ in range(5):
            clock.advance(1000)
            runtime.keep_long_lived()
        assert sized == [1_000_000]  # within the interval: not counted again yet
        clock.advance(GC_YOUNG_SIZING_MS)
        assert sized == [1_000_000, 2_000_000]  # what the last five kept, sized once
        clock.advance(GC_YOUNG_SIZING_MS * 3)
        assert len(sized) == 2  # nothing kept since: no sizing
        runtime.keep_long_lived()
        assert len(sized) == 3  # the interval is over: at once
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
