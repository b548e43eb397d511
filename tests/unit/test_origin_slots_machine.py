"""An origin's connection slots (actors/delivery/egress/origin.py, `Slots`) under any mix
of takes, gives, cancels and loop turns: never more holders than the limit, no slot lost
(while anyone waits, every slot is held once the hand-overs ran), each ticket run at
most once and never after its cancel, and each subscription's tickets in arrival order.
Since a push is its own ticket (issue 37), the ticket's state lives on the push."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.delivery.egress.origin import Slots, Ticket

LIMIT = 2
USERS = ("a", "b", "c")


class TurnLoop:
    """The loop `Slots` hands slots over on: callbacks run when the test turns it."""

    def __init__(self) -> None:
        self.ready: list[Callable[[], object]] = []

    def is_running(self) -> bool:
        return True

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.ready.append(callback)

    def turn(self) -> None:
        ready, self.ready = self.ready, []
        for callback in ready:
            callback()


class Probe(Ticket):
    __slots__ = ("machine", "number", "state", "who")

    def __init__(self, machine: SlotsMachine, who: str, number: int) -> None:
        super().__init__()
        self.machine, self.who, self.number = machine, who, number
        self.state = "new"  # waiting, holding, cancelled, done

    def run(self) -> None:
        assert self.state == "waiting", f"{self.who}{self.number} ran while {self.state}"
        first = min(t.number for t in self.machine.tickets
                    if t.who == self.who and t.state == "waiting")
        assert self.number == first, "a subscription's tickets run in arrival order"
        self.state = "holding"


class SlotsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.slots = Slots(LIMIT)
        self.loop = TurnLoop()
        self.slots._loop = self.loop  # type: ignore[assignment]  # the hand-overs' loop
        self.tickets: list[Probe] = []

    def _in(self, state: str) -> list[Probe]:
        return [t for t in self.tickets if t.state == state]

    @rule(who=st.sampled_from(USERS))
    def take(self, who: str) -> None:
        ticket = Probe(self, who, len(self.tickets))
        self.tickets.append(ticket)
        if self.slots.take(who, ticket) is None:
            ticket.state = "holding"  # a slot was free, and nobody waited
        else:
            ticket.state = "waiting"

    @precondition(lambda self: self._in("holding"))
    @rule(data=st.data())
    def give(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self._in("holding")))
        ticket.state = "done"
        self.slots.give()

    @precondition(lambda self: self._in("waiting"))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self._in("waiting")))  # maybe handed one
        ticket.state = "cancelled"
        ticket.cancel()

    @rule()
    def turn(self) -> None:
        self.loop.turn()

    @rule()
    def settle(self) -> None:
        while self.loop.ready:
            self.loop.turn()
        waiting = len(self._in("waiting"))
        assert self.slots.waiting == waiting
        if waiting:
            assert len(self._in("holding")) == LIMIT, "a slot sits free while some wait"

    @invariant()
    def never_more_holders_than_the_limit(self) -> None:
        assert len(self._in("holding")) <= LIMIT


SlotsMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50,
                                          deadline=None)
test_slots_state_machine = SlotsMachine.TestCase
