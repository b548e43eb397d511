"""https endpoints: the system trust store by default, an extra CA and a client certificate
per subscription (`subscriptionMethod.tls`). Real aiohttp https receivers on loopback with
certificates made by `trustme`; the egress actor under a real ActorSystem (test_egress's
harness) and a whole runtime on the session's broker for the dead-letter path."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from actors.delivery.document.settings import egress_settings
from actors.delivery.egress.guard import DestinationGuard
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.origin import Origin
from actors.shared.messages import Delivered, Failed
from runtime.kernel.supervisor import ChildSpec
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, make_runtime, produce, subscription
from tests.integration.test_delivery import read_all, wait_committed
from tests.integration.test_egress import Harness, harness, make_consumer, make_record

pytestmark = pytest.mark.integration

trustme = pytest.importorskip("trustme", reason="trustme (a dev extra) makes the certificates")

__all__ = ["harness"]
UNKNOWN_CA = "certificate verify failed"


@dataclass
class Pki:
    """A server CA the system does not trust, a client CA, and their files."""

    dir: Path
    server_ca: Any = field(default_factory=lambda: trustme.CA())
    client_ca: Any = field(default_factory=lambda: trustme.CA())

    def __post_init__(self) -> None:
        self.server_ca.cert_pem.write_to_path(str(self.ca_file))
        client = self.client_ca.issue_cert("client.example")
        client.cert_chain_pems[0].write_to_path(str(self.cert_file))
        client.private_key_pem.write_to_path(str(self.key_file))
        stranger = trustme.CA().issue_cert("client.example")
        stranger.cert_chain_pems[0].write_to_path(str(self.dir / "stranger-cert.pem"))
        stranger.private_key_pem.write_to_path(str(self.dir / "stranger-key.pem"))

    @property
    def ca_file(self) -> Path:
        return self.dir / "server-ca.pem"

    @property
    def cert_file(self) -> Path:
        return self.dir / "client-cert.pem"

    @property
    def key_file(self) -> Path:
        return self.dir / "client-key.pem"

    def server_context(self, *, require_client_cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server_ca.issue_cert("127.0.0.1").configure_cert(context)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            self.client_ca.configure_trust(context)
        return context


@dataclass
class HttpsReceiver:
    url: str
    peers: list[Any]
    """The client certificate of each request (None without one)."""
    connections: list[Any] = field(default_factory=list)
    """The client address and port of each request: its connection."""


async def _serve(context: ssl.SSLContext) -> AsyncIterator[HttpsReceiver]:
    peers: list[Any] = []
    connections: list[Any] = []

    async def hook(request: web.Request) -> web.Response:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        peers.append(ssl_object.getpeercert() if ssl_object is not None else None)
        connections.append(request.transport.get_extra_info("peername")
                           if request.transport else None)
        await request.read()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield HttpsReceiver(f"https://127.0.0.1:{port}/hook", peers, connections)
    finally:
        await runner.cleanup()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
async def https(pki: Pki) -> AsyncIterator[HttpsReceiver]:
    async for receiver in _serve(pki.server_context(require_client_cert=False)):
        yield receiver


@pytest.fixture
async def mutual(pki: Pki) -> AsyncIterator[HttpsReceiver]:
    async for receiver in _serve(pki.server_context(require_client_cert=True)):
        yield receiver


@pytest.fixture
async def optional(pki: Pki) -> AsyncIterator[HttpsReceiver]:
    """Takes a client certificate of the client CA when one is offered, and none."""
    context = pki.server_context(require_client_cert=True)
    context.verify_mode = ssl.CERT_OPTIONAL
    async for receiver in _serve(context):
        yield receiver


async def test_https_subscriptions_of_one_origin_share_its_warm_connections_per_tls_context(
        harness: Harness, optional: HttpsReceiver, pki: Pki) -> None:
    origin, guard = Origin("shared"), DestinationGuard()  # the runtime has one guard
    plain = {"caFile": str(pki.ca_file)}
    certified = {**plain, "certFile": str(pki.cert_file), "keyFile": str(pki.key_file)}
    first, second, third = [await _egress(harness, name, optional.url, origin, guard, tls=tls)
                            for name, tls in (("a", plain), ("b", plain), ("c", certified))]
    for offset in range(3):  # one after another: each finds the last one's connection idle
        for egress in (first, second, third):
            [outcome] = await harness.push(egress, make_record(offset))
            assert isinstance(outcome, Delivered)
    # a and b (the same CA file: one TLS context) shared one connection; c, with its client
    # certificate, kept to its own and never lent it out
    by_connection: dict[Any, set[bool]] = {}
    for connection, peer in zip(optional.connections, optional.peers, strict=True):
        by_connection.setdefault(connection, set()).add(peer is not None)
    assert sorted(by_connection.values(), key=sorted) == [{False}, {True}]
    assert optional.peers.count(None) == 6


async def _egress(harness: Harness, name: str, url: str, origin: Origin,
                  guard: DestinationGuard, **method: Any) -> EgressActor:
    consumer = msgspec.structs.replace(make_consumer(url, **method), id=name)
    actor = EgressActor(name, egress_settings(consumer), harness.metrics, guard, origin)
    await harness.system.spawn(ChildSpec(name, lambda: actor, restart="temporary"))
    return actor


async def _push(harness: Harness, url: str, **method: Any) -> Delivered | Failed:
    actor = EgressActor("egress", egress_settings(make_consumer(url, **method)), harness.metrics)
    await harness.system.spawn(ChildSpec("egress", lambda: actor, restart="temporary"))
    [outcome] = await harness.push(actor, make_record())
    return outcome


async def test_by_default_an_unknown_ca_is_refused_and_journaled_with_the_tls_error(
        harness: Harness, https: HttpsReceiver) -> None:
    outcome = await _push(harness, https.url)
    assert isinstance(outcome, Failed) and not outcome.failure.give_up
    assert outcome.failure.error is not None and UNKNOWN_CA in outcome.failure.error
    [failed] = [e for e in harness.events if e.type == "failed"]
    assert failed.reason is not None and UNKNOWN_CA in failed.reason
    assert https.peers == []  # no request got through


async def test_the_extra_ca_file_makes_the_endpoint_trusted(
        harness: Harness, https: HttpsReceiver, pki: Pki) -> None:
    outcome = await _push(harness, https.url, tls={"caFile": str(pki.ca_file)})
    assert isinstance(outcome, Delivered) and outcome.status == 200
    assert https.peers == [None]


async def test_a_receiver_demanding_a_client_certificate_refuses_a_push_without_one(
        harness: Harness, mutual: HttpsReceiver, pki: Pki) -> None:
    outcome = await _push(harness, mutual.url, tls={"caFile": str(pki.ca_file)})
    assert isinstance(outcome, Failed) and outcome.failure.status is None
    assert mutual.peers == []


async def test_a_receiver_refuses_a_client_certificate_from_another_ca(
        harness: Harness, mutual: HttpsReceiver, pki: Pki) -> None:
    outcome = await _push(harness, mutual.url, tls={
        "caFile": str(pki.ca_file), "certFile": str(pki.dir / "stranger-cert.pem"),
        "keyFile": str(pki.dir / "stranger-key.pem")})
    assert isinstance(outcome, Failed)
    assert mutual.peers == []


async def test_the_configured_client_certificate_is_accepted(
        harness: Harness, mutual: HttpsReceiver, pki: Pki) -> None:
    outcome = await _push(harness, mutual.url, tls={
        "caFile": str(pki.ca_file), "certFile": str(pki.cert_file),
        "keyFile": str(pki.key_file)})
    assert isinstance(outcome, Delivered)
    [peer] = mutual.peers
    assert peer is not None
    assert peer["subjectAltName"] == (("DNS", "client.example"),)


async def test_a_record_refused_by_tls_is_retried_then_dead_lettered_with_the_reason(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], https: HttpsReceiver) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    await produce(kafka_bootstrap, topic, 2)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        await Admin(runtime).subscribe(subscription(
            "tls", [{"name": topic}], https.url, fast_group=fast_group_kwargs,
            retryBeforeCommit=1, deadLetterTopic=dlt, delayOnErrorMs=20))
        await wait_committed(kafka_bootstrap, "g-tls", topic, 2)
    records = await read_all(kafka_bootstrap, dlt, 2)
    assert sorted(r.value for r in records) == [b"v0", b"v1"]
    for record in records:
        headers = dict(record.headers)
        assert UNKNOWN_CA in headers["dlt-reason"].decode()
        assert headers["dlt-attempts"] == b"2"
    events = [msgspec.json.decode(line) for seg in (tmp_path / "journal").glob("*.jsonl")
              for line in seg.read_bytes().splitlines() if line]
    failed = [e for e in events if e["type"] == "failed"]
    assert len(failed) == 4 and all(UNKNOWN_CA in e["reason"] for e in failed)
    assert https.peers == []


@pytest.mark.parametrize(("tls", "field"), [
    ({"caFile": "/nonexistent/ca.pem"}, "caFile"),
    ({"certFile": "CERT", "keyFile": "/nonexistent/key.pem"}, "keyFile"),
    ({"certFile": "CERT", "keyFile": "STRANGER_KEY"}, "keyFile"),
])
async def test_unusable_tls_files_are_a_400_naming_the_field(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path, pki: Pki,
        tls: dict[str, str], field: str) -> None:
    topic = await topic_factory()
    paths = {"CERT": str(pki.cert_file), "STRANGER_KEY": str(pki.dir / "stranger-key.pem")}
    tls = {k: paths.get(v, v) for k, v in tls.items()}
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, reply = await admin.call("POST", "/broker/subscription", subscription(
            "bad", [{"name": topic}], "https://127.0.0.1:9/hook", tls=tls))
        assert status == 400, reply
        assert reply["reason"] == f"invalid subscriptionMethod.tls.{field}", reply
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []


async def test_the_host_name_is_still_checked_with_an_extra_ca(
        harness: Harness, pki: Pki) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    pki.server_ca.issue_cert("other.example").configure_cert(context)  # not 127.0.0.1
    async for receiver in _serve(context):
        outcome = await _push(harness, receiver.url, tls={"caFile": str(pki.ca_file)})
        assert isinstance(outcome, Failed)
        assert outcome.failure.error is not None and "mismatch" in outcome.failure.error
        assert receiver.peers == []


async def test_tls_files_outside_allow_references_are_refused_and_absence_is_not_told(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path, pki: Pki) -> None:
    topic = await topic_factory()
    allowed = f"file:{pki.dir.resolve()}/*"
    async with make_runtime(kafka_bootstrap, tmp_path,
                            egress={"allow_references": [allowed]}) as runtime:
        admin = Admin(runtime)
        details = set()
        for ca in ("/etc/hostname", "/etc/no-such-file"):  # outside the allowed files
            status, reply = await admin.call("POST", "/broker/subscription", subscription(
                "out", [{"name": topic}], "https://127.0.0.1:9/hook", tls={"caFile": ca}))
            assert (status, reply["reason"]) == (400, "invalid subscriptionMethod.tls.caFile")
            details.add(reply["details"].replace(ca, "FILE"))
        (pki.dir / "notes.txt").write_text("no PEM here")
        for ca in (str(pki.dir / "absent.pem"), str(pki.dir / "notes.txt")):
            status, reply = await admin.call("POST", "/broker/subscription", subscription(
                "in", [{"name": topic}], "https://127.0.0.1:9/hook", tls={"caFile": ca}))
            assert status == 400, reply
            details.add(reply["details"].replace(ca, "FILE"))
        assert len(details) == 2, details  # not allowed, or unusable: never "exists"
        status, reply = await admin.call("POST", "/broker/subscription", subscription(
            "ok", [{"name": topic}], "https://127.0.0.1:9/hook",
            tls={"caFile": str(pki.ca_file)}))
        assert status == 200, reply
