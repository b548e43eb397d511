"""The egress actor: one per endpoint, pushes records over HTTP and reports each outcome.

The journal and metrics are `OutletActor`'s (actors/delivery/egress/outlet.py); this
module builds and sends the request. A push (one record, or a batch) runs by callbacks,
without a task (actors/delivery/egress/push.py). `Delivered` is a 2xx; `Failed` any other
status, a timeout, a connection error, a bad URL...

The request (contract in DESIGN.md, "Pushed request"); choices made here:

- Methods with a body (POST, PUT, PATCH) send the record value as the body, unchanged.
  Bodyless methods (GET, DELETE) send it, decoded with `charset` (errors replaced), in the
  query parameter `queryParamKey`. `queryParamKey` is ignored for methods with a body:
  that is what Queue-Over-Http does (its `HttpMessageDispatcher` uses the query only when
  the request has no entity; its `queryParamKey` defaults to "message", so copying the
  value into the URL would break big bodies against URL length limits).
- `Content-Type: text/plain; charset=<charset>` on bodies unless `additionalHeaders` sets
  one (compared case-insensitively).
- `QOH-Message-Key` is the key as text when it is valid UTF-8 and survives as a header
  value unchanged (printable, no surrounding whitespace); empty when there is no key;
  otherwise base64 of the key bytes with `QOH-Message-Key-Encoding: base64`. A key is
  never silently altered, and a hostile key cannot inject headers.
- `additionalHeaders` lose CR/LF; those named like our own headers (`QOH-*`, `webhook-*`)
  are dropped, so a subscription cannot forge the signature or the record coordinates, and
  so are framing and hop-by-hop headers (`Content-Length`, `Transfer-Encoding`, `Host`,
  `Connection`, `Proxy-*`, ...), which only the HTTP client may set.
- Connections go only where the destination guard allows (actors/delivery/egress/guard.py).
- Standard Webhooks headers (actors/delivery/document/signing.py). For bodyless methods
  the signed payload is the query value as UTF-8, i.e. what the receiver gets after
  percent-decoding, so the value is still authenticated. Several space-separated secrets
  (rotation) give one signature each.
- `additionalHeaders` values and `signingSecret` may be `${env:...}`/`${file:...}`
  references, resolved when the actor starts (actors/delivery/document/secrets.py); a reference
  that cannot be resolved fails the start, naming the field and the reference.
- https: the system trust store, plus `tls.caFile` and a client certificate when the
  subscription has `tls` (actors/delivery/document/tls.py); the context is built (and cached) when
  the actor starts, never per request. A TLS failure is a connection error like any other:
  retried or dead-lettered, journaled with the TLS reason.

Pool and timeouts. The pool is `maxConnections`, or `4 x window` clamped to 10..1000:
the egress serves every partition of its subscription and the partition count is not
known when it starts, so four full windows is a guess that a one-partition subscription
never exceeds, and 1000 bounds the file descriptors. At most `pool` pushes are under way
at once (a batch's linger included), no more than pooled connections, so `timeoutMs`
(aiohttp's `total`, which would otherwise include waiting for a pooled connection)
measures the endpoint, not our queue. The origin's connection limit is shared by its
subscriptions, which take turns (actors/delivery/egress/origin.py, `Slots`).

How a request is sent is the transport's (actors/delivery/egress/transport.py: aiohttp, or the
lean HTTP/1.1 client, the default for `http://`); both keep what this docstring says.
With `batchSize` > 1 the egress queues records per partition and pushes them as one JSON
request (actors/delivery/egress/batching.py), answering the partition with one `BatchOutcome`.

Redirects are not followed: a 3xx is a failure like any non-2xx (as most webhook senders
do; following would turn a POST into a GET on 303 and let an endpoint point us anywhere).
Responses are read up to 64 KiB and discarded; a longer body closes the connection
instead of being read to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Final

import aiohttp
import msgspec
from yarl import URL

from actors.delivery.document.secrets import resolved_headers, resolved_secret
from actors.delivery.document.settings import EgressSettings
from actors.delivery.document.signing import signing_keys
from actors.delivery.document.subscription import (
    BODYLESS_METHODS,
    redact_uri,
    reserved_header,
)
from actors.delivery.document.tls import files_context
from actors.delivery.egress.batching import (
    PartitionQueues,
    Queued,
)
from actors.delivery.egress.breaker_watch import BreakerWatch
from actors.delivery.egress.guard import DestinationDenied, DestinationGuard
from actors.delivery.egress.origin import Origin, origin_of
from actors.delivery.egress.outlet import (
    Answer,
    OutletActor,
    describe_error,
    failure_of,
    outcome_of,
)
from actors.delivery.egress.push import Job, Push
from actors.delivery.egress.redaction import Redactor, sent_secrets
from actors.delivery.egress.requests import Requests
from actors.delivery.egress.status import OriginStatus, OutletStatus
from actors.delivery.egress.transport import (
    Done,
    Exchange,
    LeanTransport,
    Reply,
    Transport,
    TransportName,
    TransportSettings,
    make_transport,
)
from actors.shared.messages import (
    BatchOutcome,
    Deliver,
    Delivered,
    DeliverMany,
    Record,
)
from runtime.host.metrics import Registry
from runtime.kernel.actor import Ref
from runtime.kernel.backoff import parse_retry_after

log = logging.getLogger(__name__)
USER_AGENT: Final = "hookstream/0.1"


def header_safe(text: str) -> str:
    """`text` without CR and LF, which would end the header (header injection)."""
    return text.replace("\r", "").replace("\n", "")


def static_headers(settings: EgressSettings, has_body: bool,
                   added: dict[str, str] | None = None) -> dict[str, str]:
    """The headers that are the same for every push to this endpoint; `added`: the
    subscription's headers with their references resolved (default: as written)."""
    headers = {"User-Agent": USER_AGENT}
    if has_body:
        headers["Content-Type"] = f"text/plain; charset={header_safe(settings.charset)}"
    for name, value in (settings.headers if added is None else added).items():
        clean = header_safe(name).strip()
        if not clean or reserved_header(clean):
            continue
        for existing in [h for h in headers if h.lower() == clean.lower()]:
            del headers[existing]  # the subscription overrides our Content-Type/User-Agent
        headers[clean] = header_safe(value)
    headers["QOH-Consumer"] = header_safe(settings.consumer_header)
    headers["QOH-Broker"] = header_safe(settings.broker)
    return headers


def describe(exc: BaseException, timeout_ms: int, redactor: Redactor | None = None) -> str:
    """A short text for `Failed.error` and the journal; `redactor` takes the
    subscription's secrets out before it is cut (a cut secret would leak its start)."""
    text = str(exc)
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error,
                                                                   DestinationDenied):
        text = f"{exc.host}:{exc.port}: {exc.os_error}"  # aiohttp's own text drops the why
    if isinstance(exc, TimeoutError) and not text:
        text = f"no complete response within {timeout_ms} ms"
    if redactor is not None:
        text = redactor.text(text) or ""
    return describe_error(exc, text)


def receiver_action(status: int, action: str) -> Answer | None:
    """`QOH-Action: skip | dead-letter | retry-after=<ms>` on a response, whatever its
    status: the receiver decides the record's fate. An unknown action is ignored (None:
    the status decides), so a receiver's typo never loses a record."""
    verb, _, value = action.strip().lower().partition("=")
    if verb == "skip":
        return Answer(status, action="skip", reason=f"QOH-Action: skip (HTTP {status})")
    if verb == "dead-letter":
        return Answer(status, f"HTTP {status}, QOH-Action: dead-letter", action="dead-letter")
    if verb == "retry-after" and value.strip().isdecimal():
        return Answer(status, f"HTTP {status}, QOH-Action: retry-after={value.strip()}",
                      retry_after_ms=int(value))
    return None


_SUCCESS: Final = {status: Answer(status) for status in (200, 201, 202, 204)}
"""The usual 2xx answers, made once (an Answer is immutable)."""


class _PushCrashed:
    """A push's callback raised: the egress crashes in its own turn (push.py)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


GoneCallback = Callable[[str, str], None]
"""Told (subscription key, reason) when the endpoint answers 410 Gone."""


class EgressActor(OutletActor):
    """Pushes the records of one subscription to its endpoint."""

    light = True  # a cursor's dispatch at a time, by the thousand (kernel turns)

    __slots__ = ("_batch_size", "_batches", "_event_loop", "_fail_fast", "_finished",
                 "_form", "_gone", "_has_body", "_headers", "_lean", "_linger_ms",
                 "_method", "_pushes", "_redact", "_session",
                 "_starting", "_timeout_ms", "_url", "_watch", "guard", "on_gone", "origin",
                 "settings", "slots", "subscription", "transport_name")

    def __init__(self, name: str, settings: EgressSettings, metrics: Registry,
                 guard: DestinationGuard | None = None, origin: Origin | None = None,
                 on_gone: GoneCallback | None = None,
                 transport: TransportName | None = None) -> None:
        # the endpoint label (journal, status, logs) never shows user-info or query values
        super().__init__(name, settings.subscription, redact_uri(settings.uri), settings.pool,
                         metrics)
        self.guard = guard or DestinationGuard()
        # shared with every subscription pushing to the same origin (the service's
        # registry); changed only through its methods (actors/delivery/egress/origin.py)
        self.origin = origin or Origin(origin_of(settings.uri))
        self.slots = self.origin.slots  # made once per origin, never replaced
        self.subscription = settings.subscription  # whose turn a push waits in (push.py)
        self.settings = settings
        self._method = settings.method
        self._has_body = self._method not in BODYLESS_METHODS
        self._timeout_ms = settings.timeout_ms
        self._headers = static_headers(settings, self._has_body)
        self._url: URL | str = settings.uri
        self._form = Requests(self._has_body, settings.charset, settings.query_param_key)
        self._redact = Redactor(())  # the secrets it sends, once they are resolved
        self._session: Transport | None = None
        # the lean transport of a method with a body: single records go as a template
        # and a string of their own headers (`_lines`), not a dict (issue 37)
        self._lean: LeanTransport | None = None
        self.on_gone = on_gone
        self._gone = False
        # bounded retries: attempts while the breaker is open fail at once and count
        # (actors/delivery/egress/origin.py); retrying forever: they wait for the probe
        self._fail_fast = settings.fail_fast
        self._watch = BreakerWatch(self.origin.name, metrics)
        self.transport_name = transport  # None: the default (actors/delivery/egress/transport.py)
        self._batch_size = settings.batch_size
        self._linger_ms = settings.batch_linger_ms
        self._batches: PartitionQueues[Queued] = PartitionQueues()
        self._pushes: set[Push] | None = None  # under way, at most `pool` (push.py);
        # made on first use, as the outlet's queues (issue 24)
        self._starting = False  # `_start_pending` is running (a push may end inside it)
        # records delivered in this turn of the loop, per cursor incarnation, told at its
        # end in one message (made on first use)
        self._finished: dict[tuple[int, int], tuple[Ref, list[Record], int, float]] | None \
            = None
        self._event_loop: asyncio.AbstractEventLoop | None = None  # set at the start

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        self._event_loop = asyncio.get_running_loop()  # a getpid() call each on 3.11
        # references resolved, TLS files loaded: a bad one fails the start, naming it
        settings, allowed = self.settings, self.guard.references
        headers = resolved_headers(settings.headers, allowed)
        secret = resolved_secret(settings.signing_secret, allowed)
        ssl_setting = files_context(settings.tls, allowed)
        keys = signing_keys(secret) if secret else []  # a bad secret fails the start
        self._form = Requests(self._has_body, settings.charset, settings.query_param_key,
                                  keys)
        self._redact = Redactor(sent_secrets(settings.uri, headers, secret))
        if headers != settings.headers:
            self._headers = static_headers(settings, self._has_body, headers)
        # A URL yarl rejects stays text: every request then fails with aiohttp's own
        # error and is retried or dead-lettered like any failure, never dropped.
        with contextlib.suppress(ValueError):
            self._url = URL(settings.uri)
        self._session = make_transport(TransportSettings(
            self._url, self._headers, self.pool, settings.timeout_ms / 1000,
            settings.connect_timeout_ms / 1000, self.guard.socket_factory, ssl_setting),
            self.transport_name, self.origin.shelf, owner=self)
        if isinstance(self._session, LeanTransport) and self._has_body:
            self._lean = self._session

    async def handle(self, message: object) -> OutletStatus | None:
        if isinstance(message, Deliver) and self._batch_size == 1:
            self._accept(message)
        elif isinstance(message, DeliverMany):  # the hot path: a cursor's dispatch
            if self._batch_size == 1:
                self._accept_many(message)
            else:
                self._queue(message.records, message.epoch, message.reply_to, False)
        elif isinstance(message, Deliver):  # batching: a retry, or a replay
            self._queue([message.record], message.epoch, message.reply_to, True)
        elif isinstance(message, _PushCrashed):
            raise message.error
        else:
            return await super().handle(message)  # a status query; refuses the rest
        return None

    # -- single records: pushes by callback (actors/delivery/egress/push.py) ------------
    def _accept(self, deliver: Deliver) -> None:
        """Push now if fewer than `pool` are under way, else after one of them ended."""
        if self._pending is None:
            self._pending = deque()
        self._pending.append(deliver)
        if not self._starting:
            self._start_pending()

    def _accept_many(self, many: DeliverMany) -> None:
        """A cursor's records, each its own push (a `Deliver` each, as if sent alone)."""
        if self._pending is None:
            self._pending = deque()
        epoch, reply_to = many.epoch, many.reply_to
        self._pending.extend([Deliver(record, epoch, reply_to) for record in many.records])
        if not self._starting:
            self._start_pending()

    def _start_pending(self) -> None:
        """Start what the pool has room for; a push that ends at once (its breaker is
        open) makes room in this loop, never in a call nested inside it."""
        pushes = self._pushes
        if pushes is None:
            pushes = self._pushes = set()
        self._starting = True
        try:
            if self._batch_size == 1:  # single records: `_next_job`, inline (issue 37)
                pending, pool, gauge = self._pending, self.pool, self._inflight_gauge
                while pending and len(pushes) < pool:
                    push = Push(self, pending.popleft())
                    pushes.add(push)
                    self._inflight += 1
                    gauge.value += 1  # `inc()`, without the call
                    push.go()
                return
            while len(pushes) < self.pool:
                job, linger_ms = self._next_job()
                if job is None:
                    return
                push = Push(self, job)
                pushes.add(push)
                self._inflight += 1
                self._inflight_gauge.inc()
                push.begin(linger_ms)
        finally:
            self._starting = False

    def _next_job(self) -> tuple[Job | None, int]:
        """The next record, or batch (with how long a short one lingers for more)."""
        if self._batch_size == 1:
            pending = self._pending
            return (pending.popleft() if pending else None), 0
        batch = self._batches.take(self._batch_size)
        if not batch:
            return None, 0
        return batch, self._linger_ms if len(batch) < self._batch_size else 0

    def top_up(self, batch: list[Queued]) -> None:
        """A short batch lingered: more of its partition's records, up to `batchSize`."""
        record = batch[0][0]
        batch += self._batches.take_more((record.topic, record.partition),
                                         self._batch_size - len(batch))

    def may_go(self, job: Job) -> int | Answer | None:
        """One look at the origin: None to go now, ms to look again after, or the failed
        answer of a breaker that is open while retries are bounded. The records wait,
        the partitions' windows fill and fetching pauses; nothing is retried in a hot
        loop and no attempt is spent (actors/delivery/egress/origin.py says why). A
        replay is pressed once, after an outage: its pushes wait for the probe like
        records retried forever instead of failing at the breaker still open (#25)."""
        origin = self.origin
        held = origin.hold(self.context.clock.monotonic_ms())
        if origin.breaker.transitions:  # `_report_transitions` has none to take else
            self._report_transitions()
        if held is None:
            return None
        first = job.record if isinstance(job, Deliver) else job[0][0]
        if held.breaker and self._fail_fast and first.replay is None:
            return self._breaker_answer()
        return held.ms

    def _breaker_answer(self) -> Answer:
        return Answer(None, f"circuit breaker open for {self.origin.name}: not sent",
                      local=True)

    def start_request(self, job: Job, done: Done) -> Exchange:
        lean = self._lean
        if lean is not None and isinstance(job, Deliver):
            record = job.record
            lines = self._form.lines(record, self.context.clock.wall_ms() // 1000)
            return lean.post(self._method, lines, record.value or b"", done)
        if self._session is None:
            raise RuntimeError(f"{self.path} has no HTTP session (not started or stopped)")
        now_s = self.context.clock.wall_ms() // 1000
        headers, body, params = (self._form.build(job.record, now_s)
                                 if isinstance(job, Deliver) else
                                 self._form.batch([queued[0] for queued in job], now_s))
        return self._session.start(self._method, headers, body, params, done)

    def answer_of(self, reply: Reply) -> Answer:
        """What an answered request means, told to the origin."""
        status, _, action, body = reply
        if action is None and not body and 200 <= status < 300:  # the usual answer
            answer = _SUCCESS.get(status) or Answer(status)  # `_answer`, `_settle_origin`
            origin = self.origin
            origin.answered(True, self.context.clock.monotonic_ms())
            if origin.breaker.transitions:
                self._report_transitions()
            return answer
        answer = self._answer(*reply)
        self._settle_origin(answer)
        return answer

    def error_answer(self, exc: BaseException) -> Answer:
        """A request that got no answer (timeout, connection error), told to the origin."""
        self._origin_answered(False)
        return Answer(None, self.describe(exc))

    def pushed(self, push: Push, answer: Answer) -> None:
        """`push` ended with `answer`: counted, journaled, told to its cursor; the next
        record the pool has room for starts."""
        latency_ms = (time.perf_counter() - push.started) * 1000
        if self._pushes is not None:
            self._pushes.discard(push)
        self._inflight -= 1
        self._inflight_gauge.value -= 1  # `inc(-1)`, without the call
        self._duration.observe(latency_ms)
        job = push.job
        if isinstance(job, Deliver):
            record = job.record
            if answer.error is None and answer.action is None and record.attempt == 1 \
                    and record.retry is None and record.replay is None:
                self._delivered(job, record, answer, latency_ms)
            else:
                self._told(job, answer, latency_ms)
        else:
            records = [queued[0] for queued in job]
            self._account(records, answer, latency_ms)
            self._reply(job, answer, latency_ms)
        if not self._starting and (self._pending or (self._batch_size > 1 and self._batches)):
            self._start_pending()

    def _delivered(self, deliver: Deliver, record: Record, answer: Answer,
                   latency_ms: float) -> None:
        """`_told` of the usual push: a first attempt's 2xx, no retry topic, no replay;
        what `_account`, `_journal_outcome`, `_remember`, `outcome_of` and `_finish_soon`
        do for it, in one call (issue 37: a dozen calls per push before; the attempts
        and the journal's ledger are checked against the general path in
        tests/integration/test_egress_template.py)."""
        status = answer.status
        self._requests["2xx"].value += 1  # `_requests_of("2xx").inc(1)`, without the call
        now_wall = self.context.clock.wall_ms()
        if self._failing_logged:
            self._observe(True, status, None, now_wall)
        else:  # a success never starts the failing log: only its end is looked for
            self.health.record(True, status, None, now_wall)
        topic, partition, offset = record.topic, record.partition, record.offset
        self.context.delivered((
            self._subscription, topic, partition, offset, now_wall, latency_ms,
            record.timestamp_ms, record.fetched_ms, status, self.endpoint))
        ring = self.attempts
        if ring is not None:
            ring.delivered(topic, partition, offset, record.timestamp_ms,
                           now_wall - round(latency_ms), 1, status or 0, latency_ms)
        self._finish_soon(deliver.reply_to, record, deliver.epoch, status or 0, latency_ms)

    def _told(self, deliver: Deliver, answer: Answer, latency_ms: float) -> None:
        record = deliver.record
        self._account((record,), answer, latency_ms)
        outcome = outcome_of(record, deliver.epoch, answer, latency_ms)
        if record.replay is None and isinstance(outcome, Delivered):
            self._finish_soon(deliver.reply_to, record, outcome.epoch, outcome.status,
                              outcome.latency_ms)
        else:
            deliver.reply_to.tell_system(outcome)

    def _finish_soon(self, reply_to: Ref, record: Record, epoch: int, status: int,
                     latency_ms: float) -> None:
        """Gather the records delivered in this turn of the loop for their cursor (issue
        37, outcomes in bursts): uvloop hands over every socket that is ready in one turn,
        so a burst's answers arrive together, and the cursor finishes them in one turn of
        its own and dispatches once, as for a batched request's answer (`BatchOutcome`
        with no failure: each record finished as if it came alone; a replay's pushes are
        answered one by one, as its actor expects). A record delivered alone in its turn
        goes as its `Delivered`, at once when no other push is under way (nothing else
        can end in this turn: at fan-out, a subscription's one record costs no loop
        callback). Failures go at once, each its own. A `Delivered` is made only for a
        record told alone (a burst's records are kept as records: issue 37)."""
        finished = self._finished
        if not finished and not self._inflight:  # the last under way: no burst to wait for
            reply_to.tell_system(Delivered(record, epoch, status, latency_ms))
            return
        if finished is None:
            finished = self._finished = {}
        if not finished:
            (self._event_loop or asyncio.get_running_loop()).call_soon(self._tell_finished)
        key = (id(reply_to), epoch)
        found = finished.get(key)
        if found is None:
            finished[key] = (reply_to, [record], status, latency_ms)
        else:
            found[1].append(record)

    def _tell_finished(self) -> None:
        finished, self._finished = self._finished, None
        for (_, epoch), (reply_to, records, status, latency_ms) in (finished or {}).items():
            reply_to.tell_system(Delivered(records[0], epoch, status, latency_ms)
                                 if len(records) == 1 else BatchOutcome(records, epoch, None))

    def push_crashed(self, error: Exception) -> None:
        """A push's step raised in a callback: crash the egress in its own turn."""
        self.tell_system(_PushCrashed(error))

    def _abandon_pushes(self) -> None:
        pushes, self._pushes = self._pushes or set(), None
        for push in pushes:
            push.abandon()
        self._inflight -= len(pushes)
        self._inflight_gauge.inc(-len(pushes))

    def _origin_status(self) -> OriginStatus:
        clock = self.context.clock
        return self.origin.status(clock.monotonic_ms(), clock.wall_ms())

    # -- batches (batchSize > 1) ------------------------------------------------------
    def _queue(self, records: list[Record], epoch: int, reply_to: Ref, alone: bool) -> None:
        batches = self._batches
        for record in records:
            batches.append((record.topic, record.partition), (record, epoch, reply_to, alone))
        if not self._starting:
            self._start_pending()

    @staticmethod
    def _reply(batch: list[Queued], answer: Answer, latency_ms: float) -> None:
        """One `BatchOutcome` per partition incarnation (a batch is one partition's
        records; two incarnations of it may share one across a restart)."""
        failure = failure_of(answer, latency_ms)
        by_actor: dict[tuple[int, int], tuple[Ref, int, list[Record]]] = {}
        for record, epoch, reply_to, alone in batch:
            if alone:
                reply_to.tell_system(outcome_of(record, epoch, answer, latency_ms))
                continue
            by_actor.setdefault((id(reply_to), epoch), (reply_to, epoch, []))[2].append(record)
        for reply_to, epoch, records in by_actor.values():
            reply_to.tell_system(BatchOutcome(records, epoch, failure))

    async def on_stop(self) -> None:
        self._tell_finished()  # what was delivered is told, even on the way out
        self._abandon_pushes()  # before the session: a closed connection tells nobody
        session, self._session = self._session, None
        self._lean = None
        if session is not None:
            await session.close()

    def _settle_origin(self, answer: Answer) -> None:
        """Tell the origin what an answer means for it: its breaker's count, a "slow
        down", a 410's disable."""
        self._origin_answered(answer.error is None or answer.action == "skip")
        if answer.status in (429, 503) and answer.retry_after_ms is not None:
            self.origin.throttle(self.context.clock.monotonic_ms() + answer.retry_after_ms)
        if answer.action == "disable":
            self._disable()

    def _answer(self, status: int, retry_after: str | None, action: str | None,
                body: bytes) -> Answer:
        answer = self._decide(status, retry_after, action)
        # a receiver that reflects its request must not show our secrets to readers of
        # the attempts API (#34)
        return msgspec.structs.replace(answer, response=self._redact.body(body)) if body \
            else answer

    def _decide(self, status: int, retry_after: str | None, action: str | None) -> Answer:
        decided = receiver_action(status, action) if action is not None else None
        if decided is not None:
            return decided
        if 200 <= status < 300:
            return _SUCCESS.get(status) or Answer(status)
        if status == 410:
            return Answer(status, "HTTP 410 Gone: the subscription is disabled",
                          action="disable")
        retry_ms = parse_retry_after(retry_after, self.context.clock.wall_ms())
        return Answer(status, f"HTTP {status}", retry_ms)

    def _disable(self) -> None:
        """A 410 Gone: tell the service once (it stops the subscription's tree)."""
        if not self._gone and self.on_gone is not None:
            self._gone = True
            self.on_gone(self.settings.subscription, f"{self.endpoint} answered 410 Gone")

    def _origin_answered(self, ok: bool) -> None:
        origin = self.origin
        origin.answered(ok, self.context.clock.monotonic_ms())
        if origin.breaker.transitions:  # `_report_transitions` has none to take else
            self._report_transitions()

    def _report_transitions(self) -> None:
        """Log, journal and count the breaker's changes (its origin hands each out once:
        whichever of its egress actors asks first)."""
        self._watch.report(self.origin, self._subscription, self.context)

    def describe(self, exc: BaseException) -> str:
        """An error's text may quote what the receiver answered (#34)."""
        return describe(exc, self._timeout_ms, self._redact)
