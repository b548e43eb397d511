"""Commit rounds and offset reads of many groups go out through a window (runtime/kafka/
group_offsets.py `in_window`): every call runs, the results keep their order, no more than
`IN_FLIGHT` are under way at once, and the next starts as soon as one ends (not when a
whole wave did)."""

from __future__ import annotations

import asyncio
from functools import partial

from runtime.kafka.group_offsets import IN_FLIGHT, in_window


async def test_calls_run_through_a_window_and_answer_in_order() -> None:
    running, most = 0, 0

    async def call(n: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return n * n

    count = 2 * IN_FLIGHT + 7
    assert await in_window([partial(call, n) for n in range(count)]) == \
        [n * n for n in range(count)]
    assert most == IN_FLIGHT
    assert await in_window([]) == []


async def test_a_slow_call_holds_only_its_own_lane() -> None:
    slow = asyncio.Event()
    done: list[int] = []

    async def call(n: int) -> int:
        if n == 0:
            await slow.wait()
        done.append(n)
        return n

    running = asyncio.ensure_future(in_window([partial(call, n) for n in range(IN_FLIGHT * 3)]))
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(done) == IN_FLIGHT * 3 - 1  # the others went on past the first window
    slow.set()
    assert await running == list(range(IN_FLIGHT * 3))


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
