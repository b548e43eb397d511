"""The overview of every subscription at once, for the status page and `hookstream status`
(`GET /broker/summary`, actors/delivery/api/summary.py): one small row per subscription,
totals, the origins with their circuit breakers, and the rows that need attention first.
Pure: the control service (actors/delivery/control/service.py, `overview`) gathers what
the registry and the running trees show and hands it here; `select` pages and searches.

Why a summary and not the list plus one status per subscription: with 10,000
subscriptions the page fetched 10,000 statuses (each with its charts and attempts) every
refresh. A row here is a few hundred bytes, a page of rows a few tens of kilobytes, and
the totals are counted on the server.

Attention, most urgent first (`ATTENTION`): `failing` (it does not run: `failed`,
`waiting_for_broker`, or `disabled` by a 410; or its endpoint's latest answers failed:
the last one and at least half of the health window), `breaker_open` (its origin's
breaker is open or probing), `stalled` (a partition's commit position stopped moving for
`[delivery] stall_after_ms`), `lagging` (at least `LAGGING_RECORDS` records behind),
`paused` (on purpose, but worth seeing). A row may have several; it sorts by its most
urgent one, then by key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from actors.delivery.control.status import Live, SubscriptionStatus
from actors.delivery.document.subscription import Consumer, redact_uri
from actors.delivery.egress.status import OriginStatus

ATTENTION: Final = ("failing", "breaker_open", "stalled", "lagging", "paused")
"""Why a subscription needs attention, most urgent first."""
LAGGING_RECORDS: Final = 1000
"""A subscription this many records behind (all its partitions) is `lagging`."""
TEXT_CHARS: Final = 160
"""Reasons and errors are cut to this many characters in a row (the details have them
whole)."""
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
ORIGINS_SHOWN: Final = 20
"""Origins in a summary: those with a breaker not closed or a throttle first."""


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """One subscription in the summary. Counters are None (`null`) while it does not run:
    nothing counted is not zero counted."""

    key: str
    id: str
    group: str
    topics: list[str]
    endpoint: str
    state: str
    attention: list[str] = []
    reason: str = ""
    in_process: bool = False
    partitions: int = 0
    lag: int | None = None
    stalled: int = 0
    delivered: int | None = None
    failed_attempts: int | None = None
    dead_lettered: int | None = None
    error_rate: float | None = None
    last_status: int | None = None
    last_error: str | None = None
    origin: str | None = None
    breaker: str | None = None

    def matches(self, text: str) -> bool:
        """`text` (lower case) in its id, group, a topic, its endpoint, state or reason
        for attention."""
        fields = (self.id, self.group, self.endpoint, self.state, *self.topics,
                  *self.attention)
        return any(text in field.lower() for field in fields)

    def has(self, state: str) -> bool:
        """In this state, or needing attention for this reason (`paused` matches both)."""
        return state == self.state or state in self.attention


class Totals(msgspec.Struct, frozen=True, kw_only=True):
    subscriptions: int
    states: dict[str, int]
    attention: dict[str, int]
    """Subscriptions per reason for attention (one may count under several)."""
    needing_attention: int
    lag: int
    delivered: int
    failed_attempts: int
    dead_lettered: int


class Overview(msgspec.Struct, frozen=True, kw_only=True):
    """Every row, most urgent first; the totals; the origins (see `ORIGINS_SHOWN`)."""

    at: int  # epoch ms when it was gathered
    rows: list[Row]
    totals: Totals
    origins: list[OriginStatus]
    origins_total: int


class Page(msgspec.Struct, frozen=True, kw_only=True):
    """What `GET /broker/summary` answers (with `runtime` and `cluster` added there)."""

    at: int
    totals: Totals
    origins: list[OriginStatus]
    origins_total: int
    matched: int
    offset: int
    limit: int
    items: list[Row]


def row_of(consumer: Consumer, status: SubscriptionStatus, shown: Live) -> Row:
    """The row of one subscription from its document, its life and what its running tree
    showed (nothing, when it does not run)."""
    http, method = consumer.http, consumer.subscriptionMethod
    endpoint = redact_uri(http.uri) if http is not None else \
        f"handler {getattr(method, 'handler', '?')}"
    lags = [p.lag for p in shown.partitions if p.lag is not None]
    health, counters = shown.endpoint, shown.counters
    origin = health.origin if health is not None else None
    row = Row(
        key=consumer.key, id=consumer.id, group=consumer.group_id,
        topics=[t.name or f"/{t.pattern}/" for t in consumer.topics],
        endpoint=endpoint, state=status.state, reason=_cut(status.reason),
        in_process=status.in_process, partitions=len(shown.partitions),
        lag=sum(lags) if lags else None,
        stalled=sum(p.stalled_for_ms is not None for p in shown.partitions),
        delivered=counters.delivered if counters else None,
        failed_attempts=counters.failed_attempts if counters else None,
        dead_lettered=counters.dead_lettered if counters else None,
        error_rate=health.error_rate if health else None,
        last_status=health.last_status if health else None,
        last_error=_cut(health.last_error) if health and health.last_error else None,
        origin=origin.origin if origin else None,
        breaker=origin.breaker if origin else None)
    return msgspec.structs.replace(row, attention=attention_of(row, _endpoint_failing(shown)))


def _endpoint_failing(shown: Live) -> bool:
    """The endpoint's last answer failed and so did at least half of its window (what the
    outlet's `EndpointHealth.failing` says, from its status)."""
    health = shown.endpoint
    if health is None or health.error_rate < 0.5 or not health.recent_failures:
        return False
    return health.last_status is None or not 200 <= health.last_status < 300


def attention_of(row: Row, endpoint_failing: bool) -> list[str]:
    """Why `row` needs attention, most urgent first (see the module docstring)."""
    reasons = {
        "failing": row.state in ("failed", "waiting_for_broker", "disabled")
        or endpoint_failing,
        "breaker_open": row.breaker in ("open", "half_open"),
        "stalled": row.stalled > 0,
        "lagging": row.lag is not None and row.lag >= LAGGING_RECORDS,
        "paused": row.state == "paused",
    }
    return [name for name in ATTENTION if reasons[name]]


def urgency(row: Row) -> tuple[int, str]:
    """Sort key: the most urgent reason first (rows needing none last), then the key."""
    rank = ATTENTION.index(row.attention[0]) if row.attention else len(ATTENTION)
    return rank, row.key


def overview(at: int, rows: Iterable[Row], origins: Iterable[OriginStatus]) -> Overview:
    ordered = sorted(rows, key=urgency)
    every = sorted(origins, key=lambda o: (o.breaker == "closed", o.throttled_until is None,
                                           o.origin))
    return Overview(at=at, rows=ordered, totals=totals_of(ordered),
                    origins=every[:ORIGINS_SHOWN], origins_total=len(every))


def totals_of(rows: list[Row]) -> Totals:
    states = Counter(row.state for row in rows)
    attention = Counter(reason for row in rows for reason in row.attention)
    return Totals(
        subscriptions=len(rows), states=dict(sorted(states.items())),
        attention={name: attention.get(name, 0) for name in ATTENTION},
        needing_attention=sum(1 for row in rows if row.attention),
        lag=sum(row.lag or 0 for row in rows),
        delivered=sum(row.delivered or 0 for row in rows),
        failed_attempts=sum(row.failed_attempts or 0 for row in rows),
        dead_lettered=sum(row.dead_lettered or 0 for row in rows))


def select(view: Overview, *, text: str = "", state: str = "", attention: bool = False,
           offset: int = 0, limit: int = DEFAULT_LIMIT) -> Page:
    """One page of the rows that match: `text` in a row's id, group, topic, endpoint or
    state (case-insensitive), in `state` (a state or a reason for attention), needing
    attention (`attention`)."""
    needle = text.strip().lower()
    chosen = [row for row in view.rows
              if (not needle or row.matches(needle)) and (not state or row.has(state))
              and (not attention or row.attention)]
    return Page(at=view.at, totals=view.totals, origins=view.origins,
                origins_total=view.origins_total, matched=len(chosen), offset=offset,
                limit=limit, items=chosen[offset:offset + limit])


def rows_of(consumers: Mapping[str, Consumer], statuses: Mapping[str, SubscriptionStatus],
            lives: Mapping[str, Live]) -> list[Row]:
    """A row per subscription the registry knows (one unsubscribed meanwhile: none)."""
    empty = Live()
    return [row_of(consumer, statuses[key], lives.get(key, empty))
            for key, consumer in consumers.items() if key in statuses]


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"
