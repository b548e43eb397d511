"""The egress's fast paths (issue 37) behave as the general ones they stand for.

- A single record on the lean transport is written from a template and a string of its
  own headers (`Requests.lines`, `LeanTransport.post`): the bytes on the wire are
  those of the general request (`Requests.build`'s headers through
  `LeanTransport.start`), checked on a real loopback server that keeps what it read.
- A first attempt's 2xx is accounted in one call (`EgressActor._delivered`): the same
  ledger row, attempt, counters and outcome as the general `_told`.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from actors.delivery.document.settings import egress_settings
from actors.delivery.egress.attempts import AttemptRing
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.outlet import Answer
from actors.delivery.egress.transport import LeanTransport, TransportSettings, make_transport
from actors.shared.messages import Deliver, Delivered, Record, RetryInfo
from runtime.host.journal import ROW_WIDTH
from runtime.host.metrics import Registry
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from tests.integration.outcomes import Keeper
from tests.integration.test_egress import make_consumer
from tests.waits import until

pytestmark = pytest.mark.integration

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Wire(asyncio.Protocol):
    """A loopback receiver that keeps every request's bytes as read, answering 200."""

    def __init__(self, requests: list[bytes], arrived: asyncio.Event) -> None:
        self.requests, self.arrived = requests, arrived
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.requests.append(head + b"\r\n\r\n" + rest[:length])
            self.buffer = rest[length:]
            assert self.transport is not None
            self.transport.write(ANSWER)
            self.arrived.set()


class Collector(Keeper[object]):
    def __init__(self) -> None:
        super().__init__("collector")

    async def handle(self, message: Any) -> None:
        self.keep(message)


@pytest.fixture
async def wire() -> AsyncIterator[tuple[str, list[bytes], asyncio.Event]]:
    requests: list[bytes] = []
    arrived = asyncio.Event()
    server = await asyncio.get_running_loop().create_server(
        lambda: Wire(requests, arrived), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", requests, arrived
    finally:
        server.close()
        await server.wait_closed()


def record(offset: int = 7, key: bytes | None = b"user-7", value: bytes | None = b"hello",
           **extra: Any) -> Record:
    return Record("orders", 3, offset, key, value, (), timestamp_ms=1_699_999_000_000,
                  fetched_ms=990, attempt=1, **extra)


RECORDS = [
    record(),
    record(8, key=None),
    record(9, key=b"\xff\x00binary"),  # base64, with QOH-Message-Key-Encoding
    record(10, key=b" padded "),
    record(11, value=None),
    record(12, value=b""),
    record(13, replay="rp-1"),
    record(14, retry=RetryInfo("orders", 1, 5, 1, 1_000, stage=1, timestamp_ms=42)),
    msgspec.structs.replace(record(15), timestamp_ms=-1),  # no timestamp: a shorter webhook-id
]


async def general_bytes(egress: EgressActor, url: str, requests: list[bytes],
                        arrived: asyncio.Event, rec: Record) -> bytes:
    """What the general path writes for `rec`: `Requests.build`'s headers through `start`."""
    headers, body, params = egress._form.build(rec, egress.context.clock.wall_ms() // 1000)
    transport = make_transport(TransportSettings(
        egress._url, egress._headers, 1, 5.0, 5.0, egress.guard.socket_factory), "lean")
    assert isinstance(transport, LeanTransport)
    before = len(requests)
    try:
        await transport.send(egress.settings.method, headers, body, params)
    finally:
        await transport.close()
    await until(lambda: len(requests) > before, timeout_s=5.0, wake=arrived,
                what="the general request")
    return requests[before]


@pytest.mark.parametrize("method", [
    {},
    {"signingSecret": SECRET, "additionalHeaders": {"Authorization": "Bearer t0k",
                                                    "content-type": "application/json"}},
    {"method": "PUT", "charset": "latin-1"},
])
async def test_a_templated_request_is_the_general_request_byte_for_byte(
        wire: tuple[str, list[bytes], asyncio.Event], method: dict[str, Any]) -> None:
    url, requests, arrived = wire
    system = ActorSystem(clock=FakeClock(1_000, 1_700_000_000_000))
    await system.start()
    try:
        collector = Collector()
        await system.spawn(ChildSpec("collector", lambda: collector))
        egress = EgressActor("egress", egress_settings(make_consumer(url + "/hook?a=1",
                                                                     **method)),
                             Registry(), transport="lean")
        await system.spawn(ChildSpec("egress", lambda: egress))
        assert egress._lean is not None  # the templated path is the one under test
        for index, rec in enumerate(RECORDS):
            await egress.tell(Deliver(rec, epoch=1, reply_to=collector))
            await collector.wait_for(index + 1)
            templated = requests[-1]
            assert templated == await general_bytes(egress, url, requests, arrived, rec)
        assert all(isinstance(outcome, Delivered) for outcome in collector.outcomes)
    finally:
        await system.stop(deadline_ms=3000)


async def test_a_delivered_first_attempt_is_accounted_as_the_general_path_does(
        wire: tuple[str, list[bytes], asyncio.Event]) -> None:
    url, _, _ = wire
    rows: list[object] = []
    system = ActorSystem(clock=FakeClock(1_000, 1_700_000_000_000), delivered=rows.append)
    await system.start()
    try:
        collector = Collector()
        await system.spawn(ChildSpec("collector", lambda: collector))
        egresses = []
        for name in ("fast", "general"):
            egress = EgressActor(name, egress_settings(make_consumer(url + "/hook")),
                                 Registry(), transport="lean")
            egress.attempts = AttemptRing()
            await system.spawn(ChildSpec(name, lambda egress=egress: egress))  # type: ignore[misc]
            egresses.append(egress)
        fast, general = egresses
        deliver = Deliver(record(), epoch=4, reply_to=collector)
        fast._delivered(deliver, deliver.record, Answer(200), 12.5)
        general._told(deliver, Answer(200), 12.5)
        fast_row, general_row = rows
        assert fast_row == general_row
        assert len(fast_row) == ROW_WIDTH  # type: ignore[arg-type]  # the flat ledger's rows
        assert list(fast.attempts or ()) == list(general.attempts or ())
        assert fast.counters() == general.counters() == {"delivered": 1,
                                                         "failed_attempts": 0}
        assert fast.health.status() == general.health.status()
        fast_outcome, general_outcome = await collector.wait_for(2)
        assert fast_outcome == general_outcome == Delivered(deliver.record, 4, 200, 12.5)
    finally:
        await system.stop(deadline_ms=3000)
