"""The overview of every subscription at once, for the status page and `hookstream status`
(`GET /broker/summary`, actors/delivery/api/summary.py): one small row per subscription,
totals, the origins with their circuit breakers, and the rows that need attention first.
The control service (actors/delivery/control/service.py, `overview`) gathers it; `select`
pages and searches it.

Why a summary and not the list plus one status per subscription: with 10,000
subscriptions the page fetched 10,000 statuses (each with its charts and attempts) every
refresh. A row here is a few hundred bytes, a page of rows a few tens of kilobytes, and
the totals are counted on the server.

Gathered without asking any actor: asking each of 10,000 trees (partitions, outlet,
rider) costs a message and a reply each, tens of thousands per refresh. A row is read
from what is published to be read: the registry's state (actors/delivery/control/
registry.py), the partition actors' metric series (`measured`: delivered, failed
attempts, dead letters, lag, the age of the oldest pending record; a stopped
subscription has none, and shows `null`), and the origins' breakers (read-only, by
design: actors/delivery/egress/origin.py). One subscription's full status (its
endpoint's last answers, partitions, attempts) is `GET /broker/subscription/{id}/{groupId}`.

Attention, most urgent first (`ATTENTION`): `failing` (it does not run: `failed`,
`waiting_for_broker`, or `disabled` by a 410; or its latest attempts failed: `Outcomes`
says so from how its counters moved), `commit_refused` (Kafka refuses its commits, a live
consumer in its group: `refused_commits` shows each refused position beside the last one
Kafka accepted, read from the instance member's series, actors/delivery/path/member/
refusals.py; a restart would deliver again from the accepted one), `breaker_open` (its
origin's breaker is open or probing), `stalled` (a record has been pending for
`[delivery] stall_after_ms` or longer), `lagging` (at least `LAGGING_RECORDS` records
behind), `paused` (on purpose, but worth seeing). A row may have several; it sorts by
its most urgent one, then by key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import msgspec

from actors.delivery.control.status import STOPPED, RefusedCommit, SubscriptionStatus
from actors.delivery.document.subscription import Consumer, redact_uri
from actors.delivery.egress.origin import origin_of
from actors.delivery.egress.status import OriginStatus
from actors.delivery.path.member.refusals import ACCEPTED, REFUSED
from runtime.host.metrics import Labels, Registry

ATTENTION: Final = ("failing", "commit_refused", "breaker_open", "stalled", "lagging",
                    "paused")
"""Why a subscription needs attention, most urgent first."""
LAGGING_RECORDS: Final = 1000
"""A subscription this many records behind (all its partitions) is `lagging`."""
TEXT_CHARS: Final = 160
"""Reasons are cut to this many characters in a row (the details have them whole)."""
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
ORIGINS_SHOWN: Final = 20
"""Origins in a summary: those with a breaker not closed or a throttle first."""
COUNTERS: Final = {"delivered": "hookstream_delivered_total",
                   "failed_attempts": "hookstream_failed_attempts_total",
                   "dead_lettered": "hookstream_dead_lettered_total"}
LAG: Final = "hookstream_lag"
OLDEST: Final = "hookstream_oldest_pending_seconds"
"""The partition actors' series (actors/delivery/path/partition.py) a row reads."""


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """One subscription in the summary. Counters are None (`null`) while it does not run
    here: nothing counted is not zero counted."""

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
    oldest_pending_ms: int | None = None
    delivered: int | None = None
    failed_attempts: int | None = None
    dead_lettered: int | None = None
    origin: str | None = None
    breaker: str | None = None
    refused_commits: list[RefusedCommit] = []

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


@dataclass(slots=True)
class Measured:
    """A subscription's partition series, summed over its partitions here."""

    partitions: int = 0
    delivered: float = 0.0
    failed_attempts: float = 0.0
    dead_lettered: float = 0.0
    lag: float = 0.0
    oldest_s: float = 0.0  # the oldest of its partitions'


def measured(metrics: Registry) -> dict[str, Measured]:
    """By subscription key, what its partition actors' metric series say (one pass over
    each family: no actor is asked)."""
    found: dict[str, Measured] = {}
    for labels, value in metrics.children(LAG).items():
        key = _subscription(labels)
        entry = found.get(key)
        if entry is None:
            entry = found[key] = Measured()
        entry.partitions += 1
        entry.lag += value.value
    for labels, value in metrics.children(OLDEST).items():
        entry = found.get(_subscription(labels))
        if entry is not None and value.value > entry.oldest_s:
            entry.oldest_s = value.value
    delivered, failed, dead = (metrics.children(name) for name in COUNTERS.values())
    for labels, value in delivered.items():  # three loops: no setattr by name per series
        if (entry := found.get(_subscription(labels))) is not None:
            entry.delivered += value.value
    for labels, value in failed.items():
        if (entry := found.get(_subscription(labels))) is not None:
            entry.failed_attempts += value.value
    for labels, value in dead.items():
        if (entry := found.get(_subscription(labels))) is not None:
            entry.dead_lettered += value.value
    return found


def refusals(metrics: Registry) -> dict[str, list[RefusedCommit]]:
    """By subscription key, its partitions whose commits Kafka refuses: the refused
    position and the last one Kafka accepted from this instance (the member's series;
    present only while refused, so this pass is short)."""
    accepted = metrics.children(ACCEPTED)
    found: dict[str, list[RefusedCommit]] = {}
    for labels, value in sorted(metrics.children(REFUSED).items()):
        named = dict(labels)
        held = accepted.get(labels)
        found.setdefault(named.get("subscription", ""), []).append(RefusedCommit(
            topic=named.get("topic", ""), partition=int(named.get("partition", "0")),
            position=int(value.value), accepted=None if held is None else int(held.value)))
    return found


def _subscription(labels: Labels) -> str:
    """The `subscription` label (the first of the partition actors' label sets)."""
    if labels and labels[0][0] == "subscription":
        return labels[0][1]
    return next((value for name, value in labels if name == "subscription"), "")


class Outcomes:
    """Whether each subscription's latest attempts failed, from how its counters moved
    since the last gathering: more failed attempts than deliveries, failing; deliveries
    at least as many (and some), not; no move, as before. A subscription seen for the
    first time fails when it has failed attempts and no delivery. Owned by the one
    gatherer (the control service's `overview`)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, float, bool]] = {}

    def failing(self, key: str, delivered: float, failed: float) -> bool:
        before = self._seen.get(key)
        grew_ok, grew_failed = ((delivered - before[0], failed - before[1])
                                if before is not None else (-1.0, -1.0))
        if grew_ok < 0 or grew_failed < 0:  # first seen, or its counters started anew
            now = failed > 0 and delivered == 0
        elif grew_failed > grew_ok:
            now = True
        elif grew_ok > 0:
            now = False
        else:
            now = before[2] if before is not None else False
        self._seen[key] = (delivered, failed, now)
        return now

    def keep(self, keys: Iterable[str]) -> None:
        """Forget subscriptions not in `keys` (unsubscribed, or stopped here)."""
        kept = set(keys)
        for key in [k for k in self._seen if k not in kept]:
            del self._seen[key]


@dataclass(frozen=True, slots=True)
class Fixed:
    """What a row shows of its subscription's document: worked out once per document
    (the registry replaces a changed document with a new object)."""

    consumer: Consumer
    endpoint: str
    origin: str | None
    topics: list[str]


def fixed_of(consumer: Consumer) -> Fixed:
    http, method = consumer.http, consumer.subscriptionMethod
    endpoint = redact_uri(http.uri) if http is not None else \
        f"handler {getattr(method, 'handler', '?')}"
    return Fixed(consumer, endpoint, origin_of(http.uri) if http is not None else None,
                 [t.name or f"/{t.pattern}/" for t in consumer.topics])


def row_of(consumer: Consumer, status: SubscriptionStatus, shown: Measured | None,
           breakers: Mapping[str, str], failing: bool, stall_after_ms: int,
           fixed: Fixed | None = None, refused: list[RefusedCommit] | None = None) -> Row:
    """The row of one subscription from its document, its life, its series (None when it
    reads no partition here), the breaker states by origin (enabled ones only) and its
    refused commits."""
    fixed = fixed or fixed_of(consumer)
    origin = fixed.origin
    row = Row(
        key=consumer.key, id=consumer.id, group=consumer.group_id, topics=fixed.topics,
        endpoint=fixed.endpoint, state=status.state, reason=_cut(status.reason),
        in_process=status.in_process,
        partitions=shown.partitions if shown else 0,
        lag=int(shown.lag) if shown and shown.partitions else None,
        oldest_pending_ms=int(shown.oldest_s * 1000) if shown and shown.partitions else None,
        delivered=int(shown.delivered) if shown else None,
        failed_attempts=int(shown.failed_attempts) if shown else None,
        dead_lettered=int(shown.dead_lettered) if shown else None,
        origin=origin, breaker=breakers.get(origin) if origin else None,
        refused_commits=refused or [])
    return msgspec.structs.replace(row, attention=attention_of(row, failing, stall_after_ms))


def attention_of(row: Row, failing: bool, stall_after_ms: int) -> list[str]:
    """Why `row` needs attention, most urgent first (see the module docstring)."""
    reasons = {
        "failing": row.state in ("failed", "waiting_for_broker", "disabled") or failing,
        "commit_refused": bool(row.refused_commits),
        "breaker_open": row.breaker in ("open", "half_open"),
        "stalled": row.oldest_pending_ms is not None
        and row.oldest_pending_ms >= stall_after_ms,
        "lagging": row.lag is not None and row.lag >= LAGGING_RECORDS,
        "paused": row.state == "paused",
    }
    return [name for name in ATTENTION if reasons[name]]


class Rows:
    """The rows of one gatherer (the control service's `overview`), each built again only
    when something it shows changed: at 10,000 subscriptions most did not, and building
    them all took a fifth of a second per refresh. Owns the `Outcomes` it needs."""

    def __init__(self) -> None:
        self.outcomes = Outcomes()
        self._fixed: dict[str, Fixed] = {}
        self._rows: dict[str, tuple[tuple[object, ...], Row]] = {}

    def gather(self, consumers: Mapping[str, Consumer],
               statuses: Mapping[str, SubscriptionStatus], series: Mapping[str, Measured],
               origins: Iterable[OriginStatus], stall_after_ms: int,
               refused: Mapping[str, list[RefusedCommit]] | None = None) -> list[Row]:
        """A row per subscription the registry knows (one unsubscribed meanwhile: none)."""
        refused = refused or {}
        breakers = {o.origin: o.breaker for o in origins if o.breaker_enabled}
        rows: list[Row] = []
        built: dict[str, tuple[tuple[object, ...], Row]] = {}
        for key, consumer in consumers.items():
            status, shown, refusal = statuses.get(key), series.get(key), refused.get(key)
            if status is None:
                continue
            fixed = self._fixed.get(key)
            if fixed is None or fixed.consumer is not consumer:
                fixed = self._fixed[key] = fixed_of(consumer)
            failing = shown is not None and self.outcomes.failing(
                key, shown.delivered, shown.failed_attempts)
            # a status is replaced, never changed in place (registry.py): its identity
            # and since/reason say whether it moved
            seen = (consumer, status, status.state, status.reason, failing,
                    breakers.get(fixed.origin) if fixed.origin else None,
                    (shown.partitions, shown.lag, shown.oldest_s, shown.delivered,
                     shown.failed_attempts, shown.dead_lettered) if shown else None,
                    refusal)
            before = self._rows.get(key)
            row = before[1] if before is not None and before[0] == seen else row_of(
                consumer, status, shown, breakers, failing, stall_after_ms, fixed, refusal)
            built[key] = (seen, row)
            rows.append(row)
        self._rows = built
        self.outcomes.keep(series)
        for key in [k for k in self._fixed if k not in built]:
            del self._fixed[key]
        return rows


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


def readiness(rows: Iterable[Row], stall_after_ms: int) -> list[str]:
    """Why the delivery service is not ready, read from the rows by the rules of its
    `readiness` (actors/delivery/control/service.py), a stall being a record pending for
    `stall_after_ms` (readiness proper asks each partition whether its commit position
    moved)."""
    reasons = []
    for row in sorted(rows, key=lambda r: r.key):
        if row.state in STOPPED:
            continue
        if row.state != "running":
            reasons.append(f"subscription {row.key} is {row.state}"
                           + (f": {row.reason}" if row.reason else ""))
        elif not row.partitions:
            reasons.append(f"subscription {row.key} has no partitions assigned yet")
        elif "stalled" in row.attention:
            reasons.append(f"subscription {row.key} stalled: a record pending for over "
                           f"{stall_after_ms // 1000} s")
    return reasons


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


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"
