"""Runtime processes for tests: `python -m runtime CONFIG` started and awaited healthy,
asked over its admin API, stopped with a signal (killed when it hangs), the config files
they run on, and the paced receiver behaviour that keeps records in flight when a
process dies. A test stops what it starts: `terminate` or `kill` in a `finally`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
from asyncio.subprocess import Process
from pathlib import Path
from typing import Any

import aiohttp

from runtime.host.workers import LISTEN_ENV, WORKER_ENV
from runtime.kafka.broker import free_port
from tests.conftest import embedded_quirks
from tests.integration.delivery_harness import Behaviour, Push
from tests.waits import SLACK, until

ROOT = Path(__file__).resolve().parents[2]
STOP_HANG_S = 10  # a hang bound for a stop whose deadline is 4 s (times SLACK)
START_HANG_S = 30


def runtime_toml(bootstrap: str, persist: Path, *, listen: str = "127.0.0.1:0",
                 journal: str = "enabled = false", sections: str = "", delivery: str = "",
                 shutdown_deadline_ms: int = 4000) -> str:
    """A runtime config on the session's broker: 2 s group sessions, the broker's quirks
    worked around when it is the embedded one; `sections` adds whole sections."""
    return f"""
[[brokers]]
name = "Kafka"
bootstrap_servers = "{bootstrap}"
embedded_quirks = {embedded_quirks(bootstrap)}
[admin]
listen = "{listen}"
[persistence]
dir = "{persist}"
[journal]
{journal}
{sections}
[delivery]
session_timeout_ms = 2000
{delivery}
[runtime]
shutdown_deadline_ms = {shutdown_deadline_ms}
"""


def secrets_key(tmp: Path) -> Path:
    """A new random `[cluster] secrets_key` file."""
    key = tmp / "secrets.key"
    key.write_text(base64.b64encode(os.urandom(32)).decode())
    return key


def write_config(tmp: Path, bootstrap: str, port: int) -> Path:
    """One process's config: admin on `port`, its folders and journal in `tmp`."""
    path = tmp / "runtime.toml"
    path.write_text(runtime_toml(bootstrap, tmp / "persist", listen=f"127.0.0.1:{port}",
                                 journal=f'dir = "{tmp / "journal"}"'))
    return path


def process_log(config: Path) -> Path:
    return config.parent / "runtime.log"


async def start_process(config: Path, port: int, *, log: Path | None = None,
                        env: dict[str, str] | None = None) -> Process:
    """The CLI on `config`, once its /healthz on `port` answers; what it prints is
    appended to `log` (default `process_log(config)`: a restart adds to the same file)."""
    log = log or process_log(config)
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runtime", str(config), cwd=ROOT,
            env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)

    async def healthy() -> bool:
        assert process.returncode is None, (
            f"runtime process exited during startup: {log.read_text()[-3000:]}")
        try:
            return (await admin(port, "GET", "/healthz"))[0] == 200
        except aiohttp.ClientError:
            return False  # not listening yet

    try:
        await until(healthy, timeout_s=START_HANG_S, what=f"port {port} /healthz answers 200",
                    poll_s=0.1)
    except BaseException:
        await kill(process)
        raise
    return process


async def admin(port: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
    """The status and JSON answer of one admin API call."""
    async with aiohttp.ClientSession() as session, session.request(
            method, f"http://127.0.0.1:{port}{path}", json=body) as response:
        return response.status, await response.json(content_type=None)


async def terminate(process: Process, sig: signal.Signals = signal.SIGTERM) -> int:
    """`sig`, then the exit code; killed (and so not 0) if it hangs."""
    if process.returncode is not None:
        return process.returncode
    process.send_signal(sig)
    try:
        return await asyncio.wait_for(process.wait(), STOP_HANG_S * SLACK)
    except TimeoutError:
        return await kill(process)


async def kill(process: Process) -> int:
    """SIGKILL unless it has exited, then the exit code."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
            process.kill()
    return await process.wait()


def stopped_gracefully(log: str) -> bool:
    """The runtime's own words for a stop that finished within its shutdown deadline:
    nothing was cancelled on the way."""
    return ("stopped cleanly" in log and "did not stop in time" not in log
            and "cancelling" not in log)


def paced(delay_s: float) -> Behaviour:
    """A receiver behaviour that answers 200 after `delay_s`: records stay in flight
    long enough for a kill or a stop to find some."""
    async def answer(push: Push) -> int:
        await asyncio.sleep(delay_s)
        return 200

    return answer


def cluster_section(key: Path, name: str, settings: str = "") -> str:
    """`[cluster]` with its subscriptions topic `subs-<name>` and `settings` besides:
    the instances of one config (or of configs with the same name) form one cluster."""
    return (f'[cluster]\nsubscriptions_topic = "subs-{name}"\n{settings}\n'
            f'secrets_key = "${{file:{key}}}"\n')


class Instance:
    """`python -m runtime CONFIG` as instance `index` of a cluster; its admin port comes
    from the same environment variable `[runtime] workers` uses."""

    def __init__(self, config: Path, index: int, log: Path) -> None:
        self.config, self.index, self.log = config, index, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    async def start(self) -> Instance:
        env = {WORKER_ENV: str(self.index), LISTEN_ENV: f"127.0.0.1:{self.port}"}
        self.process = await start_process(self.config, self.port, log=self.log, env=env)
        return self

    async def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        return await admin(self.port, method, path, body)

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.process is not None:
            await terminate(self.process, sig)
