"""The added latency from one event per attempt (issue 35: fewer events): a `delivered` or
`failed` event carrying `fetched_ts_ms` gives it as `ts_ms - latency_ms - fetched_ts_ms`,
as a `sent` event (`ts_ms - fetched_ts_ms`) does in journals that have one. Both
engines agree."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")

from tests.spark.reference_journal import SharedReports

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_the_added_latency_comes_from_the_attempt_events_without_sent(
        engine: str, shared_reports: Callable[[str], SharedReports]) -> None:
    # `one_g` has no `sent` events (the added latency from its attempts' `fetched_ts_ms`),
    # `two_g` has them (tests/spark/reference_journal.py, `attempts`); the report is shared
    # with two other files' journals
    rows = shared_reports(engine).per_record.csv("delivery_summary")
    summary = {r["subscription"]: r for r in rows}
    for sub in ("one_g", "two_g"):  # the same figures from either shape
        assert float(summary[sub]["added_max_ms"]) == 9
        assert float(summary[sub]["added_p50_ms"]) in (4, 5)
        assert int(summary[sub]["delivered"]) == 10
