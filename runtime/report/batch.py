"""The fast batch report: one aggregation over the events, small results, driver-side files.

Same tables, charts and summary as the reference path (runtime/report/job.py, the
definitions in runtime/report/transforms.py), computed with fewer passes
(runtime/report/facts.py):

1. input: the journal's JSON segments, or, with `--store`, the Parquet store
   (runtime/report/store.py) after compacting the segments not yet in it, plus any crash
   leftovers (read as JSON, since they are not closed segments): one row per event (a
   commit round one per position), cached; ranged events are not expanded here;
2. `facts.tick_facts` over `ranges.tick_rows` (a ranged event whose records share a
   second is one row), cached: per event type, throughput buckets, the small facts;
3. the audit on ranges (runtime/report/ranges.py): per cursor, fetched offsets against
   delivered ones; a clean cursor counted from sums, the others record by record
   (`facts.record_facts`); one aggregation for both the per endpoint summary and the per
   partition audit (`groups.record_groups`);
4. one pass over the send and delay events, one row per record, for the latency
   percentiles;
5. the driver builds the tables (runtime/report/tables.py) and writes them with pyarrow
   (runtime/report/output.py): a report is a handful of Spark jobs, not one per file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runtime.errors import UsageError
from runtime.report import facts, gaps, groups, output, ranges, tables, transforms
from runtime.report.job import Progress, Steps, choose_bucket_ms, read_raw
from runtime.report.sources import JournalFiles
from runtime.report.store import Store, compact, read_events

STEPS = 5


@dataclass(frozen=True, slots=True)
class Input:
    raw: DataFrame
    source: str  # "json" or "store"


def read_input(spark: SparkSession, files: JournalFiles, store: Store | None) -> Input:
    """Raw journal rows: from the store (with crash leftovers as JSON), or all JSON."""
    if store is None:
        return Input(read_raw(spark, files, per_record=False), "json")
    compact(spark, files.directories, store)
    parts = []
    if store.has_events():
        parts.append(read_events(spark, store, per_record=False))
    if files.recovered_tails:
        tails = JournalFiles(files.directories, [], files.recovered_tails, [])
        parts.append(read_raw(spark, tails, per_record=False))
    if not parts:
        raise UsageError(f"journal {files.label} has no events")
    raw = parts[0]
    for part in parts[1:]:
        raw = raw.unionByName(part)
    return Input(raw, "store")


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.collect()]


def _groups(parts: groups.Parts) -> list[dict[str, Any]]:
    return groups.merge_groups(*(_rows(part) for part in parts))


def type_rows(small: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `type` facts as `tables.Aggregates.types` rows."""
    return [{"type": r["s1"], "events": r["n"], "first_ms": r["first_ms"],
             "last_ms": r["last_ms"], "count_sum": r["count_sum"] or 0}
            for r in small if r["kind"] == "type"]


def record_groups(records: DataFrame, events: DataFrame, small: list[dict[str, Any]],
                  clean: DataFrame | None = None) -> list[dict[str, Any]]:
    """`groups.record_groups` of the records and the `clean` cursors (`ranges`), with
    endpoints resolved; the rare records whose events name two endpoints get the
    smallest, as in the reference, at the cost of a second pass."""
    only = facts.only_endpoints(small)
    more = None
    if clean is not None:
        resolved = facts.resolve_endpoints(clean, only)
        more = ranges.clean_counts(resolved), ranges.clean_latencies(resolved)
    found = _groups(groups.record_groups(facts.resolve_endpoints(records, only), more))
    if any(g["ambiguous"] for g in found):
        smallest = facts.smallest_endpoints(events, facts.ambiguous(records))
        found = _groups(groups.record_groups(
            facts.resolve_endpoints(records, only, smallest), more))
    try:
        return groups.named_groups(found, facts.names(small))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def audit_groups(events: DataFrame, gap: gaps.JournalGap | None,
                 small: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`record_groups` on ranges: clean cursors from sums, the others record by record
    (runtime/report/ranges.py)."""
    states = ranges.cursor_states(events).cache()
    # few rows, read by each part of `groups.record_groups` (and `smallest_endpoints`)
    unclean = ranges.unclean_events(events, states).cache()
    try:
        return record_groups(facts.record_facts(unclean, gap), unclean, small,
                             ranges.clean_cursors(states))
    finally:
        unclean.unpersist()
        states.unpersist()


def aggregates(raw: DataFrame, label: str, steps: Steps) -> tables.Aggregates:
    """Run the Spark side; everything returned is small."""
    events = transforms.valid_events(raw)
    ticks = facts.tick_facts(ranges.tick_rows(raw)).cache()
    try:
        small = facts.small_facts(_rows(facts.tick_totals(ticks)))
        types = type_rows(small)
        valid = [t for t in types if t["type"] is not None]
        if not valid:
            raise UsageError(f"journal {label} has no events")
        first = min(t["first_ms"] for t in valid)
        last = max(t["last_ms"] for t in valid)
        steps.done(f"reading journal {label} ... {sum(t['events'] for t in valid):,} events")
        bucket_ms = choose_bucket_ms(last - first)
        coarse = _rows(facts.coarse_ticks(ticks, bucket_ms))
    finally:
        ticks.unpersist()
    gap = gaps.journal_gap(events)
    found = audit_groups(events, gap, small)
    steps.done(f"records, audit and throughput ... {len(found)} group(s), "
               f"{len(coarse)} throughput row(s)")
    latencies = _rows(facts.latency_percentiles(ranges.latency_rows(events)))
    steps.done(f"latency percentiles ... {len(latencies)} row(s)")
    return tables.Aggregates(types, coarse, bucket_ms, small, found, latencies,
                             None if gap is None else dataclasses.asdict(gap))


def run_report(
    spark: SparkSession,
    files: JournalFiles,
    out_dir: Path,
    *,
    store: Store | None = None,
    progress: Progress = print,
    chart_note: str = "",
) -> dict[str, Any]:
    """Run the fast report; return summary.json's content. UsageError without events."""
    steps = Steps(progress, STEPS)
    source = read_input(spark, files, store)
    raw = source.raw if source.source == "store" else source.raw.cache()
    try:
        agg = aggregates(raw, files.label, steps)
    finally:
        if raw is not source.raw:
            raw.unpersist()
    report = tables.build(agg)
    out_dir.mkdir(parents=True, exist_ok=True)
    for table in report.tables:
        output.write_table(out_dir, table)
    steps.done(f"tables ... {len(report.tables)} written to {out_dir}")
    drawn = output.write_charts(out_dir, report, chart_note)
    result = output.summary_of(
        report, journal=files.label, segments=files.counts(), bucket_ms=agg.bucket_ms,
        outputs={"tables": [t.name for t in report.tables], "charts": drawn},
        skipped_segments=files.skipped())
    output.write_summary(out_dir, result)
    steps.done(f"charts and summary ... {out_dir / 'summary.md'}")
    return result
