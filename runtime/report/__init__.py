"""`python -m runtime report JOURNAL_DIR --out OUT_DIR [--master URL]`: the PySpark report.

Turns a journal directory (runtime/host/journal.py) into per subscription and endpoint
delivery counts and latency percentiles, throughput and error rate over time, actor
restarts and partition movements, and an audit of lost and duplicated offsets per
topic-partition: Parquet and CSV tables, PNG charts, summary.md and summary.json.
Definitions: runtime/report/transforms.py; files and layout: runtime/report/job.py.

PySpark, matplotlib and Java are imported or looked for only when the report runs, so the
rest of the runtime works without the `spark` extra.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from runtime.errors import UsageError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime report",
        description="Delivery report and loss/duplicate audit of a hookstream journal.",
    )
    parser.add_argument("journal_dir", type=Path, help="the journal directory ([journal] dir)")
    parser.add_argument("--out", type=Path, required=True, help="directory for the report")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    return parser


def main(argv: list[str]) -> int:
    """Run the report; 0 on success, 2 with a one-line error for bad input or setup."""
    args = _parser().parse_args(argv)
    # PySpark 4.x warns about pandas 3 on import; the report does not use pandas.
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    try:
        from runtime.report import job
    except ImportError as exc:
        print(f"error: the report needs PySpark and matplotlib ({exc.name} is missing); "
              "install them with: pip install 'hookstream[spark]'", file=sys.stderr)
        return 2
    try:
        result = job.report(args.journal_dir, args.out, master=args.master,
                            progress=lambda line: print(line, flush=True))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"delivered {result['delivered']:,}, lost {result['lost']:,}, duplicates "
          f"{result['duplicates']:,}, dead-lettered {result['dead_lettered']:,}")
    return 0
