"""End to end: a real delivery run (embedded broker, a failing receiver, a partition actor
killed mid-stream, dead letters), then the report: its totals equal what the receiver saw."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime.kernel.actor import Actor
from runtime.kernel.supervisor import Supervisor
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.spark
RECORDS, PARTITIONS = 400, 2


def poisoned(push: Push) -> bool:
    return push.offset % 50 == 7  # always fails: dead-lettered after its retries


async def test_report_totals_match_what_the_receiver_saw(
        spark: Any, kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    dlt = await topic_factory(prefix="dlt")
    await produce(kafka_bootstrap, topic, RECORDS, partitions=PARTITIONS)
    rng = random.Random(5)
    failed_once: set[tuple[int, int]] = set()

    async def flaky(push: Push) -> int:
        """Poisoned records always fail; a random 20% fail once, then succeed (so random
        failures never exhaust `retryBeforeCommit`)."""
        where = (push.partition, push.offset)
        if poisoned(push):
            return 500
        if where not in failed_once and rng.random() < 0.2:
            failed_once.add(where)
            return 500
        return 200

    receiver = await Receiver(flaky).start()
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        await Admin(runtime).subscribe(subscription(
            "rep", [{"name": topic, "config": {"concurrencyFactor": 8}}], receiver.url,
            fast_group=fast_group_kwargs, retryBeforeCommit=2, deadLetterTopic=dlt,
            delayOnErrorMs=5))
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 100)
        partition_actor(runtime.service("delivery").tree("rep_g-rep"), topic).kill("chaos")
        expected = RECORDS - RECORDS // 50
        await receiver.wait_for(lambda: len(receiver.delivered()) == expected, timeout_s=60)
        await wait_dead_lettered(runtime, RECORDS // 50)
    await receiver.stop()

    from runtime.report import main

    out = tmp_path / "report"
    assert main([str(tmp_path / "journal"), "--out", str(out)]) == 0
    totals = json.loads((out / "summary.json").read_text())
    oks = Counter((p.topic, p.partition, p.offset) for p in receiver.ok)
    assert totals["delivered"] == len(oks)
    assert totals["duplicates"] == sum(oks.values()) - len(oks)
    assert totals["lost"] == 0
    assert totals["dead_lettered"] == RECORDS // 50
    assert (out / "summary.md").exists()
    assert list((out / "charts").glob("*.png"))


def partition_actor(tree: Supervisor, topic: str) -> Actor:
    partitions = tree.child("partitions")
    assert isinstance(partitions, Supervisor)
    return partitions.child(f"{topic}-0")


async def wait_dead_lettered(runtime: Any, count: int) -> None:
    import asyncio

    text = ""
    for _ in range(100):
        text = runtime.metrics.render()
        total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("hookstream_dead_lettered_total{"))
        if total >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"dead letters did not reach {count}:\n{text}")
