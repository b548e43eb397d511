"""`GET /delay/levels`: each delay level with what it holds and how late it forwards,
read from the delay actors' metrics (the status page's delay panel uses it)."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from runtime.host.admin import ok
from runtime.host.config import DelayLevel
from runtime.host.metrics import LATENCY_BOUNDS_MS, HistogramValue, Registry, Value


def level_view(level: DelayLevel, metrics: Registry) -> dict[str, object]:
    """One level: its settings, records waiting (all its partitions), forwarded,
    dead-lettered, and forward lateness (p50, p99; bucket upper bounds, ms)."""
    def total(name: str) -> int:
        return int(sum(s.value for s in metrics.series(name, level=level.name)
                       if isinstance(s, Value)))

    lateness = HistogramValue(LATENCY_BOUNDS_MS)
    for series in metrics.series("hookstream_delay_lateness_ms", level=level.name):
        if isinstance(series, HistogramValue) and series.bounds == lateness.bounds:
            lateness.merge(series)
    return {"name": level.name, "delay_ms": level.delay_ms, "topics": list(level.topics),
            "exactly_once": level.exactly_once,
            "waiting": total("hookstream_delay_waiting"),
            "forwarded": total("hookstream_delay_forwarded_total"),
            "dead_lettered": total("hookstream_delay_dead_lettered_total"),
            "lateness_p50_ms": lateness.quantile(0.5),
            "lateness_p99_ms": lateness.quantile(0.99)}


def add_levels_route(app: web.Application, levels: Sequence[DelayLevel],
                     metrics: Registry) -> None:
    async def get_levels(_: web.Request) -> web.Response:
        return ok([level_view(level, metrics) for level in levels])

    app.router.add_get("/delay/levels", get_levels)
