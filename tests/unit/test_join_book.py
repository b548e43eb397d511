"""The join book (actors/delivery/control/joining.py), driven by a hypothesis state machine:
random subscribes in two lanes, batches taken, batches settled and changes waiting for a
joining key; after every step, one batch at most per lane is under way, no batch is
larger than the limit, a lane with subscribes queued and none under way gets a batch at
the next take, each lane's subscribes start in the order they were asked, and a settled
batch hands back exactly its subscribes and the changes that waited for them."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.delivery.control.joining import JoinBook

KEYS = st.sampled_from([f"k{i}" for i in range(12)])
LIMIT = 3


class JoinBookMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book: JoinBook[str, object] = JoinBook(batch=LIMIT)
        self.asked: dict[bool, list[str]] = {True: [], False: []}  # per lane, in order
        self.started: dict[bool, list[str]] = {True: [], False: []}
        self.under_way: list[list[str]] = []  # the batches taken and not settled
        self.waiters: dict[str, list[object]] = {}

    @rule(key=KEYS, lane=st.booleans())
    def ask(self, key: str, lane: bool) -> None:
        if self.book.joining(key):
            return
        self.book.ask(key, lane, key)
        self.asked[lane].append(key)

    @rule()
    def take(self) -> None:
        busy = {self._lane(batch[0]) for batch in self.under_way}
        for batch in self.book.take():
            lane = self._lane(batch[0])
            assert lane not in busy and 1 <= len(batch) <= LIMIT
            assert all(self._lane(key) == lane for key in batch)
            self.started[lane].extend(batch)
            self.under_way.append(batch)
            busy.add(lane)
        for lane in (True, False):  # a lane with work queued is busy after a take
            queued = any(lane_ == lane for lane_, _ in self.book.queued.values())
            assert not queued or lane in busy

    @precondition(lambda self: bool(self.under_way))
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        batch = self.under_way.pop(data.draw(st.integers(0, len(self.under_way) - 1)))
        expected = [w for key in batch for w in self.waiters.pop(key, [])]
        joins, waiters = self.book.settled(batch)
        assert joins == batch and waiters == expected
        assert not any(self.book.joining(key) for key in batch)

    @rule(key=KEYS)
    def wait(self, key: str) -> None:
        if self.book.joining(key):
            waiter = object()
            self.book.wait(key, waiter)
            self.waiters.setdefault(key, []).append(waiter)

    @invariant()
    def one_batch_per_lane_in_order(self) -> None:
        lanes = [self._lane(batch[0]) for batch in self.under_way]
        assert len(lanes) == len(set(lanes))
        assert set(self.book.queued).isdisjoint(self.book.starting)
        for lane in (True, False):  # started: a prefix of what was asked, in order
            assert self.asked[lane][:len(self.started[lane])] == self.started[lane]

    def _lane(self, key: str) -> bool:
        lane, _ = self.book.starting.get(key) or self.book.queued[key]
        return lane


TestJoinBook = JoinBookMachine.TestCase
TestJoinBook.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
