"""The demo command: embedded broker + admin server, /healthz, clean exit on signals."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from runtime.kafka.broker import free_port
from tests.integration.processes import stopped_gracefully
from tests.waits import SLACK, until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def demo_config(tmp: Path) -> Path:
    """config/demo.toml with free ports, so the test never collides with a running demo."""
    text = (ROOT / "config" / "demo.toml").read_text()
    for fixed in ("embedded_port = 9092", 'listen = "127.0.0.1:8080"'):
        assert fixed in text, f"config/demo.toml no longer has {fixed!r}: update this test"
    text = text.replace("embedded_port = 9092", f"embedded_port = {free_port()}")
    text = text.replace('listen = "127.0.0.1:8080"', f'listen = "127.0.0.1:{free_port()}"')
    path = tmp / "demo.toml"
    path.write_text(text)
    return path


async def healthz(url: str, timeout_s: float = 30) -> dict[str, object]:
    async def answer() -> dict[str, object] | None:
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                if response.status == 200:
                    body: dict[str, object] = await response.json()
                    return body
        except aiohttp.ClientError:
            pass  # not listening yet
        return None

    return await until(answer, timeout_s=timeout_s, what=f"{url} answers 200", poll_s=0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_demo_answers_healthz_and_exits_cleanly_on_a_signal(
        sig: signal.Signals, tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    port = config.read_text().split('listen = "127.0.0.1:')[1].split('"')[0]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime", str(config), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        health = await healthz(f"http://127.0.0.1:{port}/healthz")
        assert health["status"] == "ok"
        assert "delivery" in health["services"]  # type: ignore[operator]
        process.send_signal(sig)
        code = await asyncio.wait_for(process.wait(), 10 * SLACK)  # a hang bound
        assert process.stdout is not None
        log = (await process.stdout.read()).decode()
        assert code == 0, log[-4000:]
        assert stopped_gracefully(log), log[-4000:]  # within its deadline, nothing cancelled
        assert "embedded broker 'Kafka' listening on 127.0.0.1:" in log
        assert "admin API listening on" in log
        ready = [line for line in log.splitlines() if "ready: status page" in line]
        assert len(ready) == 1
        assert f"status page http://127.0.0.1:{port}/ ; next: subscribe" in ready[0]
        assert "produce to the embedded broker at 127.0.0.1:" in ready[0]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
