"""`hookstream report JOURNAL_DIR... [--out OUT_DIR] [--master URL]`: the PySpark report
(`python -m runtime report` is the same).

Turns one or more journal directories (runtime/host/journal.py; one per runtime instance,
read as one journal) into per subscription and endpoint delivery counts and latency
percentiles, throughput and error rate over time, actor restarts and partition movements,
and an audit of lost and duplicated offsets per topic-partition: Parquet and CSV tables,
PNG charts, summary.md and summary.json.

- default: the fast batch report (runtime/report/batch.py);
- `--store DIR`: first convert the closed segments not yet converted into a Parquet store
  (runtime/report/store.py), then report from it: repeated reports skip the JSON parsing;
- `--follow`: the live audit (runtime/report/follow.py), until Ctrl-C;
- `--engine reference`: the reference path (runtime/report/job.py), the definitions in
  runtime/report/transforms.py, one Spark job per table; kept to check the fast path.

PySpark, matplotlib and Java are imported or looked for only when the report runs, so the
rest of the runtime works without the `spark` extra.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.errors import UsageError

DEFAULT_GRACE_S = 300.0
DEFAULT_OUT = Path("report")  # in the working directory; the repository ignores /report/
DEFAULT_REFRESH_S = 5.0
MAX_REFRESH_S = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookstream report",
        description="Delivery report and loss/duplicate audit of a hookstream journal.",
    )
    parser.add_argument("journal_dirs", type=Path, nargs="+", metavar="JOURNAL_DIR",
                        help="journal directories ([journal] dir), one per instance, or a "
                             "quoted pattern such as 'journals/*'")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"directory for the report (default ./{DEFAULT_OUT})")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--java-options", default=None, metavar="OPTIONS",
                        help="the driver JVM's options (default on a local master: "
                             "options for short jobs, see README; '' for none)")
    parser.add_argument("--store", type=Path,
                        help="Parquet store of the journal: convert new segments, read from "
                             "there (default with --follow: OUT/store)")
    parser.add_argument("--engine", choices=("fast", "reference"), default="fast",
                        help="fast (default) or the reference path, one job per table")
    parser.add_argument("--follow", action="store_true",
                        help="keep the report up to date as segments close, until Ctrl-C")
    parser.add_argument("--grace-s", type=float, default=DEFAULT_GRACE_S,
                        help="--follow: an open record is lost this long after its last "
                             "fetch, measured on the newest event (default 300)")
    parser.add_argument("--refresh-s", type=float, default=DEFAULT_REFRESH_S,
                        help=f"--follow: rewrite the report this often (at most "
                             f"{MAX_REFRESH_S:g}, default {DEFAULT_REFRESH_S:g})")
    return parser


def _check(args: argparse.Namespace) -> None:
    if args.engine == "reference" and (args.follow or args.store):
        raise UsageError("--engine reference reads the JSON journal only (no --store, "
                         "no --follow)")
    if not 0 < args.refresh_s <= MAX_REFRESH_S:
        raise UsageError(f"--refresh-s must be in (0, {MAX_REFRESH_S:g}]")
    if args.grace_s < 0:
        raise UsageError("--grace-s must not be negative")


def _run(args: argparse.Namespace) -> dict[str, Any]:
    from runtime.report import batch, follow, job, sources
    from runtime.report.store import Store

    progress = print_flush
    if args.follow:
        job.check_java()
        options = follow.FollowOptions(
            out_dir=args.out, store=Store(args.store or args.out / "store"),
            grace_ms=round(args.grace_s * 1000), refresh_s=args.refresh_s)
        spark, owned = _start_spark(args, progress)
        try:
            return follow.run(spark, args.journal_dirs, options, progress)
        finally:
            if owned:
                spark.stop()
    if args.engine == "reference":
        return job.report(args.journal_dirs, args.out, master=args.master, progress=progress)
    files = sources.find_journal_files(args.journal_dirs)
    job.check_java()
    spark, owned = _start_spark(args, progress)
    try:
        store = Store(args.store) if args.store else None
        return batch.run_report(spark, files, args.out, store=store, progress=progress)
    finally:
        if owned:
            spark.stop()


def _start_spark(args: argparse.Namespace, progress: Callable[[str], None]) -> tuple[Any, bool]:
    from runtime.report import job

    progress(f"starting Spark ({args.master}) ...")
    started = time.perf_counter()
    spark, owned = job.spark_session(args.master, args.java_options)
    progress(f"Spark ready ({time.perf_counter() - started:.1f} s)")
    return spark, owned


def print_flush(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    """Run the report; 0 on success, 2 with a one-line error for bad input or setup."""
    args = _parser().parse_args(argv)
    # PySpark 4.x warns about pandas 3 on import; the report does not use pandas.
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    try:
        _check(args)
        import matplotlib  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        print(f"error: the report needs PySpark and matplotlib ({exc.name} is missing); "
              "install them with: pip install 'hookstream[spark]'", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = _run(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from runtime.report.summary import console_lines

    print(f"delivered {result['delivered']:,}, lost {result['lost']:,}, duplicates "
          f"{result['duplicates']:,}, dead-lettered {result['dead_lettered']:,}")
    for line in console_lines(result, str(args.out)):
        print(line)
    return 0
