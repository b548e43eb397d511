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

`state` of a record from its attempts, newest last: `delivered` (a 2xx), `skipped` (the
receiver answered `QOH-Action: skip`), `dead_lettered` (given up: to the dead-letter
topic or journaled as given up), `retrying` (the last attempt failed and it was not
given up); and, known from the journal only, `filtered` (the subscription's filter left
it out: no attempt, issue 26), `pending` (fetched, no attempt yet), `unknown`. The
receiver's skip was first called `filtered` too (never released): `filtered` now means
the filter's doing only, as in the status counters, the replay progress and the journal.

The ring also keeps the last 15 minutes per minute (`Series`): attempts delivered per
second and the p50/p99 of every attempt's round trip, for the status page's small charts.
Percentiles come from a fixed histogram (1-2-5 steps from 0.5 ms to 60 s), so they are
the upper edge of their step: coarse, bounded, and enough to see a p99 of seconds next to
a p50 of milliseconds.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from actors.delivery.document.signing import webhook_id

RING_CAPACITY: Final = 1000
RESPONSES_KEPT: Final = 100
RESPONSE_BYTES: Final = 1024
# what a dead letter's journal event keeps of the last answer: enough for an error
# message, small enough that a flood of give-ups does not bloat the journal (issue 36)
JOURNAL_RESPONSE_BYTES: Final = 256
Outcome = Literal["delivered", "failed", "skipped"]
OUTCOMES: Final[tuple[Outcome, ...]] = ("delivered", "failed", "skipped")
_OUTCOME_INDEX: Final = {outcome: index for index, outcome in enumerate(OUTCOMES)}
NAN: Final = float("nan")
State = Literal["delivered", "retrying", "dead_lettered", "skipped", "filtered", "pending",
                "unknown"]
Coordinates = tuple[str, int, int]
SERIES_BUCKET_MS: Final = 60_000
SERIES_BUCKETS: Final = 15
LATENCY_EDGES_MS: Final = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000,
                           20_000, 60_000)
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


def snippet(body: bytes | None, limit: int = RESPONSE_BYTES) -> str | None:
    """The first `limit` bytes of an answer body as text; None when there was none."""
    if not body:
        return None
    return body[:limit].decode("utf-8", errors="replace")


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
        return "skipped"
    return "retrying"


class _Bucket:
    __slots__ = ("counts", "delivered", "start_ms")

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.delivered = 0
        self.counts = [0] * (len(LATENCY_EDGES_MS) + 1)  # the last: above 60 s

    def percentile(self, q: float) -> float | None:
        total = sum(self.counts)
        if not total:
            return None
        rank, seen = q * total, 0
        for i, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return float(LATENCY_EDGES_MS[min(i, len(LATENCY_EDGES_MS) - 1)])
        return float(LATENCY_EDGES_MS[-1])


class Series:
    """Per `bucket_ms` over the last `buckets`: delivered records and a latency histogram."""

    __slots__ = ("_buckets", "bucket_ms", "size")

    def __init__(self, bucket_ms: int = SERIES_BUCKET_MS, buckets: int = SERIES_BUCKETS) -> None:
        self.bucket_ms, self.size = bucket_ms, buckets
        self._buckets: dict[int, _Bucket] = {}  # by start; at most `size` + 1

    def add(self, at_ms: int, latency_ms: float | None, delivered: bool) -> None:
        start = at_ms - at_ms % self.bucket_ms
        bucket = self._buckets.get(start)
        if bucket is None:
            bucket = self._buckets[start] = _Bucket(start)
            oldest = max(self._buckets) - (self.size - 1) * self.bucket_ms
            for gone in [s for s in self._buckets if s < oldest]:
                del self._buckets[gone]  # out of the window (maybe the one just made)
        bucket.delivered += delivered
        if latency_ms is not None:
            bucket.counts[bisect.bisect_left(LATENCY_EDGES_MS, latency_ms)] += 1

    def as_dict(self, now_ms: int) -> dict[str, object]:
        """`size` values each, oldest first, ending with the bucket of `now_ms`; None
        where no attempt completed."""
        last = now_ms - now_ms % self.bucket_ms
        starts = [last - (self.size - 1 - i) * self.bucket_ms for i in range(self.size)]
        found = [self._buckets.get(start) for start in starts]
        seconds = self.bucket_ms / 1000
        return {"bucket_ms": self.bucket_ms, "start_ms": starts[0],
                "delivered_per_s": [round(b.delivered / seconds, 3) if b else 0 for b in found],
                "p50_ms": [b.percentile(0.5) if b else None for b in found],
                "p99_ms": [b.percentile(0.99) if b else None for b in found]}


class AttemptRing:
    """The recent attempts and give-ups of one subscription (see the module docstring).

    Column by column, not an object per attempt: a full ring of a thousand `Attempt`s
    took 248 KiB, times every subscription that delivered a thousand records (issue 24,
    a thousand subscriptions grew the process by half a gigabyte); in arrays it is about
    55 KiB. The columns grow as attempts come, then wrap; an `Attempt` is made when one is
    read. Errors and response snippets are kept beside, by slot, for the attempts that
    have them."""

    __slots__ = ("_added", "_extras", "_given_up", "_head", "_ints", "_kept", "_latency",
                 "_outcomes", "_responses", "_topics", "_wide", "capacity", "series")

    def __init__(self, capacity: int = RING_CAPACITY, responses: int = RESPONSES_KEPT) -> None:
        self.capacity = capacity
        self._kept = responses
        self._added = 0  # attempts ever added
        self._head = 0  # the slot of the oldest once the ring is full
        self._wide = array("q")  # per slot: offset, record timestamp, sent at
        self._ints = array("i")  # per slot: partition, attempt number, status (-1: none)
        self._latency = array("d")  # per slot: ms, NaN for none
        self._outcomes = bytearray()  # per slot: the index in OUTCOMES
        self._topics: list[str] = []
        self._extras: dict[int, tuple[str | None, str | None]] = {}  # slot: error, response
        self._responses: deque[tuple[int, int]] | None = None  # (added, slot) with a response
        self._given_up: OrderedDict[Coordinates, GiveUp] = OrderedDict()
        self.series = Series()

    def add(self, attempt: Attempt) -> None:
        a = attempt
        self.record(a.topic, a.partition, a.offset, a.record_ts_ms, a.at, a.number, a.outcome,
                    a.status, a.latency_ms, a.error, a.response)

    def record(self, topic: str, partition: int, offset: int, record_ts_ms: int, at: int,
               number: int, outcome: Outcome, status: int | None, latency_ms: float | None,
               error: str | None, response: str | None) -> None:
        """Add one attempt (what `add` does, without an `Attempt` to build first)."""
        latency = NAN if latency_ms is None else latency_ms
        if len(self._topics) < self.capacity:  # growing: the next slot is the end
            slot = len(self._topics)
            self._wide.extend((offset, record_ts_ms, at))
            self._ints.extend((partition, number, -1 if status is None else status))
            self._latency.append(latency)
            self._outcomes.append(_OUTCOME_INDEX[outcome])
            self._topics.append(topic)
        else:  # full: the oldest slot is overwritten
            slot, self._head = self._head, (self._head + 1) % self.capacity
            wide, ints, at3 = self._wide, self._ints, 3 * slot  # no array built per attempt
            wide[at3], wide[at3 + 1], wide[at3 + 2] = offset, record_ts_ms, at
            ints[at3], ints[at3 + 1], ints[at3 + 2] = (
                partition, number, -1 if status is None else status)
            self._latency[slot] = latency
            self._outcomes[slot] = _OUTCOME_INDEX[outcome]
            self._topics[slot] = topic
            self._extras.pop(slot, None)
        self._added += 1
        self.series.add(at, latency_ms, outcome == "delivered")
        if error is not None or response is not None:
            self._extras[slot] = (error, response)
        if response is not None:
            self._keep_response(slot)

    def delivered(self, topic: str, partition: int, offset: int, record_ts_ms: int, at: int,
                  number: int, status: int, latency_ms: float) -> None:
        """`record` of a delivered attempt (no error, no response), in one call with the
        series' minute when it exists (issue 37: the ring was a tenth of a push's Python
        time; tests/unit/test_attempt_ring.py checks both keep the same)."""
        topics = self._topics
        if len(topics) < self.capacity:
            self._wide.extend((offset, record_ts_ms, at))
            self._ints.extend((partition, number, status))
            self._latency.append(latency_ms)
            self._outcomes.append(0)  # "delivered"
            topics.append(topic)
        else:
            slot, self._head = self._head, (self._head + 1) % self.capacity
            wide, ints, at3 = self._wide, self._ints, 3 * slot
            wide[at3], wide[at3 + 1], wide[at3 + 2] = offset, record_ts_ms, at
            ints[at3], ints[at3 + 1], ints[at3 + 2] = partition, number, status
            self._latency[slot] = latency_ms
            self._outcomes[slot] = 0
            topics[slot] = topic
            if self._extras:
                self._extras.pop(slot, None)
        self._added += 1
        series = self.series
        bucket = series._buckets.get(at - at % series.bucket_ms)
        if bucket is None:
            series.add(at, latency_ms, True)
        else:  # `Series.add`, inline
            bucket.delivered += 1
            bucket.counts[bisect.bisect_left(LATENCY_EDGES_MS, latency_ms)] += 1

    def _keep_response(self, slot: int) -> None:
        """Only the newest `responses` snippets stay: the oldest one leaves memory."""
        responses = self._responses
        if responses is None:
            responses = self._responses = deque()
        responses.append((self._added - 1, slot))
        if len(responses) > self._kept:
            added, old = responses.popleft()
            if added >= self._added - len(self._topics):  # still in the ring
                error, _ = self._extras[old]
                self._extras[old] = (error, None)

    def _at(self, index: int) -> Attempt:
        """The attempt at `index`, 0 the oldest."""
        slot = (self._head + index) % len(self._topics)
        offset, record_ts_ms, at = self._wide[3 * slot:3 * slot + 3]
        partition, number, status = self._ints[3 * slot:3 * slot + 3]
        latency = self._latency[slot]
        error, response = self._extras.get(slot, (None, None))
        return Attempt(self._topics[slot], partition, offset, record_ts_ms, at, number,
                       OUTCOMES[self._outcomes[slot]], None if status < 0 else status,
                       None if math.isnan(latency) else latency, error, response)

    def _newest_first(self) -> Iterator[Attempt]:
        return (self._at(i) for i in range(len(self._topics) - 1, -1, -1))

    def give_up(self, coordinates: Coordinates, given_up: GiveUp) -> None:
        book = self._given_up
        book[coordinates] = given_up
        book.move_to_end(coordinates)
        if len(book) > self.capacity:
            book.popitem(last=False)

    def of_record(self, coordinates: Coordinates) -> tuple[list[Attempt], GiveUp | None]:
        """The record's attempts still in memory, oldest first, and its last give-up."""
        topic, partition, offset = coordinates
        wide, ints, topics, count = self._wide, self._ints, self._topics, len(self._topics)
        found = []
        for index in range(count):  # the columns first: an Attempt only for a match
            slot = (self._head + index) % count
            if wide[3 * slot] == offset and ints[3 * slot] == partition \
                    and topics[slot] == topic:
                found.append(self._at(index))
        return found, self._given_up.get(coordinates)

    def find(self, webhook_id: str) -> Coordinates | None:
        """The record a `webhook-id` names, if one of its attempts is still in memory."""
        for attempt in self._newest_first():
            if attempt.webhook_id == webhook_id:
                return attempt.coordinates
        return None

    def failed(self, limit: int) -> list[Attempt]:
        """The newest `limit` failed attempts, oldest first."""
        found: list[Attempt] = []
        failed, count, outcomes = OUTCOMES.index("failed"), len(self._topics), self._outcomes
        for index in range(count - 1, -1, -1):
            if len(found) >= limit:
                break
            if outcomes[(self._head + index) % count] == failed:  # an Attempt only for one
                found.append(self._at(index))
        found.reverse()
        return found

    def recent(self, limit: int) -> list[Attempt]:
        """The newest `limit` attempts, oldest first."""
        count = len(self._topics)
        return [self._at(i) for i in range(max(count - limit, 0), count)]

    @property
    def oldest_at(self) -> int | None:
        """When the oldest attempt in memory was sent: older ones are in the journal only."""
        return self._at(0).at if self._topics else None

    def __len__(self) -> int:
        return len(self._topics)

    def __iter__(self) -> Iterator[Attempt]:
        return (self._at(i) for i in range(len(self._topics)))

    def __repr__(self) -> str:
        return (f"<AttemptRing attempts={len(self._topics)}/{self.capacity} "
                f"responses={len(self._responses or ())}/{self._kept} "
                f"given_up={len(self._given_up)}>")
