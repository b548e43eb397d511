"""Logging an operator can follow: text or JSON lines, and aiokafka's noise summarised.

During a broker outage aiokafka logs every reconnect attempt (over a thousand lines in
15 s). `Summarised` lets the first line of each kind through, then counts repeats and
says how many were held back the next time that kind gets through (at most one line
per kind every `window_ms`).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Literal

from runtime.kernel.clock import Clock, RealClock

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NOISY_LOGGERS = ("aiokafka",)
SUMMARY_WINDOW_MS = 30_000
_DIGITS = re.compile(r"\d+")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (ISO 8601, UTC), level, logger, message, and exc."""

    def format(self, record: logging.LogRecord) -> str:
        utc = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = {"ts": f"{utc}.{int(record.msecs):03d}Z",
                "level": record.levelname, "logger": record.name,
                "message": record.getMessage()}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class Summarised(logging.Filter):
    """For loggers under `prefixes`: passes one record per kind (logger, level, message
    with digits masked) per window, and notes on it how many of that kind were held back.
    A handler filter, since a logger's own filters do not see its children's records."""

    def __init__(self, prefixes: tuple[str, ...] = NOISY_LOGGERS,
                 window_ms: int = SUMMARY_WINDOW_MS, clock: Clock | None = None) -> None:
        super().__init__()
        self.clock = clock or RealClock()
        self.prefixes = prefixes
        self.window_ms = window_ms
        self._kinds: dict[tuple[str, int, str], tuple[int, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefixes):
            return True
        kind = (record.name, record.levelno, _DIGITS.sub("#", str(record.msg)))
        now = self.clock.monotonic_ms()
        seen = self._kinds.get(kind)
        last, held = seen if seen is not None else (now - self.window_ms, 0)
        if now - last < self.window_ms:
            self._kinds[kind] = (last, held + 1)
            return False
        self._kinds[kind] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} similar lines held back in the last " \
                         f"{self.window_ms // 1000} s)"
        return True


NAMES_SHOWN = 5


def few(names: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """The first `shown` names and how many more (#36: a log line that named 10,000
    missing topics or partitions was 150 KB; log every name at DEBUG beside it)."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def configure(level: str, fmt: LogFormat = "text") -> None:
    """Root logging for the process: level, format, and the summary filter on noisy
    third-party loggers."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(Summarised())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class Throttle:
    """At most `per_window` lines per `window_ms` for one source (a partition's give-ups,
    an endpoint's failures): `allow(now_ms)` says whether to log, and how many lines were
    held back since the last one that was (say so on it)."""

    __slots__ = ("_count", "_held", "_start", "per_window", "window_ms")

    def __init__(self, per_window: int = 5, window_ms: int = 60_000) -> None:
        self.per_window, self.window_ms = per_window, window_ms
        self._start: int | None = None
        self._count = 0
        self._held = 0

    def allow(self, now_ms: int) -> tuple[bool, int]:
        if self._start is None or now_ms - self._start >= self.window_ms:
            self._start, self._count = now_ms, 0
        if self._count >= self.per_window:
            self._held += 1
            return False, 0
        self._count += 1
        held, self._held = self._held, 0
        return True, held
