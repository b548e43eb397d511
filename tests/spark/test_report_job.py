"""The report job end to end on a synthetic journal: segments rotated by size and by age
plus a torn crash leftover in; Parquet, CSV, charts and summaries out. Also the CLI's
errors, which need no Spark.

The end-to-end run with real delivery actors is in test_report_end_to_end.py.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from runtime.errors import UsageError
from runtime.host.journal import Event, Journal, closed_segments
from runtime.kernel.clock import FakeClock
from runtime.report import charts, main, summary
from runtime.report.synthetic import SyntheticJournal
from tests.spark.conftest import SPARK

pytestmark = SPARK

WriteJournal = Callable[..., Journal]  # the `journal_writer` fixture (conftest.py)
LOST = ("orders-hook", 3, 11)
DUPLICATE = ("orders-hook", 0, 2)
REPLAYED = ("orders-hook", 0, 7)  # dead-lettered, then delivered by a replay
REPLAY_FAILED = ("audit-hook", 1, 27)  # dead-lettered, and a replay failed too
LEFTOVER_EVENTS = [
    Event(type="fetched", ts_ms=1_700_000_001_000 + i, subscription="late-hook", topic="t",
          partition=0, offset=i)
    for i in range(3)
]


@dataclass
class Run:
    journal: Path
    out: Path
    result: dict[str, Any]
    progress: list[str]
    journal_lines: int


@pytest.fixture(scope="module")
def run(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, journal_writer: WriteJournal
) -> Run:
    from runtime.report.job import find_journal_files, run_report

    base = tmp_path_factory.mktemp("report")
    journal_dir = base / "journal"
    synthetic = SyntheticJournal(
        records_per_partition=60, dead_letter_every=20, lost=frozenset({LOST}),
        duplicates=frozenset({DUPLICATE}), crash_partition=("audit-hook", 1),
        replayed=frozenset({REPLAYED}), replay_failed=frozenset({REPLAY_FAILED}),
    )
    events = list(synthetic.events())
    half = len(events) // 2
    # two runs of the service on one journal: the first one's segments close by age (30 s of
    # fake time per flush, 60 s max age), the second one's by size
    journal_writer(journal_dir, events[:half], flush_every=250, advance_ms=30_000,
                   max_segment_age_ms=60_000)
    journal_writer(journal_dir, events[half:], flush_every=250, max_segment_bytes=40_000)
    leftover = journal_dir / "segment-9999999999999-dead0000-000000.jsonl.open"
    leftover.write_bytes(msgspec.json.Encoder().encode_lines(LEFTOVER_EVENTS) + b'{"type":"fetc')
    lines = sum(len(p.read_bytes().splitlines()) for p in closed_segments(journal_dir))

    progress: list[str] = []
    result = run_report(spark, find_journal_files(journal_dir), base / "out",
                        progress=progress.append)
    return Run(journal_dir, base / "out", result, progress, lines)


def test_report_reads_every_closed_segment_and_the_recovered_tail(run: Run) -> None:
    segments = closed_segments(run.journal)
    writers = Counter(p.name.split("-")[2] for p in segments)
    assert len(writers) == 2 and min(writers.values()) >= 2  # rotated by age, then by size
    assert run.result["segments"] == {"closed": len(segments), "recovered_tails": 1,
                                      "skipped_live": 0}
    assert run.result["events"] == run.journal_lines + len(LEFTOVER_EVENTS)
    assert run.result["malformed_lines"] == 1  # the torn last line of the leftover
    assert run.progress[0].startswith("[1/6] reading journal ")
    assert f"... {run.result['events']:,} events" in run.progress[0]
    assert [line[:5] for line in run.progress] == [f"[{i}/6]" for i in range(1, 7)]


def test_summary_totals_name_the_known_faults(run: Run) -> None:
    result = json.loads((run.out / "summary.json").read_text())
    # the leftover's three fetched records were never delivered either
    assert (result["lost"], result["duplicates"]) == (1 + len(LEFTOVER_EVENTS), 1)
    assert result["dead_lettered"] == 2 * 4 * 3  # offsets 7, 27, 47 of every partition
    # the replayed dead letter was delivered in the end
    assert result["delivered"] == 2 * 4 * 60 - result["dead_lettered"] - 1 + 1
    assert (result["replayed"], result["replay_failed"]) == (1, 1)
    assert (result["actor_crashes"], result["actor_restarts"]) == (1, 1)
    lost = {(a["subscription"], a["partition"], tuple(a["lost_offsets"]))
            for a in result["audit"] if a["lost"]}
    assert lost == {("orders-hook", 3, (11,)), ("late-hook", 0, (0, 1, 2))}
    assert "| orders-hook | orders-3 | 11 | - | - |" in (run.out / "summary.md").read_text()


def test_every_table_is_written_as_parquet_and_csv(run: Run, spark: Any) -> None:
    tables = run.result["outputs"]["tables"]
    assert set(tables) >= {"delivery_summary", "throughput", "actors", "partition_movements",
                           "audit", "audit_offsets"}
    for name in tables:
        parquet = spark.read.parquet(str(run.out / "parquet" / name)).count()
        csv_lines = (run.out / "csv" / f"{name}.csv").read_text().splitlines()
        assert len(csv_lines) - 1 == parquet, name  # a header, then one line per row
    audit_csv = (run.out / "csv" / "audit_offsets.csv").read_text()
    assert "orders-hook,orders,3,11,lost" in audit_csv
    assert "orders-hook,orders,0,2,duplicate" in audit_csv


def test_dead_letters_are_listed_with_reason_attempts_and_replays(run: Run) -> None:
    rows = list(csv.DictReader((run.out / "csv" / "dead_letters.csv").open()))
    assert len(rows) == run.result["dead_lettered"] == 24
    assert {(r["subscription"], int(r["partition"]), int(r["offset"])) for r in rows} == {
        (sub, p, o) for sub in ("orders-hook", "audit-hook") for p in range(4)
        for o in (7, 27, 47)}
    assert {(r["reason"], r["status"], r["response"], r["attempts"], r["dead_lettered"])
            for r in rows} == {("retries exhausted", "500", '{"error": "ledger locked"}', "2",
                                "1")}
    replayed = {(r["subscription"], int(r["partition"]), int(r["offset"]))
                for r in rows if r["replayed"] != "0"}
    assert replayed == {REPLAYED}  # the failed replay delivered nothing
    assert [(r["replay_id"], r["subscription"], r["delivered"], r["failed"])
            for r in csv.DictReader((run.out / "csv" / "replays.csv").open())] == [
        ("r-0001", "audit-hook", "0", "1"), ("r-0001", "orders-hook", "1", "0")]
    markdown = (run.out / "summary.md").read_text()
    assert "## Dead letters" in markdown and "## Replays" in markdown
    assert ('| orders-hook | orders-0 | 7 | retries exhausted | 500 | {"error": "ledger locked"}'
            " | 2 | 1 |") in markdown
    assert "4 more: table `dead_letters` lists them all" in markdown  # 20 of 24 shown
    assert len(run.result["dead_letters"]) == 24


def test_charts_are_png_files(run: Run) -> None:
    assert run.result["outputs"]["charts"] == [
        "charts/throughput.png", "charts/error_rate.png", "charts/latency.png"]
    for chart in run.result["outputs"]["charts"]:
        data = (run.out / chart).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000


def test_missing_journal_directory_exits_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error: journal directory" in err and "does not exist" in err
    assert "Traceback" not in err


def test_empty_journal_directory_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "journal").mkdir()
    assert main([str(tmp_path / "journal"), "--out", str(tmp_path / "out")]) == 2
    assert "has no segments" in capsys.readouterr().err


def test_a_segment_held_by_a_live_writer_is_not_read(tmp_path: Path) -> None:
    from runtime.report.job import find_journal_files

    async def scenario() -> None:
        journal = Journal(tmp_path, clock=FakeClock())
        await journal.open()
        journal.emit(LEFTOVER_EVENTS[0])
        await journal.flush()
        with pytest.raises(UsageError, match="1 segment\\(s\\) still being written"):
            find_journal_files(tmp_path)
        await journal.stop()
        assert find_journal_files(tmp_path).closed == closed_segments(tmp_path)

    asyncio.run(scenario())


def _drawn(draw: Callable[..., Path], rows: list[dict[str, Any]], path: Path) -> Any:
    """Draw; return the figure (what a reader sees: its axes, texts and lines)."""
    from matplotlib.figure import Figure

    drawn: list[Figure] = []
    original = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        drawn.append(self)
        original(self, *args, **kwargs)

    Figure.savefig = keep  # type: ignore[method-assign]
    try:
        assert draw(rows, path).read_bytes().startswith(b"\x89PNG")
    finally:
        Figure.savefig = original  # type: ignore[method-assign]
    return drawn[0]


def _texts(figure: Any) -> list[str]:
    return [t.get_text() for ax in figure.axes for t in ax.texts]


def test_charts_without_rows_say_no_data(tmp_path: Path) -> None:
    for draw in (charts.throughput_chart, charts.error_rate_chart, charts.latency_chart):
        assert "no data" in _texts(_drawn(draw, [], tmp_path / f"{draw.__name__}.png"))


def test_charts_of_a_small_run_show_every_value_inside_the_frame(tmp_path: Path) -> None:
    one = {"bucket_start_ms": 0, "bucket_ms": 1000, "subscription": "s",
           "delivered_per_s": 0.0, "error_rate": None}
    # one bucket, nothing delivered, no attempt completed: no empty panel
    assert _texts(_drawn(charts.error_rate_chart, [one], tmp_path / "e.png")) == [
        "no data (no HTTP attempt completed)"]
    (ax,) = _drawn(charts.throughput_chart, [one], tmp_path / "t.png").axes
    (line,) = ax.get_lines()
    assert line.get_marker() == "o"  # a single point is drawn
    bottom, top = ax.get_ylim()
    left, right = ax.get_xlim()
    assert bottom < 0 < top and left < 0 < right  # not on the frame
    failing = [one | {"bucket_start_ms": i * 1000, "error_rate": 1.0} for i in range(3)]
    (ax,) = _drawn(charts.error_rate_chart, failing, tmp_path / "e2.png").axes
    assert ax.get_ylim()[1] > 100  # a 100 % error rate is not hidden on the top edge
    latency = [{"subscription": "s", "e2e_p50_ms": 3, "e2e_p95_ms": 5, "e2e_p99_ms": 9}]
    e2e, added = _drawn(charts.latency_chart, latency, tmp_path / "l.png").axes
    assert [t.get_text() for t in added.texts] == ["no data"]
    assert e2e.get_ylim()[1] > 9 and e2e.get_yscale() == "linear"
    assert [t.get_text() for t in e2e.texts] == ["3 ms", "5 ms", "9 ms"]
    assert e2e.get_ylabel() == "latency (ms)" and e2e.get_xlabel() == "subscription"


def test_a_p99_three_orders_above_the_p50_is_drawn_on_a_log_scale_with_values(
        tmp_path: Path) -> None:
    latency = [{"subscription": "s", "e2e_p50_ms": 2.5, "e2e_p95_ms": 40, "e2e_p99_ms": 4200,
                "added_p50_ms": 0.4, "added_p95_ms": 0.9, "added_p99_ms": 1.1}]
    e2e, added = _drawn(charts.latency_chart, latency, tmp_path / "l.png").axes
    assert e2e.get_yscale() == "log" and e2e.get_ylabel() == "latency (ms, log scale)"
    assert [t.get_text() for t in e2e.texts] == ["2.5 ms", "40 ms", "4.2 s"]
    bottom, top = e2e.get_ylim()
    assert bottom < 2.5 and top > 4200  # the smallest bar is visible, the largest inside
    assert added.get_yscale() == "linear"
    assert [t.get_text() for t in added.texts] == ["0.4 ms", "0.9 ms", "1.1 ms"]


def test_markdown_lists_offsets_and_says_how_many_more() -> None:
    audit_row = {"subscription": "s", "topic": "t", "partition": 0, "lost": 25,
                 "lost_committed_past": 0, "lost_offsets": list(range(25)), "duplicates": 0,
                 "duplicate_offsets": []}
    totals = dict.fromkeys(["delivered", "lost", "duplicates", "dead_lettered",
                            "records_fetched", "deliveries", "attempts", "failed_attempts",
                            "retries"], 0)
    result = summary.build_summary(
        journal="j", segments={"closed": 1, "recovered_tails": 0, "skipped_live": 0},
        events=1, malformed_lines=0, time_range=(0, 1000), bucket_ms=1000, totals=totals,
        event_counts={"journal_dropped": (1, 7)}, subscriptions=[], audit_rows=[audit_row],
        outputs={},
    )
    text = summary.render_markdown(result)
    assert "| s | t-0 | 0, 1, 2" in text and "19 (+5 more) | - |" in text
    assert "The journal dropped 7 event(s)" in text


def test_a_journal_without_events_is_a_usage_error(spark: Any, tmp_path: Path) -> None:
    from runtime.report.job import find_journal_files, run_report

    (tmp_path / "segment-0000000000001-aaaa0000-000000.jsonl").write_text('{"type":"fe')
    with pytest.raises(UsageError, match="has no events"):
        run_report(spark, find_journal_files(tmp_path), tmp_path / "out", progress=print)
    assert not (tmp_path / "out").exists()


# -- the fast path (runtime/report/batch.py) against the reference path above ------------

def _same_outputs(reference: Path, fast: Path, *, ignore: set[str],
                  ignore_tables: frozenset[str] = frozenset()) -> None:
    """Equal summary.json (but `ignore`d keys), equal Parquet tables (types and rows in
    order), CSV files with equal headers and values.

    The tables are read with pyarrow, which writes them on both paths: a Spark read and
    collect of each cost about a second of the session's CPU, and that Spark reads them
    is what `test_every_table_is_written_as_parquet_and_csv` shows."""
    from pyarrow import parquet  # the report's own writer (runtime/report/output.py)

    expected = json.loads((reference / "summary.json").read_text())
    got = json.loads((fast / "summary.json").read_text())
    for key in {"generated_at", *ignore}:
        expected.pop(key), got.pop(key)
    assert got == expected
    for name in set(expected["outputs"]["tables"]) - ignore_tables:
        want = parquet.read_table(reference / "parquet" / name)
        have = parquet.read_table(fast / "parquet" / name)
        assert _types(have.schema) == _types(want.schema), name
        assert have.to_pylist() == want.to_pylist(), name
        assert _csv_cells(fast / "csv" / f"{name}.csv") == _csv_cells(
            reference / "csv" / f"{name}.csv"), name


def _types(schema: Any) -> list[tuple[str, str]]:
    """Each column's name and type, as Spark reads them: not the nullability (a list's
    elements are `not null` on the reference path's files, which Spark writes) or the
    writer's metadata."""
    return [(field.name, str(field.type).replace(" not null", "")) for field in schema]


def _csv_cells(path: Path) -> list[list[object]]:
    """CSV cells, numbers as floats: Spark writes 1.0E-4 where Python writes 0.0001."""
    def cell(text: str) -> object:
        try:
            return float(text)
        except ValueError:
            return text

    return [[cell(c) for c in row] for row in csv.reader(path.read_text().splitlines())]


def test_the_fast_path_writes_what_the_reference_path_writes(
    run: Run, spark: Any, tmp_path: Path
) -> None:
    from runtime.report import batch
    from runtime.report.job import find_journal_files

    progress: list[str] = []
    batch.run_report(spark, find_journal_files(run.journal), tmp_path / "fast",
                     progress=progress.append)
    _same_outputs(run.out, tmp_path / "fast", ignore=set())
    assert [line[:5] for line in progress] == [f"[{i}/5]" for i in range(1, 6)]


def test_the_fast_path_from_a_store_of_two_journal_directories_writes_the_same(
    run: Run, spark: Any, tmp_path: Path
) -> None:
    from runtime.report import batch
    from runtime.report.sources import find_journal_files
    from runtime.report.store import Store

    # the two writers of the fixture's journal, as two instances' directories
    first, second = tmp_path / "instance-a", tmp_path / "instance-b"
    writers = sorted({p.name.split("-")[2] for p in closed_segments(run.journal)})
    for directory in (first, second):
        directory.mkdir()
    for path in run.journal.iterdir():
        target = first if path.name.split("-")[2] == writers[0] else second
        shutil.copy2(path, target / path.name)
    files = find_journal_files([first, second])
    assert len(files.closed) == len(closed_segments(run.journal))
    assert len(files.recovered_tails) == 1

    store = Store(tmp_path / "store")
    result = batch.run_report(spark, files, tmp_path / "fast", store=store, progress=print)
    # one instance there, two here: everything but the instances is the same
    _same_outputs(run.out, tmp_path / "fast", ignore={"journal", "instances"},
                  ignore_tables=frozenset({"instances"}))
    assert result["journal"] == f"{first}, {second}"
    assert [r["instance"] for r in result["instances"]] == [str(first), str(second)]
    (whole,) = run.result["instances"]
    for name in ("events", "fetched", "delivered", "dead_lettered", "replayed"):
        assert sum(r[name] for r in result["instances"]) == whole[name], name
    assert (store.events / "_spark_metadata").is_dir()
    assert store.compacted() == {str(p) for p in files.closed}
    # a second report converts nothing new and reads the same store
    again = batch.run_report(spark, files, tmp_path / "again", store=store, progress=print)
    assert again["events"] == result["events"]
    with pytest.raises(UsageError, match="holds journal"):
        batch.run_report(spark, find_journal_files(first), tmp_path / "x", store=store)
    with store.writing(), pytest.raises(UsageError, match="being written by another"):
        batch.run_report(spark, files, tmp_path / "y", store=Store(store.root))


@pytest.mark.parametrize("arguments", [
    ["--engine", "reference", "--follow"],
    ["--engine", "reference", "--store", "s"],
    ["--follow", "--refresh-s", "11"],
    ["--follow", "--grace-s", "-1"],
])
def test_options_that_cannot_work_together_exit_2_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    assert main([str(tmp_path), "--out", str(tmp_path / "out"), *arguments]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_journal_directory_named_twice_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "j").mkdir()
    assert main([str(tmp_path / "j"), str(tmp_path / "j"), "--out", str(tmp_path / "o")]) == 2
    assert "named twice" in capsys.readouterr().err


def test_spark_logs_errors_only_unless_the_user_configured_logging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.report import job

    monkeypatch.delenv(job.LOG4J2_ENV, raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    job.quiet_spark_logs()
    config = Path(os.environ[job.LOG4J2_ENV]).read_text()
    assert "rootLogger.level = error" in config and "SYSTEM_ERR" in config
    monkeypatch.setenv(job.LOG4J2_ENV, "/etc/mine.properties")
    job.quiet_spark_logs()
    assert os.environ[job.LOG4J2_ENV] == "/etc/mine.properties"


def test_a_quoted_pattern_names_every_matching_journal_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.report.sources import journal_directories

    for name in ("b", "a", "c"):
        (tmp_path / name / "journal").mkdir(parents=True)
    (tmp_path / "d").mkdir()  # no journal inside: not matched
    assert journal_directories([tmp_path / "*" / "journal"]) == tuple(
        (tmp_path / name / "journal").resolve() for name in "abc")
    assert main([str(tmp_path / "*" / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no journal directory matches" in capsys.readouterr().err


def test_stdout_names_the_unreadable_line_and_lists_dead_letters_with_the_answer(
        run: Run) -> None:
    from runtime.report.summary import console_lines

    lines = console_lines(run.result, str(run.out))
    assert lines[0] == "skipped: 1 unreadable line (torn, not JSON, or without type or ts_ms)"
    assert not any("being written" in line for line in lines)  # no live writer held one
    assert lines[1] == f"dead letters (10 of 24; all in {run.out / 'csv' / 'dead_letters.csv'}):"
    assert lines[2] == ("  audit-hook orders/0/7: retries exhausted; last HTTP 500; answer: "
                        "'{\"error\": \"ledger locked\"}'")
    assert len(lines) == 2 + 10
