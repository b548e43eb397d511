"""Secured Kafka end to end: TLS (with and without client certificates), SASL PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER, from the clients runtime/kafka builds and from a whole
runtime, against a real broker behind a real TLS/SASL listener (tests/integration/
kafka_front.py: the embedded broker serves neither itself, see runtime/kafka/compat.py).

The broker advertises only the front's address, so every connection goes through it; a
client that does not speak its TLS or SASL cannot produce, fetch or join a group.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from actors.delay.book import DELAY_TARGET
from actors.delay.service import DelayService
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import load_config, parse_config
from runtime.kafka import create_topics, make_consumer, make_producer, security
from runtime.kafka.security import Security
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    produce,
    runtime_config,
    subscription,
)
from tests.integration.kafka_front import KafkaFront, SaslUsers, TlsFiles, fronted_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

FAST_GROUP = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}
USERS = SaslUsers(passwords={"alice": "wonderland", "bob": "builder"},
                  tokens={"token-of-the-day"})


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return TlsFiles.make(tmp_path)


@pytest.fixture
def forget_registrations() -> Iterator[list[str]]:
    """Addresses a test registers (itself or through a runtime), unregistered after it."""
    addresses: list[str] = []
    yield addresses
    for address in addresses:
        security.unregister(address)


@pytest.fixture
async def tls_front(tls: TlsFiles, forget_registrations: list[str]
                    ) -> AsyncIterator[KafkaFront]:
    front = KafkaFront(tls=tls.server_context())
    async with fronted_broker(front):
        forget_registrations.append(front.address)
        yield front


@pytest.fixture
async def sasl_front(tls: TlsFiles, forget_registrations: list[str]
                     ) -> AsyncIterator[KafkaFront]:
    front = KafkaFront(tls=tls.server_context(), users=USERS)
    async with fronted_broker(front):
        forget_registrations.append(front.address)
        yield front


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _roundtrip(address: str) -> list[bytes]:
    """Create a topic, produce three records, read them back through a consumer group:
    admin client, producer and group consumer all connect as registered for `address`."""
    topic = _name("sec")
    await create_topics(address, {topic: 1})
    await produce(address, topic, 3)
    consumer = make_consumer(address, topic, group_id=_name("g"), auto_offset_reset="earliest",
                             enable_auto_commit=False, **FAST_GROUP)
    await consumer.start()
    try:
        values: list[bytes] = []
        async with asyncio.timeout(20):
            while len(values) < 3:
                batches = await consumer.getmany(timeout_ms=200)
                values += [r.value for records in batches.values() for r in records]
        await consumer.commit()
        return values
    finally:
        await consumer.stop()


async def _refused(address: str, **kwargs: Any) -> None:
    producer = make_producer(address, request_timeout_ms=5000, **kwargs)
    try:
        with pytest.raises(KafkaConnectionError):
            async with asyncio.timeout(20):
                await producer.start()
    finally:
        await producer.stop()


# -- TLS, client by client ---------------------------------------------------------------------


async def test_clients_of_a_registered_address_speak_tls_to_it(
        tls_front: KafkaFront, tls: TlsFiles) -> None:
    security.register(tls_front.address, Security(security_protocol="SSL",
                                                  ssl_cafile=str(tls.ca)))

    assert await _roundtrip(tls_front.address) == [b"v0", b"v1", b"v2"]
    assert tls_front.accepted > 0


async def test_a_plaintext_client_cannot_use_the_tls_listener(tls_front: KafkaFront) -> None:
    await _refused(tls_front.address)  # nothing registered: PLAINTEXT


async def test_a_broker_certificate_from_another_ca_is_refused(
        tls_front: KafkaFront, tls: TlsFiles) -> None:
    security.register(tls_front.address, Security(security_protocol="SSL",
                                                  ssl_cafile=str(tls.other_ca)))

    await _refused(tls_front.address)


async def test_a_certificate_for_another_host_is_refused_unless_the_check_is_off(
        tmp_path: Path, forget_registrations: list[str]) -> None:
    files = TlsFiles.make(tmp_path, hosts=("kafka.example.com",))
    front = KafkaFront(tls=files.server_context())
    async with fronted_broker(front):
        forget_registrations.append(front.address)
        checked = Security(security_protocol="SSL", ssl_cafile=str(files.ca))
        security.register(front.address, checked)
        await _refused(front.address)

        security.register(front.address, Security(security_protocol="SSL",
                                                  ssl_cafile=str(files.ca),
                                                  ssl_check_hostname=False))
        assert await _roundtrip(front.address) == [b"v0", b"v1", b"v2"]


async def test_a_broker_that_demands_a_client_certificate_gets_the_configured_one(
        tls: TlsFiles, forget_registrations: list[str]) -> None:
    front = KafkaFront(tls=tls.server_context(require_client_cert=True))
    async with fronted_broker(front):
        forget_registrations.append(front.address)
        security.register(front.address, Security(security_protocol="SSL",
                                                  ssl_cafile=str(tls.ca)))
        await _refused(front.address)

        security.register(front.address, Security(
            security_protocol="SSL", ssl_cafile=str(tls.ca),
            ssl_certfile=str(tls.client_cert), ssl_keyfile=str(tls.client_key)))
        assert await _roundtrip(front.address) == [b"v0", b"v1", b"v2"]


# -- SASL, mechanism by mechanism ----------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_password_mechanism_authenticates_every_client(
        sasl_front: KafkaFront, tls: TlsFiles, mechanism: str) -> None:
    security.register(sasl_front.address, Security(
        security_protocol="SASL_SSL", ssl_cafile=str(tls.ca), sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="alice", sasl_password="wonderland"))

    assert await _roundtrip(sasl_front.address) == [b"v0", b"v1", b"v2"]
    assert {entry for entry in sasl_front.authenticated} == {(mechanism, "alice")}
    assert sasl_front.refused == []


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_refused(sasl_front: KafkaFront, tls: TlsFiles,
                                           mechanism: str) -> None:
    security.register(sasl_front.address, Security(
        security_protocol="SASL_SSL", ssl_cafile=str(tls.ca), sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="alice", sasl_password="looking-glass"))

    await _refused(sasl_front.address)
    assert sasl_front.authenticated == []
    assert sasl_front.refused and all("bad password" in r for r in sasl_front.refused)


async def test_sasl_without_tls_authenticates_too(forget_registrations: list[str]) -> None:
    front = KafkaFront(users=USERS)
    async with fronted_broker(front):
        forget_registrations.append(front.address)
        security.register(front.address, Security(
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
            sasl_username="bob", sasl_password="builder"))

        assert await _roundtrip(front.address) == [b"v0", b"v1", b"v2"]
        assert {entry for entry in front.authenticated} == {("SCRAM-SHA-256", "bob")}


async def test_oauthbearer_sends_the_token_of_the_file(
        sasl_front: KafkaFront, tls: TlsFiles, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("token-of-the-day\n")
    security.register(sasl_front.address, Security(
        security_protocol="SASL_SSL", ssl_cafile=str(tls.ca), sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_file=str(token_file)))

    assert await _roundtrip(sasl_front.address) == [b"v0", b"v1", b"v2"]
    assert {m for m, _ in sasl_front.authenticated} == {"OAUTHBEARER"}

    token_file.write_text("yesterdays-token\n")  # rotated: the next connection uses it
    await _refused(sasl_front.address)
    assert sasl_front.refused == ["OAUTHBEARER: unknown bearer token"]


async def test_oauthbearer_sends_the_token_a_command_prints(
        sasl_front: KafkaFront, tls: TlsFiles) -> None:
    command = f"{sys.executable} -c \"print('token-of-the-day')\""
    security.register(sasl_front.address, Security(
        security_protocol="SASL_SSL", ssl_cafile=str(tls.ca), sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_command=command))

    assert await _roundtrip(sasl_front.address) == [b"v0", b"v1", b"v2"]
    assert {m for m, _ in sasl_front.authenticated} == {"OAUTHBEARER"}


# -- a whole runtime ------------------------------------------------------------------------------


async def test_a_runtime_on_a_tls_broker_delivers_dead_letters_and_shares_subscriptions(
        tls_front: KafkaFront, tls: TlsFiles, tmp_path: Path) -> None:
    """Every kind of client the delivery side opens: the cluster topic's admin, producer
    and consumer, the subscription's group consumer, the dead-letter producer."""
    address = tls_front.address
    broker = {"name": "Kafka", "bootstrap_servers": address, "security_protocol": "SSL",
              "ssl_cafile": str(tls.ca)}
    config = parse_config(runtime_config(
        address, tmp_path, brokers=[broker], cluster={"subscriptions_topic": _name("subs"),
                                                  "replication_factor": 1}))
    topic, dlt = _name("orders"), _name("dlt")

    async def poison(push: Push) -> int:
        return 500 if push.body == b"v4" else 200  # partition 0, offset 2

    receiver = await Receiver(poison).start()
    runtime = Runtime(config, services=[DeliveryService])
    await runtime.start()
    try:
        await create_topics(address, {topic: 2, dlt: 1})
        await produce(address, topic, 20, partitions=2)
        await Admin(runtime).subscribe(subscription(
            "tls", [{"name": topic}], receiver.url, fast_group=FAST_GROUP,
            retryBeforeCommit=1, delayOnErrorMs=20, deadLetterTopic=dlt))
        await receiver.wait_for(lambda: len(receiver.delivered()) == 19)
        dead = await _read(address, dlt, 1)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert [(r.value, dict(r.headers)["dlt-offset"]) for r in dead] == [(b"v4", b"2")]
    assert receiver.duplicates() == []


async def test_a_runtime_from_toml_with_scram_over_tls_runs_the_delay_queue_into_delivery(
        sasl_front: KafkaFront, tls: TlsFiles, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The password comes from a `${file:...}` reference, the user from `${env:...}`: the
    delay service's topic creation, level consumer and forwarding producer, and the
    delivery consumer all authenticate."""
    address = sasl_front.address
    (tmp_path / "password").write_text("wonderland\n")
    monkeypatch.setenv("HOOKSTREAM_TEST_KAFKA_USER", "alice")
    level, target = _name("delay"), _name("due")
    config_file = tmp_path / "secured.toml"
    config_file.write_text(f"""
[[brokers]]
name = "Kafka"
bootstrap_servers = "{address}"
security_protocol = "SASL_SSL"
ssl_cafile = "{tls.ca}"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "${{env:HOOKSTREAM_TEST_KAFKA_USER}}"
sasl_password = "${{file:{tmp_path / 'password'}}}"

[admin]
listen = "127.0.0.1:0"
[persistence]
dir = "{tmp_path / 'persist'}"
[journal]
enabled = false
[delay]
group_id = "{_name('delay')}"
partitions = 1
dead_letter_topic = "{_name('delay-dlt')}"
[[delay.levels]]
name = "300ms"
delay_ms = 300
topics = ["{level}"]
""")
    config = load_config(config_file)
    assert config.brokers[0].sasl_password == "wonderland"
    receiver = await Receiver().start()
    runtime = Runtime(config, services=[
        DeliveryService, lambda: DelayService(consumer_settings=FAST_GROUP)])
    await runtime.start()
    try:
        await create_topics(address, {target: 1})
        await Admin(runtime).subscribe(subscription(
            "late", [{"name": target}], receiver.url, fast_group=FAST_GROUP))
        producer = make_producer(address, acks="all")
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(level, f"v{i}".encode(),
                                             headers=[(DELAY_TARGET, target.encode())])
        finally:
            await producer.stop()
        await receiver.wait_for(lambda: len(receiver.delivered()) == 5)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert sorted(p.body for p in receiver.ok) == [f"v{i}".encode() for i in range(5)]
    assert {entry for entry in sasl_front.authenticated} == {("SCRAM-SHA-512", "alice")}
    assert sasl_front.refused == []


async def _read(address: str, topic: str, count: int) -> list[Any]:
    reader = make_consumer(address, topic, auto_offset_reset="earliest")
    await reader.start()
    try:
        out: list[Any] = []
        async with asyncio.timeout(15):
            while len(out) < count:
                batches = await reader.getmany(timeout_ms=200)
                out += [r for records in batches.values() for r in records]
        return out
    finally:
        await reader.stop()
