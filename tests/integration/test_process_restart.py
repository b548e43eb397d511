"""The CLI process: SIGTERM mid-stream exits 0 within its shutdown deadline; a restart
restores subscriptions from disk and every record is delivered."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from asyncio.subprocess import Process
from pathlib import Path

import aiohttp
import pytest

from runtime.kafka.broker import free_port
from tests.conftest import TopicFactory, embedded_quirks
from tests.integration.delivery_harness import Push, Receiver, committed, produce, subscription
from tests.waits import SLACK, until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STOP_HANG_S = 10  # a hang bound for a stop whose deadline is 4 s (times SLACK)


def write_config(tmp: Path, bootstrap: str, port: int) -> Path:
    path = tmp / "runtime.toml"
    path.write_text(f"""
[[brokers]]
name = "Kafka"
bootstrap_servers = "{bootstrap}"
embedded_quirks = {embedded_quirks(bootstrap)}
[admin]
listen = "127.0.0.1:{port}"
[persistence]
dir = "{tmp / 'persist'}"
[journal]
dir = "{tmp / 'journal'}"
[delivery]
session_timeout_ms = 2000
[runtime]
shutdown_deadline_ms = 4000
""")
    return path


async def start_process(config: Path, port: int) -> Process:
    """The CLI on `config`, once its /healthz answers; what it logs is appended to
    `process_log(config)` (a restart adds to the same file)."""
    with process_log(config).open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runtime", str(config), cwd=ROOT,
            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/healthz"

    async def healthy() -> bool:
        assert process.returncode is None, "runtime process exited during startup"
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                return response.status == 200
        except aiohttp.ClientError:
            return False  # not listening yet

    try:
        await until(healthy, timeout_s=30, what=f"{url} answers 200")
    except BaseException:
        process.kill()
        await process.wait()
        raise
    return process


def process_log(config: Path) -> Path:
    return config.parent / "runtime.log"


async def terminate(process: Process) -> int:
    """SIGTERM, then the exit code; killed (and so not 0) if it hangs."""
    process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(process.wait(), STOP_HANG_S * SLACK)
    except TimeoutError:
        process.kill()
        return await process.wait()


def stopped_gracefully(log: str) -> bool:
    """The runtime's own words for a stop that finished within its shutdown deadline:
    nothing was cancelled on the way."""
    return ("stopped cleanly" in log and "did not stop in time" not in log
            and "cancelling" not in log)


async def admin(port: int, method: str, path: str, body: object = None) -> tuple[int, object]:
    async with aiohttp.ClientSession() as session, session.request(
            method, f"http://127.0.0.1:{port}{path}", json=body) as response:
        return response.status, await response.json()


async def test_sigterm_mid_stream_then_restart_delivers_everything(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 400, partitions=2)

    async def slow(push: Push) -> int:
        await asyncio.sleep(0.003)
        return 200

    receiver = await Receiver(slow).start()
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, port)
    process = await start_process(config, port)
    try:
        sub = subscription("proc", [{"name": topic, "config": {"concurrencyFactor": 4}}],
                           receiver.url, fast_group=fast_group_kwargs)
        status, reply = await admin(port, "POST", "/broker/subscription", sub)
        assert status == 200, reply
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 100)
        assert await terminate(process) == 0
        log = process_log(config).read_text()
        assert stopped_gracefully(log), log[-4000:]
        await produce(kafka_bootstrap, topic, 200, partitions=2, start=400)
        process = await start_process(config, port)
        status, listed = await admin(port, "GET", "/broker/subscription")
        assert status == 200 and [s["id"] for s in listed["data"]] == ["proc"]  # type: ignore[index]
        await receiver.wait_for(lambda: len(receiver.delivered()) == 600, timeout_s=60)
        assert await terminate(process) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-proc", topic, 2) == {0: 300, 1: 300}
