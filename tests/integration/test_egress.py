"""The egress actor against real aiohttp servers on loopback, under a real ActorSystem.

Outcomes go to `Collector`, a small actor of this test standing where the partition actor
stands in production. Time for the headers comes from a FakeClock (so the timestamp is
exact); HTTP timeouts are aiohttp's own, in real time, and every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from actors.delivery.document.settings import egress_settings
from actors.delivery.document.subscription import (
    Consumer,
    Group,
    SubscriptionMethod,
    TopicConfig,
    TopicSpec,
)
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.origin import CircuitBreaker, Origin
from actors.delivery.egress.transport import RESPONSE_BODY_CAP, TransportName
from actors.shared.messages import (
    BatchOutcome,
    Deliver,
    Delivered,
    DeliverMany,
    Failed,
    Record,
)
from runtime.host.journal import Delivery, Event
from runtime.host.metrics import Registry
from runtime.kafka.broker import free_port
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from tests.integration.outcomes import Keeper
from tests.integration.test_transport import unanswered_listener
from tests.waits import until

pytestmark = pytest.mark.integration

TRANSPORTS: tuple[TransportName, ...] = ("aiohttp", "lean")

WALL_OFFSET_MS = 1_700_000_000_000
START_MS = 1_000
BIG_BODY_BYTES = 10 * 1024 * 1024
WAIT_S = 5.0
SECRET_KEY = b"0123456789abcdef0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(SECRET_KEY).decode()

# record orders/3/7 of `record()` below, with its timestamp (signing.py)
ORDERS_3_7_ID = "msg_" + hashlib.sha256(b"orders/3/7/1699999000000").hexdigest()[:32]


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: CIMultiDictProxy[str]
    body: bytes


class Endpoint:
    """A real HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()  # lets slow handlers finish at teardown
        self.big_written = 0
        self.big_done = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/hook", self._ok)
        app.router.add_route("*", "/status/{code}", self._status)
        app.router.add_route("*", "/slow", self._slow)
        app.router.add_route("*", "/sleep/{ms}", self._sleep)
        app.router.add_route("*", "/big", self._big)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _record(self, request: web.Request) -> None:
        self.seen.append(Seen(request.method, request.path, dict(request.query),
                              request.headers, await request.read()))
        self.arrived.set()

    async def _ok(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.Response(text="ok")

    async def _status(self, request: web.Request) -> web.Response:
        await self._record(request)
        headers = {}
        if "retry_after" in request.query:
            headers["Retry-After"] = request.query["retry_after"]
        if "location" in request.query:
            headers["Location"] = request.query["location"]
        return web.Response(status=int(request.match_info["code"]), headers=headers)

    async def _slow(self, request: web.Request) -> web.Response:
        await self._record(request)
        await asyncio.wait_for(self.release.wait(), 10)
        return web.Response(text="late")

    async def _sleep(self, request: web.Request) -> web.Response:
        await self._record(request)
        await asyncio.sleep(int(request.match_info["ms"]) / 1000)
        return web.Response(text="done")

    async def _big(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        response = web.StreamResponse()
        response.content_length = BIG_BODY_BYTES
        await response.prepare(request)
        chunk = b"x" * 65536
        try:
            while self.big_written < BIG_BODY_BYTES:
                await response.write(chunk)
                self.big_written += len(chunk)
        except (ConnectionError, OSError):
            pass  # the client hung up: what the cap is for
        finally:
            self.big_done.set()
        return response


class Collector(Keeper[Delivered | Failed]):
    """Stands where the partition actor stands: keeps every outcome it is told."""

    def __init__(self) -> None:
        super().__init__("collector")

    async def handle(self, message: Any) -> None:
        self.keep(message)


@dataclass
class Harness:
    system: ActorSystem
    endpoint: Endpoint
    collector: Collector
    events: list[Event]
    metrics: Registry
    transport: TransportName = "aiohttp"

    async def egress(self, path: str = "/hook", **method: Any) -> EgressActor:
        consumer = make_consumer(self.endpoint.url + path, **method)
        actor = EgressActor("egress", egress_settings(consumer), self.metrics,
                            transport=self.transport)
        await self.system.spawn(ChildSpec("egress", lambda: actor, restart="temporary"))
        return actor

    async def push(self, egress: EgressActor, *records: Record) -> list[Delivered | Failed]:
        before = len(self.collector.outcomes)
        for rec in records:
            await egress.tell(Deliver(rec, epoch=3, reply_to=self.collector))
        outcomes = await self.collector.wait_for(before + len(records))
        return outcomes[before:]


def make_consumer(uri: str, **method: Any) -> Consumer:
    # schema only, no semantic validation: the egress must stay safe even with a Consumer
    # an embedding program built itself (the admin API would refuse some of these)
    return Consumer(
        id="billing", group=Group(id="g1"), broker="Kafka",
        topics=[TopicSpec(name="orders", config=TopicConfig(concurrencyFactor=5))],
        subscriptionMethod=msgspec.convert({"type": "http", "uri": uri, **method},
                                           SubscriptionMethod))


def make_record(offset: int = 7, key: bytes | None = b"user-7", value: bytes | None = b"hello",
                attempt: int = 1) -> Record:
    return Record("orders", 3, offset, key, value, (), timestamp_ms=1_699_999_000_000,
                  fetched_ms=START_MS - 10, attempt=attempt)


def expected_signature(msg_id: str, timestamp: str, payload: bytes) -> str:
    """Standard Webhooks, computed here independently of actors.delivery.document.signing."""
    mac = hmac.new(SECRET_KEY, msg_id.encode() + b"." + timestamp.encode() + b"." + payload,
                   hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


@pytest.fixture(params=TRANSPORTS)
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """Every egress test runs on every transport (actors/delivery/egress/transport.py)."""
    endpoint = Endpoint()
    await endpoint.start()
    events: list[Event] = []
    system = ActorSystem(clock=FakeClock(START_MS, WALL_OFFSET_MS), emit=events.append,
                         delivered=lambda row: events.append(Delivery.of_row(row)))
    await system.start()
    collector = Collector()
    await system.spawn(ChildSpec("collector", lambda: collector))
    try:
        yield Harness(system, endpoint, collector, events, Registry(), request.param)
    finally:
        await system.stop(deadline_ms=3000)
        await endpoint.stop()


async def test_push_carries_the_value_and_every_contract_header(harness: Harness) -> None:
    egress = await harness.egress(additionalHeaders={"Authorization": "Bearer t0k"})

    [outcome] = await harness.push(egress, make_record())

    assert isinstance(outcome, Delivered)
    assert (outcome.status, outcome.epoch, outcome.record.offset) == (200, 3, 7)
    [seen] = harness.endpoint.seen
    assert (seen.method, seen.path, seen.query, seen.body) == ("POST", "/hook", {}, b"hello")
    headers = seen.headers
    assert headers["QOH-Consumer"] == "billing_g1"
    assert headers["QOH-Topic"] == "orders"
    assert headers["QOH-Partition"] == "3"
    assert headers["QOH-Broker"] == "Kafka"
    assert headers["QOH-Message-Key"] == "user-7"
    assert "QOH-Message-Key-Encoding" not in headers
    assert headers["QOH-Message-Number"] == "7"
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["Authorization"] == "Bearer t0k"
    assert headers["webhook-id"] == ORDERS_3_7_ID
    assert headers["webhook-timestamp"] == str((WALL_OFFSET_MS + START_MS) // 1000)
    assert "webhook-signature" not in headers


async def test_additional_headers_may_set_content_type_but_never_forge_our_headers(
    harness: Harness,
) -> None:
    egress = await harness.egress(additionalHeaders={
        "content-type": "application/json", "webhook-id": "forged",
        "QOH-Topic": "forged", "X-Injected": "a\r\nEvil: 1",
    })

    await harness.push(egress, make_record(value=b"{}"))

    headers = harness.endpoint.seen[0].headers
    assert headers.getall("Content-Type") == ["application/json"]
    assert headers.getall("webhook-id") == [ORDERS_3_7_ID]
    assert headers.getall("QOH-Topic") == ["orders"]
    assert headers["X-Injected"] == "aEvil: 1"
    assert "Evil" not in headers


async def test_webhook_id_is_stable_across_redeliveries_and_differs_across_offsets(
    harness: Harness,
) -> None:
    egress = await harness.egress()

    await harness.push(egress, make_record(7, attempt=1))
    await harness.push(egress, make_record(7, attempt=2))
    await harness.push(egress, make_record(8, attempt=1))

    first, again, other = (s.headers["webhook-id"] for s in harness.endpoint.seen)
    assert first == again
    assert other != first


async def test_signature_verifies_with_an_independent_hmac(harness: Harness) -> None:
    egress = await harness.egress(signingSecret=SECRET)

    await harness.push(egress, make_record(value=b'{"amount": 12}'))

    [seen] = harness.endpoint.seen
    msg_id, timestamp = seen.headers["webhook-id"], seen.headers["webhook-timestamp"]
    assert seen.headers["webhook-signature"] == expected_signature(msg_id, timestamp, seen.body)


async def test_get_sends_the_value_as_the_query_parameter_and_signs_it(harness: Harness) -> None:
    egress = await harness.egress(method="GET", queryParamKey="message", signingSecret=SECRET)
    value = "héllo wörld&x=1 ?#"

    [outcome] = await harness.push(egress, make_record(value=value.encode()))

    assert isinstance(outcome, Delivered)
    [seen] = harness.endpoint.seen
    assert (seen.method, seen.query, seen.body) == ("GET", {"message": value}, b"")
    assert "Content-Type" not in seen.headers
    msg_id, timestamp = seen.headers["webhook-id"], seen.headers["webhook-timestamp"]
    assert seen.headers["webhook-signature"] == expected_signature(
        msg_id, timestamp, value.encode())


async def test_delete_decodes_the_value_with_the_charset_and_keeps_the_uri_query(
    harness: Harness,
) -> None:
    egress = await harness.egress("/hook?tenant=a", method="DELETE", queryParamKey="m",
                                  charset="latin-1")

    await harness.push(egress, make_record(value="café".encode("latin-1")))

    [seen] = harness.endpoint.seen
    assert (seen.method, seen.query) == ("DELETE", {"tenant": "a", "m": "café"})


async def test_post_ignores_query_param_key_like_queue_over_http(harness: Harness) -> None:
    egress = await harness.egress(queryParamKey="message")

    await harness.push(egress, make_record(value=b"in the body"))

    [seen] = harness.endpoint.seen
    assert (seen.query, seen.body) == ({}, b"in the body")


async def test_a_missing_value_is_an_empty_body(harness: Harness) -> None:
    egress = await harness.egress()

    [outcome] = await harness.push(egress, make_record(value=None))

    assert isinstance(outcome, Delivered)
    assert harness.endpoint.seen[0].body == b""


@pytest.mark.parametrize(
    ("key", "header", "encoded"),
    [
        (b"\xff\xfe\x00key", base64.b64encode(b"\xff\xfe\x00key").decode(), True),
        (b"a\r\nEvil: 1", base64.b64encode(b"a\r\nEvil: 1").decode(), True),
        (b" padded ", base64.b64encode(b" padded ").decode(), True),
        ("ключ".encode(), "ключ", False),
        (None, "", False),
    ],
)
async def test_message_key_is_text_when_header_safe_else_base64(
    harness: Harness, key: bytes | None, header: str, encoded: bool
) -> None:
    egress = await harness.egress()

    await harness.push(egress, make_record(key=key))

    headers = harness.endpoint.seen[0].headers
    assert headers["QOH-Message-Key"] == header
    assert ("QOH-Message-Key-Encoding" in headers) is encoded
    if encoded:
        assert headers["QOH-Message-Key-Encoding"] == "base64"
        assert base64.b64decode(header) == key


async def test_server_error_fails_with_its_status(harness: Harness) -> None:
    egress = await harness.egress("/status/500")

    [outcome] = await harness.push(egress, make_record())

    assert isinstance(outcome, Failed)
    assert (outcome.failure.status, outcome.failure.retry_after_ms, outcome.epoch) == (500, None, 3)
    assert "500" in outcome.failure.error


async def test_retry_after_is_reported_in_milliseconds(harness: Harness) -> None:
    egress = await harness.egress("/status/503?retry_after=2")

    [outcome] = await harness.push(egress, make_record())

    assert isinstance(outcome, Failed)
    assert (outcome.failure.status, outcome.failure.retry_after_ms) == (503, 2000)


async def test_a_client_error_fails_with_its_status(harness: Harness) -> None:
    egress = await harness.egress("/status/404")

    [outcome] = await harness.push(egress, make_record())

    assert isinstance(outcome, Failed)
    assert outcome.failure.status == 404


async def test_a_redirect_is_a_failure_and_is_not_followed(harness: Harness) -> None:
    egress = await harness.egress("/status/307?location=/hook")

    [outcome] = await harness.push(egress, make_record())

    assert isinstance(outcome, Failed)
    assert outcome.failure.status == 307
    assert [s.path for s in harness.endpoint.seen] == ["/status/307"]


async def test_a_slow_endpoint_fails_without_status_within_the_timeout(harness: Harness) -> None:
    egress = await harness.egress("/slow", timeoutMs=200)

    [outcome] = await harness.push(egress, make_record())

    # the endpoint got the request and still holds it (it answers only at teardown): the
    # failure is the request's timeout, and a timeout never fires early
    assert [s.path for s in harness.endpoint.seen] == ["/slow"]
    assert not harness.endpoint.release.is_set()
    assert isinstance(outcome, Failed)
    assert outcome.failure.status is None
    assert "200 ms" in outcome.failure.error
    assert outcome.failure.latency_ms >= 150


async def test_connection_refused_fails_and_the_actor_keeps_working(harness: Harness) -> None:
    consumer = make_consumer(f"http://127.0.0.1:{free_port()}/hook", connectTimeoutMs=1000)
    refused = EgressActor("refused", egress_settings(consumer), harness.metrics,
                          transport=harness.transport)
    await harness.system.spawn(ChildSpec("refused", lambda: refused, restart="temporary"))

    outcomes = await harness.push(refused, make_record(1), make_record(2))

    assert all(isinstance(o, Failed) and o.failure.status is None for o in outcomes)
    assert all(o.failure.error for o in outcomes if isinstance(o, Failed))
    assert refused.state == "running"


async def test_a_bad_url_fails_the_request_not_the_actor(harness: Harness) -> None:
    consumer = make_consumer("http://127.0.0.1:99999/hook")
    bad = EgressActor("bad", egress_settings(consumer), harness.metrics,
                      transport=harness.transport)
    await harness.system.spawn(ChildSpec("bad", lambda: bad, restart="temporary"))

    [outcome] = await harness.push(bad, make_record())

    assert isinstance(outcome, Failed)
    assert outcome.failure.status is None
    assert bad.state == "running"


async def test_a_huge_response_body_is_not_read_to_the_end(harness: Harness) -> None:
    egress = await harness.egress("/big")

    [outcome] = await harness.push(egress, make_record())

    assert isinstance(outcome, Delivered)
    async with asyncio.timeout(WAIT_S):
        await harness.endpoint.big_done.wait()
    # The client hung up after the cap: the server could not write the whole body.
    assert harness.endpoint.big_written < BIG_BODY_BYTES
    assert RESPONSE_BODY_CAP < BIG_BODY_BYTES


async def test_queued_requests_wait_for_a_connection_outside_the_timeout(
    harness: Harness,
) -> None:
    # One connection, 8 requests of 150 ms each: the last waits ~1 s for the connection,
    # longer than timeoutMs; only the endpoint's own time may count against the timeout.
    egress = await harness.egress("/sleep/150", maxConnections=1, timeoutMs=1000)

    started = time.monotonic()
    outcomes = await harness.push(egress, *(make_record(i) for i in range(8)))
    span_ms = (time.monotonic() - started) * 1000

    # one after another on the one connection: at least 8 x 150 ms, past timeoutMs, so a
    # timeout that counted the wait for the connection would have failed the last ones
    assert span_ms >= 8 * 150 > 1000
    assert [type(o) for o in outcomes] == [Delivered] * 8
    # each latency is that request's own time, not its wait: the seven others took 150 ms
    # each of the span, so no own time comes within 1,050 ms of it (the last request's
    # wait and time together would)
    assert max(o.latency_ms for o in outcomes if isinstance(o, Delivered)) < span_ms - 1000


async def test_stopping_cancels_in_flight_requests_without_reporting_them(
    harness: Harness,
) -> None:
    egress = await harness.egress("/slow")
    await egress.tell(Deliver(make_record(), epoch=3, reply_to=harness.collector))
    async with asyncio.timeout(WAIT_S):
        await harness.endpoint.arrived.wait()

    async with asyncio.timeout(WAIT_S):
        await harness.system.root.stop_child("egress")

    assert egress.state == "stopped"
    # A swallowed CancelledError would have turned into a Failed here.
    assert harness.collector.outcomes == []


async def test_stopping_while_connecting_cancels_the_actors_task_telling_nobody(
    harness: Harness,
) -> None:
    # the connect (lean) or the request (aiohttp) is a task of the egress actor's: it ends
    # with the actor, and what it carried is given up, not reported (nothing was sent)
    with unanswered_listener() as url:
        actor = EgressActor("egress", egress_settings(make_consumer(url)), harness.metrics,
                            transport=harness.transport)
        await harness.system.spawn(ChildSpec("egress", lambda: actor, restart="temporary"))
        await actor.tell(Deliver(make_record(), epoch=3, reply_to=harness.collector))
        owned = await until(lambda: [t for t in asyncio.all_tasks()
                                     if t.get_name() in ("egress:connect", "egress:request")],
                            timeout_s=5, poll_s=0.005, what="the egress's connect task")
        assert actor.tasks_running() == 1  # the actor's own, not a transport's
        async with asyncio.timeout(WAIT_S):
            await harness.system.root.stop_child("egress")
    assert [task.cancelled() for task in owned] == [True]
    assert actor.state == "stopped"
    assert harness.collector.outcomes == []


async def test_a_cursors_dispatch_in_one_message_is_pushed_record_by_record(
        harness: Harness) -> None:
    egress = await harness.egress()
    records = [make_record(offset) for offset in (7, 8, 9)]
    await egress.tell(DeliverMany(records, epoch=3, reply_to=harness.collector))

    def delivered() -> list[int] | None:  # a burst's answers: one message or several
        found = sorted(r.offset for o in harness.collector.outcomes
                       for r in (o.records if isinstance(o, BatchOutcome) else [o.record]))
        return found if len(found) >= 3 else None

    assert await until(delivered, timeout_s=WAIT_S, poll_s=0.005,
                       what="three outcomes") == [7, 8, 9]
    assert sorted(seen.headers["QOH-Message-Number"] for seen in harness.endpoint.seen) == \
        ["7", "8", "9"]  # three requests, one record each


async def test_outcomes_are_journaled_and_counted(harness: Harness) -> None:
    ok = await harness.egress()
    await harness.push(ok, make_record(7))
    await harness.push(ok, make_record(8, attempt=2))

    assert [e for e in harness.events if e.type == "sent"] == []  # issue 35
    # a first attempt's plain delivery goes to the `delivered` sink (here made a
    # Delivery), for the journal to hold and range (runtime/host/journal.py); its Event
    # is what the journal writes of it
    first, retry = [e for e in harness.events if e.type == "delivered"]
    assert isinstance(first, Delivery) and isinstance(retry, Event)
    delivered = [first.event(WALL_OFFSET_MS), retry]
    assert [(e.offset, e.attempt) for e in delivered] == [(7, 1), (8, 2)]
    # the fetch time on a first attempt's outcome only (retry delays are not overhead)
    assert [e.fetched_ts_ms for e in delivered] == [WALL_OFFSET_MS + START_MS - 10, None]
    assert delivered[0].subscription == "billing_g1"
    assert delivered[0].endpoint == harness.endpoint.url + "/hook"
    assert [(e.offset, e.status) for e in delivered] == [(7, 200), (8, 200)]
    assert delivered[0].record_ts_ms == 1_699_999_000_000
    assert delivered[0].latency_ms is not None and delivered[0].latency_ms > 0
    text = harness.metrics.render()
    assert 'hookstream_http_requests_total{subscription="billing_g1",code="2xx"} 2' in text
    assert 'hookstream_http_request_duration_ms_count{subscription="billing_g1"} 2' in text
    assert 'hookstream_http_inflight{subscription="billing_g1"} 0' in text


async def test_failures_are_journaled_with_a_reason_and_counted(harness: Harness) -> None:
    egress = await harness.egress("/status/502")

    await harness.push(egress, make_record())

    [failed] = [e for e in harness.events if e.type == "failed"]
    assert (failed.status, failed.offset, failed.attempt) == (502, 7, 1)
    assert failed.reason is not None and "502" in failed.reason
    text = harness.metrics.render()
    assert 'hookstream_http_requests_total{subscription="billing_g1",code="5xx"} 1' in text


async def test_repr_shows_endpoint_inflight_and_pool(harness: Harness) -> None:
    egress = await harness.egress("/slow", maxConnections=7)
    await egress.tell(Deliver(make_record(), epoch=3, reply_to=harness.collector))
    async with asyncio.timeout(WAIT_S):
        await harness.endpoint.arrived.wait()

    text = repr(egress)

    assert harness.endpoint.url + "/slow" in text
    assert "inflight=1/7" in text
    assert "running" in text


async def test_a_bad_signing_secret_fails_the_start(harness: Harness) -> None:
    consumer = make_consumer(harness.endpoint.url + "/hook", signingSecret="whsec_!!")

    with pytest.raises(Exception, match="signingSecret"):
        await harness.system.spawn(
            ChildSpec("bad", lambda: EgressActor("bad", egress_settings(consumer),
                                                 harness.metrics)))


async def test_the_session_is_closed_on_stop(harness: Harness) -> None:
    egress = await harness.egress()
    session = egress._session
    assert session is not None and not session.closed
    kinds = {"aiohttp": "AiohttpTransport", "lean": "LeanTransport"}
    assert type(session).__name__ == kinds[harness.transport]

    await harness.system.root.stop_child("egress")

    assert session.closed


async def test_records_delivered_alone_to_a_batching_egress_are_answered_alone(
        harness: Harness) -> None:
    # retries and replays reach a batching egress as single Delivers: they travel in
    # the batch body and each is answered with its own Delivered or Failed
    egress = await harness.egress(batchSize=10, signingSecret=SECRET)
    outcomes = await harness.push(egress, make_record(offset=1), make_record(offset=2))
    assert sorted(o.record.offset for o in outcomes if isinstance(o, Delivered)) == [1, 2]
    seen = harness.endpoint.seen
    offsets = [r["offset"] for s in seen for r in json.loads(s.body)["records"]]
    assert sorted(offsets) == [1, 2]
    assert all(s.headers["Content-Type"] == "application/json" for s in seen)
    first = seen[0]
    assert first.headers["webhook-signature"] == expected_signature(
        first.headers["webhook-id"], first.headers["webhook-timestamp"], first.body)


async def test_a_failed_batch_fails_each_record_with_the_status(harness: Harness) -> None:
    egress = await harness.egress("/status/503?retry_after=2", batchSize=10)
    outcomes = await harness.push(egress, make_record(offset=1), make_record(offset=2))
    assert all(isinstance(o, Failed) and (o.failure.status, o.failure.retry_after_ms)
               == (503, 2000) for o in outcomes)
    assert len(outcomes) == 2


async def test_an_egress_stopped_while_its_probe_is_out_leaves_the_origin_probing_again(
        harness: Harness) -> None:
    """#34: only an answer cleared the probe; a worker cancelled while it held it (a
    pause, update or unsubscribe stopping the tree) left the origin half-open for good."""
    clock = harness.system.clock
    origin = Origin("probe-origin", CircuitBreaker(min_requests=1, open_ms=100))
    origin.answered(False, clock.monotonic_ms())  # open
    assert isinstance(clock, FakeClock)
    clock.advance(100)  # the probe may go
    consumer = make_consumer(harness.endpoint.url + "/slow")
    egress = EgressActor("prober", egress_settings(consumer), harness.metrics,
                         origin=origin, transport=harness.transport)
    await harness.system.spawn(ChildSpec("prober", lambda: egress, restart="temporary"))
    await egress.tell(Deliver(make_record(), epoch=3, reply_to=harness.collector))
    await asyncio.wait_for(harness.endpoint.arrived.wait(), WAIT_S)  # the probe is out
    held = origin.hold(clock.monotonic_ms())
    assert held is not None and held.breaker  # one probe at a time
    await harness.system.root.stop_child("prober")  # its worker is cancelled
    assert origin.state == "half_open"
    assert origin.hold(clock.monotonic_ms()) is None  # the next request probes
