"""Issue 35, the burst: many subscriptions of one topic, a backlog landing on all of them
at once, with a journal buffer far smaller than the burst. The journal used to drop what
did not fit (14% of a 300-subscriber burst at the defaults, then reported as lost); now
it holds the actors instead. Scaled down for the suite, the burst still many times the
buffer: 60 subscriptions x 200 records (12,000 deliveries, some 3,600 journal lines at 0.3
a delivery) against a 200-event buffer, where the issue had 300 x 1,000 against 100,000
(and 2.2 journal lines per delivery). The journal drops nothing, it did fall behind
(`held`: where the old journal dropped), and the report counts every delivery, 0 lost.

`HOOKSTREAM_BURST=full` runs the issue's own scale at the journal's defaults (300 x 1,000
against 100,000; minutes on 2 cores, not for the suite): the cursors' batch `fetched`
events may then keep the buffer below its limit, so only 0 dropped and the exact report
are asserted."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from runtime.kafka import create_topics
from tests.integration.delivery_harness import Admin, Receiver, make_runtime, produce
from tests.integration.test_fanout import subscribe_many

FULL = os.environ.get("HOOKSTREAM_BURST") == "full"
pytestmark = [pytest.mark.spark, *([pytest.mark.timeout(2_400)] if FULL else [])]
# the scaled buffer shrank with the journal's lines per delivery (2.2 -> about 0.3 when
# deliveries became ranges, issue 35), so that the burst still overflows it
SUBSCRIBERS, RECORDS, BUFFER = (300, 1_000, 100_000) if FULL else (60, 200, 200)
PARTITIONS = 4


async def burst(bootstrap: str, base: Path) -> tuple[int, int, int]:
    """Deliver the backlog; return (receiver's 2xx answers, journal dropped, held)."""
    topic = f"burst-{uuid.uuid4().hex[:12]}"
    await create_topics(bootstrap, {topic: PARTITIONS})
    receiver = await Receiver().start()
    ids = [f"b{n}" for n in range(SUBSCRIBERS)]
    # In the suite no timed flush during the burst (the default is every 200 ms, kept by
    # FULL): the journal writes only when its buffer is full, so it falls behind and holds
    # the actors however fast or slow the machine delivers (with timed flushes a busy
    # machine's slower burst stayed below the buffer between two of them), and at the stop.
    journal = {"max_buffered_events": BUFFER, "flush_interval_ms": 200 if FULL else 600_000}
    try:
        async with make_runtime(bootstrap, base, journal=journal) as runtime:
            await subscribe_many(Admin(runtime), ids, topic, receiver.url, concurrency=8)
            await produce(bootstrap, topic, RECORDS, partitions=PARTITIONS)
            want = RECORDS * SUBSCRIBERS  # counted only once as many pushes came: a
            # predicate checked at each push must not walk them all (300,000 at FULL)
            await receiver.wait_for(
                lambda: len(receiver.ok) >= want and len(receiver.delivered()) == want,
                timeout_s=1_800 if FULL else 240)
        dropped, held = runtime.journal.dropped, getattr(runtime.journal, "held", 0)
    finally:
        await receiver.stop()
    return len(receiver.ok), dropped, held


def test_a_fan_out_burst_is_journaled_whole_and_the_report_is_exact(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    from runtime.report import main

    answered, dropped, held = asyncio.run(burst(kafka_bootstrap, tmp_path))
    assert dropped == 0
    assert held > 0 or FULL  # the burst overflowed the buffer: the journal held the actors
    out = tmp_path / "report"
    assert main([str(tmp_path / "journal"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["delivered"] == RECORDS * SUBSCRIBERS
    assert summary["records_fetched"] == RECORDS * SUBSCRIBERS
    assert summary["duplicates"] == answered - RECORDS * SUBSCRIBERS
    assert (summary["lost"], summary["unknown"], summary["journal_dropped"]) == (0, 0, 0)
