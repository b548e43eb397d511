"""A short report with no options but the master (issue 27): a few thousand events on
local[2], into the default output folder (./report, which the repository ignores). It
runs in this process on the session's Spark, which the report reuses and leaves running
(`job.spark_session`); the command in a process of its own is tested end to end in
test_report_end_to_end.py. How quick a short report is lives in bench/report_short.py: a
wall-clock budget here turned a correct checkout red on a busy machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.report import main as report_main
from runtime.report.synthetic import SyntheticJournal
from tests.spark.conftest import SPARK, WriteJournal

pytestmark = SPARK


def test_a_short_report_with_defaults_writes_charts_and_summary_into_report(
        spark: Any, journal_writer: WriteJournal, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    events = list(SyntheticJournal(records_per_partition=250).events())
    assert 5_000 < len(events) < 10_000
    journal_writer(tmp_path / "journal", events, max_segment_bytes=200_000)
    monkeypatch.chdir(tmp_path)
    assert report_main(["journal", "--master", "local[2]"]) == 0, capsys.readouterr()
    assert "Spark ready" in capsys.readouterr().out
    charts = sorted(p.name for p in (tmp_path / "report" / "charts").glob("*.png"))
    assert charts == ["error_rate.png", "latency.png", "throughput.png"]
    assert (tmp_path / "report" / "summary.md").exists()
    assert not spark.sparkContext._jsc.sc().isStopped()  # the session's Spark still runs
