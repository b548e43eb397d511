"""Offsets as runs: a cursor's records as a few intervals with one value each (issue 35).

The follow job (runtime/report/follow_state.py) keeps, per cursor (subscription, topic,
partition), what happened to each offset: how often it was fetched, delivered and
dead-lettered, when it was last fetched while open, and its endpoint. Kept per offset,
that is a key per record; but neighbouring offsets almost always share their value (a
batch fetched at once, then delivered once each), so `Runs` keeps maximal intervals of
equal value instead: a clean cursor is one run however many records it has, and only an
irregularity (a loss, a duplicate, a retry, a refetch) splits it. `add` folds a value into
an interval with `combine`, which is associative and commutative, so the order in which a
micro-batch's contributions arrive does not matter.

Pure Python, no Spark: tests/unit/test_report_runs.py.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import NamedTuple


class Tally(NamedTuple):
    """What a record's events say so far (see `combine`)."""

    fetches: int = 0
    deliveries: int = 0
    dead_letters: int = 0
    last_fetched_ms: int | None = None  # kept only while the record is open
    eh: int | None = None  # the smallest endpoint hash of its events (facts.name_hash)
    eh_max: int | None = None  # the largest: differs from eh when two endpoints

    @property
    def open(self) -> bool:
        """Fetched, and neither delivered nor dead-lettered."""
        return self.fetches > 0 and self.deliveries == 0 and self.dead_letters == 0


def _pick(a: int | None, b: int | None, larger: bool) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b) if larger else min(a, b)


def combine(a: Tally, b: Tally) -> Tally:
    """Both tallies' events together. A finished record forgets its last fetch time (only
    an open one needs it), so finished neighbours form one run."""
    deliveries, dead = a.deliveries + b.deliveries, a.dead_letters + b.dead_letters
    last = None if deliveries or dead else _pick(a.last_fetched_ms, b.last_fetched_ms, True)
    return Tally(a.fetches + b.fetches, deliveries, dead, last, _pick(a.eh, b.eh, False),
                 _pick(a.eh_max, b.eh_max, True))


class Run(NamedTuple):
    first: int
    last: int  # inclusive
    tally: Tally

    @property
    def size(self) -> int:
        return self.last - self.first + 1


class Runs:
    """Disjoint runs in offset order; neighbours (adjacent offsets) never hold equal tallies."""

    __slots__ = ("_firsts", "_lasts", "_tallies")

    def __init__(self, runs: Sequence[Run] = ()) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        self._tallies: list[Tally] = []
        for run in runs:
            self.add(run.first, run.last, run.tally)

    def __iter__(self) -> Iterator[Run]:
        return map(Run, self._firsts, self._lasts, self._tallies)

    def __len__(self) -> int:
        return len(self._firsts)

    def __repr__(self) -> str:
        return f"<Runs {len(self)} runs, {sum(r.size for r in self)} offsets>"

    def add(self, first: int, last: int, tally: Tally) -> list[Run]:
        """Fold `tally` into every offset of first..last; returns the runs as they were
        before (offsets no run held come back with an empty `Tally()`), in order."""
        if last < first:
            raise ValueError(f"empty interval {first}..{last}")
        lo = bisect_left(self._lasts, first)  # the first run that ends at or after `first`
        hi = bisect_right(self._firsts, last)  # past the last run that starts by `last`
        before: list[Run] = []
        pieces: list[Run] = []
        if lo < hi and self._firsts[lo] < first:  # a run reaching in from the left
            pieces.append(Run(self._firsts[lo], first - 1, self._tallies[lo]))
        at = first
        for i in range(lo, hi):
            start, end, old = self._firsts[i], self._lasts[i], self._tallies[i]
            if at < start:
                before.append(Run(at, start - 1, Tally()))
                pieces.append(Run(at, start - 1, tally))
            inside = Run(max(start, first), min(end, last), old)
            before.append(inside)
            pieces.append(Run(inside.first, inside.last, combine(old, tally)))
            at = inside.last + 1
        if at <= last:
            before.append(Run(at, last, Tally()))
            pieces.append(Run(at, last, tally))
        if lo < hi and self._lasts[hi - 1] > last:  # a run reaching out to the right
            pieces.append(Run(last + 1, self._lasts[hi - 1], self._tallies[hi - 1]))
        self._splice(lo, hi, pieces)
        return before

    def _splice(self, lo: int, hi: int, pieces: list[Run]) -> None:
        # with the runs just outside, so equal neighbours merge across the edges
        if lo > 0 and self._lasts[lo - 1] + 1 == pieces[0].first:
            lo -= 1
            pieces.insert(0, Run(self._firsts[lo], self._lasts[lo], self._tallies[lo]))
        if hi < len(self._firsts) and self._firsts[hi] == pieces[-1].last + 1:
            pieces.append(Run(self._firsts[hi], self._lasts[hi], self._tallies[hi]))
            hi += 1
        merged: list[Run] = []
        for piece in pieces:
            if merged and merged[-1].tally == piece.tally and merged[-1].last + 1 == piece.first:
                merged[-1] = Run(merged[-1].first, piece.last, piece.tally)
            else:
                merged.append(piece)
        self._firsts[lo:hi] = [r.first for r in merged]
        self._lasts[lo:hi] = [r.last for r in merged]
        self._tallies[lo:hi] = [r.tally for r in merged]


def merge_intervals(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint, adjacent ones joined: [(5, 7), (1, 3), (4, 4)] -> [(1, 7)]."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(intervals):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def subtract(first: int, last: int,
             holes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """first..last without the offsets `holes` (sorted, disjoint) hold."""
    left: list[tuple[int, int]] = []
    at = first
    for start, end in holes[max(0, bisect_left(holes, (first, first)) - 1):]:
        if start > last:
            break
        if end < at:
            continue
        if start > at:
            left.append((at, start - 1))
        at = max(at, end + 1)
    if at <= last:
        left.append((at, last))
    return left
