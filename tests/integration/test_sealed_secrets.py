"""Cluster mode: a subscription's secrets are sealed in the subscriptions topic with
`[cluster] secrets_key` (#25 item 9). The raw records hold no secret text; another
instance with the key delivers with the secrets; one without the key, or with another,
does not run the subscription and says why; without a key a secret in clear is a 400;
a record of the previous version (secrets in clear) is read and sealed when next written
(real broker, real runtimes, real receiver)."""

from __future__ import annotations

import base64
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from actors.delivery.document.store import encode
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.sealing import key_id
from runtime.kafka import create_topics, make_producer
from tests import waits
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    make_runtime,
    produce,
    subscription,
    until,
)

pytestmark = pytest.mark.integration

TOKEN = "Bearer tok-" + uuid.uuid4().hex
SIGNING = "whsec_" + base64.b64encode(os.urandom(24)).decode()
QUERY_SECRET = "q-" + uuid.uuid4().hex
SECRETS = (TOKEN, SIGNING, QUERY_SECRET, SIGNING.removeprefix("whsec_"))


def key_file(tmp: Path, name: str) -> tuple[str, bytes]:
    """A `${file:...}` reference to a new key, and the key."""
    key = os.urandom(32)
    path = tmp / name
    path.write_text(base64.b64encode(key).decode() + "\n")
    return f"${{file:{path}}}", key


def instance(bootstrap: str, tmp: Path, topic: str, key: str = "") -> Runtime:
    cluster: dict[str, Any] = {"subscriptions_topic": topic, "replication_factor": 1}
    if key:
        cluster["secrets_key"] = key
    return make_runtime(bootstrap, tmp, cluster=cluster)


def secret_body(topic: str, url: str, fast_group: dict[str, int]) -> dict[str, Any]:
    return subscription("sealed", [{"name": topic}], f"{url}?apikey={QUERY_SECRET}",
                        fast_group=fast_group, signingSecret=SIGNING,
                        additionalHeaders={"Authorization": TOKEN})


async def raw_records(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The values of the first `count` records of `topic`, read by a plain consumer."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    values: list[bytes] = []

    async def all_read() -> bool:
        batch = await consumer.getmany(timeout_ms=500)
        values.extend(r.value or b"" for rs in batch.values() for r in rs)
        return len(values) >= count

    try:
        await waits.until(all_read, timeout_s=15, poll_s=0, what=f"{count} records in {topic}")
    finally:
        await consumer.stop()
    return values


async def test_the_topic_holds_no_secret_and_another_instance_delivers_with_them(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    subs = f"subs-{uuid.uuid4().hex[:8]}"
    key, _ = key_file(tmp_path, "key")
    receiver = await Receiver().start()
    try:
        async with instance(kafka_bootstrap, tmp_path / "a", subs, key) as first:
            await Admin(first).subscribe(secret_body(topic, receiver.url, fast_group_kwargs))
        (value,) = await raw_records(kafka_bootstrap, subs, 1)
        assert b'"sealed"' in value and b'"aes-256-gcm"' in value
        for secret in SECRETS:
            assert secret.encode() not in value
        async with instance(kafka_bootstrap, tmp_path / "b", subs, key) as second:
            await until(lambda: second.service(DeliveryService).status.get(
                "sealed_g-sealed") is not None)
            await produce(kafka_bootstrap, topic, 3)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
    finally:
        await receiver.stop()
    assert {p.headers["Authorization"] for p in receiver.ok} == {TOKEN}
    assert {p.query["apikey"] for p in receiver.ok} == {QUERY_SECRET}
    assert all(p.headers["webhook-signature"].startswith("v1,") for p in receiver.ok)


@pytest.mark.parametrize("which", ["none", "another"])
async def test_an_instance_that_cannot_open_the_secrets_does_not_run_it_and_says_why(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], caplog: pytest.LogCaptureFixture,
        which: str) -> None:
    topic = await topic_factory()
    subs = f"subs-{uuid.uuid4().hex[:8]}"
    key, raw_key = key_file(tmp_path, "key")
    other = key_file(tmp_path, "other")[0] if which == "another" else ""
    expected = ("[cluster] secrets_key is not set" if which == "none"
                else f"sealed with key {key_id(raw_key)}")
    async with instance(kafka_bootstrap, tmp_path / "a", subs, key) as first:
        await Admin(first).subscribe(secret_body(topic, "http://127.0.0.1:9/hook",
                                                 fast_group_kwargs))
    caplog.set_level(logging.ERROR, "actors.delivery.control.source")
    async with instance(kafka_bootstrap, tmp_path / "b", subs, other) as second:
        admin = Admin(second)
        status, ready = await admin.call("GET", "/readyz")
        _, listed = await admin.call("GET", "/broker/subscription")
    assert status == 503
    reasons = [r for r in ready["reasons"] if "sealed_g-sealed" in r]
    assert reasons and "secrets cannot be opened" in reasons[0] and expected in reasons[0]
    assert listed["data"] == []  # not run without its secrets
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert [m for m in errors if "sealed_g-sealed" in m and expected in m], errors


async def test_a_secret_in_clear_without_a_key_is_a_400_naming_the_setting(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKSTREAM_SEALED_TEST_TOKEN", TOKEN)
    topic = await topic_factory()
    subs = f"subs-{uuid.uuid4().hex[:8]}"
    async with instance(kafka_bootstrap, tmp_path, subs) as runtime:
        status, reply = await Admin(runtime).call("POST", "/broker/subscription", secret_body(
            topic, "http://127.0.0.1:9/hook", fast_group_kwargs))
        assert status == 400, reply
        assert "[cluster] secrets_key" in reply["details"]
        assert "subscriptionMethod.additionalHeaders.Authorization" in reply["details"]
        for secret in SECRETS:
            assert secret not in str(reply)
        await Admin(runtime).subscribe(subscription(  # a reference is no secret
            "ref", [{"name": topic}], "http://127.0.0.1:9/hook", fast_group=fast_group_kwargs,
            additionalHeaders={"Authorization": "${env:HOOKSTREAM_SEALED_TEST_TOKEN}"}))


async def test_a_record_of_the_previous_version_runs_and_is_sealed_when_next_written(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "actors.delivery.control.source")
    topic = await topic_factory()
    subs = f"subs-{uuid.uuid4().hex[:8]}"
    key, _ = key_file(tmp_path, "key")
    receiver = await Receiver().start()
    old = decode_consumer(secret_body(topic, receiver.url, fast_group_kwargs))
    await create_topics(kafka_bootstrap, {subs: 1}, configs={"cleanup.policy": "compact"})
    producer = make_producer(kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(subs, encode(old), key=old.key.encode())
    finally:
        await producer.stop()
    try:
        async with instance(kafka_bootstrap, tmp_path, subs, key) as runtime:
            admin = Admin(runtime)
            await until(lambda: runtime.service(DeliveryService).status.get(
                "sealed_g-sealed") is not None)
            await produce(kafka_bootstrap, topic, 2)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 2)
            _, shown = await admin.call("GET", "/broker/subscription/sealed/g-sealed")
            document = shown["data"]["consumer"]
            document["subscriptionMethod"]["timeoutMs"] = 20_000
            status, reply = await admin.call("PUT", "/broker/subscription/sealed/g-sealed",
                                             document)
            assert status == 200, reply
            await produce(kafka_bootstrap, topic, 1, start=2)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
    finally:
        await receiver.stop()
    first, second = await raw_records(kafka_bootstrap, subs, 2)
    assert TOKEN.encode() in first  # written by the previous version
    assert b'"sealed"' in second
    for secret in SECRETS:
        assert secret.encode() not in second
    assert {p.headers["Authorization"] for p in receiver.ok} == {TOKEN}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in warned if "sealed_g-sealed" in m and "a PUT of it seals them" in m
            and TOKEN not in m], warned
