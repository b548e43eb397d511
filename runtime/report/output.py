"""Writing a report from the driver: tables as Parquet and CSV, charts, summary.json/.md.

The tables are small aggregates already on the driver (runtime/report/tables.py), so they
are written with pyarrow and the csv module instead of one Spark job per file; the layout
is the reference path's (runtime/report/job.py): `parquet/<table>/part-00000.parquet`
(a directory Spark reads as a table), `csv/<table>.csv` (lists of offsets space-separated,
RFC 4180 quoting), `charts/*.png`, `summary.json`, `summary.md`. Every file is replaced
atomically, so the follow job can rewrite a report that someone is reading.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from runtime.host.files import atomic_write
from runtime.report import charts, summary
from runtime.report.tables import Report, Row, Table

ARROW_TYPES: Mapping[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "double": pa.float64(), "bool": pa.bool_(),
    "longs": pa.list_(pa.int64()),
}
CHARTS = ("throughput.png", "error_rate.png", "latency.png")
Chart = Callable[[Sequence[Mapping[str, Any]], Path, str], Path]


def table_bytes(table: Table) -> bytes:
    """The table as one Parquet file."""
    schema = pa.schema([(name, ARROW_TYPES[kind]) for name, kind in table.columns])
    arrays = {name: [row[name] for row in table.rows] for name, _ in table.columns}
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pydict(arrays, schema=schema), buffer)
    return buffer.getvalue()


def csv_text(table: Table) -> str:
    """Header, then one line per row; null is empty, lists are space-separated."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([name for name, _ in table.columns])
    for row in table.rows:
        writer.writerow([_csv_cell(row[name], kind) for name, kind in table.columns])
    return buffer.getvalue()


def _csv_cell(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if kind == "longs":
        return " ".join(str(v) for v in value)
    if kind == "bool":
        return "true" if value else "false"
    return str(value)


def write_table(out_dir: Path, table: Table) -> None:
    directory = out_dir / "parquet" / table.name
    directory.mkdir(parents=True, exist_ok=True)
    (out_dir / "csv").mkdir(exist_ok=True)
    atomic_write(directory / "part-00000.parquet", table_bytes(table))
    atomic_write(out_dir / "csv" / f"{table.name}.csv", csv_text(table).encode())


def _chart(draw: Chart, rows: Sequence[Mapping[str, Any]], target: Path, note: str) -> None:
    temp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.png")
    try:
        draw(rows, temp, note)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def write_charts(out_dir: Path, report: Report, note: str) -> list[str]:
    directory = out_dir / "charts"
    directory.mkdir(parents=True, exist_ok=True)
    buckets = report.table("throughput").rows
    drawn: list[tuple[Chart, Sequence[Row], str]] = [
        (charts.throughput_chart, buckets, CHARTS[0]),
        (charts.error_rate_chart, buckets, CHARTS[1]),
        (charts.latency_chart, report.subscriptions, CHARTS[2]),
    ]
    for draw, rows, name in drawn:
        _chart(draw, rows, directory / name, note)
    return [f"charts/{name}" for name in CHARTS]


def summary_of(report: Report, *, journal: str, segments: Mapping[str, int], bucket_ms: int,
               outputs: Mapping[str, Sequence[str]],
               skipped_segments: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """summary.json's content (runtime/report/summary.py), plus `report.extra`."""
    result = summary.build_summary(
        journal=journal, segments=segments, events=report.events,
        malformed_lines=report.malformed, time_range=report.time_range, bucket_ms=bucket_ms,
        totals=report.totals, event_counts=report.event_counts,
        subscriptions=report.subscriptions, audit_rows=report.audit_rows, outputs=outputs,
        dead_letters=report.table("dead_letters").rows, replays=report.table("replays").rows,
        instances=report.table("instances").rows, gap=report.gap,
        skipped_segments=skipped_segments,
    )
    return result | report.extra


def write_report(out_dir: Path, report: Report, *, journal: str,
                 segments: Mapping[str, int], bucket_ms: int,
                 chart_note: str = "") -> dict[str, Any]:
    """Write every table, the charts and the summary; return summary.json's content."""
    for table in report.tables:
        write_table(out_dir, table)
    drawn = write_charts(out_dir, report, chart_note)
    outputs = {"tables": [t.name for t in report.tables], "charts": drawn}
    result = summary_of(report, journal=journal, segments=segments, bucket_ms=bucket_ms,
                        outputs=outputs)
    write_summary(out_dir, result)
    return result


def write_summary(out_dir: Path, result: Mapping[str, Any]) -> None:
    atomic_write(out_dir / "summary.json", (json.dumps(result, indent=2) + "\n").encode())
    atomic_write(out_dir / "summary.md", summary.render_markdown(result).encode())
