"""The admin server's connections, before HTTP (issue 25): a bound on how many are open at
once, and on how long a client may take to send a request head.

aiohttp's server waits for a request head as long as its keep-alive timeout (an hour)
allows, and any byte received restarts even that: a client that sends nothing, or one
header line a minute, holds a connection and its memory forever, before the token is
ever checked. Here each connection is a `FrontDoor` protocol in front of aiohttp's own
handler:

- Past `max_connections` open connections a new one is answered `503` (JSON) and closed.
- A request aiohttp cannot parse (a bad request line, header or length: a scanner or a
  broken client) is answered in the API's JSON shape (`JsonErrors`), not aiohttp's
  text/plain page; the admin server's log makes it one WARNING line (admin.py
  `ServerLog`).
- `HEALTH_RESERVE` connections more are admitted for health probes only: a request
  other than `GET /healthz` or `/readyz` on one is answered `503` and closed (admin.py),
  so a full API still answers its liveness and readiness probes (#34).
- A connection must complete a request head within `header_timeout_ms` of its opening,
  and the next one within as long of the previous answer; otherwise it is closed, with a
  `408` (JSON) when part of a head had come. One that sent nothing is closed silently, as
  an idle keep-alive connection is (a client could take an unasked answer on a connection
  it reuses for the answer to its next request). The clock stops when the request reaches the admin
  middleware (its head is complete) and starts again when the handler has answered.
- A request body must arrive whole within `body_timeout_ms` of its head (the admin
  middleware reads it before the handler runs), else `408` and the connection closes:
  255 connections sending a byte of body every 2 s held every slot (#34). Its size is
  bounded too (`MAX_BODY_BYTES`, admin.py).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

REFUSED_BUSY: Final = (503, "Service Unavailable", "too many connections",
                       "the admin API holds its limit of open connections: try again")
REFUSED_SLOW: Final = (408, "Request Timeout", "request head too slow",
                       "a request head must arrive within the header time limit")
REFUSED_SLOW_BODY: Final = (408, "Request Timeout", "request body too slow",
                            "a request body must arrive within the body time limit")
HEALTH_RESERVE: Final = 8
"""Connections past `max_connections` admitted for health probes only."""


def refusal(status: int, text: str, reason: str, details: str) -> bytes:
    """A complete HTTP/1.1 answer in the API's JSON shape, closing the connection."""
    body = json.dumps({"success": False, "reason": reason, "details": details}).encode()
    head = (f"HTTP/1.1 {status} {text}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


class JsonErrors(RequestHandler):
    """aiohttp's connection handler, with the answers it makes itself (a request it cannot
    parse, a handler error past the middleware) in the API's JSON shape:
    `{"success": false, "reason": ..., "details": <the parser's first line>}`."""

    __slots__ = ()

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logs; raises if answering
        phrase = HTTPStatus(status).phrase
        first = (message or "").strip().splitlines()[:1]
        details = first[0].rstrip(":") if first and status < 500 else phrase
        reason = "malformed request" if status == 400 else phrase.lower()
        response = web.json_response({"success": False, "reason": reason,
                                      "details": details}, status=status)
        response.force_close()
        return response


def json_errors(handler: RequestHandler) -> RequestHandler:
    """`handler` (made by aiohttp's `Server`, which takes no handler class) as a
    `JsonErrors`: the same object, its class swapped (no state is added)."""
    handler.__class__ = JsonErrors
    return handler


@dataclass(slots=True)
class Doors:
    """The open connections of one server, by transport (the middleware finds its own)."""

    max_connections: int
    header_timeout_s: float
    body_timeout_s: float = 10.0
    reserve: int = HEALTH_RESERVE
    open: dict[asyncio.BaseTransport, FrontDoor] = field(default_factory=dict)

    def head_done(self, transport: asyncio.BaseTransport | None) -> None:
        door = self.open.get(transport) if transport is not None else None
        if door is not None:
            door.stop_clock()

    def reading_body(self, transport: asyncio.BaseTransport | None) -> None:
        """The request's body must arrive within `body_timeout_s` from now."""
        door = self.open.get(transport) if transport is not None else None
        if door is not None:
            door.start_clock(self.body_timeout_s, body=True)

    def health_only(self, transport: asyncio.BaseTransport | None) -> bool:
        """The connection is one of the reserve: health probes only."""
        door = self.open.get(transport) if transport is not None else None
        return door is not None and door.reserve

    def answered(self, transport: asyncio.BaseTransport | None) -> None:
        door = self.open.get(transport) if transport is not None else None
        if door is not None:
            door.start_clock()


class FrontDoor(asyncio.Protocol):
    """One connection: counts it, times its request heads, hands everything else to
    aiohttp's handler (`inner`)."""

    def __init__(self, inner: asyncio.Protocol, doors: Doors) -> None:
        self.inner, self.doors = inner, doors
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._admitted = False
        self._partial = False  # bytes of a head arrived since the clock started
        self._body = False  # the clock times a body
        self.reserve = False  # admitted past `max_connections`: health probes only

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no `asyncio.Transport` subclasses: no isinstance here
        self.transport = cast(asyncio.Transport, transport)
        doors = self.doors
        if len(doors.open) >= doors.max_connections + doors.reserve:
            self._refuse(REFUSED_BUSY)
            return
        self.reserve = len(doors.open) >= doors.max_connections
        self._admitted = True
        self.doors.open[transport] = self
        self.inner.connection_made(transport)
        self.start_clock()

    def data_received(self, data: bytes) -> None:
        if self._admitted:
            self._partial = self._timer is not None
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self._admitted else None

    def pause_writing(self) -> None:
        if self._admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_clock()
        if self._admitted:
            self._admitted = False
            if self.transport is not None:
                self.doors.open.pop(self.transport, None)
            self.inner.connection_lost(exc)

    def start_clock(self, seconds: float | None = None, *, body: bool = False) -> None:
        """Time the next request head (by default), or a body (`body`)."""
        self.stop_clock()
        self._partial, self._body = False, body
        loop = asyncio.get_running_loop()
        limit = self.doors.header_timeout_s if seconds is None else seconds
        self._timer = loop.call_later(limit, self._too_slow)

    def stop_clock(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _too_slow(self) -> None:
        self._timer = None
        if self._body:  # its head came: it waits for an answer
            self._refuse(REFUSED_SLOW_BODY)
            return
        self._refuse(REFUSED_SLOW if self._partial else None)

    def _refuse(self, answer: tuple[int, str, str, str] | None) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if answer is not None:
                transport.write(refusal(*answer))
            transport.close()


class FrontDoorSite(web.BaseSite):
    """`web.TCPSite`, with a `FrontDoor` in front of every connection."""

    __slots__ = ("_bound_port", "_doors", "_host", "_port")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, doors: Doors, *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port, self._doors = host, port, doors
        self._bound_port = port

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._bound_port}"

    @property
    def port(self) -> int:
        return self._bound_port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        doors = self._doors
        factory: Callable[[], asyncio.Protocol] = lambda: FrontDoor(  # noqa: E731
            json_errors(server()), doors)
        self._server = await asyncio.get_running_loop().create_server(
            factory, self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=True)
        sockets = self._server.sockets
        if sockets:
            self._bound_port = sockets[0].getsockname()[1]
