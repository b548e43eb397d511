"""The admin HTTP server: health, metrics, and the routes services add (subscriptions).

Replies follow Queue-Over-Http: `200 {"success": true, "data": ...}` and
`4xx {"success": false, "reason": ..., "details": ...}`. A bad request is never a 500:
handlers raise `BadRequest` or answer `fail(...)` (a service translates its own domain
errors, as actors/delivery/routes.py does), and anything unexpected is logged and
answered as JSON.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from runtime.errors import ActorError
from runtime.host.metrics import Registry

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_encoder = msgspec.json.Encoder()


class BadRequest(Exception):
    """A client error: answered with `status` and a JSON reason."""

    def __init__(self, reason: str, details: str = "", status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details
        self.status = status


def ok(data: Any) -> web.Response:
    return web.Response(body=_encoder.encode({"success": True, "data": data}),
                        content_type="application/json")


def fail(status: int, reason: str, details: str = "") -> web.Response:
    body = {"success": False, "reason": reason, "details": details}
    return web.Response(status=status, body=_encoder.encode(body),
                        content_type="application/json")


def _error_middleware(token: str) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token and not _authorized(request, token):
            return fail(401, "unauthorized", "send 'Authorization: Bearer <token>'")
        try:
            return await handler(request)
        except BadRequest as exc:
            return fail(exc.status, exc.reason, exc.details)
        except ActorError as exc:  # a service's actors are restarting: try again shortly
            return fail(503, "service unavailable", str(exc))
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return fail(exc.status, exc.reason, exc.text or "")
        except Exception as exc:
            log.exception("admin %s %s failed", request.method, request.path)
            return fail(500, "internal error", repr(exc))

    return middleware


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    return hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class AdminServer:
    def __init__(self, listen: str, token: str, registry: Registry,
                 health: Callable[[], dict[str, Any]]) -> None:
        self.host, self.port = split_listen(listen)
        self.registry = registry
        self._health = health
        self.app = web.Application(middlewares=[_error_middleware(token)],
                                   client_max_size=1024 * 1024)
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:  # an ephemeral port: read back what the OS chose
            self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        status = self._health()
        return web.json_response(status, status=200 if status.get("status") == "ok" else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.registry.render(),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})

    def __repr__(self) -> str:
        return f"<AdminServer {self.url} running={self._runner is not None}>"
