"""Subscriptions as a service: they survive a broker that is down at boot, report their
state, pause and resume, and change in place, losing and skipping nothing (real broker,
real runtime, real HTTP receivers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from actors.delivery.document.store import SubscriptionStore
from actors.delivery.document.subscription import decode_consumer
from runtime.errors import ActorDeadError
from runtime.kafka import create_topics
from runtime.kafka.broker import EmbeddedBroker
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    committed,
    make_runtime,
    produce,
    subscription,
)
from tests.waits import until

pytestmark = pytest.mark.integration


async def test_a_subscription_stored_while_the_broker_is_down_delivers_once_it_is_back(
        tmp_path: Path, unused_port: int, fast_group_kwargs: dict[str, int]) -> None:
    bootstrap = f"127.0.0.1:{unused_port}"
    receiver = await Receiver().start()
    sub = subscription("boot", [{"name": "late.topic"}], receiver.url,
                       fast_group=fast_group_kwargs)
    await SubscriptionStore(tmp_path / "persist").save(decode_consumer(sub))
    broker = EmbeddedBroker(port=unused_port)
    try:
        async with make_runtime(bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            status, ready = await admin.call("GET", "/readyz")
            assert status == 503
            assert [r for r in ready["reasons"] if "boot_g-boot" in r]
            _, one = await admin.call("GET", "/broker/subscription/boot/g-boot")
            assert one["data"]["status"]["state"] in ("waiting_for_broker", "failed")
            await broker.start()  # the broker comes back: no re-post
            await create_topics(bootstrap, {"late.topic": 1})
            await produce(bootstrap, "late.topic", 3)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3, timeout_s=30)
            _, one = await admin.call("GET", "/broker/subscription/boot/g-boot")
            assert one["data"]["status"]["state"] == "running"
    finally:
        await broker.stop()
        await receiver.stop()


async def test_the_status_shows_partitions_endpoint_and_counters(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 10, partitions=2)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("st", [{"name": topic}], receiver.url,
                                               fast_group=fast_group_kwargs))
            await receiver.wait_for(lambda: len(receiver.delivered()) == 10)
            status, body = await admin.call("GET", "/broker/subscription/st/g-st")
            assert status == 200
            state = body["data"]["status"]
            assert state["state"] == "running"
            assert sorted(p["partition"] for p in state["partitions"]) == [0, 1]
            assert state["counters"]["delivered"] == 10
            assert state["endpoint"]["last_status"] == 200
            assert body["data"]["consumer"]["id"] == "st"
            assert (await admin.call("GET", "/broker/subscription/nope/g"))[0] == 404
    finally:
        await receiver.stop()


async def test_pause_stops_deliveries_and_resume_continues_with_nothing_lost(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    receiver, witness = await Receiver().start(), await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "pz", [{"name": topic, "config": {"concurrencyFactor": 5}}], receiver.url,
                fast_group=fast_group_kwargs))
            await admin.subscribe(subscription(  # reads the same records, never paused
                "pw", [{"name": topic, "config": {"concurrencyFactor": 5}}], witness.url,
                fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, topic, 20)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 20)
            status, body = await admin.call("POST", "/broker/subscription/pz/g-pz/pause")
            assert status == 200 and body["data"]["status"]["state"] == "paused"
            await produce(kafka_bootstrap, topic, 20, start=20)
            # the witness got them all: the paused subscription could have too
            await witness.wait_for(lambda: len(witness.delivered()) == 40)
            assert len(receiver.delivered()) == 20
            _, ready = await admin.call("GET", "/readyz")
            assert not [r for r in ready["reasons"] if "pz_g-pz" in r]  # paused on purpose
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:  # paused survives
            admin = Admin(runtime)
            _, body = await admin.call("GET", "/broker/subscription/pz/g-pz")
            assert body["data"]["status"]["state"] == "paused"
            await admin.call("POST", "/broker/subscription/pz/g-pz/resume")
            await receiver.wait_for(lambda: len(receiver.delivered()) == 40)
    finally:
        await receiver.stop()
        await witness.stop()
    assert await committed(kafka_bootstrap, "g-pz", topic, 1) == {0: 40}


async def test_an_update_changes_uri_and_concurrency_losing_and_skipping_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    release = asyncio.Event()

    async def slow(push: Push) -> int:
        if push.offset % 3 == 0:
            await asyncio.wait_for(release.wait(), 10)
        return 200

    first, second = await Receiver(slow).start(), await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            body = subscription("up", [{"name": topic, "config": {"concurrencyFactor": 2}}],
                                first.url, fast_group=fast_group_kwargs)
            await admin.subscribe(body)
            await produce(kafka_bootstrap, topic, 60, partitions=2)
            await first.wait_for(lambda: len(first.pushes) >= 4)
            body["topics"][0]["config"]["concurrencyFactor"] = 20
            body["subscriptionMethod"]["uri"] = second.url
            update = asyncio.ensure_future(admin.call("PUT", "/broker/subscription/up/g-up",
                                                      body))

            async def draining() -> bool:
                _, shown = await admin.call("GET", "/broker/subscription/up/g-up")
                return bool(shown["data"]["status"]["state"] == "stopping")

            await until(draining, what="the update drains the old tree")
            release.set()  # what was in flight finishes during the drain
            status, answer = await update
            assert status == 200, answer
            expected = {(topic, p, o) for p in (0, 1) for o in range(30)}
            await second.wait_for(lambda: expected <= {
                (x.topic, x.partition, x.offset) for x in first.ok + second.ok})
            seen = {(x.topic, x.partition, x.offset) for x in first.ok + second.ok}
            assert seen == expected
            assert second.ok, "the new URI gets the rest"
            _, one = await admin.call("GET", "/broker/subscription/up/g-up")
            assert one["data"]["consumer"]["topics"][0]["config"]["concurrencyFactor"] == 20
            bad = {**body, "id": "other"}
            assert (await admin.call("PUT", "/broker/subscription/up/g-up", bad))[0] == 400
            assert (await admin.call("PUT", "/broker/subscription/no/g", body))[0] == 404
    finally:
        release.set()
        await first.stop()
        await second.stop()
    assert await committed(kafka_bootstrap, "g-up", topic, 2) == {0: 30, 1: 30}


async def test_a_crashed_control_plane_is_restarted_and_its_subscriptions_deliver_on(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("cp", [{"name": topic}], receiver.url,
                                               fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, topic, 3)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
            root = runtime.system.root
            crashed = root.child("control")
            crashed.kill("chaos")  # its supervisor restarts it; it restores from the files

            def running_again() -> bool:
                service: Any = runtime.service("delivery")
                status = service.status
                return (root.has_child("control") and root.child("control") is not crashed
                        and "cp_g-cp" in status and status["cp_g-cp"].state == "running")

            await receiver.wait_for(running_again, timeout_s=30)
            await produce(kafka_bootstrap, topic, 3, start=3)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 6, timeout_s=30)
            _, one = await admin.call("GET", "/broker/subscription/cp/g-cp")
            assert one["data"]["status"]["state"] == "running"
    finally:
        await receiver.stop()


async def test_when_the_delivery_supervisor_crashes_the_control_actor_starts_every_tree_again(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("tl", [{"name": topic}], receiver.url,
                                               fast_group=fast_group_kwargs))
            root = runtime.system.root
            crashed = root.child("delivery")
            crashed.kill("chaos")  # restarted empty; its exit reaches the control actor

            def tree_again() -> bool:
                service: Any = runtime.service("delivery")
                return (root.has_child("delivery") and root.child("delivery") is not crashed
                        and service.tree("tl_g-tl") is not None)

            await receiver.wait_for(lambda: _quietly(tree_again), timeout_s=30)
            await produce(kafka_bootstrap, topic, 3)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3, timeout_s=30)
    finally:
        await receiver.stop()


def _quietly(check: Callable[[], bool]) -> bool:
    """`check()`, False while what it reads does not exist yet."""
    try:
        return check()
    except ActorDeadError:
        return False


async def test_two_pairs_that_join_alike_are_two_subscriptions_each_addressed_alone(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    """(`k_a`, `b`) and (`k`, `a_b`) both push as `QOH-Consumer: k_a_b` but are two
    subscriptions (issue 25, item 15): each delivers, pauses, survives a restart and
    goes away alone."""
    topic = await topic_factory()
    first, second = await Receiver().start(), await Receiver().start()
    pairs = {"k_a/b": first, "k/a_b": second}
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            for path, receiver in pairs.items():
                sub_id, group = path.split("/")
                await admin.subscribe(subscription(sub_id, [{"name": topic}], receiver.url,
                                                   group=group, fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, topic, 5)
            for receiver in pairs.values():
                await receiver.wait_for(lambda r=receiver: len(r.delivered()) == 5)
                assert {p.consumer for p in receiver.ok} == {"k_a_b"}
            for path in pairs:
                _, one = await admin.call("GET", f"/broker/subscription/{path}")
                consumer = one["data"]["consumer"]
                assert f"{consumer['id']}/{consumer['group']['id']}" == path
            metrics = await metrics_text(admin)
            for key in ("k_a_b", "k_a%5Fb"):
                assert f'hookstream_delivered_total{{subscription="{key}",topic="{topic}"' \
                    in metrics
            status, _ = await admin.call("POST", "/broker/subscription/k/a_b/pause")
            assert status == 200
            assert await states(admin) == {("k_a", "b"): "running", ("k", "a_b"): "paused"}
            await produce(kafka_bootstrap, topic, 5, start=5)
            await first.wait_for(lambda: len(first.delivered()) == 10)
        assert len(second.delivered()) == 5
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:  # from the store
            admin = Admin(runtime)
            assert await states(admin) == {("k_a", "b"): "running", ("k", "a_b"): "paused"}
            await admin.call("POST", "/broker/subscription/k/a_b/resume")
            await second.wait_for(lambda: len(second.delivered()) == 10)
            status, _ = await admin.call("POST", "/broker/unsubscribe",
                                         {"id": "k", "group": {"id": "a_b"}})
            assert status == 200
            assert await states(admin) == {("k_a", "b"): "running"}
            assert (await admin.call("GET", "/broker/subscription/k/a_b"))[0] == 404
            await produce(kafka_bootstrap, topic, 5, start=10)
            await first.wait_for(lambda: len(first.delivered()) == 15)
        assert len(second.delivered()) == 10
    finally:
        await first.stop()
        await second.stop()


async def states(admin: Admin) -> dict[tuple[str, str], str]:
    _, listed = await admin.call("GET", "/broker/subscription")
    return {(s["id"], s["group"]["id"]): s["state"] for s in listed["data"]}


async def metrics_text(admin: Admin) -> str:
    async with aiohttp.ClientSession() as session, session.get(
            admin.base + "/metrics", headers=admin.headers) as response:
        assert response.status == 200
        return await response.text()
