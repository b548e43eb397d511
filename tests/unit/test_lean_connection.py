"""The lean transport's connection protocol by callback (issue 37), fed bytes by hand:
the socket is the edge faked here (`Wire`), the parser and the protocol are the real ones."""

from __future__ import annotations

import asyncio

from actors.delivery.egress.transport import (
    SNIPPET_BYTES,
    ConnectionLost,
    Reply,
    _Connection,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nRetry-After: 3\r\n\r\nok"


class Wire(asyncio.Transport):
    """Stands for the socket: keeps what is written; closing tells the protocol soon."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closed


class Told:
    def __init__(self) -> None:
        self.outcomes: list[Reply | BaseException] = []

    def __call__(self, reply: Reply | None, exc: BaseException | None) -> None:
        self.outcomes.append(exc if exc is not None else reply)  # type: ignore[arg-type]


async def connected() -> tuple[_Connection, Wire]:
    connection = _Connection()
    wire = Wire(connection)
    connection.connection_made(wire)
    return connection, wire


async def test_an_answer_in_pieces_is_told_once_when_complete() -> None:
    connection, wire = await connected()
    told = Told()
    connection.request(b"POST / HTTP/1.1\r\n\r\n", False, told)
    for piece in (OK[:10], OK[10:40], OK[40:]):
        assert told.outcomes == []
        connection.data_received(piece)
    assert told.outcomes == [(200, "3", None, b"")]
    assert wire.written == [b"POST / HTTP/1.1\r\n\r\n"] and connection.reusable


async def test_done_may_start_the_next_request_on_the_same_connection() -> None:
    connection, wire = await connected()
    second = Told()

    def first(reply: Reply | None, exc: BaseException | None) -> None:
        connection.request(b"second", False, second)  # inside the parser's turn

    connection.request(b"first", False, first)
    connection.data_received(OK)
    connection.data_received(OK.replace(b"200 OK", b"503 Busy"))
    assert second.outcomes == [(503, "3", None, b"ok")]  # a non-2xx keeps its body's start
    assert wire.written == [b"first", b"second"] and connection.reusable


async def test_a_second_answer_to_one_request_makes_the_connection_unusable() -> None:
    connection, _ = await connected()
    told = Told()
    connection.request(b"x", False, told)
    connection.data_received(OK + OK)
    assert told.outcomes == [(200, "3", None, b"")]
    assert not connection.reusable


async def test_connection_close_is_honoured() -> None:
    connection, _ = await connected()
    told = Told()
    connection.request(b"x", False, told)
    connection.data_received(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
    assert len(told.outcomes) == 1 and not connection.reusable


async def test_expiry_fails_with_a_timeout_and_closes() -> None:
    connection, wire = await connected()
    told = Told()
    connection.request(b"x", False, told)
    connection.data_received(OK[:20])
    connection.expire()
    assert [type(o) for o in told.outcomes] == [TimeoutError] and wire.closed
    await asyncio.sleep(0)  # connection_lost comes: told nothing more
    assert len(told.outcomes) == 1


async def test_a_lost_connection_fails_its_request_and_refuses_the_next() -> None:
    connection, wire = await connected()
    told = Told()
    connection.request(b"x", False, told)
    wire.close()
    await asyncio.sleep(0)
    assert [type(o) for o in told.outcomes] == [ConnectionLost]
    try:
        connection.request(b"y", False, told)
    except ConnectionLost:
        pass
    else:
        raise AssertionError("a request on a lost connection must raise")


async def test_an_abandoned_request_is_told_nothing() -> None:
    connection, wire = await connected()
    told = Told()
    connection.request(b"x", False, told)
    connection.abandon()
    await asyncio.sleep(0)
    connection.data_received(OK)
    assert told.outcomes == [] and wire.closed and not connection.reusable


async def test_a_long_failed_body_keeps_only_its_first_kib_and_the_cap_ends_it() -> None:
    connection, _ = await connected()
    told = Told()
    connection.request(b"x", False, told)
    size = 70 * 1024  # past RESPONSE_BODY_CAP
    connection.data_received(f"HTTP/1.1 502 Bad\r\nContent-Length: {size}\r\n\r\n".encode()
                             + b"e" * (65 * 1024))
    assert told.outcomes == [(502, None, None, b"e" * SNIPPET_BYTES)]
    assert not connection.reusable  # the rest is never read: closed, not reused


async def test_bytes_nobody_asked_for_make_an_idle_connection_unusable() -> None:
    connection, _ = await connected()
    connection.data_received(OK)
    assert not connection.reusable
