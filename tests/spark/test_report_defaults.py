"""A short report with no options but the master (issue 27): a few thousand events on
local[2], the default JVM options for short jobs, into the default output folder
(./report, which the repository ignores). How quick it is lives in bench/report_short.py:
a wall-clock budget here turned a correct checkout red on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.report.synthetic import SyntheticJournal
from tests.spark.conftest import WriteJournal, java_missing

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
HANG_S = 300  # bounds a hang; not a speed budget


def test_a_short_report_with_defaults_writes_charts_and_summary_into_report(
        journal_writer: WriteJournal, tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
    if java_missing():
        pytest.skip("Spark needs Java 17+ (no java on PATH and no JAVA_HOME)")
    events = list(SyntheticJournal(records_per_partition=250).events())
    assert 5_000 < len(events) < 10_000
    journal_writer(tmp_path / "journal", events, max_segment_bytes=200_000)
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "report", "journal", "--master", "local[2]"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=HANG_S, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert any(line.startswith("Spark ready") for line in done.stdout.splitlines()), output
    charts = sorted(p.name for p in (tmp_path / "report" / "charts").glob("*.png"))
    assert charts == ["error_rate.png", "latency.png", "throughput.png"]
    assert (tmp_path / "report" / "summary.md").exists()
