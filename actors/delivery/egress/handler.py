"""In-process delivery: an async Python function as the endpoint (`Runtime.consume`).

`HandlerActor` is the outlet that calls `await handler(record)` instead of sending an HTTP
request; everything before it (partition actors, lanes, retries, commits, dead letters,
drains, supervision, journal, metrics) is the HTTP path's. The handler's answer:

- returns: done (delivered);
- raises `runtime.Skip`: done without retrying (journaled as delivered, "skipped: why");
- raises `runtime.DeadLetter(reason)`: to the dead-letter topic now, no more retries
  (without a dead-letter topic: journaled and skipped, as any give-up);
- raises anything else, or runs past `timeout_ms`: failed, retried per the policy. The
  failure's text names where the handler raised, and the traceback is logged (at most 5
  a minute), since a handler bug is the usual cause.

A handler that raises `CancelledError` although nobody cancelled it (a bug in its own
task handling) fails the attempt like any error; a cancellation of the worker itself
(the actor stopping) propagates as always. A handler past `timeout_ms` is cancelled (it
sees `CancelledError` where it waits) and the attempt fails; one that swallows that
cancellation and returns late fails all the same (its answer came too late, as an HTTP
response after the request timed out).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from actors.delivery.document.signing import webhook_id
from actors.delivery.egress.outlet import Answer, OutletActor, describe_error
from actors.shared.messages import Record
from runtime.errors import DeadLetter, Skip
from runtime.host.logs import Throttle
from runtime.host.metrics import Registry

log = logging.getLogger(__name__)
IN_PROCESS = "in-process"


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """What a handler gets. `id` is the HTTP path's `webhook-id`: stable across retries
    and redeliveries, for deduplication. `attempt` counts from 1."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    attempt: int

    @property
    def id(self) -> str:
        # computed when asked (a hash): most handlers never look
        return webhook_id(self.topic, self.partition, self.offset, self.timestamp)


Handler = Callable[[ConsumedRecord], Awaitable[object]]


def consumed(record: Record) -> ConsumedRecord:
    return ConsumedRecord(record.topic, record.partition, record.offset, record.key,
                          record.value, record.headers, record.timestamp_ms, record.attempt)


def handler_name(handler: Handler) -> str:
    """`module.qualname` of a function (of its class for a callable object)."""
    named = handler if hasattr(handler, "__qualname__") else type(handler)
    module = getattr(named, "__module__", None)
    qualname = getattr(named, "__qualname__", type(handler).__name__)
    return f"{module}.{qualname}" if module else qualname


@dataclass(frozen=True, slots=True)
class HandlerDestination:
    """Where an in-process subscription's records go: a Python function, not a URL. Its
    outlet is a `HandlerActor`; it has no origin, guard or connection pool."""

    handler: Handler
    concurrency: int
    timeout_ms: int

    @property
    def endpoint(self) -> str:
        """The readable name status and logs show: `in-process:module.qualname`."""
        return f"{IN_PROCESS}:{handler_name(self.handler)}"

    def outlet(self, name: str, subscription: str, metrics: Registry) -> HandlerActor:
        return HandlerActor(name, subscription, self, metrics)


class HandlerActor(OutletActor):
    """Timeouts. Each call is bounded by `timeout_ms` of the injected clock, kept by one
    watchdog task instead of a timer per call (`asyncio.timeout` cost 14 us per record on
    uvloop, a fifth of the whole in-process path): `_running` holds each worker's
    deadline in start order, and since every call has the same timeout the first entry
    is always the next to expire. The watchdog sleeps until then, cancels the workers
    whose deadline passed and marks them `_timed_out`; the worker turns that cancellation
    into a failed attempt. A worker cancelled by the actor stopping is not ours to catch.
    """

    def __init__(self, name: str, subscription: str, destination: HandlerDestination,
                 metrics: Registry) -> None:
        super().__init__(name, subscription, destination.endpoint, destination.concurrency,
                         metrics)
        self.handler = destination.handler
        self.timeout_ms = destination.timeout_ms
        self._running: dict[asyncio.Task[object], int] = {}  # worker -> deadline (monotonic)
        self._timed_out: set[asyncio.Task[object]] = set()
        self._busy = asyncio.Event()  # set when a call starts with none running
        self._tracebacks = Throttle()

    async def on_start(self) -> None:
        self.spawn(self._watchdog(), name=f"{self.path}:watchdog")

    async def push(self, record: Record) -> Answer:
        task = asyncio.current_task()
        assert task is not None  # a worker task
        try:
            if await self._call(task, consumed(record)):
                return Answer(None)
            return Answer(None, f"handler did not finish within {self.timeout_ms} ms")
        except Skip as exc:
            return Answer(None, action="skip", reason=str(exc) or "skipped by the handler")
        except DeadLetter as exc:
            return Answer(None, f"DeadLetter: {exc}", action="dead-letter",
                          reason=str(exc) or "dead-lettered by the handler")
        except asyncio.CancelledError as exc:
            if task.cancelling():
                raise  # we are being cancelled: the actor stops
            self._log_failure(record, exc)
            return Answer(None, describe_error(exc, "the handler raised CancelledError "
                                                    "without being cancelled"))
        except Exception as exc:
            self._log_failure(record, exc)
            raise  # the outlet turns it into a failed attempt (with `describe`)

    async def _call(self, task: asyncio.Task[object], item: ConsumedRecord) -> bool:
        """`await handler(item)`; False when the watchdog cut it off at `timeout_ms`."""
        running = self._running
        if not running:
            self._busy.set()
        running[task] = self.context.clock.monotonic_ms() + self.timeout_ms
        try:
            await self.handler(item)
        except asyncio.CancelledError:
            if not self._ours(task):
                raise
            return False
        finally:
            running.pop(task, None)
        return not self._ours(task)  # a handler that swallowed our cancellation: late

    def _ours(self, task: asyncio.Task[object]) -> bool:
        """Whether the watchdog cancelled `task`; takes that cancellation back. Raises
        CancelledError when someone else (the actor stopping) asked to cancel it too,
        also when the handler swallowed that."""
        if task in self._timed_out:
            self._timed_out.discard(task)
            if not task.uncancel():
                return True
        if task.cancelling():
            raise asyncio.CancelledError
        return False

    async def _watchdog(self) -> None:
        clock, running = self.context.clock, self._running
        while True:
            if not running:
                self._busy.clear()
                await self._busy.wait()
                continue
            oldest = next(iter(running.values()))
            now = clock.monotonic_ms()
            if oldest > now:
                await clock.sleep_ms(oldest - now)
                continue
            expired = [task for task, deadline in running.items() if deadline <= now]
            for task in expired:
                del running[task]
                self._timed_out.add(task)
                task.cancel()

    def describe(self, exc: BaseException) -> str:
        """`Type: text (at file:line in function)`: where the handler raised."""
        frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
        if not frames:
            return describe_error(exc)
        last = frames[-1]
        text = str(exc)
        where = f"at {Path(last.filename).name}:{last.lineno} in {last.name}"
        return describe_error(exc, f"{text} ({where})" if text else f"({where})")

    def _log_failure(self, record: Record, exc: BaseException) -> None:
        allowed, held = self._tracebacks.allow(self.context.clock.monotonic_ms())
        if allowed:
            log.warning("%s: handler %s failed on %s-%d@%d (attempt %d)%s",
                        self._subscription, self.endpoint, record.topic, record.partition,
                        record.offset, record.attempt,
                        f" ({held} more failures not logged)" if held else "",
                        exc_info=exc)
