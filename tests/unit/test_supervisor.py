"""Supervisor strategies, restart types and budget escalation, on a fake clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from runtime.errors import (
    ActorDeadError,
    ActorStartError,
    RestartBudgetExceeded,
    SupervisorError,
)
from runtime.kernel.actor import Actor
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import RETRY_CAP_MS, ChildRef, ChildSpec, Strategy, Supervisor
from runtime.kernel.system import ActorSystem
from tests.waits import until

pytestmark = pytest.mark.usefixtures("turns_mode")


class Worker(Actor):
    """Counts its incarnations; crashes on 'crash', exits normally on 'quit'."""

    log: list[str]

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(name)
        self.log = log

    async def on_start(self) -> None:
        self.log.append(f"start {self.name}")

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError(f"{self.name} crashed")
        if message == "quit":
            await self.stop()
        return self.name

    async def on_stop(self) -> None:
        self.log.append(f"stop {self.name}")


def specs(log: list[str], names: str = "abc", restart: str = "permanent") -> list[ChildSpec]:
    return [ChildSpec(n, lambda n=n: Worker(n, log), restart=restart)  # type: ignore[misc]
            for n in names]


async def run_tree(strategy: Strategy, log: list[str], clock: FakeClock | None = None,
                   restart: str = "permanent", intensity: int = 5,
                   events: list[Any] | None = None) -> tuple[ActorSystem, Supervisor]:
    sink = events if events is not None else []
    system = ActorSystem(clock=clock or FakeClock(), emit=sink.append)
    await system.start()
    sup = Supervisor("sup", strategy, intensity=intensity, period_ms=1000,
                     children=specs(log, restart=restart))
    # temporary under the root, so an escalation is observable instead of restarted
    await system.spawn(ChildSpec("sup", lambda: sup, restart="temporary"))
    return system, sup


async def crash_and_settle(sup: Supervisor, name: str) -> None:
    """Crash `name` and return once its supervisor handled the crash: every child the
    strategy restarts is started again, not only `name`."""
    old = sup.child(name)
    await old.tell("crash")

    def replaced() -> bool:
        return sup.has_child(name) and sup.child(name) is not old and sup.child(name).alive

    await until(replaced, timeout_s=2, poll_s=0.005, what=f"{name} restarted in {sup!r}")
    # a barrier through the supervisor's mailbox: answered after the handler of the crash,
    # which restarts the affected children in order (one_for_all: some after `name`)
    await sup.stop_children([])
    await sup.child(name).ask("ping")


async def test_children_start_in_order_and_stop_in_reverse() -> None:
    log: list[str] = []
    system, _ = await run_tree("one_for_one", log)
    await system.stop()
    assert log == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


async def test_one_for_one_restarts_only_the_crashed_child() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    log.clear()
    await crash_and_settle(sup, "b")
    assert log == ["stop b", "start b"]
    await system.stop()


async def test_one_for_all_restarts_every_child_in_order() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_all", log)
    log.clear()
    await crash_and_settle(sup, "b")
    assert log == ["stop b", "stop c", "stop a", "start a", "start b", "start c"]
    await system.stop()


async def test_rest_for_one_restarts_the_child_and_those_started_after_it() -> None:
    log: list[str] = []
    system, sup = await run_tree("rest_for_one", log)
    log.clear()
    await crash_and_settle(sup, "b")
    assert log == ["stop b", "stop c", "start b", "start c"]
    await system.stop()


async def test_a_restart_builds_a_new_actor_from_the_factory() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    before = sup.child("a")
    await crash_and_settle(sup, "a")
    assert sup.child("a") is not before
    with pytest.raises(ActorDeadError):
        await before.ask("ping")
    await system.stop()


async def test_transient_children_are_not_restarted_after_a_normal_exit() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log, restart="transient")
    await sup.child("a").ask("quit")
    await until(lambda: not sup.has_child("a"), timeout_s=2, poll_s=0.005)
    assert not sup.has_child("a")
    await crash_and_settle(sup, "b")  # but a crash is restarted
    await system.stop()


async def test_temporary_children_are_never_restarted() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log, restart="temporary")
    await sup.child("c").tell("crash")
    await until(lambda: not sup.has_child("c"), timeout_s=2, poll_s=0.005)
    assert not sup.has_child("c")
    assert log.count("start c") == 1
    await system.stop()


async def test_exceeding_the_restart_budget_escalates_to_the_parent() -> None:
    clock = FakeClock()
    log: list[str] = []
    events: list[Any] = []
    system, sup = await run_tree("one_for_one", log, clock=clock, intensity=2, events=events)
    await crash_and_settle(sup, "a")
    clock.advance(100)
    await crash_and_settle(sup, "a")
    clock.advance(100)
    await sup.child("a").tell("crash")  # third restart within 1000 ms: over budget

    def escalated() -> bool:
        return any(e.type == "actor_crashed" and "RestartBudgetExceeded" in (e.reason or "")
                   for e in events)

    # the supervisor's state says "crashed" as it fails, before its parent journals why
    await until(lambda: sup.state == "crashed" and escalated(), timeout_s=2, poll_s=0.005)
    assert sup.state == "crashed"
    assert escalated()
    await system.stop()


async def test_restarts_spread_beyond_the_period_stay_within_budget() -> None:
    clock = FakeClock()
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log, clock=clock, intensity=2)
    for _ in range(5):
        await crash_and_settle(sup, "a")
        clock.advance(600)
    assert sup.state == "running"
    assert log.count("start a") == 6
    await system.stop()


def test_budget_error_is_a_supervisor_error() -> None:
    assert issubclass(RestartBudgetExceeded, SupervisorError)


class FailsToStart(Actor):
    """Fails in on_start while `failures` has entries left."""

    def __init__(self, name: str, failures: list[int]) -> None:
        super().__init__(name)
        self.failures = failures

    async def on_start(self) -> None:
        if self.failures:
            self.failures.pop()
            raise ConnectionError("broker unreachable")

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError("crashed")
        return "ok"


async def test_a_child_that_cannot_start_fails_the_caller_not_the_supervisor() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    with pytest.raises(ActorStartError, match="broker unreachable"):
        await sup.start_child(ChildSpec("x", lambda: FailsToStart("x", [1])))
    assert sup.state == "running" and sup.children() == ["a", "b", "c"]
    await system.stop()


async def test_a_failed_restart_is_retried_after_a_backoff_within_the_budget() -> None:
    clock = FakeClock()
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log, clock=clock, intensity=5)
    failures = [1, 1]  # the next two starts fail
    started = {"n": 0}

    def factory() -> Actor:
        started["n"] += 1
        return FailsToStart("x", failures if started["n"] > 1 else [])

    await sup.start_child(ChildSpec("x", factory))
    first = sup.child("x")
    await first.tell("crash")
    for _ in range(400):  # each failed start waits for its backoff on the fake clock
        x = sup.child("x") if sup.has_child("x") else first
        if x is not first and x.state == "running":
            break
        await clock.advance_settled(RETRY_CAP_MS // 10)
    assert await sup.child("x").ask("ping") == "ok"
    assert started["n"] == 4  # the first incarnation, two failed starts, one that worked
    assert sup.state == "running"
    await system.stop()


async def test_stop_children_stops_them_in_parallel() -> None:
    class MeetsOnStop(Worker):
        """Stops only when the other one is stopping too: a serial stop would hang."""

        async def on_stop(self) -> None:
            await asyncio.wait_for(both.wait(), 2)
            await super().on_stop()

    both = asyncio.Barrier(2)
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    for name in ("p", "q"):
        await sup.start_child(ChildSpec(name, lambda n=name: MeetsOnStop(n, log)))  # type: ignore[misc]
    await sup.stop_children(["p", "q"])
    assert sup.children() == ["a", "b", "c"]
    assert "stop p" in log and "stop q" in log
    await system.stop()


class Lingers(Worker):
    """Its stop waits for `gate` (a tree draining for seconds)."""

    def __init__(self, name: str, log: list[str], gate: asyncio.Event) -> None:
        super().__init__(name, log)
        self.gate = gate

    async def on_stop(self) -> None:
        await self.gate.wait()
        await super().on_stop()


async def test_a_slow_stop_holds_neither_other_stops_nor_starts_and_a_name_waits_its_turn(
        ) -> None:
    """Stops run beside the mailbox: while one child drains, its siblings start and
    stop (they queued behind it: 50 unsubscribes took one drain after another); a child
    of the same name starts only once the one before stopped."""
    gate, log = asyncio.Event(), []
    system, sup = await run_tree("one_for_one", log)
    await sup.start_child(ChildSpec("slow", lambda: Lingers("slow", log, gate)))
    slow = asyncio.ensure_future(sup.stop_child("slow"))
    await until(lambda: "slow" not in sup.children())
    await asyncio.wait_for(sup.start_child(ChildSpec("x", lambda: Worker("x", log))), 5)
    await asyncio.wait_for(sup.stop_child("x"), 5)
    assert "stop x" in log and not slow.done()
    again = asyncio.ensure_future(
        sup.start_child(ChildSpec("slow", lambda: Worker("slow", log))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not again.done() and log.count("start slow") == 1
    gate.set()
    await slow
    await again
    assert log[-2:] == ["stop slow", "start slow"]
    await system.stop()


async def test_a_supervisor_stopping_lets_its_childrens_stops_under_way_finish() -> None:
    gate, log = asyncio.Event(), []
    system, sup = await run_tree("one_for_one", log)
    await sup.start_child(ChildSpec("slow", lambda: Lingers("slow", log, gate)))
    slow = asyncio.ensure_future(sup.stop_child("slow"))
    await until(lambda: "slow" not in sup.children())
    stopping = asyncio.ensure_future(system.stop())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not stopping.done()  # the supervisor waits for the drain under way
    gate.set()
    await stopping
    await slow
    assert "stop slow" in log  # stopped gracefully, not cancelled


async def test_start_children_starts_them_in_parallel_and_reports_each_failure() -> None:
    class MeetsOnStart(Worker):
        """Ready only when the other one is starting too: a serial start would hang."""

        async def on_start(self) -> None:
            await asyncio.wait_for(both.wait(), 2)
            await super().on_start()

    both = asyncio.Barrier(2)
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    errors = await sup.start_children([
        ChildSpec("p", lambda: MeetsOnStart("p", log)),
        ChildSpec("bad", lambda: FailsToStart("bad", [1])),
        ChildSpec("q", lambda: MeetsOnStart("q", log))])
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], ActorStartError) and "broker unreachable" in str(errors[1])
    assert sup.children() == ["a", "b", "c", "p", "q"]
    assert await sup.child("q").ask("ping") == "q"
    await system.stop()


async def test_a_supervisor_that_starts_together_starts_its_children_at_once() -> None:
    """`start_together`: every first child starts at once (two that are ready only when
    both start would hang one after another); a failure fails the supervisor's start and
    stops those that started."""
    class MeetsOnStart(Worker):
        async def on_start(self) -> None:
            await asyncio.wait_for(both.wait(), 2)
            await super().on_start()

    both = asyncio.Barrier(2)
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    tree = Supervisor("tree", "one_for_all", start_together=True, children=[
        ChildSpec("p", lambda: MeetsOnStart("p", log)),
        ChildSpec("q", lambda: MeetsOnStart("q", log))])
    await sup.start_child(ChildSpec("tree", lambda: tree))
    assert tree.children() == ["p", "q"] and {"start p", "start q"} <= set(log)
    failing = Supervisor("failing", "one_for_all", start_together=True, children=[
        ChildSpec("r", lambda: Worker("r", log)),
        ChildSpec("bad", lambda: FailsToStart("bad", [1]))])
    with pytest.raises(ActorStartError, match="broker unreachable"):
        await sup.start_child(ChildSpec("failing", lambda: failing))
    assert "start r" in log and "stop r" in log and not sup.has_child("failing")
    await system.stop()


async def test_a_child_that_never_becomes_ready_is_cancelled_after_its_start_timeout() -> None:
    class Hangs(Actor):
        async def on_start(self) -> None:
            await asyncio.Event().wait()

    clock = FakeClock()
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log, clock=clock)
    start = asyncio.ensure_future(
        sup.start_child(ChildSpec("h", lambda: Hangs("h"), start_timeout_ms=50)))
    await clock.advance_settled(49)  # the timeout runs on the injected clock
    assert not start.done()
    await clock.advance_settled(1)
    with pytest.raises(ActorStartError, match="not ready within 50 ms"):
        await start
    assert not sup.has_child("h") and sup.state == "running"
    await system.stop()


async def test_children_stopped_together_past_their_deadline_are_cancelled_in_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    class Stuck(Worker):
        async def on_stop(self) -> None:
            await asyncio.Event().wait()

    clock, log = FakeClock(), []
    system, sup = await run_tree("one_for_one", log, clock=clock)
    names = [f"s{n}" for n in range(8)]
    for name in names:
        await sup.start_child(ChildSpec(name, lambda n=name: Stuck(n, log),  # type: ignore[misc]
                                        shutdown_ms=100))
    stopping = asyncio.ensure_future(sup.stop_children(names))
    await clock.advance_settled(99)
    assert not stopping.done()
    with caplog.at_level(logging.WARNING, logger="runtime.kernel.supervisor"):
        await clock.advance_settled(1)
        await stopping
    warnings = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert warnings == ["/root/sup/s0, /root/sup/s1, /root/sup/s2, /root/sup/s3, "
                        "/root/sup/s4 and 3 more did not stop within 100 ms: cancelled"]
    assert not any(sup.has_child(n) for n in names)
    await system.stop()


async def test_stopping_a_child_cancels_its_pending_restart() -> None:
    clock = FakeClock()
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log, clock=clock, intensity=5)
    built = {"n": 0}

    def factory() -> Actor:
        built["n"] += 1
        return FailsToStart("x", [] if built["n"] == 1 else [1])

    await sup.start_child(ChildSpec("x", factory))
    await sup.child("x").tell("crash")
    # the restart fails and waits for its backoff
    await until(lambda: built["n"] == 2 and not sup.has_child("x"), timeout_s=2, poll_s=0.005)
    await sup.stop_child("x")  # e.g. the partition was revoked meanwhile
    await clock.advance_settled(RETRY_CAP_MS * 2)
    assert built["n"] == 2 and not sup.has_child("x")
    await system.stop()


async def test_a_factory_that_raises_is_a_start_error_not_a_supervisor_crash() -> None:
    def broken() -> Actor:
        raise ValueError("maxDelayOnErrorMs below delayOnErrorMs")

    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    with pytest.raises(ActorStartError, match="failed to build"):
        await sup.start_child(ChildSpec("bad", broken))
    assert sup.state == "running" and sup.children() == ["a", "b", "c"]
    await system.stop()


async def test_on_exit_tells_how_a_child_ended_before_the_restart_decision() -> None:
    log: list[str] = []
    system, sup = await run_tree("one_for_one", log)
    ended: list[BaseException | None] = []
    await sup.start_child(ChildSpec("t", lambda: Worker("t", log), restart="temporary",
                                    on_exit=ended.append))
    await sup.child("t").tell("crash")
    await until(lambda: ended, timeout_s=2, poll_s=0.005)
    assert len(ended) == 1 and ended[0] is not None and not sup.has_child("t")
    await system.stop()


async def test_a_ref_through_its_supervisors_ref_follows_that_supervisors_restart() -> None:
    """A supervisor restarted by its parent is a new actor: a ref holding the old one
    finds no child (riders of the instance member lost their member that way when the
    `groups` supervisor was killed: chaos seed 1560064320); a ref through the
    supervisor's own ref finds the new incarnation's child."""
    log: list[str] = []
    system = ActorSystem(clock=FakeClock())
    await system.start()
    inner = await system.spawn(ChildSpec("inner", lambda: Supervisor(
        "inner", "one_for_one", children=specs(log, "a"))))
    followed, fixed = ChildRef(inner, "a"), ChildRef(inner.actor_as(Supervisor), "a")
    old, old_inner = followed.actor, inner.actor

    old_inner.kill("test")
    await until(lambda: system.root.has_child("inner") and inner.actor is not old_inner
                and inner.actor_as(Supervisor).has_child("a"), timeout_s=2, poll_s=0.005,
                what="inner restarted with its child")
    assert followed.actor is not old and await followed.ask("ping") == "a"
    with pytest.raises(ActorDeadError):
        fixed.tell_nowait("dropped")  # the old incarnation has no child any more
    fixed.tell_system("dropped")  # no incarnation runs there: dropped, not raised
    await system.stop()


async def test_a_ref_that_told_an_incarnation_finds_the_next_one_after_a_restart() -> None:
    """A ref keeps the incarnation it found last (issue 37: no look-up per tell), weakly,
    and looks again once that one no longer runs: a restart, a stop under way."""
    log: list[str] = []
    system = ActorSystem(clock=FakeClock())
    await system.start()
    sup = await system.spawn(ChildSpec("sup", lambda: Supervisor(
        "sup", "one_for_one", children=specs(log, "a"))))
    ref = ChildRef(sup, "a")
    first = ref.actor
    assert ref.actor is first and await ref.ask("ping") == "a"
    ref.tell_nowait("crash")
    await until(lambda: sup.actor_as(Supervisor).child("a") is not first
                and sup.actor_as(Supervisor).child("a").state == "running",
                timeout_s=2, poll_s=0.005, what="a restarted")
    assert ref.actor is not first and await ref.ask("ping") == "a"
    assert log == ["start a", "stop a", "start a"]
    second = ref.actor
    await second.stop()  # stopping: refused as by the actor itself, not told to it
    with pytest.raises(ActorDeadError):
        ref.tell_nowait("late")
    await system.stop()
