"""Egress transports: how an `EgressActor` sends one HTTP request to its endpoint.

One small interface (`Transport.send` -> status, Retry-After, QOH-Action and the start
of a non-2xx answer's body; `close`) and
two implementations:

- `AiohttpTransport`: an `aiohttp.ClientSession` (any URL, http and https).
- `LeanTransport`: HTTP/1.1 on `asyncio.Protocol` with `httptools` (the parser uvicorn
  uses), for `http://` endpoints. aiohttp spent two thirds of the runtime's CPU on the
  delivery benchmark (bench/RESULTS.md, issue 14): per request it builds a request
  object, a response object, a timeout handle, a multidict of headers, a payload, a
  writer and a task; this one writes one `bytes` (the request line and the headers that
  never change are encoded once) and parses the answer with a C parser.

Both keep every semantic of the egress: connect timeout (`connectTimeoutMs`) and total
timeout (`timeoutMs`, the request from the moment a pooled connection is ours); no
redirects (a 3xx is a status like any other); the response body read up to
`RESPONSE_BODY_CAP` and dropped (a longer one closes the connection), but for its first
`SNIPPET_BYTES` when the status is not 2xx (the attempts API shows them); at most `pool`
connections, kept alive `KEEPALIVE_S` when idle; every connection through the
destination guard's socket factory. A response with `Connection: close`, a timeout, or
anything unexpected closes its connection, never reuses it.

`https://` endpoints use aiohttp (its TLS options), whatever the default says.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from ssl import SSLContext
from typing import Final, Literal, Protocol, cast
from urllib.parse import quote, urlencode

import aiohttp
import httptools
from aiohappyeyeballs.types import AddrInfoType
from yarl import URL

RESPONSE_BODY_CAP: Final = 64 * 1024
SNIPPET_BYTES: Final = 1024
KEEPALIVE_S: Final = 30
DNS_CACHE_S: Final = 300
Reply = tuple[int, str | None, str | None, bytes]
"""status, Retry-After, QOH-Action, the first SNIPPET_BYTES of a non-2xx answer's body"""
TransportName = Literal["aiohttp", "lean"]
DEFAULT_TRANSPORT: TransportName = "lean"
"""Chosen by bench/delivery.py (bench/RESULTS.md, issue 14); used where a runtime's
`[egress] transport` names none (a runtime that names one is not touched by a change of
this module default: #34)."""
SocketFactory = Callable[[AddrInfoType], socket.socket]


class Transport(Protocol):
    async def send(self, method: str, headers: Mapping[str, str], body: bytes | None,
                   params: Mapping[str, str] | None) -> Reply: ...

    async def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class TransportSettings:
    """What every transport needs; `headers` are sent on every request."""

    __slots__ = ("connect_s", "headers", "pool", "socket_factory", "ssl", "total_s", "url")

    def __init__(self, url: URL | str, headers: Mapping[str, str], pool: int, total_s: float,
                 connect_s: float, socket_factory: SocketFactory,
                 ssl: SSLContext | bool = True) -> None:
        self.url, self.headers, self.pool = url, dict(headers), pool
        self.total_s, self.connect_s, self.socket_factory = total_s, connect_s, socket_factory
        self.ssl = ssl
        """For https (aiohttp's `ssl`): True verifies with the system CAs; a context
        carries the subscription's CA and client certificate."""


def make_transport(settings: TransportSettings, name: TransportName | None = None,
                   shelf: Shelf | None = None) -> Transport:
    """`name` None: `DEFAULT_TRANSPORT`, read when called (bench/delivery.py --transport
    sets it for the runtimes it starts)."""
    name = name or DEFAULT_TRANSPORT
    url = settings.url
    if name == "lean" and isinstance(url, URL) and url.scheme == "http" and url.host:
        return LeanTransport(settings, url, shelf)
    return AiohttpTransport(settings)


# -- aiohttp ---------------------------------------------------------------------------
class AiohttpTransport:
    def __init__(self, settings: TransportSettings) -> None:
        self._url = settings.url
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=settings.pool, limit_per_host=settings.pool, ssl=settings.ssl,
                keepalive_timeout=KEEPALIVE_S, ttl_dns_cache=DNS_CACHE_S,
                socket_factory=settings.socket_factory),
            timeout=aiohttp.ClientTimeout(total=settings.total_s,
                                          sock_connect=settings.connect_s),
            headers=settings.headers,  # aiohttp merges these per request, in C (multidict)
            cookie_jar=aiohttp.DummyCookieJar(),  # a push never carries another's cookies
            auto_decompress=False,  # bodies are discarded
        )

    async def send(self, method: str, headers: Mapping[str, str], body: bytes | None,
                   params: Mapping[str, str] | None) -> Reply:
        async with self._session.request(method, self._url, data=body, params=params,
                                         headers=headers, allow_redirects=False) as response:
            status = response.status
            kept = await discard_body(response, 0 if 200 <= status < 300 else SNIPPET_BYTES)
            answer = response.headers
            return status, answer.get("Retry-After"), answer.get("QOH-Action"), kept

    async def close(self) -> None:
        await self._session.close()

    @property
    def closed(self) -> bool:
        return self._session.closed


async def discard_body(response: aiohttp.ClientResponse, keep: int = 0) -> bytes:
    """Read at most `RESPONSE_BODY_CAP` bytes, keep the first `keep`; close the connection
    if more is coming."""
    remaining, kept = RESPONSE_BODY_CAP, b""
    while remaining > 0:
        chunk = await response.content.read(remaining)
        if not chunk:
            return kept
        if len(kept) < keep:
            kept += chunk[:keep - len(kept)]
        remaining -= len(chunk)
    if not response.content.at_eof():
        response.close()  # unread bytes make the connection unusable for the next request
    return kept


# -- lean: asyncio.Protocol + httptools --------------------------------------------------
class ConnectionLost(ConnectionError):
    """The endpoint closed the connection before a complete response."""


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle_since = time.monotonic()
        self._parser = httptools.HttpResponseParser(self)
        self._done: asyncio.Future[Reply] | None = None
        self._retry_after: str | None = None
        self._action: str | None = None
        self._header: bytes = b""
        self._body_bytes = 0
        self._snippet = b""
        self._keep = False  # a non-2xx answer: its first SNIPPET_BYTES are kept
        self._head = False
        self.reusable = True

    # transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        if not self.made.done():
            self.made.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.transport = None
        done = self._done
        if done is not None and not done.done():
            done.set_exception(ConnectionLost("the endpoint closed the connection")
                               if exc is None else exc)

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():
            self.reusable = False  # bytes nobody asked for: never reuse this connection
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionLost("the endpoint switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionLost(f"bad HTTP response: {exc}"))

    # parser callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"retry-after":
            self._retry_after = value.decode("latin-1")
        elif lowered == b"qoh-action":
            self._action = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._keep = not 200 <= self._parser.get_status_code() < 300
        if self._head:  # a HEAD answer has no body, whatever Content-Length says
            self.reusable = False
            self._complete()

    def on_body(self, body: bytes) -> None:
        if self._keep and len(self._snippet) < SNIPPET_BYTES:
            self._snippet += body[:SNIPPET_BYTES - len(self._snippet)]
        self._body_bytes += len(body)
        if self._body_bytes > RESPONSE_BODY_CAP:
            self.reusable = False  # stop reading: close instead of reading to the end
            self._complete()

    def on_message_complete(self) -> None:
        if not self._parser.should_keep_alive():
            self.reusable = False
        self._complete()

    # requests
    def request(self, data: bytes, head: bool = False) -> asyncio.Future[Reply]:
        if self.transport is None:
            raise ConnectionLost("the endpoint closed the connection")
        self._head = head
        self._done = asyncio.get_running_loop().create_future()
        self._retry_after = self._action = None
        self._body_bytes = 0
        self._snippet = b""
        self.transport.write(data)
        return self._done

    def _complete(self) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_result((self._parser.get_status_code(), self._retry_after, self._action,
                             self._snippet))

    def expire(self) -> None:
        """The total timeout passed: fail the answer (TimeoutError, no text, like
        aiohttp's) and never reuse the connection."""
        self._fail(TimeoutError())
        self.close()

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        done = self._done
        if done is not None and not done.done():
            done.set_exception(exc)

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class Shelf:
    """The idle keep-alive connections to one origin, shared by the transports of every
    subscription that pushes there (issue 24: a thousand subscriptions of one endpoint
    reuse a few connections instead of opening their own). Each transport still holds at
    most its `pool` at once; the origin's limit bounds them all (egress/origin.py). The
    last transport to close closes what is left."""

    __slots__ = ("_idle", "users")

    def __init__(self) -> None:
        self._idle: deque[_Connection] = deque()
        self.users = 0

    def take(self) -> _Connection | None:
        now = time.monotonic()
        idle = self._idle
        while idle:
            connection = idle.pop()  # the most recently used: least likely closed
            if connection.reusable and now - connection.idle_since < KEEPALIVE_S:
                return connection
            connection.close()
        return None

    def put(self, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def __len__(self) -> int:
        return len(self._idle)

    def leave(self) -> None:
        self.users -= 1
        if self.users <= 0:
            while self._idle:
                self._idle.pop().close()


class LeanTransport:
    """See the module docstring."""

    def __init__(self, settings: TransportSettings, url: URL, shelf: Shelf | None = None,
                 ) -> None:
        self._settings = settings
        self._host, self._port = url.host or "", url.port or 80
        self._path = url.raw_path_qs or "/"
        self._query = url.raw_query_string
        host = url.raw_host or ""
        if ":" in host:
            host = f"[{host}]"
        authority = host if url.is_default_port() else f"{host}:{self._port}"
        # by lower-case name, the name as given (receivers may compare case-sensitively)
        self._fixed = {"host": ("Host", authority)}
        self._fixed.update({k.lower(): (k, v) for k, v in settings.headers.items()})
        if url.user is not None and "authorization" not in self._fixed:
            # user-info in the URI is Basic auth, as aiohttp sends it
            credentials = f"{url.user}:{url.password or ''}".encode("latin-1", "replace")
            self._fixed["authorization"] = ("Authorization",
                                            "Basic " + base64.b64encode(credentials).decode())
        self._fixed_block = "".join(f"{k}: {v}\r\n" for k, v in self._fixed.values())
        self._shelf = shelf if shelf is not None else Shelf()
        self._shelf.users += 1
        self._busy = 0
        self._waiting: deque[asyncio.Future[None]] | None = None  # made on first wait
        self._using: set[_Connection] = set()  # connections with a request of ours
        self._addresses: list[AddrInfoType] = []
        self._resolved_at = 0.0
        self._closed = False

    async def send(self, method: str, headers: Mapping[str, str], body: bytes | None,
                   params: Mapping[str, str] | None) -> Reply:
        data = self._encode(method, headers, body, params)
        await self._take_slot()
        try:
            return await self._exchange(data, method == "HEAD")
        finally:
            self._give_slot()

    async def _exchange(self, data: bytes, head: bool) -> Reply:
        """Send on a pooled or new connection within `total_s` (a timer handle that
        fails the answer, not `asyncio.timeout`: a third of this client's CPU)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.total_s
        connection = self._shelf.take()
        if connection is None:
            async with asyncio.timeout_at(deadline):  # rare: a new connection
                connection = await self._connect()
        self._using.add(connection)
        answer = connection.request(data, head)
        timer = loop.call_at(deadline, connection.expire)
        try:
            reply = await answer
        except BaseException:
            connection.close()  # a half-read answer makes it unusable
            raise
        finally:
            timer.cancel()
            self._using.discard(connection)
        self._release(connection)
        return reply

    async def _take_slot(self) -> None:
        """At most `pool` requests (connections) at once; waiters in arrival order."""
        if self._busy < self._settings.pool and not self._waiting:
            self._busy += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiting is None:
            self._waiting = deque()
        self._waiting.append(waiter)
        try:
            await waiter  # _give_slot hands its slot over
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._give_slot()  # handed over, then cancelled: pass it on
            else:
                self._waiting.remove(waiter)
            raise

    def _give_slot(self) -> None:
        waiting = self._waiting
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter: _busy unchanged
                return
        self._busy -= 1

    def _encode(self, method: str, headers: Mapping[str, str], body: bytes | None,
                params: Mapping[str, str] | None) -> bytes:
        target = self._path
        if params:
            query = urlencode(params, quote_via=quote)
            target = f"{target}&{query}" if self._query else f"{target}?{query}"
        fixed = self._fixed
        if any(name.lower() in fixed for name in headers):  # overrides (a batch's type)
            merged = dict(fixed)
            for name, value in headers.items():
                merged[name.lower()] = (name, value)
            block = "".join(f"{name}: {value}\r\n" for name, value in merged.values())
        else:  # the usual case: the fixed block was encoded once
            block = self._fixed_block + "".join(f"{name}: {value}\r\n"
                                                for name, value in headers.items())
        length = "" if body is None else f"Content-Length: {len(body)}\r\n"
        head = f"{method} {target} HTTP/1.1\r\n{block}{length}\r\n".encode()
        return head + body if body else head

    def _release(self, connection: _Connection) -> None:
        if connection.reusable and not self._closed:
            self._shelf.put(connection)
        else:
            connection.close()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        async with asyncio.timeout(self._settings.connect_s):
            for info in await self._resolve():
                try:
                    sock = self._settings.socket_factory(info)
                except OSError as exc:
                    last = exc
                    continue
                try:
                    sock.setblocking(False)
                    await loop.sock_connect(sock, info[4])
                    _, connection = await loop.create_connection(_Connection, sock=sock)
                except OSError as exc:
                    sock.close()
                    last = exc
                    continue
                except BaseException:
                    sock.close()
                    raise
                # uvloop calls connection_made after create_connection returned
                await connection.made
                return connection
        raise last or OSError(f"cannot connect to {self._host}:{self._port}")

    async def _resolve(self) -> list[AddrInfoType]:
        now = time.monotonic()
        if not self._addresses or now - self._resolved_at > DNS_CACHE_S:
            infos = await asyncio.get_running_loop().getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM)
            self._addresses = [(f, t, p, c, a) for f, t, p, c, a in infos]
            self._resolved_at = now
        return self._addresses

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for connection in list(self._using):
            connection.close()  # its request fails, as any request in flight at close
        self._using.clear()
        self._shelf.leave()
