"""Commit rounds and offset reads of many groups (runtime/kafka/group_offsets.py
`in_turns`): every call runs and is under way at once (one round trip for a whole part, as
the embedded broker answers a connection's requests behind its held fetch), the results
keep their order, no more than `PER_TURN` start in one turn of the loop (encoding
thousands at once held it), and a cancel reaches every call."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from runtime.kafka.group_offsets import PER_TURN, in_turns
from tests.waits import until


async def test_every_call_is_under_way_at_once_started_a_few_per_turn() -> None:
    gate = asyncio.Event()
    turns: list[int] = []  # how many calls started in each turn of the loop
    turn = [0]

    async def ticker() -> None:
        while not gate.is_set():
            turn[0] += 1
            await asyncio.sleep(0)

    async def call(n: int) -> int:
        turns.append(turn[0])
        await gate.wait()
        return n * n

    count = 3 * PER_TURN + 7
    ticking = asyncio.ensure_future(ticker())
    running = asyncio.ensure_future(in_turns([partial(call, n) for n in range(count)]))
    await until(lambda: len(turns) == count)
    assert max(turns.count(t) for t in set(turns)) <= PER_TURN  # spread over turns
    gate.set()  # all are waiting at once: one answer lets every one end
    assert await running == [n * n for n in range(count)]
    await ticking
    assert await in_turns([]) == []


async def test_a_cancel_reaches_every_call_under_way() -> None:
    cancelled = 0

    async def call() -> None:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise

    running = asyncio.get_running_loop().create_task(
        in_turns([call for _ in range(PER_TURN + 5)]))
    for _ in range(5):
        await asyncio.sleep(0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert cancelled == PER_TURN + 5


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
