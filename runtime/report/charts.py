"""PNG charts from small aggregated rows (already on the driver). Agg backend, no pyplot.

Figures are built with `matplotlib.figure.Figure` on a `FigureCanvasAgg`, so nothing
touches pyplot's global state or needs a display.

Small runs read too (issue 11): a panel without values says "no data" instead of showing
empty axes; series of few points get markers (one bucket is one point, which a line alone
does not show); the value axis keeps a margin below 0 and above 100 %, so a series at 0 or
at 100 % is drawn inside the frame, not on it.

Latency bars carry their values, and when the largest is LOG_SCALE_RATIO times the
smallest or more (a p99 of seconds next to a p50 of milliseconds) the axis is logarithmic,
so the small bars stay visible (issue 27).

Many subscriptions (issue 36): the charts over time draw the MAX_SERIES busiest and sum the
rest into "other"; the latency chart draws the LATENCY_GROUPS slowest (by p99) and one
group for the others, each bar the highest of theirs (percentiles do not add up), so 10,000
subscriptions make a readable chart and the slowest ones are never hidden.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Rows = Sequence[Mapping[str, Any]]
MAX_SERIES = 8  # more subscriptions than this are summed into "other"
MARKERS_UP_TO = 60  # points per series; more points make a line readable alone
MARGIN = 0.05  # of the value range, below and above
LOG_SCALE_RATIO = 30
LATENCY_GROUPS = 8  # the slowest subscriptions drawn; the others are one group
LABEL_CHARS = 28  # a subscription's name under its bars is cut to this


def _figure(title: str, note: str, nrows: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(10, 4.5 * nrows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(f"{title} ({note})" if note else title)
    axes = fig.subplots(nrows, 1, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _no_data(ax: Axes, what: str = "no data") -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes,
            fontsize="large", color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _line_style(points: int) -> dict[str, Any]:
    if points <= MARKERS_UP_TO:
        return {"marker": "o", "markersize": 4 if points > 10 else 6}
    return {}


def _x_span(ax: Axes, seconds: Sequence[float], step_s: float) -> None:
    """Half a bucket of room on both sides: the first and last points off the frame."""
    ax.set_xlim(seconds[0] - step_s / 2, seconds[-1] + step_s / 2)


def _series(rows: Rows, value: str) -> tuple[list[float], dict[str, list[float | None]]]:
    """Seconds since the first bucket, and per subscription one value per bucket.

    Buckets without rows become 0 for counts (an idle second is real) and None for
    ratios (no outcomes, no error rate); see the callers.
    """
    starts = sorted({int(r["bucket_start_ms"]) for r in rows})
    step = int(rows[0]["bucket_ms"])
    buckets = list(range(starts[0], starts[-1] + step, step))
    index = {b: i for i, b in enumerate(buckets)}
    by_sub: dict[str, list[float | None]] = defaultdict(lambda: [None] * len(buckets))
    for r in rows:
        by_sub[_label(r["subscription"])][index[int(r["bucket_start_ms"])]] = r[value]
    seconds = [(b - buckets[0]) / 1000 for b in buckets]
    return seconds, dict(by_sub)


def _label(subscription: str | None) -> str:
    return subscription or "(unknown)"


def _top(series: dict[str, list[float | None]]) -> dict[str, list[float | None]]:
    """Keep the MAX_SERIES largest series; sum the rest into "other"."""
    ranked = sorted(series, key=lambda k: -sum(v or 0 for v in series[k]))
    kept = {k: series[k] for k in ranked[:MAX_SERIES]}
    rest = ranked[MAX_SERIES:]
    if rest:
        length = len(next(iter(series.values())))
        kept["other"] = [sum(series[k][i] or 0 for k in rest) for i in range(length)]
    return kept


def throughput_chart(rows: Rows, path: Path, note: str = "") -> Path:
    """Delivered records per second over time, per subscription and in total."""
    fig, (ax,) = _figure("Delivered records per second", note)
    if rows:
        seconds, series = _series(rows, "delivered_per_s")
        style = _line_style(len(seconds))
        filled = {k: [v or 0.0 for v in values] for k, values in _top(series).items()}
        for name, values in filled.items():
            ax.plot(seconds, values, label=name, linewidth=1.2, **style)
        if len(series) > 1:
            total = [sum(v or 0.0 for v in col) for col in zip(*series.values(), strict=True)]
            ax.plot(seconds, total, label="total", color="black", linewidth=1.8, **style)
        ax.legend(loc="best", fontsize="small")
        top = max((v for values in filled.values() for v in values), default=0.0)
        top = max(top, 1.0)
        ax.set_ylim(-MARGIN * top, (1 + MARGIN) * top)
        _x_span(ax, seconds, _step_s(rows))
    else:
        _no_data(ax)
    return _save_timeline(fig, ax, rows, "delivered records / s", path)


def error_rate_chart(rows: Rows, path: Path, note: str = "") -> Path:
    """Failed HTTP attempts / all completed attempts, per subscription over time."""
    fig, (ax,) = _figure("HTTP error rate", note)
    measured = [r for r in rows if r.get("error_rate") is not None]
    if measured:
        seconds, series = _series(rows, "error_rate")
        style = _line_style(len(seconds)) or {"marker": ".", "markersize": 3}
        for name, values in _top(series).items():
            percent = [math.nan if v is None else 100 * v for v in values]  # NaN: a gap
            ax.plot(seconds, percent, label=name, linewidth=1.2, **style)
        ax.legend(loc="best", fontsize="small")
        ax.set_ylim(-100 * MARGIN, 100 * (1 + MARGIN))
        _x_span(ax, seconds, _step_s(rows))
    else:
        _no_data(ax, "no data (no HTTP attempt completed)" if rows else "no data")
    return _save_timeline(fig, ax, rows, "failed attempts (% of completed)", path)


def _save_timeline(fig: Figure, ax: Axes, rows: Rows, ylabel: str, path: Path) -> Path:
    """The common end of the charts over time: axis labels, grid, file."""
    ax.set_xlabel(f"time since first event (s), {_bucket_text(rows)} buckets")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    fig.savefig(path)
    return path


def latency_chart(rows: Rows, path: Path, note: str = "") -> Path:
    """p50/p95/p99 of end-to-end and added latency, per subscription and endpoint."""
    fig, axes = _figure("Latency percentiles per subscription", note, nrows=2)
    panels = [("e2e", "end-to-end (record timestamp to delivered)"),
              ("added", "added by the service (fetch to HTTP send)")]
    for ax, (name, title) in zip(axes, panels, strict=True):
        shown, others = _slowest(rows, name)
        log = _latency_bars(ax, shown, name)
        ax.set_title(title + (f": the {len(shown) - 1} slowest by p99 and {others} others"
                              if others else ""))
        ax.set_ylabel("latency (ms, log scale)" if log else "latency (ms)")
        ax.grid(axis="y", alpha=0.3)
    fig.savefig(path)
    return path


def _slowest(rows: Rows, name: str) -> tuple[list[Mapping[str, Any]], int]:
    """The LATENCY_GROUPS slowest rows with values (by p99, then p95, p50) and, when there
    are more, one row for the others: per percentile the highest of theirs. Also how many
    the others are (0: none)."""
    keys = [f"{name}_p{q}_ms" for q in (50, 95, 99)]
    measured = [r for r in rows if any(r.get(k) is not None for k in keys)]
    ranked = sorted(measured, key=lambda r: [-(r.get(k) or 0.0) for k in reversed(keys)])
    shown, rest = list(ranked[:LATENCY_GROUPS]), ranked[LATENCY_GROUPS:]
    if not rest:
        return shown, 0
    others: dict[str, Any] = {"subscription": f"{len(rest)} others (highest)"}
    for key in keys:
        values = [r[key] for r in rest if r.get(key) is not None]
        others[key] = max(values) if values else None
    return [*shown, others], len(rest)


def _latency_bars(ax: Axes, rows: Rows, name: str) -> bool:
    """Grouped bars with their values on top; True when the axis is logarithmic."""
    rows = [r for r in rows if any(r.get(f"{name}_p{q}_ms") is not None
                                   for q in (50, 95, 99))]
    if not rows:
        _no_data(ax)
        return False
    labels = [_cut(_label(r["subscription"])) for r in rows]
    values = {q: [r.get(f"{name}_p{q}_ms") for r in rows] for q in (50, 95, 99)}
    positive = [v for vs in values.values() for v in vs if v is not None and v > 0]
    log = bool(positive) and max(positive) >= LOG_SCALE_RATIO * min(positive)
    width = 0.25
    for i, (q, vs) in enumerate(values.items()):
        positions = [x + (i - 1) * width for x in range(len(rows))]
        bars = ax.bar(positions, [math.nan if v is None else v for v in vs], width=width,
                      label=f"p{q}")
        ax.bar_label(bars, labels=[_duration(v) for v in vs], fontsize="x-small", padding=2)
    ax.set_xticks(range(len(rows)), labels, rotation=15, ha="right")
    pad = 1.5 if len(rows) < 3 else 0.6  # one or two groups: not a wall of colour
    ax.set_xlim(-pad, len(rows) - 1 + pad)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 2, max(positive) * 4)  # room for the top labels
    else:
        ax.margins(y=0.15)  # the tallest bar and its label below the frame's top
    ax.set_xlabel("subscription")
    ax.legend(loc="upper left", fontsize="small")
    return log


def _cut(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"


def _duration(ms: float | None) -> str:
    """A bar's label: 0.42 ms, 12 ms, 950 ms, 4.2 s."""
    if ms is None or math.isnan(ms):
        return ""
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    return f"{ms:.2g} ms" if ms < 10 else f"{ms:.0f} ms"


def _step_s(rows: Rows) -> float:
    return int(rows[0]["bucket_ms"]) / 1000


def _bucket_text(rows: Rows) -> str:
    if not rows:
        return "-"
    seconds = int(rows[0]["bucket_ms"]) / 1000
    return f"{seconds:g} s"
