"""The report's tables from the aggregates the driver collected (plain Python, no Spark).

The batch report (runtime/report/batch.py) and the follow job (runtime/report/follow.py)
both end with a few small aggregates: per event type, per throughput bucket, per actor,
per topic-partition, per subscription and endpoint, and the lost and duplicated records.
This module turns them into the tables of the reference path (runtime/report/transforms.py),
with the same columns, types, order and values; tests/spark/test_fast_report.py compares
the two on one journal.

Rows are dicts; `Table.columns` names each column's type (`string`, `long`, `double`,
`bool`, `longs` for a list of longs), which the writer (runtime/report/output.py) maps
to Parquet. Sorting follows Spark's: ascending with nulls first, descending with nulls last.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]
PERCENTILE_NAMES = ("p50", "p95", "p99")
THROUGHPUT_TYPES = ("fetched", "delivered", "failed", "dead_lettered")


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]
    rows: list[Row]


@dataclass(frozen=True, slots=True)
class Aggregates:
    """What the driver collects; see runtime/report/facts.py for how each is computed.

    - `types`: per event type (None for malformed lines): `events`, `first_ms`, `last_ms`,
      `count_sum`.
    - `ticks`: per `bucket_start_ms`, `subscription` ("" for none) and `type`: `n`.
    - `small`: facts rows of kinds endpoint, actor, crash, move, commit, dead_letter,
      replay, instance.
    - `groups`: `groups.record_groups` rows: view "endpoint" (k1, k2 = subscription, endpoint) and
      view "partition" (k1, k2, k3 = subscription, topic, partition, with `problems`).
    - `latencies`: view "endpoint" (added `a_*`, HTTP `b_*`) and view "lateness" (`b_*`).
    """

    types: list[Row]
    ticks: list[Row]
    bucket_ms: int
    small: list[Row]
    groups: list[Row]
    latencies: list[Row]
    gap: Row | None = None  # the journal's gaps (runtime/report/gaps.py), if any


@dataclass(slots=True)
class Report:
    tables: list[Table]
    totals: Row
    event_counts: dict[str, tuple[int, int]]
    subscriptions: list[Row]
    audit_rows: list[Row]
    events: int
    malformed: int
    time_range: tuple[int | None, int | None]
    extra: Row = field(default_factory=dict)
    gap: Row | None = None

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)


def _asc(value: Any) -> tuple[bool, Any]:
    return (value is not None, value)


def _desc(value: Any) -> tuple[bool, Any]:
    """Descending, nulls last (negate numbers only: descending keys here are counts)."""
    return (value is None, -value if value is not None else 0)


def _sorted(rows: Iterable[Row], key: Callable[[Row], tuple[Any, ...]]) -> list[Row]:
    return sorted(rows, key=key)


def _pcts(prefix: str, values: Sequence[Any] | None, maximum: Any) -> Row:
    """`[p50, p95, p99]`, max -> `prefix_p50_ms` ... `prefix_max_ms`."""
    row = {f"{prefix}_{name}_ms": (values[i] if values is not None else None)
           for i, name in enumerate(PERCENTILE_NAMES)}
    row[f"{prefix}_max_ms"] = maximum
    return row


def _pct_columns(prefix: str, kind: str) -> list[tuple[str, str]]:
    return [(f"{prefix}_{name}_ms", kind) for name in (*PERCENTILE_NAMES, "max")]


def _views(rows: Iterable[Row], view: str) -> list[Row]:
    return [r for r in rows if r["view"] == view]


def _of_kind(rows: Iterable[Row], kind: str) -> list[Row]:
    return [r for r in rows if r["kind"] == kind]


# -- delivery summary -------------------------------------------------------------------

DELIVERY_SUMMARY = (
    ("subscription", "string"), ("endpoint", "string"), ("records_fetched", "long"),
    ("delivered", "long"), ("deliveries", "long"), ("attempts", "long"),
    ("failed_attempts", "long"), ("retries", "long"), ("dead_lettered", "long"),
    ("lost", "long"), ("duplicates", "long"), *_pct_columns("e2e", "long"),
    *_pct_columns("added", "long"), *_pct_columns("http", "double"),
)
_COUNTERS = ("records_fetched", "delivered", "deliveries", "attempts", "failed_attempts",
             "retries", "dead_lettered", "lost")


def delivery_summary(groups: Sequence[Row], latencies: Sequence[Row]) -> Table:
    """Per subscription and endpoint: the records' counts and end-to-end latency joined
    (full outer) with the events' added and HTTP latency."""
    rows: dict[tuple[str, str], Row] = {}
    for g in _views(groups, "endpoint"):
        row = {"subscription": g["k1"], "endpoint": g["k2"],
               **{name: g[name] for name in _COUNTERS}}
        row["duplicates"] = g["deliveries"] - g["delivered"]
        rows[(g["k1"], g["k2"])] = row | _pcts("e2e", g["e2e_pct"], g["e2e_max"])
    for lat in _views(latencies, "endpoint"):
        key = (lat["k1"], lat["k2"])
        row = rows.setdefault(key, {"subscription": key[0], "endpoint": key[1]})
        row |= _pcts("added", lat["a_pct"], lat["a_max"])
        row |= _pcts("http", lat["b_pct"], lat["b_max"])
    table = [{name: row.get(name) for name, _ in DELIVERY_SUMMARY} for row in rows.values()]
    ordered = _sorted(table, lambda r: (_asc(r["subscription"]), _asc(r["endpoint"])))
    return Table("delivery_summary", DELIVERY_SUMMARY, ordered)


def totals(groups: Sequence[Row]) -> Row:
    """Record totals: every record is in exactly one subscription/endpoint group."""
    endpoint_rows = _views(groups, "endpoint")
    result = {name: sum(int(g.get(name) or 0) for g in endpoint_rows)
              for name in ("records_fetched", "delivered", "deliveries", "dead_lettered",
                           "lost", "unknown", "attempts", "failed_attempts", "retries")}
    result["duplicates"] = result["deliveries"] - result["delivered"]
    return result


# -- throughput -------------------------------------------------------------------------

THROUGHPUT = (
    ("bucket_start_ms", "long"), ("subscription", "string"), ("fetched", "long"),
    ("delivered", "long"), ("failed", "long"), ("dead_lettered", "long"),
    ("bucket_ms", "long"), ("delivered_per_s", "double"), ("error_rate", "double"),
)


def throughput(ticks: Sequence[Row], bucket_ms: int) -> Table:
    """Per bucket and subscription: fetched, delivered, failed, rate and error rate."""
    counts: dict[tuple[int, str], dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(THROUGHPUT_TYPES, 0))
    for tick in ticks:
        start = tick["bucket_start_ms"] // bucket_ms * bucket_ms
        counts[(start, tick["subscription"])][tick["type"]] += int(tick["n"])
    rows = []
    for (start, sub), c in counts.items():
        outcomes = c["delivered"] + c["failed"]
        rows.append({
            "bucket_start_ms": start, "subscription": sub, **c, "bucket_ms": bucket_ms,
            "delivered_per_s": c["delivered"] * 1000.0 / bucket_ms,
            "error_rate": c["failed"] / outcomes if outcomes > 0 else None,
        })
    ordered = _sorted(rows, lambda r: (r["bucket_start_ms"], _asc(r["subscription"])))
    return Table("throughput", THROUGHPUT, ordered)


# -- actors, partitions, delay ------------------------------------------------------------

ACTORS = (
    ("actor", "string"), ("started", "long"), ("crashed", "long"), ("restarted", "long"),
    ("stopped", "long"), ("last_crash_reason", "string"), ("first_ms", "long"),
    ("last_ms", "long"),
)


def actors(small: Sequence[Row]) -> Table:
    """Per actor: starts, crashes, restarts, stops, the last crash reason, first/last."""
    last_crash: dict[str, tuple[int, str | None]] = {}
    for crash in _of_kind(small, "crash"):
        seen = last_crash.get(crash["s1"])
        candidate = (crash["n1"], crash["s2"])
        if seen is None or _asc_pair(candidate) > _asc_pair(seen):
            last_crash[crash["s1"]] = candidate
    rows = [{
        "actor": a["s1"], "started": a["started"], "crashed": a["crashed"],
        "restarted": a["restarted"], "stopped": a["stopped"],
        "last_crash_reason": last_crash.get(a["s1"], (0, None))[1],
        "first_ms": a["first_ms"], "last_ms": a["last_ms"],
    } for a in _of_kind(small, "actor")]
    ordered = _sorted(rows, lambda r: (_desc(r["restarted"]), _desc(r["crashed"]),
                                       _asc(r["actor"])))
    return Table("actors", ACTORS, ordered)


def _asc_pair(pair: tuple[int, str | None]) -> tuple[int, tuple[bool, Any]]:
    return (pair[0], _asc(pair[1]))


PARTITION_MOVEMENTS = (
    ("subscription", "string"), ("topic", "string"), ("partition", "long"),
    ("actor", "string"), ("assigned", "long"), ("revoked", "long"), ("last_ms", "long"),
)


def partition_movements(small: Sequence[Row]) -> Table:
    rows = [{
        "subscription": m["s1"], "topic": m["s2"], "partition": m["n1"], "actor": m["s3"],
        "assigned": m["assigned"], "revoked": m["revoked"], "last_ms": m["last_ms"],
    } for m in _of_kind(small, "move")]
    ordered = _sorted(rows, lambda r: tuple(
        _asc(r[k]) for k in ("subscription", "topic", "partition", "actor")))
    return Table("partition_movements", PARTITION_MOVEMENTS, ordered)


DELAY_LATENESS = (("topic", "string"), ("forwarded", "long"),
                  *_pct_columns("lateness", "double"))


def delay_lateness(latencies: Sequence[Row]) -> Table:
    rows = [{"topic": lat["k1"], "forwarded": lat["n"],
             **_pcts("lateness", lat["b_pct"], lat["b_max"])}
            for lat in _views(latencies, "lateness")]
    return Table("delay_lateness", DELAY_LATENESS,
                 _sorted(rows, lambda r: (_asc(r["topic"]),)))


# -- audit ------------------------------------------------------------------------------

UNKNOWN = "unknown: journal gap"  # a record a journal gap may hide (runtime/report/gaps.py)
AUDIT = (
    ("subscription", "string"), ("topic", "string"), ("partition", "long"),
    ("records_fetched", "long"), ("delivered", "long"), ("dead_lettered", "long"),
    ("lost", "long"), ("unknown", "long"), ("lost_committed_past", "long"),
    ("lost_offsets", "longs"),
    ("duplicates", "long"), ("duplicate_offsets", "longs"), ("committed_offset", "long"),
)
AUDIT_OFFSETS = (
    ("subscription", "string"), ("topic", "string"), ("partition", "long"),
    ("offset", "long"), ("problem", "string"), ("fetches", "long"), ("deliveries", "long"),
    ("committed_past", "bool"),
)
PartitionKey = tuple[str, str, int]


def committed_offsets(small: Sequence[Row]) -> dict[PartitionKey, int]:
    """Per subscription and topic-partition: the highest committed offset."""
    return {(c["s1"], c["s2"], c["n1"]): c["max_offset"] for c in _of_kind(small, "commit")}


def _committed_past(offset: int, committed: int | None) -> bool:
    return committed is not None and offset < committed


def audit(groups: Sequence[Row], commits: Mapping[PartitionKey, int]) -> Table:
    """Per subscription and topic-partition: lost and duplicated offsets, listed."""
    rows = []
    for g in _views(groups, "partition"):
        key = (g["k1"], g["k2"], g["k3"])
        committed = commits.get(key)
        problems = g["problems"] or []
        lost = sorted(p["offset"] for p in problems if p["lost"])
        dups = [p for p in problems if p["deliveries"] > 1]
        rows.append({
            "subscription": key[0], "topic": key[1], "partition": key[2],
            "records_fetched": g["records_fetched"], "delivered": g["delivered"],
            "dead_lettered": g["dead_lettered"], "lost": g["lost"],
            "unknown": g.get("unknown", 0),
            "lost_committed_past": sum(_committed_past(o, committed) for o in lost),
            "lost_offsets": lost,
            "duplicates": sum(p["deliveries"] - 1 for p in dups),
            "duplicate_offsets": sorted(p["offset"] for p in dups),
            "committed_offset": committed,
        })
    ordered = _sorted(rows, lambda r: tuple(
        _asc(r[k]) for k in ("subscription", "topic", "partition")))
    return Table("audit", AUDIT, ordered)


def _problem(p: Row) -> str:
    if p["lost"]:
        return "lost"
    return UNKNOWN if p.get("unknown") else "duplicate"


def audit_offsets(groups: Sequence[Row], commits: Mapping[PartitionKey, int]) -> Table:
    """One row per lost or duplicated offset (the audit in long form)."""
    rows = []
    for g in _views(groups, "partition"):
        key = (g["k1"], g["k2"], g["k3"])
        for p in g["problems"] or []:
            rows.append({
                "subscription": key[0], "topic": key[1], "partition": key[2],
                "offset": p["offset"], "problem": _problem(p),
                "fetches": p["fetches"], "deliveries": p["deliveries"],
                "committed_past": _committed_past(p["offset"], commits.get(key)),
            })
    ordered = _sorted(rows, lambda r: tuple(
        _asc(r[k]) for k in ("subscription", "topic", "partition", "offset")))
    return Table("audit_offsets", AUDIT_OFFSETS, ordered)


# -- dead letters and replays -----------------------------------------------------------

DEAD_LETTERS = (
    ("subscription", "string"), ("topic", "string"), ("partition", "long"),
    ("offset", "long"), ("reason", "string"), ("status", "long"), ("response", "string"),
    ("attempts", "long"), ("dead_lettered", "long"), ("last_ms", "long"),
    ("replayed", "long"),
)
REPLAYS = (
    ("replay_id", "string"), ("subscription", "string"), ("records", "long"),
    ("delivered", "long"), ("failed", "long"), ("first_ms", "long"), ("last_ms", "long"),
)
REPLAY_DELIVERED = "delivered again"  # the end of a `replayed` event's reason
RecordKey = tuple[str, str, int, int]


def replay_id(reason: str | None) -> str:
    """`replayed` events' reason is "<replay id>: <outcome>" (actors/delivery/path/replay.py)."""
    return (reason or "").split(": ", 1)[0]


def replay_delivered(reason: str | None) -> bool:
    return (reason or "").endswith(f": {REPLAY_DELIVERED}")


def _record_key(fact: Row) -> RecordKey:
    return (fact["s1"], fact["s2"], fact["n1"], fact["n2"])


Detail = tuple[str | None, int | None, str | None]  # reason, status, response


def dead_letter_detail(packed: str | None) -> Detail:
    """A dead letter fact's reason, status and response (`facts.detail_reason` packs them
    as JSON; a plain reason has neither: journals before issue 36)."""
    if packed is None or not packed.startswith("{"):
        return packed, None, None
    try:
        detail = json.loads(packed)
    except ValueError:
        return packed, None, None
    return detail.get("reason"), detail.get("status"), detail.get("response")


def _latest(detail: Detail) -> tuple[tuple[bool, Any], ...]:
    """The reference's tie-break among dead letters of one millisecond: `max` of the
    struct (reason, status, response), nulls first."""
    return tuple(_asc(value) for value in detail)


def dead_letters(small: Sequence[Row]) -> Table:
    """One row per dead-lettered record: the last reason, HTTP status and answer snippet,
    the most attempts, how often it was dead-lettered and how often a replay delivered
    it since."""
    replayed: dict[RecordKey, int] = defaultdict(int)
    for fact in _of_kind(small, "replay"):
        if replay_delivered(fact["s3"]):
            replayed[_record_key(fact)] += fact["n"]
    rows: dict[RecordKey, Row] = {}
    for fact in _of_kind(small, "dead_letter"):
        key = _record_key(fact)
        row = rows.setdefault(key, {
            "subscription": key[0], "topic": key[1], "partition": key[2], "offset": key[3],
            "reason": None, "status": None, "response": None, "attempts": None,
            "dead_lettered": 0, "last_ms": None, "replayed": replayed.get(key, 0)})
        row["dead_lettered"] += fact["n"]
        detail = dead_letter_detail(fact["s3"])
        if row["last_ms"] is None or (fact["last_ms"], _latest(detail)) > (
                row["last_ms"], _latest((row["reason"], row["status"], row["response"]))):
            row["last_ms"] = fact["last_ms"]
            row["reason"], row["status"], row["response"] = detail
        if fact["v"] is not None:
            row["attempts"] = max(int(fact["v"]), row["attempts"] or 0)
    ordered = _sorted(rows.values(), lambda r: tuple(
        _asc(r[k]) for k in ("subscription", "topic", "partition", "offset")))
    return Table("dead_letters", DEAD_LETTERS, ordered)


def replays(small: Sequence[Row]) -> Table:
    """Per replay and subscription: records pushed again, delivered, failed, when."""
    rows: dict[tuple[str, str], Row] = {}
    records: dict[tuple[str, str], set[RecordKey]] = defaultdict(set)
    for fact in _of_kind(small, "replay"):
        key = (replay_id(fact["s3"]), fact["s1"])
        row = rows.setdefault(key, {"replay_id": key[0], "subscription": key[1],
                                    "records": 0, "delivered": 0, "failed": 0,
                                    "first_ms": None, "last_ms": None})
        records[key].add(_record_key(fact))
        row["delivered" if replay_delivered(fact["s3"]) else "failed"] += fact["n"]
        row["first_ms"] = min(v for v in (row["first_ms"], fact["first_ms"]) if v is not None)
        row["last_ms"] = max(v for v in (row["last_ms"], fact["last_ms"]) if v is not None)
    for key, row in rows.items():
        row["records"] = len(records[key])
    ordered = _sorted(rows.values(), lambda r: (_asc(r["replay_id"]), _asc(r["subscription"])))
    return Table("replays", REPLAYS, ordered)


# -- instances --------------------------------------------------------------------------

INSTANCE_TYPES = ("fetched", "delivered", "failed", "dead_lettered", "replayed", "committed")
INSTANCES = (
    ("instance", "string"), ("events", "long"),
    *((name, "long") for name in INSTANCE_TYPES), ("first_ms", "long"), ("last_ms", "long"),
)


def instances(small: Sequence[Row]) -> Table:
    """Per instance (journal directory): its events, by type, and their time range."""
    rows: dict[str, Row] = {}
    for fact in _of_kind(small, "instance"):
        row = rows.setdefault(fact["s1"], {
            "instance": fact["s1"], "events": 0, **dict.fromkeys(INSTANCE_TYPES, 0),
            "first_ms": None, "last_ms": None})
        row["events"] += fact["n"]
        if fact["s2"] in INSTANCE_TYPES:
            row[fact["s2"]] += fact["n"]
        row["first_ms"] = min(v for v in (row["first_ms"], fact["first_ms"]) if v is not None)
        row["last_ms"] = max(v for v in (row["last_ms"], fact["last_ms"]) if v is not None)
    return Table("instances", INSTANCES, _sorted(rows.values(), lambda r: (r["instance"],)))


# -- everything -------------------------------------------------------------------------

def event_counts(types: Sequence[Row]) -> dict[str, tuple[int, int]]:
    """Per event type: events and the sum of `count` (malformed lines are not events)."""
    return {t["type"]: (int(t["events"]), int(t["count_sum"] or 0))
            for t in types if t["type"] is not None}


def build(agg: Aggregates) -> Report:
    """Every table of the report, in the reference path's order, and the summary's facts."""
    commits = committed_offsets(agg.small)
    summary = delivery_summary(agg.groups, agg.latencies)
    audit_table = audit(agg.groups, commits)
    valid = [t for t in agg.types if t["type"] is not None]
    return Report(
        tables=[summary, throughput(agg.ticks, agg.bucket_ms), actors(agg.small),
                partition_movements(agg.small), delay_lateness(agg.latencies), audit_table,
                audit_offsets(agg.groups, commits), dead_letters(agg.small),
                replays(agg.small), instances(agg.small)],
        totals=totals(agg.groups),
        event_counts=event_counts(agg.types),
        subscriptions=summary.rows,
        audit_rows=[r for r in audit_table.rows
                    if r["lost"] > 0 or r["duplicates"] > 0 or r["unknown"] > 0],
        events=sum(int(t["events"]) for t in valid),
        malformed=sum(int(t["events"]) for t in agg.types if t["type"] is None),
        time_range=(min((t["first_ms"] for t in valid), default=None),
                    max((t["last_ms"] for t in valid), default=None)),
        gap=agg.gap,
    )
