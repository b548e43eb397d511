"""The follow job's state between micro-batches: what the live report is built from.

The follow job's streaming aggregation (runtime/report/facts.py, `keyed` + `aggregate`,
output mode "update") hands every micro-batch the keys it changed, each with its full
current measures: for records, their counts so far and the stamps of the batches that first
brought a fetch, a delivery and a dead letter. `FollowState.apply` folds such a batch in:

- small facts (event types per second, actors, partitions, commits, endpoints, latency
  histograms) replace their previous value;
- a record whose first fetch, delivery or dead letter came in this batch
  (`first_*_stamp == last_stamp`) adds one to the per partition and per endpoint counts,
  and a first delivery adds its end-to-end latency to a histogram;
- records fetched and not yet delivered nor dead-lettered are kept (`open`), as are records
  delivered more than once (`duplicates`); every other record is only in Spark's state
  store, so this state stays small (records in flight, lost and duplicated, plus facts);
- a `filtered` event (a subscription's filter left these offsets out, issue 26) closes the
  open records its ranges hold, after the batch's records (one fetched before a filter
  change and filtered when fetched again is accounted for, as in the batch report); it
  is not kept.

Lost with a grace period: an open record is lost once the newest event in the journal is
at least `grace_ms` later than its last fetch; before that it is in flight. Event time,
not the wall clock, so catching up on an old journal reports the same as following it.

Exactly once: `apply` is a pure step from version N-1 to version N (the batch id); the job
stores every version (`encode`) and, when Spark runs a batch again after a crash, starts
again from version N-1, so nothing is counted twice.

Attribution differs from the batch report in one corner only: a subscription that used
several endpoints has its records counted under the endpoint known when each count was
made. Latency percentiles come from histograms of values rounded to 3 significant digits.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runtime.host.journal import ranges_of
from runtime.report import tables
from runtime.report.facts import THROUGHPUT_TYPES
from runtime.report.transforms import PERCENTILES

Row = dict[str, Any]
FactKey = tuple[Any, ...]  # facts.KEY
RecordKey = tuple[str, str, int, int]  # subscription, topic, partition, offset
PartitionKey = tuple[str, str, int]
EndpointKey = tuple[str, int | None]  # subscription, endpoint hash
KEY = ("kind", "s1", "s2", "s3", "n1", "n2", "v")
HISTOGRAM_KINDS = ("added", "http", "lateness")
COUNTS = ("records_fetched", "delivered", "dead_lettered")


@dataclass(slots=True)
class OpenRecord:
    last_fetched_ms: int
    fetches: int
    eh: int | None


class _Stored(msgspec.Struct, frozen=True):
    """The persisted form: lists, since msgpack maps want string keys."""

    version: int
    facts: list[Row]
    open: list[tuple[str, str, int, int, int, int, int | None]]
    duplicates: list[tuple[str, str, int, int, int, int]]
    by_partition: list[tuple[str, str, int, int, int, int]]
    by_endpoint: list[tuple[str, int | None, int, int, int]]
    e2e: list[tuple[str, int | None, int, int]]


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
    open: dict[RecordKey, OpenRecord] = field(default_factory=dict)
    duplicates: dict[RecordKey, tuple[int, int]] = field(default_factory=dict)  # deliv., fetches
    by_partition: dict[PartitionKey, list[int]] = field(default_factory=dict)  # COUNTS
    by_endpoint: dict[EndpointKey, list[int]] = field(default_factory=dict)  # COUNTS
    e2e: dict[EndpointKey, dict[float, int]] = field(default_factory=dict)

    # -- one micro-batch -------------------------------------------------------------------

    def apply(self, rows: Iterable[Mapping[str, Any]], batch_id: int) -> None:
        """Fold in one micro-batch's changed keys (see the module doc)."""
        filtered: list[Mapping[str, Any]] = []
        for row in rows:
            if row["kind"] == "record":
                self._record(row)
            elif row["kind"] == "filtered":
                filtered.append(row)
            else:
                self.facts[tuple(row[k] for k in KEY)] = {k: row[k] for k in _FACT_FIELDS}
        for row in filtered:
            self._filtered(row["s1"], row["s2"], row["n1"], row["s3"])
        self.version = batch_id

    def _filtered(self, subscription: str, topic: str, partition: int, offsets: str) -> None:
        """Close the open records of the partition that the ranges ("3-7,9") hold."""
        ranges = ranges_of(offsets)
        for key in [k for k in self.open if k[:3] == (subscription, topic, partition)]:
            if any(first <= key[3] <= last for first, last in ranges):
                del self.open[key]

    def _record(self, row: Mapping[str, Any]) -> None:
        key: RecordKey = (row["s1"], row["s2"], row["n1"], row["n2"])
        last = row["last_stamp"]
        first = [row[f"first_{name}_stamp"] == last
                 for name in ("fetch", "delivery", "dead_letter")]
        if any(first):
            for counts in (self.by_partition.setdefault(key[:3], [0, 0, 0]),
                           self.by_endpoint.setdefault((key[0], row["eh"]), [0, 0, 0])):
                for i, new in enumerate(first):
                    counts[i] += new
        if first[1] and row["record_ts_ms"] is not None:
            e2e = row["first_delivered_ms"] - row["record_ts_ms"]
            histogram = self.e2e.setdefault((key[0], row["eh"]), {})
            histogram[round3(e2e)] = histogram.get(round3(e2e), 0) + 1
        if row["fetches"] > 0 and row["deliveries"] == 0 and row["dead_letters"] == 0:
            self.open[key] = OpenRecord(row["last_fetched_ms"], row["fetches"], row["eh"])
        else:
            self.open.pop(key, None)
        if row["deliveries"] > 1:
            self.duplicates[key] = (row["deliveries"], row["fetches"])

    # -- persistence -------------------------------------------------------------------

    def encode(self) -> bytes:
        return msgspec.msgpack.encode(_Stored(
            version=self.version,
            facts=list(self.facts.values()),
            open=[(*k, o.last_fetched_ms, o.fetches, o.eh) for k, o in self.open.items()],
            duplicates=[(*k, *v) for k, v in self.duplicates.items()],
            by_partition=[(*k, *v) for k, v in self.by_partition.items()],  # type: ignore[misc]
            by_endpoint=[(*k, *v) for k, v in self.by_endpoint.items()],  # type: ignore[misc]
            e2e=[(k[0], k[1], int(value), n) for k, h in self.e2e.items()
                 for value, n in h.items()],
        ))

    @classmethod
    def decode(cls, data: bytes) -> FollowState:
        stored = msgspec.msgpack.decode(data, type=_Stored)
        state = cls(version=stored.version)
        state.facts = {tuple(row[k] for k in KEY): row for row in stored.facts}
        state.open = {(s, t, p, o): OpenRecord(ms, f, eh)
                      for s, t, p, o, ms, f, eh in stored.open}
        state.duplicates = {(s, t, p, o): (d, f) for s, t, p, o, d, f in stored.duplicates}
        state.by_partition = {(s, t, p): [a, b, c] for s, t, p, a, b, c in stored.by_partition}
        state.by_endpoint = {(s, eh): [a, b, c] for s, eh, a, b, c in stored.by_endpoint}
        for sub, eh, value, n in stored.e2e:
            state.e2e.setdefault((sub, eh), {})[float(value)] = n
        return state

    # -- the report ----------------------------------------------------------------------

    def latest_ms(self) -> int | None:
        """The newest event's time: the follow job's "now"."""
        return max((f["last_ms"] for f in self._kind("tick")), default=None)

    def lost_and_in_flight(self, grace_ms: int) -> tuple[list[RecordKey], list[RecordKey]]:
        latest = self.latest_ms()
        lost: list[RecordKey] = []
        in_flight: list[RecordKey] = []
        for key, record in self.open.items():
            late = latest is not None and latest - record.last_fetched_ms >= grace_ms
            (lost if late else in_flight).append(key)
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

    def lost_and_unknown(self, grace_ms: int) -> tuple[list[RecordKey], list[RecordKey]]:
        """`lost_and_in_flight`'s lost records, those a journal gap may hide apart."""
        lost, _ = self.lost_and_in_flight(grace_ms)
        gap = self.gap()
        if gap is None:
            return lost, []
        hidden = [key for key in lost if self.open[key].last_fetched_ms <= gap["to_ms"]]
        return [key for key in lost if self.open[key].last_fetched_ms > gap["to_ms"]], hidden

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

    def _endpoint_groups(self, names: _Names, lost: Sequence[RecordKey],
                         unknown: Sequence[RecordKey] = ()) -> list[Row]:
        groups: dict[tuple[str, str], Row] = {}

        def group(sub: str, endpoint: str) -> Row:
            return groups.setdefault((sub, endpoint), {
                "view": "endpoint", "k1": sub, "k2": endpoint, "k3": None,
                **dict.fromkeys((*COUNTS, "deliveries", "failed_attempts", "retries",
                                 "lost", "unknown"), 0),
                "_e2e": defaultdict(int)})

        for (sub, eh), record_counts in self.by_endpoint.items():
            row = group(sub, names.endpoint(sub, eh))
            for name, value in zip(COUNTS, record_counts, strict=True):
                row[name] += value
        for (sub, eh), histogram in self.e2e.items():
            target = group(sub, names.endpoint(sub, eh))["_e2e"]
            for e2e_ms, n in histogram.items():
                target[e2e_ms] += n
        for key in lost:
            group(key[0], names.endpoint(key[0], self.open[key].eh))["lost"] += 1
        for key in unknown:
            group(key[0], names.endpoint(key[0], self.open[key].eh))["unknown"] += 1
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

    def _partition_groups(self, lost: Sequence[RecordKey],
                          unknown: Sequence[RecordKey] = ()) -> list[Row]:
        groups: dict[PartitionKey, Row] = {}
        def group(key: PartitionKey) -> Row:
            return groups.setdefault(key, {
                "view": "partition", "k1": key[0], "k2": key[1], "k3": key[2],
                **dict.fromkeys(COUNTS, 0), "lost": 0, "unknown": 0, "problems": []})

        for partition, counts in self.by_partition.items():
            group(partition).update(zip(COUNTS, counts, strict=True))
        for record in lost:
            row = group(record[:3])
            row["lost"] += 1
            row["problems"].append({"offset": record[3], "fetches": self.open[record].fetches,
                                    "deliveries": 0, "lost": True})
        for record in unknown:
            row = group(record[:3])
            row["unknown"] += 1
            row["problems"].append({"offset": record[3], "fetches": self.open[record].fetches,
                                    "deliveries": 0, "lost": False, "unknown": True})
        for record, (deliveries, fetches) in self.duplicates.items():
            group(record[:3])["problems"].append({"offset": record[3], "fetches": fetches,
                                                  "deliveries": deliveries, "lost": False})
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


_TYPE_FIELDS = {"delivered": "deliveries", "failed": "failures",
                "retry_scheduled": "retries"}
_FACT_FIELDS = (
    *KEY, "n", "fetches", "deliveries", "failures", "retries", "dead_letters", "started",
    "crashed", "restarted", "stopped", "assigned", "revoked", "first_ms", "last_ms",
    "max_offset", "count_sum",
)
