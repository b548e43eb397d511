"""Benchmark: the journal writer, and the report's reference path against the fast path.

    .venv/bin/python bench/report.py [--events 1000000] [--master 'local[2]'] [--rounds 2]
                                     [--java-options=-XX:TieredStopAtLevel=1]
                                     [--chart docs/report-throughput.png]

1. Writes a synthetic journal of exactly `--events` events (3 subscriptions x 8 partitions
   at 1,000 records/s each, some failures and retries, an endpoint outage, a partition
   actor crash, 3 lost records and 2 duplicates planted, delay-queue forwards to make up
   the count) through the real `Journal` (emit, then a flush every 10,000 events) and
   reports its cost per event.
2. Converts the journal to the Parquet store once (`compact`, what `--store` and the
   follow job do as segments close), timed on its own.
3. Runs, `--rounds` times and in alternating order, each contender in a fresh process, so
   each pays its own JVM warm-up: `reference` (runtime/report/job.py, today's path), `fast`
   (runtime/report/batch.py on the JSON segments) and `fast-store` (the same, reading the
   store). Spark's start (session creation) is timed apart from the report, which is
   everything after it: reading, aggregating, tables, charts, summary.
4. Checks every contender found exactly the planted faults and that the fast paths' totals
   and tables equal the reference path's.

Bounded: a fixed number of events, rounds and contenders; every child has a timeout.
Prints a Markdown section for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.host.journal import Journal
from runtime.kernel.clock import RealClock
from runtime.report.synthetic import SyntheticJournal

FLUSH_EVERY = 10_000
CONTENDERS = ("reference", "fast", "fast-store")
CHILD_TIMEOUT_S = 900
HEADER = ("| path | Spark start s | first report s (rounds) | events/s | x reference | "
          "second report s (same JVM) | events/s | x reference |\n"
          "|---|---|---|---|---|---|---|---|")
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
    await journal.open()
    started = time.perf_counter()
    for i, event in enumerate(spec.events(), start=1):
        journal.emit(event)
        if i % FLUSH_EVERY == 0:
            await journal.flush()
    await journal.stop()
    return journal, time.perf_counter() - started


def check_audit(result: dict[str, Any], spec: SyntheticJournal, who: str) -> None:
    audit = result["audit"]
    found = {(a["subscription"], a["partition"], o) for a in audit for o in a["lost_offsets"]}
    dups = {(a["subscription"], a["partition"], o) for a in audit
            for o in a["duplicate_offsets"]}
    if found != spec.lost or dups != spec.duplicates:
        raise SystemExit(f"{who}: audit mismatch: lost {found}, duplicates {dups}")


# -- a child: one contender in a fresh process ----------------------------------------------

def child(args: argparse.Namespace) -> int:
    """Run one contender; print one JSON line with its timings and summary."""
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    from runtime.report import batch, job
    from runtime.report.sources import find_journal_files
    from runtime.report.store import Store, compact

    files = find_journal_files(args.journal)
    started = time.perf_counter()
    # "": no options from the report's defaults; --java-options arrive through
    # PYSPARK_SUBMIT_ARGS (run_child), so the bench measures exactly what it names
    spark, _ = job.spark_session(args.master, java_options="")
    startup_s = time.perf_counter() - started
    times: list[float] = []
    result: dict[str, Any] = {}
    for out in ([args.out] if args.child == "compact" else [args.out, args.out / "again"]):
        started = time.perf_counter()
        if args.child == "compact":
            compact(spark, files.directories, Store(args.store))
        elif args.child == "reference":
            result = job.run_report(spark, files, out, progress=_quiet,
                                    chart_note="synthetic journal")
        else:
            store = Store(args.store) if args.child == "fast-store" else None
            result = batch.run_report(spark, files, out, store=store, progress=_quiet,
                                      chart_note="synthetic journal")
        times.append(time.perf_counter() - started)
        _quiet("--- again, same JVM")
    cores = spark.sparkContext.defaultParallelism
    spark.stop()
    print(json.dumps({"startup_s": startup_s, "seconds": times[0], "warm_s": times[-1],
                      "cores": cores, "result": result}))
    return 0


def _quiet(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_child(name: str, journal: Path, store: Path, out: Path, args: argparse.Namespace,
              ) -> dict[str, Any]:
    env = dict(os.environ)
    if args.java_options:
        env["PYSPARK_SUBMIT_ARGS"] = (
            f"--conf spark.driver.extraJavaOptions={args.java_options} pyspark-shell")
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--journal", str(journal), "--store",
         str(store), "--out", str(out), "--master", args.master],
        env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    first = done.stderr.split("--- again, same JVM")[0]
    steps = [line for line in first.splitlines() if line.startswith("[")]
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    measured["steps"] = steps
    return measured


# -- the comparison ----------------------------------------------------------------------------

def same_outputs(reference: Path, fast: Path) -> list[str]:
    """Differences between two reports: summary.json (but the time it was made) and every
    table's Parquet rows."""
    import pyarrow.parquet as pq

    want = json.loads((reference / "summary.json").read_text())
    have = json.loads((fast / "summary.json").read_text())
    diffs = [key for key in want if key != "generated_at" and want[key] != have.get(key)]
    for name in want["outputs"]["tables"]:
        rows = [pq.read_table(d / "parquet" / name).to_pylist() for d in (reference, fast)]
        if rows[0] != rows[1]:
            diffs.append(f"table {name}")
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--java-options", default="",
                        help="JVM options for every Spark driver (default none, unlike the "
                             "report command's short-job options)")
    parser.add_argument("--chart", type=Path, help="copy the throughput chart here")
    parser.add_argument("--child", choices=(*CONTENDERS, "compact"), help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    spec = sized(args.events)
    count, gen_s = generation_seconds(spec)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        journal_dir, store = Path(tmp, "journal"), Path(tmp, "store")
        journal, write_s = asyncio.run(write_journal(journal_dir, spec))
        assert journal.written == count and journal.dropped == 0, journal
        segments = len(list(journal_dir.glob("*.jsonl")))
        megabytes = sum(p.stat().st_size for p in journal_dir.glob("*.jsonl")) / 1e6
        load = [os.getloadavg()[0]]
        compacted = run_child("compact", journal_dir, store, Path(tmp, "unused"), args)
        store_mb = sum(p.stat().st_size for p in (store / "events").glob("*.parquet")) / 1e6
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
        for round_ in range(args.rounds):
            order = CONTENDERS if round_ % 2 == 0 else tuple(reversed(CONTENDERS))
            for name in order:
                out = Path(tmp, f"out-{name}-{round_}")
                runs[name].append(run_child(name, journal_dir, store, out, args) | {"out": out})
                load.append(os.getloadavg()[0])
                check_audit(runs[name][-1]["result"], spec, name)
                print(f"round {round_ + 1} {name}: {runs[name][-1]['seconds']:.1f} s",
                      file=sys.stderr, flush=True)
        diffs = {name: same_outputs(runs["reference"][0]["out"], runs[name][0]["out"])
                 for name in CONTENDERS[1:]}
        if args.chart:
            args.chart.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(runs["fast-store"][0]["out"] / "charts" / "throughput.png",
                            args.chart)
        result = runs["reference"][0]["result"]

    per_event_us = (write_s - gen_s) / count * 1e6
    events_per_s = count / max(result["span_s"], 1e-9)
    print(render(args, count, segments, megabytes, store_mb, result, per_event_us,
                 events_per_s, compacted, runs, diffs, load))
    return 0


def render(args: argparse.Namespace, count: int, segments: int, megabytes: float,
           store_mb: float, result: dict[str, Any], per_event_us: float,
           events_per_s: float, compacted: dict[str, Any],
           runs: dict[str, list[dict[str, Any]]], diffs: dict[str, list[str]],
           load: list[float]) -> str:
    reference = statistics.median(r["seconds"] for r in runs["reference"])
    reference_warm = statistics.median(r["warm_s"] for r in runs["reference"])
    rows = []
    for name in CONTENDERS:
        seconds = [r["seconds"] for r in runs[name]]
        warm = [r["warm_s"] for r in runs[name]]
        median, warm_median = statistics.median(seconds), statistics.median(warm)
        startup = statistics.median(r["startup_s"] for r in runs[name])
        rows.append(
            f"| {name} | {startup:.1f} | {', '.join(f'{s:.1f}' for s in seconds)} | "
            f"{count / median:,.0f} | {reference / median:.2f} | "
            f"{', '.join(f'{s:.1f}' for s in warm)} | {count / warm_median:,.0f} | "
            f"{reference_warm / warm_median:.2f} |")
    steps = "\n".join(f"  - {name}: " + "; ".join(runs[name][0]["steps"])
                      for name in CONTENDERS)
    java = f" --java-options={args.java_options}" if args.java_options else ""
    chart = f" --chart {args.chart}" if args.chart else ""
    return f"""
Command: `.venv/bin/python bench/report.py --events {args.events} --master '{args.master}' \
--rounds {args.rounds}{java}{chart}` (load average {min(load):.1f}-{max(load):.1f} during the run)

- Synthetic journal: {count:,} events in {segments} segments ({megabytes:.0f} MB of JSON,
  {store_mb:.1f} MB as Parquet); {result['delivered']:,} records delivered over
  {result['span_s']:.0f} s of event time.
- Journal writer (emit + encode + write, event generation excluded):
  {per_event_us:.2f} us/event; this journal's rate, {events_per_s:,.0f} events/s, would cost
  {per_event_us * events_per_s / 1e4:.1f}% of one core.
- Conversion to the Parquet store, once per segment (`compact`; the follow job does it as
  segments close): {compacted['seconds']:.1f} s, {count / compacted['seconds']:,.0f} events/s.

{HEADER}
{chr(10).join(rows)}

Report = everything after Spark's session exists: read, aggregate, 10 tables as Parquet and
CSV, 3 charts, summary. "First report": each contender in a fresh JVM, so each pays its
own warm-up (class loading, code generation, JIT); "second report": the same report again
in that JVM, which shows what the warm-up cost (events/s are medians over the rounds).
Steps of the first round:
{steps}

Audit: every contender found exactly the planted faults (lost {result['lost']}, duplicates
{result['duplicates']}). Outputs against the reference path: fast {diffs['fast'] or 'equal'},
fast-store {diffs['fast-store'] or 'equal'}.
"""


if __name__ == "__main__":
    raise SystemExit(main())
