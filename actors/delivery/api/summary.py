"""`GET /broker/summary`: every subscription at once, small, for the status page and
`hookstream status` (issue 36). One request answers a refresh of the page:

    GET /broker/summary?q=TEXT&state=STATE&attention=true&offset=N&limit=M

- `totals`: subscriptions per state and per reason for attention, lag, delivered,
  failed attempts and dead letters (counted on the server, over all of them);
- `origins`: the origins pushed to, those whose breaker is not closed (or that are
  throttled) first, with their limits; `origins_total` counts them all;
- `items`: one page (`offset`, `limit`: default 50, at most 500) of rows, those needing
  attention first (actors/delivery/control/overview.py says why and in which order),
  narrowed to those with `q` in their id, group, a topic, endpoint or state, in `state`
  (a state or a reason for attention: `failing`, `breaker_open`, `stalled`, `lagging`,
  `paused`) or, with `attention=true`, needing attention; `matched` counts them;
- `runtime`: readiness (`ready`, the first `REASONS_SHOWN` reasons, `reasons_total`) by
  `/readyz`'s rules but read, not asked (a stall: a record pending for `[delivery]
  stall_after_ms`), and the version; `cluster`: the instances and the total lag, with `[cluster]
  status_topic`.

The rows are read from the registry, the metric series and the origins, no actor asked,
at most every `OVERVIEW_FRESH_MS` (actors/delivery/control/service.py): open pages and
consoles share one gathering. One subscription's details
(partitions, attempts, charts) stay at `GET /broker/subscription/{id}/{groupId}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, get_args

import msgspec
from aiohttp import web

from actors.delivery.api.subscriptions import answering
from actors.delivery.control.overview import (
    ATTENTION,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Overview,
    select,
)
from actors.delivery.control.service import DeliveryControl
from actors.delivery.control.status import State
from actors.delivery.errors import InvalidSubscription
from runtime.host.admin import ok
from runtime.host.jsonbody import JSONObject
from runtime.host.openapi import OPENAPI, OpenApi, errors, json_answer, success
from runtime.host.service import readiness_of

PATH: Final = "/broker/summary"
REASONS_SHOWN: Final = 5
MAX_QUERY_CHARS: Final = 200
STATES: Final = frozenset(get_args(State)) | frozenset(ATTENTION)


class SummaryRoutes:
    def __init__(self, service: DeliveryControl) -> None:
        self.service = service
        # (the overview's `at`, what was read with it): once per overview, not per request
        self._ready: tuple[int, dict[str, object]] | None = None
        self._cluster: tuple[int, dict[str, object] | None] | None = None

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PATH, answering(self.get_summary))
        if OPENAPI in app:
            describe_summary(app[OPENAPI])

    async def get_summary(self, request: web.Request) -> web.Response:
        text, state, attention, offset, limit = parse_query(request.query)
        view = self.service.overview()
        page = select(view, text=text, state=state, attention=attention, offset=offset,
                      limit=limit)
        answer: dict[str, object] = msgspec.to_builtins(page)
        answer["runtime"] = await self._readiness(view)
        if self._cluster is None or self._cluster[0] != view.at:
            self._cluster = view.at, await self.service.cluster_overview()
        answer["cluster"] = self._cluster[1]
        return ok(answer)

    async def _readiness(self, view: Overview) -> dict[str, object]:
        """/readyz's rules without asking any actor: the brokers the runtime probes, the
        other services' own readiness, the delivery service's read from the overview."""
        if self._ready is None or self._ready[0] != view.at:
            from runtime.host.app import VERSION

            runtime = self.service.runtime
            reasons = [f"broker {name!r} unreachable: {why}"
                       for name, why in sorted(runtime.probe.problems.items())]
            for service in runtime.services.values():
                if service is not self.service:
                    reasons += await readiness_of(service)
            reasons += self.service.overview_readiness(view)
            self._ready = view.at, {"ready": not reasons, "reasons": reasons[:REASONS_SHOWN],
                                    "reasons_total": len(reasons), "version": VERSION}
        return self._ready[1]

    def __repr__(self) -> str:
        return f"<SummaryRoutes {PATH}>"


def parse_query(query: Mapping[str, str]) -> tuple[str, str, bool, int, int]:
    """(`q`, `state`, `attention`, `offset`, `limit`); a 400 naming a bad one."""
    text, state = query.get("q", ""), query.get("state", "")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidSubscription("invalid q", f"at most {MAX_QUERY_CHARS} characters")
    if "state" in query and state not in STATES:  # `state=` too: the document's enum
        raise InvalidSubscription("invalid state", f"{state!r}: one of "
                                  + ", ".join(sorted(STATES)))
    if query.get("attention", "true") != "true":
        raise InvalidSubscription("invalid attention", "only attention=true")
    return (text, state, "attention" in query, _integer(query, "offset", 0, 0, None),
            _integer(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT))


def _integer(query: Mapping[str, str], name: str, default: int, low: int,
             high: int | None) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdecimal()) or int(raw) < low or (
            high is not None and int(raw) > high):
        bounds = f"from {low} to {high}" if high is not None else f"from {low}"
        raise InvalidSubscription(f"invalid {name}", f"{raw!r}: an integer {bounds}")
    return int(raw)


_QUERY: Final[tuple[tuple[str, JSONObject], ...]] = (
    ("q", {"type": "string", "maxLength": MAX_QUERY_CHARS}),
    ("state", {"type": "string", "enum": sorted(STATES)}),
    ("attention", {"type": "string", "enum": ["true"]}),
    ("offset", {"type": "integer", "minimum": 0}),
    ("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
)


def describe_summary(doc: OpenApi) -> None:
    doc.describe("GET", PATH, {
        "summary": "Every subscription at once: totals, origins, a page of rows (those "
                   "needing attention first), searchable",
        "parameters": [{"name": name, "in": "query", "required": False, "schema": schema}
                       for name, schema in _QUERY],
        "responses": {"200": json_answer("The summary", success({"type": "object"})),
                      **errors(400)}})
