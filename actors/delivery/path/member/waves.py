"""Waves: the instance member's book of the cursors wanted and the waves that start them.
Pure logic, driven by the member with `now`.

A rebalance can bring thousands of cursors at once (4 partitions x 5,700 subscriptions
that joined while the group rebalanced). Built in one turn they held the member's mailbox
190 ms, and started all at once they saturated the event loop for seconds: every subscribe
meanwhile waited behind them (the tail of its latency at 10,000 subscribers). So each
wanted cursor is a claim first; claims become starts `PER_WAVE` at a time, one wave under
way at a time, and the next wave begins after a rest of `REST` times as long as the last
one took: starting cursors takes at most about two thirds of the loop. (A rest as long as
the wave, measured alone at 10,000 subscribers: subscribe p99 83 ms, but the last cursors
ran 10 s after the last subscribe; no rest: p99 156 ms; half: 100 ms, no lag. Once
subscribes no longer waited for each other's trees, waves of 128 instead of 256 gave
p99 69 ms against 82, the cursors 0.8 s after the last subscribe.)

While subscriptions are joining (one joined less than `JOINING_MS` ago), a wave is
`PER_WAVE_JOINING` starts: the share of the loop is the same (the rest is in proportion),
but a subscribe's tree, whose actors start a loop cycle each, waits behind fewer
callbacks per cycle. (In the 2-3 s after the rebalance that brings 22,800 cursors, the
slowest 1% of subscribes spent 100-160 ms in their tree's start, whole batches together,
against 4-6 ms at the median; issue 32, item 12. `bench/fanout.py --subscribe-parts
--compare`, 10,000 subscribers, the slowest 1% of tree starts: 128 per wave 93 ms
against 32 per wave 36 ms, load 2.2-3.2; 32 against 16: 75 ms against 36, load 1.0-1.3.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

C = TypeVar("C")
S = TypeVar("S")

PER_WAVE = 128
"""Starts per wave (each built in the member's turn)."""
PER_WAVE_JOINING = 16
"""Starts per wave while subscriptions are joining."""
JOINING_MS = 1000
"""How long after a subscription joined the waves stay small."""
EXAMINED = 8 * PER_WAVE
"""Claims looked at per turn at most, those that need no cursor included."""
REST = 0.5
"""The rest after a wave, as a share of the time it took."""


class Waves(Generic[C]):
    def __init__(self, per_wave: int = PER_WAVE, examined: int = EXAMINED,
                 rest: float = REST, per_wave_joining: int = PER_WAVE_JOINING) -> None:
        self.per_wave, self.examined, self.rest = per_wave, examined, rest
        self.per_wave_joining = per_wave_joining
        self.joined_ms: int | None = None
        """When a subscription last joined."""
        self.claims: deque[C] = deque()
        self.starting = False
        """A wave is under way, or its rest is (no other begins meanwhile)."""
        self.began_ms = 0

    def claim(self, claims: Iterable[C]) -> None:
        self.claims.extend(claims)

    def joined(self, now_ms: int) -> None:
        """A subscription joined: waves are small for `JOINING_MS`."""
        self.joined_ms = now_ms

    def size(self, now_ms: int) -> int:
        """The starts the next wave may have."""
        joining = self.joined_ms is not None and now_ms - self.joined_ms < JOINING_MS
        return min(self.per_wave, self.per_wave_joining) if joining else self.per_wave

    def take(self, now_ms: int, build: Callable[[C], list[S]]) -> list[S] | None:
        """The next wave: the starts `build` makes of the next claims (at most
        `size(now_ms)`; a claim that needs no cursor builds none); None while a wave is
        under way or when nothing is claimed. An empty wave (claims passed over only)
        still counts as begun: `ended` it in the next turn."""
        if self.starting or not self.claims:
            return None
        starts: list[S] = []
        claims, budget, size = self.claims, self.examined, self.size(now_ms)
        while claims and len(starts) < size and budget > 0:
            budget -= 1
            starts += build(claims.popleft())
        self.starting, self.began_ms = True, now_ms
        return starts

    def ended(self, now_ms: int, *, rested: bool) -> int | None:
        """The wave under way ended (`rested`: its rest too, or it was empty): when the
        next may begin (a rest is due first, at least 1 ms), else None (`take` may be
        called now)."""
        if not rested and self.claims and now_ms > self.began_ms and self.rest > 0:
            return now_ms + max(1, round((now_ms - self.began_ms) * self.rest))
        self.starting = False
        return None

    def __repr__(self) -> str:
        return f"<Waves claimed={len(self.claims)}{' starting' if self.starting else ''}>"
