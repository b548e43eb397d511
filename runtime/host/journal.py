"""The event journal: what the actors did, as newline-delimited JSON segments on disk.

Actors call `Journal.emit(Event(...))` for every step of a delivery (fetched, delivered,
failed, retry_scheduled, dead_lettered, dead_letter_failed, committed, a commit round as
one `committed`: `commit_round`), for actor
lifecycle (actor_started/crashed/restarted/stopped), partition movements
(partition_assigned/revoked), delay forwards (delay_forwarded, with lateness) and the
journal's own losses (journal_dropped). `EventType` is the one list of them: emitters,
the report and the README name types from it, and a test fails when a listed type is
never emitted. `python -m runtime report` (runtime/report) turns a journal directory
into delivery reports and a loss/duplicate audit.

Hot path. `emit()` is synchronous, never blocks and never raises: it compares the buffer
length with a limit and appends the Struct to a list. The commonest event, a plain
first-attempt delivery, is not even that: the egress hands a `DeliveryRow` tuple to the
journal's `ledger` through `ActorContext.delivered`, which in a runtime is that list's
`extend` (no Python call per delivery; issue 35): the ledger is flat, `ROW_WIDTH` values
a row, so the tuple is freed at once and the columns are slices. At each commit (and,
without one, every `RANGE_MAX_AGE_MS` / 2 of flushes) the journal writes the ledger's
rows as one columnar `delivered` (`columnar_ledger`: a slice of the ledger per column,
no Python work per cursor nor per row) ahead of the
commit, so no commit reaches the disk before the deliveries it passes. Encoding (one reused
`msgspec.json.Encoder`, `encode_lines` per batch) and writing happen in a flush task every
`flush_interval_ms`; the encode+write of a batch runs in a worker thread
(`asyncio.to_thread`) so neither a big batch nor a slow disk stalls the event loop.
Measured cost: see bench/RESULTS.md ("## Report", journal write rate).

Backpressure, not drops (issue 35). When `max_buffered` events wait, the journal is
behind: `emit()` still keeps the event, closes its `Gate` (runtime/kernel/gate.py) and
starts a flush at once rather than at the next tick. Paced actors (every actor but the
supervisors and the `JournalFlusher`) take no further message while the gate is closed,
so their mailboxes fill and the data path slows, as behind a full mailbox, until the
flush has taken the buffer. A burst (a thousand cursors handed a backlog at once) costs
time, never events. Memory: the batch being written, plus `max_buffered`, plus what the
actors emit in the step during which the gate closed.

Segments. Each segment is written as `segment-<start wall ms>-<writer id>-<seq>.jsonl.open`
and renamed to `....jsonl` when closed (after an fsync of the file, followed by an fsync of
the directory), so a reader that takes only `*.jsonl` never sees half a file. A segment is
closed when it reaches `max_segment_bytes` (it may overshoot by at most one batch), when it
is `max_segment_age_ms` old (checked on every flush tick, so a quiet journal still closes
its segment), and on `stop()`. The writer id is random per Journal, so several processes may
share one directory without name clashes.

Crash recovery. The writer holds an exclusive `flock` on its open segment. `open()` looks
for `*.jsonl.open` files that nobody holds (leftovers of a crashed process), keeps their
complete lines (a torn last line is truncated), fsyncs and renames them final; empty
leftovers are deleted. A segment held by a live writer is left alone. (A leftover that a
concurrent writer created but has not yet locked, a window of microseconds during another
writer's start, would be renamed; readers would still see complete lines only.)

Nothing dropped silently. Events are dropped only when they cannot be written: a write
error (`write_error`), a value JSON cannot encode (`unencodable`; the rest of its batch is
kept), or an emit after `stop()` (`stopped`). Every drop is counted in `dropped`, logged as
a warning with the count since the previous warning (at most one line per
`DROP_WARNING_INTERVAL_MS`; what is left at `stop()` is logged then), and, once the journal
can write again, recorded in the journal itself as a `journal_dropped` event with `count`,
`reason` and the time span of the lost events (`gap_from_ms`, `gap_to_ms`: their smallest
and largest `ts_ms`). The report counts the records such a gap may hide as "unknown:
journal gap", never as lost (runtime/report/gaps.py). Journals written before issue 35
also hold `buffer_full` drops (no longer made) without a span.

Disk errors. An `OSError` from a write (ENOSPC, EIO, a removed directory) is logged, the
batch is counted as dropped with reason `write_error`, the partial write is truncated away
so the segment keeps only complete lines, and the journal keeps running: the next flush
tries again. A failed close leaves the `.open` file for the next start to recover.

Lifecycle. `open()` creates the directory and recovers leftovers (in a thread). In a
`Runtime` the flushes then come from `JournalFlusher`, an actor under the root supervisor
woken by a timer message every `flush_interval_ms` (a crash of it is logged and restarted
like any actor's; its stop is a message, so a flush in progress finishes). A full buffer
closes the gate the paced actors wait on and tells the flusher (`attach`), which flushes
until it is below its limit again (`catch_up()`); no task of the journal's own. Without a
flusher (a test, a script) the caller calls `flush()`. `stop()` takes the flush lock (so
no batch is half written), flushes the rest and closes the segment. `stop()` is
idempotent. Events emitted before `open()` wait in the buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import operator
import os
import secrets
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, Protocol, TypeVar, get_args

import msgspec

from runtime.errors import UsageError
from runtime.host.files import fsync_directory
from runtime.host.metrics import Registry
from runtime.kernel.actor import Actor
from runtime.kernel.clock import Clock
from runtime.kernel.gate import Gate

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
DROP_WARNING_INTERVAL_MS: Final = 10_000
SEGMENT_PREFIX: Final = "segment-"
FINAL_SUFFIX: Final = ".jsonl"
OPEN_SUFFIX: Final = ".jsonl.open"

RecordEventType = Literal[
    "fetched", "sent", "delivered", "failed", "retry_scheduled", "dead_lettered",
]
EventType = Literal[
    RecordEventType, "dead_letter_failed", "committed", "stalled", "replayed", "offset_reset",
    "actor_started", "actor_restarted", "actor_stopped", "actor_crashed",
    "partition_assigned", "partition_revoked", "delay_forwarded", "journal_dropped",
    "breaker_changed", "subscription_disabled", "filtered", "drain_cut",
]
RECORD_EVENT_TYPES: Final[tuple[str, ...]] = get_args(RecordEventType)
EVENT_TYPES: Final[tuple[str, ...]] = get_args(EventType)  # nested Literals flatten
LEGACY_EVENT_TYPES: Final = ("sent",)
"""Types no longer written but still read in older journals: `sent` (an event per HTTP
attempt; issue 35 put its `fetched_ts_ms` on the attempt's `delivered` or `failed`)."""


class Event(msgspec.Struct, omit_defaults=True, frozen=True, gc=False):
    """One journal line; the field names are the journal schema (the report reads them).

    Record events (`RecordEventType`: `fetched`, `sent`, `delivered`, `failed`,
    `retry_scheduled`, `dead_lettered`) carry `subscription`, `topic`, `partition` and
    `offset`, which together name one record of one subscription, or with `offsets` (as
    ranges) several: one event per offset it names (a batch's `fetched`, a cursor's
    deliveries; `expand`). From dispatch on they also carry `endpoint` (the target URI).
    `sent` is no longer written (`LEGACY_EVENT_TYPES`). Other fields:

    - `attempt`: 1 for the first HTTP attempt of a record, 2 for the first retry, ...
      (it starts at 1 again when a record is fetched again after a restart).
    - `status` and `latency_ms` (HTTP round trip) on `delivered` and `failed`; `status`
      is absent for timeouts and connection errors (`reason` says which).
    - `record_ts_ms` (the Kafka record timestamp) on `fetched` or `delivered`: end-to-end
      latency is first delivery time minus it.
    - `fetched_ts_ms` on a first attempt's `delivered` or `failed` (journals before issue
      35: on `sent`, an event per attempt no longer written): when the record was
      fetched. The report computes the service's added latency as the send time
      (`ts_ms - latency_ms`; a `sent` event's `ts_ms`) minus it, first attempts only, so
      retry delays do not count as overhead.
    - `committed`: `offset` is the committed offset, i.e. the next offset to read (Kafka
      convention), for `subscription`, `topic`, `partition`.
    - `actor` names the actor in lifecycle and partition events; `reason` explains crashes,
      failures, dead letters and drops; `count` is the number of events a
      `journal_dropped` stands for, `gap_from_ms` and `gap_to_ms` the smallest and
      largest `ts_ms` among them; `lateness_ms` on `delay_forwarded`.
    - `delivered` as a range (issue 35): a cursor's first-attempt deliveries between two
      of its commits, one event (`DeliveryRanges`): `offsets` as ranges (ascending; an
      offset delivered twice is named twice), `count`, `offset` the first, and per record,
      in the order `offsets` names them, `latencies_us` (the HTTP latencies in whole
      microseconds) and, where the records differ, `ts_deltas_ms`,
      `record_ts_deltas_ms` and `fetched_ts_deltas_ms` (each record's `ts_ms`,
      `record_ts_ms` and `fetched_ts_ms` minus the event's); JSON arrays of integers.
      `expand` gives the per-record events back. Written until columnar deliveries.
    - `delivered` as columns (issue 35, since 2026-11-28; `columnar`): the ledger's
      first-attempt deliveries at a commit, one event, row i one delivery. Tables, item
      by item: `subscriptions`, and `topics`, `endpoints`, `statuses` (or the event's
      `topic`, `endpoint`, `status` when all are the same); per row `keys` (the row's
      index into the tables), `partitions`, `record_offsets`, `latencies_us` and the
      three deltas as above, from the event's `ts_ms`, `record_ts_ms`, `fetched_ts_ms`
      (the first row's since the flat ledger, so a delta may be negative; the smallest
      of each before). `expand` gives the per-record events back.
    - `filtered` (issue 26): the records of one fetched batch that a subscription's filter
      left out (finished without a request): `count` of them, `offset` the first, and
      `offsets` all of them as ascending ranges, `"3-7,9,12-15"` (one event per batch
      and subscription, not one per record).
    - `status` and `response` on `dead_lettered` (issue 36, optional: older journals
      have neither, and `status` only when no dead-letter topic was configured): the last
      attempt's HTTP status and the first 256 bytes of its answer body as text
      (`JOURNAL_RESPONSE_BYTES`, actors/delivery/egress/attempts.py), the subscription's
      own secrets already replaced by `***` (actors/delivery/egress/redaction.py), so the
      report can say what the receiver said.

    Frozen and not tracked by the GC: an emitted event is shared with the writer thread.
    """

    type: EventType
    ts_ms: int
    subscription: str | None = None
    endpoint: str | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    attempt: int | None = None
    status: int | None = None
    latency_ms: float | None = None
    record_ts_ms: int | None = None
    fetched_ts_ms: int | None = None
    lateness_ms: float | None = None
    actor: str | None = None
    reason: str | None = None
    count: int | None = None
    offsets: str | None = None
    gap_from_ms: int | None = None
    gap_to_ms: int | None = None
    latencies_us: list[int] | None = None
    ts_deltas_ms: list[int] | None = None
    record_ts_deltas_ms: list[int] | None = None
    fetched_ts_deltas_ms: list[int] | None = None
    response: str | None = None
    subscriptions: list[str] | None = None
    topics: list[str] | None = None
    partitions: list[int] | None = None
    positions: list[int] | None = None
    keys: list[int] | None = None
    record_offsets: list[int] | None = None
    endpoints: list[str] | None = None
    statuses: list[int] | None = None


PER_RECORD_FIELDS: Final = (
    ("latencies_us", "latency_ms", False),
    ("ts_deltas_ms", "ts_ms", True),
    ("record_ts_deltas_ms", "record_ts_ms", True),
    ("fetched_ts_deltas_ms", "fetched_ts_ms", True),
)
"""A ranged `delivered` event's per-record lists: (list field, the field it gives each
record, True: the list holds differences from that field's value on the event; False:
the values in microseconds). Item i belongs to the i-th offset `offsets` names."""


class EventJournal(Protocol):
    """What actors depend on: `Journal` or `NullJournal`."""

    def emit(self, event: Event | Delivery) -> None: ...

    async def open(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def dropped(self) -> int: ...

    @property
    def written(self) -> int: ...


def offset_ranges(offsets: Sequence[int]) -> str:
    """Ascending offsets as the `offsets` field of a `filtered` event: `"3-7,9"`."""
    parts: list[str] = []
    start = prev = offsets[0]
    for offset in offsets[1:]:
        if offset != prev + 1:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = offset
        prev = offset
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def ranges_of(offsets: str) -> list[tuple[int, int]]:
    """The `offsets` field of a `filtered` event as inclusive ranges: `"3-7,9"` ->
    `[(3, 7), (9, 9)]` (the inverse of `offset_ranges`)."""
    return [(int(a), int(b or a)) for a, _, b in
            (part.partition("-") for part in offsets.split(","))]


RANGE_MAX_RECORDS: Final = 1_000
"""A cursor's held deliveries are journaled at the latest when they are this many."""
RANGE_MAX_AGE_MS: Final = 5_000
"""... or this old (checked at every flush): a cursor that stops committing (a replay, a
record read back from a retry topic under its original coordinates) still gets them out."""

DeliveryRow = tuple[str, str, int, int, int, float, int, int, "int | None", "str | None"]
"""A plain first-attempt delivery as the egress hands it to the journal's ledger (issue
35): (subscription, topic, partition, offset, ts_ms, latency_ms, record_ts_ms,
fetched_ms, status, endpoint); `fetched_ms` is monotonic, `latency_ms` the float the
egress measured (the journal writes it in whole microseconds, `micros`: the conversion
is C's at the commit round, not the egress's per delivery). A tuple in this order:
built by the egress without a call, and in a runtime its values appended to the flat
ledger (`ROW_WIDTH` a row)."""

ROW_WIDTH: Final = 10
"""Values per row in the journal's flat ledger (`DeliveryRow`'s length)."""
Ledger = list[Any]
"""The journal's flat ledger: the rows' values one after the other, `ROW_WIDTH` a row
(a column is a slice, `ledger[i::ROW_WIDTH]`)."""
_T = TypeVar("_T")
_H = TypeVar("_H", bound=Hashable)


def rows_of(ledger: Ledger) -> list[DeliveryRow]:
    """A flat ledger's rows (`ROW_WIDTH` values each) as `DeliveryRow` tuples."""
    return list(zip(*[iter(ledger)] * ROW_WIDTH, strict=True))


def micros(latencies_ms: Iterable[float]) -> list[int]:
    """Latencies in ms -> whole microseconds, cut as the egress cut them before (C's
    work, no Python frame per value; `float.__trunc__` is `int` without the type call,
    0.6 x its instructions)."""
    return list(map(float.__trunc__, map(operator.mul, latencies_ms,
                                         itertools.repeat(1000.0))))


def as_ms(latency_us: int) -> float:
    """A latency in whole microseconds as a ledger row's milliseconds, half a microsecond
    above it: `micros` cuts it back to the same integer, float rounding whatever."""
    return (latency_us + 0.5) / 1000


class Delivery(msgspec.Struct, frozen=True, gc=False):
    """A plain first-attempt delivery of one record as a value (tests, scripts and the
    listeners' side: `Journal.emit` takes one and files its `row()` like the egress's)."""

    subscription: str
    endpoint: str | None
    topic: str
    partition: int
    offset: int
    status: int | None
    ts_ms: int
    latency_us: int
    record_ts_ms: int
    fetched_ms: int
    type: ClassVar[str] = "delivered"
    attempt: ClassVar[int] = 1

    @classmethod
    def of_row(cls, row: DeliveryRow) -> Delivery:
        sub, topic, partition, offset, ts_ms, latency_ms, record_ts, fetched, status, url = row
        return cls(sub, url, topic, partition, offset, status, ts_ms, int(latency_ms * 1000),
                   record_ts, fetched)

    def row(self) -> DeliveryRow:
        return (self.subscription, self.topic, self.partition, self.offset, self.ts_ms,
                as_ms(self.latency_us), self.record_ts_ms, self.fetched_ms, self.status,
                self.endpoint)

    def event(self, wall_minus_mono_ms: int) -> Event:
        """The per-record `delivered` event this stands for."""
        return row_event(self.row(), wall_minus_mono_ms)


def row_event(row: DeliveryRow, wall_minus_mono_ms: int) -> Event:
    """The per-record `delivered` event a ledger row stands for (its latency in whole
    microseconds, as the journal writes it)."""
    sub, topic, partition, offset, ts_ms, latency_ms, record_ts, fetched, status, url = row
    return Event(type="delivered", ts_ms=ts_ms, subscription=sub, endpoint=url, topic=topic,
                 partition=partition, offset=offset, attempt=1, status=status,
                 latency_ms=int(latency_ms * 1000) / 1000, record_ts_ms=record_ts,
                 fetched_ts_ms=fetched + wall_minus_mono_ms)


_Cursor = tuple[str, str, int]
_CURSOR: Final = operator.itemgetter(0, 1, 2)
_CURSOR_OFFSET: Final = operator.itemgetter(0, 1, 2, 3)


def sort_rows(rows: list[DeliveryRow]) -> None:
    """By cursor, then offset: the tuples' own order (C comparisons, no key), unless two
    rows differ first where one holds None (a status or endpoint: no order there)."""
    try:
        rows.sort()
    except TypeError:
        rows.sort(key=_CURSOR_OFFSET)


class DeliveryRanges:
    """First-attempt deliveries held per cursor (subscription, topic, partition) until
    that cursor's next commit, then journaled as one `delivered` event (one per endpoint
    and status, when they differ), offsets as ranges (issue 35: at fan-out a subscription
    delivers a few records between two commits, and a `delivered` per record was most of
    the journal's bytes).

    Why until the commit: the audit calls a record below a committed offset with no
    outcome "lost for good". The held deliveries go into the buffer before the commit's
    event, so on disk no `committed` precedes the deliveries it passes, even when a crash
    cuts the journal. Held deliveries are also released at `RANGE_MAX_RECORDS`, after
    `RANGE_MAX_AGE_MS` (counted in flushes: no clock read per delivery) and at stop.

    Filed in bulk: the egress appends its rows to the journal's ledger (a list), and the
    journal files the ledger here at each commit (and, without one, every
    `RANGE_MAX_AGE_MS` / 2 of flushes) with `file`: one sort (C) puts each cursor's rows
    side by side, and the Python work is per cursor, not per delivery; a commit's own
    cursors go straight out.
    A pure book: `file` holds, `release(cursor)`, `release_older(ticks)`, `release_all()`
    return the events to buffer; the caller gives its clock's wall minus monotonic time
    (`fetched_ms` is monotonic).

    Since columnar deliveries the journal no longer uses it (`columnar` writes a round's
    rows without per-cursor work): it makes the ranged events that journals before hold,
    for the tests and scripts that write such journals."""

    __slots__ = ("_since", "_tick", "held")

    def __init__(self) -> None:
        self.held: dict[_Cursor, list[DeliveryRow]] = {}
        self._since: dict[_Cursor, int] = {}  # the tick of the first held; oldest first
        self._tick = 0  # flushes so far (`release_older`)

    def __len__(self) -> int:
        return sum(len(held) for held in self.held.values())

    def file(self, rows: list[DeliveryRow], shift_ms: int,
             release: Collection[_Cursor] = ()) -> list[Event]:
        """Hold `rows` (sorted here, in place); return the events of the cursors in
        `release` (a commit's: their rows here and held before) and of those that hold
        `RANGE_MAX_RECORDS` or more now."""
        sort_rows(rows)
        held, since, out = self.held, self._since, []
        for cursor, group in itertools.groupby(rows, _CURSOR):
            mine = held.get(cursor)
            if mine is None:
                if cursor in release:  # the common case at a commit round: straight out
                    out += ranged(list(group), shift_ms, in_order=True)
                    continue
                mine = held[cursor] = list(group)
                since[cursor] = self._tick
            else:
                mine += group
            if cursor in release or len(mine) >= RANGE_MAX_RECORDS:
                out += self.release(cursor, shift_ms)
        for cursor in release:  # held from earlier filings, none in `rows`
            if cursor in held:
                out += self.release(cursor, shift_ms)
        return out

    def release(self, cursor: _Cursor, shift_ms: int) -> list[Event]:
        held = self.held.pop(cursor, None)
        if held is None:
            return []
        del self._since[cursor]
        return ranged(held, shift_ms)

    def release_older(self, ticks: int, shift_ms: int) -> list[Event]:
        """Called at every flush (a tick): release the cursors held for `ticks` ticks."""
        self._tick += 1
        old = []
        for cursor, since in self._since.items():
            if self._tick - since < ticks:
                break  # insertion order is age order
            old.append(cursor)
        return [event for cursor in old for event in self.release(cursor, shift_ms)]

    def release_all(self, shift_ms: int) -> list[Event]:
        return [event for cursor in list(self.held)
                for event in self.release(cursor, shift_ms)]


def ranged(held: list[DeliveryRow], shift_ms: int, *, in_order: bool = False) -> list[Event]:
    """One cursor's deliveries -> one `delivered` event per endpoint and status (a single
    delivery: the per-record event, shorter). `held` may come from several filings, each
    sorted: sorting it again is a merge of runs (not needed when `in_order`)."""
    if len(held) == 1:
        return [row_event(held[0], shift_ms)]
    if not in_order:
        sort_rows(held)
    columns = tuple(zip(*held, strict=True))
    statuses, endpoints = columns[8], columns[9]
    count = len(held)
    if statuses.count(statuses[0]) == count and endpoints.count(endpoints[0]) == count:
        return [_one_range(held[0], columns, shift_ms)]
    kinds: dict[tuple[int | None, str | None], list[DeliveryRow]] = {}
    for row in held:  # rare: an endpoint answering 200 and 204
        kinds.setdefault((row[8], row[9]), []).append(row)
    return [_one_range(group[0], tuple(zip(*group, strict=True)), shift_ms)
            if len(group) > 1 else row_event(group[0], shift_ms)
            for group in kinds.values()]


Column = tuple[Any, ...]
"""One field of the ledger's rows, transposed (`zip(*rows)`)."""
Columns = tuple[Column, ...]


def _one_range(first: DeliveryRow, columns: Columns,
               shift_ms: int) -> Event:
    """This runs per cursor and commit: the per-record work is C's (zip, count, map),
    the event is made positionally (`Event`'s field order), and the differences from the
    first record (None when all are equal) are inlined."""
    offsets, ts, latencies, record_ts, fetched = columns[3:8]
    count, sub, repeat = len(offsets), operator.sub, itertools.repeat
    low, high = offsets[0], offsets[-1]
    contiguous = high - low == count - 1 and len(set(offsets)) == count
    ts0, record_ts0, fetched0 = ts[0], record_ts[0], fetched[0]
    return Event(
        "delivered", ts0, first[0], first[9], first[1], first[2], low, 1, first[8], None,
        record_ts0, fetched0 + shift_ms, None, None, None, count,
        f"{low}-{high}" if contiguous else offset_ranges(offsets), None, None,
        micros(latencies),
        None if ts.count(ts0) == count else list(map(sub, ts, repeat(ts0))),
        None if record_ts.count(record_ts0) == count else
        list(map(sub, record_ts, repeat(record_ts0))),
        None if fetched.count(fetched0) == count else
        list(map(sub, fetched, repeat(fetched0))))


def columnar(rows: Sequence[DeliveryRow], shift_ms: int) -> list[Event]:
    """Rows -> the events `columnar_ledger` makes of them (tests, scripts)."""
    return columnar_ledger(list(itertools.chain.from_iterable(rows)), shift_ms)


def columnar_ledger(ledger: Ledger, shift_ms: int) -> list[Event]:
    """A flat ledger (`ROW_WIDTH` values a row) -> one columnar `delivered` event (issue
    35): each column a slice of the ledger, so the work per row is C's (slices, dict,
    map) and there is no Python work per cursor, nor per row. A row whose status or
    endpoint is None, and a single row, go as per-record events."""
    if len(ledger) <= ROW_WIDTH:
        return [row_event(row, shift_ms) for row in rows_of(ledger)]
    columns = [ledger[i::ROW_WIDTH] for i in range(ROW_WIDTH)]
    subs = columns[0]
    order, ids = first_sight(subs)
    topics = _one_per(subs, order, columns[1])
    endpoints = _one_per(subs, order, columns[9])
    statuses = _one_per(subs, order, columns[8])
    if topics is None or endpoints is None or statuses is None \
            or None in endpoints or None in statuses:
        return _columnar_by_kind(ledger, columns, shift_ms)
    return [_columnar_event(columns, list(order), topics, endpoints, statuses, ids,
                            shift_ms)]


def first_sight(values: Sequence[_H]) -> tuple[dict[_H, int], list[int]]:
    """The distinct values, each with its index in order of first sight, and each
    value's index. One dict operation per value, C's: `setdefault` is given the
    dict's length at that moment (`map(len, repeat(index))` is evaluated just before
    each call), which is what a new value gets, while a known value keeps its own."""
    index: dict[_H, int] = {}
    ids = list(map(index.setdefault, values, map(len, itertools.repeat(index))))
    return index, ids


def _one_per(subs: list[str], order: dict[str, int], column: Ledger) -> Ledger | None:
    """`column`'s value for each subscription in `order` when each has one (the usual
    case: a subscription's topic, endpoint and status), else None. All C's work: a
    column of one value is one `count`; else a dict of the last value per subscription,
    looked up again for every row and compared with the column."""
    first = column[0]
    if column.count(first) == len(column):
        return [first] * len(order)
    last = dict(zip(subs, column, strict=True))
    if list(map(last.__getitem__, subs)) != column:
        return None
    return list(map(last.__getitem__, order))


def _columnar_by_kind(ledger: Ledger, columns: list[Ledger],
                      shift_ms: int) -> list[Event]:
    """The rare round: a subscription with two topics, endpoints or statuses here (the
    tables by all four), or rows without a status or an endpoint (per record)."""
    kinds_of_rows = list(zip(columns[0], columns[1], columns[9], columns[8], strict=True))
    kinds, ids = first_sight(kinds_of_rows)
    if any(kind[2] is None or kind[3] is None for kind in kinds):  # rare: split them
        rows = rows_of(ledger)
        plain = [row for row in rows if row[8] is not None and row[9] is not None]
        odd = [row_event(row, shift_ms) for row in rows if row[8] is None or row[9] is None]
        return [*columnar(plain, shift_ms), *odd] if plain else odd
    subs, topics, endpoints, statuses = (list(c) for c in zip(*kinds, strict=True))
    return [_columnar_event(columns, subs, topics, endpoints, statuses, ids, shift_ms)]


def _one_or_all(values: Sequence[_T]) -> tuple[_T | None, list[_T] | None]:
    """A table column: its value when every item holds it, else the items."""
    return (values[0], None) if values.count(values[0]) == len(values) else (None, list(values))


def _deltas(values: list[int]) -> tuple[int, list[int] | None]:
    """The first value and each value minus it (None when all are equal). A column of
    one int object (a fetch batch's time, shared by its records) is found by identity
    (`count` compares nothing else); any other is subtracted at once, not searched for
    its smallest first (a delta may be negative)."""
    first = values[0]
    if values[-1] is first and values.count(first) == len(values):
        return first, None
    deltas = list(map(operator.sub, values, itertools.repeat(first)))
    return (first, deltas) if any(deltas) else (first, None)


def _columnar_event(columns: list[Ledger], subs: list[str], topics: list[str],
                    endpoints: list[str], statuses: list[int], ids: list[int],
                    shift_ms: int) -> Event:
    topic, topic_list = _one_or_all(topics)
    endpoint, endpoint_list = _one_or_all(endpoints)
    status, status_list = _one_or_all(statuses)
    ts0, ts_deltas = _deltas(columns[4])
    record_ts0, record_ts_deltas = _deltas(columns[6])
    fetched0, fetched_deltas = _deltas(columns[7])
    return Event(
        type="delivered", ts_ms=ts0, endpoint=endpoint, topic=topic, attempt=1,
        status=status, record_ts_ms=record_ts0, fetched_ts_ms=fetched0 + shift_ms,
        count=len(ids), latencies_us=micros(columns[5]), ts_deltas_ms=ts_deltas,
        record_ts_deltas_ms=record_ts_deltas, fetched_ts_deltas_ms=fetched_deltas,
        subscriptions=subs, topics=topic_list, partitions=columns[2], keys=ids,
        record_offsets=columns[3], endpoints=endpoint_list, statuses=status_list)


def expand_columnar(event: Event, subscription: str | None = None) -> list[Event]:
    """A columnar `delivered` -> the per-record events it stands for, in its row order
    (only `subscription`'s, when given)."""
    subs, keys = event.subscriptions or [], event.keys or []
    wanted = None if subscription is None else {
        k for k, sub in enumerate(subs) if sub == subscription}
    offsets, partitions = event.record_offsets or [], event.partitions or []
    n = len(offsets)
    zeros = [0] * n
    ts, record_ts = event.ts_deltas_ms or zeros, event.record_ts_deltas_ms or zeros
    fetched, latencies = event.fetched_ts_deltas_ms or zeros, event.latencies_us or zeros
    topics = event.topics or [event.topic or ""] * len(subs)
    endpoints: Sequence[str | None] = event.endpoints or [event.endpoint] * len(subs)
    statuses: Sequence[int | None] = event.statuses or [event.status] * len(subs)
    return [Event(type="delivered", ts_ms=event.ts_ms + ts[i], subscription=subs[k],
                  endpoint=endpoints[k], topic=topics[k], partition=partitions[i],
                  offset=offsets[i], attempt=1, status=statuses[k],
                  latency_ms=latencies[i] / 1000,
                  record_ts_ms=(event.record_ts_ms or 0) + record_ts[i],
                  fetched_ts_ms=(event.fetched_ts_ms or 0) + fetched[i])
            for i, k in enumerate(keys) if wanted is None or k in wanted]


Position = tuple[str, str, int, int]
"""One cursor's committed position: (subscription, topic, partition, offset)."""


def commit_round(ts_ms: int, positions: Sequence[Position]) -> Event:
    """A commit round's positions as one `committed` event (issue 35): `subscriptions`,
    `partitions` and `positions` (the committed offsets) item by item, the topic as
    `topic` when the round has one, else `topics` item by item. One position: the
    per-cursor event, as before."""
    if len(positions) == 1:
        ((sub, topic, partition, offset),) = positions
        return Event(type="committed", ts_ms=ts_ms, subscription=sub, topic=topic,
                     partition=partition, offset=offset)
    subs, topics, partitions, offsets = (list(column) for column in zip(*positions,
                                                                        strict=True))
    one_topic = topics.count(topics[0]) == len(topics)
    return Event(type="committed", ts_ms=ts_ms, topic=topics[0] if one_topic else None,
                 subscriptions=subs, topics=None if one_topic else topics,
                 partitions=partitions, positions=offsets)


def committed_positions(event: Event) -> list[Position]:
    """The positions a `committed` event names: one, or a round's."""
    if event.positions is None:
        return [(event.subscription or "", event.topic or "", event.partition or 0,
                 event.offset or 0)]
    subs, partitions = event.subscriptions or [], event.partitions or []
    topics = event.topics or [event.topic or ""] * len(event.positions)
    return list(zip(subs, topics, partitions, event.positions, strict=True))


def committed_cursors(event: Event) -> list[_Cursor]:
    return [(sub, topic, partition) for sub, topic, partition, _ in
            committed_positions(event)]


def expand(event: Event) -> list[Event]:
    """A record event with `offsets` -> one event per offset it names, each with its own
    values of the per-record lists (`PER_RECORD_FIELDS`); a commit round -> one
    `committed` per position; any other event as it is."""
    if event.type == "committed" and event.positions is not None:
        return [Event(type="committed", ts_ms=event.ts_ms, subscription=sub, topic=topic,
                      partition=partition, offset=offset)
                for sub, topic, partition, offset in committed_positions(event)]
    if event.record_offsets is not None and event.type == "delivered":
        return expand_columnar(event)
    if event.offsets is None or event.type not in RECORD_EVENT_TYPES:
        return [event]
    offsets = [o for first, last in ranges_of(event.offsets) for o in range(first, last + 1)]
    lists = {name: (target, relative, getattr(event, name))
             for name, target, relative in PER_RECORD_FIELDS
             if getattr(event, name) is not None}
    cleared = dict.fromkeys(lists, None)
    records = []
    for i, offset in enumerate(offsets):
        values: dict[str, object] = {}
        for target, relative, items in lists.values():
            values[target] = ((getattr(event, target) or 0) + int(items[i]) if relative
                              else int(items[i]) / 1000)
        records.append(msgspec.structs.replace(
            event, offset=offset, count=None, offsets=None, **cleared, **values))
    return records


def final_name(open_path: Path) -> Path:
    """`segment-...jsonl.open` -> `segment-...jsonl`."""
    return open_path.with_name(open_path.name.removesuffix(".open"))


def closed_segments(directory: Path) -> list[Path]:
    """Closed segments in name order (which is start-time order)."""
    return sorted(directory.glob(f"{SEGMENT_PREFIX}*{FINAL_SUFFIX}"))


def open_segments(directory: Path) -> list[Path]:
    """Segments still being written or left over by a crash."""
    return sorted(directory.glob(f"{SEGMENT_PREFIX}*{OPEN_SUFFIX}"))


def is_held_by_writer(path: Path) -> bool:
    """True if a live writer holds the segment's lock (a crash releases it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases our probe lock
    return False


def complete_length(fd: int, size: int, chunk: int = 64 * 1024) -> int:
    """Length of the prefix of the file that ends with its last newline (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def recover_segments(directory: Path) -> list[Path]:
    """Close the `.open` leftovers of crashed writers; return the recovered final paths."""
    recovered: list[Path] = []
    for path in open_segments(directory):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # another process recovered it first
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer's current segment
            keep = complete_length(fd, os.fstat(fd).st_size)
            if keep == 0:
                path.unlink()
                continue
            os.ftruncate(fd, keep)
            os.fsync(fd)
            os.replace(path, final_name(path))
            recovered.append(final_name(path))
        finally:
            os.close(fd)
    if recovered:
        fsync_directory(directory)
    return recovered


class _SegmentWriter:
    """The blocking side. Its methods run in a worker thread, one call at a time."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._writer_id = secrets.token_hex(4)
        self._seq = 0
        self._encoder = msgspec.json.Encoder()
        self._fd: int | None = None
        self.path: Path | None = None
        self.size = 0
        self.opened_mono_ms = 0

    def write(self, events: list[Event], wall_ms: int, mono_ms: int) -> list[Event]:
        """Append the batch; return the events that could not be encoded (left out).

        On OSError the partial write is cut off again and the error re-raised.
        """
        data, unencodable = self._encode(events)
        fd = self._fd if self._fd is not None else self._open(wall_ms, mono_ms)
        try:
            _pwrite_all(fd, data, self.size)
        except OSError:
            with contextlib.suppress(OSError):  # close() truncates to `size` again
                os.ftruncate(fd, self.size)
            raise
        self.size += len(data)
        return unencodable

    def _encode(self, events: list[Event]) -> tuple[bytes, list[Event]]:
        try:
            return self._encoder.encode_lines(events), []
        except (TypeError, ValueError, msgspec.EncodeError):
            pass  # an emitter put a value JSON cannot hold: keep the others
        lines, bad = bytearray(), []
        for event in events:
            try:
                lines += self._encoder.encode(event) + b"\n"
            except (TypeError, ValueError, msgspec.EncodeError):
                bad.append(event)
        return bytes(lines), bad

    def close(self) -> None:
        """fsync, rename final, fsync the directory. No-op without an open segment."""
        fd, path = self._fd, self.path
        if fd is None or path is None:
            return
        self._fd, self.path, size, self.size = None, None, self.size, 0
        try:
            os.ftruncate(fd, size)  # drops the tail of a write that failed
            os.fsync(fd)
            os.replace(path, final_name(path))
        finally:
            os.close(fd)
        fsync_directory(self._dir)

    def _open(self, wall_ms: int, mono_ms: int) -> int:
        name = f"{SEGMENT_PREFIX}{wall_ms:013d}-{self._writer_id}-{self._seq:06d}{OPEN_SUFFIX}"
        path = self._dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._seq += 1
        self._fd, self.path, self.size, self.opened_mono_ms = fd, path, 0, mono_ms
        return fd


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class Journal:
    """Buffers events from `emit()` and writes them to rotating segments (see module doc)."""

    def __init__(
        self,
        directory: str | Path,
        *,
        clock: Clock,
        max_segment_bytes: int = 64 * MIB,
        max_segment_age_ms: int = 60_000,
        flush_interval_ms: int = 200,
        max_buffered: int = 100_000,
        pace: Gate | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        if max_segment_bytes <= 0 or max_segment_age_ms <= 0 or flush_interval_ms <= 0:
            raise UsageError("Journal sizes and intervals must be positive")
        if max_buffered <= 0:
            raise UsageError("Journal(max_buffered=...) must be positive")
        self._dir = Path(directory)
        self._clock = clock
        self._writer = _SegmentWriter(self._dir)
        self._max_bytes = max_segment_bytes
        self._max_age_ms = max_segment_age_ms
        self._interval_ms = flush_interval_ms
        self._max_buffered = max_buffered
        self._max_rows = max_buffered * ROW_WIDTH  # the ledger's length at that many rows
        # emit() appends while the buffer is below `_accept`; beyond it, the slow path
        # closes the gate (or, after stop(), which sets it to 0, counts the drop). One
        # compare on the hot path.
        self._accept = max_buffered
        self.gate = pace if pace is not None else Gate()
        self._buffer: list[Event] = []
        self.ledger: Ledger = [] if ledger is None else ledger
        """Plain first-attempt deliveries not filed yet, flat: the egress's rows'
        values, `ROW_WIDTH` a row (`ActorContext.delivered` is this list's `extend`: no
        Python call per delivery, and the row's tuple is freed at once);
        written as one columnar event at every commit and at stop, and at a flush when
        `RANGE_MAX_AGE_MS` / 2 passed since the last filing or it holds `max_buffered`
        rows (a round's rows in one event: its tables are written once). Rows appended
        after `stop()` are not seen (a runtime stops its actors first)."""
        self._ticks = self._filed_at = 0  # flushes so far; the one the ledger was filed at
        self.tap: Callable[[Ledger], None] | None = None
        """Told the ledger as it is filed, flat (the runtime's `delivered` listeners)."""
        self._shift = clock.wall_ms() - clock.monotonic_ms()
        self._written = 0
        self._dropped = 0
        self._unreported: dict[str, _Gap] = {}  # to journal, once it can write again
        self._unlogged: dict[str, int] = {}  # to log, at the next warning
        self._last_warning_ms: int | None = None
        self._last_error: str | None = None
        self._lock = asyncio.Lock()
        self._wake: Callable[[], None] | None = None  # the owner's: the buffer is full
        self._woken = False  # told once per fall behind, until a catch-up starts
        self._state = "new"

    # -- hot path ---------------------------------------------------------------------

    def emit(self, event: Event | Delivery) -> None:
        """Queue one event for the flush task. Never blocks, never raises. (The egress
        hands its plain first-attempt deliveries to `ledger` instead.)"""
        if type(event) is Delivery:
            self.ledger.extend(event.row())
            return
        if event.type == "committed":
            self._commit(event)  # type: ignore[arg-type]
            return
        buffer = self._buffer
        if len(buffer) < self._accept:
            buffer.append(event)  # type: ignore[arg-type]
        else:
            self._behind(event)  # type: ignore[arg-type]

    def _shift_ms(self) -> int:
        """Wall minus monotonic time, read again (at each flush); between flushes the
        commits use the last reading (`_shift`): no clock read per commit."""
        self._shift = self._clock.wall_ms() - self._clock.monotonic_ms()
        return self._shift

    def _file(self) -> None:
        """Write the ledger's rows, as one columnar event, into the buffer."""
        self._filed_at = self._ticks
        if self.ledger:
            self._queue(self._take_ledger())

    def _commit(self, event: Event) -> None:
        """A commit puts the ledger's deliveries, as one columnar event, into the buffer
        ahead of it."""
        self._filed_at = self._ticks
        released = self._take_ledger() if self.ledger else []
        released.append(event)
        if len(self._buffer) + len(released) <= self._accept:
            self._buffer += released
        else:
            self._queue(released)

    def _take_ledger(self) -> list[Event]:
        """The ledger's rows as events (none after stop: counted as dropped), the ledger
        emptied in place (the egress holds this list's `extend`; not copied: the
        columns are its slices)."""
        ledger = self.ledger
        try:
            return self._ledger_events(ledger)
        finally:
            ledger.clear()

    def _ledger_events(self, ledger: Ledger) -> list[Event]:
        if len(ledger) % ROW_WIDTH:  # a sink fed something else than rows: cannot split
            log.error("journal: %d values in the ledger, not rows of %d; dropped",
                      len(ledger), ROW_WIDTH)
            self._drop([Event(type="delivered", ts_ms=self._clock.wall_ms())]
                       * max(1, len(ledger) // ROW_WIDTH), "malformed")
            return []
        if self.tap is not None:
            self.tap(ledger)  # read before it returns: the ledger is cleared after
        if self._state == "stopped":
            self._drop([row_event(row, self._shift) for row in rows_of(ledger)], "stopped")
            return []
        return columnar_ledger(ledger, self._shift)

    def _queue(self, events: list[Event]) -> None:
        for event in events:
            if len(self._buffer) < self._accept:
                self._buffer.append(event)
            else:
                self._behind(event)

    def _behind(self, event: Event) -> None:
        """The buffer is full: keep the event, hold the paced actors, flush now."""
        if self._state == "stopped":
            self._drop([event], "stopped")
            return
        self._buffer.append(event)
        self.gate.close()
        if self._wake is not None and not self._woken:
            self._woken = True
            self._wake()

    def attach(self, wake: Callable[[], None]) -> None:
        """The owner of the flushes (`JournalFlusher`) asks to be told, by `wake`, when
        the buffer is full: it then calls `catch_up()`. Told at once if it is full now
        (filled before the owner started, or while a crashed owner restarted)."""
        self._wake, self._woken = wake, False
        if not self.gate.open:
            self._woken = True
            wake()

    async def catch_up(self) -> None:
        """Flush until the buffer is below the limit again (it refills while a batch is
        written); the gate opens as each flush takes the buffer."""
        try:
            while not self.gate.open and self._state == "running":
                async with self._lock:
                    await self._flush_locked()
        finally:
            self._woken = False

    # -- lifecycle --------------------------------------------------------------------

    async def open(self) -> None:
        """Create the directory and recover crash leftovers; flushes are the caller's
        (`JournalFlusher` in a runtime, `flush()` calls in a test)."""
        if self._state != "new":
            raise UsageError(f"Journal.open() called on a {self._state} journal; open it once")
        recovered = await asyncio.to_thread(self._prepare_directory)
        if recovered:
            log.warning("journal: recovered %d segment(s) left open by a crash: %s",
                        len(recovered), ", ".join(p.name for p in recovered))
        self._state = "running"

    async def stop(self) -> None:
        """Flush everything, close the segment. Idempotent; later emits are dropped."""
        if self._state == "stopped":
            return
        self._file()  # what the egress handed over so far is journaled, later rows dropped
        self._state, self._accept = "stopped", 0
        self.gate.reopen()  # later emits are dropped: no actor waits for this journal
        async with self._lock:
            await self._flush_locked()
            await self._close_segment()
        self._log_drops(force=True)

    async def flush(self) -> None:
        """Write what is buffered now (the flush task also does this every interval)."""
        async with self._lock:
            await self._flush_locked()

    @property
    def dropped(self) -> int:
        """Events dropped (buffer full, write errors, emitted after stop), all logged."""
        return self._dropped

    @property
    def written(self) -> int:
        """Lines written to segments, including `journal_dropped` events."""
        return self._written

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def held(self) -> int:
        """How often the journal fell behind and held the paced actors (its gate closed)."""
        return self.gate.closed_count

    @property
    def flush_interval_ms(self) -> int:
        return self._interval_ms

    @property
    def directory(self) -> Path:
        return self._dir

    def __repr__(self) -> str:
        segment = self._writer.path.name if self._writer.path else "-"
        return (
            f"<Journal {self._dir} {self._state} buffered={len(self._buffer)}/"
            f"{self._max_buffered} written={self._written} dropped={self._dropped} "
            f"held={self.gate.closed_count}{'' if self.gate.open else ' (holding)'} "
            f"segment={segment} ({self._writer.size} bytes)>"
        )

    # -- flush task -------------------------------------------------------------------

    def _prepare_directory(self) -> list[Path]:
        self._dir.mkdir(parents=True, exist_ok=True)
        return recover_segments(self._dir)

    async def _flush_locked(self) -> None:
        ticks = max(1, RANGE_MAX_AGE_MS // self._interval_ms)
        self._ticks += 1
        if self._ticks - self._filed_at >= ticks // 2 or len(self.ledger) >= self._max_rows:
            self._file()  # else the next commit files it: a cursor's rows side by side
        self._shift_ms()
        if self._buffer or self._unreported:
            await self._write_batch()
        if self._writer.path is not None and self._segment_full():
            await self._close_segment()
        self._log_drops()

    async def _write_batch(self) -> None:
        events, self._buffer = self._buffer, []
        self.gate.reopen()  # the buffer is empty again: the paced actors go on
        reports = self._take_drop_reports()
        try:
            unencodable = await asyncio.to_thread(
                self._writer.write, events + reports, self._clock.wall_ms(),
                self._clock.monotonic_ms(),
            )
        except Exception as exc:  # OSError mostly; anything else must not kill the flusher
            self._restore_drop_reports(reports)
            self._drop(events, "write_error", exc)
            return
        self._written += len(events) + len(reports) - len(unencodable)
        if unencodable:
            self._drop(unencodable, "unencodable")
            await self._write_batch()  # journal the drop now; that event always encodes

    async def _close_segment(self) -> None:
        try:
            await asyncio.to_thread(self._writer.close)
        except Exception as exc:
            log.error("journal: closing segment failed (%s); next start recovers it", exc)

    def _segment_full(self) -> bool:
        age_ms = self._clock.monotonic_ms() - self._writer.opened_mono_ms
        return self._writer.size >= self._max_bytes or age_ms >= self._max_age_ms

    # -- drop accounting --------------------------------------------------------------

    def _drop(self, events: list[Event], reason: str, exc: Exception | None = None) -> None:
        if not events:
            return
        count = len(events)
        self._dropped += count
        if reason != "stopped":  # nothing can be journaled after stop; the log says it
            # an unencodable event may hold anything, its stamp too
            stamps = [e.ts_ms for e in events if type(e.ts_ms) is int] or [self._clock.wall_ms()]
            gap = self._unreported.get(reason)
            self._unreported[reason] = _Gap(count, min(stamps), max(stamps)).merge(gap)
        self._unlogged[reason] = self._unlogged.get(reason, 0) + count
        if exc is not None:
            self._last_error = str(exc)
        self._log_drops()

    def _log_drops(self, *, force: bool = False) -> None:
        """One warning with every drop since the previous one, at most one line per
        `DROP_WARNING_INTERVAL_MS` (called on every drop and every flush; `force` at
        stop): every drop appears in the log with its count, none is folded silently."""
        if not self._unlogged:
            return
        now = self._clock.monotonic_ms()
        last = self._last_warning_ms
        if not force and last is not None and now - last < DROP_WARNING_INTERVAL_MS:
            return
        self._last_warning_ms = now
        unlogged, self._unlogged = self._unlogged, {}
        error, self._last_error = self._last_error, None
        log.warning("journal: dropped %d event(s) %s(%s%s); %d dropped in total",
                    sum(unlogged.values()), "since the last warning " if last is not None else "",
                    ", ".join(f"{reason}: {n}" for reason, n in sorted(unlogged.items())),
                    f"; last error {error}" if error else "", self._dropped)

    def _take_drop_reports(self) -> list[Event]:
        now = self._clock.wall_ms()
        reports = [
            Event(type="journal_dropped", ts_ms=now, count=gap.count, reason=reason,
                  gap_from_ms=gap.first_ms, gap_to_ms=gap.last_ms)
            for reason, gap in self._unreported.items()
        ]
        self._unreported = {}
        return reports

    def _restore_drop_reports(self, reports: list[Event]) -> None:
        for report in reports:
            if report.reason is not None and report.count is not None:
                gap = _Gap(report.count, report.gap_from_ms or report.ts_ms,
                           report.gap_to_ms or report.ts_ms)
                self._unreported[report.reason] = gap.merge(
                    self._unreported.get(report.reason))


@dataclass(frozen=True, slots=True)
class _Gap:
    """Dropped events not journaled yet: how many, and their `ts_ms` range."""

    count: int
    first_ms: int
    last_ms: int

    def merge(self, other: _Gap | None) -> _Gap:
        if other is None:
            return self
        return _Gap(self.count + other.count, min(self.first_ms, other.first_ms),
                    max(self.last_ms, other.last_ms))


@dataclass(frozen=True, slots=True)
class _Flush:
    """Timer: flush the journal (due at monotonic `due_ms`)."""

    due_ms: int


@dataclass(frozen=True, slots=True)
class _CatchUp:
    """The journal's buffer is full: flush until it is below its limit again."""


JOURNAL_SERIES: Final = (
    ("hookstream_journal_events_written_total", "Journal lines written"),
    ("hookstream_journal_events_dropped_total",
     "Journal events that could not be written (write errors, unencodable, after stop)"),
    ("hookstream_journal_held_total",
     "Times the journal fell behind and held the actors until a write took its buffer"),
    ("hookstream_journal_buffered", "Journal events waiting for a write"),
)


class JournalFlusher(Actor):
    """Flushes an opened `Journal` on timer messages, and after each flush sets the
    journal's series (`JOURNAL_SERIES`) when given a registry. Ticks are anchored to the
    first one; a slow write makes the next tick come at once rather than piling up."""

    paced = False  # it is what opens the gate the paced actors wait on

    def __init__(self, name: str, journal: Journal, metrics: Registry | None = None) -> None:
        super().__init__(name)
        self.journal = journal
        self._series = None if metrics is None else [
            (metrics.gauge if name.endswith("buffered") else metrics.counter)(
                name, help_text).labels() for name, help_text in JOURNAL_SERIES]

    async def on_start(self) -> None:
        self._next(self.context.clock.monotonic_ms() + self.journal.flush_interval_ms)
        self.journal.attach(lambda: self.tell_system(_CatchUp()))

    def _next(self, due_ms: int) -> None:
        self.schedule(due_ms, _Flush(due_ms))

    async def handle(self, message: object) -> None:
        if isinstance(message, _CatchUp):
            await self.journal.catch_up()
            return
        if not isinstance(message, _Flush):
            raise UsageError(f"{self.path}: unknown message {message!r}")
        await self.journal.flush()
        journal = self.journal
        if self._series is not None:
            for series, value in zip(self._series, (journal.written, journal.dropped,
                                                    journal.held, journal.buffered),
                                     strict=True):
                series.set(value)
        interval = journal.flush_interval_ms
        self._next(max(message.due_ms + interval, self.context.clock.monotonic_ms()))

    def __repr__(self) -> str:
        return f"<JournalFlusher {self.path} {self.journal!r}>"


class NullJournal:
    """The journal switched off: same interface, does nothing."""

    def emit(self, event: Event | Delivery) -> None:
        pass

    async def open(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def flush(self) -> None:
        pass

    @property
    def dropped(self) -> int:
        return 0

    @property
    def written(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<NullJournal>"


def journal_summary(journal: EventJournal) -> str:
    """The journal's part of the stop line: what it wrote, and what it dropped if any
    (a drop that the log mentioned once must not go unsaid at the end)."""
    if isinstance(journal, NullJournal):
        return ""
    dropped = f", {journal.dropped:,} DROPPED" if journal.dropped else ""
    return f"journal {journal.written:,} events written{dropped}"
