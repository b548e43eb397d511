"""OutletActor: the far end of the delivery path, where a record leaves the runtime.

A `Deliver` is queued for a worker: one of at most `pool` tasks owned by the actor, each
pushing one record at a time and telling the partition actor (`deliver.reply_to`)
`Delivered` or `Failed`. Workers are started on demand, park when there is nothing to send
and live as long as the actor: a task per record cost as much CPU as our own share of the
hot path (bench/RESULTS.md, "Delivery"). A push's error never crashes the actor;
cancellation (the actor stopping) propagates.

The HTTP egress pushes without workers (issue 37): each request (one record, or a
batch) is a `Push` moved on by callbacks (actors/delivery/egress/push.py), counted
against `pool`; it shares the accounting here (`_account`, `outcome_of`). Workers remain
for in-process handlers, whose calls are coroutines.

Two kinds: `EgressActor` pushes over HTTP (actors/delivery/egress/http.py) and `HandlerActor`
calls an async Python function (actors/delivery/egress/handler.py). They share the pool, the
journal events (`delivered`, `failed`: one per attempt, with the fetch time on a first
attempt's; no `sent` since issue 35) and the metrics; only `push` differs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Final, Literal

import msgspec

from actors.delivery.egress.attempts import (
    JOURNAL_RESPONSE_BYTES,
    AttemptRing,
    Outcome,
    snippet,
)
from actors.delivery.egress.status import (
    EndpointStatus,
    OriginStatus,
    OutletStatus,
    RecentFailure,
)
from actors.shared.messages import (
    Deliver,
    Delivered,
    DeliverMany,
    Failed,
    Failure,
    Record,
    StatusQuery,
)
from runtime.errors import UsageError
from runtime.host.journal import Event, EventType
from runtime.host.metrics import Registry, Value
from runtime.kernel.actor import Actor

log = logging.getLogger(__name__)
CODES: Final = ("1xx", "2xx", "3xx", "4xx", "5xx", "error")
ERROR_TEXT_LIMIT: Final = 200
HEALTH_WINDOW: Final = 200  # outcomes the error rate is computed over
RECENT_FAILURES: Final = 10
RECOVERED_BELOW: Final = 0.2  # error rate under which a failing endpoint counts as recovered
WORKER_IDLE_MS: Final = 10_000
"""An outlet that took no record for this long (up to twice as long: records are counted,
not timed) ends its parked workers; the next records start new ones. A thousand
subscriptions each kept up to their `pool` of parked workers after a burst: about 15 KiB
a subscription (issue 24, memory after delivering)."""


class _Trim:
    """The outlet's own timer: end the parked workers if nothing came since it was set."""

    __slots__ = ()


_TRIM = _Trim()


_WINDOW_MASK: Final = (1 << HEALTH_WINDOW) - 1


class EndpointHealth:
    """What the status API shows of an endpoint: the last answer, the error rate over the
    last `HEALTH_WINDOW` outcomes, and the most recent failures.

    The window is the bits of one int (newest in bit 0, 1 = failed) and the failures'
    deque is made on the first failure: ten thousand endpoints each kept a 200-slot deque
    and a 10-slot one, 1.5 KiB per subscription (issue 24, memory)."""

    __slots__ = ("_count", "_errors", "_failed_bits", "last_error", "last_status",
                 "last_success_at", "recent_failures")

    def __init__(self) -> None:
        self._failed_bits = 0
        self._count = 0  # outcomes in the window
        self._errors = 0  # failed ones among them
        self.last_status: int | None = None
        self.last_error: str | None = None
        self.last_success_at: int | None = None
        self.recent_failures: deque[RecentFailure] | None = None

    @property
    def failing(self) -> bool:
        """Most recent answers failed: at least half of the window, and the last one."""
        return bool(self._failed_bits & 1) and self.error_rate >= 0.5

    def record(self, ok: bool, status: int | None, error: str | None, wall_ms: int) -> None:
        bits = self._failed_bits
        if self._count == HEALTH_WINDOW:
            self._errors -= bits >> (HEALTH_WINDOW - 1)  # the oldest outcome leaves
        else:
            self._count += 1
        self._failed_bits = ((bits << 1) | (not ok)) & _WINDOW_MASK
        self.last_status = status
        if ok:
            self.last_success_at = wall_ms
            return
        self._errors += 1
        self.last_error = error
        if self.recent_failures is None:
            self.recent_failures = deque(maxlen=RECENT_FAILURES)
        self.recent_failures.appendleft(RecentFailure(at=wall_ms, status=status, error=error))

    @property
    def error_rate(self) -> float:
        return self._errors / self._count if self._count else 0.0

    def status(self, origin: OriginStatus | None = None) -> EndpointStatus:
        return EndpointStatus(last_status=self.last_status, last_error=self.last_error,
                              last_success_at=self.last_success_at,
                              error_rate=round(self.error_rate, 4),
                              recent_failures=list(self.recent_failures or ()),
                              origin=origin)


Action = Literal["skip", "dead-letter", "disable"]


class Answer(msgspec.Struct, frozen=True):
    """What a push got back: `error` is None on success. `action` is the receiver's say on
    a record (`skip`: done without retrying; `dead-letter`: give it up now; `disable`: 410
    Gone, the subscription is disabled). `local`: nothing was sent (the origin's circuit
    breaker is open); it still counts as a failed attempt."""

    status: int | None
    error: str | None = None
    retry_after_ms: int | None = None
    action: Action | None = None
    reason: str | None = None
    local: bool = False
    response: bytes | None = None
    """The first bytes of a non-2xx answer's body (actors/delivery/egress/attempts.py)."""


_CLASSES: Final = {status: f"{status // 100}xx" for status in range(100, 600)}


def status_class(status: int) -> str:
    """`2xx` for 200..299 (looked up: formatted, it was a string made per push)."""
    return _CLASSES.get(status, "error")


def describe_error(exc: BaseException, text: str | None = None) -> str:
    """`Type: text` (text defaults to the error's own), cut to a journal-friendly length."""
    text = str(exc) if text is None else text
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return described[:ERROR_TEXT_LIMIT]


def failure_of(answer: Answer, latency_ms: float) -> Failure | None:
    """What the partition is told went wrong with a push; None when it is finished (2xx,
    or the receiver said skip)."""
    if answer.error is None or answer.action == "skip":
        return None
    # answer.response is redacted already (http.py): cutting it cannot leak a secret's start
    return Failure(answer.status, answer.error, latency_ms, answer.retry_after_ms,
                   give_up=answer.action == "dead-letter",
                   disable=answer.action == "disable", local=answer.local,
                   response=snippet(answer.response, JOURNAL_RESPONSE_BYTES))


def outcome_of(record: Record, epoch: int, answer: Answer,
               latency_ms: float) -> Delivered | Failed:
    """What the partition is told of `record` after `answer` (a skip is finished)."""
    failure = failure_of(answer, latency_ms)
    if failure is None:
        return Delivered(record, epoch, answer.status or 0, latency_ms)
    return Failed(record, epoch, failure)


class OutletActor(Actor):
    """Base: subclasses set `endpoint` and implement `push(record) -> Answer`."""

    mailbox_capacity = 4096
    # Slots: with the kernel's and a subclass's an outlet has over thirty attributes,
    # past what an instance dict shares keys for (a 1.5 KiB dict per subscription).
    __slots__ = ("_duration", "_failing_logged", "_handled", "_inflight", "_inflight_gauge",
                 "_parked", "_pending", "_requests", "_requests_family", "_subscription",
                 "_trim_seen", "_workers", "attempts", "endpoint", "health", "pool")

    def __init__(self, name: str, subscription: str, endpoint: str, pool: int,
                 metrics: Registry) -> None:
        super().__init__(name)
        self.endpoint = endpoint
        self.pool = pool
        self._subscription = subscription
        # accepted, not yet pushed; idle workers' wakeups (both made on first use: an
        # empty deque is 760 bytes, issue 24)
        self._pending: deque[Deliver] | None = None
        self._parked: deque[asyncio.Future[bool]] | None = None
        self._workers = 0
        self._handled = 0  # records taken, to see whether any came since the trim was set
        self._trim_seen: int | None = None  # `_handled` when the pending trim was set
        self._inflight = 0
        self.health = EndpointHealth()
        self.attempts: AttemptRing | None = None  # the subscription's, set by its owner
        self._failing_logged = False
        self._bind_metrics(metrics, subscription)

    def _bind_metrics(self, metrics: Registry, subscription: str) -> None:
        # the 2xx series from the start, the others when first counted (most endpoints
        # never see a 1xx or 3xx: ten thousand subscriptions, issue 24)
        self._requests_family = metrics.counter(
            "hookstream_http_requests_total", "Pushes by status class (error: no status)")
        self._requests = {"2xx": self._requests_family.labels(subscription=subscription,
                                                              code="2xx")}
        self._duration = metrics.histogram(
            "hookstream_http_request_duration_ms", "Push round trip in ms",
        ).labels(subscription=subscription)
        self._inflight_gauge = metrics.gauge(
            "hookstream_http_inflight", "Pushes waiting for their answer",
        ).labels(subscription=subscription)

    async def push(self, record: Record) -> Answer:
        raise NotImplementedError

    def _requests_of(self, code: str) -> Value:
        series = self._requests.get(code)
        if series is None:
            series = self._requests[code] = self._requests_family.labels(
                subscription=self._subscription, code=code)
        return series

    def counters(self) -> dict[str, int]:
        """Since this outlet started: delivered records and failed attempts."""
        counts = {code: int(value.value) for code, value in self._requests.items()}
        delivered = counts.pop("2xx")
        return {"delivered": delivered, "failed_attempts": sum(counts.values())}

    def _status(self) -> OutletStatus:
        """The answer to a `StatusQuery`: the endpoint's health and the counters."""
        counts = self.counters()
        return OutletStatus(endpoint=self.health.status(self._origin_status()),
                            delivered=counts["delivered"],
                            failed_attempts=counts["failed_attempts"])

    def _origin_status(self) -> OriginStatus | None:
        """The origin's part of the status (an HTTP outlet's; a handler has none)."""
        return None

    def describe(self, exc: BaseException) -> str:
        """The text of a push that raised, for `Failed.error` and the journal."""
        return describe_error(exc)

    async def handle(self, message: object) -> OutletStatus | None:
        if isinstance(message, Deliver):
            self._take(message)
            return None
        if isinstance(message, DeliverMany):  # a cursor's dispatch: each record alone
            for record in message.records:
                self._take(Deliver(record, message.epoch, message.reply_to))
            return None
        if isinstance(message, StatusQuery):
            return self._status()
        if isinstance(message, _Trim):
            self._trim()
            return None
        raise UsageError(f"{self.path} handles Deliver, DeliverMany and StatusQuery, "
                         f"got {message!r}")

    def _take(self, deliver: Deliver) -> None:
        if self._pending is None:
            self._pending = deque()
        self._pending.append(deliver)
        self._handled += 1
        self._wake_or_grow()

    def _wake_or_grow(self) -> None:
        """Wake a parked worker, else start one below `pool`; else every worker is busy and
        checks `_pending` before it parks again."""
        parked_workers = self._parked
        while parked_workers:
            parked = parked_workers.popleft()
            if not parked.done():  # done: its worker was cancelled
                parked.set_result(True)
                return
        if self._workers < self.pool:
            self._workers += 1
            self.spawn(self._worker(), name=f"{self.path}:worker")

    # -- workers (owned tasks) -------------------------------------------------------
    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        pending = self._pending
        assert pending is not None  # workers start for a record in it
        while True:
            if not pending:
                if not await self.park(loop):
                    return  # idle for WORKER_IDLE_MS: ended
                continue  # another worker may have taken the record it was woken for
            deliver = pending.popleft()
            outcome = await self._attempt(deliver)
            deliver.reply_to.tell_system(outcome)

    async def park(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Wait, idle, until `_wake_or_grow` wakes this worker (True) or the outlet ends
        it, idle for `WORKER_IDLE_MS` (False)."""
        parked: asyncio.Future[bool] = loop.create_future()
        if self._parked is None:
            self._parked = deque()
        self._parked.append(parked)
        if self._trim_seen is None:
            self._set_trim()
        return await parked

    def _set_trim(self) -> None:
        self._trim_seen = self._handled
        self.schedule(self.context.clock.monotonic_ms() + WORKER_IDLE_MS, _TRIM)

    def _trim(self) -> None:
        """End the parked workers if no record came since the trim was set; else look
        again later, while some are parked. Counted out here, not by the worker when it
        runs: a record that comes meanwhile may start a new one."""
        seen, self._trim_seen = self._trim_seen, None
        parked_workers = self._parked
        if not parked_workers:
            return
        if seen != self._handled:
            self._set_trim()
            return
        while parked_workers:
            parked = parked_workers.popleft()
            if not parked.done():
                self._workers -= 1
                parked.set_result(False)

    async def _attempt(self, deliver: Deliver) -> Delivered | Failed:
        record = deliver.record
        answer, latency_ms = await self._timed(self.push(record))
        self._account((record,), answer, latency_ms)
        return outcome_of(record, deliver.epoch, answer, latency_ms)

    async def _timed(self, push: Awaitable[Answer]) -> tuple[Answer, float]:
        """One request in flight: its answer (an exception becomes a failed answer) and
        its duration in ms."""
        self._inflight += 1
        self._inflight_gauge.inc()
        # A real duration of real I/O: perf_counter, not the injected (maybe fake) clock.
        start = time.perf_counter()
        try:
            answer = await push
        except Exception as exc:  # CancelledError is not an Exception: it propagates
            answer = Answer(None, self.describe(exc))
        finally:
            self._inflight -= 1
            self._inflight_gauge.inc(-1)
        latency_ms = (time.perf_counter() - start) * 1000
        self._duration.observe(latency_ms)
        return answer, latency_ms

    def _account(self, records: Sequence[Record], answer: Answer, latency_ms: float) -> None:
        """Metrics, endpoint health and journal for one request carrying `records`."""
        status, error = answer.status, answer.error
        self._requests_of(status_class(status) if status is not None else
                          ("error" if error else "2xx")).inc(len(records))
        now_wall = self.context.clock.wall_ms()  # one read for health, journal and ring
        self._observe(error is None, status, error, now_wall)
        # a skip is finished like a delivery: the receiver has decided, nothing is lost
        skipped = answer.action == "skip"
        finished = error is None or skipped
        reason = f"skipped: {answer.reason}" if skipped else error
        for record in records:
            self._journal_outcome("delivered" if finished else "failed", record, status,
                                  latency_ms, reason, now_wall)
        if self.attempts is not None:
            outcome: Outcome = "skipped" if skipped else "delivered" if finished else "failed"
            self._remember(records, answer, latency_ms, outcome, now_wall)

    def _remember(self, records: Sequence[Record], answer: Answer, latency_ms: float,
                  outcome: Outcome, now_wall: int) -> None:
        """One attempt per record into the subscription's ring (the attempts API)."""
        ring = self.attempts
        assert ring is not None
        at = now_wall - round(latency_ms)
        response = snippet(answer.response) if outcome == "failed" else None
        error = answer.reason if outcome == "skipped" else answer.error
        for record in records:
            topic, partition, offset = record.coordinates()
            ring.record(topic, partition, offset, record.original_timestamp_ms(), at,
                        record.attempt, outcome, answer.status, latency_ms, error, response)

    def _observe(self, ok: bool, status: int | None, error: str | None,
                 now_wall: int) -> None:
        """Track the endpoint's health; log when it starts failing and when it recovered
        (with hysteresis: a flapping endpoint does not log every answer)."""
        health = self.health
        health.record(ok, status, error, now_wall)
        if not self._failing_logged and health.failing:
            self._failing_logged = True
            log.warning("%s: endpoint %s failing (error rate %.0f%%, last: %s)",
                        self._subscription, self.endpoint, health.error_rate * 100, error)
        elif self._failing_logged and ok and health.error_rate < RECOVERED_BELOW:
            self._failing_logged = False
            log.info("%s: endpoint %s recovered", self._subscription, self.endpoint)

    # -- journal -----------------------------------------------------------------------
    def _journal_outcome(self, kind: EventType, record: Record, status: int | None,
                         latency_ms: float, reason: str | None, now_wall: int) -> None:
        """One event per attempt. A first attempt's carries when the record was fetched:
        the report's added latency is its send time (`ts_ms - latency_ms`) minus that
        (issue 35: this was a `sent` event per attempt, 40% of the journal's bytes). A
        plain first-attempt delivery goes to the journal, which holds it and
        writes with the others of its commit round as one columnar event; it goes as a
        row (a tuple in `DeliveryRow`'s order, the latency as measured: the journal
        turns it into microseconds) to the `delivered` sink, the journal's ledger: no
        call."""
        attempt = record.attempt
        if attempt == 1 and reason is None and kind == "delivered" and record.retry is None:
            self.context.delivered((
                self._subscription, record.topic, record.partition, record.offset,
                now_wall, latency_ms, record.timestamp_ms, record.fetched_ms,
                status, self.endpoint))
            return
        topic, partition, offset = record.coordinates()  # a retry: its original ones
        fetched_ts_ms = (now_wall - (self.context.clock.monotonic_ms() - record.fetched_ms)
                         if attempt <= 1 else None)
        self.context.emit(Event(
            type=kind, ts_ms=now_wall, subscription=self._subscription,
            endpoint=self.endpoint, topic=topic, partition=partition,
            offset=offset, attempt=attempt, status=status,
            latency_ms=latency_ms, record_ts_ms=record.timestamp_ms,
            fetched_ts_ms=fetched_ts_ms, reason=reason,
        ))

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.path} {self.state} {self.endpoint} "
            f"inflight={self._inflight}/{self.pool} waiting={len(self._pending or ())} "
            f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>"
        )
