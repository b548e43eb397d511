"""The delivery service's admin routes (Queue-Over-Http): decode the request body, call
the library API (`DeliveryControl.subscribe`, `unsubscribe`), answer.

    POST /broker/subscription      a Consumer JSON: subscribe; answers it, redacted
    GET  /broker/subscription      every subscription, redacted
    POST /broker/unsubscribe       a Consumer JSON, or just `id` and `group` (or the
                                   deprecated `id` and `group.id`)

A subscription is the pair (`id`, `group.id`); `known_key` finds its key
(actors/delivery/document/identity.py: one per pair, so (`k`, `a_b`) and (`k_a`, `b`) are
two subscriptions, each addressed alone, though both push as `QOH-Consumer: k_a_b`).

Errors are translated in one place, `answering`: a `DeliveryError` becomes the admin
API's `{"success": false, "reason", "details"}` with the status `STATUS` gives its class.
Anything else is left to the admin server's middleware (runtime/host/admin.py). The
routes are described for `/openapi.json` in actors/delivery/api/apidoc.py.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence

import msgspec
from aiohttp import web
from multidict import MultiMapping

from actors.delivery.api.apidoc import describe_delivery_api
from actors.delivery.control.overview import refusals
from actors.delivery.control.service import DeliveryControl
from actors.delivery.document.identity import subscription_key
from actors.delivery.document.secrets import resolved
from actors.delivery.document.subscription import SAFE_ID, Consumer, decode_consumer, redacted
from actors.delivery.document.tls import client_context
from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
    LimitReached,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
    UnknownBroker,
)
from runtime.host.admin import Handler, fail, ok
from runtime.host.jsonbody import JsonRejected, load_json
from runtime.host.openapi import OPENAPI

STATUS: tuple[tuple[type[DeliveryError], int], ...] = (
    (InvalidSubscription, 400),
    (SubscriptionExists, 400),
    (UnknownBroker, 400),
    (SubscriptionNotFound, 404),
    (LimitReached, 429),  # once something ends or is removed
    (SubscriptionStartFailed, 503),  # the same request may work later
    (DeliveryError, 400),  # a subclass added without a row here: still the client's
)
"""HTTP status per error class; the first class the error is an instance of wins."""


def status_of(exc: DeliveryError) -> int:
    return next(status for cls, status in STATUS if isinstance(exc, cls))


def answering(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except DeliveryError as exc:
            return fail(status_of(exc), exc.reason, exc.details)

    return answer


_answering = answering  # the name control.py imports


class SubscriptionRoutes:
    def __init__(self, service: DeliveryControl) -> None:
        self.service = service

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/broker/subscription", answering(self.post_subscription))
        app.router.add_get("/broker/subscription", answering(self.get_subscriptions))
        app.router.add_post("/broker/unsubscribe", answering(self.post_unsubscribe))
        if OPENAPI in app:
            describe_delivery_api(app[OPENAPI])

    async def post_subscription(self, request: web.Request) -> web.Response:
        consumer = decode_consumer(await request.read())
        check_resolvable(consumer, self.service.guard.references)
        await self.service.subscribe(consumer)
        return ok(redacted(consumer))

    async def get_subscriptions(self, request: web.Request) -> web.Response:
        """Every subscription, redacted, with its `state` (and `inProcess` for those an
        embedding program registered: read-only here) and `refusedCommits`, the
        partitions whose commits Kafka refuses with the last position it accepted (#34;
        actors/delivery/control/overview.py, `refusals`); with `offset` and `limit`, one
        page of them, in subscribe order, and a `Link: <...>; rel="next"` header while
        more follow (#34: a list of 2,000 big documents was 32 MB)."""
        query = single_values(request.query, LIST_QUERY)
        start = number(query, "offset", 0, 0, MAX_LIST, LIST_QUERY)
        limit = number(query, "limit", MAX_LIST, 1, MAX_LIST, LIST_QUERY)
        status, subscriptions = self.service.status, self.service.subscriptions
        keys = list(itertools.islice(subscriptions, start, start + limit))
        refused = refusals(self.service.runtime.metrics)
        response = ok([{**redacted(subscriptions[k]),
                        "state": status[k].state if k in status else "unknown",
                        "inProcess": k in self.service.handlers,
                        "refusedCommits": msgspec.to_builtins(refused.get(k, []))}
                       for k in keys])
        if start + limit < len(subscriptions):
            response.headers["Link"] = (f'</broker/subscription?offset={start + limit}'
                                        f'&limit={limit}>; rel="next"')
        return response

    async def post_unsubscribe(self, request: web.Request) -> web.Response:
        sub_id, group_id = unsubscribe_pair(await request.read())
        key = known_key(self.service.subscriptions, sub_id, group_id)
        refuse_in_process(self.service, key)
        return ok(redacted(await self.service.unsubscribe(key)))

    def __repr__(self) -> str:
        return f"<SubscriptionRoutes {self.service!r}>"


LIST_QUERY = "offset and limit (both optional) page the list"
MAX_LIST = 1_000_000


def single_values(query: MultiMapping[str], usage: str) -> dict[str, str]:
    """Each query parameter once: a repeated one is a 400 (which of two was meant?)."""
    values: dict[str, str] = {}
    for name, value in query.items():
        if name in values:
            raise InvalidSubscription(f"invalid {name}", f"given more than once; {usage}")
        values[name] = value
    return values


def number(query: Mapping[str, str], name: str, default: int, low: int, high: int,
           usage: str) -> int:
    """An integer query parameter in [low, high] written in ASCII digits (not `٣`, and
    short enough for `int`: 4,301 digits were a 500), `default` when absent; a 400
    naming it otherwise."""
    raw = query.get(name)
    if raw is None:
        return default
    digits = raw.isascii() and raw.isdigit() and len(raw) <= len(str(high))
    if not digits or not low <= int(raw) <= high:
        raise InvalidSubscription(f"invalid {name}", f"{raw[:40]!r}: an integer from {low} "
                                  f"to {high}; {usage}")
    return int(raw)


def known_key(subscriptions: Mapping[str, Consumer], sub_id: str, group_id: str) -> str:
    """The key of subscription (`sub_id`, `group_id`); `SubscriptionNotFound` when there is
    none."""
    key = subscription_key(sub_id, group_id)
    consumer = subscriptions.get(key)
    if consumer is None or not consumer.same(sub_id, group_id):
        raise SubscriptionNotFound("subscription not found",
                                   f"id {sub_id!r}, group.id {group_id!r}")
    return key


def check_resolvable(consumer: Consumer, allowed: Sequence[str] | None) -> None:
    """Secret references (within `allowed`, `[egress] allow_references`) and TLS files,
    resolved here as every instance will when the subscription starts: a 400 naming the
    field now, not a failed subscription later."""
    if consumer.http is not None:  # posted documents always push over HTTP
        client_context(resolved(consumer.http, allowed), allowed)


def refuse_in_process(service: DeliveryControl, key: str) -> None:
    """In-process subscriptions are read-only here: the program that registered them owns
    them (it stops them with its handle)."""
    if service.in_process(key):
        raise InvalidSubscription("in-process subscription",
                                  f"{key} is owned by the program that registered it")


def unsubscribe_pair(body: bytes) -> tuple[str, str]:
    """(`id`, `group.id`) of an unsubscribe request: the whole Consumer JSON (as
    Queue-Over-Http clients send it, possibly as a `GET` showed it, secrets redacted),
    `{"id", "group": {"id"}}`, or the deprecated `{"id", "group.id"}`. Nothing else in the
    body is read."""
    try:
        raw = load_json(body)
    except JsonRejected as exc:
        raise InvalidSubscription(exc.reason, exc.details) from None
    if not isinstance(raw, dict):
        raise InvalidSubscription("invalid unsubscribe request",
                                  'expected {"id": ..., "group": {"id": ...}}')
    group = raw.get("group")
    pair = (raw.get("id"), group.get("id") if isinstance(group, dict) else raw.get("group.id"))
    for field, value in zip(("id", "group.id"), pair, strict=True):
        if not isinstance(value, str) or not SAFE_ID.fullmatch(value):
            raise InvalidSubscription(f"invalid {field}",
                                      f"{value!r}: expected the subscription's {field}")
    sub_id, group_id = pair
    assert isinstance(sub_id, str) and isinstance(group_id, str)
    return sub_id, group_id
