"""Light actors: turns on the shared runner (runtime/kernel/turns.py), the hand-over to the
actor's own task when a handler waits, and what a stop, a crash, a cancel or the pace
gate do then. The kernel's other tests run in both modes too (tests/unit/conftest.py)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.errors import ActorDeadError
from runtime.kernel.actor import Actor
from runtime.kernel.gate import Gate
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from tests.waits import until


class Light(Actor):
    light = True

    def __init__(self, name: str = "light", capacity: int = 256, holds: bool = False,
                 ) -> None:
        self.mailbox_capacity = capacity
        super().__init__(name)
        self.seen: list[tuple[Any, asyncio.Task[Any] | None]] = []
        # what a "wait" message waits for
        self.hold: asyncio.Future[None] | None = (
            asyncio.get_running_loop().create_future() if holds else None)
        self.peer: Light | None = None
        self.closed: list[Any] = []

    async def handle(self, message: Any) -> Any:
        self.seen.append((message, asyncio.current_task()))
        if message == "wait":
            assert self.hold is not None
            try:
                await self.hold
            finally:
                self.closed.append(message)
            self.seen.append(("waited", asyncio.current_task()))
        elif message == "boom":
            raise RuntimeError("boom")
        elif isinstance(message, int) and self.peer is not None:
            await self.peer.tell(message)  # waits while the peer's mailbox is full
        return f"re:{message}"

    def messages(self) -> list[Any]:
        return [message for message, _ in self.seen]


async def start(*actors: Actor, pace: Gate | None = None) -> ActorSystem:
    system = ActorSystem(pace=pace)
    await system.start()
    for actor in actors:
        await system.spawn(ChildSpec(actor.name, _made(actor), restart="temporary"))
    return system


def _made(actor: Actor) -> Callable[[], Actor]:
    return lambda: actor


def task_of(actor: Actor) -> asyncio.Task[Any]:
    return next(t for t in asyncio.all_tasks() if t.get_name() == actor.path)


async def test_messages_and_asks_are_handled_on_the_runner_without_the_actors_task() -> None:
    actor = Light()
    system = await start(actor)
    turns = system.root.context.turns
    passes = turns.passes
    for i in range(5):
        await actor.tell(i)
    assert await actor.ask("last") == "re:last"
    assert actor.messages() == [0, 1, 2, 3, 4, "last"]
    assert [task for _, task in actor.seen] == [None] * 6  # no task ran a handler
    assert turns.passes > passes
    await system.stop()


async def test_a_handler_that_waits_goes_on_on_the_actors_task_and_later_messages_wait(
        ) -> None:
    actor = Light(holds=True)
    system = await start(actor)
    for message in (1, "wait", 2, 3):
        await actor.tell(message)
    await until(lambda: "wait" in actor.messages(), timeout_s=5, what="the waiting turn")
    await asyncio.sleep(0.01)
    assert actor.messages() == [1, "wait"]  # 2 and 3 wait behind the handler
    assert actor.hold is not None
    actor.hold.set_result(None)
    assert await actor.ask(4) == "re:4"  # queued while its task worked: handled there
    assert await actor.ask(5) == "re:5"  # idle again: on the runner
    assert actor.messages() == [1, "wait", "waited", 2, 3, 4, 5]
    tasks = dict((m, t) for m, t in actor.seen)
    assert tasks["waited"] is task_of(actor)  # the rest of the turn ran on its task
    assert tasks[1] is None and tasks[5] is None  # before and after: on the runner
    await system.stop()


async def test_a_crash_in_a_turn_fails_the_ask_and_the_actor_at_once() -> None:
    actor = Light()
    system = await start(actor)
    with pytest.raises(RuntimeError, match="boom"):
        await actor.ask("boom")
    assert not actor.alive  # crashed in the turn, before its task woke
    with pytest.raises(ActorDeadError):
        await actor.tell("after")
    await system.stop()


async def test_a_cancel_between_the_hand_over_and_the_task_closes_the_waiting_handler(
        ) -> None:
    actor = Light(holds=True)
    system = await start(actor)
    asked = asyncio.ensure_future(actor.ask("wait"))
    await asyncio.sleep(0)  # the ask is queued; the runner's pass runs next
    await asyncio.sleep(0)  # the pass ran: the turn handed over, the task not woken yet
    assert actor.messages() == ["wait"] and not actor.closed
    task_of(actor).cancel()
    with pytest.raises(ActorDeadError):
        await asyncio.wait_for(asked, 5)
    assert actor.closed == ["wait"]  # its `finally` ran: closed, not left for the collector
    await system.stop()


async def test_a_closed_pace_gate_holds_a_light_actor_until_it_reopens() -> None:
    gate = Gate()
    actor = Light()
    system = await start(actor, pace=gate)
    gate.close()
    await actor.tell(1)
    await actor.tell(2)
    await asyncio.sleep(0.02)
    assert actor.messages() == []
    gate.reopen()
    await until(lambda: actor.messages() == [1, 2], timeout_s=5, what="both after the gate")
    await system.stop()


async def test_a_light_sender_waits_for_room_in_a_light_receiver_and_nothing_is_lost(
        ) -> None:
    receiver = Light("receiver", capacity=2)
    sender = Light("sender")
    sender.peer = receiver
    system = await start(receiver, sender)
    for i in range(200):
        sender.tell_system(i)  # past the sender's bound: the receiver's holds them back
    await until(lambda: len(receiver.seen) == 200, timeout_s=5, what="all 200 forwarded")
    assert receiver.messages() == list(range(200))
    assert any(task is not None for _, task in sender.seen)  # it waited on its task
    await system.stop()


async def test_a_fault_of_the_turn_itself_crashes_the_actor_instead_of_leaving_it_deaf(
        ) -> None:
    actor = Light()
    system = await start(actor)

    def broken(rest: object) -> None:
        raise RuntimeError("the kernel's own fault")

    actor._light_turn = broken  # type: ignore[method-assign]
    await actor.tell(1)
    await until(lambda: actor.state == "crashed", timeout_s=5, what="the actor crashed")
    await system.stop()


class Note:
    """A message that can be watched by a weak reference."""


async def test_an_idle_light_actor_keeps_no_message_it_handed_over_to_its_task() -> None:
    """Handed over twice, by a handler that waits and by the closed pace gate: once the
    task has handled them and the actor rests again, neither message is kept."""
    hold = asyncio.get_running_loop().create_future()
    began: list[int] = []
    handled: list[int] = []

    class Waits(Actor):
        light = True

        async def handle(self, message: Any) -> Any:
            began.append(1)
            if not hold.done():
                await hold  # hands the rest of the turn over to the task
            handled.append(1)

    def resting() -> bool:
        return actor._mailbox.resting is not None

    gate = Gate()
    actor = Waits("waits")
    system = await start(actor, pace=gate)
    notes = [Note(), Note()]
    gone = [weakref.ref(note) for note in notes]
    await actor.tell(notes[0])
    await until(lambda: began == [1], timeout_s=5, what="the turn handed over")
    hold.set_result(None)
    await until(lambda: handled == [1] and resting(), timeout_s=5, what="resting again")
    gate.close()
    await actor.tell(notes[1])  # handed over as it is: the gate holds it
    await until(lambda: not resting(), timeout_s=5, what="the task took the message")
    gate.reopen()
    del notes
    await until(lambda: handled == [1, 1] and resting(), timeout_s=5,
                what="handled on its task, then resting again")
    gc.collect()
    assert [ref() for ref in gone] == [None, None]
    await system.stop()


async def test_stop_after_queued_messages_and_kill_reach_a_light_actor() -> None:
    first, second = Light("first"), Light("second")
    system = await start(first, second)
    for i in range(3):
        first.tell_system(i)
    await first.stop()
    await until(lambda: first.state == "stopped", timeout_s=5, what="first stopped")
    assert first.messages() == [0, 1, 2]
    second.kill("chaos")
    await until(lambda: second.state == "crashed", timeout_s=5, what="second crashed")
    await system.stop()


class Interleaved(Actor):
    """Handles ("sync", sender, n) at once and ("wait", sender, n) after its future
    resolves; notes whether two handlers ever overlap."""

    light = True

    def __init__(self, holds: dict[tuple[int, int], asyncio.Future[None]]) -> None:
        super().__init__("interleaved")
        self.holds = holds
        self.inside = False
        self.overlapped = False
        self.handled: list[tuple[int, int]] = []

    async def handle(self, message: Any) -> Any:
        kind, sender, n = message
        if self.inside:
            self.overlapped = True
        self.inside = True
        try:
            if kind == "wait":
                await self.holds[(sender, n)]
            self.handled.append((sender, n))
        finally:
            self.inside = False


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 3)),
                min_size=1, max_size=40))
def test_turns_and_hand_overs_keep_one_handler_at_a_time_in_order_and_lose_nothing(
        steps: list[tuple[int, bool, int]]) -> None:
    """Three senders tell in random order, some messages wait for a future that resolves
    a random number of loop turns later: each sender's messages are handled in the order
    told, never two handlers at once, every one handled."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        holds: dict[tuple[int, int], asyncio.Future[None]] = {}
        actor = Interleaved(holds)
        system = await start(actor)
        told: list[list[int]] = [[], [], []]
        for sender, waits, turns_later in steps:
            n = len(told[sender])
            if waits:
                hold = holds[(sender, n)] = loop.create_future()
                loop.call_later(turns_later * 0.001, hold.set_result, None)
            actor.tell_system(("wait" if waits else "sync", sender, n))
            told[sender].append(n)
            for _ in range(turns_later):
                await asyncio.sleep(0)
        await until(lambda: len(actor.handled) == len(steps), timeout_s=5,
                    what="every message handled")
        assert not actor.overlapped
        for sender in range(3):
            assert [n for s, n in actor.handled if s == sender] == told[sender]
        await system.stop()

    asyncio.run(run())
