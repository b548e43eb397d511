"""How long to wait before retrying a delivery. Pure: the caller supplies randomness and time.

The delay for retry number `attempt` (1 = the first retry) is::

    base   = min(initial_ms * multiplier ** (attempt - 1), cap)
    delay  = base * (1 - jitter * rand())        # rand() in [0, 1)
    result = max(delay, min(retry_after_ms, retry_after_cap))

- `cap` is `max_ms`, or `HARD_CAP_MS` (one hour) when `max_ms` is 0, so a retry-forever
  subscription with exponential growth never waits for days.
- Jitter only shortens the delay (jitter 1.0 is "full jitter", uniform in [0, base)), so
  the cap stays a real upper bound and retries of many records spread out.
- A server's `Retry-After` is a lower bound: never retry sooner than it asked. It is
  capped at `max(max_ms, HARD_CAP_MS)` so a bad header cannot park a partition for a year.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

HARD_CAP_MS = 3_600_000

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays: `initial_ms`, grown by `multiplier` per attempt, capped, jittered.

    `multiplier` 1.0 gives a constant delay (Queue-Over-Http's `delayOnErrorMs`);
    `max_ms` 0 means no cap but `HARD_CAP_MS`; `jitter` is the fraction (0..1) of the
    delay that may be randomly taken off.
    """

    initial_ms: int
    multiplier: float = 1.0
    max_ms: int = 0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.initial_ms < 0:
            raise ValueError(f"initial_ms must be >= 0, got {self.initial_ms}")
        if not self.multiplier >= 1.0:  # also rejects NaN
            raise ValueError(f"multiplier must be >= 1.0, got {self.multiplier}")
        if self.max_ms < 0 or (0 < self.max_ms < self.initial_ms):
            limit = f"0 (no cap) or >= initial_ms ({self.initial_ms})"
            raise ValueError(f"max_ms must be {limit}, got {self.max_ms}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be in 0..1, got {self.jitter}")

    @property
    def cap_ms(self) -> int:
        """The longest delay this policy computes by itself."""
        return self.max_ms or HARD_CAP_MS

    def delay_ms(
        self,
        attempt: int,
        rand: Callable[[], float] = random.random,
        retry_after_ms: int | None = None,
    ) -> int:
        """Milliseconds to wait before retry number `attempt` (1 = the first retry)."""
        if attempt < 1:
            raise ValueError(f"attempt counts retries from 1, got {attempt}")
        delay = round(self._base_ms(attempt) * (1.0 - self.jitter * rand()))
        if retry_after_ms is not None:
            ceiling = max(self.max_ms, HARD_CAP_MS)
            delay = max(delay, min(max(retry_after_ms, 0), ceiling))
        return delay

    def _base_ms(self, attempt: int) -> float:
        try:
            grown = self.initial_ms * self.multiplier ** (attempt - 1)
        except OverflowError:  # a retry-forever record reaches attempt 10_000
            grown = math.inf
        return min(grown, self.cap_ms)


RESTART_BACKOFF = Backoff(initial_ms=200, multiplier=2.0, max_ms=5000)
"""How long a supervisor waits before it tries again a restart that failed."""


class RestartBackoff:
    """Restarts after failures in a row: each failure waits longer (`policy`), a success
    forgets them. Pure: the owner schedules the returned delay on its clock (a supervisor
    a timer message, the delivery control plane a retry of a subscription's tree).

    `failures` also tells a stale retry from the current one: a retry scheduled for
    failure 2 means nothing once the count moved on or was reset."""

    __slots__ = ("failures", "policy")

    def __init__(self, policy: Backoff = RESTART_BACKOFF) -> None:
        self.policy = policy
        self.failures = 0

    def failed(self) -> int:
        """Count a failure; the milliseconds to wait before the next attempt."""
        self.failures += 1
        return self.policy.delay_ms(self.failures)

    def succeeded(self) -> None:
        self.failures = 0

    def __repr__(self) -> str:
        return f"<RestartBackoff failures={self.failures} {self.policy!r}>"


def parse_retry_after(value: str | None, now_wall_ms: int) -> int | None:
    """A `Retry-After` header as milliseconds from now, or None if absent or invalid.

    Accepts delay-seconds (RFC 9110; fractions tolerated) and an HTTP-date, which is
    read against `now_wall_ms` (epoch ms); a date in the past means 0.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _SECONDS.fullmatch(text):
        return _seconds_to_ms(text)
    return _date_to_ms(text, now_wall_ms)


def _seconds_to_ms(text: str) -> int | None:
    try:
        seconds = float(text)
    except ValueError:
        return None
    if not math.isfinite(seconds):  # "9" * 400 parses to inf
        return None
    return round(seconds * 1000)


def _date_to_ms(text: str, now_wall_ms: int) -> int | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with no claim about local time
        when = when.replace(tzinfo=UTC)
    return max(round(when.timestamp() * 1000) - now_wall_ms, 0)
