"""The report's latency chart with many subscriptions (issue 36): the slowest few and one
group for the others (the highest of theirs), not the first rows in whatever order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from runtime.report import charts


def drawn(rows: list[dict[str, Any]], path: Path) -> Figure:
    figures: list[Figure] = []
    original = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        figures.append(self)
        original(self, *args, **kwargs)

    Figure.savefig = keep  # type: ignore[method-assign]
    try:
        charts.latency_chart(rows, path)
    finally:
        Figure.savefig = original  # type: ignore[method-assign]
    return figures[0]


def test_300_subscriptions_show_the_8_slowest_and_the_others_as_one_group(
        tmp_path: Path) -> None:
    rows = [{"subscription": f"subscription-with-a-long-name-{n:04d}", "e2e_p50_ms": 1.0,
             "e2e_p95_ms": 2.0, "e2e_p99_ms": float(n)} for n in range(300)]
    e2e, added = drawn(rows, tmp_path / "latency.png").axes
    labels = [t.get_text() for t in e2e.get_xticklabels()]
    assert len(labels) == charts.LATENCY_GROUPS + 1
    assert labels[0] == "subscription-with-a-long-na…"  # cut: no overlap
    assert labels[-1] == "292 others (highest)"
    p99 = e2e.containers[2]  # p50, p95, p99 bars
    heights = [bar.get_height() for bar in p99]
    assert heights[:charts.LATENCY_GROUPS] == [float(n) for n in range(299, 291, -1)]
    assert heights[-1] == 291.0  # the highest of the others
    assert "the 8 slowest by p99 and 292 others" in e2e.get_title()
    assert [t.get_text() for t in added.texts] == ["no data"]
