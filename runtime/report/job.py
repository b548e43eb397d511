"""The reference report job: read the journal, run the transforms, write tables, charts, summary.

`--engine reference`. The transforms in runtime/report/transforms.py define the report;
this job runs them one table at a time (a Spark job per table and per file written). The
default path (runtime/report/batch.py) computes the same outputs in a few passes and
tests/spark/test_report_job.py checks the two agree; bench/report.py compares their speed.

Input: closed segments (`segment-*.jsonl`) plus crash leftovers (`*.jsonl.open` that no
live writer holds), read with `spark.read.json` on their paths; a torn last line is a
malformed line and is skipped and counted. Segments a live writer holds are skipped (they
would show its in-flight records as lost), in every journal directory given
(runtime/report/sources.py). The directories are listed on the driver, so with a cluster
`--master` they, and OUT_DIR, must be on a filesystem every executor mounts at the same
path.

Output in OUT_DIR: `parquet/<table>/` and `csv/<table>.csv` for every table (written by
DataFrame writers; the single CSV part file is moved to its final name), `charts/*.png`,
`summary.json` and `summary.md`. Only small aggregates (throughput buckets, the per
subscription summary, audit rows of partitions with problems, totals) reach the driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.errors import UsageError
from runtime.host.files import atomic_write
from runtime.report import charts, gaps, summary, transforms
from runtime.report.sources import JournalFiles, find_journal_files

__all__ = ["JournalFiles", "find_journal_files", "report", "run_report", "spark_session"]

STEPS = 6
MAX_BUCKETS = 600
BUCKET_CHOICES_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000)

Progress = Callable[[str], None]


def choose_bucket_ms(span_ms: int) -> int:
    """The smallest bucket that keeps the throughput table under MAX_BUCKETS rows."""
    for bucket in BUCKET_CHOICES_MS:
        if span_ms // bucket < MAX_BUCKETS:
            return bucket
    return BUCKET_CHOICES_MS[-1] * (span_ms // (BUCKET_CHOICES_MS[-1] * MAX_BUCKETS) + 1)


def read_raw(spark: SparkSession, files: JournalFiles, *, per_record: bool = True) -> DataFrame:
    """The journal's lines, each tagged with its directory (`transforms.INSTANCE`), with
    one row per record (`transforms.one_row_per_record`), or with `per_record=False` one
    per event, a commit round's positions and a columnar event's deliveries apart
    (`transforms.one_row_per_event`)."""
    frames = []
    for directory in files.directories:
        paths = [str(p) for p in files.paths if p.parent == directory]
        if paths:
            frames.append(transforms.with_instance(
                spark.read.schema(transforms.event_schema())
                .option("mode", "PERMISSIVE")
                .option("columnNameOfCorruptRecord", transforms.CORRUPT)
                .json(paths), str(directory)))
    raw = reduce(DataFrame.unionByName, frames)
    if per_record:
        return transforms.one_row_per_record(raw)
    return transforms.one_row_per_event(raw)


class _Cache:
    """The frames this report cached, so it can unpersist them (and only them) at the end:
    the session may be the caller's."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []

    def keep(self, df: DataFrame) -> DataFrame:
        self._frames.append(df.cache())
        return self._frames[-1]

    def release(self) -> None:
        for df in self._frames:
            df.unpersist()
        self._frames.clear()


class _Output:
    """Writes tables as Parquet and one-file CSV, keeping them cached for the summary."""

    def __init__(self, out_dir: Path, cache: _Cache) -> None:
        self.dir = out_dir
        self.cache = cache
        self.tables: list[str] = []
        self.charts: list[str] = []
        for sub in ("parquet", "csv", "charts"):
            (out_dir / sub).mkdir(parents=True, exist_ok=True)

    def table(self, name: str, df: DataFrame) -> DataFrame:
        df = self.cache.keep(df)
        # Tables are aggregates: one file each is easier to hand around than 200 tiny ones.
        df.coalesce(1).write.mode("overwrite").parquet(str(self.dir / "parquet" / name))
        self._csv(name, df)
        self.tables.append(name)
        return df

    def _csv(self, name: str, df: DataFrame) -> None:
        staging = self.dir / "csv" / f".{name}.staging"
        flat = _csv_ready(df)
        # RFC 4180 quoting, as the fast path's csv module writes it: Spark's default
        # escapes a quote with a backslash, which CSV readers take apart (answer snippets
        # are often JSON, issue 36)
        flat.coalesce(1).write.mode("overwrite").option("header", True) \
            .option("escape", '"').csv(str(staging))
        target = self.dir / "csv" / f"{name}.csv"
        parts = sorted(staging.glob("part-*.csv"))
        if parts:
            os.replace(parts[0], target)
        else:  # an empty table may come without a part file
            target.write_text(",".join(flat.columns) + "\n")
        shutil.rmtree(staging)

    def chart(self, name: str) -> Path:
        self.charts.append(f"charts/{name}")
        return self.dir / "charts" / name


def _csv_ready(df: DataFrame) -> DataFrame:
    """CSV has no arrays: offsets lists become space-separated strings."""
    arrays = [f.name for f in df.schema.fields if f.dataType.typeName() == "array"]
    return df.withColumns({
        name: F.concat_ws(" ", F.col(name).cast("array<string>")) for name in arrays
    })


class Steps:
    """Numbered progress lines with the time each step took: `[2/6] what ... result (1.2 s)`
    (the report's steps, and the batch job's)."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress, self._total = progress, total
        self._done = 0
        self._since = time.perf_counter()

    def done(self, line: str) -> None:
        now = time.perf_counter()
        self._done += 1
        self._progress(f"[{self._done}/{self._total}] {line} ({now - self._since:.1f} s)")
        self._since = now


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in df.collect()]


def run_report(
    spark: SparkSession,
    files: JournalFiles,
    out_dir: Path,
    *,
    progress: Progress = print,
    chart_note: str = "",
) -> dict[str, Any]:
    """Run every step; return summary.json's content. UsageError if there are no events."""
    steps, cache = Steps(progress, STEPS), _Cache()
    try:
        raw = cache.keep(read_raw(spark, files))
        ok = transforms.is_valid_event()
        stats = raw.agg(
            F.count(F.lit(1)).alias("lines"), F.count(F.when(ok, 1)).alias("events"),
            F.min(F.when(ok, F.col("ts_ms"))).alias("first"),
            F.max(F.when(ok, F.col("ts_ms"))).alias("last"),
        ).first()
        if stats is None or stats["events"] == 0:
            raise UsageError(f"journal {files.label} has no events")
        malformed = stats["lines"] - stats["events"]
        steps.done(f"reading journal {files.label} ... {stats['events']:,} events "
                   f"({len(files.closed)} closed segment(s), {len(files.recovered_tails)} "
                   f"recovered tail(s), {malformed} malformed line(s) skipped)")
        out = _Output(out_dir, cache)
        facts = _steps(out, transforms.valid_events(raw), (stats["first"], stats["last"]),
                       steps, chart_note)
    finally:
        cache.release()
    result = summary.build_summary(
        journal=files.label, segments=files.counts(), events=stats["events"],
        malformed_lines=malformed, time_range=(stats["first"], stats["last"]),
        outputs={"tables": out.tables, "charts": out.charts},
        skipped_segments=files.skipped(), **facts,
    )
    (out_dir / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_dir / "summary.md").write_text(summary.render_markdown(result))
    steps.done(f"charts and summary ... {out_dir / 'summary.md'}")
    return result


def _steps(
    out: _Output, events: DataFrame, time_range: tuple[int, int], steps: Steps, note: str,
) -> dict[str, Any]:
    gap = gaps.journal_gap(events)
    records = out.cache.keep(transforms.record_outcomes(events, gap))
    subs = _rows(out.table("delivery_summary", transforms.delivery_summary(records, events)))
    steps.done(f"delivery summary ... {len(subs)} subscription/endpoint row(s)")

    bucket_ms = choose_bucket_ms(time_range[1] - time_range[0])
    buckets = _rows(out.table("throughput", transforms.throughput(events, bucket_ms)))
    steps.done(f"throughput and error rate ... {len(buckets)} row(s) of "
               f"{bucket_ms / 1000:g} s buckets")

    actors = out.table("actors", transforms.actor_lifecycle(events)).count()
    moves = out.table("partition_movements", transforms.partition_movements(events)).count()
    out.table("delay_lateness", transforms.delay_lateness(events))
    counts = {r["type"]: (r["events"], r["count_sum"])
              for r in _rows(transforms.event_counts(events))}
    steps.done(f"actors and partitions ... {actors} actor(s), "
               f"{counts.get('actor_restarted', (0, 0))[0]} restart(s), {moves} "
               "partition/actor row(s)")

    commits = transforms.committed_offsets(events)
    audit = out.table("audit", transforms.audit(records, commits))
    out.table("audit_offsets", transforms.audit_offsets(records, commits))
    dead = _rows(out.table("dead_letters", transforms.dead_letters(events)))
    replays = _rows(out.table("replays", transforms.replays(events)))
    instances = _rows(out.table("instances", transforms.instances(events)))
    totals = _rows(transforms.totals(records))[0]
    problems = _rows(audit.filter((F.col("lost") > 0) | (F.col("duplicates") > 0)
                                  | (F.col("unknown") > 0)))
    steps.done(f"audit ... lost {totals['lost']:,}, unknown (journal gap) "
               f"{totals['unknown']:,}, duplicates "
               f"{totals['duplicates']:,}, dead-lettered {totals['dead_lettered']:,}")

    charts.throughput_chart(buckets, out.chart("throughput.png"), note)
    charts.error_rate_chart(buckets, out.chart("error_rate.png"), note)
    charts.latency_chart(subs, out.chart("latency.png"), note)
    return {
        "bucket_ms": bucket_ms, "totals": totals, "event_counts": counts,
        "subscriptions": subs, "audit_rows": problems, "dead_letters": dead,
        "replays": replays, "instances": instances,
        "gap": None if gap is None else dataclasses.asdict(gap),
    }


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") or (java_home and Path(java_home, "bin", "java").exists()):
        return
    raise UsageError("the report runs PySpark, which needs Java 17+: install a JRE or set "
                     "JAVA_HOME")


# Spark's own log lines (its default profile logs WARN and up to stderr, from the first
# line on: hostname, native-hadoop, streaming "falling behind") interleave with the
# report's progress lines on a terminal. The driver JVM gets this configuration through
# log4j2's environment variable, unless the user configured log4j2 or Spark themselves.
LOG4J2_ENV = "LOG4J_CONFIGURATION_FILE"
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} spark %p %c{1}: %m%n%ex
# PySpark's JVM sets the root level from this logger's ("Setting default log level")
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = error
"""


def quiet_spark_logs() -> None:
    """Errors only from the driver JVM about to start (see LOG4J2_PROPERTIES)."""
    if LOG4J2_ENV in os.environ or "SPARK_CONF_DIR" in os.environ:
        return
    path = Path(tempfile.gettempdir()) / f"hookstream-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != LOG4J2_PROPERTIES:
        atomic_write(path, LOG4J2_PROPERTIES.encode())
    os.environ[LOG4J2_ENV] = str(path)


# A report is a short job: the driver JVM lives seconds. C2 compilations then compete
# with the tasks for the cores (C1 alone halved a report on 2 cores, bench/RESULTS.md,
# "Report: fast path"), and the serial collector starts faster than G1 on a small heap.
# Used for local masters (the driver runs the tasks) unless `--java-options` says else.
SHORT_JOB_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"


NO_CALL_SITES = ("spark.python.sql.dataFrameDebugging.enabled", "false")
"""PySpark's call sites off: with them on, every Column function the report calls (some
thousands a report) captures the Python stack (`inspect.stack()`) and makes four or five
py4j round trips to name it in the JVM (the active session, the origin object, a conf read,
set, clear), for error messages only. Off, a failed query says less about which line of
the report built it; results are the same."""


def spark_session(master: str, java_options: str | None = None) -> tuple[SparkSession, bool]:
    """An active session in this process is reused (and not stopped); else a new one.
    `java_options` for the driver JVM: None means SHORT_JOB_JAVA_OPTIONS on a local
    master, nothing on a cluster."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    quiet_spark_logs()
    builder = (
        SparkSession.builder.master(master)
        .appName("hookstream-report")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(*NO_CALL_SITES)
    )
    local = master.startswith("local")
    if local:
        # The default 200 shuffle partitions suit clusters; on one machine their task
        # overhead doubled the report's time (bench/report.py). A few per core suffice.
        builder = builder.config("spark.sql.shuffle.partitions", str(4 * (os.cpu_count() or 1)))
    if java_options is None:
        java_options = SHORT_JOB_JAVA_OPTIONS if local else ""
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    return builder.getOrCreate(), True


def report(journal_dirs: Path | Sequence[Path], out_dir: Path, *, master: str,
           progress: Progress = print, chart_note: str = "") -> dict[str, Any]:
    """Check the input before Spark starts (it takes seconds), then run the report."""
    files = find_journal_files(journal_dirs)
    check_java()
    progress(f"starting Spark ({master}) ...")
    spark, owned = spark_session(master)
    try:
        return run_report(spark, files, out_dir, progress=progress, chart_note=chart_note)
    finally:
        if owned:
            spark.stop()
