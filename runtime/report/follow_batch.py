"""One micro-batch of the follow job -> `follow_state.BatchChanges` (issue 35, item 4).

Spark reduces the batch's new journal rows statelessly (`changes`):

- the small facts: `facts.keyed` without the record rows, aggregated over this batch
  alone (a few hundred rows; `follow_state.merge_fact` adds them up across batches);
- the record rows (`record_rows`): one per event, but a ranged `fetched` (and a
  `filtered`) keeps its ranges as they are, a columnar `delivered` is one row per delivery
  (`transforms.one_row_per_event`) and other ranged record events one per record; only
  the columns the audit reads, collected as Arrow.

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
    """Raw rows of a batch -> the audit's rows (see the module doc): `type`, the cursor,
    `offset`, `ranges` (a `fetched` or `filtered` event's offsets), `ts_ms`, `eh_low` and
    `eh_high` (the endpoint's hash, or the extremes of a long for none: a null long
    would reach pandas as a float), `e2e_ms` (a delivery's end-to-end latency)."""
    c = F.col
    events = transforms.one_row_per_event(raw).filter(
        transforms.is_valid_event() & _is(*RECORD_EVENTS, "filtered")
        & c("subscription").isNotNull() & c("topic").isNotNull() & c("partition").isNotNull()
        & (c("offset").isNotNull() | c("offsets").isNotNull()))
    kept = events.withColumns({
        "ranges": F.when(_is(*KEPT_AS_RANGES), c("offsets")),
        "offsets": F.when(~_is(*KEPT_AS_RANGES), c("offsets")),
    })
    rows = transforms.one_row_per_offset(kept)
    eh = facts.name_hash(c("endpoint"))
    return rows.select(
        "type", *CURSOR, "offset", "ranges", "ts_ms",
        F.coalesce(eh, F.lit(int(NO_HASH_LOW))).alias("eh_low"),
        F.coalesce(eh, F.lit(int(NO_HASH_HIGH))).alias("eh_high"),
        F.when(_is("delivered"), c("ts_ms") - c("record_ts_ms")).cast("double").alias("e2e_ms"),
    )


def changes(batch: DataFrame) -> BatchChanges:
    """A micro-batch's raw rows (the store's columns) -> what `FollowState.apply` folds in."""
    keyed = facts.keyed(transforms.one_row_per_record(batch), records=False)
    fact_rows = [row.asDict() for row in facts.aggregate(keyed).collect()]
    table = record_rows(batch).toArrow().to_pandas()
    result = cursor_changes(table)
    result.facts = fact_rows
    return result


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
    records = rows[~filtered]
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


def _single_runs(singles: pd.DataFrame) -> list[tuple[PartitionKey, Run]]:
    """Rows of one offset each -> per offset the sums of its events, then runs of
    consecutive offsets with equal sums."""
    kind = singles["type"]
    summed = singles.assign(
        f=(kind == "fetched").astype(np.int64), d=(kind == "delivered").astype(np.int64),
        x=(kind == "dead_lettered").astype(np.int64),
        lf=singles["ts_ms"].where(kind == "fetched", -1).astype(np.int64),
    ).groupby([*CURSOR, "offset"], sort=True).agg(
        f=("f", "sum"), d=("d", "sum"), x=("x", "sum"), lf=("lf", "max"),
        low=("eh_low", "min"), high=("eh_high", "max")).reset_index()
    cursors = summed.groupby(CURSOR, sort=False).ngroup().to_numpy()
    offsets = summed["offset"].to_numpy(np.int64)
    values = summed[["f", "d", "x", "lf", "low", "high"]].to_numpy(np.int64)
    breaks = np.ones(len(summed), dtype=bool)
    breaks[1:] = (cursors[1:] != cursors[:-1]) | (offsets[1:] != offsets[:-1] + 1) | (
        values[1:] != values[:-1]).any(axis=1)
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], len(summed)) - 1
    keys = summed[CURSOR].to_numpy()
    runs = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        f, d, x, lf, low, high = values[start].tolist()
        open_ = f > 0 and d == 0 and x == 0
        tally = Tally(f, d, x, lf if open_ and lf >= 0 else None, *_hashes(low, high))
        sub, topic, partition = keys[start]
        runs.append(((sub, topic, int(partition)),
                     Run(int(offsets[start]), int(offsets[end]), tally)))
    return runs


def _first_deliveries(singles: pd.DataFrame) -> list[tuple[PartitionKey, Any, Any]]:
    """Per cursor: the offsets delivered in the batch (sorted) and the end-to-end latency
    of each one's earliest delivery, rounded (`round3_array`), where known."""
    delivered = singles[(singles["type"] == "delivered") & singles["e2e_ms"].notna()]
    if delivered.empty:
        return []
    first = delivered.sort_values([*CURSOR, "offset", "ts_ms"]).drop_duplicates(
        [*CURSOR, "offset"])
    found = []
    for (sub, topic, partition), rows in first.groupby(CURSOR, sort=False):
        found.append(((sub, topic, int(partition)), rows["offset"].to_numpy(np.int64),
                      round3_array(rows["e2e_ms"].to_numpy(np.float64))))
    return found
