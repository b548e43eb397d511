"""Pushes by callback (issue 37, actors/delivery/egress/push.py), against real aiohttp
servers on loopback under a real ActorSystem: no task per push once connections are warm,
the subscription's concurrency a count, the origin's holds as clock alarms (FakeClock:
exact virtual times), a stop that tells nothing, a burst's deliveries told together,
connections of one origin shared, kept warm between bursts and taken in turns by its
subscriptions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from aiohttp import web

from actors.delivery.document.settings import egress_settings
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.origin import CircuitBreaker, Origin
from actors.shared.messages import (
    BatchOutcome,
    Deliver,
    Delivered,
    DeliverMany,
    Failed,
    Record,
)
from runtime.host.metrics import Registry
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from tests.integration.outcomes import Keeper
from tests.integration.test_egress import make_consumer, make_record
from tests.waits import until

pytestmark = pytest.mark.integration

START_MS = 1_000
WAIT_S = 5.0


@dataclass
class Endpoint:
    """Answers 200 on `/ok`; on `/held` keeps each request until `release` is set. Counts
    the requests it has at once and the connections they came on."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    requests: int = 0
    now: int = 0
    most: int = 0
    peers: set[tuple[str, int]] = field(default_factory=set)
    batch_sizes: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/ok", self._ok)
        app.router.add_route("*", "/held", self._held)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def _arrived(self, request: web.Request) -> None:
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))
        self.batch_sizes.append(request.headers.get("QOH-Batch-Size", ""))
        self.requests += 1
        self.now += 1
        self.most = max(self.most, self.now)
        self.changed.set()

    async def _ok(self, request: web.Request) -> web.Response:
        self._arrived(request)
        self.now -= 1
        return web.Response(text="ok")

    async def _held(self, request: web.Request) -> web.Response:
        self._arrived(request)
        try:
            await asyncio.wait_for(self.release.wait(), 10)
        finally:
            self.now -= 1
        return web.Response(text="ok")

    async def until(self, requests: int) -> None:
        await until(lambda: self.requests >= requests, timeout_s=WAIT_S, wake=self.changed,
                    what=f"{requests} requests at the endpoint")


@dataclass(frozen=True)
class Told:
    """What the cursor was told of one record: `delivered`, or the failure."""

    record: Record
    failure: Failed | None = None

    @property
    def delivered(self) -> bool:
        return self.failure is None


class Cursor(Keeper[Told]):
    """Stands where the partition actor stands: keeps what it is told of each record (a
    burst's deliveries may come as one `BatchOutcome`) and how many messages it took."""

    def __init__(self) -> None:
        super().__init__("cursor")
        self.messages = 0

    async def handle(self, message: object) -> None:
        self.messages += 1
        if isinstance(message, BatchOutcome):
            assert message.failure is None  # failures come one by one
            self.keep(*(Told(record) for record in message.records))
        elif isinstance(message, Delivered):
            self.keep(Told(message.record))
        else:
            assert isinstance(message, Failed)
            self.keep(Told(message.record, message))


@dataclass
class Harness:
    system: ActorSystem
    clock: FakeClock
    endpoint: Endpoint
    collector: Cursor
    metrics: Registry = field(default_factory=Registry)

    async def egress(self, path: str = "/ok", name: str = "egress",
                     origin: Origin | None = None, **method: Any) -> EgressActor:
        consumer = make_consumer(self.endpoint.url + path, **method)
        settings = egress_settings(msgspec.structs.replace(consumer, id=name))
        actor = EgressActor(name, settings, self.metrics, origin=origin, transport="lean")
        await self.system.spawn(ChildSpec(name, lambda: actor, restart="temporary"))
        return actor

    def deliver(self, egress: EgressActor, offset: int) -> None:
        egress.tell_nowait(Deliver(make_record(offset), epoch=3, reply_to=self.collector))


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    endpoint = Endpoint()
    await endpoint.start()
    clock = FakeClock(START_MS)
    system = ActorSystem(clock=clock)
    await system.start()
    collector = Cursor()
    await system.spawn(ChildSpec("collector", lambda: collector))
    try:
        yield Harness(system, clock, endpoint, collector)
    finally:
        endpoint.release.set()
        await system.stop(deadline_ms=3000)
        assert endpoint.runner is not None
        await endpoint.runner.cleanup()


def egress_tasks() -> list[asyncio.Task[Any]]:
    """The tasks running code of actors/delivery/egress/ (a worker per push in flight
    before issue 37; the lean transport's connect tasks while a connection opens)."""
    return [task for task in asyncio.all_tasks() if "actors/delivery/egress/" in
            getattr(task.get_coro(), "cr_code", compile("", "?", "exec")).co_filename]


def open_origin(clock: FakeClock, open_ms: int = 500) -> Origin:
    origin = Origin("test-origin", CircuitBreaker(min_requests=1, open_ms=open_ms))
    origin.answered(False, clock.monotonic_ms())
    assert origin.state == "open"
    return origin


async def test_a_warm_egress_pushes_a_burst_without_a_task_per_push(harness: Harness) -> None:
    egress = await harness.egress("/held", maxConnections=20)
    for offset in range(20):  # the first burst opens the connections (a task each)
        harness.deliver(egress, offset)
    await harness.endpoint.until(20)
    harness.endpoint.release.set()
    await harness.collector.wait_for(20)
    harness.endpoint.release.clear()

    for offset in range(20, 40):
        harness.deliver(egress, offset)
    await harness.endpoint.until(40)

    assert egress_tasks() == []  # twenty in flight: no worker, no task of a push
    assert len(harness.endpoint.peers) == 20  # on the connections of the first burst
    harness.endpoint.release.set()
    outcomes = await harness.collector.wait_for(40)
    assert all(o.delivered for o in outcomes) and len(outcomes) == 40


async def test_a_subscriptions_concurrency_is_its_pool_and_the_rest_wait_in_order(
        harness: Harness) -> None:
    egress = await harness.egress("/held", maxConnections=3)
    for offset in range(10):
        harness.deliver(egress, offset)
    await harness.endpoint.until(3)
    await asyncio.sleep(0.05)  # room for a fourth request, were there one
    assert harness.endpoint.requests == 3
    assert "inflight=3/3 waiting=7" in repr(egress)

    harness.endpoint.release.set()
    outcomes = await harness.collector.wait_for(10)
    assert harness.endpoint.most == 3
    assert sorted(o.record.offset for o in outcomes) == list(range(10))
    assert "inflight=0/3 waiting=0" in repr(egress)


async def test_a_push_held_by_an_open_breaker_goes_as_the_probe_when_the_clock_says(
        harness: Harness) -> None:
    origin = open_origin(harness.clock, open_ms=500)  # retrying forever: held, not failed
    egress = await harness.egress(origin=origin)
    harness.deliver(egress, 1)
    harness.deliver(egress, 2)
    await harness.clock.advance_settled(499)
    assert harness.endpoint.requests == 0 and harness.collector.outcomes == []

    harness.clock.advance(1)  # 500 ms after it opened: one probe, the other still held
    await harness.endpoint.until(1)
    first = (await harness.collector.wait_for(1))[0]
    assert first.delivered and origin.state == "closed"
    await harness.clock.advance_settled(100)  # the held one looks again and goes
    outcomes = await harness.collector.wait_for(2)
    assert [o.delivered for o in outcomes] == [True, True]
    assert harness.endpoint.requests == 2


async def test_with_bounded_retries_an_open_breaker_fails_each_push_at_once_unsent(
        harness: Harness) -> None:
    origin = open_origin(harness.clock)
    egress = await harness.egress(origin=origin, retryBeforeCommit=3, maxConnections=2)
    for offset in range(50):  # past the pool: each fails in the loop that starts the next
        harness.deliver(egress, offset)
    outcomes = await harness.collector.wait_for(50)
    assert all(o.failure is not None and o.failure.failure.local for o in outcomes)
    assert harness.endpoint.requests == 0


async def test_a_503_with_retry_after_holds_the_next_push_until_then(harness: Harness) -> None:
    origin = Origin("throttled")
    origin.throttle(harness.clock.monotonic_ms() + 2000)
    egress = await harness.egress(origin=origin)
    harness.deliver(egress, 1)
    await harness.clock.advance_settled(1999)
    assert harness.endpoint.requests == 0
    harness.clock.advance(1)
    assert (await harness.collector.wait_for(1))[0].delivered


async def test_stopping_gives_up_held_waiting_and_sent_pushes_telling_nobody(
        harness: Harness) -> None:
    origin = Origin("shared", max_connections=1)
    sender = await harness.egress("/held", name="sender", origin=origin)
    waiter = await harness.egress("/held", name="waiter", origin=origin)
    harness.deliver(sender, 1)
    await harness.endpoint.until(1)  # sent: it holds the origin's one slot
    harness.deliver(waiter, 2)
    await harness.clock.settle()
    assert origin.slots.waiting == 1  # the waiter's push waits for that slot

    await harness.system.root.stop_child("waiter")
    await harness.system.root.stop_child("sender")

    assert origin.slots.waiting == 0
    assert harness.collector.outcomes == []
    # the slot came back: a new egress of the origin pushes at once
    harness.endpoint.release.set()
    third = await harness.egress("/ok", name="third", origin=origin)
    harness.deliver(third, 3)
    assert (await harness.collector.wait_for(1))[0].delivered


async def test_stopping_while_held_by_the_breaker_leaves_no_alarm_and_no_probe(
        harness: Harness) -> None:
    origin = open_origin(harness.clock, open_ms=500)
    egress = await harness.egress(origin=origin)
    harness.deliver(egress, 1)
    await harness.clock.settle()
    await harness.system.root.stop_child("egress")
    await harness.clock.advance_settled(1000)  # its alarm was cancelled: nothing goes
    assert harness.endpoint.requests == 0 and harness.collector.outcomes == []
    assert origin.hold(harness.clock.monotonic_ms()) is None  # the probe is still free


async def test_subscriptions_of_one_origin_share_warm_connections_and_take_turns(
        harness: Harness) -> None:
    origin = Origin("shared", max_connections=4)
    big = await harness.egress("/held", name="big", origin=origin, maxConnections=40)
    small = await harness.egress("/held", name="small", origin=origin, maxConnections=40)
    for offset in range(40):  # the big one comes first with ten times the origin's limit
        harness.deliver(big, offset)
    await harness.endpoint.until(4)
    for offset in range(100, 104):
        harness.deliver(small, offset)
    await harness.clock.settle()
    harness.endpoint.release.set()
    outcomes = await harness.collector.wait_for(44)

    order = [o.record.offset for o in outcomes]
    # the small one's four went after the big one's turn (TURN = 16 slots), not after
    # all of its 36 waiting
    assert max(order.index(offset) for offset in range(100, 104)) < 4 + 16 + 4 + 4
    assert harness.endpoint.most <= 4 and len(harness.endpoint.peers) <= 4
    harness.endpoint.release.clear()
    peers = set(harness.endpoint.peers)
    harness.endpoint.release.set()
    for offset in range(200, 210):  # a second burst: on the same warm connections
        harness.deliver(small, offset)
    await harness.collector.wait_for(54)
    assert harness.endpoint.peers == peers


async def test_a_cold_burst_of_many_subscriptions_opens_at_most_the_origins_limit(
        harness: Harness) -> None:
    origin = Origin("shared", max_connections=6)
    egresses = [await harness.egress("/ok", name=f"s{n}", origin=origin, maxConnections=10)
                for n in range(30)]
    for burst in range(2):  # cold, then warm
        for n, egress in enumerate(egresses):
            egress.tell_nowait(DeliverMany([make_record(burst * 1000 + n * 10 + k)
                                            for k in range(5)], epoch=3,
                                           reply_to=harness.collector))
        outcomes = await harness.collector.wait_for(150 * (burst + 1))
        assert all(o.delivered for o in outcomes)
        # the first burst opened at most the limit; the second reused them, opening none
        assert origin.shelf.opened <= 6 and len(harness.endpoint.peers) <= 6
    assert harness.endpoint.most <= 6
    assert len(origin.shelf) == origin.shelf.opened  # all kept alive for the next burst


async def test_a_bursts_deliveries_reach_their_cursor_in_fewer_messages(
        harness: Harness) -> None:
    egress = await harness.egress("/held", maxConnections=50)
    for offset in range(50):
        harness.deliver(egress, offset)
    await harness.endpoint.until(50)
    harness.endpoint.release.set()  # fifty answers at once
    outcomes = await harness.collector.wait_for(50)
    assert sorted(o.record.offset for o in outcomes) == list(range(50))  # each once
    assert all(o.delivered for o in outcomes)
    assert harness.collector.messages < 50


class Unruly(asyncio.Protocol):
    """A loopback server's connection that answers the n-th request of the server as
    `plan(n)` says: 'ok' (200), 'drop' (close without an answer), 'mute' (never answer),
    'split' (the answer in two writes), 'close' (200 with `Connection: close`)."""

    served = 0

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            Unruly.served += 1
            self.answer(self.plan(Unruly.served))

    def answer(self, how: str) -> None:
        assert self.transport is not None
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        if how == "drop":
            self.transport.close()
        elif how == "split":
            self.transport.write(ok[:17])
            asyncio.get_running_loop().call_later(0.005, self.transport.write, ok[17:])
        elif how == "close":
            self.transport.write(ok.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            self.transport.close()
        elif how == "ok":
            self.transport.write(ok)


async def test_every_push_is_answered_once_whatever_the_endpoint_does(
        harness: Harness) -> None:
    kinds = ("ok", "drop", "ok", "split", "mute", "close", "ok")
    Unruly.served = 0
    server = await asyncio.get_running_loop().create_server(
        lambda: Unruly(lambda n: kinds[n % len(kinds)]), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    harness.endpoint.url = f"http://127.0.0.1:{port}"
    try:
        egress = await harness.egress("/", maxConnections=20, timeoutMs=300,
                                      retryBeforeCommit=1)
        for offset in range(140):
            harness.deliver(egress, offset)
        outcomes = await harness.collector.wait_for(140)
        await asyncio.sleep(0.05)  # nothing more comes
    finally:
        server.close()
    assert sorted(o.record.offset for o in harness.collector.outcomes) == list(range(140))
    errors = {o.failure.failure.error.split(":")[0] for o in outcomes if o.failure}
    assert {"ConnectionLost", "TimeoutError"} <= errors <= {
        "ConnectionLost", "TimeoutError", "ConnectionResetError"}, errors
    assert sum(o.delivered for o in outcomes) >= 140 * 4 // 7 - 5
    assert "inflight=0/20 waiting=0" in repr(egress)


async def test_a_short_batch_lingers_on_the_clock_and_takes_what_came_meanwhile(
        harness: Harness) -> None:
    # one connection: what comes during the linger waits for it (with more, another
    # push would start a batch of its own, as another worker did)
    egress = await harness.egress(batchSize=10, batchLingerMs=50, maxConnections=1)
    first = [make_record(offset) for offset in range(3)]
    egress.tell_nowait(DeliverMany(first, epoch=3, reply_to=harness.collector))
    await harness.clock.advance_settled(30)
    more = [make_record(offset) for offset in range(3, 5)]
    egress.tell_nowait(DeliverMany(more, epoch=3, reply_to=harness.collector))
    await harness.clock.advance_settled(19)
    assert harness.endpoint.requests == 0  # still lingering: 49 of its 50 ms

    harness.clock.advance(1)
    outcomes = await harness.collector.wait_for(5)
    assert harness.endpoint.batch_sizes == ["5"]  # one request with all five
    assert sorted(o.record.offset for o in outcomes) == list(range(5))
    assert harness.collector.messages == 1
