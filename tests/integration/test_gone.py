"""410 Gone disables the subscription: it stops, says so in the status API, the journal
and across restarts, and the operator's resume delivers the record that got the 410."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

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
from tests.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
PATH = "/broker/subscription/gone/g-gone"
CLUSTER_PATH = "/broker/subscription/gone-cl/g-gone-cl"
KEEPER_PATH = "/broker/subscription/keeper-cl/g-keeper-cl"
# The status API has no event to wake on: a few reads a second. Every 50 ms (the default)
# each read, a new HTTP client and a request served by the runtime under test, took CPU
# from the runtimes in the same event loop, which matters most on a loaded machine.
STATE_POLL_S = 0.25


async def _state(admin: Admin, path: str = PATH) -> dict[str, object]:
    status, one = await admin.call("GET", path)
    assert status == 200, one
    state: dict[str, object] = one["data"]["status"]
    return state


async def _wait_state(admin: Admin, wanted: str, path: str = PATH) -> dict[str, object]:
    async def state_is_wanted() -> dict[str, object] | None:
        state = await _state(admin, path)
        return state if state["state"] == wanted else None

    return await until(state_is_wanted, timeout_s=15, what=f"{path} {wanted}",
                       poll_s=STATE_POLL_S)


def _journaled(folder: Path, kind: str) -> list[dict[str, object]]:
    events = []
    for path in folder.glob("segment-*"):
        for line in path.read_text().splitlines():
            if line.strip():
                event = json.loads(line)
                if event["type"] == kind:
                    events.append(event)
    return events


async def test_410_disables_until_resumed_even_across_a_restart(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    gone = {"yes": True}

    def is_gone(push: Push) -> bool:
        return push.consumer.startswith("gone_")

    async def answer(push: Push) -> int:
        return 410 if is_gone(push) and push.body == b"v3" and gone["yes"] else 200

    def offsets(pushes: list[Push], of: Callable[[Push], bool] = is_gone) -> set[int]:
        return {p.offset for p in pushes if of(p)}

    receiver = await Receiver(answer).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "gone", [{"name": topic, "config": {"ordering": "partition"}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=10))
            # the witness: a subscription of the same records, never answered 410, shows
            # that the later records were there for the disabled one to get
            await admin.subscribe(subscription("witness", [{"name": topic}], receiver.url,
                                               fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, topic, 10)
            state = await _wait_state(admin, "disabled")
            assert "410 Gone" in str(state["reason"])
            assert state["partitions"] == []  # its actors are stopped
            pushed = [p for p in receiver.pushes if is_gone(p)]
            await produce(kafka_bootstrap, topic, 5, start=10)
            await receiver.wait_for(lambda: offsets(receiver.ok, lambda p: not is_gone(p))
                                    == set(range(15)))
            assert [p for p in receiver.pushes if is_gone(p)] == pushed, \
                "pushes went on after the 410"
            assert offsets(receiver.ok) == {0, 1, 2}
            _, ready = await admin.call("GET", "/readyz")
            assert ready["ready"], ready  # disabled on purpose, like paused
        assert _journaled(tmp_path / "journal", "subscription_disabled")
        gone["yes"] = False
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            assert (await _state(admin))["state"] == "disabled"
            status, reply = await admin.call("POST", PATH + "/resume")
            assert status == 200, reply
            await receiver.wait_for(lambda: offsets(receiver.ok) == set(range(15)))
            assert (await _state(admin))["state"] == "running"
    finally:
        await receiver.stop()
    assert [p.offset for p in receiver.pushes if is_gone(p)].count(3) == 2  # 410, then 200


async def test_in_cluster_mode_a_410_disables_everywhere_and_an_instance_started_later(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], broker_is_embedded: bool) -> None:
    """On Kafka every instance stops before the later one starts. On the embedded broker
    they stay, and a second subscription, never answered 410, rides the instance group all
    along: a group whose leader left may keep it as its leader (runtime/kafka/compat.py
    quirk 11, timing-dependent), and members that join it again get no assignment. Without
    the second subscription every instance's member left the group once the only one was
    disabled (nothing rode it), and the three that joined again after the resume hit the
    quirk about one run in three on a loaded machine: SyncGroup refused in a loop until
    the wait ran out (79 s in a full parallel run, red after 90 s in one alone)."""
    topic, other = await topic_factory(partitions=1), await topic_factory(partitions=1)
    cluster = {"subscriptions_topic": f"subs-{uuid.uuid4().hex[:8]}", "replication_factor": 1}
    gone = {"yes": True}

    async def answer(push: Push) -> int:
        return 410 if push.body == b"v3" and gone["yes"] else 200

    receiver = await Receiver(answer).start()
    a = make_runtime(kafka_bootstrap, tmp_path / "a", cluster=cluster)
    b = make_runtime(kafka_bootstrap, tmp_path / "b", cluster=cluster)
    try:
        await a.start()
        await b.start()
        await Admin(a).subscribe(subscription("keeper-cl", [{"name": other}], receiver.url,
                                              fast_group=fast_group_kwargs))
        await Admin(a).subscribe(subscription(
            "gone-cl", [{"name": topic, "config": {"ordering": "partition"}}], receiver.url,
            fast_group=fast_group_kwargs, delayOnErrorMs=10))
        await produce(kafka_bootstrap, topic, 10)
        for runtime in (a, b):
            state = await _wait_state(Admin(runtime), "disabled", CLUSTER_PATH)
            assert "410 Gone" in str(state["reason"])
            # only the subscription that got the 410: the other one runs on
            await _wait_state(Admin(runtime), "running", KEEPER_PATH)
        if not broker_is_embedded:
            await a.stop()
            await b.stop()
        gone["yes"] = False
        async with make_runtime(kafka_bootstrap, tmp_path / "c", cluster=cluster) as c:
            admin = Admin(c)
            state = await _state(admin, CLUSTER_PATH)
            assert state["state"] == "disabled" and "410 Gone" in str(state["reason"])
            status, reply = await admin.call("POST", CLUSTER_PATH + "/resume")
            assert status == 200, reply
            await receiver.wait_for(lambda: {p.offset for p in receiver.ok} == set(range(10)))
            assert (await _wait_state(admin, "running", CLUSTER_PATH))["state"] == "running"
    finally:
        await a.stop()
        await b.stop()
        await receiver.stop()
