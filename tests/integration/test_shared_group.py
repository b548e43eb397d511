"""Subscriptions sharing a `group.id` ride one Kafka group member (issue 17): each gets
every record of its own topics, a topic is refused to a second subscription of the group,
and joining, leaving, crashing and killing lose nothing (real broker, real receivers)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.delivery.control.restore import RESTORE_BATCH
from actors.delivery.path.member import InstanceMemberActor
from runtime.host.app import Runtime
from runtime.kafka.broker import free_port
from runtime.kernel.supervisor import Supervisor
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    committed,
    make_runtime,
    produce,
    subscription,
)
from tests.integration.processes import (
    admin,
    kill,
    paced,
    start_process,
    terminate,
    write_config,
)

pytestmark = pytest.mark.integration
GROUP = "team-orders"


def sub_in_group(sub_id: str, topic: str, url: str, fast: dict[str, int],
                 **topic_extra: Any) -> dict[str, Any]:
    return subscription(sub_id, [{"name": topic, "config": {"concurrencyFactor": 4},
                                  **topic_extra}], url, group=GROUP, fast_group=fast)


async def subscribe_all(api: Admin, topics: dict[str, str], url: str,
                        fast: dict[str, int]) -> None:
    """Post one subscription of the group per `{id: topic}`; each must be accepted."""
    for sub_id, topic in topics.items():
        status, body = await api.call("POST", "/broker/subscription",
                                      sub_in_group(sub_id, topic, url, fast))
        assert status == 200, body


def with_concurrency(body: dict[str, Any], factor: int) -> dict[str, Any]:
    """`body` with another concurrencyFactor: an update that keeps the topics."""
    body["topics"][0]["config"]["concurrencyFactor"] = factor
    return body


def members(runtime: Runtime) -> list[InstanceMemberActor]:
    groups = runtime.system.root.child("groups")
    assert isinstance(groups, Supervisor)
    return [a for n in groups.children()
            if isinstance(a := groups.child(n), InstanceMemberActor)]


def delivered_of(receiver: Receiver, key: str) -> set[tuple[str, int, int]]:
    return {(t, p, o) for c, t, p, o in receiver.delivered() if c == key}


slow_ok = paced(0.002)


async def test_two_subscriptions_of_one_group_share_one_member_and_both_deliver_everything(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    first, second = await topic_factory(partitions=2), await topic_factory(partitions=1)
    await produce(kafka_bootstrap, first, 120, partitions=2)
    await produce(kafka_bootstrap, second, 80)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_all(api, {"a": first, "b": second}, receiver.url,
                                fast_group_kwargs)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 200)
            assert len(members(runtime)) == 1
            _, a = await api.call("GET", f"/broker/subscription/a/{GROUP}")
            _, b = await api.call("GET", f"/broker/subscription/b/{GROUP}")
            member_a, member_b = a["data"]["status"]["member"], b["data"]["status"]["member"]
            assert member_a["memberId"] == member_b["memberId"] != ""
            # the member is the instance's, in the instance group; GROUP only keeps positions
            assert member_a["group"].startswith("hookstream-instances-")
            assert member_a["generation"] >= 0
            assert sorted(member_a["assigned"]) == [f"{first}-0", f"{first}-1"]
            assert member_b["assigned"] == [f"{second}-0"]
            metrics = runtime.metrics.render()
            instance_group = member_a["group"]
            assert f'hookstream_group_subscriptions{{group="{instance_group}"' in metrics
    finally:
        await receiver.stop()
    assert len(delivered_of(receiver, f"a_{GROUP}")) == 120
    assert len(delivered_of(receiver, f"b_{GROUP}")) == 80
    assert await committed(kafka_bootstrap, GROUP, first, 2) == {0: 60, 1: 60}
    assert await committed(kafka_bootstrap, GROUP, second, 1) == {0: 80}


async def test_a_second_subscription_of_the_group_on_the_same_topic_is_refused_naming_the_first(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            status, _ = await api.call("POST", "/broker/subscription",
                                       sub_in_group("owner", topic, receiver.url,
                                                    fast_group_kwargs))
            assert status == 200
            status, body = await api.call("POST", "/broker/subscription",
                                          sub_in_group("thief", topic, receiver.url,
                                                       fast_group_kwargs))
            assert status == 400, body
            assert f"owner_{GROUP}" in body["details"] and topic in body["details"]
            pattern = subscription("regex", [{"name": topic[:4] + ".*", "pattern": True}],
                                   receiver.url, group=GROUP, fast_group=fast_group_kwargs)
            status, body = await api.call("POST", "/broker/subscription", pattern)
            assert status == 400 and f"owner_{GROUP}" in body["details"], body
            other_group = subscription("elsewhere", [{"name": topic}], receiver.url,
                                       fast_group=fast_group_kwargs)
            status, body = await api.call("POST", "/broker/subscription", other_group)
            assert status == 200, body
            _, listed = await api.call("GET", "/broker/subscription")
            assert sorted(s["id"] for s in listed["data"]) == ["elsewhere", "owner"]
    finally:
        await receiver.stop()


async def test_adding_and_removing_a_subscription_while_another_is_fed_loses_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    fed, visitor = await topic_factory(partitions=2), await topic_factory(partitions=1)
    await produce(kafka_bootstrap, visitor, 60)
    receiver = await Receiver(slow_ok).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            status, _ = await api.call("POST", "/broker/subscription",
                                       sub_in_group("steady", fed, receiver.url,
                                                    fast_group_kwargs))
            assert status == 200
            feeding = asyncio.create_task(feed(kafka_bootstrap, fed, batches=30, size=10))
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 20)
            status, _ = await api.call("POST", "/broker/subscription",
                                       sub_in_group("visitor", visitor, receiver.url,
                                                    fast_group_kwargs))
            assert status == 200
            await receiver.wait_for(
                lambda: len(delivered_of(receiver, f"visitor_{GROUP}")) == 60)
            status, _ = await api.call("POST", "/broker/unsubscribe",
                                       {"id": "visitor", "group.id": GROUP})
            assert status == 200
            await feeding
            await receiver.wait_for(
                lambda: len(delivered_of(receiver, f"steady_{GROUP}")) == 300, timeout_s=60)
            [member] = members(runtime)
            assert set(member.roster.riders) == {f"steady_{GROUP}"}
    finally:
        await receiver.stop()
    assert await committed(kafka_bootstrap, GROUP, fed, 2) == {0: 150, 1: 150}
    assert await committed(kafka_bootstrap, GROUP, visitor, 1) == {0: 60}


async def test_updating_a_subscription_that_keeps_its_topics_moves_no_partition_of_the_group(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    fed, updated = await topic_factory(partitions=2), await topic_factory(partitions=2)
    receiver = await Receiver(slow_ok).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_all(api, {"steady": fed, "changing": updated}, receiver.url,
                                fast_group_kwargs)
            feeding = asyncio.gather(feed(kafka_bootstrap, fed, batches=30, size=10),
                                     feed(kafka_bootstrap, updated, batches=30, size=10))
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 40)
            [member] = members(runtime)
            before = (member.rebalances, member.generation(), member.member_id())
            body = with_concurrency(
                sub_in_group("changing", updated, receiver.url, fast_group_kwargs), 2)
            status, answer = await api.call("PUT", f"/broker/subscription/changing/{GROUP}",
                                            body)
            assert status == 200, answer
            await feeding
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 600, timeout_s=60)
            assert members(runtime) == [member]
            assert (member.rebalances, member.generation(), member.member_id()) == before
            _, shown = await api.call("GET", f"/broker/subscription/changing/{GROUP}")
            assert sorted(shown["data"]["status"]["member"]["assigned"]) == [
                f"{updated}-0", f"{updated}-1"]
    finally:
        await receiver.stop()
    assert len(delivered_of(receiver, f"steady_{GROUP}")) == 300
    assert len(delivered_of(receiver, f"changing_{GROUP}")) == 300
    assert await committed(kafka_bootstrap, GROUP, fed, 2) == {0: 150, 1: 150}
    assert await committed(kafka_bootstrap, GROUP, updated, 2) == {0: 150, 1: 150}


async def test_updating_the_only_subscription_of_a_group_keeps_its_member(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    receiver = await Receiver(slow_ok).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            body = sub_in_group("alone", topic, receiver.url, fast_group_kwargs)
            status, _ = await api.call("POST", "/broker/subscription", body)
            assert status == 200
            feeding = asyncio.create_task(feed(kafka_bootstrap, topic, batches=30, size=10))
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 20)
            [member] = members(runtime)
            before = (member.rebalances, member.member_id())
            with_concurrency(body, 1)
            status, answer = await api.call("PUT", f"/broker/subscription/alone/{GROUP}", body)
            assert status == 200, answer
            await feeding
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 300, timeout_s=60)
            assert members(runtime) == [member]
            assert (member.rebalances, member.member_id()) == before
    finally:
        await receiver.stop()
    assert len(delivered_of(receiver, f"alone_{GROUP}")) == 300
    assert await committed(kafka_bootstrap, GROUP, topic, 2) == {0: 150, 1: 150}


async def test_a_member_killed_while_a_subscription_is_updated_loses_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    fed, updated = await topic_factory(partitions=2), await topic_factory(partitions=2)
    await produce(kafka_bootstrap, fed, 300, partitions=2)
    await produce(kafka_bootstrap, updated, 300, partitions=2)
    receiver = await Receiver(slow_ok).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_all(api, {"steady": fed, "changing": updated}, receiver.url,
                                fast_group_kwargs)
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 100)
            [victim] = members(runtime)
            body = with_concurrency(
                sub_in_group("changing", updated, receiver.url, fast_group_kwargs), 2)
            update = asyncio.create_task(
                api.call("PUT", f"/broker/subscription/changing/{GROUP}", body))
            await receiver.wait_for(lambda: victim.held, timeout_s=10)
            victim.kill("chaos test")
            status, answer = await update
            assert status == 200, answer
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 600, timeout_s=90)
            [replacement] = members(runtime)
            assert replacement is not victim and not replacement.held
    finally:
        await receiver.stop()
    assert len(delivered_of(receiver, f"steady_{GROUP}")) == 300
    assert len(delivered_of(receiver, f"changing_{GROUP}")) == 300
    assert await committed(kafka_bootstrap, GROUP, fed, 2) == {0: 150, 1: 150}
    assert await committed(kafka_bootstrap, GROUP, updated, 2) == {0: 150, 1: 150}


async def test_a_restart_restores_more_subscriptions_than_one_batch_and_each_delivers(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    alone = [await topic_factory() for _ in range(RESTORE_BATCH + 4)]
    together = [await topic_factory() for _ in range(3)]
    records = 2 * (len(alone) + len(together))
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            for n, topic in enumerate(alone):
                await api.subscribe(subscription(f"s{n}", [{"name": topic}], receiver.url,
                                                 fast_group=fast_group_kwargs))
            for n, topic in enumerate(together):
                await api.subscribe(sub_in_group(f"t{n}", topic, receiver.url,
                                                 fast_group_kwargs))
        for topic in alone + together:
            await produce(kafka_bootstrap, topic, 2)
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            assert len(members(runtime)) == 1  # one instance member reads for all
            await receiver.wait_for(lambda: len(receiver.delivered()) == records,
                                    timeout_s=60)
    finally:
        await receiver.stop()
    assert {t for _, t, _, _ in receiver.delivered()} == set(alone + together)
    assert len(set(receiver.delivered())) == records


async def feed(bootstrap: str, topic: str, *, batches: int, size: int) -> None:
    """Produce `batches * size` records, a batch every 100 ms (bounded)."""
    for n in range(batches):
        await produce(bootstrap, topic, size, partitions=2, start=n * size)
        await asyncio.sleep(0.1)


async def test_a_killed_member_is_rebuilt_and_both_subscriptions_deliver_everything(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    first, second = await topic_factory(partitions=2), await topic_factory(partitions=2)
    await produce(kafka_bootstrap, first, 300, partitions=2)
    await produce(kafka_bootstrap, second, 300, partitions=2)
    receiver = await Receiver(slow_ok).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_all(api, {"x": first, "y": second}, receiver.url,
                                fast_group_kwargs)
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 100)
            [victim] = members(runtime)
            victim.kill("chaos test")
            await receiver.wait_for(lambda: victim.state == "crashed", timeout_s=5)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 600, timeout_s=60)
            [replacement] = members(runtime)
            assert replacement is not victim and replacement.alive
    finally:
        await receiver.stop()
    assert await committed(kafka_bootstrap, GROUP, first, 2) == {0: 150, 1: 150}
    assert await committed(kafka_bootstrap, GROUP, second, 2) == {0: 150, 1: 150}


async def test_sigkill_of_the_process_then_restart_delivers_every_record_of_the_group(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    first, second = await topic_factory(partitions=2), await topic_factory(partitions=1)
    await produce(kafka_bootstrap, first, 200, partitions=2)
    await produce(kafka_bootstrap, second, 100)
    receiver = await Receiver(slow_ok).start()
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, port)
    process = await start_process(config, port)
    try:
        for sub_id, topic in (("p", first), ("q", second)):
            status, reply = await admin(port, "POST", "/broker/subscription",
                                        sub_in_group(sub_id, topic, receiver.url,
                                                     fast_group_kwargs))
            assert status == 200, reply
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 60)
        await kill(process)
        await produce(kafka_bootstrap, first, 100, partitions=2, start=200)
        process = await start_process(config, port)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 400, timeout_s=60)
        assert await terminate(process) == 0
    finally:
        await kill(process)
        await receiver.stop()
    assert len(delivered_of(receiver, f"p_{GROUP}")) == 300
    assert len(delivered_of(receiver, f"q_{GROUP}")) == 100
    assert await committed(kafka_bootstrap, GROUP, first, 2) == {0: 150, 1: 150}
    assert await committed(kafka_bootstrap, GROUP, second, 1) == {0: 100}
