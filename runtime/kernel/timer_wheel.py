"""A hierarchical timing wheel: the kernel's timer for retries, delays and timeouts.

Varghese & Lauck's hierarchical wheel, shaped like Kafka's purgatory `TimingWheel` /
`SystemTimer`. Level *i* cuts time into buckets `tick_ms * wheel_size**i` ms wide; a timer
sits in the finest level whose window (`wheel_size` buckets from now) reaches its deadline,
so a timer days away needs only a handful of levels (5 for 7 days at 1 ms x 64), and
levels are added lazily. A heap of bucket start times (Kafka's `DelayQueue` of
`TimerTaskList`s) lets `advance` jump straight to the next non-empty bucket instead of
ticking through empty slots. When a coarse bucket comes due its timers cascade into finer
levels; a timer moves at most once per level, so schedule and expiry cost O(levels).

Where this differs from Kafka, and why:

- Exact, never early, never late. Kafka fires a timer up to one tick early. Here an item
  comes out of `advance(now)` if and only if its deadline <= now, whatever `tick_ms` is,
  and `next_deadline()` is the exact earliest pending deadline, so an actor that sleeps
  until it neither wakes early (spins) nor oversleeps.
- Buckets are keyed by their absolute slot number (one dict per level), not by the slot
  modulo `wheel_size`. Kafka only ever moves its clock to a bucket's start, so modulo slots
  never collide. `next_deadline` here splits a coarse bucket into finer ones *before* it
  is due, to learn the exact earliest deadline without scanning the bucket; with absolute
  keys any bucket at any level is valid as long as its start is <= every deadline in it.
- Cancel marks the handle and leaves it in its bucket's list instead of unlinking it from
  a doubly linked list (a Python list append is several times cheaper than a linked node).
  A bucket keeps a live count (so empty buckets are skipped exactly) and compacts itself
  when dead entries outnumber live ones: cancel is O(1) amortized and memory stays
  proportional to pending timers.

Pure and synchronous: it never reads a clock; the owner passes `now`. One asyncio thread
owns it, so it takes no locks.
"""

from __future__ import annotations

from heapq import heappop, heappush
from operator import attrgetter
from typing import Generic, TypeVar

T = TypeVar("T")

_PENDING = 0
_CANCELLED = 1
_EXPIRED = 2

# A bucket compacts when it holds more dead (cancelled) entries than live ones and at
# least this many: small buckets are not worth rebuilding, they are flushed soon anyway.
_COMPACT_MIN_DEAD = 16

_by_seq = attrgetter("_seq")
_by_deadline = attrgetter("deadline_ms")


class TimerHandle(Generic[T]):
    """One scheduled item; `TimerWheel.cancel` takes it back."""

    __slots__ = ("_bucket", "_seq", "_state", "deadline_ms", "item")

    def __init__(self, deadline_ms: int, item: T, seq: int) -> None:
        self.deadline_ms = deadline_ms
        self.item = item
        self._seq = seq
        self._state = _PENDING
        self._bucket: _Bucket[T] | None = None

    @property
    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    @property
    def expired(self) -> bool:
        return self._state == _EXPIRED

    def __repr__(self) -> str:
        state = ("pending", "cancelled", "expired")[self._state]
        return f"<TimerHandle deadline={self.deadline_ms}ms {state} item={self.item!r}>"


class _Bucket(Generic[T]):
    """Timers whose deadlines are all >= `start`, in arrival order (not deadline order)."""

    __slots__ = ("entries", "level", "live", "slot", "start")

    def __init__(self, level: int, slot: int, start: int) -> None:
        self.level = level
        self.slot = slot
        self.start = start
        self.entries: list[TimerHandle[T]] = []
        self.live = 0

    def add(self, handle: TimerHandle[T]) -> None:
        self.entries.append(handle)
        self.live += 1
        handle._bucket = self

    def forget_one(self) -> None:
        """A member was cancelled; drop the dead ones once they outnumber the living."""
        self.live -= 1
        dead = len(self.entries) - self.live
        if dead > self.live and dead >= _COMPACT_MIN_DEAD:
            self.entries = [h for h in self.entries if h._state == _PENDING]

    def take(self) -> list[TimerHandle[T]]:
        """Empty the bucket, returning what it held (cancelled entries included)."""
        entries = self.entries
        self.entries = []
        self.live = 0
        return entries


class TimerWheel(Generic[T]):
    """Schedule items at millisecond deadlines; `advance(now)` returns the due ones in order."""

    def __init__(self, start_ms: int = 0, tick_ms: int = 1, wheel_size: int = 64) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._now = start_ms
        self._tick = tick_ms
        self._size = wheel_size
        self._spans: list[int] = [tick_ms]  # width of one bucket, per level
        self._levels: list[dict[int, _Bucket[T]]] = [{}]  # absolute slot -> bucket
        # (start, -level, bucket), one entry per bucket in `_levels`. On equal starts the
        # coarser bucket comes first, so `_earliest` splits it before trusting a fine one;
        # (start, -level) is unique, so buckets themselves are never compared.
        self._heap: list[tuple[int, int, _Bucket[T]]] = []
        # Timers due later within the current tick (only when tick_ms > 1): a bucket for
        # that tick would start <= now, and `advance` would pop it without emptying it.
        self._soon: _Bucket[T] = _Bucket(0, 0, start_ms)
        self._seq = 0
        self._pending = 0
        self._next: int | None = None  # cached `next_deadline()`, valid if `_next_known`
        self._next_known = True

    def schedule(self, deadline_ms: int, item: T) -> TimerHandle[T]:
        """Expire `item` at `deadline_ms`; a deadline at or before now expires next advance."""
        handle = TimerHandle(deadline_ms, item, self._seq)
        self._seq += 1
        self._pending += 1
        self._place(handle)
        if self._next_known and (self._next is None or deadline_ms < self._next):
            self._next = deadline_ms
        return handle

    def cancel(self, handle: TimerHandle[T]) -> bool:
        """Take back a pending timer in O(1); False if it already expired or was cancelled."""
        if handle._state != _PENDING:
            return False
        handle._state = _CANCELLED
        self._pending -= 1
        if handle.deadline_ms == self._next:
            self._next_known = False
        bucket = handle._bucket
        handle._bucket = None
        if bucket is not None:
            bucket.forget_one()
        return True

    def advance(self, now_ms: int) -> list[T]:
        """Move to `now_ms` and return every item due by then, by deadline, ties in order."""
        if now_ms < self._now:
            raise ValueError(f"TimerWheel cannot go backwards from {self._now} to {now_ms}")
        self._now = now_ms
        heap = self._heap
        if (not heap or heap[0][0] > now_ms) and not self._soon.live:
            return []  # nothing due: the common case for an actor woken by other messages
        expired: list[TimerHandle[T]] = []
        if self._soon.live:
            self._flush(self._soon.take(), now_ms, expired)
        while heap and heap[0][0] <= now_ms:
            _, neg_level, bucket = heappop(heap)
            del self._levels[-neg_level][bucket.slot]
            self._flush(bucket.entries, now_ms, expired)
        if not expired:
            return []  # cascading moved timers but the pending set, and its minimum, stayed
        self._pending -= len(expired)
        self._next_known = False
        if len(expired) == 1:
            return [expired[0].item]  # the common case when woken at next_deadline()
        # Buckets hold arrival order; two stable passes give (deadline, schedule order).
        expired.sort(key=_by_seq)
        expired.sort(key=_by_deadline)
        return [h.item for h in expired]

    def next_deadline(self) -> int | None:
        """The exact earliest pending deadline (possibly already past), or None if idle."""
        if not self._next_known:
            self._next = self._earliest()
            self._next_known = True
        return self._next

    def __len__(self) -> int:
        return self._pending

    def __repr__(self) -> str:
        return (
            f"<TimerWheel now={self._now}ms pending={self._pending} "
            f"levels={len(self._levels)} buckets={len(self._heap)} tick={self._tick}ms "
            f"size={self._size}>"
        )

    def _place(self, handle: TimerHandle[T]) -> None:
        """Put a pending timer in the finest level whose window reaches its deadline."""
        # The hottest path (every schedule and every cascade step), so few calls in it.
        deadline = handle.deadline_ms
        now = self._now
        span = self._tick
        slot = deadline // span
        level = 0
        if deadline > now:
            now_slot = now // span
            if slot == now_slot:
                self._soon.add(handle)  # later in the current tick (tick_ms > 1 only)
                return
            size = self._size
            while slot - now_slot >= size:
                level += 1
                if level == len(self._spans):
                    self._grow()
                span = self._spans[level]
                slot = deadline // span
                now_slot = now // span
        # else: due already; a level-0 bucket starting <= now is popped by the next advance.
        self._add(handle, level, slot)

    def _add(self, handle: TimerHandle[T], level: int, slot: int) -> None:
        # `_Bucket.add` inlined: one call less per placement is ~10% of the whole run.
        bucket = self._levels[level].get(slot)
        if bucket is None:
            bucket = self._new_bucket(level, slot)
        bucket.entries.append(handle)
        bucket.live += 1
        handle._bucket = bucket

    def _new_bucket(self, level: int, slot: int) -> _Bucket[T]:
        bucket: _Bucket[T] = _Bucket(level, slot, slot * self._spans[level])
        self._levels[level][slot] = bucket
        heappush(self._heap, (bucket.start, -level, bucket))
        return bucket

    def _grow(self) -> None:
        """An overflow wheel, created only when a deadline is beyond all current levels."""
        self._spans.append(self._spans[-1] * self._size)
        self._levels.append({})

    def _flush(
        self, entries: list[TimerHandle[T]], now: int, expired: list[TimerHandle[T]]
    ) -> None:
        """Expire the due entries of a popped bucket and cascade the rest to finer levels."""
        for handle in entries:
            if handle._state != _PENDING:
                continue
            if handle.deadline_ms <= now:
                handle._state = _EXPIRED
                handle._bucket = None
                expired.append(handle)
            else:
                self._place(handle)

    def _earliest(self) -> int | None:
        """Find the minimum deadline: split coarse buckets at the top of the heap until a
        live finest-level bucket is on top, whose start is then exact (tick_ms == 1)."""
        best = _min_live_deadline(self._soon.entries) if self._soon.live else None
        heap = self._heap
        while heap:
            start, neg_level, bucket = heap[0]
            if best is not None and start >= best:
                break
            if not bucket.live or neg_level:
                heappop(heap)
                del self._levels[-neg_level][bucket.slot]
                if bucket.live:
                    self._split(bucket)
                continue
            # Every other bucket starts at a later tick, so the minimum is in this one.
            first = start if self._tick == 1 else _min_live_deadline(bucket.entries)
            return first if best is None else min(first, best)
        return best

    def _split(self, bucket: _Bucket[T]) -> None:
        """Move a coarse bucket's live timers one level finer, without moving time."""
        level = bucket.level - 1
        span = self._spans[level]
        for handle in bucket.take():
            if handle._state == _PENDING:
                self._add(handle, level, handle.deadline_ms // span)


def _min_live_deadline(entries: list[TimerHandle[T]]) -> int:
    return min(h.deadline_ms for h in entries if h._state == _PENDING)
