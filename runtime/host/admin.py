"""The admin HTTP server: health, metrics, the API description, and the routes services
add (subscriptions).

Replies follow Queue-Over-Http: `200 {"success": true, "data": ...}` and
`4xx {"success": false, "reason": ..., "details": ...}`. A bad request is never a 500:
handlers raise `BadRequest` or answer `fail(...)` (a service translates its own domain
errors, as actors/delivery/api/subscriptions.py does), and anything unexpected is logged and
answered as JSON.

Front-door rules, in `_guard`, before any handler runs (issue 13):

- The `Host` header must name this server: an IP address, a loopback name (`localhost`,
  `*.localhost`), the listen host, or a name in `[admin] allowed_hosts`; else 403. A page
  whose own name an attacker re-points at us (DNS rebinding) sends its own name, so
  neither the token-less demo nor the same-origin rule below can be reached that way
  (issue 25). A request without `Host` (no browser sends one) passes.
- With `[admin] token` set, every request needs `Authorization: Bearer <token>`, compared
  in constant time (SHA-256 of both sides, so not even the length leaks); a header that
  is not UTF-8 is just a wrong token (401). Without the token: `GET /` and
  `GET /status.js` (the status page holds no data and asks for the token itself) and,
  with `[admin] public_health = true`, `GET /healthz` and `GET /readyz`, whose bodies
  are then cut to the state alone (`status`, `ready`) for orchestrators' probes.
- A request that changes something (POST, PUT, PATCH, DELETE) with a body must say
  `Content-Type: application/json` (UTF-8), else 415; and one that a browser sent from
  another origin (`Origin` or `Sec-Fetch-Site` say so) is refused with 403. Together they
  stop a web page in an operator's browser from posting to an API without a token.
- Bodies are at most `MAX_BODY_BYTES` (413).
- Before any of this, runtime/host/frontdoor.py bounds the open connections
  (`[admin] max_connections`, and a few more for health probes only) and the time a
  request head may take (`[admin] header_timeout_ms`); a body must arrive within
  `[admin] body_timeout_ms`, read here before the handler runs.

`[admin] tls_certfile` and `tls_keyfile` serve the API over HTTPS only.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware

from runtime.errors import ActorError
from runtime.host.config import (
    DEFAULT_BODY_TIMEOUT_MS,
    DEFAULT_HEADER_TIMEOUT_MS,
    DEFAULT_MAX_CONNECTIONS,
    AdminConfig,
)
from runtime.host.frontdoor import REFUSED_BUSY, Doors, FrontDoorSite
from runtime.host.metrics import Registry
from runtime.host.openapi import OPENAPI, OpenApi
from runtime.host.tls import server_context

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_encoder = msgspec.json.Encoder()
MAX_BODY_BYTES: Final = 1024 * 1024
CHANGING_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HEALTH_PATHS: Final = frozenset({"/healthz", "/readyz"})
PAGE_PATHS: Final = frozenset({"/", "/status.js"})
"""The status page and its script: no data in them, so no token needed."""
PUBLIC_HEALTH_KEYS: Final = frozenset({"status", "ready"})
"""All an unauthenticated health probe learns: no broker addresses, no reasons."""


class BadRequest(Exception):
    """A client error: answered with `status` and a JSON reason."""

    def __init__(self, reason: str, details: str = "", status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details
        self.status = status


def ok(data: object) -> web.Response:
    return web.Response(body=_encoder.encode({"success": True, "data": data}),
                        content_type="application/json")


def fail(status: int, reason: str, details: str = "") -> web.Response:
    body = {"success": False, "reason": reason, "details": details}
    return web.Response(status=status, body=_encoder.encode(body),
                        content_type="application/json")


def guard_middleware(token: str, public_health: bool,
                     hosts: HostCheck | None = None, doors: Doors | None = None,
                     ) -> Middleware:
    """The rules in the module docstring, as aiohttp middleware. With `doors`, the request
    head time limit (runtime/host/frontdoor.py) stops while a request is handled."""
    guard = _Guard(token, public_health, hosts or HostCheck("127.0.0.1"))

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if doors is None:
            return await guard.handle(request, handler)
        transport = request.transport
        doors.head_done(transport)
        reserve = doors.health_only(transport)  # past the limit: a probe, once
        if reserve and request.path not in HEALTH_PATHS:
            response: web.StreamResponse = fail(503, REFUSED_BUSY[2], REFUSED_BUSY[3])
        else:
            try:
                response = await guard.handle(request, _body_first(handler, doors))
            finally:
                doors.answered(transport)
        if reserve:
            response.force_close()
        return response

    return middleware


def _body_first(handler: Handler, doors: Doors) -> Handler:
    """`handler`, once the request's body has arrived within the body time limit (the
    front door answers 408 and closes the connection past it); aiohttp keeps the body for
    the handler's own `read`."""
    async def read_then_handle(request: web.Request) -> web.StreamResponse:
        if request.body_exists:
            doors.reading_body(request.transport)
            try:
                await request.read()
            finally:
                doors.head_done(request.transport)
        return await handler(request)

    return read_then_handle


class HostCheck:
    """Which `Host` headers name this server (see the module docstring)."""

    def __init__(self, listen_host: str, allowed: Sequence[str] = ()) -> None:
        names = {_bare(n) for n in allowed}
        self.any = "*" in names
        self.suffixes = tuple(n[1:] for n in names if n.startswith("*."))  # ".example.com"
        self.names = frozenset({_bare(listen_host), *names} - {"*"})

    def allows(self, header: str | None) -> bool:
        if header is None or self.any:
            return True
        name = _host_name(header)
        if _is_ip(name) or name == "localhost" or name.endswith(".localhost"):
            return True
        return name in self.names or name.endswith(self.suffixes)


def _bare(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def _host_name(header: str) -> str:
    """The name of a `Host` header: without its port and brackets, lowercase."""
    header = header.strip()
    if header.startswith("["):
        return _bare(header[1:].partition("]")[0])
    if header.count(":") == 1:
        header = header.partition(":")[0]
    return _bare(header)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _Guard:
    def __init__(self, token: str, public_health: bool, hosts: HostCheck) -> None:
        self._digest = _digest(f"Bearer {token}".encode()) if token else None
        self._public_health = public_health
        self._hosts = hosts

    async def handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get(hdrs.HOST)
        if not self._hosts.allows(host):
            return fail(403, "host not allowed",
                        f"Host {host!r} is not a name of this server: add it to "
                        "[admin] allowed_hosts")
        authorized = self._digest is None or self._has_token(request)
        if not authorized and not self._public(request):
            return fail(401, "unauthorized", "send 'Authorization: Bearer <token>'")
        refused = _refused_origin(request) or _refused_content_type(request)
        if refused is not None:
            return refused
        response = await _answer(request, handler)
        if not authorized and request.path in HEALTH_PATHS:
            return _state_only(response)
        return response

    def _has_token(self, request: web.Request) -> bool:
        # aiohttp keeps bytes that are not UTF-8 as surrogates: encode them back, so a
        # binary header is simply a wrong token (it was a plain-text 500)
        sent = request.headers.get(hdrs.AUTHORIZATION, "").encode("utf-8", "surrogateescape")
        assert self._digest is not None
        return hmac.compare_digest(_digest(sent), self._digest)

    def _public(self, request: web.Request) -> bool:
        if request.method != "GET":
            return False
        return request.path in PAGE_PATHS or (self._public_health and
                                               request.path in HEALTH_PATHS)


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _refused_origin(request: web.Request) -> web.Response | None:
    if request.method not in CHANGING_METHODS:
        return None
    origin = request.headers.get(hdrs.ORIGIN)
    # host and port only: behind a proxy that ends TLS the scheme we see is not the page's
    if (origin is not None and _netloc(origin) != request.host) or (
            request.headers.get("Sec-Fetch-Site") == "cross-site"):
        return fail(403, "cross-origin request refused",
                    f"Origin {origin!r} is not {request.host!r}: the admin API is not for "
                    "other sites' pages")
    return None


def _netloc(url: str) -> str:
    try:
        return urlsplit(url).netloc
    except ValueError:  # "http://[" and the like: no origin of ours
        return ""


def _refused_content_type(request: web.Request) -> web.Response | None:
    if request.method not in CHANGING_METHODS:
        return None
    if not request.body_exists:
        return None  # `curl -X POST .../pause`: nothing to decode, whatever it declares
    charset = (request.charset or "utf-8").lower()
    if request.content_type != "application/json" or charset not in ("utf-8", "utf8"):
        sent = request.headers.get(hdrs.CONTENT_TYPE, "none")
        return fail(415, "unsupported media type",
                    f"send Content-Type: application/json (UTF-8), not {sent!r}")
    return None


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return fail(exc.status, exc.reason, exc.details)
    except ActorError as exc:  # a service's actors are restarting: try again shortly
        return fail(503, "service unavailable", str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = fail(exc.status, exc.reason, exc.text or "")
        if hdrs.ALLOW in exc.headers:  # a 405 says which methods the path has
            response.headers[hdrs.ALLOW] = exc.headers[hdrs.ALLOW]
        return response
    except ConnectionResetError as exc:
        if not _client_gone(request):
            log.exception("admin %s %s failed", request.method, request.path)
            return fail(500, "internal error", repr(exc))
        log.warning("admin %s %s: the client closed the connection before the end of its "
                    "request body", request.method, request.path)  # a mistake, not ours
        return fail(400, "incomplete request", "the connection closed before the body ended")
    except Exception as exc:
        log.exception("admin %s %s failed", request.method, request.path)
        return fail(500, "internal error", repr(exc))


def _client_gone(request: web.Request) -> bool:
    """The request's own connection is closed (reading its body failed because of it)."""
    return request.transport is None or request.transport.is_closing()


def _state_only(response: web.StreamResponse) -> web.StreamResponse:
    """A health answer for a caller without the token: the state, nothing else."""
    if not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return response
    try:
        body = msgspec.json.decode(response.body)
    except msgspec.DecodeError:
        return response
    if not isinstance(body, dict):
        return response
    state = {k: v for k, v in body.items() if k in PUBLIC_HEALTH_KEYS}
    return web.json_response(state, status=response.status)


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log, with a request it cannot parse (a client's mistake or a
    scanner: `HttpProcessingError`) as one WARNING line instead of an ERROR with a
    traceback (#25). Anything else keeps its traceback."""

    def exception(self, msg: object, *args: object, exc_info: object = True,
                  **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            first = (exc_info.message or "").strip().splitlines()[:1]
            self.warning(f"malformed request ({msg}): %s %s", *args, exc_info.code,
                         first[0] if first else type(exc_info).__name__)
            return
        self.error(msg, *args, exc_info=exc_info, **kwargs)  # type: ignore[arg-type]


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class AdminServer:
    def __init__(self, listen: str, token: str, registry: Registry,
                 health: Callable[[], dict[str, object]], *, public_health: bool = False,
                 tls: ssl.SSLContext | None = None,
                 allowed_hosts: Sequence[str] = (),
                 header_timeout_ms: int = DEFAULT_HEADER_TIMEOUT_MS,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 body_timeout_ms: int = DEFAULT_BODY_TIMEOUT_MS) -> None:
        self.host, self.port = split_listen(listen)
        self.registry = registry
        self.tls = tls
        self._health = health
        self.doors = Doors(max_connections, header_timeout_ms / 1000, body_timeout_ms / 1000)
        self.openapi = OpenApi(token=bool(token), public_health=public_health)
        guard = guard_middleware(token, public_health, HostCheck(self.host, allowed_hosts),
                                 self.doors)
        self.app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
        self.app[OPENAPI] = self.openapi
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/openapi.json", self._openapi)
        self._runner: web.AppRunner | None = None
        self.listening = asyncio.Event()
        """Set once the server accepts connections (and `port` is the bound one)."""

    @classmethod
    def from_config(cls, config: AdminConfig, registry: Registry,
                    health: Callable[[], dict[str, object]]) -> AdminServer:
        """The server `[admin]` describes (TLS files are loaded here: checked already by
        the config's own check)."""
        tls = (server_context(config.tls_certfile, config.tls_keyfile)
               if config.tls_certfile else None)
        return cls(config.listen, config.token, registry, health,
                   public_health=config.public_health, tls=tls,
                   allowed_hosts=config.allowed_hosts,
                   header_timeout_ms=config.header_timeout_ms,
                   max_connections=config.max_connections,
                   body_timeout_ms=config.body_timeout_ms)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                     logger=ServerLog(logging.getLogger("aiohttp.server")))
        await self._runner.setup()
        site = FrontDoorSite(self._runner, self.host, self.port, self.doors,
                             ssl_context=self.tls)
        await site.start()
        self.port = site.port  # an ephemeral port (0): what the OS chose
        self.listening.set()

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        self.listening.clear()
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        status = self._health()
        return web.json_response(status, status=200 if status.get("status") == "ok" else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.registry.render(),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(self.openapi.document(self.app.router, self.url))

    def __repr__(self) -> str:
        return f"<AdminServer {self.url} running={self._runner is not None}>"
