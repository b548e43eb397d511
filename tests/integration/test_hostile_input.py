"""Issue 13's findings at the front door, each one a request to a real runtime: no
request hangs it, crashes it, or fools it, and secrets stay out of every answer, the
journal and the metrics."""

from __future__ import annotations

import asyncio
import json
import random
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer

from actors.delivery.path.member import InstanceMemberActor
from runtime import Runtime
from runtime.kafka import compat, create_topics
from runtime.kafka.client import make_admin, make_consumer
from runtime.kernel import Supervisor
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    make_runtime,
    produce,
    subscription,
)
from tests.waits import until

pytestmark = pytest.mark.integration

HOOK = "http://127.0.0.1:9/hook"
SLOW_IN_RE = r"[ab]*(?:a|ba)*(?:a|ba)*\d{0,9}x?"


def document(sub_id: str, group: str, topics: list[dict[str, Any]], uri: str = HOOK,
             **method: Any) -> dict[str, Any]:
    return {"id": sub_id, "group": {"id": group}, "broker": "Kafka", "topics": topics,
            "subscriptionMethod": {"type": "http", "uri": uri, "delayOnErrorMs": 50,
                                   **method},
            "properties": {"session.timeout.ms": "2000", "heartbeat.interval.ms": "300"}}


def with_method(**method: Any) -> dict[str, Any]:
    return document("h", "g", [{"name": "t"}], **method)


def encoded(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


HOSTILE: list[tuple[str, bytes, int, str]] = [
    # (what, body, status, reason)
    ("invalid UTF-8 in a string", b'{"id": "\xff\xfe", "group": {"id": "g"}}', 400,
     "malformed JSON"),
    ("deep nesting", b'{"id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400,
     "malformed JSON"),
    ("a charset with NUL", encoded(with_method(charset="utf\x008")), 400,
     "invalid subscriptionMethod.charset"),
    ("a repetition count past 2**32",
     encoded(document("h", "g", [{"name": "a{4294967296}", "pattern": True}])), 400,
     "invalid topics[0].pattern"),
    ("5,000 nested groups",
     encoded(document("h", "g", [{"pattern": "(" * 5000 + "a" + ")" * 5000}])), 400,
     "invalid topics[0].pattern"),
    ("an empty topic name", encoded(document("h", "g", [{"name": ""}])), 400,
     "invalid topics[0].name"),
    ("an empty pattern", encoded(document("h", "g", [{"pattern": ""}])), 400,
     "invalid topics[0].pattern"),
    ("a group ending in a newline", encoded(document("h", "g\n", [{"name": "t"}])), 400,
     "invalid group.id"),
    ("a name too long to store", encoded(document("i" * 120, "g" * 100, [{"name": "t"}])),
     400, "invalid subscription name"),
    ("40,000 topics", encoded(document("h", "g", [{"name": f"t{i}"} for i in range(40_000)])),
     400, "invalid topics"),
    ("a path as a topic name", encoded(document("h", "g", [{"name": "../x"}])), 400,
     "invalid topics[0].name"),
    ("a 100,000-character topic name", encoded(document("h", "g", [{"name": "x" * 100_000}])),
     400, "invalid topics[0].name"),
    ("Content-Length: 0", encoded(with_method(additionalHeaders={"Content-Length": "0"})), 400,
     "invalid subscriptionMethod.additionalHeaders.Content-Length"),
    ("Transfer-Encoding", encoded(with_method(additionalHeaders={"Transfer-Encoding": "chunked"})),
     400, "invalid subscriptionMethod.additionalHeaders.Transfer-Encoding"),
    ("Host", encoded(with_method(additionalHeaders={"Host": "admin.internal"})), 400,
     "invalid subscriptionMethod.additionalHeaders.Host"),
    ("a header value with NUL", encoded(with_method(additionalHeaders={"X-A": "a\x00"})), 400,
     "invalid subscriptionMethod.additionalHeaders.X-A"),
    ("a header value with VT", encoded(with_method(additionalHeaders={"X-A": "a\x0b"})), 400,
     "invalid subscriptionMethod.additionalHeaders.X-A"),
    ("a header value with DEL", encoded(with_method(additionalHeaders={"X-A": "a\x7f"})), 400,
     "invalid subscriptionMethod.additionalHeaders.X-A"),
]


async def test_each_hostile_body_gets_a_json_4xx_naming_the_field_and_changes_nothing(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        for what, body, status, reason in HOSTILE:
            answer = await admin.call("POST", "/broker/subscription", raw=body)
            assert answer[0] == status and answer[1]["reason"] == reason, (what, answer)
        for what, body in (("invalid UTF-8", b'{"id": "\xff", "group": {"id": "g"}}'),
                           ("deep nesting", b"[" * 100_000 + b"]" * 100_000)):
            status, reply = await admin.call("POST", "/broker/unsubscribe", raw=body)
            assert (status, reply["reason"]) == (400, "malformed JSON"), what
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []
    assert list((tmp_path / "persist").glob("*.json")) == []


async def test_forms_multipart_and_text_are_refused_with_415(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    body = encoded(document("h", "g", [{"name": "t"}]))
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        for content_type in ("application/x-www-form-urlencoded", "text/plain",
                             "multipart/form-data; boundary=x"):
            status, reply = await admin.call("POST", "/broker/subscription", raw=body,
                                             headers={"Content-Type": content_type})
            assert (status, reply["reason"]) == (415, "unsupported media type"), content_type


async def test_a_catastrophic_pattern_is_refused_and_the_runtime_stays_responsive(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    await create_topics(kafka_bootstrap, {"a" * 30: 1})  # the name that hung `re`
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        for pattern in ("((a|a)*)*b", "(a+)+b", "(a|aa)*b", ".*a.*a.*a.*b"):
            # a hang bound, not a budget: matched by backtracking on the 30-a name these
            # take time exponential in its length
            async with asyncio.timeout(30):
                status, reply = await admin.call("POST", "/broker/subscription", document(
                    "p", "g", [{"name": pattern, "pattern": True}]))
            assert (status, reply["reason"]) == (400, "invalid topics[0].pattern"), pattern
        assert (await admin.call("GET", "/healthz"))[0] == 200


async def test_a_pattern_slow_in_python_re_is_matched_with_re2_and_subscribed_by_name(
        kafka_bootstrap: str, tmp_path: Path, fast_group_kwargs: dict[str, int]) -> None:
    """Issue 25, item 7: the pattern passes the backtracking bound, yet Python's `re`
    took 97 ms per such name, and aiokafka ran it against every topic on each refresh."""
    tag = uuid.uuid4().hex[:10]
    long_names = {"a" * 236 + f"c{tag}{i:02d}" for i in range(30)}  # 249 characters
    await create_topics(kafka_bootstrap, dict.fromkeys(long_names, 1))
    later = f"aba{random.randrange(10**9):09d}x"
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "hostile", [{"name": SLOW_IN_RE, "pattern": True}], receiver.url,
                fast_group=fast_group_kwargs))
            assert (await admin.call("GET", "/healthz"))[0] == 200
            await create_topics(kafka_bootstrap, {later: 1})
            await produce(kafka_bootstrap, later, 5)
            await receiver.wait_for(lambda: len(receiver.ok) >= 5)
            assert sorted((p.topic, p.offset) for p in receiver.ok) == [
                (later, n) for n in range(5)]
            assert (await admin.call("GET", "/healthz"))[0] == 200
            kafka = instance_member(runtime).kafka
            assert kafka is not None
            assert kafka._subscription.subscribed_pattern is None  # names, not a pattern
            assert later in kafka.subscription()
            assert not kafka.subscription() & long_names
            status, reply = await admin.call("GET", "/broker/subscription/hostile/g-hostile")
            assert status == 200, reply
            assert later in reply["data"]["status"]["member"]["patternTopics"]
    finally:
        await receiver.stop()


def instance_member(runtime: Runtime) -> InstanceMemberActor:
    groups = runtime.system.root.child("groups")
    assert isinstance(groups, Supervisor)
    [member] = [groups.child(name) for name in groups.children()]
    assert isinstance(member, InstanceMemberActor)
    return member


async def test_uri_credentials_and_query_values_show_nowhere_but_in_the_request(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory()
    await produce(kafka_bootstrap, topic, 3)
    receiver = await Receiver().start()
    uri = receiver.url.replace("http://", "http://user:pa55word@") + "?apikey=k3y-v4lue"
    secrets = ("pa55word", "k3y-v4lue", "hu5h", "c2VjcmV0")
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(document("s", "g", [{"name": topic}], uri=uri,
                                           additionalHeaders={"X-Auth": "hu5h"},
                                           signingSecret="whsec_c2VjcmV0"))
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
            shown = [await admin.call("GET", "/broker/subscription"),
                     await admin.call("GET", "/broker/subscription/s/g"),
                     await _text(admin.base + "/metrics")]
    finally:
        await receiver.stop()
    assert receiver.ok[0].query == {"apikey": "k3y-v4lue"}  # the endpoint still gets it
    assert receiver.ok[0].headers["Authorization"].startswith("Basic ")
    listed = shown[0][1]["data"][0]["subscriptionMethod"]["uri"]
    assert listed == f"http://***@127.0.0.1:{receiver.port}/hook?apikey=***"
    journal = "".join(p.read_text() for p in (tmp_path / "journal").glob("*.jsonl"))
    assert listed in journal  # the endpoint label is the redacted URI
    for secret in secrets:
        assert all(secret not in str(answer) for answer in shown), secret
        assert secret not in journal, secret


async def test_subscription_files_are_private(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory()
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        await Admin(runtime).subscribe(document("f", "g", [{"name": topic}],
                                                signingSecret="whsec_c2VjcmV0"))
    directory = tmp_path / "persist"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "f_g.json").stat().st_mode) == 0o600


async def _text(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


async def _topics(bootstrap: str) -> set[str]:
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _waiting_for(admin: Admin, path: str) -> list[str]:
    """The topics the subscription's member looked up and found missing."""
    status, reply = await admin.call("GET", path)
    assert status == 200, reply
    member = reply["data"]["status"].get("member") or {}
    return list(member.get("waitingForTopics", []))


async def _ask_metadata(consumer: AIOKafkaConsumer, topic: str) -> None:
    """Make the consumer's client request `topic`'s metadata, as subscribing would, and
    return once the answer is in (no group: a join would only cost time here)."""
    await consumer.start()
    try:
        await compat.client_of(consumer).set_topics([topic])
    finally:
        await consumer.stop()


async def test_a_consumer_never_asks_the_broker_to_create_a_topic(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    suffix = time.monotonic_ns()
    control = f"created-by-asking-{suffix}"
    await _ask_metadata(AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap), control)
    if control not in await _topics(kafka_bootstrap):
        pytest.skip("this broker does not create topics that a metadata request names")

    ours = f"never-created-{suffix}"
    await _ask_metadata(make_consumer(kafka_bootstrap), ours)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, _ = await admin.call("POST", "/broker/subscription", document(
            "n", "g", [{"name": f"{ours}-sub"}]))
        assert status == 200
        # the member asked the broker for the topic's metadata and found it missing
        # (with nothing to read it does not join the instance group)
        await until(lambda: _waiting_for(admin, "/broker/subscription/n/g"),
                    what="the member waits for the topic")
    assert not {ours, f"{ours}-sub"} & await _topics(kafka_bootstrap)


async def test_a_subscription_waits_for_its_topic_and_delivers_once_it_exists(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"created-later-{time.monotonic_ns()}"
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("late", [{"name": topic}], receiver.url))
            # the member looked the topic up before it exists: its appearance must still
            # bring an assignment
            waiting = await until(lambda: _waiting_for(admin, "/broker/subscription/late/g-late"),
                                  what="the member waits for the topic")
            assert waiting == [topic]
            assert topic not in await _topics(kafka_bootstrap)
            await produce(kafka_bootstrap, topic, 5)
            await receiver.wait_for(lambda: len(receiver.ok) >= 5)
            assert sorted(p.offset for p in receiver.ok) == [0, 1, 2, 3, 4]
    finally:
        await receiver.stop()


HOSTILE_REPLAYS: list[tuple[str, dict[str, Any], str]] = [
    # (what, body, a part of the details)
    ("an offset past int64", {"source": "topic", "partition": 0,
                              "fromOffset": 2**63}, "$.fromOffset"),
    ("a negative offset", {"source": "topic", "partition": 0, "toOffset": -1}, "$.toOffset"),
    ("a range that ends first", {"source": "topic", "partition": 0, "fromOffset": 5,
                                 "toOffset": 4}, "after toOffset"),
    ("a partition past int32", {"source": "topic", "partition": 2**31}, "$.partition"),
    ("a time that is no time", {"source": "deadLetter", "from": "yesterday"}, "ISO 8601"),
    ("a time before 1970", {"source": "deadLetter", "to": "0001-01-01"}, "before 1970"),
    ("a time past year 9999", {"source": "deadLetter", "to": 2**62}, "$.to"),
    ("times that end first", {"source": "deadLetter", "from": 10, "to": 9}, "after 'to'"),
    ("a limit of zero", {"source": "deadLetter", "limit": 0}, "$.limit"),
]


async def test_a_replay_with_offsets_or_times_out_of_range_is_a_400(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory()
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("rr", [{"name": topic}], receiver.url,
                                               deadLetterTopic=f"{topic}.dlt"))
            path = "/broker/subscription/rr/g-rr/replay"
            for what, body, detail in HOSTILE_REPLAYS:
                status, reply = await admin.call("POST", path, {**body, "topic": topic})
                assert (status, reply["reason"]) == (400, "invalid replay request"), (
                    what, status, reply)
                assert detail in reply["details"], (what, reply)
            assert (await admin.call("GET", "/healthz"))[0] == 200
    finally:
        await receiver.stop()


async def test_the_runtimes_own_topics_are_no_source_for_a_subscription_or_a_replay(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic, other = await topic_factory(), await topic_factory()
    subs = f"own-subs-{time.monotonic_ns()}"
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path, cluster={
                "subscriptions_topic": subs, "replication_factor": 1}) as runtime:
            admin = Admin(runtime)
            for topics in ([{"name": subs}], [{"name": "own-subs-.*", "pattern": True}]):
                status, reply = await admin.call("POST", "/broker/subscription",
                                                 subscription("o", topics, receiver.url))
                assert (status, reply["reason"]) == (400, "invalid topics[0]"), reply
            for field, method in (("deadLetterTopic", {"deadLetterTopic": subs}),
                                  ("retryTopics.topic", {"retryTopics": {
                                      "topic": subs, "delaysMs": [1000]}})):
                status, reply = await admin.call("POST", "/broker/subscription", subscription(
                    "o", [{"name": topic}], receiver.url, **method))
                assert (status, reply["reason"]) == (
                    400, f"invalid subscriptionMethod.{field}"), reply
            await admin.subscribe(subscription("rs", [{"name": topic}], receiver.url,
                                               deadLetterTopic=f"{topic}.dlt"))
            path = "/broker/subscription/rs/g-rs/replay"
            for source in (subs, other):  # secrets, or another team's records
                status, reply = await admin.call("POST", path, {
                    "source": "topic", "topic": source, "partition": 0})
                assert (status, reply["reason"]) == (400, "invalid replay request"), reply
            status, reply = await admin.call("POST", path, {
                "source": "topic", "topic": topic, "partition": 0})
            assert status == 202, reply
    finally:
        await receiver.stop()
