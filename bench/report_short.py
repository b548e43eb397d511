"""Benchmark: a short report is quick (issue 27's budget, moved here from the test suite).

    .venv/bin/python bench/report_short.py [--rounds 3] [--budget-s 10]

Writes a synthetic journal of a few thousand events (250 records per partition) and runs
`hookstream report journal --master local[2]` on it with the defaults, `--rounds` times,
each in a fresh process (its own JVM). Times everything after the child prints
"Spark ready" (reading, aggregating, tables, charts, summary) and says whether each round
kept `--budget-s`. Prints the load average before and after: a figure taken while tests
or other benchmarks run is not evidence. Exits 1 when a round missed the budget.

Bounded: a fixed journal, `--rounds` children, each with a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.host.journal import Journal
from runtime.kernel.clock import FakeClock
from runtime.report.synthetic import SyntheticJournal

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 300
FLUSH_EVERY = 1_000
SEGMENT_BYTES = 200_000


async def write_journal(directory: Path) -> int:
    journal = Journal(directory, clock=FakeClock(), max_segment_bytes=SEGMENT_BYTES)
    await journal.open()
    count = 0
    for count, event in enumerate(SyntheticJournal(records_per_partition=250).events(), 1):
        journal.emit(event)
        if count % FLUSH_EVERY == 0:
            await journal.flush()
    await journal.stop()
    return count


def one_report(workdir: Path) -> float:
    """Seconds from "Spark ready" to the child's exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "runtime", "report", "journal", "--master", "local[2]"],
        cwd=workdir, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    ready_at: float | None = None
    lines: list[str] = []
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Spark ready"):
                ready_at = time.monotonic()
        code = process.wait(timeout=CHILD_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if code != 0 or ready_at is None:
        raise SystemExit("report failed:\n" + "".join(lines)[-3000:])
    return time.monotonic() - ready_at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=10.0)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    missed = 0
    with tempfile.TemporaryDirectory(prefix="report-short-") as tmp:
        events = asyncio.run(write_journal(Path(tmp) / "journal"))
        print(f"{events} events")
        for round_ in range(1, args.rounds + 1):
            took = one_report(Path(tmp))
            verdict = "ok" if took <= args.budget_s else "OVER BUDGET"
            missed += took > args.budget_s
            print(f"round {round_}: {took:.1f} s after Spark was ready ({verdict}, "
                  f"budget {args.budget_s:g} s)")
    print(f"load average after: {os.getloadavg()}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
