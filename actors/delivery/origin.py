"""What every subscription that pushes to one origin (scheme, host, port) shares: a
circuit breaker, a rate limit and the origin's own "slow down" (429/503 with
`Retry-After`). Pure decisions on `now`; the egress actors consult them.

Circuit breaker (on by default). Closed: requests go; every answer is recorded in a
sliding window of `window_ms`. When at least `min_requests` answers are in the window and
the failure ratio reaches `failure_ratio`, it opens for `open_ms`: nothing goes (the
egress answers at once, so records wait for their retry time, not in a hot loop). Then one
probe request goes (half-open); its success closes the breaker, its failure opens it again.

Rate limit: a token bucket of `rate` requests per second (burst: one second's worth); the
strictest setting among the subscriptions of an origin applies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

BreakerState = Literal["closed", "open", "half_open"]
DEFAULT_FAILURE_RATIO = 0.5
DEFAULT_MIN_REQUESTS = 20
DEFAULT_OPEN_MS = 10_000
DEFAULT_WINDOW_MS = 30_000


def origin_of(uri: str) -> str:
    """`scheme://host:port`; a URL that cannot be parsed is its own origin (its requests
    fail on their own, like any failure)."""
    try:
        parts = urlsplit(uri)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return uri
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


@dataclass(slots=True)
class CircuitBreaker:
    failure_ratio: float = DEFAULT_FAILURE_RATIO
    min_requests: int = DEFAULT_MIN_REQUESTS
    open_ms: int = DEFAULT_OPEN_MS
    window_ms: int = DEFAULT_WINDOW_MS
    enabled: bool = True
    state: BreakerState = "closed"
    opened_at: int | None = None
    _answers: deque[tuple[int, bool]] = field(default_factory=deque)
    _failures: int = 0
    _probing: bool = False

    def allow(self, now_ms: int) -> bool:
        """May a request go now? In half-open state exactly one (the probe) may."""
        if not self.enabled:
            return True
        if self.state == "open":
            assert self.opened_at is not None
            if now_ms < self.opened_at + self.open_ms:
                return False
            self.state, self._probing = "half_open", False
        if self.state == "half_open":
            if self._probing:
                return False
            self._probing = True
        return True

    def retry_at(self) -> int | None:
        """When an open breaker lets its probe go (None when it is not open)."""
        return self.opened_at + self.open_ms if self.opened_at is not None and \
            self.state == "open" else None

    def record(self, ok: bool, now_ms: int) -> BreakerState | None:
        """Record an answer; returns the new state when it changed."""
        if not self.enabled:
            return None
        if self.state == "half_open":
            self._probing = False
            return self._move("closed" if ok else "open", now_ms)
        self._slide(now_ms)
        self._answers.append((now_ms, ok))
        self._failures += not ok
        if (self.state == "closed" and len(self._answers) >= self.min_requests
                and self._failures / len(self._answers) >= self.failure_ratio):
            return self._move("open", now_ms)
        return None

    def _slide(self, now_ms: int) -> None:
        answers = self._answers
        while answers and answers[0][0] <= now_ms - self.window_ms:
            _, ok = answers.popleft()
            self._failures -= not ok

    def _move(self, state: BreakerState, now_ms: int) -> BreakerState:
        self.state = state
        self.opened_at = now_ms if state == "open" else None
        if state == "closed":
            self._answers.clear()
            self._failures = 0
        return state


@dataclass(slots=True)
class TokenBucket:
    rate: float  # tokens per second
    tokens: float = 0.0
    at_ms: int | None = None

    def take(self, now_ms: int) -> int:
        """Take a token: 0 when one is there, else how many ms until one is."""
        burst = max(self.rate, 1.0)
        if self.at_ms is None:
            self.tokens, self.at_ms = burst, now_ms
        self.tokens = min(burst, self.tokens + (now_ms - self.at_ms) * self.rate / 1000)
        self.at_ms = now_ms
        if self.tokens >= 1:
            self.tokens -= 1
            return 0
        return int((1 - self.tokens) * 1000 / self.rate) + 1


@dataclass(slots=True)
class Origin:
    """One origin's shared state."""

    name: str
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    bucket: TokenBucket | None = None
    throttled_until: int = 0

    def wait_ms(self, now_ms: int) -> int | None:
        """None: a request may go now (a token was taken). Else how long to hold off:
        the origin asked us to slow down, its breaker is open, or its rate is used up."""
        if now_ms < self.throttled_until:
            return self.throttled_until - now_ms
        if not self.breaker.allow(now_ms):
            retry = self.breaker.retry_at()
            return max((retry or now_ms + 1) - now_ms, 1)
        wait = self.bucket.take(now_ms) if self.bucket is not None else 0
        return wait or None

    def throttle(self, until_ms: int) -> None:
        self.throttled_until = max(self.throttled_until, until_ms)

    def limit_rate(self, per_second: float | None) -> None:
        """The strictest rate among the subscriptions of this origin applies."""
        if per_second and (self.bucket is None or per_second < self.bucket.rate):
            self.bucket = TokenBucket(per_second)

    def as_dict(self) -> dict[str, object]:
        return {"origin": self.name, "breaker": self.breaker.state,
                "opened_at": self.breaker.opened_at, "throttled_until": self.throttled_until,
                "rate_limit": self.bucket.rate if self.bucket else None}


class Origins:
    """The registry the delivery service keeps: one `Origin` per scheme, host and port."""

    def __init__(self, breaker: bool = True) -> None:
        self.breaker = breaker
        self._origins: dict[str, Origin] = {}

    def get(self, uri: str) -> Origin:
        name = origin_of(uri)
        found = self._origins.get(name)
        if found is None:
            found = self._origins[name] = Origin(name, CircuitBreaker(enabled=self.breaker))
        return found

    def __iter__(self) -> Iterator[Origin]:
        return iter(self._origins.values())
