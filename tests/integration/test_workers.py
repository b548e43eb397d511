"""`[runtime] workers = 2`: one command starts two worker processes that share the work
through the cluster topic and the Kafka group; SIGTERM stops them all (real broker,
real processes, real receiver)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from runtime.kafka import create_topics
from runtime.kafka.broker import free_port
from tests import waits
from tests.conftest import embedded_quirks
from tests.integration.delivery_harness import Receiver, produce, subscription

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def two_free_ports() -> int:
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def start_parent(config: Path, stderr: Path) -> subprocess.Popen[bytes]:
    with stderr.open("wb") as err:
        return subprocess.Popen([sys.executable, "-m", "runtime", str(config)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def stop_parent(parent: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the parent only (it stops its workers); SIGKILL to the whole process
    group if it does not exit in time."""
    parent.send_signal(signal.SIGTERM)
    try:
        return parent.wait(timeout=30)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json(content_type=None)


async def test_two_workers_share_a_subscription_and_stop_on_sigterm(
        tmp_path: Path, fast_group_kwargs: dict[str, int]) -> None:
    port = two_free_ports()
    config = tmp_path / "workers.toml"
    config.write_text(f"""
[[brokers]]
name = "Kafka"
bootstrap_servers = "embedded"
[admin]
listen = "127.0.0.1:{port}"
[persistence]
dir = "{tmp_path / 'persist'}"
[journal]
dir = "{tmp_path / 'journal'}"
[cluster]
subscriptions_topic = "subs-{uuid.uuid4().hex[:8]}"
replication_factor = 1
[delivery]
session_timeout_ms = 2000
[runtime]
workers = 2
shutdown_deadline_ms = 4000
""")
    stderr = tmp_path / "stderr.log"
    parent = start_parent(config, stderr)
    receiver = await Receiver().start()
    try:
        urls = [f"http://127.0.0.1:{port + i}" for i in (0, 1)]
        async def both_answer() -> list[Any] | None:
            try:
                return [await get(u + "/healthz") for u in urls]
            except aiohttp.ClientError:
                return None  # not listening yet: processes have no event to wait on

        answers = await waits.until(both_answer, timeout_s=30, poll_s=0.1,
                                    what="both workers answer /healthz")
        bootstrap = answers[0][1]["brokers"]["Kafka"]
        assert bootstrap, stderr.read_text()
        assert answers[1][1]["brokers"]["Kafka"] == bootstrap  # one broker, shared
        topic = f"w-{uuid.uuid4().hex[:8]}"
        await create_topics(bootstrap, {topic: 4})
        body = subscription("wk", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs)
        async with aiohttp.ClientSession() as session, session.post(
                urls[0] + "/broker/subscription", json=body) as response:
            assert response.status == 200, await response.text()
        async def both_own() -> list[int] | None:
            answers = [await get(u + "/broker/subscription/wk/g-wk") for u in urls]
            owned = [len(a[1]["data"]["status"]["partitions"]) if a[0] == 200 else 0
                     for a in answers]
            return owned if sum(owned) == 4 and min(owned) > 0 else None

        await waits.until(both_own, timeout_s=30, poll_s=0.1,
                          what="the 4 partitions shared by both workers")
        await produce(bootstrap, topic, 40, partitions=4)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 40)
    finally:
        code = stop_parent(parent)
        await receiver.stop()
    assert code == 0
    workers = [int(p) for p in re.findall(r"worker \d started \(pid (\d+)", stderr.read_text())]
    assert len(workers) == 2
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_a_worker_that_keeps_dying_is_restarted_with_growing_delays(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    port = two_free_ports()
    config = tmp_path / "workers.toml"
    config.write_text(f"""
[[brokers]]
name = "Kafka"
bootstrap_servers = "{kafka_bootstrap}"
embedded_quirks = {embedded_quirks(kafka_bootstrap)}
[admin]
listen = "127.0.0.1:{port}"
[persistence]
dir = "{tmp_path / 'persist'}"
[journal]
dir = "{tmp_path / 'journal'}"
[cluster]
subscriptions_topic = "subs-{uuid.uuid4().hex[:8]}"
replication_factor = 1
[delivery]
session_timeout_ms = 2000
[runtime]
workers = 2
""")
    stderr = tmp_path / "stderr.log"
    parent = start_parent(config, stderr)
    killed: set[int] = set()
    try:
        def kill_each_worker_0() -> list[str] | None:
            """kill -9 each worker 0 as soon as it is started; the restart delays so far"""
            text = stderr.read_text()
            for pid in map(int, re.findall(r"worker 0 started \(pid (\d+)", text)):
                if pid not in killed:
                    killed.add(pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            delays = re.findall(r"restarting in (\d+) s", text)
            return delays if len(delays) >= 3 else None

        delays = await waits.until(kill_each_worker_0, timeout_s=40, poll_s=0.1,
                                   what="three restarts of worker 0")
    finally:
        code = stop_parent(parent)
    assert delays[:3] == ["1", "2", "4"], stderr.read_text()[-3000:]
    assert code == 0
