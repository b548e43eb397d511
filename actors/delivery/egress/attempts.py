"""What happened to a record (issue 27): the recent attempts of one subscription, in memory.

The outlet (actors/delivery/egress/outlet.py) knows every attempt's outcome: it adds one
`Attempt` per record per request to its subscription's `AttemptRing`. The ring belongs to
the subscription, not to the outlet, so it survives the outlet's restarts; the control
service creates it and the admin API reads it (`GET .../attempts`). Give-ups are decided
on the partition path: the service hands the ring the `dead_lettered` and
`retry_scheduled` events it sees go by (`note_event`), nothing more.

Bounded: `capacity` attempts (the oldest leave first), the first `RESPONSE_BYTES` of the
answer body kept only on failures and only for the newest `responses` of them, and
`capacity` give-ups. What is older comes from the journal (actors/delivery/control/
attempts.py reads it with a bounded scan). The request is never kept: no secret, header
or body of ours can appear in an answer.

`state` of a record from its attempts, newest last: `delivered` (a 2xx), `filtered` (the
receiver answered `QOH-Action: skip`), `dead_lettered` (given up: to the dead-letter
topic or journaled as given up), `retrying` (the last attempt failed and it was not
given up), `pending` (fetched, no attempt yet: known from the journal only), `unknown`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from actors.delivery.document.signing import webhook_id

RING_CAPACITY: Final = 1000
RESPONSES_KEPT: Final = 100
RESPONSE_BYTES: Final = 1024
Outcome = Literal["delivered", "failed", "skipped"]
State = Literal["delivered", "retrying", "dead_lettered", "filtered", "pending", "unknown"]
Coordinates = tuple[str, int, int]
GiveUpKind = Literal["dead_lettered", "retry_scheduled"]


@dataclass(slots=True)
class Attempt:
    """One push of one record: `at` is when it was sent (epoch ms), `number` counts from 1,
    `response` is the start of a failed answer's body (text, invalid UTF-8 replaced).
    `record_ts_ms` is the record's timestamp: the `webhook-id` is computed from it when
    asked (a hash per push is too much for the hot path)."""

    topic: str
    partition: int
    offset: int
    record_ts_ms: int
    at: int
    number: int
    outcome: Outcome
    status: int | None = None
    latency_ms: float | None = None
    error: str | None = None
    response: str | None = None

    @property
    def coordinates(self) -> Coordinates:
        return self.topic, self.partition, self.offset

    @property
    def webhook_id(self) -> str:
        return webhook_id(self.topic, self.partition, self.offset, self.record_ts_ms)

    def as_dict(self) -> dict[str, object]:
        latency = None if self.latency_ms is None else round(self.latency_ms, 3)
        return {"at": self.at, "attempt": self.number, "status": self.status,
                "latencyMs": latency, "error": self.error, "response": self.response}


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A record given up (`dead_lettered`) or moved to a retry topic (`retry_scheduled`)."""

    at: int
    kind: GiveUpKind
    reason: str | None


def snippet(body: bytes | None) -> str | None:
    """The first RESPONSE_BYTES of an answer body as text; None when there was none."""
    if not body:
        return None
    return body[:RESPONSE_BYTES].decode("utf-8", errors="replace")


def state_of(attempts: list[Attempt], given_up: GiveUp | None) -> State:
    """The record's state from its attempts (oldest first) and its last give-up."""
    last = attempts[-1] if attempts else None
    if given_up is not None and given_up.kind == "dead_lettered" and (
            last is None or last.at <= given_up.at):
        return "dead_lettered"
    if last is None:
        return "unknown"
    if last.outcome == "delivered":
        return "delivered"
    if last.outcome == "skipped":
        return "filtered"
    return "retrying"


class AttemptRing:
    """The recent attempts and give-ups of one subscription (see the module docstring)."""

    __slots__ = ("_attempts", "_given_up", "_responses", "capacity")

    def __init__(self, capacity: int = RING_CAPACITY, responses: int = RESPONSES_KEPT) -> None:
        self.capacity = capacity
        self._attempts: deque[Attempt] = deque(maxlen=capacity)
        self._responses: deque[Attempt] = deque(maxlen=responses)
        self._given_up: OrderedDict[Coordinates, GiveUp] = OrderedDict()

    def add(self, attempt: Attempt) -> None:
        self._attempts.append(attempt)
        if attempt.response is not None:
            responses = self._responses
            if len(responses) == responses.maxlen:
                responses[0].response = None  # the oldest snippet leaves memory
            responses.append(attempt)

    def give_up(self, coordinates: Coordinates, given_up: GiveUp) -> None:
        book = self._given_up
        book[coordinates] = given_up
        book.move_to_end(coordinates)
        if len(book) > self.capacity:
            book.popitem(last=False)

    def of_record(self, coordinates: Coordinates) -> tuple[list[Attempt], GiveUp | None]:
        """The record's attempts still in memory, oldest first, and its last give-up."""
        found = [a for a in self._attempts if a.coordinates == coordinates]
        return found, self._given_up.get(coordinates)

    def find(self, webhook_id: str) -> Coordinates | None:
        """The record a `webhook-id` names, if one of its attempts is still in memory."""
        for attempt in reversed(self._attempts):
            if attempt.webhook_id == webhook_id:
                return attempt.coordinates
        return None

    def failed(self, limit: int) -> list[Attempt]:
        """The newest `limit` failed attempts, oldest first."""
        found: list[Attempt] = []
        for attempt in reversed(self._attempts):
            if len(found) >= limit:
                break
            if attempt.outcome == "failed":
                found.append(attempt)
        found.reverse()
        return found

    @property
    def oldest_at(self) -> int | None:
        """When the oldest attempt in memory was sent: older ones are in the journal only."""
        return self._attempts[0].at if self._attempts else None

    def __len__(self) -> int:
        return len(self._attempts)

    def __iter__(self) -> Iterable[Attempt]:
        return iter(self._attempts)

    def __repr__(self) -> str:
        return (f"<AttemptRing attempts={len(self._attempts)}/{self.capacity} "
                f"responses={len(self._responses)}/{self._responses.maxlen} "
                f"given_up={len(self._given_up)}>")
