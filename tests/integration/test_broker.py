"""The embedded broker: it starts, carries records through a consumer group, and stops.

These tests start their own brokers (not the session's) because the broker's lifecycle is
what they check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from runtime.errors import BrokerError, UsageError
from runtime.kafka import create_topics, make_consumer, make_producer
from runtime.kafka.broker import EmbeddedBroker, port_accepts
from tests.waits import SLACK

pytestmark = pytest.mark.integration

FAST_GROUP = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


async def _consume(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    consumer = make_consumer(
        bootstrap, topic, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", **FAST_GROUP,
    )  # fmt: skip
    await consumer.start()
    try:
        values: list[bytes] = []
        async with asyncio.timeout(20):
            while len(values) < count:
                batches = await consumer.getmany(timeout_ms=200)
                values += [r.value for records in batches.values() for r in records]
        await consumer.commit()
        return values
    finally:
        await consumer.stop()


async def test_records_go_through_a_consumer_group_with_manual_commits() -> None:
    async with EmbeddedBroker() as broker:
        await create_topics(broker.bootstrap, {"orders": 2})
        producer = make_producer(broker.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("orders", b"v%d" % i, partition=i % 2)
        finally:
            await producer.stop()

        values = await _consume(broker.bootstrap, "orders", "g", count=10)

        assert sorted(values) == sorted(b"v%d" % i for i in range(10))
        reader = make_consumer(broker.bootstrap, group_id="g")
        await reader.start()
        try:
            committed = [await reader.committed(TopicPartition("orders", p)) for p in (0, 1)]
        finally:
            await reader.stop()
        assert committed == [5, 5]


async def test_stop_ends_the_process_and_closes_the_port() -> None:
    broker = EmbeddedBroker()
    await broker.start()
    pid, port = broker.pid, int(broker.bootstrap.rsplit(":", 1)[1])
    assert pid is not None and _alive(pid) and port_accepts("127.0.0.1", port)

    await broker.stop()

    assert broker.state == "stopped"
    assert not _alive(pid)
    assert not port_accepts("127.0.0.1", port)
    await broker.stop()  # idempotent
    assert broker.state == "stopped"


async def test_stop_ends_the_broker_while_a_client_is_still_connected() -> None:
    # Tansu drains open connections for ~5 s on SIGTERM; stop() sends SIGINT, on which it
    # exits at once (how long that takes is bench/broker_stop.py's budget, not a test's).
    broker = EmbeddedBroker()
    await broker.start()
    pid, (host, port) = broker.pid, broker.bootstrap.rsplit(":", 1)
    assert pid is not None
    with socket.create_connection((host, int(port))) as client:
        await broker.stop()

        assert broker.state == "stopped" and not _alive(pid)
        assert not port_accepts(host, int(port))
        client.settimeout(10)
        try:  # the broker closed the connection it still held: an end of stream, or a
            ended = client.recv(1) == b""  # reset when the process ended (both happen)
        except ConnectionResetError:
            ended = True
        assert ended


async def test_starts_on_an_explicit_port(unused_port: int) -> None:
    async with EmbeddedBroker(port=unused_port) as broker:
        assert broker.bootstrap == f"127.0.0.1:{unused_port}"
        assert f"127.0.0.1:{unused_port}" in repr(broker) and "running" in repr(broker)
        assert port_accepts("127.0.0.1", unused_port)


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


async def test_start_raises_broker_error_with_the_log_when_the_port_is_taken(
    taken_port: int,
) -> None:
    broker = EmbeddedBroker(port=taken_port, startup_timeout_s=10)

    with pytest.raises(BrokerError, match="Address in use"):
        await broker.start()

    assert broker.state == "failed"
    assert broker.pid is not None and not _alive(broker.pid)


async def test_start_raises_broker_error_when_the_binary_exits(tmp_path: Path) -> None:
    binary = tmp_path / "fake-tansu"
    binary.write_text("#!/bin/sh\necho 'bad storage engine' >&2\nexit 3\n")
    binary.chmod(0o755)
    broker = EmbeddedBroker(binary=binary)

    with pytest.raises(BrokerError, match=r"(?s)exited with code 3.*bad storage engine"):
        await broker.start()
    with pytest.raises(UsageError):
        _ = broker.bootstrap


async def test_a_cancelled_start_leaves_no_process_behind(tmp_path: Path) -> None:
    binary = tmp_path / "silent-tansu"
    binary.write_text("#!/bin/sh\nexec sleep 30\n")  # runs, never listens
    binary.chmod(0o755)
    broker = EmbeddedBroker(binary=binary)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await broker.start()

    assert broker.state == "failed"
    assert broker.pid is not None and not _alive(broker.pid)


async def test_misuse_raises_usage_errors_that_say_what_to_write() -> None:
    broker = EmbeddedBroker()
    with pytest.raises(UsageError, match="async with EmbeddedBroker"):
        _ = broker.bootstrap
    async with broker:
        with pytest.raises(UsageError, match="create a new EmbeddedBroker"):
            await broker.start()


def test_sync_start_and_stop_work_without_an_event_loop() -> None:
    broker = EmbeddedBroker()
    broker.start_sync()
    try:
        host, port = broker.bootstrap.rsplit(":", 1)
        assert port_accepts(host, int(port))
    finally:
        broker.stop_sync()
    assert broker.state == "stopped" and not port_accepts(host, int(port))


_ORPHANING_PARENT = textwrap.dedent(
    """
    import sys, time
    from runtime.kafka.broker import EmbeddedBroker
    broker = EmbeddedBroker()
    broker.start_sync()
    print(broker.pid, broker.log_path, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_broker_dies_when_its_parent_is_killed() -> None:
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", _ORPHANING_PARENT]
    env = {**os.environ, "PYTHONPATH": str(root)}
    with subprocess.Popen(command, stdout=subprocess.PIPE, cwd=root, env=env) as parent:
        assert parent.stdout is not None
        pid_text, log_path = parent.stdout.readline().decode().split()
        broker_pid = int(pid_text)
        assert _alive(broker_pid)

        parent.kill()

        deadline = time.monotonic() + 5 * SLACK  # a hang bound (no loop to await on here)
        while _alive(broker_pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        Path(log_path).unlink()  # the killed parent could not remove its broker's log
        assert not _alive(broker_pid)
