"""The added latency from one event per attempt (issue 35: fewer events): a `delivered` or
`failed` event carrying `fetched_ts_ms` gives it as `ts_ms - latency_ms - fetched_ts_ms`,
as a `sent` event (`ts_ms - fetched_ts_ms`) does in journals that have one. Both
engines agree."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from runtime.host.journal import Event
from tests.spark.conftest import write_journal

pytestmark = pytest.mark.spark
T0, TOPIC, URL = 1_700_000_000_000, "t", "http://h/x"


def attempts(sub: str, with_sent: bool) -> list[Event]:
    """Records 0-9 fetched at T0 and sent `offset` ms later (the added latency), answered
    4 ms after; record 9's first attempt failed and its retry does not count."""
    def event(kind: str, offset: int, ts_ms: int, **more: Any) -> Event:
        return Event(type=kind, ts_ms=ts_ms, subscription=sub, topic=TOPIC,  # type: ignore[arg-type]
                     partition=0, offset=offset, endpoint=URL, **more)

    events = []
    for offset in range(10):
        sent_at, first = T0 + offset, offset != 9
        fetched = {"fetched_ts_ms": T0}
        if with_sent:
            events.append(event("sent", offset, sent_at, attempt=1, **fetched))
        events.append(event("delivered" if first else "failed", offset, sent_at + 4,
                            attempt=1, latency_ms=4.0, status=200 if first else 500,
                            **({} if with_sent else fetched)))
        if not first:  # the retry, 100 ms later: policy, not overhead
            events.append(event("delivered", offset, sent_at + 104, attempt=2,
                                latency_ms=4.0, status=200, **({} if with_sent else fetched)))
    return events


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_the_added_latency_comes_from_the_attempt_events_without_sent(
        spark: Any, tmp_path: Path, engine: str) -> None:
    from runtime.report import main

    write_journal(tmp_path / "journal", attempts("one_g", False) + attempts("two_g", True))
    out = tmp_path / "report"
    assert main([str(tmp_path / "journal"), "--out", str(out), "--engine", engine]) == 0
    with (out / "csv" / "delivery_summary.csv").open() as rows:
        summary = {r["subscription"]: r for r in csv.DictReader(rows)}
    for sub in ("one_g", "two_g"):  # the same figures from either shape
        assert float(summary[sub]["added_max_ms"]) == 9
        assert float(summary[sub]["added_p50_ms"]) in (4, 5)
        assert int(summary[sub]["delivered"]) == 10
