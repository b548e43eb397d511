"""Queue-Over-Http conformance (issue 9): documents in the exact shape Queue-Over-Http's
clients send (nested `group`, `pattern: true` with the regex in `name`, partition numbers
as strings, `charset: "UTF-8"`, a GET method with `queryParamKey`), each subscribed
through the admin API on the real broker; records produced; every pushed request checked
(path, method, body or query parameter, each `QOH-*` header, `webhook-id`); the answers
read back as a Queue-Over-Http client reads its own DTO; unsubscribed with the whole
document and with the short one. No client-side change is needed anywhere."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime.kafka import create_topics
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, Push, Receiver, make_runtime, produce

pytestmark = pytest.mark.integration


def qoh_document(uri: str, topics: list[dict[str, Any]], *, sub_id: str = "svc-1",
                 group: str = "svc", **method: Any) -> dict[str, Any]:
    """The issue's document, field for field, with the receiver and topics filled in."""
    return {
        "id": sub_id,
        "group": {"id": group, "name": "NO_NAME"},
        "broker": "Kafka",
        "topics": topics,
        "subscriptionMethod": {"type": "http", "uri": uri, "method": "POST",
                               "queryParamKey": "message", "charset": "UTF-8",
                               "additionalHeaders": {}, "delayOnErrorMs": 0,
                               "retryBeforeCommit": 0, **method},
    }


def topic(name: str, *, pattern: bool = False, partitions: list[str] | None = None,
          ) -> dict[str, Any]:
    return {"name": name, "pattern": pattern,
            "partitions": [{"number": n} for n in partitions or []],
            "config": {"concurrencyFactor": 1, "autoCommitPeriodMs": 0}}


STAMP_MS = 1_700_000_000_000  # record `v<i>` is produced with timestamp STAMP_MS + i


def stamp(i: int) -> int:
    return STAMP_MS + i


def webhook_id(topic_name: str, partition: int, offset: int, timestamp_ms: int) -> str:
    """The README's contract, computed here independently of the code under test."""
    fact = f"{topic_name}/{partition}/{offset}/{timestamp_ms}"
    return "msg_" + hashlib.sha256(fact.encode()).hexdigest()[:32]


def check_push(push: Push, *, consumer: str, topic_name: str, partition: int) -> None:
    """The headers of a push of record `v<i>` with key `key-<i>` (see `produce`)."""
    value = push.body.decode() or push.query.get("payload", "")
    assert push.headers["QOH-Consumer"] == consumer
    assert push.headers["QOH-Topic"] == topic_name
    assert push.headers["QOH-Partition"] == str(partition)
    assert push.headers["QOH-Broker"] == "Kafka"
    assert push.headers["QOH-Message-Key"] == "key-" + value.removeprefix("v")
    assert push.headers["QOH-Message-Number"] == str(push.offset)
    assert push.headers["webhook-id"] == webhook_id(
        topic_name, partition, push.offset, stamp(int(value.removeprefix("v"))))
    assert push.headers["webhook-timestamp"].isdecimal()


def read_as_qoh_dto(consumer: dict[str, Any]) -> dict[str, Any]:
    """What a Queue-Over-Http client's Kotlin DTO reads from an answer (Jackson, unknown
    fields ignored): each field present with the type the DTO declares."""
    group, method = consumer["group"], consumer["subscriptionMethod"]
    assert isinstance(consumer["id"], str) and isinstance(consumer["broker"], str)
    assert isinstance(group["id"], str) and isinstance(group["name"], str)
    for t in consumer["topics"]:
        assert isinstance(t["name"], str) and isinstance(t["pattern"], bool)
        assert all(isinstance(p["number"], str) for p in t["partitions"])
        assert isinstance(t["config"]["concurrencyFactor"], int)
        assert isinstance(t["config"]["autoCommitPeriodMs"], int)
    assert method["type"] == "http"
    for field in ("uri", "method", "queryParamKey", "charset"):
        assert isinstance(method[field], str), field
    assert isinstance(method["additionalHeaders"], dict)
    assert isinstance(method["delayOnErrorMs"], int)
    assert isinstance(method["retryBeforeCommit"], int)
    return consumer


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    started = await Receiver(path="/path").start()
    yield started
    await started.stop()


async def test_the_issue_document_subscribes_delivers_lists_and_unsubscribes_whole(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    name = await topic_factory(prefix="test")
    doc = qoh_document(receiver.url, [topic(name, partitions=["0"])])
    await produce(kafka_bootstrap, name, 5, key=lambda i: f"key-{i}".encode(),
                  timestamp=stamp)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        answer = await admin.subscribe(copy.deepcopy(doc))
        assert answer["success"] is True
        echoed = read_as_qoh_dto(answer["data"])
        assert echoed["group"] == doc["group"]
        assert echoed["topics"][0]["partitions"] == [{"number": "0"}]
        await receiver.wait_for(lambda: len(receiver.delivered()) == 5)
        listed = (await admin.call("GET", "/broker/subscription"))[1]["data"]
        assert [read_as_qoh_dto(c)["id"] for c in listed] == ["svc-1"]
        status, reply = await admin.call("POST", "/broker/unsubscribe", doc)
        assert status == 200 and reply["data"]["id"] == "svc-1"
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []
    for push in receiver.ok:
        assert (push.method, push.path, push.query) == ("POST", "/path", {})
        assert push.body == f"v{push.offset}".encode()
        assert push.headers["Content-Type"] == "text/plain; charset=UTF-8"
        check_push(push, consumer="svc-1_svc", topic_name=name, partition=0)
    assert sorted(p.offset for p in receiver.ok) == [0, 1, 2, 3, 4]


async def test_a_pattern_topic_takes_the_regex_in_name(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    first = await topic_factory(prefix="qohpat")
    prefix = first.rsplit("-", 1)[1]  # unique per test: `qohpat-<hex>`
    doc = qoh_document(receiver.url, [topic(f"(qohpat|other)-{prefix}(-b)?", pattern=True)],
                       sub_id="pat", group="pat-group")
    second = f"other-{prefix}-b"
    ignored = await topic_factory(prefix="qohpat-no")
    await create_topics(kafka_bootstrap, {second: 1})
    for name in (first, second, ignored):
        await produce(kafka_bootstrap, name, 3, key=lambda i: f"key-{i}".encode(),
                  timestamp=stamp)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        echoed = read_as_qoh_dto((await admin.subscribe(doc))["data"])
        assert echoed["topics"][0]["pattern"] is True
        assert echoed["topics"][0]["name"] == doc["topics"][0]["name"]
        await receiver.wait_for(lambda: len(receiver.delivered()) == 6, timeout_s=60)
        status, _ = await admin.call("POST", "/broker/unsubscribe",
                                     {"id": "pat", "group": {"id": "pat-group"}})
        assert status == 200
    assert {p.topic for p in receiver.ok} == {first, second}
    for push in receiver.ok:
        check_push(push, consumer="pat_pat-group", topic_name=push.topic, partition=0)


async def test_partitions_given_as_strings_pin_exactly_those(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    name = await topic_factory(partitions=3, prefix="qohpin")
    await produce(kafka_bootstrap, name, 9, partitions=3, key=lambda i: f"key-{i}".encode(),
                  timestamp=stamp)
    doc = qoh_document(receiver.url, [topic(name, partitions=["1", "2"])], sub_id="pin")
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        await admin.subscribe(doc)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 6)
        short = {"id": "pin", "group": {"id": "svc"}}
        assert (await admin.call("POST", "/broker/unsubscribe", short))[0] == 200
    assert {p.partition for p in receiver.ok} == {1, 2}
    for push in receiver.ok:
        check_push(push, consumer="pin_svc", topic_name=name, partition=push.partition)


async def test_a_get_method_sends_the_value_in_the_query_parameter(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    name = await topic_factory(prefix="qohget")
    await produce(kafka_bootstrap, name, 3, key=lambda i: f"key-{i}".encode(),
                  timestamp=stamp)
    doc = qoh_document(receiver.url, [topic(name, partitions=["0"])], sub_id="getter",
                       method="GET", queryParamKey="payload")
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        await admin.subscribe(doc)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
        assert (await admin.call("POST", "/broker/unsubscribe", doc))[0] == 200
    for push in receiver.ok:
        assert (push.method, push.path, push.body) == ("GET", "/path", b"")
        assert push.query == {"payload": f"v{push.offset}"}
        check_push(push, consumer="getter_svc", topic_name=name, partition=0)


async def test_unsubscribing_what_is_not_there_is_a_404_and_a_redacted_answer_still_works(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    name = await topic_factory(prefix="qohun")
    doc = qoh_document(receiver.url, [topic(name, partitions=["0"])], sub_id="un",
                       additionalHeaders={"Authorization": "Bearer hush"})
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, reply = await admin.call("POST", "/broker/unsubscribe", doc)
        assert (status, reply["reason"]) == (404, "subscription not found")
        shown = (await admin.subscribe(doc))["data"]  # header values come back as ***
        assert shown["subscriptionMethod"]["additionalHeaders"] == {"Authorization": "***"}
        assert (await admin.call("POST", "/broker/unsubscribe", shown))[0] == 200
