"""Broker reachability for `/readyz`: a TCP connect to a broker's bootstrap addresses,
re-checked every `interval_ms` by `ProbeActor`, a child of the runtime's root supervisor
(a timer message per round; each round's connects run in a task the actor owns and come
back as a message, so a crash is the supervisor's to log, journal and restart). Reachable
means some
bootstrap address accepted a connection within `timeout_ms`; that is what readiness
needs to know (the Kafka clients themselves reconnect on their own)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from runtime.kernel.actor import Actor
from runtime.kernel.clock import Clock, within
from runtime.kernel.errors import UsageError

log = logging.getLogger(__name__)
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
    """The last reachability result of each broker (`problems`: name -> why not)."""

    def __init__(self, brokers: dict[str, str], clock: Clock, interval_ms: int = 2000) -> None:
        self.brokers = brokers
        self.clock = clock
        self.interval_ms = interval_ms
        self.problems: dict[str, str] = {}
        self.checked = False

    async def measure(self) -> dict[str, str]:
        """Connect to every broker now; the problems found (nothing is kept)."""
        results = await asyncio.gather(*(reachable(b, self.clock) for b in self.brokers.values()))
        return {name: why for name, why in zip(self.brokers, results, strict=True)
                if why is not None}

    def note(self, problems: dict[str, str]) -> None:
        """Keep the round's result; say when a broker becomes unreachable or reachable
        again (#34: an unreachable broker at start was silent for 25 s)."""
        for name, why in sorted(problems.items()):
            if name not in self.problems:
                log.warning("broker %r (%s) is unreachable: %s; what reads it waits for it",
                            name, self.brokers[name], why)
        for name in sorted(self.problems.keys() - problems.keys()):
            log.info("broker %r (%s) is reachable again", name, self.brokers[name])
        self.problems = problems
        self.checked = True

    async def check(self) -> dict[str, str]:
        self.note(await self.measure())
        return self.problems

    def __repr__(self) -> str:
        return f"<BrokerProbe brokers={sorted(self.brokers)} problems={sorted(self.problems)}>"


@dataclass(frozen=True, slots=True)
class _Round:
    """Timer: measure again."""


@dataclass(frozen=True, slots=True)
class _Measured:
    problems: dict[str, str]


class ProbeActor(Actor):
    """Keeps `probe` fresh: a round every `probe.interval_ms` after the last one ended."""

    def __init__(self, name: str, probe: BrokerProbe) -> None:
        super().__init__(name)
        self.probe = probe

    async def on_start(self) -> None:
        self.tell_system(_Round())

    async def handle(self, message: object) -> None:
        if isinstance(message, _Round):
            self.spawn(self._measure(), name=f"{self.path}:round")
        elif isinstance(message, _Measured):
            self.probe.note(message.problems)
            clock = self.context.clock
            self.schedule(clock.monotonic_ms() + self.probe.interval_ms, _Round())
        else:
            raise UsageError(f"{self.path}: unknown message {message!r}")

    async def _measure(self) -> None:
        self.tell_system(_Measured(await self.probe.measure()))

    def __repr__(self) -> str:
        return f"<ProbeActor {self.path} {self.probe!r}>"
