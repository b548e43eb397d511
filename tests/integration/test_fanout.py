"""High fan-out (issue 24): one read per partition per instance, every subscription a
cursor on it, with its own position committed under its own group."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka import TopicPartition
from aiokafka.protocol.commit import OffsetFetchRequest

from actors.delivery.control import trees
from actors.delivery.path.member import InstanceMemberActor
from actors.shared.messages import StatusQuery
from runtime.host.app import Runtime
from runtime.host.journal import Event, closed_segments, expand
from runtime.kafka import compat, make_consumer, pipeline
from runtime.kernel.supervisor import Supervisor
from tests import waits
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    journal_events,
    make_runtime,
    produce,
    subscription,
)
from tests.waits import until

pytestmark = pytest.mark.integration
DECODER = msgspec.json.Decoder(Event)


def member(runtime: Runtime) -> InstanceMemberActor:
    groups = runtime.system.root.child("groups")
    assert isinstance(groups, Supervisor)
    found = [a for n in groups.children()
             if isinstance(a := groups.child(n), InstanceMemberActor)]
    assert len(found) == 1
    return found[0]


async def group_positions(runtime: Runtime, groups: list[str], topic: str,
                          partitions: int) -> dict[str, dict[int, int | None]]:
    """Each group's committed offsets, read through the member's own client."""
    offsets = member(runtime).offsets
    assert offsets is not None
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    found = await asyncio.gather(*(offsets.fetch(g, tps) for g in groups))
    return {g: {tp.partition: pos[tp] for tp in tps} for g, pos in zip(groups, found,
                                                                      strict=True)}


async def subscribe_many(api: Admin, ids: list[str], topic: str, url: str,
                         concurrency: int = 4) -> None:
    async def one(sub_id: str) -> None:
        await api.subscribe(subscription(
            sub_id, [{"name": topic, "config": {"concurrencyFactor": concurrency}}], url))

    for first in range(0, len(ids), 25):
        await asyncio.gather(*(one(i) for i in ids[first:first + 25]))


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    """Until `check()` holds; polled, since what it reads has no event to wait on."""
    await waits.until(check, timeout_s=timeout_s)


async def _true(value: bool) -> bool:
    return value


def flaky(rate: float, seed: int = 7) -> object:
    rand = random.Random(seed)

    async def behaviour(push: Push) -> int:
        return 500 if rand.random() < rate else 200

    return behaviour


async def test_200_subscribers_each_get_every_record_despite_failures_and_commit_to_the_end(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=4)
    records, subscribers = 40, 200
    receiver = await Receiver(flaky(0.2)).start()  # type: ignore[arg-type]
    ids = [f"f{n}" for n in range(subscribers)]
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_many(api, ids, topic, receiver.url)
            await produce(kafka_bootstrap, topic, records, partitions=4)
            await receiver.wait_for(lambda: len(receiver.delivered()) == records * subscribers,
                                    timeout_s=120)
            the_member = member(runtime)
            assert len(the_member.owned) == 4  # one read per partition, not one per cursor
            groups = [f"g-{i}" for i in ids]

            async def all_committed() -> bool:
                found = await group_positions(runtime, groups, topic, 4)
                return all(p == {0: 10, 1: 10, 2: 10, 3: 10} for p in found.values())

            await eventually(all_committed)
    finally:
        await receiver.stop()
    failures = len(receiver.pushes) - len(receiver.ok)
    assert failures > 0.1 * records * subscribers  # the failures did happen
    consumers = {c for c, _t, _p, _o in receiver.delivered()}
    assert consumers == {f"{i}_g-{i}" for i in ids}


async def test_a_hung_subscriber_holds_only_its_own_cursor_and_gets_everything_after(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=1)
    healed = asyncio.Event()

    async def hangs_until_healed(push: Push) -> int:
        if push.consumer.startswith("hung_"):
            await healed.wait()
        return 200

    receiver = await Receiver(hangs_until_healed).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_many(api, ["hung", "a", "b"], topic, receiver.url, concurrency=20)
            # the hung cursor's window (20) and buffer fill; the others go on: 3,000 records
            # is more than the shared buffer keeps, so it must read on its own after
            await produce(kafka_bootstrap, topic, 3000)

            def others_done() -> bool:
                got = {(c, o) for c, _t, _p, o in receiver.delivered()}
                return sum(1 for c, _o in got if not c.startswith("hung_")) == 6000

            await receiver.wait_for(others_done, timeout_s=60)
            hung_so_far = sum(1 for c, *_ in receiver.delivered() if c.startswith("hung_"))
            assert hung_so_far == 0
            seen = await member(runtime).ask(StatusQuery("hung_g-hung"))
            assert seen.cursors == {f"{topic}-0": "paused"}
            fanout = member(runtime).fanouts[TopicPartition(topic, 0)]
            stopped_at = fanout.cursors["hung_g-hung"].next
            # the shared buffer no longer holds where it stopped: a read of its own follows
            assert stopped_at is not None and fanout.ring[0].offset > stopped_at, fanout
            healed.set()
            await receiver.wait_for(lambda: len(receiver.delivered()) == 9000, timeout_s=60)
    finally:
        healed.set()
        await receiver.stop()
    hung = sorted(o for c, _t, _p, o in receiver.delivered() if c.startswith("hung_"))
    assert hung == list(range(3000))


async def test_a_subscriber_added_later_starts_at_its_group_commit_without_a_rebalance(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=2)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_many(api, ["first"], topic, receiver.url)
            await produce(kafka_bootstrap, topic, 100, partitions=2)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 100)
            the_member = member(runtime)
            rebalances = the_member.rebalances
            # the late group already committed 30 of partition 0 elsewhere
            offsets = the_member.offsets
            assert offsets is not None
            await offsets.commit({"g-late": {TopicPartition(topic, 0): 30}})
            await subscribe_many(api, ["late"], topic, receiver.url)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 100 + 20 + 50)
            assert the_member.rebalances == rebalances  # same topic: no rebalance
    finally:
        await receiver.stop()
    late = sorted((p, o) for c, _t, p, o in receiver.delivered() if c == "late_g-late")
    assert late == [(0, o) for o in range(30, 50)] + [(1, o) for o in range(50)]


async def test_unsubscribing_one_cursor_commits_it_and_the_others_go_on(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=1)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_many(api, ["stay", "go"], topic, receiver.url)
            await produce(kafka_bootstrap, topic, 50)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 100)
            status, _ = await api.call("POST", "/broker/unsubscribe",
                                       {"id": "go", "group.id": "g-go"})
            assert status == 200
            positions = await group_positions(runtime, ["g-go"], topic, 1)
            assert positions == {"g-go": {0: 50}}
            await produce(kafka_bootstrap, topic, 10, start=50)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 110)
    finally:
        await receiver.stop()
    assert sum(1 for c, *_ in receiver.delivered() if c == "go_g-go") == 50


async def test_a_leave_draining_a_hung_endpoint_does_not_hold_the_others_fetch(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32, item 10: an unsubscribe waits for its cursor's drain (pushes in flight
    to an endpoint that answers late) on a task of its own; meanwhile the member fetches
    and every other subscription of the topic gets what is produced."""
    topic = await topic_factory(partitions=1)
    release = asyncio.Event()

    async def slow_for_go(push: Push) -> int:
        if push.consumer.startswith("go_") and push.offset >= 10:
            await release.wait()  # held: the drain of "go" waits for these answers
        return 200

    receiver = await Receiver(slow_for_go).start()
    # drain and stop limits longer than the waits below (2.5 and 3.5 s): the leave is
    # still draining then, however slow the machine
    for limit, ms in (("DRAIN_MS", 20_000), ("CONSUMER_STOP_MS", 21_000),
                      ("SUBSCRIPTION_STOP_MS", 22_000)):
        monkeypatch.setattr(trees, limit, ms)
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_many(api, ["stay", "go"], topic, receiver.url)
            await produce(kafka_bootstrap, topic, 14)
            await receiver.wait_for(
                lambda: len(receiver.pushes) == 14 + 14)  # go's last 4 held in flight
            async with asyncio.TaskGroup() as group:  # the leave's call ends with the test
                leaving = group.create_task(api.call(
                    "POST", "/broker/unsubscribe", {"id": "go", "group.id": "g-go"}))
                seats = member(runtime).seats
                await until(lambda: bool(seats.retiring), what="the leave draining")
                await produce(kafka_bootstrap, topic, 50, start=14)
                await receiver.wait_for(lambda: sum(
                    1 for c, *_ in receiver.delivered() if c == "stay_g-stay") == 64, 10)
                assert not leaving.done()  # the others got everything while it drained
                release.set()
            status, _ = leaving.result()
            assert status == 200
    finally:
        release.set()
        await receiver.stop()
    assert receiver.duplicates() == []


async def test_a_drain_cut_at_its_deadline_is_journaled_and_its_records_go_again(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An unsubscribe whose drain reaches its deadline with a push still in flight hands
    over the position of that record: the next subscription of the group pushes it and
    what was finished above it again, and the journal says so (`drain_cut`), which is
    what tells such duplicates from a stop that commits short for nothing."""
    topic = await topic_factory(partitions=1)
    release = asyncio.Event()

    async def hangs_at_5(push: Push) -> int:
        if push.consumer == cut_sub and push.offset == 5 and not release.is_set():
            await release.wait()  # in flight past the drain's deadline
        return 200

    def of_cut(keys: Iterable[tuple[str, str, int, int]]) -> list[int]:
        return sorted(offset for sub, *_, offset in keys if sub == cut_sub)

    def ok_of_cut() -> int:
        return sum(1 for push in receiver.ok if push.consumer == cut_sub)

    receiver = await Receiver(hangs_at_5).start()
    monkeypatch.setattr(trees, "DRAIN_MS", 300)
    cut_sub = "cut_g-cut"
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)  # two subscriptions of the topic: the instance member's
            await subscribe_many(api, ["stay", "cut"], topic, receiver.url, concurrency=10)
            await produce(kafka_bootstrap, topic, 10)
            await receiver.wait_for(lambda: ok_of_cut() == 9)  # all but offset 5
            status, _ = await api.call("POST", "/broker/unsubscribe",
                                       {"id": "cut", "group.id": "g-cut"})
            assert status == 200
            assert await group_positions(runtime, ["g-cut"], topic, 1) == {"g-cut": {0: 5}}
            release.set()
            await subscribe_many(api, ["cut"], topic, receiver.url, concurrency=10)
            await receiver.wait_for(lambda: ok_of_cut() >= 9 + 5)
            assert "hookstream_drain_cuts_total 1" in runtime.metrics.render().splitlines()
    finally:
        release.set()
        await receiver.stop()
    assert of_cut(receiver.delivered()) == list(range(10))
    assert set(of_cut(receiver.duplicates())) >= {6, 7, 8, 9}
    cuts = journal_events(tmp_path / "journal", "drain_cut")
    assert [(c["subscription"], c["topic"], c["partition"], c["offset"]) for c in cuts] \
        == [(cut_sub, topic, 0, 5)]
    assert cuts[0]["reason"] == "1 in flight at the drain deadline; 4 finished above " \
        "position 5 go again"
    assert receiver.unexplained_duplicates(tmp_path / "journal") == []


async def test_a_subscriber_reset_to_latest_gets_only_records_produced_after_it_started(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=1)
    for i in range(20):  # one record per batch: the embedded broker's end offset is right
        await produce(kafka_bootstrap, topic, 1, start=i)  # then (compat.py quirk 2)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            body = subscription("new", [{"name": topic}], receiver.url)
            body["properties"]["auto.offset.reset"] = "latest"
            commits: list[int | None] = []
            runtime.listen("committed", lambda e: commits.append(e.offset)
                           if e.subscription == "new_g-new" else None)
            await Admin(runtime).subscribe(body)

            async def live() -> bool:
                shown = await member(runtime).ask(StatusQuery("new_g-new"))
                return bool(shown.cursors == {f"{topic}-0": "live"})

            await eventually(live)
            await produce(kafka_bootstrap, topic, 5, start=20)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 5)
            # committed past 24: had it started before 20, 0..19 came first
            await until(lambda: 25 in commits, what="the commit of 25")
    finally:
        await receiver.stop()
    assert sorted(o for *_, o in receiver.delivered()) == [20, 21, 22, 23, 24]


async def test_a_group_with_a_live_member_refuses_commits_until_it_leaves_and_nothing_is_lost(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    """A rolling upgrade: an instance of the older version (here a plain consumer of the
    subscription's group) is still a member while the new one commits without membership."""
    topic = await topic_factory(partitions=1)
    old = make_consumer(kafka_bootstrap, topic, group_id="g-held", enable_auto_commit=False,
                        **fast_group_kwargs)
    await old.start()

    async def old_instance_polls() -> None:
        while True:  # what it fetches, it does not deliver: it is on its way out
            await old.getmany(timeout_ms=100)

    polling = asyncio.create_task(old_instance_polls())
    receiver = await Receiver().start()
    try:
        await eventually(lambda: _true(bool(old.assignment())))
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await api.subscribe(subscription("held", [{"name": topic}], receiver.url))
            await produce(kafka_bootstrap, topic, 30)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 30)

            async def refused() -> bool:
                _, body = await api.call("GET", "/broker/subscription/held/g-held")
                error = body["data"]["status"]["member"]["commitError"]
                return bool(error) and "live members" in error

            await eventually(refused)
            polling.cancel()
            # the old instance leaves the group, as an instance of the previous version does
            # on its way out (runtime/kafka/compat.py quirks 6 and 9)
            assert await compat.leave_group(old)
            await asyncio.wait_for(old.stop(), 15)

            async def committed_to_the_end() -> bool:
                return (await group_positions(runtime, ["g-held"], topic, 1)) == {
                    "g-held": {0: 30}}

            await eventually(committed_to_the_end)
            _, body = await api.call("GET", "/broker/subscription/held/g-held")
            assert body["data"]["status"]["member"]["commitError"] is None
    finally:
        polling.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(old.stop(), 15)
        await receiver.stop()
    assert sorted(o for *_, o in receiver.delivered()) == list(range(30))


async def test_a_commit_round_is_journaled_as_one_event_naming_every_cursor_it_moved(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    """Issue 35: the member journals a commit round as one `committed` event, and the
    deliveries it passes are journaled ahead of it."""
    topic = await topic_factory(partitions=2)
    ids = ["ra", "rb", "rc"]
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            heard: set[tuple[str | None, int | None, int | None]] = set()
            runtime.listen("committed", lambda e: heard.add((e.subscription, e.partition,
                                                              e.offset)))
            await subscribe_many(Admin(runtime), ids, topic, receiver.url)
            await produce(kafka_bootstrap, topic, 40, partitions=2)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3 * 40)
            await until(lambda: {(f"{i}_g-{i}", p, 20) for i in ids for p in (0, 1)} <= heard,
                        what="every cursor's commit of 20")
    finally:
        await receiver.stop()
    events = [event for segment in closed_segments(tmp_path / "journal")
              for line in segment.read_bytes().splitlines()
              for event in [DECODER.decode(line)]]
    rounds = [e for e in events if e.type == "committed" and e.positions is not None]
    assert rounds and max(len(e.positions or []) for e in rounds) > 1
    written: set[tuple[str, int, int]] = set()
    for event in events:  # every delivery a commit passes is on disk before it
        for one in expand(event):
            if one.type == "delivered":
                written.add((one.subscription or "", one.partition or 0, one.offset or 0))
            elif one.type == "committed" and one.subscription in {f"{i}_g-{i}" for i in ids}:
                sub, partition = one.subscription or "", one.partition or 0
                assert all((sub, partition, o) in written for o in range(one.offset or 0))


async def test_a_subscriptions_cursors_read_their_group_in_one_request_and_the_gauge_says_so(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32, item 12: the cursors of one subscription are claimed together, so its
    group's committed offsets are read once for all its partitions (claimed a partition
    after another, 10,000 subscribers' groups were each read four times and the reads ran
    seconds past the last cursor's start); `hookstream_group_cursors_awaiting_position`
    counts the cursors waiting for such a read, and is 0 once every one is placed."""
    topic = await topic_factory(partitions=4)
    ids = [f"w{n}" for n in range(48)]
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            api = Admin(runtime)
            await subscribe_many(api, ["first"], topic, receiver.url)
            await produce(kafka_bootstrap, topic, 4, partitions=4)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 4)  # partitions owned
            first_reads: dict[str, list[int]] = {}  # group -> partitions of its first read
            awaiting_then: list[float] = []
            send_all = pipeline.send_all

            def watched(conn: Any, requests: Sequence[Any]) -> Any:  # every request sent
                for request in requests:
                    if isinstance(request, OffsetFetchRequest):
                        group, wanted = request._consumer_group, request._partitions or []
                        first_reads.setdefault(group, [p for _t, ps in wanted for p in ps])
                        awaiting_then.append(awaiting(runtime))
                return send_all(conn, requests)

            monkeypatch.setattr(pipeline, "send_all", watched)
            await subscribe_many(api, ids, topic, receiver.url)
            await produce(kafka_bootstrap, topic, 4, partitions=4)
            # each new subscription from the start: the 8 records; the first the 4 new
            await receiver.wait_for(lambda: len(receiver.delivered()) == 8 + 48 * 8,
                                    timeout_s=60)
            assert awaiting(runtime) == 0
    finally:
        await receiver.stop()
    assert {f"g-{i}" for i in ids} <= set(first_reads)
    split = {g: ps for g, ps in first_reads.items()
             if g.startswith("g-w") and sorted(ps) != [0, 1, 2, 3]}
    assert not split, f"groups whose first read named only some partitions: {split}"
    assert max(awaiting_then) > 0  # a read under way is counted


def awaiting(runtime: Runtime) -> float:
    family = runtime.metrics.gauge("hookstream_group_cursors_awaiting_position", "")
    return sum(child.value for child in family.children.values())
