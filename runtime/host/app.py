"""`Runtime`: the public entry point, for the CLI and for embedding alike.

    async with Runtime.from_file("config.toml") as runtime:
        await runtime.wait()          # or run your own program beside it

Start order: embedded brokers, journal, actor system, services, admin server (last, so
`/healthz` says ok only when everything behind it runs). Stop is the reverse, within
`runtime.shutdown_deadline_ms`.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, Unpack, cast, overload

from aiohttp import web

from runtime.errors import ConfigError, UsageError
from runtime.host.admin import AdminServer
from runtime.host.config import Config, load_config
from runtime.host.journal import (
    Delivery,
    DeliveryRow,
    Event,
    EventJournal,
    EventType,
    Journal,
    JournalFlusher,
    Ledger,
    NullJournal,
    expand,
    journal_summary,
    row_event,
    rows_of,
)
from runtime.host.metrics import Registry
from runtime.host.preflight import listen_error, preflight
from runtime.host.probe import BrokerProbe, ProbeActor
from runtime.host.process import ProcessSampler, SamplerActor
from runtime.host.service import (
    ConsumeOptions,
    Consumption,
    DelayQueue,
    InProcessConsumers,
    RecordHandler,
    Service,
    ServiceFactory,
    discover,
    readiness_of,
    summary_of,
)
from runtime.host.status_page import HEADERS, PAGE, SCRIPT
from runtime.kafka import compat
from runtime.kafka.broker import EmbeddedBroker
from runtime.kernel.actor import Lifecycle
from runtime.kernel.clock import Alarm, Clock, RealClock, within
from runtime.kernel.gate import Gate
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem

try:
    VERSION: str = importlib.metadata.version("hookstream")
except importlib.metadata.PackageNotFoundError:  # run from a clone without `pip install`
    VERSION = "unknown"
log = logging.getLogger("runtime")
S = TypeVar("S")


GC_YOUNG_THRESHOLD = 20_000
GC_YOUNG_MAX = 100_000
GC_FROZEN_PER_YOUNG = 30
"""The young generation grows with what is kept out of the collector (one allocation
allowed per this many frozen objects): a burst to every subscriber holds records, pushes
and answers in flight in proportion to them, and each young pass walks the survivors. At
10,000 subscribers (3 million objects frozen) passes every 20,000 allocations took 15 us of
a delivery's CPU, every 100,000 6 us (bench/RESULTS.md); at 1,000 it stays 20,000."""
GC_YOUNG_SIZING_MS = 10_000
"""The young generation is sized again at most this often: `gc.get_freeze_count` walks
every frozen object (24 ms at 3 million), and every subscribe asks to keep its actors."""


def young_threshold(frozen: int) -> int:
    """Allocations between young collections, with `frozen` objects kept long-lived."""
    return min(GC_YOUNG_MAX, max(GC_YOUNG_THRESHOLD, frozen // GC_FROZEN_PER_YOUNG))


class Runtime:
    def __init__(self, config: Config, *, clock: Clock | None = None,
                 services: Sequence[ServiceFactory[Runtime]] | None = None) -> None:
        self.config = config
        self.clock = clock or RealClock()
        self.metrics = Registry()
        self.journal: EventJournal = NullJournal()
        self._listeners: dict[str, list[Callable[[Event], None]]] = {}
        self._next_young_sizing_ms = 0  # when keep_long_lived may size the young again
        self._young_sizing: Alarm | None = None  # the sizing due when it may again
        self._started_ms: int | None = None  # monotonic, once running (uptime)
        # the journal's backpressure: it closes the gate when its flushes fall behind and
        # the actors wait (runtime/kernel/gate.py)
        self.pace = Gate()
        # the egress's plain first-attempt deliveries: rows' values added to the
        # journal's flat ledger without a Python call (issue 35); journal off, only
        # listeners hear them
        self._ledger: Ledger = []
        self._delivered: Callable[[DeliveryRow], None] = \
            self._ledger.extend if config.journal.enabled else self._unjournaled
        self.system = ActorSystem("hookstream", clock=self.clock, emit=self._emit,
                                  lifecycle=self._lifecycle, pace=self.pace,
                                  delivered=self._delivered)
        self.admin = AdminServer.from_config(config.admin, self.metrics, self._health)
        self.admin.app.router.add_get("/", _status_page)
        self.admin.app.router.add_get("/status.js", _status_script)
        self.admin.app.router.add_get("/readyz", self._readyz)
        self.services: dict[str, Service[Runtime]] = {}
        self._factories = list(services) if services is not None else None
        self._brokers: dict[str, EmbeddedBroker] = {}
        self._bootstrap: dict[str, str] = {}
        self.sampler = ProcessSampler(self.metrics, self.clock)
        self.probe = BrokerProbe(self._bootstrap, self.clock)  # sees brokers as they start
        self._state = "new"
        self._stopped = asyncio.Event()
        self._stop_waiters: list[Callable[[BaseException | None], None]] = []

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> Runtime:
        return cls(load_config(path), **kwargs)

    # -- what services use -------------------------------------------------------------
    def bootstrap(self, broker_name: str) -> str:
        """The `host:port` list of a configured broker (embedded ones once started)."""
        self.config.broker(broker_name)
        return self._bootstrap[broker_name]

    def is_embedded(self, broker_name: str) -> bool:
        """True for a broker this runtime started itself (see runtime.kafka.compat)."""
        return broker_name in self._brokers

    def has_embedded_quirks(self, broker_name: str) -> bool:
        """True for an embedded broker, whoever started it (see runtime.kafka.compat)."""
        return (self.is_embedded(broker_name)
                or self.config.broker(broker_name).embedded_quirks
                or compat.known_embedded(self._bootstrap.get(broker_name, "")))

    def consumer_settings(self, broker_name: str) -> dict[str, object]:
        """Consumer settings that work around the quirks of this broker, if any."""
        return compat.fetch_settings(self.has_embedded_quirks(broker_name))

    @overload
    def service(self, which: str) -> Service[Runtime]: ...

    @overload
    def service(self, which: type[S]) -> S: ...

    def service(self, which: str | type[S]) -> Service[Runtime] | S:
        """A running service, by name (`"delivery"`) or, typed, by class
        (`runtime.service(DeliveryService)`)."""
        name = which if isinstance(which, str) else getattr(which, "name", which.__name__)
        found = self.services.get(name)
        if found is None:
            raise UsageError(f"service {name!r} is not running "
                             f"(running: {', '.join(self.services) or 'none'})")
        if not isinstance(which, str) and not isinstance(found, which):
            raise UsageError(f"service {name!r} is a {type(found).__name__}, "
                             f"not a {which.__name__}")
        return found

    @property
    def delay(self) -> DelayQueue[Runtime]:
        """The delay queue: `await runtime.delay.send(target, value, delay_ms=...)`."""
        return cast(DelayQueue[Runtime], self.service("delay"))

    async def consume(self, group_id: str, handler: RecordHandler,
                      **options: Unpack[ConsumeOptions]) -> Consumption:
        """Consume `topics` (or `pattern`) as consumer group `group_id` with an async
        function instead of a webhook: `await handler(record)` per record, with every
        guarantee of the HTTP path (window, key lanes, retries, dead letters, commits of
        contiguous offsets only, drains, supervision, journal and metrics). Returning
        means done, raising retries, `runtime.Skip` finishes without retrying,
        `runtime.DeadLetter(reason)` gives the record up now. Returns once the consumer
        is running; `await handle.stop()` drains and commits. Not persisted: the program
        that registers it owns it. See README, "Use it as a library"."""
        service = self.service("delivery")
        if not callable(getattr(service, "consume", None)):
            raise UsageError(f"the delivery service {type(service).__name__} has no "
                             "in-process handlers (consume)")
        consumers = cast(InProcessConsumers[Runtime], service)
        return await consumers.consume(group_id, handler, **options)

    def listen(self, event_type: EventType, listener: Callable[[Event], None]) -> None:
        """Call `listener` with every event of `event_type` the actors emit, as they emit
        it (on the event loop, inside the emitting actor's step: keep it short; an error
        is logged, never raised into the actor). Two kinds come later, and in bulk: the
        egress's plain first-attempt deliveries (`delivered`, attempt 1) are heard as the
        journal files them, at the next commit or flush; a commit round's `committed`
        is heard as one event per position."""
        self._listeners.setdefault(event_type, []).append(listener)

    def _emit(self, event: Event | Delivery) -> None:
        if isinstance(event, Delivery):  # as the actors' `delivered` sink takes it
            self._delivered(event.row())
            return
        self.journal.emit(event)
        listeners = self._listeners.get(event.type)
        if listeners:  # a commit round is heard as its positions, one by one
            self._tell(listeners, expand(event) if event.type == "committed" else [event])

    def _tell(self, listeners: list[Callable[[Event], None]], events: list[Event]) -> None:
        for event in events:
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("event listener %r failed on %s", listener, event.type)

    def _heard(self, ledger: Ledger) -> None:
        """The egress's plain deliveries, as the journal files them (at the next commit or
        flush, not in the delivering actor's step; its flat ledger), to the `delivered`
        listeners."""
        listeners = self._listeners.get("delivered")
        if listeners:
            clock = self.clock
            shift = clock.wall_ms() - clock.monotonic_ms()
            self._tell(listeners, [row_event(row, shift) for row in rows_of(ledger)])

    def _unjournaled(self, row: DeliveryRow) -> None:
        """The `delivered` sink with the journal off: the listeners only."""
        self._heard(list(row))

    def _lifecycle(self, event: Lifecycle) -> None:
        """An actor started, restarted, stopped or crashed: journaled, and heard by the
        listeners of its type as every other event is (they were journaled only, and a
        listener of `actor_crashed` heard nothing)."""
        self._emit(Event(type=event.type, ts_ms=event.ts_ms, actor=event.actor,
                         reason=event.reason))

    def _health(self) -> dict[str, object]:
        started = self._started_ms
        uptime = None if started is None else (self.clock.monotonic_ms() - started) // 1000
        return {"status": "ok" if self._state == "running" else self._state,
                "services": list(self.services),
                "brokers": dict(self._bootstrap),
                "version": VERSION, "uptime_s": uptime}

    async def readiness(self) -> list[str]:
        """Why this instance is not ready to do its work; empty when it is."""
        if self._state != "running":
            return [f"runtime is {self._state}"]
        reasons = [f"broker {name!r} unreachable: {why}"
                   for name, why in sorted(self.probe.problems.items())]
        for service in self.services.values():
            reasons += await readiness_of(service)
        return reasons

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = await self.readiness()
        return web.json_response({"ready": not reasons, "reasons": reasons},
                                 status=503 if reasons else 200)

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "new":
            raise UsageError("Runtime.start() called twice; build a new Runtime")
        preflight(self.config)  # before anything starts: nothing to undo
        self._state = "starting"
        sys.setswitchinterval(self.config.runtime.switch_interval_ms / 1000)
        try:
            await self._start_brokers()
            await self.probe.check()  # readiness knows the brokers before the admin API opens
            journal = await self._open_journal()
            await self.system.start()
            await self._start_host_actors(journal)
            await self._start_services()
            await self._start_admin()
        except BaseException:
            await self.stop()
            raise
        self._state = "running"
        self._started_ms = self.clock.monotonic_ms()
        if self.config.runtime.gc_freeze:
            # What start-up built lives for the whole run: keep it out of the collector's
            # full passes, which otherwise pause the loop for tens of ms (delay lateness).
            gc.freeze()
            # Young collections every GC_YOUNG_THRESHOLD allocations instead of 700: a
            # fan-out holds tens of thousands of records, futures and tasks in flight, and
            # each young pass walked them (bench/RESULTS.md, "Fan-out": 37 -> 6 us of GC
            # per delivery with a thousand subscriptions). Only cycles wait longer.
            gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        log.info("actors:\n%s", "\n".join(self.system.root.describe("  ")))
        log.info("admin API listening on %s", self.admin.url)
        log.info("%s", self.next_steps())

    def keep_long_lived(self) -> None:
        """What a service just built (a subscription's actors) lives long: out of the
        garbage collector's full passes too, as start-up's objects are. With a thousand
        subscriptions those passes took 45% of the CPU of a fan-out delivery
        (bench/RESULTS.md, "Fan-out"). Cheap: the collector's lists are spliced. The
        young generation grows with what is kept (`young_threshold`)."""
        if self.config.runtime.gc_freeze:
            gc.freeze()
            self._size_young()

    def _size_young(self) -> None:
        """The young generation sized to what is frozen now, at most every
        `GC_YOUNG_SIZING_MS` (counting walks every frozen object). Asked sooner, it is
        sized once more when that interval ends, so the last of a run of subscribes counts
        too: 10,000 subscribed in 16 s kept the size the first 4,500 made (49,528 instead of
        100,000), and a burst to all of them paid twice the young passes."""
        now_ms = self.clock.monotonic_ms()
        if now_ms >= self._next_young_sizing_ms:
            self._next_young_sizing_ms = now_ms + GC_YOUNG_SIZING_MS
            self._young_sizing = None
            gc.set_threshold(young_threshold(gc.get_freeze_count()), *gc.get_threshold()[1:])
        elif self._young_sizing is None:
            self._young_sizing = self.clock.call_at(self._next_young_sizing_ms,
                                                    self._size_young)

    def release_long_lived(self) -> None:
        """Something long-lived went away (an unsubscribe): give everything back to the
        collector, so the cycles it left are freed; the next `keep_long_lived` freezes
        what remains."""
        if self.config.runtime.gc_freeze:
            gc.unfreeze()

    def next_steps(self) -> str:
        """The last line of the start: where to look and what to try (issue 27)."""
        url = self.admin.url
        embedded = [broker.bootstrap for broker in self._brokers.values()]
        produce = f" and produce to the embedded broker at {embedded[0]}" if embedded else ""
        down = sorted(self.probe.problems)
        state = (f"started, not ready (broker {', '.join(map(repr, down))} unreachable: "
                 f"{url}/readyz says why)" if down else "ready")  # #34: it said ready
        return (f"{state}: status page {url}/ ; next: subscribe an endpoint with POST "
                f"{url}/broker/subscription{produce} (README, \"Try it\")")

    async def _start_host_actors(self, journal: Journal | None) -> None:
        """The journal's flusher (first, so it stops last), the probe and the sampler:
        supervised like every actor (a crash is logged, journaled and restarted by the
        root's rules)."""
        if journal is not None:
            metrics = self.metrics
            await self.system.spawn(ChildSpec("journal", lambda: JournalFlusher(
                "journal", journal, metrics)))
        probe, sampler = self.probe, self.sampler
        await self.system.spawn(ChildSpec("probe", lambda: ProbeActor("probe", probe)))
        await self.system.spawn(ChildSpec("sampler", lambda: SamplerActor("sampler", sampler)))

    async def _start_admin(self) -> None:
        try:
            await self.admin.start()
        except OSError as exc:  # lost a race for the port since the preflight check
            raise listen_error(self.admin.host, self.admin.port, exc) from None

    async def _start_brokers(self) -> None:
        from runtime.kafka import security

        for broker in self.config.brokers:
            if broker.bootstrap_servers != "embedded":
                self._bootstrap[broker.name] = broker.bootstrap_servers
            else:
                embedded = EmbeddedBroker(port=broker.embedded_port or None)
                await embedded.start()
                self._brokers[broker.name] = embedded
                self._bootstrap[broker.name] = embedded.bootstrap
                log.info("embedded broker %r listening on %s", broker.name, embedded.bootstrap)
            # Every Kafka client built for this address gets these settings from now on,
            # PLAINTEXT included (it replaces what an earlier runtime left for the address).
            security.register(self._bootstrap[broker.name], broker.security())
            if broker.security_protocol != "PLAINTEXT":
                log.info("broker %r: %s", broker.name, broker.security())

    async def _open_journal(self) -> Journal | None:
        cfg = self.config.journal
        if not cfg.enabled:
            return None
        journal = self.journal = Journal(
            cfg.dir, clock=self.clock, max_segment_bytes=cfg.max_segment_bytes,
            max_segment_age_ms=cfg.max_segment_age_ms, flush_interval_ms=cfg.flush_interval_ms,
            max_buffered=cfg.max_buffered_events, pace=self.pace, ledger=self._ledger,
        )
        journal.tap = self._heard
        await journal.open()  # its flushes: JournalFlusher, once the actor system runs
        log.info("journal writing to %s", cfg.dir)
        return journal

    async def _start_services(self) -> None:
        factories = self._factories if self._factories is not None else discover()
        for factory in factories:
            service = factory()
            await service.start(self)
            self.services[service.name] = service
            log.info("service %s started", service.name)

    async def stop(self) -> None:
        """Stop everything in reverse start order; idempotent."""
        if self._state in ("stopping", "stopped"):
            await self._stopped.wait()
            return
        ran = self._state == "running"
        self._state = "stopping"
        started = self.clock.monotonic_ms()
        deadline = started + self.config.runtime.shutdown_deadline_ms
        summaries = [summary_of(s) for s in self.services.values()]
        if self._young_sizing is not None:
            self._young_sizing.cancel()
        try:
            await self.admin.stop()
            names = list(reversed(self.services))
            await asyncio.gather(*(self._stop_service(n, deadline) for n in names))
            await self.system.stop(max(deadline - self.clock.monotonic_ms(), 100))
            await self.journal.stop()
            for broker in reversed(list(self._brokers.values())):
                await broker.stop()
        finally:
            self._state = "stopped"
            self._stopped.set()
            for settle in self._stop_waiters:
                settle(None)
        if ran:  # a start that failed says so itself
            took = self.clock.monotonic_ms() - started
            totals = "; ".join(s for s in [*summaries, journal_summary(self.journal)] if s)
            log.info("stopped cleanly in %d ms%s", took, f": {totals}" if totals else "")

    async def _stop_service(self, name: str, deadline_ms: int) -> None:
        """Services stop in parallel, each within what is left of the shutdown deadline."""
        budget_ms = max(deadline_ms - self.clock.monotonic_ms(), 0)
        try:
            await within(self.clock, self.services.pop(name).stop(), budget_ms)
        except TimeoutError:
            log.error("service %s did not stop in time: cancelled", name)
        except Exception:
            log.exception("service %s failed to stop cleanly", name)

    async def wait(self) -> None:
        """Run until `stop()` is called or the actor tree fails for good."""
        await self._until(asyncio.get_running_loop().create_future())

    async def _until(self, ended: asyncio.Future[BaseException | None]) -> None:
        """Until `ended` is settled: by its other holder, by `stop()`'s end or by the actor
        tree's (whose error is logged). Callbacks settle it: no task waits."""
        if self._stopped.is_set():
            return
        settle = partial(_settle, ended)
        self._stop_waiters.append(settle)
        self.system.on_end(settle)
        try:
            error = await ended
        finally:
            self._stop_waiters.remove(settle)
        if error is not None:
            log.error("actor tree failed: %r", error)

    async def run_until_signalled(self) -> None:
        """Start, run until SIGINT/SIGTERM, then stop gracefully.

        The handlers stay installed until the stop is complete: a second signal during
        shutdown is logged, not turned into a KeyboardInterrupt halfway through commits.
        """
        loop = asyncio.get_running_loop()
        signalled: asyncio.Future[BaseException | None] = loop.create_future()

        def on_signal(sig: signal.Signals) -> None:
            if signalled.done():
                log.warning("%s received again: already shutting down", sig.name)
            _settle(signalled)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await self.start()
            await self._until(signalled)  # a signal, a stop, or the tree's failure
            log.info("shutting down")
        finally:
            await self.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return (f"<Runtime {self._state} admin={self.admin.url} "
                f"services={list(self.services)} brokers={self._bootstrap}>")


async def _status_page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html", charset="utf-8",
                        headers=HEADERS)


async def _status_script(request: web.Request) -> web.Response:
    return web.Response(text=SCRIPT, content_type="text/javascript", charset="utf-8",
                        headers=HEADERS)


__all__ = ["ConfigError", "Runtime"]


def _settle(ended: asyncio.Future[BaseException | None],
            error: BaseException | None = None) -> None:
    if not ended.done():
        ended.set_result(error)
