"""The instance member's pure books as state machines (issue 32, item 11): random
sequences of cursor starts and restarts, commits, rounds that are refused, fail or find a
partition gone, revokes, leaves and re-assignments, with invariants after every step.

- no commit is sent for an epoch that is not its seat's current one (a restart, a revoke
  or a leave in between), except a retired cursor's final position;
- no commit is sent to a partition found gone, until it is assigned again;
- a position sent is never older than one already written for that seat and epoch;
- a refused or failed position is sent again unless something newer replaced it.
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
from actors.delivery.path.member.positions import Bounds, Incarnations, start_of
from actors.delivery.path.member.seats import Seats, next_epoch
from actors.delivery.path.member.topic_plan import MISSING_RECHECK_MS, TopicPlan

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
    """The topic plan: every wanted topic that exists is subscribed within one listing;
    a missing one is listed again within `MISSING_RECHECK_MS`; nothing missing is ever
    subscribed to."""

    TOPICS = ["x", "y", "z"]

    @initialize()
    def setup(self) -> None:
        self.plan = TopicPlan()
        self.now = 0
        self.cluster: set[str] = {"x"}
        self.named: set[str] = set()

    @rule(topic=st.sampled_from(TOPICS))
    def subscription_names(self, topic: str) -> None:
        self.named.add(topic)
        self.plan.want(frozenset(self.named), patterns=False)

    @rule(topic=st.sampled_from(TOPICS))
    def last_subscription_leaves(self, topic: str) -> None:
        self.named.discard(topic)
        self.plan.want(frozenset(self.named), patterns=False)

    @rule(topic=st.sampled_from(TOPICS))
    def topic_created(self, topic: str) -> None:
        self.cluster.add(topic)

    @rule(topic=st.sampled_from(TOPICS))
    def topic_deleted(self, topic: str) -> None:
        self.cluster.discard(topic)

    @rule(ms=st.integers(1, 3000))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(works=st.booleans())
    def member_turn(self, works: bool) -> None:
        """One turn: list when due (the listing answers at once, or fails), then
        subscribe to what the plan says."""
        if self.plan.listing_due(self.now):
            self.plan.list_started(self.now)
            self.plan.listed_now(frozenset(self.cluster) if works else None, self.now)
        target = self.plan.to_subscribe()
        if target is not None:
            assert target <= (self.plan.listed or frozenset())
            self.plan.subscribed_to(target)

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
TestPlan.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


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
