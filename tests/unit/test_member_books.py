"""The instance member's pure books as state machines (issue 32, item 11): random
sequences of cursor starts and restarts, commits, rounds that are refused, fail or find a
partition gone, revokes, leaves and re-assignments, with invariants after every step.

- no commit is sent for an epoch that is not its seat's current one (a restart, a revoke
  or a leave in between), except a retired cursor's final position;
- no commit is sent to a partition found gone, until it is assigned again;
- a position sent is never older than one already written for that seat and epoch;
- a refused or failed position is sent again unless something newer replaced it;
- with the cursors' offset trackers (`CursorsCommit`): no commit passes an unfinished
  offset, no cursor outlives its rider, a leave's final positions go out before it ends;
- the topic plan (`Plan`): a wanted topic that exists is subscribed within one listing,
  named or matched by a pattern; nothing missing is subscribed to.
"""

from __future__ import annotations

from aiokafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from actors.delivery.path.member.commits import CommitBook, Outcome, Position, Round, Seat
from actors.delivery.path.member.positions import EARLIEST, Bounds, Incarnations, start_of
from actors.delivery.path.member.seats import Seats, next_epoch
from actors.delivery.path.member.topic_plan import (
    MISSING_RECHECK_MS,
    PATTERN_RECHECK_MS,
    TopicPlan,
)
from actors.shared.offsets import OffsetTracker

KEYS = ["a", "b"]
TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]
SEATS: list[Seat] = [(k, tp) for k in KEYS for tp in TPS]
seats_st = st.sampled_from(SEATS)


class CommitRounds(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.book = CommitBook()
        self.seats = Seats()
        self.offsets: dict[Seat, int] = {}  # the cursor's own progress per seat
        self.written: dict[tuple[Seat, int], int] = {}  # (seat, epoch) -> offset written
        self.round: Round | None = None
        self.final_seats: set[Seat] = set()

    # -- cursors -----------------------------------------------------------------------
    @rule(seat=seats_st)
    def cursor_starts(self, seat: Seat) -> None:
        """A cursor starts or restarts: a new epoch; the member hears its Rewind."""
        assert self.seats.started(seat, next_epoch())
        self.offsets.setdefault(seat, 0)

    @rule(seat=seats_st, step=st.integers(1, 5))
    def cursor_commits(self, seat: Seat, step: int) -> None:
        epoch = self.seats.epochs.get(seat)
        if epoch is None or seat[1] in self.book.gone:
            return
        self.offsets[seat] += step
        self.book.note(seat, Position(seat[0], self.offsets[seat], epoch))

    @rule(seat=seats_st)
    def cursor_retires_with_final_position(self, seat: Seat) -> None:
        epoch = self.seats.epochs.get(seat)
        if epoch is None:
            return
        self.book.forget([seat])
        if seat[1] not in self.book.gone:
            self.book.note(seat, Position(seat[0], self.offsets[seat], epoch, final=True))
            self.final_seats.add(seat)
        self.seats.end(seat, epoch)

    @rule(tp=st.sampled_from(TPS))
    def partition_assigned_again(self, tp: TopicPartition) -> None:
        self.book.assigned(tp)

    # -- rounds ------------------------------------------------------------------------
    @precondition(lambda self: self.round is None)
    @rule()
    def round_taken(self) -> None:
        self.round = self.book.take(self.seats.current)
        if self.round is None:
            return
        finals = [p.final for p in self.round.seats.values()]
        assert all(finals) or not any(finals)  # retirements' positions go first, alone
        for seat, position in self.round.seats.items():
            assert position.final or self.seats.current(seat, position.epoch)
            assert seat[1] not in self.book.gone
            before = self.written.get((seat, position.epoch))
            assert before is None or position.offset >= before

    @precondition(lambda self: self.round is not None)
    @rule(how=st.sampled_from(["ok", "refused", "failed", "gone"]))
    def round_settles(self, how: str) -> None:
        assert self.round is not None
        groups = {p.group for p in self.round.seats.values()}
        outcome = {
            "ok": Outcome(),
            "refused": Outcome(refused=dict.fromkeys(groups, "live members")),
            "failed": Outcome(failed="ConnectionError()"),
            "gone": Outcome(refused=dict.fromkeys(groups, "unknown"),
                            gone=frozenset(tp for _k, tp in self.round.seats)),
        }[how]
        sent = dict(self.round.seats)
        written = self.book.settle(outcome, self.seats.current)
        self.round = None
        for seat, position in written.items():
            self.written[(seat, position.epoch)] = position.offset
        for seat, position in sent.items():
            back = self.book.pending.get(seat)
            if how in ("refused", "failed") and not position.final \
                    and self.seats.current(seat, position.epoch):
                assert back is not None  # kept for the next round, or replaced
            if how == "gone" or position.final:
                assert back is None or back is not position

    @invariant()
    def nothing_pending_for_a_gone_partition(self) -> None:
        assert not any(tp in self.book.gone for _k, tp in self.book.pending)

    @invariant()
    def one_round_at_a_time(self) -> None:
        assert (self.book.in_flight is None) == (self.round is None)


TestCommitRounds = CommitRounds.TestCase
TestCommitRounds.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


class Plan(RuleBasedStateMachine):
    """The topic plan: every wanted topic that exists is subscribed within one listing
    (named: `MISSING_RECHECK_MS` after it exists and is wanted; matched by a pattern:
    `PATTERN_RECHECK_MS`), unless a listing failed meanwhile; a missing one is listed
    again within `MISSING_RECHECK_MS`; nothing missing is ever subscribed to."""

    TOPICS = ["x", "y", "z", "p1", "p2"]
    MATCHED = {"p1", "p2"}  # what the riders' pattern matches when there is one

    @initialize()
    def setup(self) -> None:
        self.plan = TopicPlan()
        self.now = 0
        self.cluster: set[str] = {"x"}
        self.named: set[str] = set()
        self.pattern = False
        self.since: dict[str, int] = {}  # topic -> since when it exists and is wanted
        self.failed_at: int | None = None  # the last listing that failed

    def _want(self) -> None:
        self.plan.want(frozenset(self.named), patterns=self.pattern)
        self._track()

    def _track(self) -> None:
        wanted = self.named | (self.MATCHED if self.pattern else set())
        live = wanted & self.cluster
        self.since = {t: self.since.get(t, self.now) for t in live}

    @rule(topic=st.sampled_from(TOPICS))
    def subscription_names(self, topic: str) -> None:
        self.named.add(topic)
        self._want()

    @rule(topic=st.sampled_from(TOPICS))
    def last_subscription_leaves(self, topic: str) -> None:
        self.named.discard(topic)
        self._want()

    @rule(on=st.booleans())
    def pattern_subscription(self, on: bool) -> None:
        self.pattern = on
        if not on:
            self.plan.match(frozenset())
        self._want()

    @rule(topic=st.sampled_from(TOPICS))
    def topic_created(self, topic: str) -> None:
        self.cluster.add(topic)
        self._track()

    @rule(topic=st.sampled_from(TOPICS))
    def topic_deleted(self, topic: str) -> None:
        self.cluster.discard(topic)
        self._track()

    @rule(ms=st.integers(1, 3000))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(works=st.booleans())
    def member_turn(self, works: bool) -> None:
        """One turn: list when due (the listing answers at once, or fails; the pattern's
        matches are worked out from it), then subscribe to what the plan says."""
        if self.plan.listing_due(self.now):
            self.plan.list_started(self.now)
            self.plan.listed_now(frozenset(self.cluster) if works else None, self.now)
            if not works:
                self.failed_at = self.now
            elif self.pattern:
                self.plan.match(frozenset(self.MATCHED & self.cluster))
        target = self.plan.to_subscribe()
        if target is not None:
            assert target <= (self.plan.listed or frozenset())
            self.plan.subscribed_to(target)
        subscribed = self.plan.subscribed or frozenset()
        for topic, since in self.since.items():  # liveness: within one listing
            late = since + (MISSING_RECHECK_MS if topic in self.named else PATTERN_RECHECK_MS)
            if self.now >= late and (self.failed_at is None or self.failed_at < since):
                assert topic in subscribed, (topic, since, self.now, self.plan)

    @invariant()
    def subscribed_topics_are_wanted_and_were_listed(self) -> None:
        subscribed = self.plan.subscribed or frozenset()
        if self.plan.to_subscribe() is None:
            assert subscribed <= self.plan.wanted
            assert subscribed <= (self.plan.listed or frozenset())

    @invariant()
    def a_missing_topic_is_listed_again_soon(self) -> None:
        if self.plan.missing and not self.plan.listing:
            assert self.plan.next_listing_ms <= self.now + MISSING_RECHECK_MS


TestPlan = Plan.TestCase
TestPlan.settings = settings(max_examples=600, stateful_step_count=40, deadline=None)


def test_a_topic_created_after_its_subscription_is_subscribed_within_one_listing() -> None:
    plan = TopicPlan()
    plan.want(frozenset({"late"}), patterns=False)
    assert plan.listing_due(0)
    plan.list_started(0)
    plan.listed_now(frozenset({"other"}), 0)
    assert plan.to_subscribe() is None and plan.missing == {"late"}
    assert not plan.listing_due(MISSING_RECHECK_MS - 1)
    assert plan.listing_due(MISSING_RECHECK_MS)
    plan.list_started(MISSING_RECHECK_MS)
    plan.listed_now(frozenset({"other", "late"}), MISSING_RECHECK_MS)
    assert plan.to_subscribe() == {"late"}


def test_nothing_wanted_lists_nothing_and_known_topics_are_not_listed_again() -> None:
    plan = TopicPlan()
    assert not plan.listing_due(10**9)
    plan.want(frozenset({"a"}), patterns=False)
    plan.list_started(0)
    plan.listed_now(frozenset({"a"}), 0)
    plan.subscribed_to(frozenset({"a"}))
    assert not plan.listing_due(10**9)  # nothing missing, no pattern


def test_missing_topics_are_worked_out_once_per_change_not_per_turn() -> None:
    """#34 item 7: the member asks every turn; 10,000 missing names cost 1-2 ms a time."""
    plan = TopicPlan()
    plan.want(frozenset(f"absent-{n}" for n in range(10_000)), patterns=True)
    plan.listed_now(frozenset({"other"}), 0)
    missing = plan.missing
    plan.listed_now(frozenset({"other"}), MISSING_RECHECK_MS)  # the same listing
    plan.match(frozenset())
    assert plan.listing_due(2 * MISSING_RECHECK_MS) and plan.missing is missing
    plan.listed_now(frozenset({"other", "absent-7"}), 2 * MISSING_RECHECK_MS)
    assert plan.missing == missing - {"absent-7"}
    plan.match(frozenset({"matched"}))
    assert "matched" in plan.missing and plan.wanted == plan.named | {"matched"}


@st.composite
def bounds(draw: st.DrawFn) -> Bounds:
    start = draw(st.none() | st.integers(0, 100))
    end = draw(st.none() | st.integers(start or 0, 200))
    return Bounds(start, end)


@settings(max_examples=300)
@given(st.none() | st.integers(0, 10_000), st.sampled_from(["earliest", "latest"]), bounds())
def test_a_cursor_never_starts_outside_a_known_log(committed: int | None, reset: str,
                                                   log: Bounds) -> None:
    start = start_of(committed, reset, log)
    if start.offset is not None:
        assert log.holds(start.offset) or (log.start is None and start.offset == 0)
    if committed is not None and log.holds(committed):
        assert start.offset == committed and start.reset_from is None
    elif committed is not None:
        assert start.reset_from == committed  # a reset is reported


def test_a_position_past_the_log_end_applies_the_reset() -> None:
    assert start_of(5000, "earliest", Bounds(0, 250)).offset == 0
    assert start_of(5000, "latest", Bounds(0, 250)).offset == 250
    assert start_of(5000, "earliest", Bounds(0, 250)).reset_from == 5000
    assert start_of(120, "earliest", Bounds(0, 250)).offset == 120
    assert start_of(3, "latest", Bounds(10, 250)).offset == 250  # below the start


def test_commits_from_before_a_deletion_are_not_trusted_until_the_group_commits_again() -> None:
    tp = TopicPartition("t", 0)
    incarnations = Incarnations()
    assert incarnations.trusts("g", tp)
    incarnations.gone([tp])
    assert not incarnations.trusts("g", tp)
    incarnations.committed("g", tp)
    assert incarnations.trusts("g", tp) and not incarnations.trusts("h", tp)


def test_a_refused_position_of_a_retired_epoch_is_not_sent_again() -> None:
    """Issue 32, item 9: a revoke and re-assignment between a round and its refusal must
    not let the old cursor's position overwrite the new cursor's."""
    book, seats = CommitBook(), Seats()
    seat: Seat = ("a", TPS[0])
    old = next_epoch()
    seats.started(seat, old)
    book.note(seat, Position("g", 40, old))
    sent = book.take(seats.current)
    assert sent is not None
    new = next_epoch()
    seats.started(seat, new)  # revoked and assigned again meanwhile
    book.note(seat, Position("g", 10, new))
    book.settle(Outcome(refused={"g": "rebalancing"}), seats.current)
    assert book.pending[seat].epoch == new and book.pending[seat].offset == 10


def test_final_positions_go_in_a_round_of_their_own_before_the_others() -> None:
    """An unsubscribe waits for its cursors' final commits: they must not wait behind a
    round of every subscriber's positions (seconds at 10,000)."""
    book, seats = CommitBook(), Seats()
    epochs = {}
    for key in ("busy", "leaving"):
        epochs[key] = next_epoch()
        seats.started((key, TPS[0]), epochs[key])
    book.note(("busy", TPS[0]), Position("g-busy", 5, epochs["busy"]))
    book.note(("leaving", TPS[0]), Position("g-leaving", 7, epochs["leaving"], final=True))
    first = book.take(seats.current)
    assert first is not None and list(first.seats) == [("leaving", TPS[0])]
    assert book.take(seats.current) is None  # one round at a time
    book.settle(Outcome(), seats.current)
    second = book.take(seats.current)
    assert second is not None and list(second.seats) == [("busy", TPS[0])]


class CursorsCommit(RuleBasedStateMachine):
    """Cursors with their offset trackers, the seats and the commit book together: riders
    join and leave (a leave drains, commits the final positions in a round of their own,
    then ends the seats), cursors restart from what Kafka holds, records are fetched and
    finish in any order, rounds are refused or fail. After every step:

    - no commit passes an unfinished offset: every offset below what Kafka holds for a
      seat was finished by some incarnation of its cursor (nothing is lost);
    - no cursor outlives its rider: a rider that left and whose retirement ended has no
      seat, nothing pending and nothing in flight;
    - a leaving rider's seats wait for their final positions only, and its retirement
      ends only after they were sent."""

    @initialize()
    def setup(self) -> None:
        self.book, self.seats = CommitBook(), Seats()
        self.kafka: dict[Seat, int] = {}  # what the group holds per seat
        self.trackers: dict[Seat, OffsetTracker] = {}  # the current cursor's
        self.fetch_at: dict[Seat, int] = {}
        self.finished: dict[Seat, set[int]] = {seat: set() for seat in SEATS}
        self.riders: set[str] = set()
        self.retiring: dict[int, str] = {}  # retirement number -> rider key
        self.sent_finals: set[int] = set()  # epochs whose final position went out
        self.finals: dict[int, set[int]] = {}  # retirement -> epochs with a final noted
        self.left: set[str] = set()  # riders whose retirement ended
        self.round: Round | None = None

    def _start(self, seat: Seat) -> None:
        """A cursor incarnation: a new epoch, from the position Kafka holds."""
        assert self.seats.started(seat, next_epoch())
        start = self.kafka.get(seat, 0)
        self.trackers[seat] = OffsetTracker(start)
        self.fetch_at[seat] = start

    def _live(self, seat: Seat) -> bool:
        return seat in self.trackers and not self._retiring(seat[0])

    def _retiring(self, key: str) -> bool:
        return key in self.retiring.values()

    # -- riders ------------------------------------------------------------------------
    @rule(key=st.sampled_from(KEYS))
    def rider_joins(self, key: str) -> None:
        if key in self.riders or self._retiring(key):
            return
        self.riders.add(key)
        self.left.discard(key)
        for tp in TPS:
            self._start((key, tp))

    @rule(key=st.sampled_from(KEYS))
    def rider_leaves(self, key: str) -> None:
        """Its cursors drain (what is in flight finishes or is given up at the deadline)
        and their final positions go to the book."""
        if key not in self.riders or self._retiring(key):
            return
        seats = [(key, tp) for tp in TPS]
        retirement = self.seats.retire(dict.fromkeys(seats), lambda: None)
        self.retiring[retirement.number] = key
        self.book.forget(seats)
        self.finals[retirement.number] = set()
        for seat in seats:
            position = self.trackers[seat].committable()
            if position is not None:
                epoch = retirement.epochs[seat]
                self.book.note(seat, Position(seat[0], position, epoch, final=True))
                self.finals[retirement.number].add(epoch)

    @precondition(lambda self: bool(self.retiring))
    @rule(data=st.data())
    def retirement_ends(self, data: st.DataObject) -> None:
        """Once no final position of its seats waits or is out: the cursors stop."""
        number = data.draw(st.sampled_from(sorted(self.retiring)))
        key = self.retiring[number]
        seats = [(key, tp) for tp in TPS]
        if any(self.book.holds(seat) for seat in seats):
            return
        assert self.finals.pop(number) <= self.sent_finals  # its final positions went out
        retirement = self.seats.retired(number)
        assert retirement is not None
        for seat, epoch in retirement.epochs.items():
            self.seats.end(seat, epoch)
            self.trackers.pop(seat, None)
        del self.retiring[number]
        self.riders.discard(key)
        self.left.add(key)

    # -- cursors -----------------------------------------------------------------------
    @rule(seat=seats_st)
    def cursor_restarts(self, seat: Seat) -> None:
        """A crash: its supervisor starts it again, which reads Kafka's position."""
        if self._live(seat):
            self._start(seat)

    @rule(seat=seats_st, count=st.integers(1, 4))
    def records_fetched(self, seat: Seat, count: int) -> None:
        if not self._live(seat):
            return
        for _ in range(count):
            self.trackers[seat].add(self.fetch_at[seat])
            self.fetch_at[seat] += 1

    @rule(seat=seats_st, data=st.data())
    def record_finished(self, seat: Seat, data: st.DataObject) -> None:
        tracker = self.trackers.get(seat)
        if tracker is None:
            return
        open_ = [o for o in range(self.kafka.get(seat, 0), self.fetch_at[seat])
                 if not tracker.is_finished(o)]
        if open_:
            offset = data.draw(st.sampled_from(open_))
            tracker.finish(offset)
            self.finished[seat].add(offset)

    @rule(seat=seats_st)
    def cursor_asks_a_commit(self, seat: Seat) -> None:
        if not self._live(seat):
            return
        position = self.trackers[seat].committable()
        if position is not None:
            self.book.note(seat, Position(seat[0], position, self.seats.epochs[seat]))

    # -- rounds ------------------------------------------------------------------------
    @precondition(lambda self: self.round is None)
    @rule()
    def round_taken(self) -> None:
        self.round = self.book.take(self.seats.current)

    @precondition(lambda self: self.round is not None)
    @rule(how=st.sampled_from(["ok", "refused", "failed"]))
    def round_settles(self, how: str) -> None:
        assert self.round is not None
        groups = {p.group for p in self.round.seats.values()}
        outcome = {"ok": Outcome(), "refused": Outcome(refused=dict.fromkeys(groups, "x")),
                   "failed": Outcome(failed="ConnectionError()")}[how]
        sent, self.round = self.round.seats, None
        for position in sent.values():
            if position.final:
                self.sent_finals.add(position.epoch)
        if how == "ok":  # what Kafka holds follows the outcome, not the book's report
            self.kafka.update((seat, position.offset) for seat, position in sent.items())
        written = self.book.settle(outcome, self.seats.current)
        assert written == (sent if how == "ok" else {})  # the journal says what happened

    # -- invariants --------------------------------------------------------------------
    @invariant()
    def no_commit_passes_an_unfinished_offset(self) -> None:
        for seat, held in self.kafka.items():
            assert set(range(held)) <= self.finished[seat], (seat, held)

    @invariant()
    def a_leaving_riders_seats_wait_for_their_final_positions_only(self) -> None:
        for key in self.retiring.values():
            for tp in TPS:
                pending = self.book.pending.get((key, tp))
                assert pending is None or pending.final

    @invariant()
    def no_cursor_outlives_its_rider(self) -> None:
        for key in self.left:
            for tp in TPS:
                seat = (key, tp)
                assert seat not in self.seats.epochs and seat not in self.trackers
                assert not self.book.holds(seat)


TestCursorsCommit = CursorsCommit.TestCase
TestCursorsCommit.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)


class StartPositions(RuleBasedStateMachine):
    """One partition's log through produce, retention, and deletion and creation again
    (the broker keeps the old offsets or drops them); groups commit; cursors start from
    what the broker holds, trusted or not (`Incarnations`), by `start_of`. After every
    start: it lies inside the log as read; a committed offset of the current topic inside
    the log is where it starts; one from before the deletion never is (unless the reset
    lands there itself), and the reset is reported."""

    TP = TopicPartition("t", 0)
    GROUPS = ["g", "h"]

    @initialize()
    def setup(self) -> None:
        self.log_start, self.log_end, self.incarnation = 0, 0, 0
        self.held: dict[str, tuple[int, int]] = {}  # group -> (offset, incarnation)
        self.incarnations = Incarnations()

    @rule(count=st.integers(1, 50))
    def records_produced(self, count: int) -> None:
        self.log_end += count

    @rule(count=st.integers(1, 50))
    def retention_removes(self, count: int) -> None:
        self.log_start = min(self.log_start + count, self.log_end)

    @rule(keeps_offsets=st.booleans())
    def topic_deleted_and_created_again(self, keeps_offsets: bool) -> None:
        """The member learns it from a refused commit or a listing, before the new
        topic's partitions are assigned to it."""
        self.incarnation += 1
        self.log_start = self.log_end = 0
        if not keeps_offsets:  # Kafka drops a deleted topic's offsets; some brokers not
            self.held.clear()
        self.incarnations.gone([self.TP])

    @rule(group=st.sampled_from(GROUPS), data=st.data())
    def group_commits(self, group: str, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.log_end))
        self.held[group] = (offset, self.incarnation)
        self.incarnations.committed(group, self.TP)

    @rule(group=st.sampled_from(GROUPS), offset=st.integers(0, 400))
    def offsets_set_elsewhere(self, group: str, offset: int) -> None:
        """Another tool wrote the group's offset (maybe past the log's end: item 2)."""
        self.held[group] = (offset, self.incarnation)
        self.incarnations.committed(group, self.TP)

    @rule(group=st.sampled_from(GROUPS), reset=st.sampled_from(["earliest", "latest"]),
          known_start=st.booleans(), known_end=st.booleans())
    def cursor_starts(self, group: str, reset: str, known_start: bool,
                      known_end: bool) -> None:
        held = self.held.get(group)
        committed = None if held is None else held[0]
        trusted = committed is not None and self.incarnations.trusts(group, self.TP)
        bounds = Bounds(self.log_start if known_start else None,
                        self.log_end if known_end else None)
        start = start_of(committed if trusted else None, reset, bounds)
        if start.offset is not None:  # inside the log as read
            assert not known_start or start.offset >= self.log_start
            assert not known_end or start.offset <= self.log_end
        elif committed is not None and trusted:
            assert not bounds.holds(committed)  # outside: reset to an unknown end
        if held is not None and held[1] == self.incarnation and \
                self.log_start <= held[0] <= self.log_end:
            assert trusted and start.offset == held[0] and start.reset_from is None
        if held is not None and held[1] < self.incarnation:
            assert not trusted  # the member journals that reset (starts.py)
            reset_to = bounds.start if reset == "earliest" else bounds.end
            assert start.offset == (EARLIEST if reset_to is None and reset == "earliest"
                                    else reset_to)


TestStartPositions = StartPositions.TestCase
TestStartPositions.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
