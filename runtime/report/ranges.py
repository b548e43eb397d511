"""The fast report on ranges (issue 35, item 4): most records are never a row of their own.

A journal names most records in ranges: a batch's `fetched`, a cursor's deliveries between
two commits as one `delivered` (`offsets` "0-9,12"). One row per record before the
aggregation (`transforms.one_row_per_record`) made 1,000,000 deliveries 2,160,000 rows
and most of the report's time. Here the journal is read one row per event, and per cursor
(subscription, topic, partition: `CURSOR`) the offsets its `fetched` events name are
compared with those its `delivered` events name (`cursor_states`). A cursor is *clean*
when they agree exactly and nothing else happened to its records:

- every fetched offset was fetched once and delivered once, and nothing else delivered;
- no other record event (`failed`, `retry_scheduled`, `dead_lettered`, `sent`): no
  failure, no retry, no dead letter, no journal from before issue 35;
- its `fetched` events carry no `record_ts_ms` (a record's Kafka time is the largest its
  events carry; here the delivery's), and every `delivered` names the same endpoint or
  none does (the record's endpoint is then the cursor's);
- every `offsets` is readable.

A clean cursor's records are counted from sums (`clean_views`: fetched, delivered,
deliveries and attempts are its record count; no loss, duplicate, failure, retry or dead
letter; `filtered` events cannot change that), and only its end-to-end latencies, one
number per record from the `delivered` events' lists, go on as rows (for the
percentiles). Every other cursor's events are expanded and aggregated record by record
(`unclean_events`, then `facts.record_facts`), so a duplicate, a gap, a retry or a
filtered offset is found exactly as before. The throughput ticks and the latency
percentiles read each record's time from the same lists (`tick_rows`, `latency_rows`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from runtime.report import facts, groups, transforms
from runtime.report.transforms import RECORD_EVENTS

CURSOR = ["sh", "th", "partition"]
LATENCY_COLUMNS = ["type", "ts_ms", "subscription", "endpoint", "topic", "attempt",
                   "latency_ms", "fetched_ts_ms", "lateness_ms", "offset", "offsets", "count",
                   "latencies_us", "ts_deltas_ms", "fetched_ts_deltas_ms"]


def _is(*types: str) -> Column:
    return F.col("type").isin(*types)


def _count_if(condition: Column) -> Column:
    return F.count(F.when(condition, 1))


# -- throughput ticks and latencies ---------------------------------------------------------

TICK_ENTRIES = "array<struct<n:bigint,first:bigint,last:bigint,offset:bigint>>"


def _entry(n: Column, first: Column, last: Column, offset: Column) -> Column:
    return F.struct(n.alias("n"), first.alias("first"), last.alias("last"),
                    offset.alias("offset"))


def _tick_entries() -> Column:
    """Per row, what it stands for in `facts.tick_facts`: a ranged event whose records
    share a second (their times from `ts_deltas_ms`, a list for every record or none) one
    entry of `n` records; another ranged event an entry per record, its time and offset
    as `transforms.one_row_per_offset` gives them; any other row itself."""
    c = F.col
    offsets, deltas, ts = c("_offsets"), c("ts_deltas_ms"), c("ts_ms")
    low, high = (ts + F.coalesce(pick(deltas), F.lit(0)) for pick in (F.array_min, F.array_max))
    whole = ~_is(*facts.DETAILED_TYPES) & (deltas.isNull() | (F.size(deltas) == F.size(offsets))) \
        & (F.floor(low / facts.TICK_MS) == F.floor(high / facts.TICK_MS))
    one = F.lit(1).cast("long")

    def each(offset: Column, i: Column) -> Column:
        at = F.coalesce(ts + F.get(deltas, i), ts)
        return _entry(one, at, at, offset)

    entries = F.when(offsets.isNull(), F.array(_entry(one, ts, ts, c("offset")))).when(
        F.coalesce(whole, F.lit(False)),
        F.array(_entry(F.size(offsets).cast("long"), low, high, F.array_max(offsets)))).otherwise(
        F.transform(offsets, each))
    return entries.cast(TICK_ENTRIES)


def tick_rows(raw: DataFrame) -> DataFrame:
    """Raw rows (one per event) -> `facts.tick_facts` rows with `facts.WEIGHTS`, one per
    `_tick_entries` entry (`count` null for a ranged event's, as on a record's own row)."""
    c = F.col
    ranged = raw.select("*", F.when(transforms.is_ranged(), transforms.named_offsets(
        c("offsets"))).alias("_offsets"))
    kept = [name for name in raw.columns if name not in ("offset", "count")]
    count = F.when(c("_offsets").isNull(), c("count")).cast("long").alias("count")
    rows = ranged.select(*kept, count, F.explode(_tick_entries()).alias("_e"))
    return rows.select(*kept, "count", c("_e.offset").alias("offset"), c("_e.n").alias("_n"),
                       c("_e.first").alias("_first"), c("_e.last").alias("_last"))


def latency_rows(events: DataFrame) -> DataFrame:
    """The attempt and delay events (`facts.latency_percentiles` reads them), one row per
    record, with only the columns it reads."""
    wanted = events.filter(_is("sent", "delivered", "failed", "delay_forwarded"))
    return transforms.one_row_per_offset(wanted.select(*LATENCY_COLUMNS))


# -- the audit per cursor ---------------------------------------------------------------------

def _offsets() -> Column:
    """The offsets a record event names: its ranges, else its `offset`."""
    c = F.col
    return F.when(c("offsets").isNotNull(), transforms.named_offsets(c("offsets"))).otherwise(
        F.array(c("offset")))


def _e2e() -> Column:
    """A `delivered` event's end-to-end latency per record it names (`_offsets`): each
    record's time minus its Kafka time, as `transforms.one_row_per_offset` gives them
    (item i of `ts_deltas_ms` and `record_ts_deltas_ms` added; past a list's end, the
    event's value)."""
    c = F.col

    def each(_offset: Column, i: Column) -> Column:
        ts = F.coalesce(c("ts_ms") + F.get(c("ts_deltas_ms"), i), c("ts_ms"))
        kafka = F.coalesce(c("record_ts_ms") + F.get(c("record_ts_deltas_ms"), i),
                           c("record_ts_ms"))
        return ts - kafka

    ranged = F.transform(c("_offsets"), each)
    return F.when(_is("delivered"), F.when(c("offsets").isNotNull(), ranged).otherwise(
        F.array(c("ts_ms") - c("record_ts_ms"))))


def _record_events(events: DataFrame) -> DataFrame:
    c = F.col
    keyed = _is(*RECORD_EVENTS) & c("subscription").isNotNull() & c("topic").isNotNull() \
        & c("partition").isNotNull() & (c("offset").isNotNull() | c("offsets").isNotNull())
    rows = facts.hashed(events.filter(keyed)).select("*", _offsets().alias("_offsets"))
    # apart: `_e2e` reads `_offsets`, computed once
    return rows.select(*CURSOR, "type", "record_ts_ms",
                       facts.name_hash(c("endpoint")).alias("eh"), "_offsets",
                       _e2e().alias("_e2e"))


def _clean() -> Column:
    c = F.col
    fetched, delivered = F.sort_array(c("_fetched")), F.sort_array(c("_delivered"))
    one_endpoint = (c("_named") == 0) | (
        (c("_endpoints") == c("_deliveries")) & (c("eh") == c("eh_max")))
    clean = (c("_unreadable") == 0) & (c("_other") == 0) & (c("_kafka_ts") == 0) \
        & (F.size(fetched) > 0) & (fetched == delivered) \
        & (F.size(F.array_distinct(fetched)) == F.size(fetched)) & one_endpoint
    return F.coalesce(clean, F.lit(False))


def cursor_states(events: DataFrame) -> DataFrame:
    """Valid events (one row per event) -> per cursor (`CURSOR`): `clean` (the module doc),
    `records` (fetched), `eh` and `eh_max` (the smallest and largest endpoint hash of its
    events) and `e2e`, its records' end-to-end latencies."""
    c = F.col
    fetched, delivered = _is("fetched"), _is("delivered")
    states = _record_events(events).groupBy(*CURSOR).agg(
        F.flatten(F.collect_list(F.when(fetched, c("_offsets")))).alias("_fetched"),
        F.flatten(F.collect_list(F.when(delivered, c("_offsets")))).alias("_delivered"),
        F.flatten(F.collect_list("_e2e")).alias("e2e"),
        _count_if(c("_offsets").isNull()).alias("_unreadable"),
        _count_if(~_is("fetched", "delivered")).alias("_other"),
        _count_if(fetched & c("record_ts_ms").isNotNull()).alias("_kafka_ts"),
        _count_if(delivered).alias("_deliveries"),
        _count_if(delivered & c("eh").isNotNull()).alias("_endpoints"),
        F.count("eh").alias("_named"), F.min("eh").alias("eh"), F.max("eh").alias("eh_max"),
    )
    return states.select(*CURSOR, _clean().alias("clean"),
                         F.size("_fetched").cast("long").alias("records"), "eh", "eh_max",
                         "e2e")


def clean_cursors(states: DataFrame) -> DataFrame:
    return states.filter(F.col("clean")).drop("clean")


def unclean_events(events: DataFrame, states: DataFrame) -> DataFrame:
    """The valid events of the cursors that are not clean (their record and `filtered`
    events), one row per record, for `facts.record_facts`."""
    unclean = states.filter(~F.col("clean")).select(*CURSOR)
    theirs = facts.hashed(events).join(unclean, CURSOR, "left_semi").drop("sh", "th")
    return transforms.one_row_per_offset(theirs)


def clean_counts(clean: DataFrame) -> DataFrame:
    """Clean cursors (with `ep`: `facts.resolve_endpoints`) -> a row per cursor and view
    for `groups.group_counts`: its records fetched, delivered once and attempted once."""
    c = F.col
    zero = F.lit(0).cast("long")
    counts = {**dict.fromkeys(groups.VIEW_COUNTS, zero),
              **dict.fromkeys(groups.VIEW_COUNTS[:4], c("records"))}

    def view(name: str, k2: Column, k3: Column) -> DataFrame:
        return clean.select(F.lit(name).alias("view"), c("sh").alias("k1"), k2.alias("k2"),
                            k3.cast("long").alias("k3"), *(v.alias(k) for k, v in counts.items()),
                            F.array_max("e2e").alias("e2e_latency_ms"))

    return view("endpoint", groups.known_endpoint(), F.lit(None)).unionByName(
        view("partition", c("th"), c("partition")))


def clean_latencies(clean: DataFrame) -> DataFrame:
    """Clean cursors (with `ep`) -> a row per record with its end-to-end latency, for
    `groups.group_latencies`."""
    c = F.col
    return clean.select(F.lit("endpoint").alias("view"), c("sh").alias("k1"),
                        groups.known_endpoint().alias("k2"), F.lit(None).cast("long").alias("k3"),
                        F.explode("e2e").alias("e2e_latency_ms"))
