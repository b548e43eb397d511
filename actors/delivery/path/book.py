"""PartitionBook: the decisions of one delivery partition. Pure and synchronous; time comes
in as `now` (monotonic ms), and `PartitionActor` performs what the book returns.

The book owns the prefetch buffer and in-flight window (`Dispatcher`, by ordering mode),
the `OffsetTracker`, the pause gate, the commit point, the drain and its waiters, and the
retry bookkeeping. What the actor asks it:

- intake: `assign(position)` once the consumer rewound; `take(records)` tracks a fetched
  batch and buffers it; `restart_if_truncated(first)` starts over when the log was cut
  below the committed position; `pin()` commits where a partition with no position started.
- dispatch: `dispatch()` gives the records the window and the lanes let start now.
- outcomes: `finish(record)` for a record delivered, dead-lettered, skipped or moved to
  the retry topic; `retry_at(record, now)` after a failed attempt: when to try again, or
  None to give up; then `move_aside_ms(record)`: the delay before its next attempt through
  the retry topic, or None to dead-letter it; `retrying(record)` when the retry goes out;
  `halt(record)` after a 410 Gone: nothing more is dispatched and the record stays
  unfinished (it is delivered again when the subscription is resumed).
- commits: `request_commit()` is the position worth sending, only when it moved forward.
  It is the lowest unfinished offset received, so it never passes an unfinished record.
- flow: `flow()` says pause now, resume now, or no change (`PauseGate`).
- drain: `drain(...)` stops new work and says when to give up waiting; `finish_drain()`
  answers every waiter with the final position.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from actors.delivery.document.settings import CursorSettings, RetryPolicy, RetryTopicSettings
from actors.delivery.path.lanes import Dispatcher, Mode
from actors.shared.errors import InvalidArgument
from actors.shared.flow import CommitPoint, DrainWaiters, PauseGate
from actors.shared.messages import Drain, Record
from actors.shared.offsets import OffsetTracker
from runtime.kernel.backoff import Backoff
from runtime.kernel.errors import UsageError


def retry_backoff(policy: RetryPolicy) -> Backoff:
    """The first delay, grown by the multiplier up to the cap (0: 100 x the first delay
    when it grows, no cap when it does not), with jitter."""
    grows = policy.backoff_multiplier > 1
    cap = policy.max_delay_ms or (100 * policy.delay_ms if grows else 0)
    return Backoff(policy.delay_ms, policy.backoff_multiplier, cap, policy.jitter)


def _key_of(record: Record) -> bytes | None:
    return record.key


class PartitionBook:
    """The state of one delivery partition; see the module docstring.

    `retry_limit` is the retry policy's `retries`: N > 0 gives a record N retries after its first
    attempt, then it is given up; 0 retries forever. With `retry_topics`, a record given
    up moves to the retry topic while delays are left (0 then means no local retry, and a
    record read back from the retry topic gets one attempt per delay).
    """

    __slots__ = ("_commit", "_drains", "_gate", "_pins", "_rand", "_taken", "_watched",
                 "_watched_since", "backoff", "dispatcher", "halted", "highwater",
                 "retry_limit", "retry_topics", "stalled_since", "tracker")

    def __init__(self, ordering: Mode, window: int, lanes: int, buffer_limit: int,
                 backoff: Backoff, retry_limit: int = 0,
                 rand: Callable[[], float] = random.random,
                 retry_topics: RetryTopicSettings | None = None) -> None:
        if retry_limit < 0:
            raise InvalidArgument(f"retry_limit must be >= 0 (0: forever), got {retry_limit}")
        self.dispatcher: Dispatcher[Record] = Dispatcher(ordering, window, lanes, _key_of)
        self.tracker: OffsetTracker | None = None  # until the consumer says where we start
        self.backoff = backoff
        self.retry_limit = retry_limit
        self.highwater: int | None = None
        self._gate = PauseGate(buffer_limit)
        self._commit = CommitPoint()
        self._pins = True  # `pin()` commits where a book with no position starts
        self._drains = DrainWaiters()
        self._rand = rand
        # in offset order; finished ones trimmed lazily; made with the first record
        self._taken: deque[Record] | None = None
        self._watched: int | None = None  # the position the stall watchdog last saw move
        self._watched_since = 0
        self.stalled_since: int | None = None
        self.retry_topics = retry_topics
        self.halted = False  # a 410 Gone: the subscription is being disabled

    @classmethod
    def for_cursor(cls, cursor: CursorSettings) -> PartitionBook:
        # batches: the concurrency counts requests, so the window holds that many
        # batches of records (partition order stays one record at a time)
        scale = cursor.batch_size if cursor.ordering != "partition" else 1
        return cls(cursor.ordering, cursor.window * scale, cursor.lanes or cursor.concurrency,
                   cursor.buffer_limit * scale, retry_backoff(cursor.retry),
                   cursor.retry.retries, retry_topics=cursor.retry_topics)

    # -- intake ------------------------------------------------------------------------
    def assign(self, position: int | None, *, pin: bool = True) -> bool:
        """Fetching starts at `position` (None: the group has no commit yet; `pin`: commit
        where it starts, see `pin()`). False if the book was assigned already: a rewind
        happens once per incarnation."""
        if self.tracker is not None:
            return False
        self.tracker = OffsetTracker(position)
        self._commit.position = position
        self._pins = pin
        return True

    @property
    def accepts_batches(self) -> bool:
        """False before `assign` (batches fetched for an older incarnation) and while
        draining (the next owner fetches them again)."""
        return self.tracker is not None and self._drains.deadline_ms is None  # `draining`

    def restart_if_truncated(self, first: int) -> int | None:
        """The committed position was past the log's end (topic truncated or recreated) and
        the consumer reset to `first`, an earlier offset: start over from there. Returns
        the position given up, or None when nothing changed."""
        tracker = self._tracker()
        if tracker.last is not None:  # records came: the position is theirs
            return None
        start = tracker.committable()
        if start is None or first >= start:
            return None
        self.tracker = OffsetTracker(first)
        self._commit.position = None
        self._pins = True  # the commit goes back: the old position means nothing now
        return start

    def take(self, records: list[Record], highwater: int | None = None) -> list[Record]:
        """Track and buffer a fetched batch (offset order); return the records taken. Those
        at or below the last offset held are left out: a refetch after a rewind."""
        return self.take_wanted(records, highwater, None)[0]

    def take_wanted(self, records: list[Record], highwater: int | None,
                    wanted: Callable[[Record], bool] | None) -> tuple[list[Record], list[int]]:
        """`take`, with the subscription's filter: a record `wanted` refuses is finished at
        once (the commit position may pass it) instead of buffered. Returns the records
        buffered and the offsets filtered out. A record read back from the retry topic
        passed the filter at its origin: it is always taken."""
        tracker = self._tracker()
        if highwater is not None:
            self.highwater = highwater
        last, skip = tracker.last, 0
        if last is not None:
            while skip < len(records) and records[skip].offset <= last:
                skip += 1
        taken = records[skip:] if skip else records  # a copy only after a rewind
        add, offer = tracker.add, self.dispatcher.offer
        if wanted is None:
            for record in taken:
                add(record.offset)
                offer(record)
            self._keep(taken)
            return taken, []
        kept: list[Record] = []
        filtered: list[int] = []
        for record in taken:
            add(record.offset)
            if record.retry is None and not wanted(record):
                tracker.finish(record.offset)
                filtered.append(record.offset)
            else:
                offer(record)
                kept.append(record)
        self._keep(kept)
        return kept, filtered

    def _keep(self, records: list[Record]) -> None:
        if self._taken is None:
            self._taken = deque()
        self._taken.extend(records)

    # -- health --------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Records received and not finished."""
        return self.tracker.pending() if self.tracker is not None else 0

    def lag(self) -> int | None:
        """Fetch high watermark minus the commit position: grows while delivery is stuck,
        since every fetch updates the high watermark, and so does `note_highwater` while
        nothing is fetched for this partition."""
        position = self._commit.position
        if self.highwater is None or position is None:
            return None
        return max(self.highwater - position, 0)

    def note_highwater(self, highwater: int) -> int | None:
        """The log's end read while no batch comes (paused): the lag it makes, if known.
        Only raises it: a batch fetched earlier may still be on its way."""
        if self.highwater is None or highwater > self.highwater:
            self.highwater = highwater
        return self.lag()

    def oldest_pending_ms(self, now_ms: int) -> int | None:
        """How long the oldest unfinished record has waited since it was fetched (monotonic
        ms); None when nothing waits."""
        position = self.position()
        taken = self._taken
        if taken is None:
            return None
        while taken and (position is None or taken[0].offset < position):
            taken.popleft()  # finished: everything below the position is
        if not taken:
            self._taken = None  # idle: no empty block kept (issue 24, memory)
            return None
        return now_ms - taken[0].fetched_ms

    def rest(self, now_ms: int, position: int) -> None:
        """Nothing is pending (`finish` returned `position`, the position now): what
        `oldest_pending_ms` and `watch` would find, without their walk (a cursor rests
        after every burst it finished: issue 37)."""
        self._taken = None  # every record kept is finished: below the position
        self._watched, self._watched_since, self.stalled_since = position, now_ms, None

    def watch(self, now_ms: int, stall_after_ms: int) -> bool:
        """The stall watchdog, called periodically: True once when the commit position has
        not moved for `stall_after_ms` while records wait; `stalled_since` says since when
        (None again once it moves)."""
        position = self.position()
        waiting = self.pending > 0
        if position != self._watched or not waiting:
            self._watched, self._watched_since, self.stalled_since = position, now_ms, None
            return False
        if self.stalled_since is None and now_ms - self._watched_since >= stall_after_ms:
            self.stalled_since = self._watched_since
            return True
        return False

    def pin(self) -> int | None:
        """With no position committed yet, the position to commit now: it pins where we
        started, so a later owner does not reset past these records (reset=latest), or
        start past the log again after `restart_if_truncated`. None for a book assigned
        with `pin=False` (reset=earliest: a later owner starts at the log's start too;
        at fan-out a pin per new cursor was a commit round of every new group in its
        first burst, issue 37)."""
        if not self._pins or self._commit.position is not None:
            return None
        return self.request_commit()

    # -- dispatch and outcomes ---------------------------------------------------------
    def dispatch(self) -> list[Record]:
        """The buffered records that may start now (attempt 1); none while draining."""
        if self._drains.deadline_ms is not None or self.halted:  # `draining`, inline
            return []
        ready = self.dispatcher.ready()
        for record in ready:
            retry = record.retry  # read back from a retry topic: its count goes on
            record.attempt = 1 if retry is None else retry.attempts + 1
        return ready

    def finish(self, record: Record) -> int | None:
        """`record` is done (delivered, dead-lettered or skipped): free its slot and lane and
        finish its offset. Returns the position to commit once nothing is pending."""
        self.dispatcher.done(record)
        tracker = self.tracker
        assert tracker is not None  # a record in flight was taken after assign()
        tracker.finish(record.offset)
        return self.request_commit() if tracker.pending() == 0 else None

    def retry_at(self, record: Record, now_ms: int, retry_after_ms: int | None = None,
                 give_up: bool = False) -> int | None:
        """After a failed attempt: when to try `record` again (monotonic ms), never sooner
        than the endpoint's `Retry-After`; None when its retries are used up or the
        receiver asked to give it up."""
        limit = self.retry_limit
        if give_up or (limit and record.attempt > limit):
            return None
        if self.retry_topics is not None and (not limit or (
                record.retry is not None and record.retry.stage)):
            return None  # moves to the retry topic (`move_aside_ms`)
        return now_ms + self.backoff.delay_ms(record.attempt, self._rand, retry_after_ms)

    def move_aside_ms(self, record: Record, give_up: bool = False) -> int | None:
        """After `retry_at` gave `record` up: the delay before its next attempt through the
        retry topic; None when there is none (no retry topics, the receiver asked to give
        it up, or its last delay is used up): dead-letter it."""
        retry_topics = self.retry_topics
        if give_up or retry_topics is None:
            return None
        stage = record.retry.stage if record.retry is not None else 0
        delays = retry_topics.delays_ms
        return delays[stage] if stage < len(delays) else None

    def halt(self, record: Record) -> None:
        """The endpoint is gone (410): free `record`'s slot without finishing its offset
        (the commit position stays below it) and dispatch nothing more."""
        self.halted = True
        self.dispatcher.done(record)

    @staticmethod
    def retrying(record: Record) -> None:
        """A retry goes out: the record's next attempt."""
        record.attempt += 1

    @property
    def inflight(self) -> int:
        return self.dispatcher.inflight

    # -- commits and flow --------------------------------------------------------------
    def position(self) -> int | None:
        """The commit position now: the lowest unfinished offset received."""
        tracker = self.tracker
        return tracker.committable() if tracker is not None else self._commit.position

    @property
    def committed(self) -> int | None:
        """The last position requested (or the drain's final one)."""
        return self._commit.position

    def request_commit(self) -> int | None:
        """The position to send for commit, only when it moved forward."""
        return self._commit.advance(self.position())

    def flow(self) -> bool | None:
        """True: pause fetching now (buffer full); False: resume now; None: no change."""
        return self._gate.update(self.dispatcher.buffered)

    @property
    def paused(self) -> bool:
        return self._gate.paused

    # -- drain (revoke, unsubscribe, shutdown) -----------------------------------------
    @property
    def draining(self) -> bool:
        return self._drains.deadline_ms is not None  # not `.draining`: a call per record

    @property
    def drained(self) -> bool:
        """Draining, and nothing left in flight: time for `finish_drain`."""
        return self._drains.draining and self.dispatcher.inflight == 0

    def drain(self, drain: Drain) -> int | None:
        """Start or join a drain. The first one drops the buffered records (the next owner
        fetches them again) and, with records in flight, returns its deadline: call
        `finish_drain` then, or when `drained` turns true, whichever comes first."""
        if not self._drains.join(drain.deadline_ms, drain.done):
            return None
        if not drain.keep:
            self._drop_buffered()
        return drain.deadline_ms if self.dispatcher.inflight else None

    def _drop_buffered(self) -> None:
        self.dispatcher.drop_buffered()
        self._gate.open()

    def resume(self) -> bool:
        """A drain that kept its records is over (the partition stays): dispatch again.
        False if no such drain was under way."""
        if self._drains.deadline_ms is None:
            return False
        self._drains.resolve(self.position())
        self._drains.deadline_ms = None
        return True

    def finish_drain(self) -> int | None:
        """Answer every drain with the final position (the consumer commits it)."""
        position = self.position()
        self._commit.position = position
        self._drains.resolve(position)
        return position

    def close(self) -> None:
        """The actor stops: whoever still waits for a drain gets the position now."""
        self._drains.resolve(self.position())

    def _tracker(self) -> OffsetTracker:
        tracker = self.tracker
        if tracker is None:
            raise UsageError("PartitionBook: call assign(position) before taking records")
        return tracker

    def __repr__(self) -> str:
        return (f"<PartitionBook {self.dispatcher!r} watermark={self.position()} "
                f"committed={self.committed} paused={self.paused} "
                f"draining={self.draining}>")
