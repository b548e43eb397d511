"""`GET /broker/subscription/{id}/{groupId}/attempts`: what happened to a record, and the
latest failures (issue 27). Recent attempts come from the subscription's `AttemptRing`
(actors/delivery/egress/attempts.py); older ones from the journal on disk, read newest
segment first within `SCAN_BYTES`; beyond that the state is `unknown` and `reason` says
why. A record the subscription's filter left out has no attempt: its state `filtered`
comes from the journal's `filtered` events (their `offsets` ranges hold it). Journaled
attempts have no `response` (the journal does not keep answer bodies).

The scan runs in a worker thread (`asyncio.to_thread`): it only reads files. What the
ring holds is read on the event loop first (`Memory`) and handed over: the outlets write
the ring slot by slot, column by column, so a thread reading it could mix two attempts
(#34).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from actors.delivery.document.signing import webhook_id
from actors.delivery.egress.attempts import (
    Attempt,
    AttemptRing,
    Coordinates,
    GiveUp,
    Outcome,
    State,
    state_of,
)
from runtime.host.journal import (
    Event,
    closed_segments,
    expand,
    expand_columnar,
    open_segments,
    ranges_of,
)

SCAN_BYTES: Final = 32 * 1024 * 1024
DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 1000
_DECODER: Final = msgspec.json.Decoder(Event)


@dataclass(slots=True)
class Scan:
    """The journal's lines of one subscription, newest segment first, within a budget."""

    directory: Path | None
    subscription: str
    budget: int = SCAN_BYTES
    complete: bool = True  # every segment was read

    def events(self) -> Iterator[Event]:
        if self.directory is None or not self.directory.is_dir():
            return
        budget = self.budget
        segments = sorted([*closed_segments(self.directory), *open_segments(self.directory)],
                          key=lambda p: p.name, reverse=True)
        for path in segments:
            if budget <= 0:
                self.complete = False
                return
            data = _tail(path, budget)
            budget -= len(data)
            yield from self._decode(data)

    def _decode(self, data: bytes) -> Iterator[Event]:
        subscription = self.subscription.encode()
        for line in data.splitlines():
            if subscription not in line:
                continue  # cheaper than decoding every other subscription's lines
            try:
                event = _DECODER.decode(line)
            except msgspec.DecodeError:
                continue  # a torn last line of an open segment
            if event.type == "delivered" and event.record_offsets is not None:
                # a round's first deliveries, columnar (issue 35): every subscription's
                yield from expand_columnar(event, self.subscription)
            elif event.subscription != self.subscription:
                continue
            elif event.type == "delivered" and event.offsets is not None:
                yield from expand(event)  # first deliveries of a cursor, ranged (issue 35)
            else:
                yield event


def _tail(path: Path, budget: int) -> bytes:
    """The file, or its last `budget` bytes from the first whole line."""
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size <= budget:
                return file.read()
            file.seek(size - budget)
            data = file.read(budget)
    except OSError:
        return b""  # renamed or removed meanwhile: the next segment goes on
    return data[data.find(b"\n") + 1:]


@dataclass(slots=True)
class Journaled:
    """What the journal says of one record."""

    attempts: list[Attempt] = field(default_factory=list)
    given_up: GiveUp | None = None
    fetched: bool = False
    filtered: bool = False  # a `filtered` event's ranges hold it
    record_ts_ms: int | None = None


def holds(event: Event, coordinates: Coordinates) -> bool:
    """A `filtered` or `fetched` event of the record's partition whose offset ranges
    hold it."""
    topic, partition, offset = coordinates
    return (event.topic, event.partition) == (topic, partition) and \
        event.offsets is not None and \
        any(first <= offset <= last for first, last in ranges_of(event.offsets))


def attempt_of(event: Event) -> Attempt | None:
    """A `delivered` or `failed` event as an attempt (`sent` is the same attempt)."""
    if event.type not in ("delivered", "failed"):
        return None
    assert event.topic is not None and event.partition is not None and event.offset is not None
    skipped = event.type == "delivered" and (event.reason or "").startswith("skipped")
    outcome: Outcome = "skipped" if skipped else event.type
    latency = event.latency_ms
    at = event.ts_ms - round(latency or 0)
    return Attempt(event.topic, event.partition, event.offset, event.record_ts_ms or -1, at,
                   event.attempt or 0, outcome, event.status, latency,
                   event.reason if outcome != "delivered" else None)


def read_record(scan: Scan, coordinates: Coordinates) -> Journaled:
    found = Journaled()
    for event in scan.events():
        if event.type == "filtered":
            found.filtered = found.filtered or holds(event, coordinates)
            continue
        if event.type == "fetched" and event.offsets is not None:  # a batch's (issue 35)
            found.fetched = found.fetched or holds(event, coordinates)
            continue
        if (event.topic, event.partition, event.offset) != coordinates:
            continue
        if event.record_ts_ms is not None:
            found.record_ts_ms = event.record_ts_ms
        if event.type == "fetched":
            found.fetched = True
        elif event.type in ("dead_lettered", "retry_scheduled"):
            if found.given_up is None or found.given_up.at < event.ts_ms:
                found.given_up = GiveUp(event.ts_ms, event.type, event.reason)
        elif (attempt := attempt_of(event)) is not None:
            found.attempts.append(attempt)
    found.attempts.sort(key=lambda a: (a.at, a.number))
    return found


def find_webhook_id(scan: Scan, wanted: str) -> tuple[Coordinates, int] | None:
    """The record (and its timestamp) whose `webhook-id` is `wanted`, from the events that
    carry the record timestamp."""
    for event in scan.events():
        stamp = event.record_ts_ms
        if stamp is None or event.topic is None or event.partition is None \
                or event.offset is None:
            continue
        if webhook_id(event.topic, event.partition, event.offset, stamp) == wanted:
            return (event.topic, event.partition, event.offset), stamp
    return None


def journaled_failures(scan: Scan, before_ms: int | None, limit: int) -> list[Attempt]:
    """The newest `limit` failed attempts sent before `before_ms` (None: any), oldest first."""
    found = [a for event in scan.events() if event.type == "failed"
             and (a := attempt_of(event)) is not None
             and (before_ms is None or a.at < before_ms)]
    found.sort(key=lambda a: a.at)
    return found[-limit:] if limit else []


# -- answers ------------------------------------------------------------------------------
def record_answer(coordinates: Coordinates, record_ts_ms: int | None, state: State,
                  attempts: list[Attempt], reason: str | None = None) -> dict[str, object]:
    topic, partition, offset = coordinates
    wid = None if record_ts_ms is None else webhook_id(topic, partition, offset, record_ts_ms)
    answer: dict[str, object] = {
        "record": {"topic": topic, "partition": partition, "offset": offset,
                   "webhookId": wid},
        "state": state, "attempts": [a.as_dict() for a in attempts]}
    if reason is not None:
        answer["reason"] = reason
    return answer


def failure_answer(attempts: list[Attempt]) -> dict[str, object]:
    return {"attempts": [{"record": {"topic": a.topic, "partition": a.partition,
                                     "offset": a.offset, "webhookId": a.webhook_id},
                          **a.as_dict()} for a in attempts]}


@dataclass(frozen=True, slots=True)
class Memory:
    """What the ring held of a record, or of the latest failures, read on the loop."""

    attempts: list[Attempt] = field(default_factory=list)
    given_up: GiveUp | None = None
    oldest_at: int | None = None  # the oldest attempt in memory: older ones are journaled


def of_record(ring: AttemptRing | None, coordinates: Coordinates) -> Memory:
    """The ring's attempts of one record (call it on the event loop)."""
    if ring is None:
        return Memory()
    attempts, given_up = ring.of_record(coordinates)
    return Memory(attempts, given_up)


def of_failures(ring: AttemptRing | None, limit: int) -> Memory:
    """The ring's newest `limit` failures (call it on the event loop)."""
    if ring is None:
        return Memory()
    return Memory(ring.failed(limit), oldest_at=ring.oldest_at)


def lookup_record(memory: Memory, scan: Scan, coordinates: Coordinates,
                  record_ts_ms: int | None = None) -> dict[str, object]:
    """Memory first; the journal for what memory no longer (or never) held."""
    recent, given_up = memory.attempts, memory.given_up
    if recent and recent[0].number <= 1 and given_up is not None:
        return record_answer(coordinates, recent[0].record_ts_ms, state_of(recent, given_up),
                             recent)
    if recent and recent[0].number <= 1 and recent[-1].outcome != "failed":
        return record_answer(coordinates, recent[0].record_ts_ms, state_of(recent, None),
                             recent)
    journaled = read_record(scan, coordinates)
    first = recent[0].at if recent else None
    older = [a for a in journaled.attempts if first is None or a.at < first]
    attempts = older + recent
    if given_up is None or (journaled.given_up is not None
                            and journaled.given_up.at > given_up.at):
        given_up = journaled.given_up
    stamp = record_ts_ms if record_ts_ms is not None else (
        recent[0].record_ts_ms if recent else journaled.record_ts_ms)
    if stamp is not None and stamp < 0:
        stamp = None
    if attempts or given_up is not None:
        return record_answer(coordinates, stamp, state_of(attempts, given_up), attempts)
    if journaled.filtered:
        return record_answer(coordinates, stamp, "filtered", [])
    if journaled.fetched:
        return record_answer(coordinates, stamp, "pending", [])
    return record_answer(coordinates, stamp, "unknown", [], _why_unknown(scan))


def _why_unknown(scan: Scan) -> str:
    if scan.directory is None:
        return "no attempt in memory, and the journal is off ([journal] enabled = false)"
    if not scan.complete:
        return (f"no attempt in memory nor in the newest {scan.budget // (1024 * 1024)} MiB "
                "of the journal (older segments are not scanned: use `hookstream report`)")
    return "no attempt in memory nor in the journal: not fetched yet, or another record"


def lookup_failures(memory: Memory, scan: Scan, limit: int) -> dict[str, object]:
    recent = memory.attempts
    if len(recent) < limit:
        recent = journaled_failures(scan, memory.oldest_at, limit - len(recent)) + recent
    return failure_answer(recent)
