"""Fanout: one fetched partition, many subscriptions' cursors on it (issue 24).

Pure logic (no I/O, no clock): the instance member (actors/delivery/path/member/) reads
each owned topic-partition once and asks this book which cursor gets which records; the
cursors themselves (one `PartitionActor` per subscription and partition) keep their own
window, lanes, retries and offset tracker.

A cursor is, from the fetch's point of view, in one of four states:

- `waiting`: started, its position not known yet (the member is reading its group's
  committed offset); it gets nothing.
- `latest`: nothing committed and `auto.offset.reset=latest` before anything was fetched:
  it starts at the high watermark the first fetch reports (the embedded broker's
  ListOffsets is wrong, runtime/kafka/compat.py quirk 2, so the fetch says where the end
  is).
- `live`: at the head; every fetched record at or above its `next` offset goes to it.
- `paused`: its buffer is full; it gets nothing, and `next` says where it stopped.
- `behind`: its position is older than anything the shared buffer still holds; a
  catch-up reader (actors/delivery/path/catchup.py) reads for it from `next` until it
  is back inside the buffer (`caught_up`), then it is live again.

The shared buffer (`ring`) keeps the last `capacity` records fetched, so a cursor that
paused for a short while resumes from memory; only one that fell further behind needs a
reader of its own. Fetching pauses when no cursor is live (every one paused, behind or
waiting): one subscription alone behaves as before, and nothing is read that no one takes.

The high watermark. A live cursor hears the log's end with every batch; a paused or behind
one gets no batch from the shared fetch, and a paused fetch reads none. The member reads
the high watermark of paused partitions every few seconds (runtime/kafka/highwater.py)
and `note_highwater` says which cursors must be told, so their lag keeps growing while
they wait (issue 25).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Literal

from actors.shared.messages import Record

State = Literal["waiting", "latest", "live", "paused", "behind"]
EARLIEST: int = 0
"""The position of a cursor with nothing committed and `auto.offset.reset=earliest`: the
fetch goes back to the log's start (an offset below it resets to the start)."""


@dataclass(slots=True)
class Cursor:
    key: str
    state: State = "waiting"
    next: int | None = None
    """The next offset it needs; None while live: "from the next record fetched"."""
    told: int | None = None
    """The last high watermark it was told outside a batch (`note_highwater`)."""
    target: object = field(default=None, compare=False, repr=False)
    """Whom its records are told to, as its reader last found it (the instance member's
    cursor actor; opaque here): gone with this entry when the cursor leaves."""


@dataclass(frozen=True, slots=True)
class CatchUp:
    """Decision: `key` must be read for from `position` by a catch-up reader."""

    key: str
    position: int


Feed = list[tuple[str, list[Record]]]
"""Decision: these records to these cursors (in cursor order)."""


class Fanout:
    """The cursors of one topic-partition and its shared buffer; see the module docstring."""

    __slots__ = ("_takers", "capacity", "cursors", "head", "highwater", "ring")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.ring: deque[Record] = deque()
        self.head: int | None = None
        """The offset the shared fetch reads next (None: not positioned yet)."""
        self.highwater: int | None = None
        """The highest high watermark seen: by the shared fetch or read while it pauses."""
        self.cursors: dict[str, Cursor] = {}
        self._takers = 0  # cursors live or latest: `fetching` without a scan

    # -- cursors ---------------------------------------------------------------------------
    def add(self, key: str) -> None:
        """A new cursor (or a restarted one): it waits for its position."""
        self.remove(key)
        self.cursors[key] = Cursor(key)

    def remove(self, key: str) -> None:
        cursor = self.cursors.pop(key, None)
        if cursor is not None:
            self._move(cursor, "waiting")

    def _move(self, cursor: Cursor, state: State) -> None:
        self._takers += _TAKES.get(state, 0) - _TAKES.get(cursor.state, 0)
        cursor.state = state

    def seek_target(self, positions: dict[str, int | None]) -> int | None:
        """Where the shared fetch should start, given the first positions of waiting
        cursors while nothing was fetched yet: the lowest (None: no one needs a seek)."""
        known = [p for p in positions.values() if p is not None]
        return min(known) if known and self.head is None else None

    def seeked(self, offset: int) -> None:
        """The shared fetch was moved to `offset`: what the buffer holds is gone."""
        self.ring.clear()
        self.head = offset

    def position(self, key: str, position: int | None) -> Feed | CatchUp:
        """`key`'s committed position is known (None: nothing committed and reset to
        latest): it becomes live, fed from the buffer, or behind."""
        cursor = self.cursors.get(key)
        if cursor is None:
            return []
        if position is None and self.head is None:
            self._move(cursor, "latest")
            return []
        cursor.next = position if position is not None else self.head
        return self._rejoin(cursor)

    def pause(self, key: str) -> None:
        cursor = self.cursors.get(key)
        if cursor is not None and cursor.state == "live":
            self._move(cursor, "paused")

    def resume(self, key: str) -> Feed | CatchUp:
        """The cursor has room again: live from the buffer, or behind it."""
        cursor = self.cursors.get(key)
        if cursor is None or cursor.state != "paused":
            return []
        return self._rejoin(cursor)

    def caught_up(self, key: str, next_offset: int) -> Feed | None:
        """A catch-up reader reached `next_offset` for `key`: the records the buffer has
        from there if it reaches back so far (the cursor is live again), else None (the
        reader goes on)."""
        cursor = self.cursors.get(key)
        if cursor is None or cursor.state != "behind":
            return []  # gone or restarted meanwhile: this read is over
        if not self._covers(next_offset):
            return None
        cursor.next = next_offset
        feed = self._rejoin(cursor)
        assert not isinstance(feed, CatchUp)  # covered, so fed from the buffer
        return feed

    def _rejoin(self, cursor: Cursor) -> Feed | CatchUp:
        start = cursor.next
        if start is not None and not self._covers(start):
            self._move(cursor, "behind")
            return CatchUp(cursor.key, start)
        self._move(cursor, "live")
        records = self._from(start)
        if not records:
            return []
        cursor.next = records[-1].offset + 1
        return [(cursor.key, records)]

    # -- the shared fetch --------------------------------------------------------------
    def append(self, records: list[Record], highwater: int | None = None) -> Feed:
        """A fetched batch (offset order): into the buffer, and to every live cursor the
        part at or above its `next`. A `latest` cursor starts at `highwater` (the log's
        end when the batch was fetched)."""
        if highwater is not None and (self.highwater is None or highwater > self.highwater):
            self.highwater = highwater  # paused cursors hear it on the next round
        if not records:
            return []
        ring = self.ring
        ring.extend(records)
        while len(ring) > self.capacity:
            ring.popleft()
        self.head = records[-1].offset + 1
        feed: Feed = []
        for cursor in self.cursors.values():
            if cursor.state != "live":
                if cursor.state != "latest":
                    continue
                cursor.state = "live"  # both take records: no change to `_takers`
                cursor.next = highwater if highwater is not None else self.head
            part = _at_or_above(records, cursor.next)
            if cursor.next is None or cursor.next < self.head:
                cursor.next = self.head  # else it starts further on: keep waiting for it
            if part:
                feed.append((cursor.key, part))
        return feed

    def note_highwater(self, highwater: int) -> list[str]:
        """The log's end is at `highwater` (or further, when it was seen further already):
        the cursors the shared fetch does not feed (paused, behind) that were not told
        it yet, in cursor order. A live one hears it with its next batch."""
        if self.highwater is None or highwater > self.highwater:
            self.highwater = highwater
        told: list[str] = []
        for cursor in self.cursors.values():
            if cursor.state in _UNFED and cursor.told != self.highwater:
                cursor.told = self.highwater
                told.append(cursor.key)
        return told

    @property
    def fetching(self) -> bool:
        """Whether the shared fetch should run: some cursor is live."""
        return self._takers > 0

    def behind(self) -> list[str]:
        return [c.key for c in self.cursors.values() if c.state == "behind"]

    # -- the buffer --------------------------------------------------------------------
    def _covers(self, offset: int) -> bool:
        """Whether the buffer (or the fetch from here on) has everything from `offset`."""
        head = self.head
        if head is None or offset >= head:
            return True
        return bool(self.ring) and self.ring[0].offset <= offset

    def _from(self, offset: int | None) -> list[Record]:
        """The buffered records at or above `offset`: found by bisection and copied from
        the end (a resume wants the newest records; a copy of the whole ring and a scan
        from its start were 2% of a single subscription's delivery, issue 37)."""
        ring = self.ring
        if offset is None or not ring or offset > ring[-1].offset:
            return []
        wanted = len(ring) - bisect_left(ring, offset, key=_OFFSET)
        return list(islice(reversed(ring), wanted))[::-1]

    def __repr__(self) -> str:
        states: dict[str, int] = {}
        for cursor in self.cursors.values():
            states[cursor.state] = states.get(cursor.state, 0) + 1
        return f"<Fanout head={self.head} ring={len(self.ring)}/{self.capacity} {states}>"


_TAKES: dict[str, int] = {"live": 1, "latest": 1}
_UNFED: frozenset[str] = frozenset({"paused", "behind"})


_OFFSET = attrgetter("offset")


def _at_or_above(records: list[Record], offset: int | None) -> list[Record]:
    """The part of `records` (offset order) at or above `offset`."""
    if offset is None or not records or records[0].offset >= offset:
        return records
    return records[bisect_left(records, offset, key=_OFFSET):]
