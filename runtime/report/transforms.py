"""Pure transformations of journal events: DataFrame(s) in, DataFrame out, no I/O.

Definitions (the report and the audit use these, and the tests pin them down):

- A *record* is one Kafka record as seen by one subscription: (subscription, topic,
  partition, offset). Several subscriptions reading one topic give several records.
- *delivered*: distinct records with at least one `delivered` event; *deliveries* counts
  the events; *duplicates* = deliveries - delivered (redeliveries of a delivered record).
- *lost*: a record with a `fetched` event and neither a `delivered` nor a `dead_lettered`
  one, nor a `filtered` event whose `offsets` ranges hold it (issue 26: a record the
  subscription's filter left out is accounted for; such a record has no `fetched` event,
  unless it was fetched before a filter change and filtered when fetched again). A record
  fetched, abandoned by a crash and fetched and delivered again is not lost.
  `lost_committed_past` narrows this to lost offsets below the partition's highest
  committed offset: those will not be fetched again, so they are lost for good; the
  others would be redelivered after a restart (or were in flight when the journal ends).
- *attempts*: completed HTTP attempts (`delivered` + `failed` events); *retries*:
  `retry_scheduled` events.
- *end-to-end latency*: first `delivered` time minus the Kafka record timestamp.
- *added latency*: the service's own overhead, from the send time of first attempts
  (attempt 1 or unset) minus their `fetched_ts_ms`: `sent.ts_ms`, or, for a `delivered` or
  `failed` event carrying `fetched_ts_ms` (an egress that journals no `sent`: one event per
  attempt), its `ts_ms - latency_ms` (`added_latency`); retries are excluded since their
  delay is policy. An emitter puts `fetched_ts_ms` on one of them, not both.
- *HTTP latency*: `latency_ms` of `delivered` events.

An endpoint missing on a record's events is filled in when its subscription used exactly
one endpoint; grouping keys that stay unknown are reported as "".
"""

from __future__ import annotations

from functools import reduce

import msgspec
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from runtime.host.journal import PER_RECORD_FIELDS, RECORD_EVENT_TYPES, Event
from runtime.report.gaps import JournalGap, split_lost
from runtime.report.tables import INSTANCE_TYPES, UNKNOWN

CORRUPT = "_corrupt_record"
# The journal directory a line came from: one directory per runtime instance, so this
# names the instance (events do not carry one). Added when the journal is read.
INSTANCE = "instance"
RECORD_KEY = ["subscription", "topic", "partition", "offset"]
PARTITION_KEY = ["subscription", "topic", "partition"]
RECORD_EVENTS = list(RECORD_EVENT_TYPES)
PERCENTILES = [0.5, 0.95, 0.99]
PERCENTILE_ACCURACY = 10_000

_SPARK_TYPES: dict[object, T.DataType] = {
    str: T.StringType(),
    int: T.LongType(),
    float: T.DoubleType(),
    list[int]: T.ArrayType(T.LongType()),
    list[str]: T.ArrayType(T.StringType()),
}


def event_schema() -> T.StructType:
    """The Spark schema of a journal line, derived from `Event` so the two never drift."""
    fields = []
    for info in msgspec.structs.fields(Event):
        base = str if info.name == "type" else next(  # `type` is the EventType Literal
            t for t in (str, int, float, list[int], list[str]) if info.type in (t, t | None))
        fields.append(T.StructField(info.encode_name, _SPARK_TYPES[base], nullable=True))
    fields.append(T.StructField(CORRUPT, T.StringType(), nullable=True))
    return T.StructType(fields)


def stored_schema() -> T.StructType:
    """`event_schema` plus `INSTANCE`: the journal as the Parquet store keeps it."""
    return T.StructType([*event_schema().fields,
                         T.StructField(INSTANCE, T.StringType(), nullable=True)])


def with_instance(raw: DataFrame, directory: str) -> DataFrame:
    return raw.withColumn(INSTANCE, F.lit(directory))


def instance_column(raw: DataFrame) -> Column:
    """The rows' instance, or null for frames read without one (tests' hand-made rows)."""
    return F.col(INSTANCE) if INSTANCE in raw.columns else F.lit(None).cast("string")


def _is(event_type: str) -> Column:
    return F.col("type") == event_type


def _count_if(condition: Column) -> Column:
    return F.count(F.when(condition, 1))


def _percentile_aggs(name: str, value: Column) -> list[Column]:
    """Aggregates for p50/p95/p99 (one approx sketch) and max; see `_split_percentiles`."""
    return [
        F.percentile_approx(value, PERCENTILES, PERCENTILE_ACCURACY).alias(f"_{name}_pct"),
        F.max(value).alias(f"_{name}_max"),
    ]


def _split_percentiles(df: DataFrame, *names: str) -> DataFrame:
    """`_x_pct`, `_x_max` -> `x_p50_ms`, `x_p95_ms`, `x_p99_ms`, `x_max_ms`, in that order."""
    for name in names:
        pct = F.col(f"_{name}_pct")
        columns = {
            f"{name}_p{round(q * 100)}_ms": pct.getItem(i) for i, q in enumerate(PERCENTILES)
        }
        columns[f"{name}_max_ms"] = F.col(f"_{name}_max")
        df = df.withColumns(columns).drop(f"_{name}_pct", f"_{name}_max")
    return df


def is_valid_event() -> Column:
    """False for malformed lines: torn, not JSON, or without `type` or `ts_ms`."""
    return F.col(CORRUPT).isNull() & F.col("type").isNotNull() & F.col("ts_ms").isNotNull()


ROUND_LISTS = ("subscriptions", "topics", "partitions", "positions")


def one_row_per_position(raw: DataFrame) -> DataFrame:
    """A commit round (issue 35: a `committed` event with `positions`, the committed
    offsets, and item by item `subscriptions`, `partitions` and, when the round spans
    topics, `topics`) -> one `committed` row per position, as a per-cursor `committed`
    is, so the commit definitions read one event per cursor. Other rows pass."""
    schema = raw.schema  # one call: each `.schema` or `.columns` asks the JVM again
    if "positions" not in schema.names:  # a store written before commit rounds
        return raw
    c = F.col
    is_round = (c("type") == "committed") & c("positions").isNotNull()
    rows = raw.select("*", F.posexplode_outer(F.when(is_round, c("positions"))).alias(
        "_i", "_position"))
    one = c("_position").isNotNull()

    def item(name: str, fallback: str) -> Column:
        return F.when(one, F.coalesce(F.get(c(name), c("_i")), c(fallback))).otherwise(
            c(fallback)).cast(schema[fallback].dataType)

    replaced = {
        "subscription": item("subscriptions", "subscription"),
        "topic": item("topics", "topic"),
        "partition": item("partitions", "partition"),
        "offset": F.coalesce(c("_position"), c("offset")).cast(schema["offset"].dataType),
        **{name: F.when(one, F.lit(None)).otherwise(c(name)).cast(schema[name].dataType)
           for name in ROUND_LISTS},
    }
    return rows.select(*(replaced[name].alias(name) if name in replaced else c(name)
                         for name in schema.names))


COLUMNAR_LISTS = ("subscriptions", "topics", "endpoints", "statuses", "partitions", "keys",
                   "record_offsets", *(name for name, _, _ in PER_RECORD_FIELDS))


def one_row_per_delivery(raw: DataFrame) -> DataFrame:
    """A columnar `delivered` (issue 35: a commit round's plain deliveries, one list per
    column, `runtime.host.journal.columnar`) -> one row per delivery, as the per-record
    event it stands for: row i's `keys[i]` indexes the tables (`subscriptions`, and
    `topics`, `endpoints`, `statuses` where the event lists them, else its `topic`,
    `endpoint`, `status`), `partitions[i]`, `record_offsets[i]`, `latencies_us[i]` and
    the deltas are its own. Other rows pass."""
    schema = raw.schema
    if "record_offsets" not in schema.names:  # a store written before columnar events
        return raw
    c = F.col
    is_columnar = (c("type") == "delivered") & c("record_offsets").isNotNull()
    rows = raw.select("*", F.posexplode_outer(F.when(is_columnar, c("record_offsets"))).alias(
        "_i", "_offset"))
    one, key = c("_offset").isNotNull(), F.get(c("keys"), c("_i"))

    def typed(name: str, value: Column) -> Column:
        return F.when(one, value).otherwise(c(name)).cast(schema[name].dataType)

    def plus(name: str, deltas: str) -> Column:
        return typed(name, c(name) + F.coalesce(F.get(c(deltas), c("_i")), F.lit(0)))

    replaced = {
        "subscription": typed("subscription", F.get(c("subscriptions"), key)),
        **{name: typed(name, F.coalesce(F.get(c(table), key), c(name)))
           for name, table in (("topic", "topics"), ("endpoint", "endpoints"),
                               ("status", "statuses"))},
        "partition": typed("partition", F.get(c("partitions"), c("_i"))),
        "offset": typed("offset", c("_offset")),
        "latency_ms": typed("latency_ms", F.get(c("latencies_us"), c("_i")) / 1000.0),
        "ts_ms": plus("ts_ms", "ts_deltas_ms"),
        "record_ts_ms": plus("record_ts_ms", "record_ts_deltas_ms"),
        "fetched_ts_ms": plus("fetched_ts_ms", "fetched_ts_deltas_ms"),
        "count": typed("count", F.lit(None)),
        **{name: typed(name, F.lit(None)) for name in COLUMNAR_LISTS},
    }
    return rows.select(*(replaced[name].alias(name) if name in replaced else c(name)
                         for name in schema.names))


def one_row_per_event(raw: DataFrame) -> DataFrame:
    """The rows of the report on ranges (runtime/report/ranges.py): one per event, but a
    commit round's positions apart (`one_row_per_position`) and a columnar `delivered`'s
    deliveries apart (`one_row_per_delivery`: its rows belong to many cursors)."""
    return one_row_per_delivery(one_row_per_position(raw))


def one_row_per_record(raw: DataFrame) -> DataFrame:
    """A record event for several records (`offsets` as ranges "3-7,9", `offset` the
    first, `count` of them: issue 35; the partition actor journals a batch's `fetched` so,
    the journal a cursor's deliveries between two commits) -> one row per offset with the
    same fields, as journals before issue 35 have them, so every definition here reads one
    event per record. A ranged `delivered` also carries per-record lists
    (`PER_RECORD_FIELDS`: item i is the i-th offset's latency, or its `ts_ms`,
    `record_ts_ms`, `fetched_ts_ms` minus the event's): each row gets its own. Other rows
    (and `filtered`, which `filtered_ranges` reads as ranges) pass as they are. Applied
    where the journal is read (`job.read_raw`, the store, the follow stream), after
    `one_row_per_position` (a commit round, one row per cursor) and
    `one_row_per_delivery` (a columnar `delivered`, one row per delivery)."""
    return one_row_per_offset(one_row_per_delivery(one_row_per_position(raw)))


def named_offsets(offsets: Column) -> Column:
    """Ranges ("3-7,9") -> the offsets they name, in order ([3, 4, 5, 6, 7, 9]); null for
    null or an unreadable first bound."""

    def span(part: Column) -> Column:
        bounds = F.split(part, "-")  # F.get: null past the end (ANSI mode)
        first = F.get(bounds, 0).cast("long")
        return F.sequence(first, F.coalesce(F.get(bounds, 1).cast("long"), first))

    return F.flatten(F.transform(F.split(offsets, ","), span))


def is_ranged() -> Column:
    """A record event that names its records as ranges (`offsets`)."""
    return F.col("type").isin(RECORD_EVENTS) & F.col("offsets").isNotNull()


def one_row_per_offset(raw: DataFrame) -> DataFrame:
    """`one_row_per_record` of rows whose commit rounds are expanded already."""
    c = F.col
    ranged = is_ranged()
    offsets = named_offsets(c("offsets"))
    schema = raw.schema  # one call: each `.schema` or `.columns` asks the JVM again
    lists = [name for name, _, _ in PER_RECORD_FIELDS if name in schema.names]
    rows = raw.select("*", F.posexplode_outer(F.when(ranged, offsets)).alias(
        "_pos", "_fetched"))
    one = c("_fetched").isNotNull()
    replaced = {
        "offset": F.coalesce(c("_fetched"), c("offset")),
        "count": F.when(one, F.lit(None).cast("long")).otherwise(c("count")),
        "offsets": F.when(one, F.lit(None).cast("string")).otherwise(c("offsets")),
        **{name: F.when(one, F.lit(None)).otherwise(c(name)).cast(schema[name].dataType)
           for name in lists},
    }
    for name, target, relative in PER_RECORD_FIELDS:
        if name not in lists or target not in schema.names:
            continue
        item = F.get(c(name), c("_pos"))
        value = c(target) + item if relative else item / 1000.0
        replaced[target] = F.coalesce(F.when(one, value), c(target)).cast(
            schema[target].dataType)
    return rows.select(*(replaced[name].alias(name) if name in replaced else c(name)
                         for name in schema.names))


def valid_events(raw: DataFrame) -> DataFrame:
    """Drop malformed lines."""
    return raw.filter(is_valid_event()).drop(CORRUPT)


def record_outcomes(events: DataFrame, gap: JournalGap | None = None) -> DataFrame:
    """One row per record: how often it was fetched, attempted, delivered, dead-lettered;
    `lost` and `unknown` (a journal `gap`, runtime/report/gaps.py)."""
    keyed = reduce(lambda acc, c: acc & F.col(c).isNotNull(), RECORD_KEY, F.lit(True))
    records = events.filter(F.col("type").isin(RECORD_EVENTS) & keyed).groupBy(*RECORD_KEY).agg(
        F.min("endpoint").alias("endpoint"),
        _count_if(_is("fetched")).alias("fetches"),
        _count_if(_is("delivered")).alias("deliveries"),
        _count_if(_is("failed")).alias("failures"),
        _count_if(_is("retry_scheduled")).alias("retries"),
        _count_if(_is("dead_lettered")).alias("dead_letters"),
        F.max("record_ts_ms").alias("record_ts_ms"),
        F.min(F.when(_is("fetched"), F.col("ts_ms"))).alias("first_fetched_ms"),
        F.max(F.when(_is("fetched"), F.col("ts_ms"))).alias("last_fetched_ms"),
        F.min(F.when(_is("delivered"), F.col("ts_ms"))).alias("first_delivered_ms"),
    )
    outcomes = fill_endpoints(records, events).withColumns({
        "attempts": F.col("deliveries") + F.col("failures"),
        "e2e_latency_ms": F.col("first_delivered_ms") - F.col("record_ts_ms"),
        "lost": (F.col("fetches") > 0) & (F.col("deliveries") == 0)
        & (F.col("dead_letters") == 0),
    })
    return split_lost(excuse_filtered(outcomes, filtered_ranges(events), RECORD_KEY), gap)


def filtered_ranges(events: DataFrame, partition_key: list[str] | None = None) -> DataFrame:
    """`filtered` events -> one row per range of their `offsets` ("3-7,9"): the partition
    key columns (`PARTITION_KEY` unless given), `first` and `last` (inclusive)."""
    key = partition_key or PARTITION_KEY
    present = reduce(lambda acc, c: acc & F.col(c).isNotNull(), [*key, "offsets"], F.lit(True))
    ranges = events.filter(_is("filtered") & present).select(
        *key, F.explode(F.split(F.col("offsets"), ",")).alias("_range"))
    bounds = F.split(F.col("_range"), "-")  # F.get: null past the end (ANSI mode)
    first = F.get(bounds, 0).cast("long")
    return ranges.select(*key, first.alias("first"),
                         F.coalesce(F.get(bounds, 1).cast("long"), first).alias("last"))


def excuse_filtered(records: DataFrame, ranges: DataFrame, record_key: list[str]) -> DataFrame:
    """`lost` false for the lost records a filtered range holds. Only the lost ones (few)
    are joined with the ranges; the records then meet a small, broadcast set."""
    partition_key, offset = record_key[:-1], record_key[-1]
    lost = records.filter(F.col("lost")).select(*record_key)
    held = lost.join(ranges, partition_key).filter(
        F.col(offset).between(F.col("first"), F.col("last")))
    covered = held.select(*record_key).distinct().withColumn("_filtered", F.lit(True))
    joined = records.join(F.broadcast(covered), record_key, "left")
    excused = F.col("lost") & F.col("_filtered").isNull()
    return joined.select(*(excused.alias(c) if c == "lost" else F.col(c)
                           for c in records.columns))


def fill_endpoints(records: DataFrame, events: DataFrame) -> DataFrame:
    """Fill a missing endpoint from the subscription when it used exactly one endpoint."""
    # The per-subscription table comes from the events (a cheap scan) and is broadcast;
    # a window over each subscription would put all its records in one task.
    only = events.filter(F.col("endpoint").isNotNull()).groupBy("subscription").agg(
        F.when(F.countDistinct("endpoint") == 1, F.min("endpoint")).alias("_only_endpoint")
    )
    filled = records.join(F.broadcast(only), "subscription", "left")
    return filled.withColumn(
        "endpoint", F.coalesce(F.col("endpoint"), F.col("_only_endpoint"))
    ).drop("_only_endpoint")


def _known(name: str) -> Column:
    return F.coalesce(F.col(name), F.lit("")).alias(name)


def _summary_keys() -> list[Column]:
    return [_known("subscription"), _known("endpoint")]


def delivery_summary(records: DataFrame, events: DataFrame) -> DataFrame:
    """Per subscription and endpoint: counts and latency percentiles."""
    per_record = records.groupBy(*_summary_keys()).agg(
        _count_if(F.col("fetches") > 0).alias("records_fetched"),
        _count_if(F.col("deliveries") > 0).alias("delivered"),
        F.sum("deliveries").alias("deliveries"),
        F.sum("attempts").alias("attempts"),
        F.sum("failures").alias("failed_attempts"),
        F.sum("retries").alias("retries"),
        _count_if(F.col("dead_letters") > 0).alias("dead_lettered"),
        _count_if(F.col("lost")).alias("lost"),
        *_percentile_aggs("e2e", F.col("e2e_latency_ms")),
    ).withColumn("duplicates", F.col("deliveries") - F.col("delivered"))
    per_event = _event_latencies(events)
    joined = per_record.join(per_event, ["subscription", "endpoint"], "full")
    return _split_percentiles(joined, "e2e", "added", "http").orderBy("subscription", "endpoint")


def added_latency() -> Column:
    """The added latency of an attempt event (see the module doc), null where none."""
    c = F.col
    first = c("fetched_ts_ms").isNotNull() & (c("attempt").isNull() | (c("attempt") <= 1))
    sent_at = F.when(_is("sent"), c("ts_ms")).when(
        c("type").isin("delivered", "failed"),
        c("ts_ms") - F.round(c("latency_ms")).cast("long"))
    return F.when(first, sent_at - c("fetched_ts_ms"))


def _event_latencies(events: DataFrame) -> DataFrame:
    added = added_latency()
    http = F.when(_is("delivered"), F.col("latency_ms"))
    sends = events.filter(F.col("type").isin("sent", "delivered", "failed"))
    return sends.groupBy(*_summary_keys()).agg(
        *_percentile_aggs("added", added), *_percentile_aggs("http", http)
    )


def throughput(events: DataFrame, bucket_ms: int) -> DataFrame:
    """Per time bucket and subscription: fetched, delivered, failed, rate and error rate."""
    bucket = (F.floor(F.col("ts_ms") / bucket_ms) * bucket_ms).cast("long")
    counted = events.filter(F.col("type").isin("fetched", "delivered", "failed", "dead_lettered"))
    per_bucket = counted.groupBy(bucket.alias("bucket_start_ms"), _known("subscription")).agg(
        _count_if(_is("fetched")).alias("fetched"),
        _count_if(_is("delivered")).alias("delivered"),
        _count_if(_is("failed")).alias("failed"),
        _count_if(_is("dead_lettered")).alias("dead_lettered"),
    )
    outcomes = F.col("delivered") + F.col("failed")
    return per_bucket.withColumns({
        "bucket_ms": F.lit(bucket_ms).cast("long"),
        "delivered_per_s": F.col("delivered") * 1000.0 / bucket_ms,
        "error_rate": F.when(outcomes > 0, F.col("failed") / outcomes),
    }).orderBy("bucket_start_ms", "subscription")


def actor_lifecycle(events: DataFrame) -> DataFrame:
    """Per actor: starts, crashes, restarts, stops, and the last crash reason."""
    lifecycle = events.filter(F.col("type").startswith("actor_") & F.col("actor").isNotNull())
    crashed = _is("actor_crashed")
    return lifecycle.groupBy("actor").agg(
        _count_if(_is("actor_started")).alias("started"),
        _count_if(crashed).alias("crashed"),
        _count_if(_is("actor_restarted")).alias("restarted"),
        _count_if(_is("actor_stopped")).alias("stopped"),
        F.max_by(F.col("reason"), F.when(crashed, F.col("ts_ms"))).alias("last_crash_reason"),
        F.min("ts_ms").alias("first_ms"),
        F.max("ts_ms").alias("last_ms"),
    ).orderBy(F.desc("restarted"), F.desc("crashed"), "actor")


def partition_movements(events: DataFrame) -> DataFrame:
    """Per subscription, topic-partition and actor: assignments and revocations."""
    moves = events.filter(F.col("type").isin("partition_assigned", "partition_revoked"))
    return moves.groupBy(*PARTITION_KEY, "actor").agg(
        _count_if(_is("partition_assigned")).alias("assigned"),
        _count_if(_is("partition_revoked")).alias("revoked"),
        F.max("ts_ms").alias("last_ms"),
    ).orderBy(*PARTITION_KEY, "actor")


def delay_lateness(events: DataFrame) -> DataFrame:
    """Per delay-level topic: forwards and how late they were."""
    forwards = events.filter(_is("delay_forwarded"))
    per_topic = forwards.groupBy("topic").agg(
        F.count(F.lit(1)).alias("forwarded"),
        *_percentile_aggs("lateness", F.col("lateness_ms")),
    )
    return _split_percentiles(per_topic, "lateness").orderBy("topic")


def committed_offsets(events: DataFrame) -> DataFrame:
    """Per subscription and topic-partition: the highest committed offset."""
    commits = events.filter(_is("committed") & F.col("offset").isNotNull())
    return commits.groupBy(*PARTITION_KEY).agg(F.max("offset").alias("committed_offset"))


def _with_commits(records: DataFrame, commits: DataFrame) -> DataFrame:
    joined = records.join(commits, PARTITION_KEY, "left")
    return joined.withColumns({
        "duplicate": F.col("deliveries") > 1,
        "committed_past": F.coalesce(F.col("offset") < F.col("committed_offset"), F.lit(False)),
    })


def audit(records: DataFrame, commits: DataFrame) -> DataFrame:
    """Per subscription and topic-partition: lost and duplicated offsets, listed."""
    rows = _with_commits(records, commits)
    lost, dup = F.col("lost"), F.col("duplicate")
    return rows.groupBy(*PARTITION_KEY).agg(
        _count_if(F.col("fetches") > 0).alias("records_fetched"),
        _count_if(F.col("deliveries") > 0).alias("delivered"),
        _count_if(F.col("dead_letters") > 0).alias("dead_lettered"),
        _count_if(lost).alias("lost"),
        _count_if(F.col("unknown")).alias("unknown"),
        _count_if(lost & F.col("committed_past")).alias("lost_committed_past"),
        F.array_sort(F.collect_list(F.when(lost, F.col("offset")))).alias("lost_offsets"),
        F.sum(F.when(dup, F.col("deliveries") - 1).otherwise(0)).alias("duplicates"),
        F.array_sort(F.collect_list(F.when(dup, F.col("offset")))).alias("duplicate_offsets"),
        F.max("committed_offset").alias("committed_offset"),
    ).orderBy(*PARTITION_KEY)


def audit_offsets(records: DataFrame, commits: DataFrame) -> DataFrame:
    """One row per lost, unknown (journal gap) or duplicated offset (the audit in long
    form)."""
    rows = _with_commits(records, commits).filter(
        F.col("lost") | F.col("unknown") | F.col("duplicate"))
    problem = F.when(F.col("lost"), F.lit("lost")).when(
        F.col("unknown"), F.lit(UNKNOWN)).otherwise(F.lit("duplicate"))
    return rows.select(
        *RECORD_KEY, problem.alias("problem"), "fetches", "deliveries", "committed_past"
    ).orderBy(*RECORD_KEY)


def dead_letters(events: DataFrame) -> DataFrame:
    """One row per dead-lettered record: the reason, HTTP status and answer snippet
    (`response`) of its last dead letter, its most
    attempts, how often it was dead-lettered, and how often a replay delivered it since
    (`replayed` events whose reason ends "delivered again", actors/delivery/path/replay.py)."""
    dead = events.filter(_is("dead_lettered") & F.col("offset").isNotNull())
    per_record = dead.groupBy(*RECORD_KEY).agg(
        F.max(F.struct("ts_ms", "reason", "status", "response")).alias("_last"),
        F.max("attempt").alias("attempts"),
        F.count(F.lit(1)).alias("dead_lettered"),
    )
    again = events.filter(_is("replayed") & F.col("offset").isNotNull()
                          & _replay_delivered()).groupBy(*RECORD_KEY).agg(
        F.count(F.lit(1)).alias("_replayed"))
    return per_record.join(again, RECORD_KEY, "left").select(
        *RECORD_KEY, F.col("_last.reason").alias("reason"),
        F.col("_last.status").alias("status"), F.col("_last.response").alias("response"),
        "attempts", "dead_lettered",
        F.col("_last.ts_ms").alias("last_ms"),
        F.coalesce(F.col("_replayed"), F.lit(0)).cast("long").alias("replayed"),
    ).orderBy(*RECORD_KEY)


def _replay_delivered() -> Column:
    return F.coalesce(F.col("reason"), F.lit("")).endswith(": delivered again")


def replays(events: DataFrame) -> DataFrame:
    """Per replay (the id before ": " in a `replayed` event's reason) and subscription:
    distinct records pushed again, delivered, failed, first and last event."""
    replayed = events.filter(_is("replayed") & F.col("offset").isNotNull())
    replay_id = F.substring_index(F.coalesce(F.col("reason"), F.lit("")), ": ", 1)
    return replayed.groupBy(replay_id.alias("replay_id"), "subscription").agg(
        F.count_distinct(F.struct(*RECORD_KEY)).alias("records"),
        _count_if(_replay_delivered()).alias("delivered"),
        _count_if(~_replay_delivered()).alias("failed"),
        F.min("ts_ms").alias("first_ms"), F.max("ts_ms").alias("last_ms"),
    ).orderBy("replay_id", "subscription")


def instances(events: DataFrame) -> DataFrame:
    """Per instance (journal directory): events, record events by type, first and last."""
    tagged = events.filter(F.col(INSTANCE).isNotNull())
    return tagged.groupBy(INSTANCE).agg(
        F.count(F.lit(1)).alias("events"),
        *(_count_if(_is(t)).alias(t) for t in INSTANCE_TYPES),
        F.min("ts_ms").alias("first_ms"), F.max("ts_ms").alias("last_ms"),
    ).orderBy(INSTANCE)



def totals(records: DataFrame) -> DataFrame:
    """One row of record totals for the summary."""
    return records.agg(
        _count_if(F.col("fetches") > 0).alias("records_fetched"),
        _count_if(F.col("deliveries") > 0).alias("delivered"),
        F.coalesce(F.sum("deliveries"), F.lit(0)).alias("deliveries"),
        _count_if(F.col("dead_letters") > 0).alias("dead_lettered"),
        _count_if(F.col("lost")).alias("lost"),
        _count_if(F.col("unknown")).alias("unknown"),
        F.coalesce(F.sum("attempts"), F.lit(0)).alias("attempts"),
        F.coalesce(F.sum("failures"), F.lit(0)).alias("failed_attempts"),
        F.coalesce(F.sum("retries"), F.lit(0)).alias("retries"),
    ).withColumn("duplicates", F.col("deliveries") - F.col("delivered"))


def event_counts(events: DataFrame) -> DataFrame:
    """Per event type: events, and the sum of `count` (what journal_dropped stands for)."""
    return events.groupBy("type").agg(
        F.count(F.lit(1)).alias("events"),
        F.coalesce(F.sum("count"), F.lit(0)).alias("count_sum"),
    ).orderBy("type")
