"""A short report is quick (issue 27): a few thousand events on local[2] are reported
within 10 s of Spark being ready, with the default JVM options for short jobs, into the
default output folder (./report, which the repository ignores)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.report.synthetic import SyntheticJournal
from tests.spark.conftest import WriteJournal, java_missing

ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 10.0


def test_a_few_thousand_events_are_reported_within_10_s_of_spark_being_ready(
        journal_writer: WriteJournal, tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
    if java_missing():
        pytest.skip("Spark needs Java 17+ (no java on PATH and no JAVA_HOME)")
    events = list(SyntheticJournal(records_per_partition=250).events())
    assert 5_000 < len(events) < 10_000
    journal_writer(tmp_path / "journal", events, max_segment_bytes=200_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "runtime", "report", "journal", "--master", "local[2]"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    ready_at = None
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Spark ready"):
                ready_at = time.monotonic()
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    took = time.monotonic() - (ready_at or 0)
    assert code == 0, "".join(lines)[-3000:]
    assert ready_at is not None, "".join(lines)
    assert took < BUDGET_S, f"{took:.1f} s after Spark was ready (load {os.getloadavg()})"
    charts = sorted(p.name for p in (tmp_path / "report" / "charts").glob("*.png"))
    assert charts == ["error_rate.png", "latency.png", "throughput.png"]
    assert (tmp_path / "report" / "summary.md").exists()
