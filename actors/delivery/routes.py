"""The delivery service's admin routes (Queue-Over-Http): decode the request body, call
the library API (`DeliveryService.subscribe`, `unsubscribe`), answer.

    POST /broker/subscription      a Consumer JSON: subscribe; answers it, redacted
    GET  /broker/subscription      every subscription, redacted
    POST /broker/unsubscribe       a Consumer JSON, or just `id` and `group.id`

Errors are translated in one place, `_answering`: a `DeliveryError` becomes the admin
API's `{"success": false, "reason", "details"}` with the status `STATUS` gives its class.
Anything else is left to the admin server's middleware (runtime/host/admin.py).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
    UnknownBroker,
)
from actors.delivery.subscription import decode_consumer, redacted
from runtime.host.admin import Handler, fail, ok

if TYPE_CHECKING:
    from actors.delivery.service import DeliveryService

STATUS: tuple[tuple[type[DeliveryError], int], ...] = (
    (InvalidSubscription, 400),
    (SubscriptionExists, 400),
    (UnknownBroker, 400),
    (SubscriptionNotFound, 404),
    (SubscriptionStartFailed, 503),  # the same request may work later
    (DeliveryError, 400),  # a subclass added without a row here: still the client's
)
"""HTTP status per error class; the first class the error is an instance of wins."""


def status_of(exc: DeliveryError) -> int:
    return next(status for cls, status in STATUS if isinstance(exc, cls))


def _answering(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except DeliveryError as exc:
            return fail(status_of(exc), exc.reason, exc.details)

    return answer


class SubscriptionRoutes:
    def __init__(self, service: DeliveryService) -> None:
        self.service = service

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/broker/subscription", _answering(self.post_subscription))
        app.router.add_get("/broker/subscription", _answering(self.get_subscriptions))
        app.router.add_post("/broker/unsubscribe", _answering(self.post_unsubscribe))

    async def post_subscription(self, request: web.Request) -> web.Response:
        consumer = decode_consumer(await request.read())
        await self.service.subscribe(consumer)
        return ok(redacted(consumer))

    async def get_subscriptions(self, request: web.Request) -> web.Response:
        return ok([redacted(c) for c in self.service.subscriptions.values()])

    async def post_unsubscribe(self, request: web.Request) -> web.Response:
        key = unsubscribe_key(await request.read())
        return ok(redacted(await self.service.unsubscribe(key)))

    def __repr__(self) -> str:
        return f"<SubscriptionRoutes {self.service!r}>"


class _Key(msgspec.Struct):
    id: str
    group_id: str = msgspec.field(name="group.id")


def unsubscribe_key(body: bytes) -> str:
    """Unsubscribe takes a Consumer JSON (Queue-Over-Http) or just `id` and `group.id`."""
    try:
        key = msgspec.json.decode(body, type=_Key)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidSubscription("invalid unsubscribe request", str(exc)) from None
    return f"{key.id}_{key.group_id}"
