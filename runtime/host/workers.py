"""`[runtime] workers = N`: one command, N worker processes on one machine, so every core
works. Each worker is a full instance of the cluster (`[cluster] subscriptions_topic` is
required): the workers share subscriptions through the topic and partitions through the
Kafka groups, exactly as instances on separate machines do.

The parent process runs no actors. It starts the embedded brokers the config names (one
broker the workers share, not one each), then the workers (`python -m runtime CONFIG`,
told the brokers' addresses and their admin address through the environment: the
configured port plus the worker's index, or a free port each when it is 0), restarts a
worker that dies (after a second, doubled after each death that follows a short run, up
to a minute: a worker that cannot start is not restarted in a hot loop), and on SIGTERM
or SIGINT stops them: SIGTERM to each, SIGKILL to those still running after the shutdown
deadline, then the brokers.

Each worker is a `WorkerActor` under a `workers` supervisor of the parent's own actor
system: the process's exit comes back as a message and its restart as a timer message,
and a failure of the actor itself is logged and restarted by the supervisor's rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Final

from runtime.host.config import Config
from runtime.kafka.broker import EmbeddedBroker
from runtime.kernel.actor import Actor
from runtime.kernel.backoff import Backoff
from runtime.kernel.clock import within
from runtime.kernel.errors import UsageError
from runtime.kernel.supervisor import ChildSpec, Supervisor
from runtime.kernel.system import ActorSystem

log = logging.getLogger("runtime.workers")
BOOTSTRAP_ENV = "HOOKSTREAM_BOOTSTRAP"  # JSON: broker name -> host:port (embedded ones)
LISTEN_ENV = "HOOKSTREAM_ADMIN_LISTEN"
WORKER_ENV = "HOOKSTREAM_WORKER"
RESTART: Final = Backoff(initial_ms=1000, multiplier=2.0, max_ms=60_000)
RESTART_DELAY_MS: Final = RESTART.initial_ms
"""After a first death (or one that follows a long run)."""
STABLE_MS: Final = 60_000
"""A worker that ran this long before it died is restarted after the first delay again."""
STOP_MARGIN_MS = 5000


def restart_delay_ms(deaths: int) -> int:
    """Before restarting a worker after its `deaths`-th quick death in a row."""
    return RESTART.delay_ms(max(deaths, 1))


def worker_listen(listen: str, index: int) -> str:
    host, _, port = listen.rpartition(":")
    return f"{host}:{int(port) + index if int(port) else 0}"


@dataclass(frozen=True, slots=True)
class _Exited:
    pid: int
    code: int


@dataclass(frozen=True, slots=True)
class _Launch:
    """Timer: start the worker process again."""


class WorkerActor(Actor):
    """One worker process: started by `on_start` (start means running), started again
    `RESTART_DELAY_MS` after it exits; on stop SIGTERM, then SIGKILL after `stop_ms`."""

    def __init__(self, name: str, index: int, command: list[str], env: dict[str, str],
                 stop_ms: int) -> None:
        super().__init__(name)
        self.index, self.command, self.env, self.stop_ms = index, command, env, stop_ms
        self.process: asyncio.subprocess.Process | None = None
        self.deaths = 0  # quick deaths in a row
        self._started_ms = 0

    async def on_start(self) -> None:
        await self._launch()

    async def _launch(self) -> None:
        process = self.process = await asyncio.create_subprocess_exec(*self.command,
                                                                      env=self.env)
        self._started_ms = self.context.clock.monotonic_ms()
        log.info("worker %d started (pid %d, admin %s)", self.index, process.pid,
                 self.env[LISTEN_ENV])
        self.spawn(self._watch(process), name=f"{self.path}:wait")

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        self.tell_system(_Exited(process.pid, await process.wait()))

    async def handle(self, message: object) -> None:
        if isinstance(message, _Exited):
            now = self.context.clock.monotonic_ms()
            self.deaths = 1 if now - self._started_ms >= STABLE_MS else self.deaths + 1
            delay = restart_delay_ms(self.deaths)
            log.error("worker %d (pid %d) exited with %s; restarting in %.0f s (%d quick "
                      "deaths in a row)", self.index, message.pid, message.code,
                      delay / 1000, self.deaths)
            self.schedule(now + delay, _Launch())
        elif isinstance(message, _Launch):
            await self._launch()
        else:
            raise UsageError(f"{self.path}: unknown message {message!r}")

    async def on_stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await within(self.context.clock, process.wait(), self.stop_ms)
        except TimeoutError:
            log.error("worker pid %d ignored SIGTERM: killing it", process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    def __repr__(self) -> str:
        pid = self.process.pid if self.process is not None else None
        return f"<WorkerActor {self.path} pid={pid}>"


class Workers:
    def __init__(self, config_path: str, config: Config, argv: list[str]) -> None:
        self.config_path, self.config, self.argv = config_path, config, argv
        self.brokers: list[EmbeddedBroker] = []
        self.bootstrap: dict[str, str] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopping.set)
        system = ActorSystem("workers-parent")
        stop_ms = self.config.runtime.shutdown_deadline_ms + STOP_MARGIN_MS
        try:
            await self._start_brokers()
            await system.start()
            workers = await system.spawn(ChildSpec(
                "workers", lambda: Supervisor("workers", "one_for_one", intensity=10,
                                              period_ms=60_000),
                shutdown_ms=stop_ms + 1000))
            sup = workers.actor_as(Supervisor)
            errors = await sup.start_children(
                [self._spec(i, stop_ms) for i in range(self.config.runtime.workers)])
            for error in errors:
                if error is not None:
                    raise error
            await self.stopping.wait()
            log.info("stopping %d workers", len(sup.children()))
            await sup.stop_children(sup.children())  # SIGTERM to all at once
            log.info("workers stopped")
        finally:
            await system.stop(stop_ms + 2000)
            for broker in reversed(self.brokers):
                await broker.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _spec(self, index: int, stop_ms: int) -> ChildSpec:
        env = {**os.environ, BOOTSTRAP_ENV: json.dumps(self.bootstrap), WORKER_ENV: str(index),
               LISTEN_ENV: worker_listen(self.config.admin.listen, index)}
        command = [sys.executable, "-m", "runtime", self.config_path, *self.argv]
        return ChildSpec(f"worker-{index}",
                         lambda: WorkerActor(f"worker-{index}", index, command, env, stop_ms),
                         shutdown_ms=stop_ms + 1000)

    async def _start_brokers(self) -> None:
        for broker in self.config.brokers:
            if broker.bootstrap_servers == "embedded":
                embedded = EmbeddedBroker(port=broker.embedded_port or None)
                await embedded.start()
                self.brokers.append(embedded)
                self.bootstrap[broker.name] = embedded.bootstrap
                log.info("embedded broker %r for the workers on %s", broker.name,
                         embedded.bootstrap)


def apply_worker_env(config: Config) -> Config:
    """In a worker: the parent's brokers and this worker's admin address."""
    import msgspec

    overrides = json.loads(os.environ.get(BOOTSTRAP_ENV, "{}"))
    brokers = [msgspec.structs.replace(b, bootstrap_servers=overrides[b.name])
               if b.name in overrides else b for b in config.brokers]
    admin = msgspec.structs.replace(config.admin,
                                    listen=os.environ.get(LISTEN_ENV, config.admin.listen))
    runtime = msgspec.structs.replace(config.runtime, workers=1)
    return msgspec.structs.replace(config, brokers=brokers, admin=admin, runtime=runtime)
