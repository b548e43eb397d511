"""Issue 12's done-when, with real processes: three instances from one config file share
a subscription through the subscriptions topic. Posted to the first, it runs on all; an
update posted to the second applies on all; the third, started later, takes its share
without any post; after kill -9 of one instance every produced record is delivered (the
receiver counts), and the others show it gone in the cluster view."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import waits
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Push, Receiver, committed, produce, subscription
from tests.integration.processes import (
    Instance,
    cluster_section,
    paced,
    runtime_toml,
    secrets_key,
)

pytestmark = pytest.mark.integration
PARTITIONS = 6
PATH = "/broker/subscription/cp/g-cp"


def write_config(tmp: Path, bootstrap: str) -> Path:
    path, name = tmp / "cluster.toml", uuid.uuid4().hex[:8]
    status = (f'status_topic = "status-{name}"\nstatus_interval_ms = 300\n'
              "gone_after_intervals = 3")
    path.write_text(runtime_toml(bootstrap, tmp / "persist",
                                 sections=cluster_section(secrets_key(tmp), name, status)))
    return path


async def owned_by(instance: Instance) -> int:
    status, reply = await instance.call("GET", PATH)
    return len(reply["data"]["status"]["partitions"]) if status == 200 else 0


async def until(check: Any, timeout_s: float = 90) -> None:
    await waits.until(check, timeout_s=timeout_s, poll_s=0.2)


async def test_three_processes_share_a_subscription_and_a_kill_loses_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    config = write_config(tmp_path, kafka_bootstrap)

    # a paced receiver keeps records in flight when the kill comes
    receiver = await Receiver(paced(0.005)).start()
    logs = [tmp_path / f"instance-{i}.log" for i in range(3)]
    instances = [Instance(config, i, logs[i]) for i in range(3)]
    try:
        a, b, c = instances
        await a.start()
        await b.start()
        body = subscription("cp", [{"name": topic, "config": {"concurrencyFactor": 4}}],
                            receiver.url, fast_group=fast_group_kwargs)
        status, reply = await a.call("POST", "/broker/subscription", body)
        assert status == 200, reply

        async def on_both() -> bool:
            owned = [await owned_by(a), await owned_by(b)]
            return sum(owned) == PARTITIONS and min(owned) > 0

        await until(on_both)
        body["subscriptionMethod"]["additionalHeaders"] = {"X-Version": "2"}
        status, reply = await b.call("PUT", PATH, body)  # to another instance
        assert status == 200, reply
        await until(on_both)  # the update restarted both: one rebalance at a time

        await c.start()  # no post to it: it reads the topic and joins the group

        async def on_all_three() -> bool:
            owned = [await owned_by(i) for i in instances]
            return sum(owned) == PARTITIONS and min(owned) > 0

        await until(on_all_three)
        await produce(kafka_bootstrap, topic, 300, partitions=PARTITIONS)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 300, timeout_s=60)
        for instance in instances:  # each delivered its share
            _, reply = await instance.call("GET", PATH)
            assert reply["data"]["status"]["counters"]["delivered"] > 0, instance.index

        await produce(kafka_bootstrap, topic, 600, partitions=PARTITIONS, start=300)
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 400, timeout_s=60)
        await b.stop(signal.SIGKILL)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 900, timeout_s=90)

        async def b_gone() -> bool:
            _, whole = await a.call("GET", "/cluster")
            states = {i["address"]: i["state"] for i in whole["data"]["instances"]}
            return states.get(b.url) == "gone"

        await until(b_gone)
        seen: list[Any] = []

        async def a_and_c_own_all() -> bool:  # once each has published after the rebalance
            _, reply = await c.call("GET", PATH)
            seen[:] = reply["data"]["cluster"]["partitions"]
            return ({p["address"] for p in seen} == {a.url, c.url}
                    and len(seen) == PARTITIONS)

        try:
            await until(a_and_c_own_all, timeout_s=30)
        except AssertionError:
            raise AssertionError(f"the view from c after b's death: {seen}") from None
    finally:
        for instance in instances:
            await instance.stop()
        await receiver.stop()
    every = {("cp_g-cp", topic, i % PARTITIONS, i // PARTITIONS) for i in range(900)}
    assert receiver.delivered() == every  # nothing lost (duplicates allowed: at least once)
    assert all(p.headers.get("X-Version") == "2" for p in receiver.ok)  # the update, on all
    assert await committed(kafka_bootstrap, "g-cp", topic, PARTITIONS) == {
        p: 150 for p in range(PARTITIONS)}


async def test_a_killed_instances_partitions_stay_in_the_view_with_their_lag(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    """Issue 25, item 4: from the kill until the new owner reports them, the partitions of
    a gone instance stay in `GET /cluster`, unowned, with their last known lag: the
    cluster's `total_lag` never drops while nothing is delivered."""
    topic = await topic_factory(partitions=4)
    config = write_config(tmp_path, kafka_bootstrap)
    gate = asyncio.Event()

    async def held(push: Push) -> int:  # nothing finishes: the lag stays where it is
        await gate.wait()
        return 200

    receiver = await Receiver(held).start()
    a, b = (Instance(config, i, tmp_path / f"gone-{i}.log") for i in range(2))
    path = "/broker/subscription/cg/g-cg"
    try:
        await a.start()
        await b.start()
        body = subscription("cg", [{"name": topic, "config": {"concurrencyFactor": 1}}],
                            receiver.url, fast_group=fast_group_kwargs)
        status, reply = await a.call("POST", "/broker/subscription", body)
        assert status == 200, reply
        await produce(kafka_bootstrap, topic, 60, partitions=4)

        async def spread_with_all_lag() -> bool:
            status, reply = await a.call("GET", path)
            rows = reply["data"]["cluster"]["partitions"] if status == 200 else []
            return ({p["address"] for p in rows} == {a.url, b.url}
                    and reply["data"]["cluster"]["total_lag"] == 60)

        await until(spread_with_all_lag)
        _, reply = await a.call("GET", path)
        b_owns = {p["partition"] for p in reply["data"]["cluster"]["partitions"]
                  if p["address"] == b.url}
        await b.stop(signal.SIGKILL)
        samples: list[tuple[str, dict[int, tuple[str | None, int | None]]]] = []

        async def a_owns_all() -> bool:
            _, whole = await a.call("GET", "/cluster")
            data = whole["data"]
            rows = data["subscriptions"]["cg_g-cg"]["partitions"]
            states = {i["address"]: i["state"] for i in data["instances"]}
            samples.append((states.get(b.url, "forgotten"), {
                p["partition"]: (p["instance"] or f"unowned, was {p['last_owner']}", p["lag"])
                for p in rows}))
            return {p["address"] for p in rows} == {a.url} and len(rows) == 4

        await until(a_owns_all, timeout_s=60)
        assert "gone" in {state for state, _rows in samples}, samples
        for _state, rows in samples:  # b's partitions never left the view
            assert b_owns <= set(rows), (b_owns, samples)
            unowned = [lag for owner, lag in rows.values() if owner.startswith("unowned")]
            assert all(lag == 15 for lag in unowned), samples  # their last known lag

        async def all_lag_again() -> bool:
            _, whole = await a.call("GET", "/cluster")
            return bool(whole["data"]["total_lag"] == 60)

        await until(all_lag_again)
    finally:
        gate.set()
        for instance in (a, b):
            await instance.stop()
        await receiver.stop()
