"""An origin's connection slots by callback (issue 37): its subscriptions take turns, a
ticket's callback runs a loop turn after the hand-over, a cancelled ticket passes on a
slot it was handed and did not use."""

from __future__ import annotations

import asyncio

from actors.delivery.egress.origin import TURN, Call, Slots


async def turn() -> None:
    await asyncio.sleep(0)


async def test_a_free_slot_is_taken_at_once_without_a_ticket() -> None:
    slots = Slots(1)
    assert slots.take("a", Call(lambda: None)) is None
    assert slots.take("a", Call(lambda: None)) is not None and slots.waiting == 1


async def test_waiting_subscriptions_take_turns_each_in_its_own_arrival_order() -> None:
    slots, served = Slots(1), []
    assert slots.take("first", Call(lambda: None)) is None
    for n in range(TURN + 4):  # the first subscription queues more than a turn
        slots.take("big", Call(lambda n=n: served.append(f"big{n}")))
    for n in range(2):
        slots.take("small", Call(lambda n=n: served.append(f"small{n}")))
    for _ in range(TURN + 6):
        slots.give()
        await turn()
    big = [f"big{n}" for n in range(TURN + 4)]
    assert served == [*big[:TURN], "small0", "small1", *big[TURN:]]
    assert slots.waiting == 0


async def test_the_callback_runs_a_turn_after_the_hand_over_not_inside_give() -> None:
    slots, served = Slots(1), []
    slots.take("a", Call(lambda: None))
    slots.take("b", Call(lambda: served.append("b")))
    slots.give()
    assert served == [] and slots.waiting == 0  # handed over, runs soon
    await turn()
    assert served == ["b"]


async def test_a_cancelled_waiting_ticket_is_skipped() -> None:
    slots, served = Slots(1), []
    slots.take("a", Call(lambda: None))
    gone = slots.take("b", Call(lambda: served.append("b")))
    slots.take("c", Call(lambda: served.append("c")))
    assert gone is not None
    gone.cancel()
    assert slots.waiting == 1
    slots.give()
    await turn()
    assert served == ["c"]


async def test_a_ticket_cancelled_after_the_hand_over_passes_the_slot_on() -> None:
    slots, served = Slots(1), []
    slots.take("a", Call(lambda: None))
    handed = slots.take("b", Call(lambda: served.append("b")))
    slots.take("c", Call(lambda: served.append("c")))
    assert handed is not None
    slots.give()  # to b, whose callback has not run yet
    handed.cancel()
    await turn()
    await turn()
    assert served == ["c"]


async def test_a_slot_given_back_with_nobody_waiting_is_free_again() -> None:
    slots = Slots(1)
    slots.take("a", Call(lambda: None))
    slots.give()
    assert slots.take("b", Call(lambda: None)) is None


async def test_slots_handed_over_in_one_turn_run_together_in_order_and_a_failure_stays_alone(
        ) -> None:
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _, context: errors.append(context["exception"]))
    slots, served = Slots(3), []
    for who in "abc":
        assert slots.take(who, Call(lambda: None)) is None

    def boom() -> None:
        raise RuntimeError("boom")

    slots.take("d", Call(lambda: served.append("d")))
    slots.take("e", Call(boom))
    slots.take("f", Call(lambda: (served.append("f"), slots.give())))  # gives back at once
    slots.take("g", Call(lambda: served.append("g")))
    for _ in range(3):
        slots.give()  # three answers in one turn: one loop callback runs d, e and f
    assert served == [] and slots.waiting == 1
    await turn()
    assert served == ["d", "f"]  # f's slot went to g: it runs in the next call, not nested
    assert [str(e) for e in errors] == ["boom"]  # reported; the batch went on
    await turn()
    assert served == ["d", "f", "g"] and slots.waiting == 0
    loop.set_exception_handler(None)
