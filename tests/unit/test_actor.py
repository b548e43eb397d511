"""Mailbox and actor lifecycle: ordering, stop after earlier messages, dead-actor asks."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

from runtime.errors import ActorDeadError, MailboxFullError, UsageError
from runtime.kernel.actor import Actor, Mailbox, _Envelope
from runtime.kernel.clock import FakeClock, RealClock, settle_within
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from runtime.kernel.tasks import OwnedTasks
from tests.waits import until

pytestmark = pytest.mark.usefixtures("turns_mode")


class Recorder(Actor):
    def __init__(self, name: str = "rec", gate: asyncio.Event | None = None) -> None:
        super().__init__(name)
        self.seen: list[Any] = []
        self.stopped = asyncio.Event()
        self.gate = gate

    async def handle(self, message: Any) -> Any:
        if self.gate is not None:
            await self.gate.wait()
        if message == "boom":
            raise RuntimeError("boom")
        self.seen.append(message)
        return f"re:{message}"

    async def on_stop(self) -> None:
        self.stopped.set()


async def start(actor: Actor, clock: FakeClock | None = None) -> ActorSystem:
    system = ActorSystem(clock=clock)
    await system.start()
    await system.spawn(ChildSpec(actor.name, lambda: actor, restart="temporary"))
    return system


async def test_messages_are_handled_in_order_and_ask_returns_the_reply() -> None:
    actor = Recorder()
    system = await start(actor)
    for i in range(5):
        await actor.tell(i)
    assert await actor.ask("last") == "re:last"
    assert actor.seen == [0, 1, 2, 3, 4, "last"]
    await system.stop()


async def test_stop_is_handled_after_messages_queued_before_it() -> None:
    gate = asyncio.Event()
    actor = Recorder(gate=gate)
    system = await start(actor)
    for i in range(3):
        await actor.tell(i)
    await actor.stop()
    gate.set()
    await actor.stopped.wait()
    assert actor.seen == [0, 1, 2]
    assert actor.state == "stopped"
    await system.stop()


async def test_a_dead_actor_fails_pending_and_later_asks() -> None:
    gate = asyncio.Event()
    actor = Recorder(gate=gate)
    system = await start(actor)
    crash = asyncio.ensure_future(actor.ask("boom"))
    pending = asyncio.ensure_future(actor.ask("never"))
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(RuntimeError, match="boom"):
        await crash
    with pytest.raises(ActorDeadError):
        await pending
    with pytest.raises(ActorDeadError):
        await actor.ask("later")
    await system.stop()


class Holder(Actor):
    """Takes a message and holds it forever."""

    def __init__(self) -> None:
        super().__init__("holder")
        self.holding = asyncio.Event()

    async def handle(self, message: Any) -> Any:
        self.holding.set()
        await asyncio.Event().wait()


async def test_an_ask_being_handled_when_the_actor_is_cancelled_fails_instead_of_hanging(
        ) -> None:
    actor = Holder()
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(actor.run(ready))
    await ready
    asked = asyncio.ensure_future(actor.ask("held"))
    await actor.holding.wait()
    task.cancel()  # as an owner does after the shutdown deadline
    with pytest.raises(ActorDeadError, match="cancelled before replying"):
        await asyncio.wait_for(asked, 2)
    with pytest.raises(asyncio.CancelledError):
        await task


async def held_at_the_gate(capacity: int) -> tuple[Recorder, asyncio.Event, ActorSystem]:
    """A running recorder with a `capacity` mailbox, holding message 1 at its gate."""
    gate = asyncio.Event()
    actor = Recorder(gate=gate)
    actor._mailbox = Mailbox(capacity)
    system = await start(actor)
    actor.tell_nowait(1)
    await asyncio.sleep(0)  # the actor takes message 1 and blocks on the gate
    return actor, gate, system


async def test_tell_nowait_on_a_full_mailbox_raises() -> None:
    actor, gate, system = await held_at_the_gate(2)
    actor.tell_nowait(2)
    actor.tell_nowait(3)
    with pytest.raises(MailboxFullError):
        actor.tell_nowait(4)
    gate.set()
    assert await actor.ask("end") == "re:end"
    assert actor.seen == [1, 2, 3, "end"]
    await system.stop()


async def test_ask_nowait_passes_a_full_mailbox_and_is_answered_in_turn() -> None:
    actor, gate, system = await held_at_the_gate(1)
    actor.tell_nowait(2)  # the mailbox is full now
    reply = actor.ask_nowait("status")
    gate.set()
    assert await reply == "re:status"
    assert actor.seen == [1, 2, "status"]  # after the messages queued before it
    await system.stop()


async def test_settle_within_cancels_the_replies_not_in_by_the_deadline() -> None:
    gate = asyncio.Event()
    slow, quick = Recorder("slow", gate=gate), Recorder("quick")
    system = await start(slow)
    await system.spawn(ChildSpec("quick", lambda: quick, restart="temporary"))
    late, early = slow.ask_nowait("a"), quick.ask_nowait("b")
    await settle_within(RealClock(), [late, early], timeout_ms=50)
    assert early.result() == "re:b" and late.cancelled()
    gate.set()
    assert await slow.ask("c") == "re:c"  # it handled the question; the reply went nowhere
    assert slow.seen == ["a", "c"]
    await system.stop()


async def test_ask_nowait_of_a_dead_actor_raises_and_a_death_fails_the_reply() -> None:
    gate = asyncio.Event()
    actor = Recorder(gate=gate)
    system = await start(actor)
    crash = actor.ask_nowait("boom")
    pending = actor.ask_nowait("never")
    gate.set()
    with pytest.raises(RuntimeError, match="boom"):
        await crash
    with pytest.raises(ActorDeadError):
        await pending
    with pytest.raises(ActorDeadError):
        actor.ask_nowait("later")
    await system.stop()


async def test_put_waits_for_space_in_a_bounded_mailbox() -> None:
    box = Mailbox(1)
    await box.put(_Envelope("a"))
    blocked = asyncio.ensure_future(box.put(_Envelope("b")))
    await asyncio.sleep(0)
    assert not blocked.done()
    assert box.get_nowait().message == "a"
    await blocked
    assert box.get_nowait().message == "b"


def test_mailbox_capacity_must_be_positive() -> None:
    with pytest.raises(UsageError):
        Mailbox(0)


async def test_an_error_in_on_start_comes_out_of_start() -> None:
    class Broken(Actor):
        async def on_start(self) -> None:
            raise ValueError("cannot connect")

    system = ActorSystem()
    await system.start()
    with pytest.raises(Exception, match="cannot connect"):
        await system.spawn(ChildSpec("broken", lambda: Broken("broken")))
    assert system.root.children() == []
    await system.stop()


async def test_timers_come_back_as_messages_at_their_virtual_time() -> None:
    clock = FakeClock()
    actor = Recorder()
    system = await start(actor, clock)
    actor.schedule(100, "t100")
    actor.schedule(50, "t50")
    await clock.settle()
    assert actor.seen == []
    clock.advance(60)  # t50 is due: queued at once, before anything sent after the move
    await actor.ask("sync")
    await clock.settle()
    assert actor.seen == ["t50", "sync"]
    await clock.advance_settled(40)
    assert actor.seen == ["t50", "sync", "t100"]
    await system.stop()


async def test_an_owned_task_that_fails_crashes_the_actor() -> None:
    actor = Recorder()
    system = await start(actor)

    async def fail() -> None:
        raise RuntimeError("task failed")

    actor.spawn(fail())
    await actor.stopped.wait()
    assert actor.state == "crashed"
    await system.stop()


async def test_repr_shows_path_state_and_mailbox() -> None:
    actor = Recorder("orders-3")
    system = await start(actor)
    assert repr(actor) == "<Recorder /root/orders-3 running mailbox=0/256>"
    await system.stop()


async def test_a_sender_waiting_for_room_fails_when_the_actor_dies() -> None:
    gate = asyncio.Event()
    actor = Recorder(gate=gate)
    actor._mailbox = Mailbox(1)
    system = await start(actor)
    await actor.tell("boom")
    await asyncio.sleep(0)  # the actor holds "boom" at the gate; it will crash on it
    await actor.tell(2)  # fills the mailbox
    blocked = asyncio.ensure_future(actor.tell(3))
    await asyncio.sleep(0)
    assert not blocked.done()
    gate.set()
    with pytest.raises(ActorDeadError):
        await asyncio.wait_for(blocked, 2)
    await system.stop()


async def test_an_earlier_timer_cuts_the_wait_for_a_later_one_short() -> None:
    clock = FakeClock()
    actor = Recorder()
    system = await start(actor, clock)
    actor.schedule(1000, "late")
    await clock.settle()  # the alarm of 1000 is set
    actor.schedule(10, "early")
    await clock.advance_settled(10)
    assert actor.seen == ["early"]
    await clock.advance_settled(990)
    assert actor.seen == ["early", "late"]
    await clock.advance_settled(5000)  # nothing left: the loop waits without a deadline
    actor.schedule(clock.monotonic_ms() + 5, "after idle")
    await clock.advance_settled(5)
    assert actor.seen == ["early", "late", "after idle"]
    await system.stop()


async def test_on_the_real_clock_an_earlier_timer_cuts_the_wait_short() -> None:
    """On the real clock a timer is the event loop's alarm: one scheduled earlier than
    one already waiting still comes first, and on time."""
    actor = Recorder()
    system = await start(actor)  # the real clock
    now = actor.context.clock.monotonic_ms()
    actor.schedule(now + 10_000, "late")  # the alarm is set at once
    await asyncio.sleep(0)  # the loop turns once while only the 10 s alarm waits
    actor.schedule(now + 30, "early")
    await until(lambda: actor.seen, timeout_s=5, poll_s=0.01)
    assert actor.seen == ["early"]  # the late one has not rung: it did not hold the early
    await system.stop()
    assert actor.seen == ["early"]


async def test_stopping_an_actor_cancels_its_timers() -> None:
    clock = FakeClock()
    actor = Recorder()
    system = await start(actor, clock)
    actor.schedule(1000, "never")
    await clock.settle()
    assert actor.timers_pending()
    assert not actor._tasks  # a timer is an alarm, no task
    await system.stop()
    assert not actor.timers_pending()
    await clock.advance_settled(1000)
    assert actor.seen == []
    assert "alarms=0" in repr(clock)


def test_the_mailbox_stays_fifo_across_compactions_and_empties() -> None:
    box = Mailbox(10_000)
    sent = taken = 0
    for burst in (1, 63, 64, 65, 200, 3):  # some never empty before the next burst
        for _ in range(burst):
            box.put_nowait(_Envelope(sent))
            sent += 1
        for _ in range(burst // 2 + 1):
            assert box.get_nowait().message == taken
            taken += 1
        assert len(box) == sent - taken
    while len(box):
        assert box.get_nowait().message == taken
        taken += 1
    assert taken == sent
    assert box._items == [] and box._head == 0  # emptied: nothing kept
    with pytest.raises(IndexError):
        box.get_nowait()


def test_drain_returns_only_what_was_not_taken() -> None:
    box = Mailbox(10)
    for n in range(5):
        box.put_nowait(_Envelope(n))
    box.get_nowait()
    box.get_nowait()
    assert [e.message for e in box.drain()] == [2, 3, 4]
    assert len(box) == 0 and box.has_room()


async def test_an_idle_actor_keeps_no_reference_to_its_last_message() -> None:
    class Payload:
        pass

    actor = Recorder()
    system = await start(actor)
    payload = Payload()
    gone = weakref.ref(payload)
    await actor.ask(payload)
    actor.seen.clear()
    del payload
    await asyncio.sleep(0)
    gc.collect()
    assert gone() is None  # the loop waits for the next message without the last one
    await system.stop()


async def test_an_answer_spawned_just_before_the_actor_ends_fails_instead_of_hanging(
        recwarn: pytest.WarningsRecorder) -> None:
    """Its task cancelled before it ran (the actor crashed in the same turn): the
    answer's coroutine never started, so only the task's end can fail the future (the
    asker waited for ever), and the coroutine is closed, not left "never awaited" (the
    30-minute chaos run's warning)."""
    started: list[str] = []
    answers: list[asyncio.Future[str]] = []

    async def work() -> str:
        started.append("work")
        return "done"

    class SpawnsThenCrashes(Actor):
        async def handle(self, message: Any) -> Any:
            answers.append(self.spawn_answer(work()))
            raise RuntimeError("crash in the same turn")

    actor = SpawnsThenCrashes("s")
    system = await start(actor)
    await actor.tell("go")
    await until(lambda: bool(answers), timeout_s=5, poll_s=0.001, what="the answer spawned")
    with pytest.raises(ActorDeadError):
        await asyncio.wait_for(answers[0], 5)
    await system.stop()
    gc.collect()
    assert started == []
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


async def test_owned_tasks_outside_an_actor_are_cancelled_and_awaited_at_close() -> None:
    owned = OwnedTasks()
    started, ended = asyncio.Event(), []

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("cancelled")

    task = owned.spawn(forever(), name="forever")
    await started.wait()
    assert len(owned) == 1
    await owned.aclose()
    assert task.cancelled() and ended == ["cancelled"] and len(owned) == 0
    late = forever()
    with pytest.raises(UsageError):
        owned.spawn(late)
