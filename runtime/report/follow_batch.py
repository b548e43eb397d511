"""One micro-batch of the follow job -> `follow_state.BatchChanges` (issue 35, item 4).

Spark reduces the batch's new journal rows statelessly (`prepared`, a part of the
streaming query, then `prepared_changes` in its `foreachBatch`; `changes` both at once):

- the small facts: `facts.keyed` without the record rows and the deliveries, aggregated
  over this batch alone (`follow_state.merge_fact` adds them up across batches); a ranged
  `fetched` is one row there too, weighted by its records (`fact_rows`);
- the record rows (`record_rows`): one per event, but a ranged `fetched` (and a
  `filtered`) keeps its ranges as they are, a columnar `delivered` is one row per delivery
  (`transforms.one_row_per_event`) and other ranged record events one per record; only
  the columns the audit reads, collected as Arrow. The deliveries' small facts are made
  from these in pandas (`delivered_facts`): no second pass of Spark over them.

`cursor_changes` (pandas and numpy, no Spark) then makes each cursor's runs
(runtime/report/runs.py): a ranged `fetched` one run per range, and the other rows, one
per offset after summing each offset's events, one run per stretch of consecutive offsets
with equal sums (a commit round's deliveries of a cursor: one run). Nothing here keeps a
row per record beyond the batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from runtime.host.journal import ranges_of
from runtime.report import facts, transforms
from runtime.report.follow_state import (
    BatchChanges,
    CursorChanges,
    PartitionKey,
    round3_array,
)
from runtime.report.runs import Run, Tally
from runtime.report.transforms import RECORD_EVENTS

KEPT_AS_RANGES = ("fetched", "filtered")
NO_HASH_LOW, NO_HASH_HIGH = np.iinfo(np.int64).max, np.iinfo(np.int64).min
CURSOR = ["subscription", "topic", "partition"]


def _is(*types: str) -> Column:
    return F.col("type").isin(*types)


def record_rows(raw: DataFrame) -> DataFrame:
    """Raw rows of a batch -> the audit's rows (see the module doc): `type`, the cursor
    and `cursor_id` (its hash), `offset`, `ranges` (a `fetched` or `filtered` event's
    offsets), `ts_ms`, `eh_low` and `eh_high` (the endpoint's hash, or the extremes of a
    long for none: a null long would reach pandas as a float), `e2e_ms` (a delivery's
    end-to-end latency), and what `delivered_facts` reads of every `delivered` row (all
    of them, a key or not)."""
    c = F.col
    events = transforms.one_row_per_position(raw)
    if "record_offsets" in events.columns:  # a columnar `delivered` apart: it alone is big
        columnar = F.coalesce(_is("delivered") & c("record_offsets").isNotNull(), F.lit(False))
        deliveries = transforms.one_row_per_delivery(events.filter(columnar))
        events = events.filter(~columnar)
    kept = events.withColumns({
        "ranges": F.when(_is(*KEPT_AS_RANGES), c("offsets")),
        "offsets": F.when(~_is(*KEPT_AS_RANGES), c("offsets")),
    })
    rows = transforms.one_row_per_offset(kept)
    if "record_offsets" in raw.columns:
        rows = rows.unionByName(deliveries.withColumn("ranges", F.lit(None).cast("string")))
    keyed = _is(*RECORD_EVENTS, "filtered") & c("subscription").isNotNull() \
        & c("topic").isNotNull() & c("partition").isNotNull() \
        & (c("offset").isNotNull() | c("ranges").isNotNull())
    rows = rows.filter(transforms.is_valid_event() & (keyed | _is("delivered")))
    eh = facts.name_hash(c("endpoint"))
    delivered = _is("delivered")
    return rows.select(
        "type", *CURSOR, F.xxhash64(*CURSOR).alias("cursor_id"), "offset", "ranges", "ts_ms",
        F.coalesce(eh, F.lit(int(NO_HASH_LOW))).alias("eh_low"),
        F.coalesce(eh, F.lit(int(NO_HASH_HIGH))).alias("eh_high"),
        F.when(delivered, c("ts_ms") - c("record_ts_ms")).cast("double").alias("e2e_ms"),
        *(F.when(delivered, c(name)).alias(name) for name in (
            "endpoint", "latency_ms", "fetched_ts_ms", "attempt", "count")),
        F.when(delivered, transforms.instance_column(rows)).alias(transforms.INSTANCE),
    )


def fact_rows(raw: DataFrame) -> DataFrame:
    """Raw rows of a batch -> rows for `facts.keyed` of all but its (valid) `delivered`
    events (`delivered_facts` has theirs): as `transforms.one_row_per_record` gives them,
    but a ranged `fetched` one row standing for its records (`facts.WEIGHT`; its records
    share every field the small facts read, its largest offset as `offset`). Without the
    deliveries no columnar event is left to expand (one step less to build: each costs
    the driver Spark's analysis of the plan, per micro-batch)."""
    c = F.col
    others = raw.filter(~F.coalesce(transforms.is_valid_event() & _is("delivered"),
                                    F.lit(False)))
    rows = transforms.one_row_per_position(others)
    fetched = transforms.is_ranged() & _is("fetched")
    named = transforms.named_offsets(c("offsets"))
    weighted = rows.withColumns({
        facts.WEIGHT: F.when(fetched & named.isNotNull(), F.size(named)).otherwise(1).cast(
            "long"),
        "offset": F.when(fetched, F.coalesce(F.array_max(named), c("offset"))).otherwise(
            c("offset")),
        "count": F.when(fetched, F.lit(None)).otherwise(c("count")).cast("long"),
        "offsets": F.when(fetched, F.lit(None)).otherwise(c("offsets")),
    })
    return transforms.one_row_per_offset(weighted)


PART = "_part"  # `prepared`'s rows: FACT_PART or RECORD_PART
FACT_PART, RECORD_PART = "facts", "records"
RECORD_COLUMNS = ["type", *CURSOR, "cursor_id", "offset", "ranges", "ts_ms", "eh_low",
                  "eh_high", "e2e_ms", "endpoint", "latency_ms", "fetched_ts_ms", "attempt",
                  "count", transforms.INSTANCE]


def prepared(events: DataFrame) -> DataFrame:
    """The stateless part of `changes`, for the whole stream at once: the keyed rows of
    the small facts and `record_rows`, apart by `PART`. Built once: built per micro-batch,
    Spark's analysis of these plans (a JVM call per step) was half a batch's time."""
    keyed = facts.keyed(fact_rows(events), records=False).withColumn(PART, F.lit(FACT_PART))
    records = record_rows(events).withColumn(PART, F.lit(RECORD_PART))
    return keyed.unionByName(records, allowMissingColumns=True)


def changes(batch: DataFrame) -> BatchChanges:
    """A micro-batch's raw rows (the store's columns) -> what `FollowState.apply` folds in."""
    return prepared_changes(prepared(batch))


def prepared_changes(rows: DataFrame) -> BatchChanges:
    """A micro-batch of `prepared` rows -> what `FollowState.apply` folds in: the small
    facts of the deliveries from the rows collected for the audit (`delivered_facts`),
    those of every other row from Spark (few: a ranged `fetched` is one row)."""
    part = F.col(PART)
    keyed_columns = [*facts.KEY, "type", "ts_ms", "endpoint", "offset", "record_ts_ms", "count",
                     facts.WEIGHT]
    keyed = rows.filter(part == FACT_PART).select(*keyed_columns)
    small = [row.asDict() for row in facts.aggregate(keyed).collect()]
    table = rows.filter(part == RECORD_PART).select(*RECORD_COLUMNS).toArrow().to_pandas()
    result = cursor_changes(table)
    result.facts = small + delivered_facts(table)
    return result


def _rounded(values: pd.Series) -> Any:
    """`facts.round_latency` of each value (NaN for none)."""
    numbers = values.to_numpy(np.float64, na_value=np.nan)
    return np.where(np.isnan(numbers), np.nan, round3_array(np.nan_to_num(numbers)))


def delivered_facts(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The `delivered` rows of `record_rows` -> their small facts, as `facts.aggregate`
    over `facts.keyed(..., records=False)` gives them: `tick`, `endpoint`, `instance`,
    `added` and `http` rows."""
    found = rows[rows["type"] == "delivered"]
    if found.empty:
        return []
    hashed = found["eh_low"] != NO_HASH_LOW
    first = found["fetched_ts_ms"].notna() & (found["attempt"].isna() | (found["attempt"] <= 1))
    sent_at = found["ts_ms"] - np.floor(found["latency_ms"] + 0.5)  # Spark's round: half up
    frame = found.assign(
        second=(found["ts_ms"] // facts.TICK_MS) * facts.TICK_MS,
        sub_known=found["subscription"].fillna(""), ep_known=found["endpoint"].fillna(""),
        added=(sent_at - found["fetched_ts_ms"]).where(first),
    )
    facts_: list[dict[str, Any]] = []

    def add(kind: str, part: pd.DataFrame, keys: dict[str, str], value: str | None = None,
            **fixed: Any) -> None:
        columns = list(keys.values())
        if value is not None:
            part = part.assign(_v=_rounded(part[value]))
            columns.append("_v")
        grouped = part.groupby(columns, dropna=False, sort=False).agg(
            n=("ts_ms", "size"), first_ms=("ts_ms", "min"), last_ms=("ts_ms", "max"),
            max_offset=("offset", "max"), count_sum=("count", "sum"),
            counted=("count", "count")).reset_index()
        for record in grouped.to_dict("records"):
            fact = {**dict.fromkeys(facts.KEY), **fixed, "kind": kind}
            for name, column in keys.items():
                fact[name] = _plain(record[column])
            if value is not None:
                fact["v"] = _plain(record["_v"])
            facts_.append(_measures(fact, record))

    add("tick", frame, {"s2": "subscription", "n1": "second"}, s1="delivered")
    add("endpoint", frame[hashed], {"s1": "subscription", "s2": "endpoint", "n1": "eh_low"})
    add("instance", frame[frame[transforms.INSTANCE].notna()],
        {"s1": transforms.INSTANCE}, s2="delivered")
    add("added", frame[frame["fetched_ts_ms"].notna()], {"s1": "sub_known", "s2": "ep_known"},
        "added")
    add("http", frame, {"s1": "sub_known", "s2": "ep_known"}, "latency_ms")
    return facts_


def _plain(value: Any) -> Any:
    """numpy and pandas scalars -> Python's (msgpack and the state's keys want them)."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return None
    return value.item() if isinstance(value, np.generic) else value


def _measures(fact: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    n = int(record["n"])
    fact.update(dict.fromkeys((name for _, name in facts.TYPE_COUNTS), 0))
    fact.update(n=n, deliveries=n, first_ms=int(record["first_ms"]),
                last_ms=int(record["last_ms"]), max_offset=_plain(record["max_offset"]),
                count_sum=int(record["count_sum"]) if record["counted"] else None)
    if fact["max_offset"] is not None:
        fact["max_offset"] = int(fact["max_offset"])
    return fact


def cursor_changes(rows: pd.DataFrame) -> BatchChanges:
    """`record_rows`, as pandas -> the batch's runs per cursor, first-delivery latencies
    and filtered ranges (`facts` left empty)."""
    result = BatchChanges()
    if rows.empty:
        return result
    filtered = rows["type"] == "filtered"
    for sub, topic, partition, ranges in rows.loc[filtered, [*CURSOR, "ranges"]].itertuples(
            index=False):
        result.filtered.append(((sub, topic, int(partition)), ranges))
    keyed = rows["subscription"].notna() & rows["topic"].notna() & rows["partition"].notna() \
        & (rows["offset"].notna() | rows["ranges"].notna())
    records = rows[~filtered & keyed]
    ranged = records["ranges"].notna()

    def cursor(key: PartitionKey) -> CursorChanges:
        return result.cursors.setdefault(key, CursorChanges())

    for sub, topic, partition, offset, ranges, ts, low, high in records.loc[
            ranged, [*CURSOR, "offset", "ranges", "ts_ms", "eh_low", "eh_high"]].itertuples(
            index=False):
        tally = Tally(1, 0, 0, int(ts), *_hashes(low, high))
        for first, last in _readable(ranges, offset):
            cursor((sub, topic, int(partition))).runs.append(Run(first, last, tally))
    singles = records[~ranged]
    if not singles.empty:
        for key, run in _single_runs(singles):
            cursor(key).runs.append(run)
        for key, offsets, e2e in _first_deliveries(singles):
            found = cursor(key)
            found.e2e_offsets, found.e2e_ms = offsets, e2e
    return result


def _readable(ranges: str, offset: Any) -> list[tuple[int, int]]:
    """A `fetched` event's ranges; unreadable ones name its `offset` only, as
    `transforms.one_row_per_offset` reads them."""
    try:
        return ranges_of(ranges)
    except ValueError:
        return [] if pd.isna(offset) else [(int(offset), int(offset))]


def _hashes(low: Any, high: Any) -> tuple[int | None, int | None]:
    """`eh_low`, `eh_high` -> `Tally.eh`, `Tally.eh_max`."""
    return (None if low == NO_HASH_LOW else int(low),
            None if high == NO_HASH_HIGH else int(high))


def _cursor_names(rows: pd.DataFrame) -> dict[int, PartitionKey]:
    """`cursor_id` -> the cursor it hashes."""
    first = rows.drop_duplicates("cursor_id")
    return {int(i): (sub, topic, int(partition)) for i, sub, topic, partition in first[
        ["cursor_id", *CURSOR]].itertuples(index=False)}


def _single_runs(singles: pd.DataFrame) -> list[tuple[PartitionKey, Run]]:
    """Rows of one offset each -> per offset the sums of its events, then runs of
    consecutive offsets with equal sums. Grouped by the cursor's hash (`cursor_id`):
    strings made pandas' grouping most of a batch's time."""
    kind = singles["type"]
    summed = singles.assign(
        f=(kind == "fetched").astype(np.int64), d=(kind == "delivered").astype(np.int64),
        x=(kind == "dead_lettered").astype(np.int64),
        lf=singles["ts_ms"].where(kind == "fetched", -1).astype(np.int64),
    ).groupby(["cursor_id", "offset"], sort=True).agg(
        f=("f", "sum"), d=("d", "sum"), x=("x", "sum"), lf=("lf", "max"),
        low=("eh_low", "min"), high=("eh_high", "max")).reset_index()
    cursors = summed["cursor_id"].to_numpy(np.int64)
    offsets = summed["offset"].to_numpy(np.int64)
    values = summed[["f", "d", "x", "lf", "low", "high"]].to_numpy(np.int64)
    breaks = np.ones(len(summed), dtype=bool)
    breaks[1:] = (cursors[1:] != cursors[:-1]) | (offsets[1:] != offsets[:-1] + 1) | (
        values[1:] != values[:-1]).any(axis=1)
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], len(summed)) - 1
    names = _cursor_names(singles)
    runs = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        f, d, x, lf, low, high = values[start].tolist()
        open_ = f > 0 and d == 0 and x == 0
        tally = Tally(f, d, x, lf if open_ and lf >= 0 else None, *_hashes(low, high))
        runs.append((names[int(cursors[start])],
                     Run(int(offsets[start]), int(offsets[end]), tally)))
    return runs


def _first_deliveries(singles: pd.DataFrame) -> list[tuple[PartitionKey, Any, Any]]:
    """Per cursor: the offsets delivered in the batch (sorted) and the end-to-end latency
    of each one's earliest delivery, rounded (`round3_array`), where known."""
    delivered = singles[(singles["type"] == "delivered") & singles["e2e_ms"].notna()]
    if delivered.empty:
        return []
    first = delivered.sort_values(["cursor_id", "offset", "ts_ms"]).drop_duplicates(
        ["cursor_id", "offset"])
    names = _cursor_names(first)
    found = []
    for cursor_id, rows in first.groupby("cursor_id", sort=False):
        found.append((names[int(cursor_id)], rows["offset"].to_numpy(np.int64),
                      round3_array(rows["e2e_ms"].to_numpy(np.float64))))
    return found
