"""Ordering lanes: which buffered records of one partition may start delivery now.

Modes (a subscription topic's `ordering`):

- ``none``: up to `window` records in flight, in any order.
- ``partition``: one record at a time, in offset order; a record being retried blocks
  the whole partition.
- ``key``: records with the same key in order, different keys in parallel. Keys map to
  `lanes` lanes by CRC-32 of the key bytes (stable across processes and restarts,
  unlike the per-process salted `hash()`); each lane has at most one record in flight,
  and all lanes together at most `window`. Keys that share a lane wait for each other,
  which costs parallelism but never order. A lane whose record is being retried holds
  back only its own queue: records of other lanes keep starting.

  Records without a key (key None) promise no order, so they run as in mode ``none``:
  each takes a window slot but no lane, and they never wait for a lane. An empty key
  (``b""``) is a key like any other.

When several records could take a free window slot, the one that arrived first wins,
so the commit position (the lowest unfinished offset) moves as early as possible.

A record being retried keeps its slot and its lane: the caller calls `done` only when the
record has finished (delivered, dead-lettered or given up). Pure and synchronous; the
partition actor owns one Dispatcher.
"""

from __future__ import annotations

import heapq
import zlib
from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, TypeVar

from actors.shared.errors import InvalidArgument

R = TypeVar("R")
Mode = Literal["none", "partition", "key"]
MODES: tuple[Mode, ...] = ("none", "partition", "key")

# Lane index of a record with no ordering requirement (mode "none", or a null key).
_FREE = -1


def lane_of(key: bytes, lanes: int) -> int:
    """The lane of a key: CRC-32, so it is the same in every process."""
    return zlib.crc32(key) % lanes


class Dispatcher(Generic[R]):
    """The prefetch buffer and in-flight window of one partition, by ordering mode.

    `offer` buffers a record, `ready` pops every record that may start now, `done` frees
    the slot and lane of a started record. Costs: `offer` and `done` O(log lanes),
    `ready` O(log lanes) per record it returns; nothing scans the buffer.
    """

    def __init__(
        self,
        mode: Mode,
        window: int,
        lanes: int,
        key_of: Callable[[R], bytes | None],
    ) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"mode must be one of {MODES}, got {mode!r}")
        if window < 1:
            raise InvalidArgument(f"window must be >= 1, got {window}")
        if lanes < 1:
            raise InvalidArgument(f"lanes must be >= 1, got {lanes}")
        self._mode = mode
        # Partition mode is key mode with a single lane that every record shares.
        self._window = 1 if mode == "partition" else window
        self._lanes = 1 if mode == "partition" else lanes
        self._key_of = key_of
        self._seq = 0  # arrival number, to start the oldest record first
        # records of no lane (unordered); made with the first (an empty deque is 760 bytes)
        self._free: deque[tuple[int, R]] | None = None
        self._queues: dict[int, deque[tuple[int, R]]] = {}
        self._busy: set[int] = set()
        # (arrival number of the lane's head record, lane) for every lane that has
        # buffered records and nothing in flight.
        self._runnable: list[tuple[int, int]] = []
        # Started records by identity (the dict keeps each alive, so an id names one), and
        # the lane of those that hold one: no tuple per record, and a dict of records the
        # collector does not track stays untracked (issue 37: one object less per cursor
        # for a young collection after a burst at fan-out)
        self._inflight: dict[int, R] = {}
        self._lane_of: dict[int, int] = {}
        self._buffered = 0

    @property
    def buffered(self) -> int:
        """Records offered and not started yet."""
        return self._buffered

    @property
    def inflight(self) -> int:
        """Records started and not done yet."""
        return len(self._inflight)

    @property
    def mode(self) -> Mode:
        return self._mode

    def offer(self, record: R) -> None:
        """Buffer a record; records must be offered in offset order."""
        entry = (self._seq, record)
        self._seq += 1
        self._buffered += 1
        lane = _FREE if self._mode == "none" else self._lane_for(record)  # no call (#37)
        if lane == _FREE:
            if self._free is None:
                self._free = deque()
            self._free.append(entry)
            return
        queue = self._queues.get(lane)
        if queue is None:
            queue = self._queues[lane] = deque()
        queue.append(entry)
        if len(queue) == 1 and lane not in self._busy:
            heapq.heappush(self._runnable, (entry[0], lane))

    def _lane_for(self, record: R) -> int:
        if self._mode == "none":
            return _FREE
        if self._mode == "partition":
            return 0
        key = self._key_of(record)
        return _FREE if key is None else lane_of(key, self._lanes)

    def ready(self) -> list[R]:
        """Pop every record that may start now, oldest first."""
        free, room = self._free, self._window - len(self._inflight)
        if free is not None and not self._runnable and room > 0:
            return self._start_free(free, room)  # only records of no lane wait
        started: list[R] = []
        while len(self._inflight) < self._window:
            lane = self._next_lane()
            if lane is None:
                break
            started.append(self._start(lane))
        return started

    def _next_lane(self) -> int | None:
        """The lane (or `_FREE`) whose next record arrived first, if any may start."""
        free = self._free
        if free and (not self._runnable or free[0][0] < self._runnable[0][0]):
            return _FREE
        if self._runnable:
            return heapq.heappop(self._runnable)[1]
        return None

    def _start_free(self, free: deque[tuple[int, R]], room: int) -> list[R]:
        """`ready` when no lane has a record waiting (always, in mode "none"): the oldest
        `room` of the free ones, without a look at the lanes per record (issue 37)."""
        started = [free.popleft()[1] for _ in range(min(room, len(free)))]
        if not free:
            self._free = None  # no empty block kept (issue 24, memory)
        self._buffered -= len(started)
        inflight = self._inflight
        for record in started:
            inflight[id(record)] = record
        return started

    def _start(self, lane: int) -> R:
        if lane == _FREE:
            assert self._free is not None  # _next_lane saw it
            _, record = self._free.popleft()
            if not self._free:
                self._free = None  # no empty block kept (issue 24, memory)
        else:
            queue = self._queues[lane]
            _, record = queue.popleft()
            if not queue:
                del self._queues[lane]  # keeps memory to lanes that have work
            self._busy.add(lane)
        self._buffered -= 1
        self._inflight[id(record)] = record
        if lane != _FREE:
            self._lane_of[id(record)] = lane
        return record

    def done(self, record: R) -> None:
        """A started record finished: free its slot and lane.

        `record` must be the object `ready()` returned; `InvalidArgument` if it is not in flight
        (calling `done` twice would free a slot that another record holds).
        """
        key = id(record)
        if self._inflight.pop(key, None) is None:
            raise InvalidArgument(f"done() for a record that is not in flight: {record!r}")
        lane = self._lane_of.pop(key, _FREE)
        if lane == _FREE:
            return
        self._busy.discard(lane)
        queue = self._queues.get(lane)
        if queue:
            heapq.heappush(self._runnable, (queue[0][0], lane))

    def drop_buffered(self) -> list[R]:
        """Remove and return every record not started yet, in arrival order.

        For a revoked partition: in-flight records drain, buffered ones are fetched
        again by the next owner.
        """
        entries = list(self._free or ())
        for queue in self._queues.values():
            entries.extend(queue)
        entries.sort(key=lambda entry: entry[0])
        self._free = None
        self._queues.clear()
        self._runnable.clear()
        self._buffered = 0
        return [record for _, record in entries]

    def __repr__(self) -> str:
        lanes = f" lanes_busy={len(self._busy)}/{self._lanes}" if self._mode == "key" else ""
        return (
            f"<Dispatcher mode={self._mode} inflight={self.inflight}/{self._window} "
            f"buffered={self._buffered}{lanes}>"
        )
