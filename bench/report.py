"""Benchmark: the journal writer and the PySpark report on a synthetic journal.

    .venv/bin/python bench/report.py [--events 1000000] [--master 'local[*]']
                                     [--chart docs/report-throughput.png]

1. Writes a synthetic journal of exactly `--events` events (3 subscriptions x 8 partitions
   at 1,000 records/s each, some failures and retries, an endpoint outage, a partition
   actor crash, 3 lost records and 2 duplicates planted, delay-queue forwards to make up
   the count) through the real `Journal` (emit, then a flush every 10,000 events) and
   reports its cost per event.
2. Runs the report (`runtime.report.job`) on it, timing Spark startup and the report
   separately, and checks the audit found exactly the planted faults.
3. With `--chart`, copies the throughput chart there (it says "synthetic journal").

Bounded: one pass over a fixed number of events; the report has no loops of its own.
Prints a Markdown section for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.host.journal import Journal
from runtime.kernel.clock import RealClock
from runtime.report import job
from runtime.report.synthetic import SyntheticJournal

FLUSH_EVERY = 10_000
RecordIds = frozenset[tuple[str, int, int]]


def planted(n: int) -> tuple[RecordIds, RecordIds]:
    """Lost and duplicated records, placed relative to the partition length `n`."""
    lost = {("orders-hook", 2, n // 10), ("billing-hook", 5, n // 3), ("audit-hook", 7, 9)}
    duplicates = {("orders-hook", 0, 77), ("audit-hook", 3, n // 2)}
    return frozenset(lost), frozenset(duplicates)


def synthetic(records_per_partition: int, delay_forwards: int = 0) -> SyntheticJournal:
    lost, duplicates = planted(records_per_partition)
    return SyntheticJournal(
        subscriptions=("orders-hook", "audit-hook", "billing-hook"), partitions=8,
        records_per_partition=records_per_partition, rate_per_s=1_000.0, fail_every=40,
        dead_letter_every=500, outage=(0.55, 0.6), lost=lost, duplicates=duplicates,
        crash_partition=("orders-hook", 4), delay_forwards=delay_forwards,
    )


def sized(target_events: int) -> SyntheticJournal:
    """A journal of exactly `target_events`: ~98% delivery events, delay forwards fill up."""
    sample = 1_000
    per_record = sum(1 for _ in synthetic(sample).events()) / (3 * 8 * sample)
    records = int(target_events * 0.98 / (per_record * 3 * 8))
    base = sum(1 for _ in synthetic(records).events())
    return synthetic(records, delay_forwards=target_events - base)


def generation_seconds(spec: SyntheticJournal) -> tuple[int, float]:
    started = time.perf_counter()
    count = sum(1 for _ in spec.events())
    return count, time.perf_counter() - started


async def write_journal(directory: Path, spec: SyntheticJournal) -> tuple[Journal, float]:
    journal = Journal(directory, clock=RealClock())
    await journal.start()
    started = time.perf_counter()
    for i, event in enumerate(spec.events(), start=1):
        journal.emit(event)
        if i % FLUSH_EVERY == 0:
            await journal.flush()
    await journal.stop()
    return journal, time.perf_counter() - started


def check_audit(result: dict[str, object], spec: SyntheticJournal) -> None:
    audit = result["audit"]
    assert isinstance(audit, list)
    found = {(a["subscription"], a["partition"], o) for a in audit for o in a["lost_offsets"]}
    dups = {(a["subscription"], a["partition"], o) for a in audit
            for o in a["duplicate_offsets"]}
    if found != spec.lost or dups != spec.duplicates:
        raise SystemExit(f"audit mismatch: lost {found}, duplicates {dups}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--chart", type=Path, help="copy the throughput chart here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)

    spec = sized(args.events)
    count, gen_s = generation_seconds(spec)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        journal_dir, out_dir = Path(tmp, "journal"), Path(tmp, "out")
        journal, write_s = asyncio.run(write_journal(journal_dir, spec))
        assert journal.written == count and journal.dropped == 0, journal
        segments = len(list(journal_dir.glob("*.jsonl")))
        megabytes = sum(p.stat().st_size for p in journal_dir.glob("*.jsonl")) / 1e6

        files = job.find_journal_files(journal_dir)
        started = time.perf_counter()
        spark, _ = job.spark_session(args.master)
        startup_s = time.perf_counter() - started
        started = time.perf_counter()
        result = job.run_report(spark, files, out_dir, chart_note="synthetic journal")
        report_s = time.perf_counter() - started
        cores = spark.sparkContext.defaultParallelism
        spark.stop()
        check_audit(result, spec)
        if args.chart:
            args.chart.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out_dir / "charts" / "throughput.png", args.chart)

    per_event_us = (write_s - gen_s) / count * 1e6
    chart = f" --chart {args.chart}" if args.chart else ""
    events_per_s = count / max(result["span_s"], 1e-9)
    print(f"""
## Report

Command: `.venv/bin/python bench/report.py --events {args.events} --master '{args.master}'{chart}`

- Synthetic journal: {count:,} events in {segments} segments ({megabytes:.0f} MB);
  {result['delivered']:,} records delivered over {result['span_s']:.0f} s of event time.
- Journal writer (emit + encode + write, event generation excluded):
  {per_event_us:.2f} us/event = {1e6 / per_event_us:,.0f} events/s. This journal's rate,
  {events_per_s:,.0f} events/s, would cost {per_event_us * events_per_s / 1e4:.1f}% of one core.
- Spark startup ({args.master}, {cores} cores): {startup_s:.1f} s.
- Report (read, 7 tables as Parquet + CSV, 3 charts, summary): {report_s:.1f} s,
  {count / report_s:,.0f} events/s.
- Audit: lost {result['lost']}, duplicates {result['duplicates']} (exactly the planted
  ones), dead-lettered {result['dead_lettered']:,}.
""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
