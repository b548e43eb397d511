"""The cluster-wide view (`[cluster] status_topic`): every instance publishes what it owns,
so any instance's `GET /broker/subscription/{id}/{groupId}` and `GET /cluster` show which
instance owns which partition and the cluster's total lag, and a clean stop shows as
`stopped` (real broker, real runtimes, real receiver)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.host.app import Runtime
from tests import waits
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, Receiver, make_runtime, produce, subscription

pytestmark = pytest.mark.integration


def instance(bootstrap: str, tmp: Path, name: str, topics: tuple[str, str]) -> Runtime:
    return make_runtime(bootstrap, tmp / name, cluster={
        "subscriptions_topic": topics[0], "status_topic": topics[1],
        # 5 s of silence before "gone": a busy machine delays a status, it does not kill
        "status_interval_ms": 200, "gone_after_intervals": 25, "replication_factor": 1})


async def until(check: Callable[[], Any], timeout_s: float = 30) -> None:
    await waits.until(check, timeout_s=timeout_s, poll_s=0.1)


async def test_any_instance_shows_who_owns_each_partition_and_the_total_lag(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=4)
    topics = (f"subs-{uuid.uuid4().hex[:8]}", f"status-{uuid.uuid4().hex[:8]}")
    gate = asyncio.Event()

    async def held(push: object) -> int:  # records wait here: lag the view must show
        await gate.wait()
        return 200

    receiver = await Receiver(held).start()
    path = "/broker/subscription/cs/g-cs"
    try:
        async with instance(kafka_bootstrap, tmp_path, "a", topics) as a:
            b = instance(kafka_bootstrap, tmp_path, "b", topics)
            await b.start()
            try:
                await Admin(a).subscribe(subscription(
                    "cs", [{"name": topic, "config": {"concurrencyFactor": 1}}],
                    receiver.url, fast_group=fast_group_kwargs))

                async def spread_over_both() -> bool:
                    status, reply = await Admin(b).call("GET", path)
                    if status != 200:  # not applied on b yet
                        return False
                    owners = {p["instance"] for p in reply["data"]["cluster"]["partitions"]}
                    return len(reply["data"]["cluster"]["partitions"]) == 4 and len(owners) == 2

                await until(spread_over_both)
                assert a.admin.openapi.undescribed(a.admin.app.router) == []  # /cluster too
                _, reply = await Admin(b).call("GET", path)
                cluster = reply["data"]["cluster"]
                addresses = {p["address"] for p in cluster["partitions"]}
                assert addresses == {a.admin.url, b.admin.url}
                assert {i["state"] for i in cluster["instances"]} == {"running"}

                await produce(kafka_bootstrap, topic, 40, partitions=4)

                async def lag_seen() -> bool:  # at most one in flight per partition
                    _, whole = await Admin(a).call("GET", "/cluster")
                    return bool(whole["data"]["total_lag"] >= 36)

                await until(lag_seen)
                gate.set()
                await receiver.wait_for(lambda: len(receiver.delivered()) == 40)

                async def lag_gone() -> bool:
                    _, whole = await Admin(b).call("GET", "/cluster")
                    return bool(whole["data"]["subscriptions"]["cs_g-cs"]["total_lag"] == 0)

                await until(lag_gone)
            finally:
                await b.stop()
            b_url = b.admin.url

            async def b_stopped() -> bool:
                _, whole = await Admin(a).call("GET", "/cluster")
                states = {i["address"]: i["state"] for i in whole["data"]["instances"]}
                owners = {p["address"] for p in
                          whole["data"]["subscriptions"]["cs_g-cs"]["partitions"]}
                return states.get(b_url) == "stopped" and owners == {a.admin.url}

            await until(b_stopped)
    finally:
        gate.set()
        await receiver.stop()


async def test_without_a_status_topic_there_is_no_cluster_view(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        status, _ = await Admin(runtime).call("GET", "/cluster")
    assert status == 404
