"""Health a stuck endpoint cannot hide: lag grows with every fetch while nothing finishes,
the oldest pending record ages, and everything is delivered once the endpoint answers."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime.host.app import Runtime
from tests import waits
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.integration


def series(runtime: Runtime, name: str, topic: str) -> float | None:
    match = re.search(rf'^{name}{{[^}}]*topic="{re.escape(topic)}"[^}}]*}} (\S+)$',
                      runtime.metrics.render(), re.MULTILINE)
    return float(match.group(1)) if match else None


async def wait_series(runtime: Runtime, name: str, topic: str, expected: float,
                      timeout_s: float = 20) -> None:
    # metrics have no change event: poll them
    await waits.until(lambda: series(runtime, name, topic) == expected, timeout_s=timeout_s,
                      poll_s=0.1, what=f"{name} of {topic} is {expected}")


@contextlib.asynccontextmanager
async def hung_endpoint(bootstrap: str, tmp_path: Path, **extra: Any,
                        ) -> AsyncIterator[tuple[Receiver, Runtime, asyncio.Event]]:
    """A receiver that answers nothing until the event is set, and a runtime pushing to
    it; both stopped at the end (the event set first, so nothing waits)."""
    release = asyncio.Event()

    async def hangs(push: Push) -> int:
        await release.wait()
        return 200

    receiver = await Receiver(hangs).start()
    runtime = make_runtime(bootstrap, tmp_path, **extra)
    await runtime.start()
    try:
        yield receiver, runtime, release
    finally:
        release.set()
        await runtime.stop()
        await receiver.stop()


async def test_lag_grows_while_the_endpoint_hangs_and_falls_to_zero_after(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    async with hung_endpoint(kafka_bootstrap, tmp_path) as (receiver, runtime, release):
        sub = subscription("lag", [{"name": topic, "config": {"concurrencyFactor": 2}}],
                           receiver.url, fast_group=fast_group_kwargs)
        await Admin(runtime).subscribe(sub)
        await produce(kafka_bootstrap, topic, 5)
        await wait_series(runtime, "hookstream_lag", topic, 5)
        await produce(kafka_bootstrap, topic, 20, start=5)
        await wait_series(runtime, "hookstream_lag", topic, 25)  # nothing finished meanwhile
        assert len(receiver.ok) == 0
        release.set()
        await receiver.wait_for(lambda: len(receiver.delivered()) == 25)
        await wait_series(runtime, "hookstream_lag", topic, 0)


async def until_stalled(admin: Admin) -> dict[str, Any]:
    """`/readyz` once it is 503 naming a stall (the watchdog looks on commit ticks)."""
    async def stall_named() -> dict[str, Any] | None:
        status, ready = await admin.call("GET", "/readyz")
        stalled = status == 503 and any("stalled" in r for r in ready["reasons"])
        return dict(ready) if stalled else None

    return await waits.until(stall_named, timeout_s=10, what="/readyz names a stall",
                             poll_s=0.1)


async def test_a_stuck_partition_is_reported_stalled_in_readyz_and_the_journal(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    async with hung_endpoint(kafka_bootstrap, tmp_path, delivery={"stall_after_ms": 1000},
                             ) as (receiver, runtime, release):
        admin = Admin(runtime)
        await admin.subscribe(subscription("stall", [{"name": topic}], receiver.url,
                                           fast_group=fast_group_kwargs))
        await produce(kafka_bootstrap, topic, 3)
        ready = await until_stalled(admin)
        assert [r for r in ready["reasons"] if f"{topic}-0 stalled" in r]
        _, one = await admin.call("GET", "/broker/subscription/stall/g-stall")
        assert one["data"]["status"]["partitions"][0]["stalled_for_ms"] >= 1000
        release.set()
        await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
    journal = "".join(p.read_text() for p in (tmp_path / "journal").glob("*.jsonl"))
    assert '"type":"stalled"' in journal


@pytest.mark.parametrize("pinned", [False, True], ids=["cursor", "pinned-partitions"])
async def test_lag_keeps_growing_while_the_fetch_is_paused_and_readyz_names_it(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], pinned: bool) -> None:
    """Issue 25, item 3: the endpoint hangs, the cursor's buffer fills, the partition's
    fetch pauses; records that arrive meanwhile still count in `lag` (status API and
    `hookstream_lag`) and in the stall reason of `/readyz`. A subscription that names
    its `partitions` reads them with its own consumer: the same holds there."""
    topic = await topic_factory(partitions=1)
    async with hung_endpoint(kafka_bootstrap, tmp_path, delivery={"stall_after_ms": 1000},
                             ) as (receiver, runtime, release):
        admin = Admin(runtime)
        config = {"concurrencyFactor": 2, "loadFactor": 5}  # paused at 10 buffered
        spec = {"name": topic, "config": config,
                **({"partitions": [{"number": 0}]} if pinned else {})}
        await admin.subscribe(subscription("frozen", [spec], receiver.url,
                                           fast_group=fast_group_kwargs))
        await produce(kafka_bootstrap, topic, 50)
        await wait_series(runtime, "hookstream_lag", topic, 50)
        await produce(kafka_bootstrap, topic, 2000, start=50)  # the fetch is paused now
        await wait_series(runtime, "hookstream_lag", topic, 2050)
        _, one = await admin.call("GET", "/broker/subscription/frozen/g-frozen")
        partition = one["data"]["status"]["partitions"][0]
        assert (partition["highwater"], partition["lag"], partition["paused"]) == (
            2050, 2050, True)
        assert len(receiver.pushes) == 2  # the window: nothing else was sent
        ready = await until_stalled(admin)
        assert [r for r in ready["reasons"] if f"{topic}-0 stalled" in r and "lag 2050" in r]
        release.set()
        await receiver.wait_for(lambda: len(receiver.delivered()) == 2050)
        await wait_series(runtime, "hookstream_lag", topic, 0)
