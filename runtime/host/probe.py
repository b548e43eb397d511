"""Broker reachability for `/readyz`: a TCP connect to a broker's bootstrap addresses,
re-checked every `interval_ms` by one task the `Runtime` owns. Reachable means some
bootstrap address accepted a connection within `timeout_ms`; that is what readiness
needs to know (the Kafka clients themselves reconnect on their own)."""

from __future__ import annotations

import asyncio
import contextlib

from runtime.kernel.clock import Clock, within

CONNECT_TIMEOUT_MS = 1000


async def reachable(bootstrap: str, clock: Clock,
                    timeout_ms: int = CONNECT_TIMEOUT_MS) -> str | None:
    """None when one of the `host:port` addresses accepts a TCP connection, else why not."""
    errors: list[str] = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            _, writer = await within(clock, asyncio.open_connection(host, int(port)),
                                     timeout_ms)
        except (OSError, TimeoutError, ValueError) as exc:
            errors.append(f"{address.strip()}: {exc.__class__.__name__} {exc}".strip())
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return None
    return "; ".join(errors) or "no bootstrap address"


class BrokerProbe:
    """The last reachability result of each broker, refreshed in the background."""

    def __init__(self, brokers: dict[str, str], clock: Clock, interval_ms: int = 2000) -> None:
        self.brokers = brokers
        self.clock = clock
        self.interval_ms = interval_ms
        self.problems: dict[str, str] = {}
        self.checked = False
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> dict[str, str]:
        results = await asyncio.gather(*(reachable(b, self.clock) for b in self.brokers.values()))
        self.problems = {name: why for name, why in zip(self.brokers, results, strict=True)
                         if why is not None}
        self.checked = True
        return self.problems

    async def _run(self) -> None:
        while True:
            await self.check()
            await self.clock.sleep_ms(self.interval_ms)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="probe")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
