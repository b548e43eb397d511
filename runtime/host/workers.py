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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from typing import Final

from runtime.host.config import Config
from runtime.kafka.broker import EmbeddedBroker
from runtime.kernel.backoff import Backoff

log = logging.getLogger("runtime.workers")
BOOTSTRAP_ENV = "HOOKSTREAM_BOOTSTRAP"  # JSON: broker name -> host:port (embedded ones)
LISTEN_ENV = "HOOKSTREAM_ADMIN_LISTEN"
WORKER_ENV = "HOOKSTREAM_WORKER"
RESTART: Final = Backoff(initial_ms=1000, multiplier=2.0, max_ms=60_000)
STABLE_S: Final = 60.0
"""A worker that ran this long before it died is restarted after the first delay again."""
STOP_MARGIN_S = 5.0


def restart_delay_s(deaths: int) -> float:
    """Seconds before restarting a worker after its `deaths`-th quick death in a row."""
    return RESTART.delay_ms(max(deaths, 1)) / 1000


def worker_listen(listen: str, index: int) -> str:
    host, _, port = listen.rpartition(":")
    return f"{host}:{int(port) + index if int(port) else 0}"


class Workers:
    def __init__(self, config_path: str, config: Config, argv: list[str]) -> None:
        self.config_path, self.config, self.argv = config_path, config, argv
        self.brokers: list[EmbeddedBroker] = []
        self.bootstrap: dict[str, str] = {}
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopping.set)
        try:
            await self._start_brokers()
            keepers = [asyncio.ensure_future(self._keep(i))
                       for i in range(self.config.runtime.workers)]
            await self.stopping.wait()
            log.info("stopping %d workers", len(self.processes))
            for task in keepers:
                task.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
        finally:
            await self._stop_all()
            for broker in reversed(self.brokers):
                await broker.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def _start_brokers(self) -> None:
        for broker in self.config.brokers:
            if broker.bootstrap_servers == "embedded":
                embedded = EmbeddedBroker(port=broker.embedded_port or None)
                await embedded.start()
                self.brokers.append(embedded)
                self.bootstrap[broker.name] = embedded.bootstrap
                log.info("embedded broker %r for the workers on %s", broker.name,
                         embedded.bootstrap)

    async def _keep(self, index: int) -> None:
        """Run worker `index`; start it again when it dies (until we stop)."""
        env = {**os.environ, BOOTSTRAP_ENV: json.dumps(self.bootstrap), WORKER_ENV: str(index),
               LISTEN_ENV: worker_listen(self.config.admin.listen, index)}
        deaths = 0
        while True:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "runtime", self.config_path, *self.argv, env=env)
            self.processes[index] = process
            log.info("worker %d started (pid %d, admin %s)", index, process.pid,
                     env[LISTEN_ENV])
            started = time.monotonic()
            code = await process.wait()
            deaths = 1 if time.monotonic() - started >= STABLE_S else deaths + 1
            delay = restart_delay_s(deaths)
            log.error("worker %d (pid %d) exited with %s; restarting in %.0f s (%d quick "
                      "deaths in a row)", index, process.pid, code, delay, deaths)
            await asyncio.sleep(delay)

    async def _stop_all(self) -> None:
        running = [p for p in self.processes.values() if p.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = self.config.runtime.shutdown_deadline_ms / 1000 + STOP_MARGIN_S
        done = asyncio.gather(*(p.wait() for p in running))
        try:
            await asyncio.wait_for(done, deadline)
        except TimeoutError:
            for process in running:
                if process.returncode is None:
                    log.error("worker pid %d ignored SIGTERM: killing it", process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            await asyncio.gather(*(p.wait() for p in running))
        log.info("workers stopped")


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
