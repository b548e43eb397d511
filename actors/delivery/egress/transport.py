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
connections in use, kept alive `KEEPALIVE_S` when idle and, given the origin's `Shelf`,
shared with the other subscriptions of the origin (both transports: issue 37); every
connection through the destination guard's socket factory. A response with
`Connection: close`, a timeout, or anything unexpected closes its connection, never
reuses it.

`https://` endpoints use aiohttp (its TLS options), whatever the default says.

Two ways to send (issue 37). `start` returns at once and tells a `Done` callback the
outcome: the lean transport writes on a shelved connection and its parser callbacks
complete the request, so a push on a warm connection costs no task and no future (a new
connection is the one step that runs a task); aiohttp runs a task per request (it needs
one). `send` is `start` and a future, for callers that await. A lean request that found
no idle connection connects, and takes whichever comes first: its new connection or one
of the origin's freed meanwhile (`Shelf.put`); aiohttp's requests wait for their own.

Tasks. A transport runs its tasks through its owner (`Spawner`, runtime/kernel/tasks.py):
the egress actor whose transport it is, so they end with the actor; used on its own, a
kernel `OwnedTasks` that `close` closes. `close` cancels what is still connecting (those
requests fail with `ConnectionLost`); the owner's own end cancels it telling nobody, as
the egress gives up its pushes then (actors/delivery/egress/push.py, `abandon`).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from ssl import SSLContext
from typing import Final, Literal, Protocol, cast
from urllib.parse import quote, urlencode

import aiohttp
import httptools
from aiohappyeyeballs.types import AddrInfoType
from yarl import URL

from runtime.kernel.tasks import OwnedTasks, Spawner

RESPONSE_BODY_CAP: Final = 64 * 1024
SNIPPET_BYTES: Final = 1024
KEEPALIVE_S: Final = 30
DEADLINES_SLACK: Final = 64
"""Requests over that a queue of total timeouts keeps behind a long-running one before it
sweeps them out, beyond `4 x pool` per transport that shares it."""
SPARE_FRESH_S: Final = 1.0
"""How long a connect a freed connection made needless stands in for a new one: a connect
older than this likely had its request dropped (a full accept queue), resent after 1 s."""
DNS_CACHE_S: Final = 300
Reply = tuple[int, str | None, str | None, bytes]
"""status, Retry-After, QOH-Action, the first SNIPPET_BYTES of a non-2xx answer's body"""
TransportName = Literal["aiohttp", "lean"]
DEFAULT_TRANSPORT: TransportName = "lean"
"""Chosen by bench/delivery.py (bench/RESULTS.md, issue 14); used where a runtime's
`[egress] transport` names none (a runtime that names one is not touched by a change of
this module default: #34)."""
SocketFactory = Callable[[AddrInfoType], socket.socket]


Done = Callable[[Reply | None, BaseException | None], None]
"""Told once how a request started with `Transport.start` ended: its reply, or the error.
Never told after the request was cancelled."""


class Exchange(Protocol):
    """A request under way (`Transport.start`)."""

    def cancel(self) -> object:
        """Give it up: `done` is not told, its connection is not reused."""


class Transport(Protocol):
    def start(self, method: str, headers: Mapping[str, str], body: bytes | None,
              params: Mapping[str, str] | None, done: Done) -> Exchange:
        """Send a request and return at once; `done` is told its outcome (issue 37: a push
        costs no task on the lean transport). The caller bounds how many run at once."""
        ...

    async def send(self, method: str, headers: Mapping[str, str], body: bytes | None,
                   params: Mapping[str, str] | None) -> Reply:
        """`start` and wait for its outcome, at most `pool` at once (waiters in order)."""
        ...

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
                   shelf: Shelf | None = None, owner: Spawner | None = None) -> Transport:
    """`name` None: `DEFAULT_TRANSPORT`, read when called (bench/delivery.py --transport
    sets it for the runtimes it starts). `owner` runs the transport's tasks (None: tasks
    of its own, closed by `close`)."""
    name = name or DEFAULT_TRANSPORT
    url = settings.url
    if name == "lean" and isinstance(url, URL) and url.scheme == "http" and url.host:
        return LeanTransport(settings, url, shelf, owner)
    return AiohttpTransport(settings, owner, shelf)


class _Owned:
    """The tasks a transport started through its owner, cancelled by its `close`."""

    __slots__ = ("_own", "owner", "tasks")

    def __init__(self, owner: Spawner | None) -> None:
        self._own: OwnedTasks | None = None
        if owner is None:
            owner = self._own = OwnedTasks()
        self.owner: Spawner = owner
        # made on first use (an empty set is 216 bytes: ten thousand subscriptions, #24)
        self.tasks: set[asyncio.Task[None]] | None = None

    def spawn(self, coro: Coroutine[object, None, None], name: str) -> asyncio.Task[None]:
        task = self.owner.spawn(coro, name)
        if self.tasks is None:
            self.tasks = set()
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def close(self) -> None:
        tasks = list(self.tasks or ())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._own is not None:
            await self._own.aclose()


# -- aiohttp ---------------------------------------------------------------------------
class AiohttpTransport:
    """With a `shelf` (its origin's), the subscriptions of one origin share one aiohttp
    connector, as the lean ones share the shelf's connections (issue 37, item 3: a burst of
    10,000 https subscriptions of one origin opened a connection, and a TLS handshake,
    each, although the others' pools had idle ones). aiohttp keys its pooled connections
    by host, port and TLS context, so subscriptions with their own CA or client
    certificate never get one another's. The origin's slots bound the connections in use;
    a subscription's own pool is its egress's count of pushes (and `send`'s semaphore)."""

    def __init__(self, settings: TransportSettings, owner: Spawner | None = None,
                 shelf: Shelf | None = None) -> None:
        self._url = settings.url
        self._ssl = settings.ssl
        self._shelf = shelf
        if shelf is not None:
            shelf.users += 1
            connector = shelf.connector(settings.socket_factory)
        else:
            connector = aiohttp.TCPConnector(
                limit=settings.pool, limit_per_host=settings.pool, ssl=settings.ssl,
                keepalive_timeout=KEEPALIVE_S, ttl_dns_cache=DNS_CACHE_S,
                socket_factory=settings.socket_factory)
        self._session = aiohttp.ClientSession(
            connector=connector, connector_owner=shelf is None,
            timeout=aiohttp.ClientTimeout(total=settings.total_s,
                                          sock_connect=settings.connect_s),
            headers=settings.headers,  # aiohttp merges these per request, in C (multidict)
            cookie_jar=aiohttp.DummyCookieJar(),  # a push never carries another's cookies
            auto_decompress=False,  # bodies are discarded
        )
        self._pool = asyncio.Semaphore(settings.pool)  # `send`'s bound
        self._tasks = _Owned(owner)  # requests of `start`; cancelled on close

    def start(self, method: str, headers: Mapping[str, str], body: bytes | None,
              params: Mapping[str, str] | None, done: Done) -> Exchange:
        """A task per request: aiohttp's own request needs one (https is ~100 us a push:
        the task is small beside it)."""
        return self._tasks.spawn(self._run(self._request(method, headers, body, params),
                                           done), "egress:request")

    @staticmethod
    async def _run(request: Awaitable[Reply], done: Done) -> None:
        try:
            reply = await request
        except Exception as exc:  # CancelledError is not an Exception: never told
            done(None, exc)
            return
        done(reply, None)

    async def send(self, method: str, headers: Mapping[str, str], body: bytes | None,
                   params: Mapping[str, str] | None) -> Reply:
        async with self._pool:
            return await self._request(method, headers, body, params)

    async def _request(self, method: str, headers: Mapping[str, str], body: bytes | None,
                       params: Mapping[str, str] | None) -> Reply:
        async with self._session.request(method, self._url, data=body, params=params,
                                         headers=headers, allow_redirects=False,
                                         ssl=self._ssl) as response:
            status = response.status
            kept = await discard_body(response, 0 if 200 <= status < 300 else SNIPPET_BYTES)
            answer = response.headers
            return status, answer.get("Retry-After"), answer.get("QOH-Action"), kept

    async def close(self) -> None:
        if self._session.closed:
            return
        await self._tasks.close()
        await self._session.close()
        if self._shelf is not None:
            await self._shelf.leave()

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
    """One keep-alive HTTP/1.1 connection; one request at a time, its outcome told to
    the request's `Done` once the parser is through the bytes that completed it (so the
    next request, which `done` may start on this very connection, begins with a clean
    parser turn)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle_since = time.monotonic()
        self._parser = httptools.HttpResponseParser(self)
        self._done: Done | None = None
        self._ready: Reply | None = None  # complete, told after the parser's turn
        self._retry_after: str | None = None
        self._action: str | None = None
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
        self.transport = None
        self._fail(ConnectionLost("the endpoint closed the connection") if exc is None
                   else exc)

    def data_received(self, data: bytes) -> None:
        if self._done is None:
            self.reusable = False  # bytes nobody asked for: never reuse this connection
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionLost("the endpoint switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionLost(f"bad HTTP response: {exc}"))
        else:
            ready = self._ready
            if ready is not None:  # `_tell`, inline: once per request (issue 37)
                done, self._done, self._ready = self._done, None, None
                if done is not None:
                    done(ready, None)

    # parser callbacks
    def on_message_begin(self) -> None:
        if self._ready is not None:
            self.reusable = False  # a second answer to one request

    def on_header(self, name: bytes, value: bytes) -> None:
        size = len(name)  # most headers are neither: no lowered copy made for them
        if size == 11 and name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1")
        elif size == 10 and name.lower() == b"qoh-action":
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
        parser = self._parser
        if not parser.should_keep_alive():
            self.reusable = False
        if self._done is not None and self._ready is None:  # `_complete`, inline (#37)
            self._ready = (parser.get_status_code(), self._retry_after, self._action,
                           self._snippet)

    # requests
    def request(self, data: bytes, head: bool, done: Done) -> None:
        """Write a request; `done` is told its outcome. Raises ConnectionLost when the
        connection is gone already."""
        if self.transport is None:
            raise ConnectionLost("the endpoint closed the connection")
        self._head = head
        self._done = done
        self._ready = self._retry_after = self._action = None
        self._body_bytes = 0
        self._snippet = b""
        self.transport.write(data)

    def _complete(self) -> None:
        if self._done is not None and self._ready is None:
            self._ready = (self._parser.get_status_code(), self._retry_after, self._action,
                           self._snippet)

    def _tell(self, reply: Reply | None, exc: BaseException | None) -> None:
        done, self._done, self._ready = self._done, None, None
        if done is not None:
            done(reply, exc)

    def expire(self) -> None:
        """The total timeout passed: fail the answer (TimeoutError, no text, like
        aiohttp's) and never reuse the connection."""
        self._fail(TimeoutError())
        self.close()

    def _fail(self, exc: BaseException) -> None:
        """The connection cannot go on; an answer complete already is still told."""
        self.reusable = False
        if self._ready is not None:
            self._tell(self._ready, None)
        else:
            self._tell(None, exc)

    def abandon(self) -> None:
        """Its request was given up: tell nobody, close."""
        self._done = self._ready = None
        self.close()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class Shelf:
    """The idle keep-alive connections to one origin, shared by the transports of every
    subscription that pushes there (issue 24: a thousand subscriptions of one endpoint
    reuse a few connections instead of opening their own). Each transport still holds at
    most its `pool` at once; the origin's limit bounds them all (egress/origin.py). The
    last transport to close closes what is left. `opened` counts the connections made to
    the origin (tests and bench/egress.py read it: a warm burst opens none)."""

    __slots__ = ("_addresses", "_connectors", "_deadlines", "_idle", "_lookup", "_resolved_at",
                 "_spares", "_waiting", "opened", "users")

    def __init__(self) -> None:
        self._idle: deque[_Connection] = deque()
        # requests waiting for a connection of their own, oldest first (made on first use)
        self._waiting: deque[_Exchange] | None = None
        # connects under way whose request a freed connection served: (started, connect)
        self._spares: deque[tuple[float, asyncio.Task[None]]] | None = None
        self.users = 0
        self.opened = 0
        self._addresses: list[AddrInfoType] = []
        self._resolved_at = 0.0
        self._lookup: asyncio.Future[None] | None = None
        # https: aiohttp's pool, one per socket factory (a runtime has one guard)
        self._connectors: dict[SocketFactory, aiohttp.TCPConnector] | None = None
        # the lean transports' total timeouts, one queue per timeout (made on first use)
        self._deadlines: dict[float, _Deadlines] | None = None

    def connector(self, socket_factory: SocketFactory) -> aiohttp.TCPConnector:
        """The aiohttp connector the https subscriptions of this origin share (made on
        first use: it needs the running loop). No limit of its own: the origin's slots
        bound the requests under way, each subscription's egress its own."""
        connectors = self._connectors
        if connectors is None:
            connectors = self._connectors = {}
        found = connectors.get(socket_factory)
        if found is None or found.closed:
            found = connectors[socket_factory] = aiohttp.TCPConnector(
                limit=0, limit_per_host=0, keepalive_timeout=KEEPALIVE_S,
                ttl_dns_cache=DNS_CACHE_S, socket_factory=socket_factory)
        return found

    async def addresses(self, host: str, port: int) -> list[AddrInfoType]:
        """The origin's addresses, looked up once per `DNS_CACHE_S` for every subscription
        that pushes there; connects that need them meanwhile wait for that lookup (a cold
        burst at a thousand subscribers looked the origin up once per subscription, each
        lookup a hop to the resolver's thread). After a failed lookup the next connect
        looks up again."""
        while True:
            if self._addresses and time.monotonic() - self._resolved_at <= DNS_CACHE_S:
                return self._addresses
            if self._lookup is None:
                break
            await asyncio.shield(self._lookup)  # ours cancelled: the lookup goes on
        loop = asyncio.get_running_loop()
        self._lookup = loop.create_future()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            self._addresses = [(f, t, p, c, a) for f, t, p, c, a in infos]
            self._resolved_at = time.monotonic()
            return self._addresses
        finally:
            lookup, self._lookup = self._lookup, None
            lookup.set_result(None)

    def deadlines(self, total_s: float, pool: int, loop: asyncio.AbstractEventLoop
                  ) -> _Deadlines:
        """The queue of total timeouts that the lean transports of this origin whose
        requests time out after `total_s` share: one loop timer for them all (issue 37: a
        timer per subscription, armed by its first push, was four objects more per
        subscription for the collector and a loop timer each at fan-out). Requests of one
        timeout come in deadline order whichever transport starts them. Its sweep limit
        grows by `4 x pool` per transport (`release_deadlines` gives it back)."""
        shared = self._deadlines
        if shared is None:
            shared = self._deadlines = {}
        deadlines = shared.get(total_s)
        if deadlines is None:
            deadlines = shared[total_s] = _Deadlines(DEADLINES_SLACK, loop)
        deadlines.users += 1
        deadlines.limit += 4 * pool
        return deadlines

    def release_deadlines(self, total_s: float, pool: int) -> None:
        """A transport of `deadlines(total_s, pool)` closed; the last one stops its timer
        (requests still in it are its own, over or failed by its close)."""
        shared = self._deadlines or {}
        deadlines = shared.get(total_s)
        if deadlines is None:
            return
        deadlines.users -= 1
        deadlines.limit -= 4 * pool
        if deadlines.users == 0:
            deadlines.close()
            del shared[total_s]

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
        """A free connection: the oldest request still waiting for one takes it (whichever
        transport of the origin it is of), else it waits idle. A request that found none
        idle connects, but it is not bound to that connect: a connect can hang for
        seconds (a receiver whose accept queue overflowed drops the connection request,
        resent after 1 s, then 3 s) while the connections in use free up in milliseconds
        (issue 32, item 7: pushes held that long ran a stop's drain to its limit, and the
        records above them, delivered, were delivered again after the restart)."""
        waiting = self._waiting
        while waiting:
            exchange = waiting.popleft()
            if exchange.waiting:
                connect, exchange.task = exchange.task, None
                if connect is not None and not connect.done():  # it serves the next one
                    if self._spares is None:
                        self._spares = deque()
                    self._spares.append((exchange.since, connect))
                exchange.send_on(connection)
                return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def wait(self, exchange: _Exchange) -> None:
        """`exchange` found no idle connection: the next one `put` here is its own, unless
        its connect ends first."""
        if self._waiting is None:
            self._waiting = deque()
        self.first_waiting()  # those served or over leave from the front
        self._waiting.append(exchange)

    def adopt_spare(self, now: float) -> bool:
        """Whether a connect under way that a freed connection made needless, and younger
        than `SPARE_FRESH_S`, stands in for a new one (its connection goes to the request
        that waits first): a cold burst opens no more connections than requests waited
        for one at once."""
        spares = self._spares
        while spares:
            since, connect = spares.popleft()
            if not connect.done() and now - since <= SPARE_FRESH_S:
                return True
        return False

    def first_waiting(self) -> _Exchange | None:
        """The oldest request still waiting for a connection."""
        waiting = self._waiting
        while waiting and not waiting[0].waiting:
            waiting.popleft()
        return waiting[0] if waiting else None

    def connect_first_waiting(self) -> None:
        """A spare connect failed: the request that waits first connects itself, through
        its own transport, unless it has a connect already."""
        first = self.first_waiting()
        if first is not None and first.task is None:
            first.connect()

    def __len__(self) -> int:
        return len(self._idle)

    async def leave(self) -> None:
        """A transport closed; the last one closes what is left."""
        self.users -= 1
        if self.users > 0:
            return
        while self._idle:
            self._idle.pop().close()
        connectors, self._connectors = self._connectors, None
        for connector in (connectors or {}).values():
            await connector.close()


_OVERRIDING: dict[tuple[str, ...], dict[tuple[str, ...], bool]] = {}
"""Per set of fixed header names (lower case): per set of a request's header names,
whether it overrides one of them (`LeanTransport._overrides`)."""


class LeanTransport:
    """See the module docstring."""

    def __init__(self, settings: TransportSettings, url: URL, shelf: Shelf | None = None,
                 owner: Spawner | None = None) -> None:
        self._settings = settings
        self.total_s = settings.total_s  # an attribute: read by every request (#37)
        # asyncio.get_running_loop() costs a getpid() system call on Python 3.11: once here
        self.loop = asyncio.get_running_loop()
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
        self._templates: dict[str, str] = {}  # by method: its request line, fixed block
        # shared by the transports whose fixed names are the same (ten thousand
        # subscriptions, issue 24: one small dict, not one each)
        self._overriding = _OVERRIDING.setdefault(tuple(self._fixed), {}) \
            if len(_OVERRIDING) < 1024 else {}
        self._shelf = shelf if shelf is not None else Shelf()
        self._shelf.users += 1
        self._busy = 0
        self._waiting: deque[asyncio.Future[None]] | None = None  # made on first wait
        self._using: set[_Connection] = set()  # connections with a request of ours
        self._tasks = _Owned(owner)  # connecting: the one step that needs a task
        self.deadlines = self._shelf.deadlines(settings.total_s, settings.pool, self.loop)
        self._closed = False

    def start(self, method: str, headers: Mapping[str, str], body: bytes | None,
              params: Mapping[str, str] | None, done: Done) -> Exchange:
        return self._begin(self._encode(method, headers, body, params), method == "HEAD",
                           done)

    def post(self, method: str, lines: str, body: bytes, done: Done) -> Exchange:
        """`start` of a request with a body and no query whose own headers are `lines`
        (`Name: value\r\n` each, none named like a fixed header), written as `start`
        writes it: the request line and the fixed headers are one template per method,
        so a push formats one string instead of a dict of headers (issue 37; the same
        bytes on the wire: tests/integration/test_transport.py)."""
        template = self._templates.get(method)
        if template is None:
            template = self._templates[method] = \
                f"{method} {self._path} HTTP/1.1\r\n{self._fixed_block}"
        data = f"{template}{lines}Content-Length: {len(body)}\r\n\r\n".encode()
        return self._begin(data + body if body else data, False, done)

    def _begin(self, data: bytes, head: bool, done: Done) -> Exchange:
        exchange = _Exchange(self, data, head, done)
        self.deadlines.add(exchange)
        shelf = self._shelf
        connection = shelf.take()
        if connection is not None:
            exchange.send_on(connection)
        else:  # rare once warm: a new connection, the one step that needs a task; the
            # first connection freed meanwhile serves it instead (`Shelf.put`)
            shelf.wait(exchange)
            if not shelf.adopt_spare(time.monotonic()):
                self.connect_for(exchange)
        return exchange

    def connect_for(self, exchange: _Exchange) -> None:
        """Start `exchange`'s own connect, unless this transport is closed."""
        if not self._closed:
            exchange.since = time.monotonic()
            exchange.task = self._tasks.spawn(self._connect_for(exchange), "egress:connect")

    async def send(self, method: str, headers: Mapping[str, str], body: bytes | None,
                   params: Mapping[str, str] | None) -> Reply:
        await self._take_slot()
        try:
            answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            exchange = self.start(method, headers, body, params, partial(_settle, answer))
            try:
                return await answer
            except asyncio.CancelledError:
                exchange.cancel()
                raise
        finally:
            self._give_slot()

    async def _connect_for(self, exchange: _Exchange) -> None:
        """Connect within the request's total timeout (and `connect_s`), then send, unless
        a connection freed meanwhile took the request: the new one goes to the shelf."""
        try:
            # the request's total timeout, or the connect's own when sooner: one timer
            # (issue 37: a cold burst at fan-out connects hundreds of times)
            async with asyncio.timeout_at(min(exchange.deadline,
                                              self.loop.time() + self._settings.connect_s)):
                connection = await self._connect()
        except asyncio.CancelledError:
            if self._closed and exchange.waiting:  # else its owner ends: nobody is told
                exchange.fail(ConnectionLost("the transport closed"))  # (module docstring)
            raise  # and nothing new starts on an owner that is ending
        except Exception as exc:
            if exchange.waiting:
                exchange.fail(exc)
            else:  # a spare failed: the request that waits first connects itself
                self._shelf.connect_first_waiting()
            return
        exchange.task = None
        if self._closed:
            connection.close()
            exchange.fail(ConnectionLost("the transport closed"))  # unless over already
            return
        if not exchange.waiting:  # over, or served by a connection freed meanwhile
            self._release(connection)  # a good connection for the next request
            return
        try:
            exchange.send_on(connection)
        except Exception as exc:  # the request fails; its owner (the egress) never does
            connection.close()
            exchange.fail(exc)

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
        if self._overrides(headers):  # a batch's Content-Type
            merged = dict(self._fixed)
            for name, value in headers.items():
                merged[name.lower()] = (name, value)
            block = "".join([f"{name}: {value}\r\n" for name, value in merged.values()])
        else:  # the usual case: the fixed block was encoded once
            block = self._fixed_block + "".join([f"{name}: {value}\r\n"
                                                 for name, value in headers.items()])
        length = "" if body is None else f"Content-Length: {len(body)}\r\n"
        head = f"{method} {target} HTTP/1.1\r\n{block}{length}\r\n".encode()
        return head + body if body else head

    def _overrides(self, headers: Mapping[str, str]) -> bool:
        """Whether `headers` name one of the fixed ones (any case); remembered per set of
        names (a push's names are one of a few sets: lowering each name of every push
        was a tenth of `_encode`)."""
        names = tuple(headers)
        known = self._overriding.get(names)
        if known is None:
            fixed = self._fixed
            known = any(name.lower() in fixed for name in names)
            if len(self._overriding) < 64:
                self._overriding[names] = known
        return known

    def release(self, connection: _Connection) -> None:
        """Its request is over: back on the shelf, or closed when not reusable."""
        self._using.discard(connection)
        if connection.reusable and not self._closed:  # `_release`, inline
            self._shelf.put(connection)
        else:
            connection.close()

    def _release(self, connection: _Connection) -> None:
        if connection.reusable and not self._closed:
            self._shelf.put(connection)
        else:
            connection.close()

    async def _connect(self) -> _Connection:
        """A new connection to the origin, tried at each of its addresses in turn; under
        the caller's timeout (`_connect_for`: the connect's own, or the request's)."""
        loop = self.loop
        last: OSError | None = None
        for info in await self._shelf.addresses(self._host, self._port):
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
            try:  # uvloop calls connection_made after create_connection returned
                await connection.made
            except BaseException:
                connection.close()  # cancelled (timed out) here: not left open
                raise
            self._shelf.opened += 1
            return connection
        raise last or OSError(f"cannot connect to {self._host}:{self._port}")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connecting(self) -> int:
        """Requests waiting for a new connection (each in a task of the owner's)."""
        return len(self._tasks.tasks or ())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for connection in list(self._using):
            connection.close()  # its request fails, as any request in flight at close
        self._using.clear()
        self._shelf.release_deadlines(self._settings.total_s, self._settings.pool)
        await self._tasks.close()  # a request still connecting fails with ConnectionLost
        await self._shelf.leave()


class _Exchange:
    """One request of a `LeanTransport`, by callbacks: written on a connection, its
    answer told to `done` by the connection's parser callbacks, its total timeout kept
    by the transport's `_Deadlines`."""

    __slots__ = ("_connection", "_data", "_done", "_head", "_owner", "deadline", "since",
                 "task")

    def __init__(self, owner: LeanTransport, data: bytes, head: bool, done: Done) -> None:
        self._owner, self._data, self._head = owner, data, head
        self._done: Done | None = done
        self.deadline = owner.loop.time() + owner.total_s
        self._connection: _Connection | None = None
        self.task: asyncio.Task[None] | None = None  # while connecting
        self.since = 0.0  # when its connect started

    @property
    def over(self) -> bool:
        """Told, given up or expired: nothing more happens to it."""
        return self._done is None

    @property
    def waiting(self) -> bool:
        """Not over, and not sent yet: it waits for a connection."""
        return self._done is not None and self._connection is None

    def connect(self) -> None:
        """Start a connect of its own, through its transport."""
        self._owner.connect_for(self)

    def send_on(self, connection: _Connection) -> None:
        self._connection = connection
        self._owner._using.add(connection)  # `using`, inline: once per request (#37)
        try:
            connection.request(self._data, self._head, self._answered)
        except Exception as exc:  # gone already (uvloop: a closed handler's RuntimeError):
            self._answered(None, exc)  # `Shelf.put` sends from another connection's answer

    def _answered(self, reply: Reply | None, exc: BaseException | None) -> None:
        connection, self._connection = self._connection, None
        done, self._done = self._done, None  # over before its connection serves another
        owner = self._owner
        if connection is not None:  # `owner.release`, inline: once per request (#37)
            if exc is not None:
                connection.close()  # a half-read answer makes it unusable
            owner._using.discard(connection)
            if connection.reusable and not owner._closed:
                owner._shelf.put(connection)
            else:
                connection.close()
        if done is not None:  # `tell`, inline
            self._data = b""  # `_Deadlines` may keep this object a while: not its bytes
            owner.deadlines.drop_over()
            done(reply, exc)

    def fail(self, exc: BaseException) -> None:
        self.tell(None, exc)

    def tell(self, reply: Reply | None, exc: BaseException | None) -> None:
        done, self._done = self._done, None
        if done is not None:
            self._data = b""  # `_Deadlines` may keep this object a while: not its bytes
            self._owner.deadlines.drop_over()
            done(reply, exc)

    def expire(self) -> None:
        """The total timeout passed: fail with TimeoutError (no text, like aiohttp's)."""
        if self._done is None:
            return
        if self._connection is not None:
            self._connection.expire()  # tells us through `_answered`, closed
            return
        task = self.task
        self.fail(TimeoutError())
        if task is not None:
            task.cancel()  # still connecting

    def cancel(self) -> None:
        self._done = None
        self._data = b""
        if self.task is not None:
            self.task.cancel()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.abandon()
            self._owner.release(connection)
        self._owner.deadlines.drop_over()


class _Deadlines:
    """The total timeouts of requests that share one timeout (the lean transports of one
    origin with that timeout: `Shelf.deadlines`), on one loop timer (issue 37: a timer
    handle per request, made and cancelled, was 2-4 us of a push on uvloop). Their
    deadlines come in start order: one timer armed for the oldest one still under way is
    enough. Requests that are over leave from the front as they end; a long-running one
    at the front keeps those behind it until the queue passes `limit`, when they are
    swept out in place."""

    __slots__ = ("_entries", "_loop", "_timer", "limit", "users")

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self._entries: deque[_Exchange] | None = None  # made on first use
        self.limit = limit
        self.users = 0  # transports sharing it (`Shelf.deadlines`)
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None

    def add(self, exchange: _Exchange) -> None:
        entries = self._entries
        if entries is None:
            entries = self._entries = deque()
        entries.append(exchange)
        if self._timer is None:
            self._arm(exchange.deadline)
        elif len(entries) > self.limit:
            live = [entry for entry in entries if not entry.over]
            entries.clear()  # in place: `_expire` may be iterating it (a request it
            entries.extend(live)  # expired started the next one)

    def drop_over(self) -> None:
        entries = self._entries
        while entries and entries[0]._done is None:  # `over`, without a property call
            entries.popleft()

    def _arm(self, deadline: float) -> None:
        self._timer = self._loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        entries = self._entries
        now = self._loop.time()
        while entries and (entries[0].over or entries[0].deadline <= now):
            entries.popleft().expire()
        if entries and self._timer is None:
            self._arm(entries[0].deadline)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._entries = None

    def __len__(self) -> int:
        return len(self._entries or ())


def _settle(answer: asyncio.Future[Reply], reply: Reply | None,
            exc: BaseException | None) -> None:
    if answer.done():
        return
    if exc is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(cast(Reply, reply))
