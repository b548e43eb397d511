"""Secret references in a subscription, end to end: a real receiver gets the resolved
header and a signature made with a secret read from a file (checked with a verifier
written from the Standard Webhooks text); the stored document, the cluster's topic and
`GET` keep the reference; an unresolvable reference is a 400 at subscribe time and a
`failed` subscription (with the reason, retried) on a restart or another instance."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    make_runtime,
    produce,
    subscription,
    until,
)
from tests.standard_webhooks import accepts

pytestmark = pytest.mark.integration

try:
    import standardwebhooks
except ImportError:  # a dev extra; the verifier written from the text runs regardless
    standardwebhooks = None

ENV = "HOOKSTREAM_TEST_RECEIVER_TOKEN"
TOKEN = "t0ken-from-the-environment"
NEW = "whsec_" + base64.b64encode(b"new-key-from-a-file").decode()
OLD = "whsec_" + base64.b64encode(b"old-key-from-a-file").decode()
REFERENCE = f"${{env:{ENV}}}"


def state(runtime: Runtime, key: str) -> tuple[str, str]:
    status = runtime.service(DeliveryService).status[key]
    return status.state, status.reason


async def topic_text(bootstrap: str, topic: str) -> str:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=3000)
        return "".join((r.value or b"").decode() for rs in batch.values() for r in rs)
    finally:
        await consumer.stop()


async def test_the_receiver_gets_the_resolved_header_and_a_signature_from_the_file_secret(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, TOKEN)
    secret_file = tmp_path / "signing-secret"
    secret_file.write_text(f"{NEW} {OLD}\n")  # rotation: the new secret and the old one
    topic = await topic_factory()
    await produce(kafka_bootstrap, topic, 3)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "refs", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs,
                additionalHeaders={"X-Token": REFERENCE},
                signingSecret=f"${{file:{secret_file}}}"))
            await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
            _, listed = await admin.call("GET", "/broker/subscription")
    finally:
        await receiver.stop()
    for push in receiver.ok:
        assert push.headers["X-Token"] == TOKEN
        assert len(push.headers["webhook-signature"].split(" ")) == 2
        assert accepts(NEW, push.headers, push.body)
        assert accepts(OLD, push.headers, push.body)
        assert not accepts("whsec_" + base64.b64encode(b"other").decode(), push.headers,
                           push.body)
        if standardwebhooks is not None:  # the specification's reference library, too
            for secret in (NEW, OLD):
                standardwebhooks.Webhook(secret).verify(push.body, push.headers,
                                                        json_parse=False)
    method = listed["data"][0]["subscriptionMethod"]
    assert method["additionalHeaders"] == {"X-Token": REFERENCE}
    assert method["signingSecret"] == f"${{file:{secret_file}}}"
    stored = "".join(p.read_text() for p in (tmp_path / "persist").rglob("*.json"))
    assert REFERENCE in stored and TOKEN not in stored and NEW not in stored
    journal = "".join(p.read_text() for p in (tmp_path / "journal").glob("*.jsonl"))
    assert TOKEN not in journal and NEW not in journal


async def test_an_unresolvable_reference_is_a_400_naming_field_and_reference(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    topic = await topic_factory()
    missing = tmp_path / "absent"
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, reply = await admin.call("POST", "/broker/subscription", subscription(
            "bad", [{"name": topic}], "http://127.0.0.1:9/hook",
            additionalHeaders={"X-Token": REFERENCE}))
        assert status == 400, reply
        assert reply["reason"] == "invalid subscriptionMethod.additionalHeaders.X-Token"
        assert reply["details"] == f"{REFERENCE}: the environment variable {ENV} is not set"
        status, reply = await admin.call("POST", "/broker/subscription", subscription(
            "bad", [{"name": topic}], "http://127.0.0.1:9/hook",
            signingSecret=f"${{file:{missing}}}"))
        assert status == 400, reply
        assert reply["reason"] == "invalid subscriptionMethod.signingSecret"
        assert reply["details"].startswith(f"${{file:{missing}}}: cannot read")
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []


async def test_an_update_with_an_unresolvable_reference_is_a_400_and_changes_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    topic = await topic_factory()
    body = subscription("upd", [{"name": topic}], "http://127.0.0.1:9/hook",
                        fast_group=fast_group_kwargs, additionalHeaders={"X-Token": "plain"})
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        await admin.subscribe(body)
        changed = {**body, "subscriptionMethod": {**body["subscriptionMethod"],
                                                  "additionalHeaders": {"X-Token": REFERENCE}}}
        status, reply = await admin.call("PUT", "/broker/subscription/upd/g-upd", changed)
        assert status == 400, reply
        assert reply["reason"] == "invalid subscriptionMethod.additionalHeaders.X-Token"
        assert REFERENCE in reply["details"]
        kept = runtime.service(DeliveryService).subscriptions["upd_g-upd"]
        assert kept.subscriptionMethod.additionalHeaders == {"X-Token": "plain"}
        assert state(runtime, "upd_g-upd")[0] == "running"


async def test_a_restart_without_the_variable_fails_the_subscription_until_it_is_back(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, TOKEN)
    topic = await topic_factory()
    receiver = await Receiver().start()
    body = subscription("later", [{"name": topic}], receiver.url,
                        fast_group=fast_group_kwargs, additionalHeaders={"X-Token": REFERENCE})
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            await Admin(runtime).subscribe(body)
        monkeypatch.delenv(ENV)
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            now, why = state(runtime, "later_g-later")
            assert now == "failed"
            assert "invalid subscriptionMethod.additionalHeaders.X-Token" in why
            assert f"{REFERENCE}: the environment variable {ENV} is not set" in why
            _, shown = await Admin(runtime).call("GET", "/broker/subscription/later/g-later")
            assert shown["data"]["status"]["state"] == "failed"
            monkeypatch.setenv(ENV, "t0ken-2")
            await until(lambda: state(runtime, "later_g-later")[0] == "running")
            await produce(kafka_bootstrap, topic, 2)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 2)
    finally:
        await receiver.stop()
    assert {p.headers["X-Token"] for p in receiver.ok} == {"t0ken-2"}


async def test_the_cluster_topic_keeps_the_reference_and_a_later_instance_fails_alone(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    subscriptions_topic = f"subs-{uuid.uuid4().hex[:8]}"
    secret_file = tmp_path / "token"
    secret_file.write_text(TOKEN)
    reference = f"${{file:{secret_file}}}"
    cluster = {"subscriptions_topic": subscriptions_topic, "replication_factor": 1}
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path / "a", cluster=cluster) as first:
            await Admin(first).subscribe(subscription(
                "shared", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs,
                additionalHeaders={"X-Token": reference}))
            secret_file.unlink()  # the next instance cannot read it
            async with make_runtime(kafka_bootstrap, tmp_path / "b", cluster=cluster) as second:
                await until(lambda: "shared_g-shared" in second.service(
                    DeliveryService).status)
                now, why = state(second, "shared_g-shared")
                assert now == "failed" and reference in why and "cannot read" in why
                assert state(first, "shared_g-shared")[0] == "running"
                await produce(kafka_bootstrap, topic, 4, partitions=2)
                await receiver.wait_for(lambda: len(receiver.delivered()) == 4)
    finally:
        await receiver.stop()
    assert {p.headers["X-Token"] for p in receiver.ok} == {TOKEN}
    text = await topic_text(kafka_bootstrap, subscriptions_topic)
    assert reference in text and TOKEN not in text


async def test_a_reference_outside_allow_references_is_a_400(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, TOKEN)
    topic = await topic_factory()
    async with make_runtime(kafka_bootstrap, tmp_path,
                            egress={"allow_references": ["env:HOOK_*"]}) as runtime:
        status, reply = await Admin(runtime).call("POST", "/broker/subscription", subscription(
            "deny", [{"name": topic}], "http://127.0.0.1:9/hook",
            additionalHeaders={"X-Token": REFERENCE}))
    assert status == 400, reply
    assert reply["reason"] == "invalid subscriptionMethod.additionalHeaders.X-Token"
    assert reply["details"] == f"{REFERENCE}: not allowed by [egress] allow_references"
