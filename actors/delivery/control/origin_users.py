"""Which subscriptions push to each origin, and the limits they ask for (pure).

An origin applies the strictest rate limit and circuit breaker settings of the
subscriptions pushing there (actors/delivery/egress/origin.py). Those are counted by
value here, so a subscription that starts or stops costs a few distinct values, not a
scan of every subscription: with 10,000 subscriptions of one origin the scan made
subscribing and restoring quadratic (bench/RESULTS.md, "Fan-out").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from actors.delivery.egress.origin import BreakerSettings, Origin


@dataclass(frozen=True, slots=True)
class Limits:
    """What one subscription asks of its origin."""

    rate: float | None
    breaker: BreakerSettings


class OriginUsers:
    def __init__(self) -> None:
        self._of: dict[str, tuple[Origin, Limits]] = {}  # subscription key -> its origin
        self._counts: dict[int, Counter[Limits]] = {}  # id(origin) -> limits asked

    def join(self, key: str, origin: Origin, limits: Limits) -> None:
        """`key` pushes to `origin` now (instead of wherever it pushed before)."""
        self.leave(key)
        self._of[key] = (origin, limits)
        self._counts.setdefault(id(origin), Counter())[limits] += 1

    def leave(self, key: str) -> None:
        found = self._of.pop(key, None)
        if found is None:
            return
        origin, limits = found
        counts = self._counts[id(origin)]
        counts[limits] -= 1
        if counts[limits] <= 0:
            del counts[limits]
        if not counts:
            del self._counts[id(origin)]

    def limits(self, origin: Origin) -> list[Limits]:
        """The distinct limits asked of `origin` by the subscriptions pushing there."""
        return list(self._counts.get(id(origin), ()))

    def __len__(self) -> int:
        return len(self._of)
