"""Delay queue decisions: pure, synchronous, driven by the caller's `now` (wall ms).

A record on a level topic carries `delay-target` (the topic to forward it to) and may carry
`delay-due-ms` (absolute due time, epoch ms, ASCII decimal); without it the due time is the
record timestamp plus the level's delay. For one level-topic partition, `DelayBook` keeps
the records that are not due yet in a `TimerWheel` keyed by wall-clock due time and says,
for each record, what to produce where:

- `forward`: due (due <= now): to `delay-target`, same key and value, the other headers
  kept; the two routing headers are dropped so that a consumer of the target sees the
  record as its producer wrote it, and a target that is itself a level topic cannot loop.
- `cascade`: the record would wait longer than its level allows (due - now > delay_ms) and
  a larger level fits: re-produce it to the largest level whose delay_ms <= due - now,
  with `delay-due-ms` set, so long waits sit in long levels.
- `recycle`: the largest level holds a record at most `max(delay_ms, MIN_RECYCLE_MS)`,
  then re-produces it to itself (a cascade to its own level). A record due in days thus
  never pins one partition's commit position, nor outlives the topic's retention.
- `dead_letter`: no or bad routing headers: to the dead-letter topic with the reason in
  `dlt-reason` (and, for one more release, in the legacy `delay-error`; the scheme is
  actors/shared/deadletter.py); the partition keeps going.

Never early: a record is forwarded only when `now >= due`, both wall-clock ms; the wheel
returns an item if and only if its deadline <= now. If the wall clock steps back, the
wheel simply waits for it to pass its last reading again.

Commits: the position is the lowest offset not yet finished (produced and acknowledged),
by the same `OffsetTracker` as the delivery path, so it never passes a waiting record.
Pausing uses the delivery path's `PauseGate` too (actors/shared/flow.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from actors.shared import deadletter
from actors.shared.errors import InvalidArgument
from actors.shared.flow import PauseGate
from actors.shared.messages import Record
from actors.shared.offsets import OffsetTracker
from runtime.host.config import DelayLevel
from runtime.kafka import valid_topic
from runtime.kernel.timer_wheel import TimerWheel

DELAY_TARGET = "delay-target"
DELAY_DUE_MS = "delay-due-ms"
DELAY_ERROR = deadletter.LEGACY_DELAY_REASON  # still written, for one more release
ROUTING_HEADERS = frozenset({DELAY_TARGET, DELAY_DUE_MS})
MIN_RECYCLE_MS = 60_000
"""The largest level holds a record at least this long before recycling it, so a level
with a tiny delay_ms does not spin a long-waiting record through Kafka."""

_TOPIC_CACHE_SIZE = 4096
_TOPICS: dict[bytes, str] = {}  # valid target names seen, decoded
_MAX_DUE_DIGITS = 16  # epoch ms stays below 10**16 until the year 318857

Headers = Sequence[tuple[str, bytes | None]]
Kind = Literal["forward", "cascade", "recycle", "dead_letter", "dropped"]


class Routing(msgspec.Struct, frozen=True, gc=False):
    """Where and when a record goes. Not tracked by the GC (it holds a str and an int):
    thousands wait in the wheel, and tracked objects make every full collection longer."""

    target: str
    due_ms: int


@dataclass(frozen=True, slots=True)
class Output:
    """Produce `record` (key and value as fetched) to `topic` with `headers`.

    `lateness_ms` is set on forwards only: now minus due when the forward was decided.
    A dead letter with `value_dropped` goes with an empty value (the record was too large);
    a `dropped` output is produced nowhere: its record could not even be dead-lettered
    (see actors/shared/deadletter.py), and it is journaled and counted instead.
    """

    kind: Kind
    record: Record
    topic: str
    headers: list[tuple[str, bytes]]
    due_ms: int | None = None
    lateness_ms: int | None = None
    reason: str = ""
    value_dropped: bool = False

    @property
    def value(self) -> bytes | None:
        return b"" if self.value_dropped else self.record.value


# -- headers -------------------------------------------------------------------------------


def parse_routing(headers: Headers, timestamp_ms: int, level_delay_ms: int,
                  level_topics: Collection[str] = ()) -> Routing | str:
    """The record's routing, or the reason it cannot be routed (a dead-letter reason)."""
    target_raw: bytes | None = None
    due_raw: bytes | None = None
    targets = dues = 0
    for name, value in headers:  # one pass: this runs for every record
        if name == DELAY_TARGET:
            target_raw, targets = value, targets + 1
        elif name == DELAY_DUE_MS:
            due_raw, dues = value, dues + 1
    if not targets:
        return f"missing {DELAY_TARGET} header"
    if targets > 1 or dues > 1:
        return "duplicate delay-* header"
    target = _decode_topic(target_raw)
    if target is None:
        return f"invalid {DELAY_TARGET} header (not a topic name)"
    if target in level_topics:
        return f"{DELAY_TARGET} {target!r} is a delay level topic"
    if not dues:
        return Routing(target, timestamp_ms + level_delay_ms)
    due = parse_due_ms(due_raw)
    if due is None:
        return f"invalid {DELAY_DUE_MS} header (expected epoch ms, ASCII decimal)"
    return Routing(target, due)


def parse_due_ms(raw: bytes | None) -> int | None:
    """ASCII decimal digits only: no sign, no spaces, no fraction."""
    if raw is None or not 0 < len(raw) <= _MAX_DUE_DIGITS or not raw.isdigit():
        return None
    return int(raw)


def _decode_topic(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    topic = _TOPICS.get(raw)
    if topic is None:
        try:
            topic = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
        if not valid_topic(topic):
            return None
        if len(_TOPICS) < _TOPIC_CACHE_SIZE:  # targets are few; bounded all the same
            _TOPICS[raw] = topic
    return topic


def forward_headers(headers: Headers) -> list[tuple[str, bytes]]:
    """What the target gets: every header but the routing ones."""
    return [(k, v if v is not None else b"") for k, v in headers if k not in ROUTING_HEADERS]


def routing_headers(target: str, due_ms: int) -> list[tuple[str, bytes]]:
    return [(DELAY_TARGET, target.encode("ascii")), (DELAY_DUE_MS, str(due_ms).encode("ascii"))]


def cascade_headers(headers: Headers, routing: Routing) -> list[tuple[str, bytes]]:
    """Other headers kept, routing made explicit (the next level must not re-derive it)."""
    return [*forward_headers(headers), *routing_headers(routing.target, routing.due_ms)]


def dead_letter(record: Record, topic: str, reason: str, *,
                value_dropped: bool = False) -> Output:
    """Give `record` up to the dead-letter `topic`: its own headers (a fixed record can be
    replayed as is) plus where it came from and why, in both header schemes; with
    `value_dropped`, without its value (it was too large to write)."""
    headers = deadletter.dead_letter_headers(record, reason, legacy_delay=True,
                                             value_dropped=value_dropped)
    return Output("dead_letter", record, topic, headers, reason=reason,
                  value_dropped=value_dropped)


def smaller(dead: Output, refused: BaseException) -> Output | None:
    """The next form of a dead letter the broker or the producer refused as too large:
    without its value, then `dropped` (written nowhere). None once nothing is left to try."""
    if dead.kind == "dropped":
        return None
    if dead.value_dropped or not dead.record.value:
        reason = deadletter.dropped_reason(dead.topic, refused)
        return Output("dropped", dead.record, dead.topic, [], reason=reason)
    return dead_letter(dead.record, dead.topic,
                       deadletter.value_dropped_reason(dead.reason, refused),
                       value_dropped=True)


# -- levels ------------------------------------------------------------------------------


def fitting_level(remaining_ms: int, levels: Sequence[DelayLevel]) -> DelayLevel:
    """The largest level whose delay_ms <= remaining_ms; the smallest level if none is.
    `levels` are ascending by delay_ms (callers sort them once, not per record)."""
    if not levels:
        raise InvalidArgument("no delay levels configured")
    best = levels[0]
    for level in levels:
        if level.delay_ms <= remaining_ms:
            best = level
    return best


def pick_topic(level: DelayLevel, key: bytes | None, sequence: int) -> str:
    """One of the level's topics: by key hash (a key stays on one topic), else round robin."""
    topics = level.topics
    if len(topics) == 1:
        return topics[0]
    index = zlib.crc32(key) if key is not None else sequence
    return topics[index % len(topics)]


def recycle_after_ms(level: DelayLevel) -> int:
    return max(level.delay_ms, MIN_RECYCLE_MS)


# -- one level-topic partition -----------------------------------------------------------


class _Waiting(msgspec.Struct, frozen=True, gc=False):
    """A record in the wheel. Untracked by the GC like `Routing`; it refers to a Record
    and a Routing only, so it can take part in no reference cycle."""

    record: Record
    routing: Routing
    recycle: bool  # the timer is the largest level's hold limit, not the due time


DONE_PREFIX = "done:"
MAX_DONE_METADATA = 3000  # Kafka's default offset.metadata.max.bytes is 4096


def encode_done(offsets: Sequence[int]) -> str:
    """Offsets finished above the commit position, as ranges: `done:5-7,9`.

    Exactly-once levels forward records in due order, not offset order; the committed
    position stops at the oldest record still waiting. Keeping what was forwarded above it
    in the commit's metadata (inside the same transaction) lets the next owner skip those
    records instead of forwarding them twice. Past the metadata limit the list is cut:
    the records it no longer names are forwarded again (at-least-once for those)."""
    parts: list[str] = []
    size = len(DONE_PREFIX)
    i = 0
    while i < len(offsets):
        j = i
        while j + 1 < len(offsets) and offsets[j + 1] == offsets[j] + 1:
            j += 1
        part = str(offsets[i]) if i == j else f"{offsets[i]}-{offsets[j]}"
        size += len(part) + 1
        if size > MAX_DONE_METADATA:
            break
        parts.append(part)
        i = j + 1
    return DONE_PREFIX + ",".join(parts) if parts else ""


def decode_done(metadata: str) -> set[int]:
    """The offsets `encode_done` wrote; anything else (other metadata) means none."""
    if not metadata.startswith(DONE_PREFIX):
        return set()
    done: set[int] = set()
    for part in metadata[len(DONE_PREFIX):].split(","):
        low, _, high = part.partition("-")
        if not low.isdecimal() or (high and not high.isdecimal()):
            return set()  # not ours after all: forwarding again is the safe side
        done.update(range(int(low), int(high or low) + 1))
    return done


class DelayBook:
    """The state of one level-topic partition: waiting records, finished offsets, pausing.

    `offer` takes fetched records and returns what must be produced now; `advance` returns
    what fell due; `finish` marks produced (acknowledged) offsets; `committable` is the
    commit position. `position` is where fetching started (the committed offset).
    """

    def __init__(self, level: DelayLevel, levels: Sequence[DelayLevel], *,
                 dead_letter_topic: str, max_waiting: int, position: int | None,
                 now_ms: int, done: Iterable[int] = ()) -> None:
        self.level = level
        self.levels = sorted(levels, key=lambda lv: lv.delay_ms)
        self.dead_letter_topic = dead_letter_topic
        self.max_waiting = max_waiting
        self.tracker = OffsetTracker(position)
        self._done_before = set(done)  # forwarded by a predecessor (exactly-once)
        self._gate = PauseGate(max_waiting)
        self._wheel: TimerWheel[_Waiting] = TimerWheel(start_ms=now_ms)
        self._wheel_now = now_ms
        self._level_topics = frozenset(t for lv in levels for t in lv.topics)
        self._is_top = level.delay_ms >= self.levels[-1].delay_ms
        self._sequence = 0

    # -- intake ------------------------------------------------------------------------
    def offer(self, records: Iterable[Record], now_ms: int) -> list[Output]:
        """Take fetched records (offset order); return the ones to produce right away."""
        out: list[Output] = []
        last = self.tracker.last
        for record in records:
            if last is not None and record.offset <= last:
                continue  # refetched after a rewind: we hold it already
            self.tracker.add(record.offset)
            last = record.offset
            if record.offset in self._done_before:
                self._done_before.discard(record.offset)
                self.tracker.finish(record.offset)
                continue
            decided = self._decide(record, now_ms)
            if decided is not None:
                out.append(decided)
        return out

    def _decide(self, record: Record, now_ms: int) -> Output | None:
        timestamp = record.timestamp_ms if record.timestamp_ms >= 0 else now_ms
        routing = parse_routing(record.headers, timestamp, self.level.delay_ms,
                                self._level_topics)
        if isinstance(routing, str):
            return dead_letter(record, self.dead_letter_topic, routing)
        remaining = routing.due_ms - now_ms
        if remaining <= 0:
            return self._forward(record, routing, now_ms)
        if remaining > self.level.delay_ms:
            fit = fitting_level(remaining, self.levels)
            if fit.delay_ms > self.level.delay_ms:
                return self._cascade("cascade", record, routing, fit)
            if self._is_top and remaining > recycle_after_ms(self.level):
                self._wait(record, routing, now_ms + recycle_after_ms(self.level), True)
                return None
        self._wait(record, routing, routing.due_ms, False)
        return None

    def _wait(self, record: Record, routing: Routing, at_ms: int, recycle: bool) -> None:
        self._wheel.schedule(at_ms, _Waiting(record, routing, recycle))

    def _forward(self, record: Record, routing: Routing, now_ms: int) -> Output:
        return Output("forward", record, routing.target, forward_headers(record.headers),
                      due_ms=routing.due_ms, lateness_ms=now_ms - routing.due_ms,
                      reason=routing.target)

    def _cascade(self, kind: Kind, record: Record, routing: Routing,
                 level: DelayLevel) -> Output:
        self._sequence += 1
        topic = pick_topic(level, record.key, self._sequence)
        return Output(kind, record, topic, cascade_headers(record.headers, routing),
                      due_ms=routing.due_ms, reason=f"{kind} to level {level.name}")

    # -- time --------------------------------------------------------------------------
    def advance(self, now_ms: int) -> list[Output]:
        """What falls due by `now_ms` (wall), in due order."""
        if now_ms < self._wheel_now:
            return []  # the wall clock stepped back: nothing is due before it catches up
        self._wheel_now = now_ms
        out: list[Output] = []
        for waiting in self._wheel.advance(now_ms):
            if waiting.recycle:
                out.append(self._cascade("recycle", waiting.record, waiting.routing,
                                         self.level))
            else:
                out.append(self._forward(waiting.record, waiting.routing, now_ms))
        return out

    def next_deadline(self) -> int | None:
        """The earliest wall-clock ms at which `advance` has something (None: nothing)."""
        deadline = self._wheel.next_deadline()
        if deadline is None:
            return None
        return max(deadline, self._wheel_now)

    # -- completion and flow control ----------------------------------------------------
    def finish(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            self.tracker.finish(offset)

    def committable(self) -> int | None:
        return self.tracker.committable()

    @property
    def waiting(self) -> int:
        return len(self._wheel)

    def flow(self) -> bool | None:
        """True: pause fetching now; False: resume now; None: no change.

        Pause at `max_waiting` waiting records, resume at half of it (hysteresis).
        """
        return self._gate.update(self.waiting)

    @property
    def paused(self) -> bool:
        return self._gate.paused

    def __repr__(self) -> str:
        return (f"<DelayBook level={self.level.name} waiting={self.waiting}/"
                f"{self.max_waiting} paused={self.paused} {self.tracker!r}>")
