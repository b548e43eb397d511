"""A 2xx to a subscribe means the subscription survives kill -9: subscribes posted 8 at a
time, the process killed (SIGKILL) the moment the n-th answer arrives, the others still
in flight; after a restart every subscription that was answered 200 is there (issue 32:
the file's batches are taken by the writer thread and answered in one loop callback)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
import pytest

from runtime.kafka.broker import free_port
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import subscription
from tests.integration.processes import admin, kill, start_process, terminate, write_config

pytestmark = pytest.mark.integration
POSTED = 80
IN_FLIGHT = 8


@pytest.mark.parametrize("killed_after", [1, 40])
async def test_every_subscribe_answered_200_is_there_after_a_kill_9_right_after_it(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        killed_after: int) -> None:
    topic = await topic_factory(partitions=2)
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, port)
    process = await start_process(config, port)
    answered: list[str] = []
    try:
        url = f"http://127.0.0.1:{port}/broker/subscription"
        ids = iter(range(POSTED))

        async def client(session: aiohttp.ClientSession) -> None:
            for n in ids:
                sub = subscription(f"s{n}", [{"name": topic}], "http://127.0.0.1:9/hook")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.post(url, json=sub) as response:
                        if response.status == 200:
                            answered.append(sub["id"])
                            if len(answered) == killed_after:
                                process.kill()  # at once: the other posts are in flight

        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(client(session) for _ in range(IN_FLIGHT)))
        assert await kill(process) != 0  # it was killed, not stopped
        assert killed_after <= len(answered) < POSTED
        process = await start_process(config, port)
        status, listed = await admin(port, "GET", "/broker/subscription")
        assert status == 200
        assert set(answered) <= {s["id"] for s in listed["data"]}
        await terminate(process)
    finally:
        await kill(process)
