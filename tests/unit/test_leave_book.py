"""The control actor's book of unsubscribes under way (actors/delivery/control/
leaving.py): what is asked while a batch stops is a batch of its own at once, and every
answer waiting is given back exactly once (when its batch stopped, or abandoned), batches
stopping side by side and ending in any order."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from actors.delivery.control.leaving import LeaveBook


def test_what_comes_while_a_batch_stops_is_a_batch_of_its_own_at_once() -> None:
    book: LeaveBook[int] = LeaveBook()
    assert book.ask("a", 1) and book.take() == ["a"]
    assert book.ask("b", 2) and book.ask("c", 3) and not book.ask("a", 4)
    assert book.leaving("b") and book.leaving("a") and not book.leaving("d")
    assert book.take() == ["b", "c"]  # beside "a", still stopping
    assert book.take() == []
    assert book.stopped(("a",)) == {"a": [1, 4]}
    assert not book.ask("c", 5) and book.abandon() == [2, 3, 5]
    assert book.take() == [] and not book.leaving("b")


class Leaves(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book: LeaveBook[int] = LeaveBook()
        self.next_answer = 0
        self.waiting: set[int] = set()
        self.given: list[int] = []
        self.batches: list[tuple[str, ...]] = []  # taken, not stopped yet

    @rule(key=st.sampled_from("abcde"))
    def ask(self, key: str) -> None:
        self.book.ask(key, self.next_answer)
        self.waiting.add(self.next_answer)
        self.next_answer += 1

    @rule()
    def take(self) -> None:
        queued, stopping = set(self.book.queued), set(self.book.stopping)
        batch = self.book.take()
        assert set(batch) == queued and not queued & stopping, "every queued leave, once"
        if batch:
            self.batches.append(tuple(batch))

    @rule(data=st.data())
    def stopped(self, data: st.DataObject) -> None:
        if not self.batches:
            return
        batch = self.batches.pop(data.draw(st.integers(0, len(self.batches) - 1)))
        for answers in self.book.stopped(batch).values():  # batches end in any order
            self.given += answers

    @rule()
    def abandon(self) -> None:
        self.given += self.book.abandon()
        self.batches.clear()

    @invariant()
    def every_answer_is_given_once(self) -> None:
        assert len(self.given) == len(set(self.given))
        held = [a for book in (self.book.queued, self.book.stopping)
                for answers in book.values() for a in answers]
        assert sorted(held + self.given) == sorted(self.waiting)

    @invariant()
    def a_key_is_queued_or_stopping_not_both(self) -> None:
        assert not set(self.book.queued) & set(self.book.stopping)


TestLeaves = Leaves.TestCase
