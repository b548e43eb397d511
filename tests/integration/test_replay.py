"""Replaying dead letters once the endpoint is fixed: the same webhook-id and QOH-* headers
as the original delivery, plus QOH-Replay (real broker, runtime and receiver)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

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


async def _progress(admin: Admin, path: str) -> dict[str, Any]:
    for _ in range(300):
        status, body = await admin.call("GET", path)
        assert status == 200, body
        if body["data"]["state"] in ("done", "failed"):
            return dict(body["data"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"replay still running: {body}")


async def test_a_dead_letter_is_delivered_by_a_replay_with_its_original_webhook_id(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    broken = {"yes": True}

    async def receiver_behaviour(push: Push) -> int:
        return 500 if broken["yes"] and push.offset == 2 else 200

    receiver = await Receiver(receiver_behaviour).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "rp", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs,
                retryBeforeCommit=1, deadLetterTopic=dlt))
            await produce(kafka_bootstrap, topic, 5)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 4)
            first = [p for p in receiver.pushes if p.offset == 2]
            assert len(first) == 2  # the attempt and its one retry, then the dead letter
            for _ in range(100):
                _, one = await admin.call("GET", "/broker/subscription/rp/g-rp")
                if one["data"]["status"]["counters"]["dead_lettered"] == 1:
                    break
                await asyncio.sleep(0.1)
            broken["yes"] = False  # the endpoint is fixed
            status, body = await admin.call("POST", "/broker/subscription/rp/g-rp/replay",
                                            {"source": "deadLetter"})
            assert status == 202, body
            rid = body["data"]["replayId"]
            progress = await _progress(admin, f"/broker/subscription/rp/g-rp/replay/{rid}")
            assert (progress["state"], progress["delivered"], progress["failed"]) == (
                "done", 1, 0)
            [replayed] = [p for p in receiver.ok if p.offset == 2]
            assert replayed.headers["QOH-Replay"] == rid
            assert replayed.headers["webhook-id"] == first[0].headers["webhook-id"]
            assert replayed.headers["QOH-Topic"] == topic
            assert replayed.headers["QOH-Message-Number"] == "2"
            missing = await admin.call("GET", "/broker/subscription/rp/g-rp/replay/nope")
            assert missing[0] == 404
            bad = await admin.call("POST", "/broker/subscription/rp/g-rp/replay",
                                   {"source": "elsewhere"})
            assert bad[0] == 400
    finally:
        await receiver.stop()
