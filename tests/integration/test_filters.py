"""Filters (issue 26) on the embedded broker with real receivers on loopback: three
subscribers of one topic (a header list, a JSON prefix, no filter), with failures
induced, each receive exactly their subset, and every group commits to the end."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from actors.delivery.egress.handler import ConsumedRecord
from runtime.kafka import make_producer
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    subscription,
)
from tests.integration.test_batching import batch_of, wait_committed
from tests.integration.test_replay import _progress

RECORDS, PARTITIONS = 1200, 2
TYPES = ("order.created", "order.paid", "invoice.sent", "user.signup", "order.shipped")
Coordinates = tuple[int, int]  # partition, offset


def type_of(i: int) -> str:
    return TYPES[i % len(TYPES)]


async def produce_events(bootstrap: str, topic: str) -> dict[Coordinates, str]:
    """RECORDS JSON events, the type also in header `event-type` (every seventh record has
    a second, irrelevant `event-type`); returns each record's type by coordinates."""
    producer = make_producer(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = []
        for i in range(RECORDS):
            headers = [("event-type", type_of(i).encode())]
            if i % 7 == 0:
                headers.insert(0, ("event-type", b"noise"))
            value = json.dumps({"type": type_of(i), "n": i}).encode()
            futures.append(await producer.send(topic, value, key=f"k{i % 13}".encode(),
                                               partition=i % PARTITIONS, headers=headers))
        sent = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return {(meta.partition, meta.offset): type_of(i) for i, meta in enumerate(sent)}


def flaky(seed: int) -> Any:
    rand = random.Random(seed)

    async def answer(push: Push) -> int:
        return 500 if rand.random() < 0.1 else 200
    return answer


def single(receiver: Receiver) -> list[Coordinates]:
    return [(p.partition, p.offset) for p in receiver.ok]


def batched(receiver: Receiver) -> list[Coordinates]:
    return [(r["partition"], r["offset"]) for p in receiver.ok for r in batch_of(p)]


async def test_three_subscribers_each_receive_exactly_their_subset_despite_failures(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    types = await produce_events(kafka_bootstrap, topic)
    by_header = {c for c, t in types.items() if t in ("order.created", "invoice.sent")}
    by_json = {c for c, t in types.items() if t.startswith("order.")}
    receivers = [await Receiver(flaky(seed)).start() for seed in range(3)]
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    admin = Admin(runtime)
    header_filter = {"headers": {"event-type": ["order.created", "invoice.sent"]}}
    json_filter = {"json": {"type": {"prefix": "order."}}}
    try:
        await admin.subscribe(subscription(
            "by-header", [{"name": topic, "filter": header_filter,
                           "config": {"concurrencyFactor": 8, "ordering": "key"}}],
            receivers[0].url, fast_group=fast_group_kwargs))
        await admin.subscribe(subscription(
            "by-json", [{"name": topic, "filter": json_filter,
                         "config": {"concurrencyFactor": 4}}],
            receivers[1].url, fast_group=fast_group_kwargs, batchSize=20, batchLingerMs=10))
        await admin.subscribe(subscription(
            "everything", [{"name": topic, "config": {"concurrencyFactor": 8}}],
            receivers[2].url, fast_group=fast_group_kwargs))
        await receivers[0].wait_for(lambda: set(single(receivers[0])) >= by_header, 60)
        await receivers[1].wait_for(lambda: set(batched(receivers[1])) >= by_json, 60)
        await receivers[2].wait_for(lambda: len(set(single(receivers[2]))) == RECORDS, 60)
        ends = {0: RECORDS // PARTITIONS, 1: RECORDS // PARTITIONS}
        for group in ("g-by-header", "g-by-json", "g-everything"):
            await wait_committed(kafka_bootstrap, group, topic, ends)
        status, shown = await admin.call("GET", "/broker/subscription/by-json/g-by-json")
    finally:
        await runtime.stop()
        for receiver in receivers:
            await receiver.stop()
    assert set(single(receivers[0])) == by_header
    assert set(batched(receivers[1])) == by_json
    assert set(single(receivers[2])) == set(types)
    assert all(len(p.body) > 0 for r in receivers for p in r.ok)
    failures = sum(len(r.pushes) - len(r.ok) for r in receivers)
    assert failures > 0  # the retries were exercised
    assert status == 200
    assert shown["data"]["consumer"]["topics"][0]["filter"] == json_filter
    assert shown["data"]["status"]["counters"]["filtered"] == RECORDS - len(by_json)


async def test_a_bad_filter_is_a_400_naming_the_field_and_get_shows_a_good_one(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory()
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    try:
        async with runtime:
            admin = Admin(runtime)

            def with_filter(value: Any) -> dict[str, Any]:
                return subscription("f", [{"name": topic, "filter": value}], receiver.url)
            bad = {
                "invalid topics[0].filter.json.amount": {"json": {"amount": 42}},
                "invalid topics[0].filter.headers.event-type": {
                    "headers": {"event-type": {"equals": "a", "prefix": "b"}}},
                "invalid topics[0].filter.kind": {"kind": "x"},
                "invalid topics[0].filter.not.key.exists": {"not": {"key": {"exists": 1}}},
                "invalid topics[0].filter": "order.created",
                "invalid topics[0].filter.not.not.not.not.not": {
                    "not": {"not": {"not": {"not": {"not": {"key": "k"}}}}}},
            }
            for reason, value in bad.items():
                status, reply = await admin.call("POST", "/broker/subscription",
                                                 with_filter(value))
                assert (status, reply["reason"]) == (400, reason), reply
            good = {"headers": {"event-type": {"in": ["a", "b"]}}, "key": {"prefix": "t/"},
                    "json": {"customer.tier": "gold"}, "not": {"json": {"test": "true"}}}
            await admin.subscribe(with_filter(good))
            status, listed = await admin.call("GET", "/broker/subscription")
            assert status == 200
            shown = {"headers": {"event-type": ["a", "b"]}, "key": {"prefix": "t/"},
                     "json": {"customer.tier": "gold"}, "not": {"json": {"test": "true"}}}
            assert [c["topics"][0]["filter"] for c in listed["data"]] == [shown]
            changed = with_filter({"key": "only-this"})
            status, reply = await admin.call("PUT", "/broker/subscription/f/g-f", changed)
            assert status == 200, reply
            status, one = await admin.call("GET", "/broker/subscription/f/g-f")
            assert one["data"]["consumer"]["topics"][0]["filter"] == {"key": "only-this"}
    finally:
        await receiver.stop()


async def test_an_in_process_handler_receives_only_the_records_its_filter_matches(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    types = await produce_events(kafka_bootstrap, topic)
    wanted = {c for c, t in types.items() if t in ("order.paid", "user.signup")}
    handled: list[Coordinates] = []
    rand = random.Random(7)
    everything = asyncio.Event()

    async def handle(record: ConsumedRecord) -> None:
        if rand.random() < 0.1:
            raise RuntimeError("induced failure")
        handled.append((record.partition, record.offset))
        if set(handled) >= wanted:
            everything.set()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    async with runtime:
        consumer = await runtime.consume(
            "in-proc", handle, topics=[topic], delay_on_error_ms=20,
            filter={"json": {"type": ["order.paid", "user.signup"]}},
            properties={k.replace("_", "."): v for k, v in fast_group_kwargs.items()})
        await asyncio.wait_for(everything.wait(), 60)
        ends = {0: RECORDS // PARTITIONS, 1: RECORDS // PARTITIONS}
        await wait_committed(kafka_bootstrap, "in-proc", topic, ends)
        counters = consumer.status()["status"]
        await consumer.stop()
    assert set(handled) == wanted
    assert counters["counters"]["filtered"] == RECORDS - len(wanted)  # type: ignore[index]


async def test_a_replay_applies_the_current_filter_unless_asked_not_to(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    producer = make_producer(kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(20):
            await producer.send_and_wait(topic, json.dumps({"type": type_of(i)}).encode(),
                                         headers=[("event-type", type_of(i).encode())])
    finally:
        await producer.stop()
    wanted = {i for i in range(20) if type_of(i) == "invoice.sent"}
    receiver = await Receiver().start()
    replay = "/broker/subscription/rf/g-rf/replay"
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "rf", [{"name": topic, "filter": {"headers": {"event-type": "invoice.sent"}}}],
                receiver.url, fast_group=fast_group_kwargs))
            await receiver.wait_for(lambda: {p.offset for p in receiver.ok} == wanted)
            progress = []
            for apply in (True, False):
                status, body = await admin.call("POST", replay, {
                    "source": "topic", "topic": topic, "partition": 0, "fromOffset": 0,
                    "toOffset": 19, "applyFilter": apply})
                assert status == 202, body
                progress.append(await _progress(admin, f"{replay}/{body['data']['replayId']}"))
    finally:
        await receiver.stop()
    first, second = ({p.offset for p in receiver.ok if p.headers.get("QOH-Replay") == r}
                     for r in (progress[0]["replayId"], progress[1]["replayId"]))
    assert first == wanted and (progress[0]["delivered"], progress[0]["filtered"]) == (
        len(wanted), 20 - len(wanted))
    assert second == set(range(20)) and progress[1]["filtered"] == 0
