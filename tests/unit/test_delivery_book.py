"""The journal's book of held deliveries (`DeliveryRanges`) under random sequences of
deliveries, filings (at commits, naming cursors to release), flush ticks and a stop:
every delivery comes out exactly once, none is lost or doubled (issue 35)."""

from __future__ import annotations

from collections import Counter

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from runtime.host.journal import (
    RANGE_MAX_RECORDS,
    DeliveryRanges,
    DeliveryRow,
    Event,
    expand,
)

SHIFT = 1_000
CURSORS = [("a_g", "t", 0), ("a_g", "t", 1), ("b_g", "t", 0), ("b_g", "u", 0)]
Key = tuple[str, str, int, int]  # a cursor's delivery: cursor and offset


def row(cursor: tuple[str, str, int], offset: int, status: int) -> DeliveryRow:
    sub, topic, partition = cursor
    return (sub, topic, partition, offset, 5_000 + offset, 900 + offset, 4_000, 3_000,
            status, f"http://x/{sub}")


def keys(events: list[Event]) -> Counter[Key]:
    return Counter((e.subscription or "", e.topic or "", e.partition or 0, e.offset or 0)
                   for event in events for e in expand(event))


class Book(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book = DeliveryRanges()
        self.ledger: list[DeliveryRow] = []
        self.delivered: Counter[Key] = Counter()
        self.written: Counter[Key] = Counter()

    @rule(cursor=st.sampled_from(CURSORS), offset=st.integers(0, 30),
          status=st.sampled_from([200, 200, 204]))
    def deliver(self, cursor: tuple[str, str, int], offset: int, status: int) -> None:
        self.ledger.append(row(cursor, offset, status))  # an offset may come twice
        self.delivered[(*cursor, offset)] += 1

    @rule(released=st.sets(st.sampled_from(CURSORS)))
    def commit(self, released: set[tuple[str, str, int]]) -> None:
        rows, self.ledger = self.ledger, []
        events = self.book.file(rows, SHIFT, released)
        self.written += keys(events)
        assert not released & set(self.book.held)  # a commit leaves none of its held

    @rule(ticks=st.integers(1, 3))
    def tick(self, ticks: int) -> None:
        self.written += keys(self.book.release_older(ticks, SHIFT))

    @precondition(lambda self: not self.ledger)
    @rule()
    def stop(self) -> None:
        self.written += keys(self.book.release_all(SHIFT))
        assert self.written == self.delivered  # every delivery out, exactly once
        assert len(self.book) == 0

    @invariant()
    def nothing_lost_nor_doubled(self) -> None:
        held = Counter((r[0], r[1], r[2], r[3]) for rows in self.book.held.values()
                       for r in rows)
        pending = Counter((r[0], r[1], r[2], r[3]) for r in self.ledger)
        assert self.written + held + pending == self.delivered
        assert all(len(rows) < RANGE_MAX_RECORDS for rows in self.book.held.values())


TestBook = Book.TestCase
