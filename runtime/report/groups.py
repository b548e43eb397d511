"""The record groups of the fast report: per subscription and endpoint (the delivery
summary) and per subscription and topic-partition (the audit), from the records
(`facts.record_facts`) and the clean cursors (runtime/report/ranges.py).

Three aggregations (`record_groups`), merged on the driver (`merge_groups`): the counts
take fixed-width buffers (a hash aggregation) and the percentiles only the latencies; in
one aggregation every row was sorted with all of them (Spark's object aggregation falls
back to sorting past 128 groups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from runtime.report import transforms

VIEW_KEYS = ["view", "k1", "k2", "k3"]
VIEW_COUNTS = ("fetched_n", "delivered_n", "deliveries", "attempts", "failures", "retries",
               "dead_n", "lost_n", "unknown_n", "ambiguous_n")
PROBLEM = "struct<offset:bigint,fetches:bigint,deliveries:bigint,lost:boolean,unknown:boolean>"


def known_endpoint() -> Column:
    """`ep` as a group key: null for no endpoint or ""."""
    return F.when(F.col("ep") != F.xxhash64(F.lit("")), F.col("ep"))


def _flag(condition: Column) -> Column:
    return F.when(condition, 1).otherwise(0).cast("long")


def record_views(records: DataFrame) -> DataFrame:
    """Records (with `ep`) -> a row per record in each view: per subscription and endpoint
    (`view` = "endpoint"; `k1`, `k2` = their hashes, `known_endpoint`) and per subscription
    and topic-partition (`view` = "partition"; `k1`, `k2`, `k3`), with what the record
    adds to the group's `VIEW_COUNTS`, its `e2e_latency_ms` and, in the partition view, a
    lost, unknown or duplicated record as `problem`."""
    c = F.col
    views = F.array(
        F.struct(F.lit("endpoint").alias("view"), c("sh").alias("k1"),
                 known_endpoint().alias("k2"), F.lit(None).cast("long").alias("k3")),
        F.struct(F.lit("partition").alias("view"), c("sh").alias("k1"), c("th").alias("k2"),
                 c("partition").alias("k3")),
    )
    rows = records.select("*", F.explode(views).alias("_v")).select("*", "_v.*").drop("_v")
    problem = (c("view") == "partition") & (c("lost") | c("unknown") | (c("deliveries") > 1))
    counts = [_flag(c("fetches") > 0), _flag(c("deliveries") > 0), c("deliveries"),
              c("attempts"), c("failures"), c("retries"), _flag(c("dead_letters") > 0),
              _flag(c("lost")), _flag(c("unknown")), _flag(c("ambiguous"))]
    return rows.select(
        *VIEW_KEYS, *(v.cast("long").alias(k) for k, v in zip(VIEW_COUNTS, counts, strict=True)),
        "e2e_latency_ms",
        F.when(problem, F.struct("offset", "fetches", "deliveries", "lost", "unknown"))
        .cast(PROBLEM).alias("problem"))


GROUP_COUNTS = dict(zip(VIEW_COUNTS, (
    "records_fetched", "delivered", "deliveries", "attempts", "failed_attempts", "retries",
    "dead_lettered", "lost", "unknown", "ambiguous"), strict=True))
Parts = tuple[DataFrame, DataFrame, DataFrame]


def record_groups(records: DataFrame, more: tuple[DataFrame, DataFrame] | None = None) -> Parts:
    """Records (with `ep`), and `more` rows from elsewhere (the clean cursors of
    runtime/report/ranges.py: rows of `VIEW_KEYS`, `VIEW_COUNTS` and `e2e_latency_ms`,
    then rows of `VIEW_KEYS` and `e2e_latency_ms`) -> per view and group: the counts,
    the end-to-end latency percentiles (endpoint view) and the lost and duplicated
    records (partition view), three aggregations that `merge_groups` puts together (the
    module doc says why apart)."""
    views = record_views(records)
    counts = views.select(*VIEW_KEYS, *VIEW_COUNTS, "e2e_latency_ms")
    latencies = views.select(*VIEW_KEYS, "e2e_latency_ms")
    if more is not None:
        counts, latencies = counts.unionByName(more[0]), latencies.unionByName(more[1])
    return group_counts(counts), group_latencies(latencies), group_problems(views)


def group_counts(rows: DataFrame) -> DataFrame:
    return rows.groupBy(*VIEW_KEYS).agg(
        *(F.sum(name).alias(alias) for name, alias in GROUP_COUNTS.items()),
        F.max("e2e_latency_ms").alias("e2e_max"))


def group_latencies(rows: DataFrame) -> DataFrame:
    """The endpoint view's latencies -> `e2e_pct` per group (groups without one: none)."""
    c = F.col
    known = rows.filter((c("view") == "endpoint") & c("e2e_latency_ms").isNotNull())
    return known.groupBy(*VIEW_KEYS).agg(F.percentile_approx(
        "e2e_latency_ms", transforms.PERCENTILES, transforms.PERCENTILE_ACCURACY,
    ).alias("e2e_pct"))


def group_problems(views: DataFrame) -> DataFrame:
    problems = views.filter(F.col("problem").isNotNull())
    return problems.groupBy(*VIEW_KEYS).agg(F.collect_list("problem").alias("problems"))


def merge_groups(counts: Sequence[Mapping[str, Any]], latencies: Sequence[Mapping[str, Any]],
                 problems: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`record_groups`' three parts, collected -> one row per group: its counts,
    `e2e_pct` (None without latencies) and `problems` ([] without)."""
    def key(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[name] for name in VIEW_KEYS)

    groups = {key(row): {**row, "e2e_pct": None, "problems": []} for row in counts}
    for row in latencies:
        groups[key(row)]["e2e_pct"] = row["e2e_pct"]
    for row in problems:
        groups[key(row)]["problems"] = row["problems"]
    return list(groups.values())


def named_groups(groups: Sequence[Mapping[str, Any]],
                 names_: Mapping[int, str]) -> list[dict[str, Any]]:
    """`record_groups` rows with the hashes mapped back to names (endpoint view: "" for
    none), as `tables.Aggregates.groups` wants them."""
    named = []
    for group in groups:
        row = dict(group)
        row["k1"] = names_[group["k1"]]
        if group["view"] == "endpoint":
            row["k2"] = names_.get(group["k2"], "") if group["k2"] is not None else ""
        else:
            row["k2"] = names_[group["k2"]]
        named.append(row)
    return named
