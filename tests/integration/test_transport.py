"""The lean egress transport's connection handling, against a real aiohttp server (the
request semantics are in test_egress.py, which runs on every transport)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web
from yarl import URL

from actors.delivery.egress.guard import DestinationGuard
from actors.delivery.egress.transport import (
    SNIPPET_BYTES,
    ConnectionLost,
    LeanTransport,
    Shelf,
    TransportName,
    TransportSettings,
    make_transport,
)
from tests.waits import until

pytestmark = pytest.mark.integration


class Server:
    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        self.routes(app.router)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_route("*", "/keep", self._keep)
        router.add_route("*", "/close", self._close)
        router.add_route("*", "/fail", self._fail)

    def _peer(self, request: web.Request) -> None:
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername"))

    async def _keep(self, request: web.Request) -> web.Response:
        self._peer(request)
        return web.Response(text="ok", headers={"Retry-After": "3", "QOH-Action": "skip"})

    async def _fail(self, request: web.Request) -> web.Response:
        return web.Response(status=502, body=b"e" * 3000)

    async def _close(self, request: web.Request) -> web.Response:
        self._peer(request)
        return web.Response(text="bye", headers={"Connection": "close"})


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = Server()
    await server.start()
    try:
        yield server
    finally:
        assert server.runner is not None
        await server.runner.cleanup()


def lean(url: str, pool: int = 2, shelf: Shelf | None = None) -> LeanTransport:
    settings = TransportSettings(URL(url), {"User-Agent": "t"}, pool, 5.0, 5.0,
                                 DestinationGuard().socket_factory)
    transport = make_transport(settings, "lean", shelf)
    assert isinstance(transport, LeanTransport)
    return transport


async def test_keep_alive_reuses_one_connection_and_reads_the_answer_headers(
        server: Server) -> None:
    transport = lean(server.url + "/keep")
    try:
        replies = [await transport.send("POST", {}, b"x", None) for _ in range(3)]
    finally:
        await transport.close()
    assert replies == [(200, "3", "skip", b"")] * 3  # no body kept from a 2xx
    assert len(set(server.peers)) == 1


async def test_subscriptions_of_one_origin_share_its_idle_connections(
        server: Server) -> None:
    shelf = Shelf()
    transports = [lean(server.url + "/keep", shelf=shelf) for _ in range(20)]
    try:
        for transport in transports:
            assert (await transport.send("POST", {}, b"x", None))[0] == 200
        assert len(set(server.peers)) == 1  # twenty subscriptions, one connection
        for transport in transports[:-1]:
            await transport.close()
        assert len(shelf) == 1  # others still use the origin: kept
    finally:
        await transports[-1].close()
    assert len(shelf) == 0  # the last one closed what was left


async def test_separate_shelves_keep_connections_apart(server: Server) -> None:
    first, second = lean(server.url + "/keep"), lean(server.url + "/keep")
    try:
        await first.send("POST", {}, b"x", None)
        await second.send("POST", {}, b"x", None)
    finally:
        await first.close()
        await second.close()
    assert len(set(server.peers)) == 2


async def test_connection_close_is_honoured_with_a_new_connection_per_request(
        server: Server) -> None:
    transport = lean(server.url + "/close")
    try:
        replies = [await transport.send("POST", {}, b"x", None) for _ in range(3)]
    finally:
        await transport.close()
    assert [r[0] for r in replies] == [200] * 3
    assert len(set(server.peers)) == 3


async def test_https_endpoints_use_aiohttp_whatever_the_default() -> None:
    settings = TransportSettings(URL("https://example.invalid/x"), {}, 1, 1.0, 1.0,
                                 DestinationGuard().socket_factory)
    transport = make_transport(settings, "lean")
    try:
        assert type(transport).__name__ == "AiohttpTransport"
    finally:
        await transport.close()


@pytest.mark.parametrize("name", ["lean", "aiohttp"])
async def test_a_failed_answer_keeps_the_first_kib_of_its_body(
        server: Server, name: TransportName) -> None:
    settings = TransportSettings(URL(server.url + "/fail"), {}, 1, 5.0, 5.0,
                                 DestinationGuard().socket_factory)
    transport = make_transport(settings, name)
    try:
        replies = [await transport.send("POST", {}, b"x", None) for _ in range(2)]
    finally:
        await transport.close()
    assert replies == [(502, None, None, b"e" * SNIPPET_BYTES)] * 2  # the next one too


class Held(Server):
    """`/held` answers only when `release` is set (or the client gives up)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.first = asyncio.Event()  # `/once` holds its first request only

    def routes(self, router: web.UrlDispatcher) -> None:
        super().routes(router)
        router.add_route("*", "/held", self._held)
        router.add_route("*", "/once", self._once)

    async def _held(self, request: web.Request) -> web.Response:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.release.wait(), 10)
        return web.Response(text="late")

    async def _once(self, request: web.Request) -> web.Response:
        if self.first.is_set():
            return web.Response(text="ok")
        self.first.set()
        return await self._held(request)


def lean_with_timeout(url: str, total_s: float, pool: int = 2,
                      shelf: Shelf | None = None) -> LeanTransport:
    settings = TransportSettings(URL(url), {}, pool, total_s, 5.0,
                                 DestinationGuard().socket_factory)
    transport = make_transport(settings, "lean", shelf)
    assert isinstance(transport, LeanTransport)
    return transport


@contextlib.asynccontextmanager
async def held_server() -> AsyncIterator[Held]:
    """A `Held` server, released and stopped at the end."""
    server = Held()
    await server.start()
    try:
        yield server
    finally:
        server.release.set()
        assert server.runner is not None
        await server.runner.cleanup()


async def test_one_timer_expires_a_held_request_while_fast_ones_pass_it() -> None:
    async with held_server() as server:
        shelf = Shelf()
        held = lean_with_timeout(server.url + "/held", 0.3, shelf=shelf)
        fast = lean_with_timeout(server.url + "/keep", 0.3, pool=1, shelf=shelf)
        try:
            started = time.monotonic()
            waiting = asyncio.ensure_future(held.send("POST", {}, b"x", None))
            replies = [await fast.send("POST", {}, b"x", None) for _ in range(50)]
            with pytest.raises(TimeoutError):
                await waiting
            took = time.monotonic() - started
        finally:
            await held.close()
            await fast.close()
    assert [r[0] for r in replies] == [200] * 50
    assert 0.3 <= took < 1.5
    assert len(fast.deadlines) == 0 and len(held.deadlines) == 0  # nothing kept


async def test_transports_of_one_origin_and_timeout_share_one_timer() -> None:
    # issue 37: ten thousand subscriptions of one endpoint armed ten thousand loop
    # timers; those of one timeout now share one, and a timeout still holds for each
    async with held_server() as server:
        shelf = Shelf()
        first = lean_with_timeout(server.url + "/keep", 0.3, shelf=shelf)
        second = lean_with_timeout(server.url + "/held", 0.3, pool=3, shelf=shelf)
        other = lean_with_timeout(server.url + "/keep", 5.0, shelf=shelf)
        try:
            assert first.deadlines is second.deadlines is not other.deadlines
            assert first.deadlines.limit == 4 * 2 + 4 * 3 + 64  # each sharer's pool counts
            assert (await first.send("POST", {}, b"x", None))[0] == 200
            assert (await other.send("POST", {}, b"x", None))[0] == 200
            await first.close()  # a sharer leaves: the queue stays for the other
            assert second.deadlines.limit == 4 * 3 + 64
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await second.send("POST", {}, b"x", None)
            assert 0.3 <= time.monotonic() - started < 1.5
            shared = second.deadlines
            await second.close()  # the last sharer: its timer stops
            assert shared._timer is None and len(shared) == 0
        finally:
            for transport in (first, second, other):
                await transport.close()


async def test_a_connect_that_hangs_fails_at_the_connect_timeout() -> None:
    # a listener whose accept queue is full drops the connection request: the connect
    # hangs (resent after 1 s, 3 s...); `connect_s` ends it long before the total timeout
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(address)
        fillers.append(filler)
    settings = TransportSettings(URL(f"http://127.0.0.1:{address[1]}/hook"), {}, 1, 30.0,
                                 0.3, DestinationGuard().socket_factory)
    transport = make_transport(settings, "lean")
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await transport.send("POST", {}, b"x", None)
        assert 0.3 <= time.monotonic() - started < 2.0  # not the total's 30 s
    finally:
        await transport.close()
        for sock in (*fillers, listener):
            sock.close()


async def test_requests_that_ended_behind_a_held_one_are_swept_out() -> None:
    # the first request is held: the fast ones after it end but stay behind it in
    # start order, until the queue passes its limit (4 x pool + 64) and is swept
    server = Held()
    await server.start()
    transport = lean_with_timeout(server.url + "/once", 30.0, pool=2)
    try:
        waiting = asyncio.ensure_future(transport.send("POST", {}, b"x", None))
        await server.first.wait()
        lengths = []
        for _ in range(300):
            assert (await transport.send("POST", {}, b"x", None))[0] == 200
            lengths.append(len(transport.deadlines))
        limit = 4 * 2 + 64
        assert max(lengths) == limit  # the ended ones piled up behind the held one...
        swept = [n for before, n in itertools.pairwise(lengths) if n < before]
        assert swept and all(n <= 3 for n in swept)  # ...and were swept past the limit
        server.release.set()
        assert (await waiting)[0] == 200
        assert len(transport.deadlines) == 0
    finally:
        server.release.set()
        await transport.close()
        assert server.runner is not None
        await server.runner.cleanup()


@contextlib.contextmanager
def unanswered_listener() -> Iterator[str]:
    """The URL of a listener that accepts nothing and whose one-place backlog is taken:
    a connect to it hangs (its SYN is dropped) until it is given up."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    filler = socket.create_connection(address)  # takes the backlog's place
    try:
        yield f"http://127.0.0.1:{address[1]}/hook"
    finally:
        filler.close()
        listener.close()


async def test_close_cancels_a_connect_under_way_and_fails_its_request() -> None:
    with unanswered_listener() as url:
        transport = lean(url)
        waiting = asyncio.ensure_future(transport.send("POST", {}, b"x", None))
        await until(lambda: transport.connecting == 1, timeout_s=5, poll_s=0.005,
                    what="a connect under way")
        await transport.close()
        with pytest.raises(ConnectionLost):
            await waiting
    assert transport.connecting == 0
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "egress:connect"]


async def test_a_cold_burst_of_many_subscriptions_looks_their_origin_up_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: every connect of a cold burst needs the origin's addresses; the
    subscriptions of one origin share one lookup (each was a hop to the resolver's thread,
    once per subscription), and a lookup that fails is made again by the next connect."""
    server = Held()
    await server.start()
    loop = asyncio.get_running_loop()
    lookups: list[str] = []
    real = loop.getaddrinfo
    failing = [True]

    async def counted(host: str, port: int, **kwargs: object) -> object:
        lookups.append(host)
        await asyncio.sleep(0.05)  # the burst's other connects come meanwhile
        if failing[0]:
            failing[0] = False
            raise socket.gaierror("the resolver is down")
        return await real(host, port, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "getaddrinfo", counted)
    shelf = Shelf()
    url = server.url.replace("127.0.0.1", "localhost") + "/keep"
    transports = [lean_with_timeout(url, 5.0, pool=4, shelf=shelf) for _ in range(10)]
    try:
        first = await asyncio.gather(*(t.send("POST", {}, b"x", None) for t in transports),
                                     return_exceptions=True)
        assert len(lookups) == 2  # the failed one, then one for all the rest
        assert sum(isinstance(r, OSError) for r in first) == 1
        burst = await asyncio.gather(*(t.send("POST", {}, b"x", None)
                                       for t in transports for _ in range(4)))
        assert [r[0] for r in burst] == [200] * 40
        assert len(lookups) == 2 and shelf.opened >= 4
    finally:
        for transport in transports:
            await transport.close()
        assert server.runner is not None
        await server.runner.cleanup()


class OneConnection:
    """A receiver that accepts one connection, then nothing: its one-place backlog is then
    taken by a filler, so a connect to it hangs (its SYN dropped), as at a receiver whose
    accept queue overflowed under a burst of connects. It answers `200` on the connection
    it has, the first request once `release` is set."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.listener.setblocking(False)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.release = asyncio.Event()
        self.requests = 0
        self.first = asyncio.Event()
        self.filler: socket.socket | None = None
        self.task = asyncio.ensure_future(self._serve())

    async def _serve(self) -> None:
        conn, _ = await asyncio.get_running_loop().sock_accept(self.listener)
        # the backlog's one place taken: nothing else connects from now on
        self.filler = socket.create_connection(self.listener.getsockname())
        reader, writer = await asyncio.open_connection(sock=conn)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests += 1
                if self.requests == 1:
                    self.first.set()
                    await self.release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if self.filler is not None:
            self.filler.close()
        self.listener.close()


async def test_requests_waiting_for_a_connect_take_a_connection_freed_meanwhile() -> None:
    """Issue 32, item 7: a request that found no idle connection connects, but the first
    connection of its origin freed meanwhile serves it. Bound to its own connect, a push
    waited for SYNs resent after 1 s and 3 s at a receiver whose accept queue overflowed
    (answering in 5 ms), so a stop's drain ran to its limit and the records above it,
    delivered, were delivered again after the restart."""
    server = OneConnection()
    shelf = Shelf()
    first, other = lean(server.url, shelf=shelf), lean(server.url, pool=2, shelf=shelf)
    try:
        held = asyncio.ensure_future(first.send("POST", {}, b"x", None))
        await server.first.wait()
        waiting = [asyncio.ensure_future(other.send("POST", {}, b"x", None))
                   for _ in range(2)]
        await until(lambda: other.connecting == 2, timeout_s=5, poll_s=0.005,
                    what="both requests connecting")
        server.release.set()
        replies = [await held] + await asyncio.gather(*waiting)
        assert [reply[0] for reply in replies] == [200] * 3
        assert shelf.opened == 1 and server.requests == 3  # all on the first connection
    finally:
        server.release.set()
        await first.close()
        await other.close()
        await server.stop()
    assert other.connecting == 0
