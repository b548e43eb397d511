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


def test_a_positions_read_is_told_in_parts_that_keep_a_groups_seats_together() -> None:
    from aiokafka import TopicPartition

    from actors.delivery.path.member.io import PART_GROUPS, _parts

    seats = {(f"s{n}", TopicPartition("t", p)): n for n in range(PART_GROUPS + 10)
             for p in range(2)}
    groups = {seat: f"g{seat[0][1:]}" for seat in seats}
    parts = _parts(seats, groups)
    assert [len({groups[s] for s in part}) for part in parts] == [PART_GROUPS, 10]
    assert {s: e for part in parts for s, e in part.items()} == seats
    assert _parts({}, {}) == [{}]
