"""The fast path's transforms: few passes, numeric aggregation buffers, small results.

The reference transforms (runtime/report/transforms.py) define the report; they scan the
events once per table and sort for every string-valued aggregate (Spark's hash aggregation
takes fixed-width buffers only), which on 2 cores made most of the report's time. These
compute the same facts in three passes over the events, each a hash aggregation:

- `record_facts`: one row per record (subscription, topic, partition, offset) with the
  counts and times of `transforms.record_outcomes`; the endpoint as `eh`, the smallest
  `endpoint_hash` of its events (`eh_max` differs only for a record whose events name two
  endpoints; `resolve_endpoints` settles those as the reference does);
- `tick_facts`: per event type, subscription, endpoint and second, plus, for the rare
  event types (actor lifecycle, partition movements, commits), their actor, topic,
  partition and reason: everything else the report counts, in a few thousand rows;
- `latency_percentiles`: added, HTTP and delay latency percentiles, exactly as the
  reference computes them.

The follow job (runtime/report/follow.py) needs all of this from one streaming aggregation,
so `keyed` turns each event into one or more rows of a common key (`KEY`) and `aggregate`
computes every measure for every key; see `keyed` for the kinds of rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from runtime.report import transforms
from runtime.report.gaps import JournalGap, split_lost
from runtime.report.transforms import RECORD_EVENTS, RECORD_KEY

TICK_MS = 1_000
THROUGHPUT_TYPES = ("fetched", "delivered", "failed", "dead_lettered")
RARE_TYPES = ("actor_started", "actor_crashed", "actor_restarted", "actor_stopped",
              "partition_assigned", "partition_revoked", "committed")
# kept per record (offset, attempt, reason): the dead letters and replays tables list them
DETAILED_TYPES = ("dead_lettered", "replayed")
KEY = ["kind", "s1", "s2", "s3", "n1", "n2", "v"]
WEIGHT = "_n"  # on a `keyed` row: the records it stands for (a ranged `fetched`), else 1
STAMPS = ["first_fetch_stamp", "first_delivery_stamp", "first_dead_letter_stamp", "last_stamp"]
TYPE_COUNTS = [
    ("fetched", "fetches"), ("delivered", "deliveries"), ("failed", "failures"),
    ("retry_scheduled", "retries"), ("dead_lettered", "dead_letters"),
    ("actor_started", "started"), ("actor_crashed", "crashed"),
    ("actor_restarted", "restarted"), ("actor_stopped", "stopped"),
    ("partition_assigned", "assigned"), ("partition_revoked", "revoked"),
]
RECORD_COUNTS = TYPE_COUNTS[:5]

_KEY_TYPES = {"kind": "string", "s1": "string", "s2": "string", "s3": "string",
              "n1": "long", "n2": "long", "v": "double"}


def _is(*types: str) -> Column:
    return F.col("type").isin(*types)


def detail_reason() -> Column:
    """A `dead_lettered` event's reason with its `status` and `response` (issue 36), as
    JSON (`tables.dead_letter_detail` reads it back); the plain reason when it has neither
    (journals before issue 36). One string, so the facts' key (`KEY`, kept by the follow
    job's checkpoints) keeps its shape."""
    c = F.col
    packed = F.to_json(F.struct(c("reason"), c("status"), c("response")))
    return F.when(_is("dead_lettered") & (c("status").isNotNull() | c("response").isNotNull()),
                  packed).otherwise(c("reason"))


def _count_if(condition: Column, weight: Column | None = None) -> Column:
    """Rows where `condition` holds; with a `weight` (`WEIGHT`), the sum of theirs."""
    if weight is None:
        return F.count(F.when(condition, 1))
    return F.coalesce(F.sum(F.when(condition, weight)), F.lit(0)).cast("long")


def _min_if(condition: Column, value: Column) -> Column:
    return F.min(F.when(condition, value))


def added_ms() -> Column:
    """The service's added latency of an attempt event, first attempts only
    (`transforms.added_latency`)."""
    return transforms.added_latency()


def _has_record_key() -> Column:
    keyed_ = F.lit(True)
    for name in RECORD_KEY:
        keyed_ = keyed_ & F.col(name).isNotNull()
    return keyed_


def _record_measures(weight: Column | None = None) -> list[Column]:
    ts = F.col("ts_ms")
    return [
        *(_count_if(_is(t), weight).alias(name) for t, name in RECORD_COUNTS),
        F.max("record_ts_ms").alias("record_ts_ms"),
        _min_if(_is("fetched"), ts).alias("first_fetched_ms"),
        F.max(F.when(_is("fetched"), ts)).alias("last_fetched_ms"),
        _min_if(_is("delivered"), ts).alias("first_delivered_ms"),
        F.min(name_hash(F.col("endpoint"))).alias("eh"),
        F.max(name_hash(F.col("endpoint"))).alias("eh_max"),
    ]


# -- batch: three passes ----------------------------------------------------------------

def name_hash(name: Column) -> Column:
    """A long per name (null for none): hash aggregation wants fixed-width keys and
    buffers; the driver maps hashes back to names (`names`)."""
    return F.when(name.isNotNull(), F.xxhash64(name))


HASHED_KEY = ["sh", "th", "partition", "offset"]  # subscription and topic hashed
WEIGHTS = ("_n", "_first", "_last")  # a `tick_facts` row for several events


def record_facts(events: DataFrame, gap: JournalGap | None = None) -> DataFrame:
    """Valid events -> one row per record (see the module doc), with `with_outcomes`
    and `unknown` (a journal `gap`, runtime/report/gaps.py); keyed by `HASHED_KEY`, whose
    fixed-width keys let Spark use its fast hash map."""
    rows = hashed(events.filter(_is(*RECORD_EVENTS) & _has_record_key()))
    records = with_outcomes(rows.groupBy(*HASHED_KEY).agg(*_record_measures()))
    ranges = transforms.filtered_ranges(hashed(events), HASHED_KEY[:-1])
    return split_lost(transforms.excuse_filtered(records, ranges, HASHED_KEY), gap)


def with_outcomes(records: DataFrame) -> DataFrame:
    """The derived columns of `transforms.record_outcomes`: attempts, e2e latency, lost."""
    c = F.col
    return records.withColumns({
        "attempts": c("deliveries") + c("failures"),
        "e2e_latency_ms": c("first_delivered_ms") - c("record_ts_ms"),
        "lost": (c("fetches") > 0) & (c("deliveries") == 0) & (c("dead_letters") == 0),
    })


def tick_facts(raw: DataFrame) -> DataFrame:
    """Raw rows -> per `type` (null for malformed lines), subscription, endpoint, topic and
    `second`, for `RARE_TYPES` and `DETAILED_TYPES` also partition, actor and reason, and
    for `DETAILED_TYPES` the record's offset (`record_offset`) and `attempt`: `n` events,
    `first_ms`, `last_ms`, `max_offset` and `count_sum` (sum of `count`).

    A row stands for one event, or, with `WEIGHTS` (`ranges.tick_rows`), for `_n` events
    of one second from `_first` to `_last`."""
    c = F.col
    if WEIGHTS[0] not in raw.columns:
        raw = raw.withColumns({WEIGHTS[0]: F.lit(1).cast("long"), WEIGHTS[1]: c("ts_ms"),
                               WEIGHTS[2]: c("ts_ms")})
    valid = transforms.is_valid_event()
    detailed = valid & _is(*DETAILED_TYPES)
    instance = transforms.instance_column(raw)
    rare = valid & _is(*RARE_TYPES) | detailed
    return raw.groupBy(
        F.when(valid, c("type")).alias("type"),
        F.when(valid, c("subscription")).alias("subscription"),
        F.when(valid, c("endpoint")).alias("endpoint"),
        F.when(valid, F.floor(c("_first") / TICK_MS) * TICK_MS).alias("second"),
        F.when(valid, c("topic")).alias("topic"),
        *(F.when(rare, c(name)).alias(name) for name in ("partition", "actor")),
        F.when(rare, detail_reason()).alias("reason"),
        F.when(detailed, c("offset")).alias("record_offset"),
        F.when(detailed, c("attempt")).alias("attempt"),
        instance.alias("instance"),
    ).agg(
        F.sum("_n").alias("n"), F.min("_first").alias("first_ms"),
        F.max("_last").alias("last_ms"), F.max("offset").alias("max_offset"),
        F.sum("count").alias("count_sum"),
    )


def tick_totals(ticks: DataFrame) -> DataFrame:
    """`tick_facts` without the second: few rows, for the driver (`small_facts`)."""
    keys = ["type", "subscription", "endpoint", "topic", "partition", "actor", "reason",
            "record_offset", "attempt", "instance"]
    return ticks.groupBy(*keys).agg(
        F.sum("n").alias("n"), F.min("first_ms").alias("first_ms"),
        F.max("last_ms").alias("last_ms"), F.max("max_offset").alias("max_offset"),
        F.sum("count_sum").alias("count_sum"),
        *(F.first(name_hash(F.col(name))).alias(f"{name}_hash")
          for name in ("subscription", "topic", "endpoint")),
    )


def coarse_ticks(ticks: DataFrame, bucket_ms: int) -> DataFrame:
    """The throughput types' `tick_facts` summed into `bucket_ms` buckets."""
    c = F.col
    bucket = (F.floor(c("second") / bucket_ms) * bucket_ms).cast("long")
    return ticks.filter(_is(*THROUGHPUT_TYPES)).groupBy(
        bucket.alias("bucket_start_ms"),
        F.coalesce(c("subscription"), F.lit("")).alias("subscription"), "type",
    ).agg(F.sum("n").alias("n"))


def small_facts(totals: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`tick_totals` rows -> the driver's fact rows (`tables.Aggregates.small`): `type`,
    `name` (a subscription, topic or endpoint and its `name_hash` in `n1`), `endpoint`,
    `actor`, `crash`, `move`, `commit`, `dead_letter` and `replay` rows, the shape
    `aggregate` gives."""
    facts: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(key: tuple[Any, ...], row: Mapping[str, Any], **counts: int) -> None:
        kind, s1, s2, s3, n1, n2, v = (*key, None, None, None, None, None, None)[:7]
        fact = facts.setdefault(key, {
            "kind": kind, "s1": s1, "s2": s2, "s3": s3, "n1": n1, "n2": n2, "v": v, "n": 0,
            "first_ms": None, "last_ms": None, "max_offset": None, "count_sum": None,
            **{name: 0 for _, name in TYPE_COUNTS}})
        fact["n"] += row["n"]
        for name, value in counts.items():
            fact[name] += value
        _merge_extremes(fact, row)

    for row in totals:
        type_ = row["type"]
        add(("type", type_, None, None, None), row)
        for name in ("subscription", "topic", "endpoint"):
            if row[name] is not None:
                add(("name", row[name], None, None, row[f"{name}_hash"]), row)
        if row["endpoint"] is not None:
            add(("endpoint", row["subscription"], row["endpoint"], None,
                 row["endpoint_hash"]), row)
        counts = {name: row["n"] for t, name in TYPE_COUNTS if t == type_}
        if type_ is not None and type_.startswith("actor_") and row["actor"] is not None:
            add(("actor", row["actor"], None, None, None), row, **counts)
        if type_ == "actor_crashed" and row["actor"] is not None:
            add(("crash", row["actor"], row["reason"], None, row["last_ms"]), row)
        if type_ in ("partition_assigned", "partition_revoked"):
            add(("move", row["subscription"], row["topic"], row["actor"], row["partition"]),
                row, **counts)
        if type_ == "committed" and row["max_offset"] is not None:
            add(("commit", row["subscription"], row["topic"], None, row["partition"]), row)
        if type_ in DETAILED_TYPES and row["record_offset"] is not None:
            add(_detail_key(row), row)
        if type_ is not None and row["instance"] is not None:
            add(("instance", row["instance"], type_, None, None), row)
    return list(facts.values())


def _detail_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A `dead_letter` or `replay` fact's key, as `_key_rows` makes it."""
    kind = "dead_letter" if row["type"] == "dead_lettered" else "replay"
    attempt = float(row["attempt"]) if row["attempt"] is not None else None
    return (kind, row["subscription"], row["topic"], row["reason"], row["partition"],
            row["record_offset"], attempt)


def _merge_extremes(fact: dict[str, Any], row: Mapping[str, Any]) -> None:
    for name, pick in (("first_ms", min), ("last_ms", max), ("max_offset", max)):
        values = [v for v in (fact[name], row[name]) if v is not None]
        fact[name] = pick(values) if values else None
    if row["count_sum"] is not None:
        fact["count_sum"] = (fact["count_sum"] or 0) + row["count_sum"]


def latency_percentiles(events: DataFrame) -> DataFrame:
    """Added and HTTP latency per subscription and endpoint (`view` = "endpoint") and delay
    lateness per level topic (`view` = "lateness"), as `transforms.delivery_summary` and
    `transforms.delay_lateness` compute them, in one aggregation."""
    c = F.col
    known = [F.coalesce(c("subscription"), F.lit("")), F.coalesce(c("endpoint"), F.lit(""))]
    sends = _is("sent", "delivered", "failed")
    second_value = F.when(_is("delivered"), c("latency_ms")).when(
        _is("delay_forwarded"), c("lateness_ms"))
    rows = events.filter(_is("sent", "delivered", "failed", "delay_forwarded")).select(
        F.when(sends, F.lit("endpoint")).otherwise(F.lit("lateness")).alias("view"),
        F.when(sends, known[0]).otherwise(c("topic")).alias("k1"),
        F.when(sends, known[1]).alias("k2"),
        F.when(sends, added_ms()).alias("a"), second_value.alias("b"),
    )
    pct = transforms.PERCENTILES, transforms.PERCENTILE_ACCURACY
    return rows.groupBy("view", "k1", "k2").agg(
        F.count(F.lit(1)).alias("n"),
        F.percentile_approx("a", *pct).alias("a_pct"), F.max("a").alias("a_max"),
        F.percentile_approx("b", *pct).alias("b_pct"), F.max("b").alias("b_max"),
    )


# -- endpoints of records -----------------------------------------------------------------

def hashed(events: DataFrame) -> DataFrame:
    c = F.col
    return events.withColumns({"sh": name_hash(c("subscription")),
                               "th": name_hash(c("topic"))})


def ambiguous(records: DataFrame) -> DataFrame:
    """Records whose events name more than one endpoint (their keys only)."""
    return records.filter(F.col("eh") != F.col("eh_max")).select(*HASHED_KEY)


def smallest_endpoints(events: DataFrame, keys: DataFrame) -> DataFrame:
    """For the given record keys: the hash of the lexicographically smallest endpoint of
    their events (a string aggregate, so only for the few records `ambiguous` finds)."""
    joined = hashed(events).join(F.broadcast(keys), HASHED_KEY)
    return joined.groupBy(*HASHED_KEY).agg(name_hash(F.min("endpoint")).alias("_smallest"))


def names(small: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """`name_hash` -> name, from the `name` facts; ValueError if two names collide."""
    found: dict[int, str] = {}
    for row in small:
        if row["kind"] == "name" and found.setdefault(row["n1"], row["s1"]) != row["s1"]:
            raise ValueError(f"names {found[row['n1']]!r} and {row['s1']!r} have the "
                             "same hash; the fast report cannot tell them apart")
    return found


def only_endpoints(small: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Subscription hash -> the hash of its endpoint, for subscriptions that used one."""
    hashes = {row["s1"]: row["n1"] for row in small if row["kind"] == "name"}
    per_subscription: dict[str, set[int]] = {}
    for row in small:
        if row["kind"] == "endpoint" and row["s1"] is not None:
            per_subscription.setdefault(row["s1"], set()).add(row["n1"])
    return {hashes[sub]: next(iter(eps)) for sub, eps in per_subscription.items()
            if len(eps) == 1}


def resolve_endpoints(records: DataFrame, only: Mapping[int, int],
                      smallest: DataFrame | None = None) -> DataFrame:
    """Adds `ep`, the hash of the record's endpoint: `eh`, else its subscription's only
    endpoint (`only`), as `transforms.fill_endpoints` does; `smallest`
    (`smallest_endpoints`) settles the ambiguous records. Adds `ambiguous`.

    `only` is joined as a broadcast table: as a literal map (`element_at`) it was a
    linear search per row, at 10,000 subscriptions most of the report's time."""
    c = F.col
    table = records.sparkSession.createDataFrame(sorted(only.items()), "sh long, _only long")
    records = records.join(F.broadcast(table), "sh", "left")
    candidates = [c("eh"), c("_only")]
    if smallest is not None:
        records = records.join(F.broadcast(smallest), HASHED_KEY, "left")
        candidates.insert(0, c("_smallest"))
    resolved = records.withColumns({
        "ep": F.coalesce(*candidates),
        "ambiguous": F.coalesce(c("eh") != c("eh_max"), F.lit(False)),
    })
    return resolved.drop("eh", "eh_max", "_smallest", "_only")


# -- follow: one aggregation for everything ------------------------------------------------

def round_latency(value: Column) -> Column:
    """`value` to 3 significant digits (0.5% at most), so a histogram has few bins."""
    magnitude = F.floor(F.log10(F.abs(value)))
    scale = F.pow(F.lit(10.0), F.lit(2) - magnitude)
    return F.when(value == 0, F.lit(0.0)).otherwise(F.round(value * scale) / scale)


def _row(kind: str, **keys: Column) -> Column:
    fields = [F.lit(kind).alias("kind")]
    fields += [keys.get(name, F.lit(None)).cast(_KEY_TYPES[name]).alias(name)
               for name in KEY[1:]]
    return F.struct(*fields)


def _key_rows(records: bool = True) -> list[Column]:
    """One `when(condition, row)` per kind of keyed row; null where it does not apply."""
    return [F.when(condition, row) if condition is not None else row
            for condition, row in _key_pairs(records)]


def _key_pairs(records: bool = True) -> list[tuple[Column | None, Column]]:
    """(condition, row) per kind of keyed row (None: every valid event). Without
    `records`, no `record` and `filtered` rows (the follow job keeps those apart,
    runtime/report/follow_batch.py)."""
    c = F.col
    sub, endpoint = F.coalesce(c("subscription"), F.lit("")), F.coalesce(c("endpoint"), F.lit(""))
    record: list[tuple[Column | None, Column]] = [(
        _is(*RECORD_EVENTS) & _has_record_key(),
        _row("record", s1=c("subscription"), s2=c("topic"), n1=c("partition"),
             n2=c("offset")))]
    filtered: list[tuple[Column | None, Column]] = [(
        _is("filtered") & c("offsets").isNotNull() & c("subscription").isNotNull()
        & c("topic").isNotNull() & c("partition").isNotNull(),
        _row("filtered", s1=c("subscription"), s2=c("topic"), s3=c("offsets"),
             n1=c("partition")))]
    return [
        *(record if records else []),
        (None, _row("tick", s1=c("type"), s2=c("subscription"),
                    n1=F.floor(c("ts_ms") / TICK_MS) * TICK_MS)),
        (c("endpoint").isNotNull(), _row(
            "endpoint", s1=c("subscription"), s2=c("endpoint"),
            n1=name_hash(c("endpoint")))),
        (c("type").startswith("actor_") & c("actor").isNotNull(),
         _row("actor", s1=c("actor"))),
        (_is("actor_crashed") & c("actor").isNotNull(), _row(
            "crash", s1=c("actor"), s2=c("reason"), n1=c("ts_ms"))),
        (_is("partition_assigned", "partition_revoked"), _row(
            "move", s1=c("subscription"), s2=c("topic"), s3=c("actor"), n1=c("partition"))),
        (_is("committed") & c("offset").isNotNull(), _row(
            "commit", s1=c("subscription"), s2=c("topic"), n1=c("partition"))),
        *((_is(type_) & c("offset").isNotNull(), _row(
            kind, s1=c("subscription"), s2=c("topic"), s3=detail_reason(), n1=c("partition"),
            n2=c("offset"), v=c("attempt")))
          for type_, kind in (("dead_lettered", "dead_letter"), ("replayed", "replay"))),
        *(filtered if records else []),
        (c("instance").isNotNull(), _row("instance", s1=c("instance"), s2=c("type"))),
        (_is("sent") | (_is("delivered", "failed") & c("fetched_ts_ms").isNotNull()),
         _row("added", s1=sub, s2=endpoint, v=round_latency(added_ms()))),
        (_is("delivered"), _row("http", s1=sub, s2=endpoint,
                                v=round_latency(c("latency_ms")))),
        (_is("delay_forwarded"), _row("lateness", s1=c("topic"),
                                      v=round_latency(c("lateness_ms")))),
    ]


def keyed(raw: DataFrame, *, stamp: Column | None = None, records: bool = True) -> DataFrame:
    """Raw journal rows -> rows of `KEY` plus the event columns `aggregate` reads.

    | kind | from | s1 | s2 | s3 | n1 | n2 | v |
    |---|---|---|---|---|---|---|---|
    | record | record events with a key | subscription | topic | | partition | offset | |
    | tick | every valid event | type | subscription | | second (ms) | | |
    | malformed | lines that are not events | | | | | | |
    | endpoint | events with an endpoint | subscription | endpoint | | hash | | |
    | actor | `actor_*` with an actor | actor | | | | | |
    | crash | `actor_crashed` with an actor | actor | reason | | ts | | |
    | move | partition movements | subscription | topic | actor | partition | | |
    | commit | `committed` with an offset | subscription | topic | | partition | | |
    | dead_letter, replay | their events | sub. | topic | reason | partition | offset | attempt |
    | filtered | `filtered` events | subscription | topic | offsets | partition | | |
    | instance | events with an instance | instance | type | | | | |
    | added, http, lateness | sent, delivered, delay fwd. | sub. or topic | endpoint | | | | value |

    Latency values are rounded (`round_latency`) so the histograms stay small. `stamp`
    is carried as `_stamp`, the micro-batch's time (see `aggregate`). Without `records`,
    no `record` and `filtered` rows.
    """
    names = raw.columns  # one call: each `.columns` asks the JVM again
    if transforms.INSTANCE not in names:
        raw = raw.withColumn(transforms.INSTANCE, F.lit(None).cast("string"))
    # exploded, then the nulls dropped: `F.filter` over the array (a lambda) is not
    # compiled and made this most of a follow micro-batch's time
    rows = F.array(*_key_rows(records))
    exploded = F.when(transforms.is_valid_event(), rows).otherwise(F.array(_row("malformed")))
    measures = ["type", "ts_ms", "endpoint", "offset", "record_ts_ms", "count"]
    if WEIGHT in names:
        measures.append(WEIGHT)
    columns = [F.col(name) for name in measures]
    if stamp is not None:
        columns.append(stamp.alias("_stamp"))
    flat = raw.select(*columns, F.explode(exploded).alias("_key")).filter(
        F.col("_key").isNotNull())
    return flat.select(*(F.col(f"_key.{name}").alias(name) for name in KEY), *measures,
                       *(["_stamp"] if stamp is not None else []))


def aggregate(rows: DataFrame) -> DataFrame:
    """Keyed rows -> one row per key with every measure (numeric buffers only).

    With `_stamp`, `first_*_stamp` are the stamps of the micro-batches that first brought
    a record's fetch, delivery and dead letter, and `last_stamp` the latest that touched
    the key: in a batch's output, `first_delivery_stamp == last_stamp` means "delivered
    for the first time in this batch".
    """
    ts = F.col("ts_ms")
    names = rows.columns
    weight = F.col(WEIGHT) if WEIGHT in names else None
    measures = [
        (F.count(F.lit(1)) if weight is None else F.sum(weight)).alias("n"),
        *_record_measures(weight),
        *(_count_if(_is(t), weight).alias(name) for t, name in TYPE_COUNTS[5:]),
        F.min(ts).alias("first_ms"), F.max(ts).alias("last_ms"),
        F.max("offset").alias("max_offset"), F.sum("count").alias("count_sum"),
    ]
    if "_stamp" in names:
        stamp = F.col("_stamp")
        measures += [
            _min_if(_is("fetched"), stamp).alias("first_fetch_stamp"),
            _min_if(_is("delivered"), stamp).alias("first_delivery_stamp"),
            _min_if(_is("dead_lettered"), stamp).alias("first_dead_letter_stamp"),
            F.max(stamp).alias("last_stamp"),
        ]
    return rows.groupBy(*KEY).agg(*measures)
