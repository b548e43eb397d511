"""The follow job's state between micro-batches: what the live report is built from.

The follow job (runtime/report/follow.py) hands every micro-batch of new journal rows,
reduced by Spark and runtime/report/follow_batch.py, to `FollowState.apply` as
`BatchChanges`:

- `facts`: the batch's small facts (`facts.keyed` without records, aggregated over the
  batch alone: event types per second, actors, partitions, commits, endpoints, latency
  histograms), which `merge_fact` adds to the facts so far (counts summed, first and
  last times and offsets kept at their extremes);
- `cursors`: per cursor (subscription, topic, partition), the batch's record events as
  runs of offsets with one `runs.Tally` each (a ranged `fetched` one run per range, a
  commit round's deliveries one run per cursor when their offsets are consecutive), and
  the end-to-end latency of each record's first delivery in the batch;
- `filtered`: the offset ranges a subscription's filter left out (issue 26).

The audit is kept per cursor as `runs.Runs`: each offset's fetches, deliveries and dead
letters so far, its last fetch time while it is open and its endpoint, in maximal runs of
equal tallies. A cursor whose records were each fetched and delivered once is one run,
however many records it has, so a micro-batch costs per cursor and per irregularity (a
loss, a duplicate, a retry, a refetch splits a run), not per record; and the counts the
report shows (records fetched, delivered, dead-lettered, lost, in flight, duplicates) are
sums over runs, exact. A record delivered for the first time in a batch adds its
end-to-end latency to a histogram (the latency of the batch's earliest delivery of it).

Lost with a grace period: an open record (fetched, neither delivered nor dead-lettered,
nor in a `filtered` range) is lost once the newest event in the journal is at least
`grace_ms` later than its last fetch; before that it is in flight. Event time, not the
wall clock, so catching up on an old journal reports the same as following it.

Exactly once: `apply` is a pure step from version N-1 to version N (the batch id); the job
stores every version (`encode`) and, when Spark runs a batch again after a crash, starts
again from version N-1, so nothing is counted twice.

Attribution differs from the batch report in two corners only: a record whose events
name more than two endpoints is counted under the smaller name of the smallest and the
largest endpoint hash (the batch report: the smallest name of all); a record's end-to-end latency
takes the Kafka time of the delivery that counts (the batch report: the largest any of
its events carries; the journal writes the same on each). Latency percentiles come from
histograms of values rounded to 3 significant digits.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from runtime.host.journal import ranges_of
from runtime.report import tables
from runtime.report.facts import THROUGHPUT_TYPES
from runtime.report.runs import Run, Runs, Tally, combine, merge_intervals, subtract
from runtime.report.transforms import PERCENTILES

Row = dict[str, Any]
FactKey = tuple[Any, ...]  # facts.KEY
RecordKey = tuple[str, str, int, int]  # subscription, topic, partition, offset
PartitionKey = tuple[str, str, int]
EndpointKey = tuple[str, int | None]  # subscription, endpoint hash
KEY = ("kind", "s1", "s2", "s3", "n1", "n2", "v")
HISTOGRAM_KINDS = ("added", "http", "lateness")
COUNTS = ("records_fetched", "delivered", "dead_lettered")
SUMMED = ("n", "fetches", "deliveries", "failures", "retries", "dead_letters", "started",
          "crashed", "restarted", "stopped", "assigned", "revoked")
Floats = npt.NDArray[np.float64]
Longs = npt.NDArray[np.int64]


@dataclass(slots=True)
class CursorChanges:
    """One cursor's record events in a micro-batch (see the module doc). `runs` may
    overlap (each is added); `e2e_offsets` (sorted) and `e2e_ms` (rounded, `round3`) are
    the end-to-end latency of each record's earliest delivery in the batch, where its
    Kafka time is known."""

    runs: list[Run] = field(default_factory=list)
    e2e_offsets: Longs = field(default_factory=lambda: np.zeros(0, np.int64))
    e2e_ms: Floats = field(default_factory=lambda: np.zeros(0, np.float64))


@dataclass(slots=True)
class BatchChanges:
    facts: list[Row] = field(default_factory=list)
    cursors: dict[PartitionKey, CursorChanges] = field(default_factory=dict)
    filtered: list[tuple[PartitionKey, str]] = field(default_factory=list)  # offsets "3-7,9"


class OpenRun(NamedTuple):
    """Open records of a cursor: first..last, all with `tally`."""

    cursor: PartitionKey
    first: int
    last: int
    tally: Tally

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def records(self) -> Iterator[RecordKey]:
        return ((*self.cursor, offset) for offset in range(self.first, self.last + 1))


class _Stored(msgspec.Struct, frozen=True):
    """The persisted form: lists, since msgpack maps want string keys."""

    version: int
    facts: list[Row]
    runs: list[tuple[str, str, int, int, int, int, int, int, int | None, int | None,
                     int | None]]
    filtered: list[tuple[str, str, int, int, int]]
    e2e: list[tuple[str, int | None, float, int]]


def merge_fact(old: Row | None, new: Mapping[str, Any]) -> Row:
    """A fact so far and the same key's fact from one more batch, as one."""
    if old is None:
        return {k: new[k] for k in _FACT_FIELDS}
    merged = dict(old)
    for name in SUMMED:
        merged[name] = (old[name] or 0) + (new[name] or 0)
    for name, pick in (("first_ms", min), ("last_ms", max), ("max_offset", max)):
        values = [v for v in (old[name], new[name]) if v is not None]
        merged[name] = pick(values) if values else None
    if new["count_sum"] is not None:
        merged["count_sum"] = (old["count_sum"] or 0) + new["count_sum"]
    return merged


def round3_array(values: Floats) -> Floats:
    """`round3` of every value (numpy)."""
    magnitude = np.floor(np.log10(np.abs(np.where(values == 0, 1.0, values))))
    scale = 10.0 ** (2 - magnitude)
    rounded = np.floor(np.abs(values) * scale + 0.5) * np.sign(values) / scale
    return np.where(values == 0, 0.0, rounded)


def round3(value: float) -> float:
    """3 significant digits, as `facts.round_latency` (Spark's HALF_UP rounding)."""
    if value == 0:
        return 0.0
    scale = 10.0 ** (2 - math.floor(math.log10(abs(value))))
    return math.floor(abs(value) * scale + 0.5) * math.copysign(1, value) / scale


def nearest_rank(histogram: Mapping[float, int]) -> tuple[list[float] | None, float | None]:
    """p50, p95, p99 (the smallest value with at least q of the count at or below it, as
    `percentile_approx` gives when exact) and the max; (None, None) for no values."""
    values = sorted(histogram)
    total = sum(histogram.values())
    if total == 0:
        return None, None
    result = []
    for q in PERCENTILES:
        rank, seen = max(1, math.ceil(q * total)), 0
        for value in values:
            seen += histogram[value]
            if seen >= rank:
                result.append(value)
                break
    return result, values[-1]


@dataclass
class FollowState:
    version: int = -1  # the id of the last micro-batch applied
    facts: dict[FactKey, Row] = field(default_factory=dict)
    cursors: dict[PartitionKey, Runs] = field(default_factory=dict)
    filtered: dict[PartitionKey, list[tuple[int, int]]] = field(default_factory=dict)
    e2e: dict[EndpointKey, dict[float, int]] = field(default_factory=dict)

    # -- one micro-batch -------------------------------------------------------------------

    def apply(self, batch: BatchChanges, batch_id: int) -> None:
        """Fold in one micro-batch (see the module doc)."""
        for row in batch.facts:
            if row["kind"] in ("record", "filtered"):
                continue
            key = tuple(row[k] for k in KEY)
            self.facts[key] = merge_fact(self.facts.get(key), row)
        for cursor, changes in batch.cursors.items():
            self._cursor(cursor, changes)
        for cursor, offsets in batch.filtered:
            held = self.filtered.get(cursor, [])
            self.filtered[cursor] = merge_intervals([*held, *ranges_of(offsets)])
        self.version = batch_id

    def _cursor(self, cursor: PartitionKey, changes: CursorChanges) -> None:
        runs = self.cursors.setdefault(cursor, Runs())
        for first, last, tally in changes.runs:
            before = runs.add(first, last, tally)
            if tally.deliveries == 0:
                continue
            for piece in before:
                if piece.tally.deliveries == 0:  # first delivered in this batch
                    eh = combine(piece.tally, tally).eh
                    self._add_e2e((cursor[0], eh), changes, piece.first, piece.last)

    def _add_e2e(self, key: EndpointKey, changes: CursorChanges, first: int, last: int) -> None:
        lo, hi = np.searchsorted(changes.e2e_offsets, [first, last + 1])
        if lo == hi:
            return
        values, counts = np.unique(changes.e2e_ms[lo:hi], return_counts=True)
        histogram = self.e2e.setdefault(key, {})
        for value, n in zip(values.tolist(), counts.tolist(), strict=True):
            histogram[value] = histogram.get(value, 0) + n

    # -- persistence -------------------------------------------------------------------

    def encode(self) -> bytes:
        return msgspec.msgpack.encode(_Stored(
            version=self.version,
            facts=list(self.facts.values()),
            runs=[(*cursor, r.first, r.last, *r.tally) for cursor, runs in self.cursors.items()
                  for r in runs],
            filtered=[(*cursor, first, last) for cursor, held in self.filtered.items()
                      for first, last in held],
            e2e=[(k[0], k[1], value, n) for k, h in self.e2e.items() for value, n in h.items()],
        ))

    @classmethod
    def decode(cls, data: bytes) -> FollowState:
        stored = msgspec.msgpack.decode(data, type=_Stored)
        state = cls(version=stored.version)
        state.facts = {tuple(row[k] for k in KEY): row for row in stored.facts}
        runs: dict[PartitionKey, list[Run]] = defaultdict(list)
        for s, t, p, first, last, f, d, x, fetched_ms, eh, eh_max in stored.runs:
            runs[(s, t, p)].append(Run(first, last, Tally(f, d, x, fetched_ms, eh, eh_max)))
        state.cursors = {cursor: Runs(listed) for cursor, listed in runs.items()}
        for s, t, p, first, last in stored.filtered:
            state.filtered.setdefault((s, t, p), []).append((first, last))
        for sub, eh, value, n in stored.e2e:
            state.e2e.setdefault((sub, eh), {})[value] = n
        return state

    # -- the audit -----------------------------------------------------------------------

    def open_runs(self) -> Iterator[OpenRun]:
        """Open records, in runs, without those a `filtered` range holds."""
        for cursor, runs in self.cursors.items():
            holes = self.filtered.get(cursor, [])
            for run in runs:
                if run.tally.open:
                    for first, last in subtract(run.first, run.last, holes):
                        yield OpenRun(cursor, first, last, run.tally)

    def duplicates(self) -> Iterator[tuple[RecordKey, Tally]]:
        """Records delivered more than once, one by one (few)."""
        for cursor, runs in self.cursors.items():
            for run in runs:
                if run.tally.deliveries > 1:
                    for offset in range(run.first, run.last + 1):
                        yield (*cursor, offset), run.tally

    def open_records(self) -> int:
        return sum(run.size for run in self.open_runs())

    def latest_ms(self) -> int | None:
        """The newest event's time: the follow job's "now"."""
        return max((f["last_ms"] for f in self._kind("tick")), default=None)

    def lost_and_in_flight(self, grace_ms: int) -> tuple[list[OpenRun], list[OpenRun]]:
        latest = self.latest_ms()
        lost: list[OpenRun] = []
        in_flight: list[OpenRun] = []
        for run in self.open_runs():
            fetched_ms = run.tally.last_fetched_ms
            late = latest is not None and fetched_ms is not None and \
                latest - fetched_ms >= grace_ms
            (lost if late else in_flight).append(run)
        return lost, in_flight

    def gap(self) -> Row | None:
        """The journal's gaps (runtime/report/gaps.py) from its `journal_dropped` ticks:
        the span is when the drops were journaled (the ticks keep no `gap_*_ms`), so
        records fetched up to then count unknown; later than the batch report's end of
        the gap, never earlier."""
        ticks = [f for f in self._kind("tick") if f["s1"] == "journal_dropped"]
        if not ticks:
            return None
        return {"dropped": sum(f["count_sum"] or 0 for f in ticks),
                "from_ms": min(f["first_ms"] for f in ticks),
                "to_ms": max(f["last_ms"] for f in ticks)}

    def lost_and_unknown(self, grace_ms: int) -> tuple[list[OpenRun], list[OpenRun]]:
        """`lost_and_in_flight`'s lost records, those a journal gap may hide apart."""
        lost, _ = self.lost_and_in_flight(grace_ms)
        gap = self.gap()
        if gap is None:
            return lost, []
        hidden = [run for run in lost if (run.tally.last_fetched_ms or 0) <= gap["to_ms"]]
        return [run for run in lost if (run.tally.last_fetched_ms or 0) > gap["to_ms"]], hidden

    def _kind(self, kind: str) -> list[Row]:
        return [f for f in self.facts.values() if f["kind"] == kind]

    def aggregates(self, grace_ms: int, bucket_ms: int) -> tables.Aggregates:
        """The report's inputs (runtime/report/tables.py) as of the last batch."""
        lost, unknown = self.lost_and_unknown(grace_ms)
        names = _Names(self._kind("endpoint"))
        return tables.Aggregates(
            types=self._types(), ticks=self._ticks(), bucket_ms=bucket_ms,
            small=[f for f in self.facts.values()
                   if f["kind"] in ("endpoint", "actor", "crash", "move", "commit",
                                    "dead_letter", "replay", "instance")],
            groups=(self._endpoint_groups(names, lost, unknown)
                    + self._partition_groups(lost, unknown)),
            latencies=self._latencies(), gap=self.gap(),
        )

    def _types(self) -> list[Row]:
        per_type: dict[str | None, Row] = {}
        for fact in self._kind("tick") + self._kind("malformed"):
            type_ = fact["s1"] if fact["kind"] == "tick" else None
            row = per_type.setdefault(type_, {"type": type_, "events": 0, "first_ms": None,
                                              "last_ms": None, "count_sum": 0})
            row["events"] += fact["n"]
            row["count_sum"] += fact["count_sum"] or 0
            for name, pick in (("first_ms", min), ("last_ms", max)):
                values = [v for v in (row[name], fact[name]) if v is not None]
                row[name] = pick(values) if values else None
        return list(per_type.values())

    def _ticks(self) -> list[Row]:
        return [{"bucket_start_ms": f["n1"], "subscription": f["s2"] or "", "type": f["s1"],
                 "n": f["n"]} for f in self._kind("tick") if f["s1"] in THROUGHPUT_TYPES]

    def _endpoint_groups(self, names: _Names, lost: Sequence[OpenRun],
                         unknown: Sequence[OpenRun] = ()) -> list[Row]:
        groups: dict[tuple[str, str], Row] = {}

        def group(sub: str, endpoint: str) -> Row:
            return groups.setdefault((sub, endpoint), {
                "view": "endpoint", "k1": sub, "k2": endpoint, "k3": None,
                **dict.fromkeys((*COUNTS, "deliveries", "failed_attempts", "retries",
                                 "lost", "unknown"), 0),
                "_e2e": defaultdict(int)})

        for (sub, _, _), runs in self.cursors.items():
            for run in runs:
                row = group(sub, names.of(sub, run.tally))
                for name, value in zip(COUNTS, _record_counts(run), strict=True):
                    row[name] += value
        for (sub, eh), histogram in self.e2e.items():
            target = group(sub, names.endpoint(sub, eh))["_e2e"]
            for e2e_ms, n in histogram.items():
                target[e2e_ms] += n
        for name, opened in (("lost", lost), ("unknown", unknown)):
            for open_run in opened:
                sub = open_run.cursor[0]
                group(sub, names.of(sub, open_run.tally))[name] += open_run.size
        for (sub, endpoint), counts in self._event_counts(names).items():
            row = group(sub, endpoint)
            for name, value in counts.items():
                row[name] += value
        return [self._finish_endpoint_group(row) for row in groups.values()]

    def _event_counts(self, names: _Names) -> dict[tuple[str, str], dict[str, int]]:
        """Deliveries, failed attempts, retries per subscription and endpoint, from events;
        events without an endpoint go to the subscription's only endpoint (or "")."""
        fields = {"deliveries": "delivered", "failed_attempts": "failed",
                  "retries": "retry_scheduled"}
        result: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        attributed: dict[tuple[str, str], int] = defaultdict(int)
        for fact in self._kind("endpoint"):
            if fact["s1"] is None:
                continue
            for name, type_ in fields.items():
                count = fact[_TYPE_FIELDS[type_]]
                result[(fact["s1"], fact["s2"])][name] += count
                attributed[(fact["s1"], type_)] += count
        for tick in self._kind("tick"):
            if tick["s2"] is not None and tick["s1"] in fields.values():
                attributed[(tick["s2"], tick["s1"])] -= tick["n"]
        for (sub, type_), missing in attributed.items():
            if missing < 0:
                name = next(n for n, t in fields.items() if t == type_)
                result[(sub, names.endpoint(sub, None))][name] += -missing
        return result

    @staticmethod
    def _finish_endpoint_group(row: Row) -> Row:
        histogram = row.pop("_e2e")
        pct, maximum = nearest_rank(histogram)
        row["e2e_pct"] = [int(v) for v in pct] if pct is not None else None
        row["e2e_max"] = int(maximum) if maximum is not None else None
        row["attempts"] = row["deliveries"] + row["failed_attempts"]
        row["problems"] = []
        return row

    def _partition_groups(self, lost: Sequence[OpenRun],
                          unknown: Sequence[OpenRun] = ()) -> list[Row]:
        groups: dict[PartitionKey, Row] = {}

        def group(key: PartitionKey) -> Row:
            return groups.setdefault(key, {
                "view": "partition", "k1": key[0], "k2": key[1], "k3": key[2],
                **dict.fromkeys(COUNTS, 0), "lost": 0, "unknown": 0, "problems": []})

        for cursor, runs in self.cursors.items():
            row = group(cursor)
            for run in runs:
                for name, value in zip(COUNTS, _record_counts(run), strict=True):
                    row[name] += value
        for problem, opened in (("lost", lost), ("unknown", unknown)):
            for open_run in opened:
                row = group(open_run.cursor)
                row[problem] += open_run.size
                row["problems"].extend(
                    {"offset": offset, "fetches": open_run.tally.fetches, "deliveries": 0,
                     "lost": problem == "lost", **({"unknown": True} if problem == "unknown"
                                                    else {})}
                    for offset in range(open_run.first, open_run.last + 1))
        for record, tally in self.duplicates():
            group(record[:3])["problems"].append({
                "offset": record[3], "fetches": tally.fetches, "deliveries": tally.deliveries,
                "lost": False})
        return list(groups.values())

    def _latencies(self) -> list[Row]:
        histograms: dict[tuple[str, str, Any, Any], dict[float, int]] = defaultdict(dict)
        counts: dict[tuple[str, Any, Any], int] = defaultdict(int)
        for kind in HISTOGRAM_KINDS:
            for fact in self._kind(kind):
                view = "lateness" if kind == "lateness" else "endpoint"
                counts[(view, fact["s1"], fact["s2"])] += fact["n"]
                if fact["v"] is not None:
                    histogram = histograms[(kind, view, fact["s1"], fact["s2"])]
                    histogram[fact["v"]] = histogram.get(fact["v"], 0) + fact["n"]
        rows = []
        for (view, k1, k2), n in counts.items():
            added = nearest_rank(histograms.get(("added", view, k1, k2), {}))
            other = "lateness" if view == "lateness" else "http"
            second = nearest_rank(histograms.get((other, view, k1, k2), {}))
            rows.append({
                "view": view, "k1": k1, "k2": k2, "n": n,
                "a_pct": [int(v) for v in added[0]] if added[0] is not None else None,
                "a_max": int(added[1]) if added[1] is not None else None,
                "b_pct": second[0], "b_max": second[1],
            })
        return rows


class _Names:
    """Endpoint hashes -> names, and each subscription's only endpoint ("" if several)."""

    def __init__(self, endpoint_facts: Sequence[Row]) -> None:
        self._names = {f["n1"]: f["s2"] for f in endpoint_facts}
        per_subscription: dict[str, set[str]] = defaultdict(set)
        for fact in endpoint_facts:
            if fact["s1"] is not None:
                per_subscription[fact["s1"]].add(fact["s2"])
        self._only = {s: next(iter(e)) for s, e in per_subscription.items() if len(e) == 1}

    def endpoint(self, subscription: str, eh: int | None) -> str:
        if eh is not None and eh in self._names:
            return self._names[eh] or ""
        return self._only.get(subscription, "") or ""

    def of(self, subscription: str, tally: Tally) -> str:
        """A record's endpoint: of its one endpoint hash, or the smaller name of two."""
        name = self.endpoint(subscription, tally.eh)
        if tally.eh_max is None or tally.eh_max == tally.eh:
            return name
        return min(name, self.endpoint(subscription, tally.eh_max))


def _record_counts(run: Run) -> tuple[int, int, int]:
    """A run's records fetched, delivered and dead-lettered (`COUNTS`)."""
    tally = run.tally
    return (run.size if tally.fetches else 0, run.size if tally.deliveries else 0,
            run.size if tally.dead_letters else 0)


_TYPE_FIELDS = {"delivered": "deliveries", "failed": "failures",
                "retry_scheduled": "retries"}
_FACT_FIELDS = (
    *KEY, "n", "fetches", "deliveries", "failures", "retries", "dead_letters", "started",
    "crashed", "restarted", "stopped", "assigned", "revoked", "first_ms", "last_ms",
    "max_offset", "count_sum",
)
