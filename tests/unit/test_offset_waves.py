"""Commit rounds and offset reads of many groups go out in waves (runtime/kafka/
group_offsets.py `in_waves`): every call runs, the results keep their order, and no more
than `WAVE` are in flight at once."""

from __future__ import annotations

import asyncio
from functools import partial

from runtime.kafka.group_offsets import WAVE, in_waves


async def test_calls_run_in_waves_and_answer_in_order() -> None:
    running, most = 0, 0

    async def call(n: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return n * n

    count = 2 * WAVE + 7
    assert await in_waves([partial(call, n) for n in range(count)]) == \
        [n * n for n in range(count)]
    assert most == WAVE
    assert await in_waves([]) == []
