"""The pieces both partition books share (actors.shared.flow): pause hysteresis, the commit
point, and drain waiters."""

from __future__ import annotations

import asyncio

import pytest

from actors.shared.flow import CommitPoint, DrainWaiters, PauseGate


def test_the_gate_pauses_at_the_limit_and_resumes_at_half() -> None:
    gate = PauseGate(10)
    assert [gate.update(level) for level in (9, 10, 12, 6, 5, 4, 9, 10)] == [
        None, True, None, None, False, None, None, True]


def test_an_opened_gate_is_unpaused_without_a_resume() -> None:
    gate = PauseGate(2)
    assert gate.update(2) is True
    gate.open()
    assert not gate.paused and gate.update(1) is None


def test_a_gate_needs_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        PauseGate(0)


def test_the_commit_point_moves_only_forward() -> None:
    point = CommitPoint()
    assert point.advance(None) is None
    assert point.advance(5) == 5
    assert point.advance(5) is None and point.advance(3) is None
    assert point.advance(8) == 8 and point.position == 8


async def test_every_drain_waiter_gets_the_final_position() -> None:
    loop = asyncio.get_running_loop()
    drains = DrainWaiters()
    first, second = loop.create_future(), loop.create_future()
    assert drains.join(100, first) is True
    assert drains.join(200, second) is False
    assert drains.deadline_ms == 100 and drains.draining and drains.pending
    drains.resolve(42)
    assert (first.result(), second.result()) == (42, 42)
    assert not drains.pending and drains.draining


async def test_a_waiter_after_the_resolve_waits_for_the_next_one() -> None:
    loop = asyncio.get_running_loop()
    drains = DrainWaiters()
    drains.join(100, loop.create_future())
    drains.resolve(1)
    late = loop.create_future()
    drains.join(300, late)
    assert not late.done() and drains.deadline_ms == 100
    drains.resolve(2)
    assert late.result() == 2
