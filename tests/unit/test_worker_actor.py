"""A worker process as an actor (runtime/host/workers.py): its exit is a message and its
restart a timer message, one second later on the actor's clock."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from runtime.host.workers import LISTEN_ENV, RESTART_DELAY_MS, WorkerActor
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem
from tests.waits import until


async def test_a_worker_that_exits_is_started_again_after_the_restart_delay() -> None:
    clock = FakeClock()
    system = ActorSystem(clock=clock)
    await system.start()
    command = [sys.executable, "-c", "raise SystemExit(3)"]
    env = {**os.environ, LISTEN_ENV: "127.0.0.1:0"}
    ref = await system.spawn(ChildSpec("w", lambda: WorkerActor("w", 0, command, env, 1000)))
    try:
        worker = ref.actor_as(WorkerActor)
        first = worker.process
        assert first is not None
        assert await asyncio.wait_for(first.wait(), 30) == 3  # a real process: real time
        await clock.settle()
        assert worker.timers_pending()  # the restart waits for the clock
        await clock.advance_settled(RESTART_DELAY_MS - 1)
        assert worker.process is first
        await clock.advance_settled(1)
        assert worker.process is not None and worker.process is not first
    finally:
        await system.stop()


async def test_a_worker_that_keeps_dying_quickly_waits_longer_each_time() -> None:
    clock = FakeClock()
    system = ActorSystem(clock=clock)
    await system.start()
    command = [sys.executable, "-c", "raise SystemExit(3)"]
    env = {**os.environ, LISTEN_ENV: "127.0.0.1:0"}
    ref = await system.spawn(ChildSpec("w", lambda: WorkerActor("w", 0, command, env, 1000)))
    try:
        worker = ref.actor_as(WorkerActor)
        for delay_ms in (RESTART_DELAY_MS, 2 * RESTART_DELAY_MS, 4 * RESTART_DELAY_MS):
            process = worker.process
            assert process is not None
            await asyncio.wait_for(process.wait(), 30)
            # its exit reaches the mailbox, which schedules the restart
            await until(worker.timers_pending, timeout_s=10, poll_s=0.01)
            await clock.advance_settled(delay_ms - 1)
            assert worker.process is process
            await clock.advance_settled(1)
            assert worker.process is not process
        assert worker.deaths == 3
    finally:
        await system.stop()


async def test_a_worker_that_ignores_sigterm_is_killed_after_its_stop_deadline(
        tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    command = [sys.executable, "-c",
               "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, "
               "signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); time.sleep(60)",
               str(ready)]
    env = {**os.environ, LISTEN_ENV: "127.0.0.1:0"}
    system = ActorSystem()  # the stop deadline on the real clock: 200 ms
    await system.start()
    ref = await system.spawn(ChildSpec("w", lambda: WorkerActor("w", 0, command, env, 200)))
    worker = ref.actor_as(WorkerActor)
    process = worker.process
    assert process is not None
    await until(ready.exists, timeout_s=30, poll_s=0.02, what="SIGTERM ignored")
    await system.stop()
    assert process.returncode == -signal.SIGKILL
