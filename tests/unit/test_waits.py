"""tests/waits.py: `until` returns the first truthy answer, wakes on its event, and says
what it waited for when it gives up."""

from __future__ import annotations

import asyncio

import pytest

from tests.waits import until


async def test_until_returns_the_first_truthy_answer_of_a_sync_or_async_check() -> None:
    answers = iter([0, [], "found"])
    assert await until(lambda: next(answers), poll_s=0.001) == "found"

    async def ready() -> int:
        return 7

    assert await until(ready) == 7


async def test_until_wakes_on_its_event_without_waiting_out_the_poll() -> None:
    wake = asyncio.Event()
    box: list[int] = []

    async def later() -> None:
        await asyncio.sleep(0)
        box.append(1)
        wake.set()

    task = asyncio.create_task(later())
    # a poll of an hour: only the event can end this wait within the test's timeout
    assert await until(lambda: box, wake=wake, poll_s=3600, timeout_s=3600) == [1]
    await task


async def test_until_names_what_it_waited_for_and_the_last_answer() -> None:
    with pytest.raises(AssertionError, match=r"the answer: not met within [0-9.]+ s \(last: 0\)"):
        await until(lambda: 0, timeout_s=0.01, poll_s=0.001, what="the answer")
