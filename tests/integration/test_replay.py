"""Replaying dead letters once the endpoint is fixed: the same webhook-id and QOH-* headers
as the original delivery, plus QOH-Replay (real broker, runtime and receiver)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

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


async def _progress(admin: Admin, path: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        status, body = await admin.call("GET", path)
        assert status == 200, body
        return dict(body["data"]) if body["data"]["state"] in ("done", "failed") else None

    return await waits.until(finished, timeout_s=30, poll_s=0.1, what=f"{path} finished")


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
            async def dead_lettered() -> bool:
                _, one = await admin.call("GET", "/broker/subscription/rp/g-rp")
                return bool(one["data"]["status"]["counters"]["dead_lettered"] == 1)

            await waits.until(dead_lettered, poll_s=0.1)
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


async def _dead_letter_all(admin: Admin, sub_id: str, records: int) -> dict[str, Any]:
    """Wait until every record is in the dead-letter topic; the subscription's status."""
    async def all_dead() -> dict[str, Any] | None:
        _, one = await admin.call("GET", f"/broker/subscription/{sub_id}/g-{sub_id}")
        status: dict[str, Any] = one["data"]["status"]
        done = sum(p["dead_lettered"] for p in status["partitions"]) == records
        return status if done else None

    return await waits.until(all_dead, timeout_s=30, poll_s=0.1,
                             what=f"all {records} records of {sub_id} dead-lettered")


async def test_a_replay_right_after_an_outage_waits_for_the_breaker_probe(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    records, broken = 20, {"yes": True}

    async def receiver_behaviour(push: Push) -> int:
        return 500 if broken["yes"] else 200

    receiver = await Receiver(receiver_behaviour).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "ro", [{"name": topic, "config": {"concurrencyFactor": 10}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=20, retryBeforeCommit=1,
                deadLetterTopic=dlt,
                circuitBreaker={"failureRatio": 0.5, "minRequests": 5, "openMs": 2000}))
            await produce(kafka_bootstrap, topic, records)
            status = await _dead_letter_all(admin, "ro", records)
            assert status["endpoint"]["origin"]["breaker"] == "open"
            broken["yes"] = False  # healed, and the operator presses replay at once
            status_code, body = await admin.call(
                "POST", "/broker/subscription/ro/g-ro/replay", {"source": "deadLetter"})
            assert status_code == 202, body
            rid = body["data"]["replayId"]
            progress = await _progress(admin, f"/broker/subscription/ro/g-ro/replay/{rid}")
            assert (progress["state"], progress["delivered"], progress["failed"]) == (
                "done", records, 0), progress
            assert len({p.offset for p in receiver.ok}) == records
    finally:
        await receiver.stop()


async def test_a_replay_whose_every_record_failed_is_failed_with_the_reason(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")

    async def still_broken(push: Push) -> int:
        return 500

    receiver = await Receiver(still_broken).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "rf", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs,
                delayOnErrorMs=20, retryBeforeCommit=1, deadLetterTopic=dlt,
                circuitBreaker={"minRequests": 1_000_000}))
            await produce(kafka_bootstrap, topic, 3)
            await _dead_letter_all(admin, "rf", 3)
            status_code, body = await admin.call(
                "POST", "/broker/subscription/rf/g-rf/replay", {"source": "deadLetter"})
            assert status_code == 202, body
            rid = body["data"]["replayId"]
            progress = await _progress(admin, f"/broker/subscription/rf/g-rf/replay/{rid}")
            assert (progress["state"], progress["delivered"], progress["failed"]) == (
                "failed", 0, 3), progress
            assert "3 of 3 records failed" in progress["reason"]
            assert "HTTP 500" in progress["reason"]
    finally:
        await receiver.stop()


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_finished_replays_close_their_consumers(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("rc", [{"name": topic}], receiver.url,
                                               fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, topic, 3)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
            body = {"source": "topic", "topic": topic, "partition": 0, "fromOffset": 0,
                    "toOffset": 2}
            path = "/broker/subscription/rc/g-rc/replay"

            async def one_replay() -> None:
                status, reply = await admin.call("POST", path, body)
                assert status == 202, reply
                done = await _progress(admin, f"{path}/{reply['data']['replayId']}")
                assert (done["state"], done["delivered"]) == ("done", 3), done

            tree = runtime.service("delivery").tree("rc_g-rc")

            def replays_gone() -> bool:  # a finished replay's actor stops after its answer
                return not [n for n in tree.children() if n.startswith("replay-")]

            await one_replay()  # warm: the first one opens what every later one shares
            await waits.until(replays_gone, what="the warm replay's actor stopped")
            before = _open_files()
            for _ in range(10):
                await one_replay()
            await waits.until(replays_gone, what="every finished replay's actor stopped")
            await waits.until(lambda: _open_files() <= before + 2,
                              what=f"open files back to {before} + 2")
    finally:
        await receiver.stop()
