"""The control actor's book of unsubscribes under way (actors/delivery/control/
leaving.py): one batch stops at a time, what is asked meanwhile is the next batch, and
every answer waiting is given back exactly once (when its batch stopped, or abandoned)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from actors.delivery.control.leaving import LeaveBook


def test_a_batch_stops_alone_and_what_comes_meanwhile_is_the_next() -> None:
    book: LeaveBook[int] = LeaveBook()
    assert book.ask("a", 1) and book.take() == ["a"]
    assert book.ask("b", 2) and book.ask("c", 3) and not book.ask("a", 4)
    assert book.take() == []  # "a" is still stopping
    assert book.leaving("b") and book.leaving("a") and not book.leaving("d")
    assert book.stopped() == {"a": [1, 4]}
    assert book.take() == ["b", "c"]
    assert not book.ask("c", 5) and book.abandon() == [2, 3, 5]
    assert book.take() == [] and not book.leaving("b")


class Leaves(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book: LeaveBook[int] = LeaveBook()
        self.next_answer = 0
        self.waiting: set[int] = set()
        self.given: list[int] = []

    @rule(key=st.sampled_from("abcde"))
    def ask(self, key: str) -> None:
        self.book.ask(key, self.next_answer)
        self.waiting.add(self.next_answer)
        self.next_answer += 1

    @rule()
    def take(self) -> None:
        stopping = bool(self.book.stopping)
        batch = self.book.take()
        assert not (stopping and batch), "a second batch while one stops"

    @rule()
    def stopped(self) -> None:
        for answers in self.book.stopped().values():
            self.given += answers

    @rule()
    def abandon(self) -> None:
        self.given += self.book.abandon()

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
