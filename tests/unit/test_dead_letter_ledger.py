"""The dead-letter ledger (actors/shared/deadletter.py): a record given up again, by a
restarted partition actor, joins the first write of its dead letter instead of a second."""

from __future__ import annotations

import asyncio

import pytest

from actors.shared.deadletter import DeadLetterLedger, WriteAbandoned
from actors.shared.messages import Record


def rec(offset: int, partition: int = 0, timestamp_ms: int = 1000) -> Record:
    return Record("orders", partition, offset, b"k", b"v", (), timestamp_ms, 0)


def pending_write() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


async def test_a_record_given_up_again_finds_the_write_in_flight_then_written() -> None:
    ledger, write = DeadLetterLedger(), pending_write()
    first = ledger.track(rec(5), write)

    again = ledger.find(rec(5))
    assert again is first and not again.done()

    write.set_result(None)
    await asyncio.sleep(0)  # the write's callbacks run
    assert again.done() and again.exception() is None


async def test_the_first_give_up_of_a_record_finds_nothing() -> None:
    ledger = DeadLetterLedger()
    ledger.written(rec(5))

    assert ledger.find(rec(6)) is None
    assert ledger.find(rec(5, partition=1)) is None
    assert ledger.find(rec(5, timestamp_ms=2000)) is None  # the topic was recreated


async def test_a_failed_write_is_forgotten_so_the_next_give_up_writes_again() -> None:
    ledger, write = DeadLetterLedger(), pending_write()
    entry = ledger.track(rec(5), write)

    write.set_exception(OSError("broker gone"))
    await asyncio.sleep(0)

    assert ledger.find(rec(5)) is None
    assert isinstance(entry.exception(), OSError)


async def test_an_abandoned_write_is_forgotten_and_its_waiters_told() -> None:
    ledger, write = DeadLetterLedger(), pending_write()
    entry = ledger.track(rec(5), write)

    write.cancel()
    await asyncio.sleep(0)

    assert ledger.find(rec(5)) is None
    with pytest.raises(WriteAbandoned):
        entry.result()


async def test_a_waiter_cancelled_through_a_shield_leaves_the_write_and_the_entry() -> None:
    """The predecessor's await is cancelled when it crashes; its successor still learns
    how the write ended."""
    ledger, write = DeadLetterLedger(), pending_write()
    entry = ledger.track(rec(5), write)
    predecessor = asyncio.ensure_future(asyncio.shield(entry))
    await asyncio.sleep(0)

    predecessor.cancel()
    await asyncio.gather(predecessor, return_exceptions=True)
    write.set_result(None)
    await asyncio.sleep(0)

    assert ledger.find(rec(5)) is entry and entry.result() is None


async def test_a_commit_forgets_what_it_passed_on_its_partition_only() -> None:
    ledger = DeadLetterLedger()
    for offset in (3, 5, 9):
        ledger.written(rec(offset))
    ledger.written(rec(4, partition=1))

    ledger.forget_below("orders", 0, 6)

    assert [o for o in (3, 5, 9) if ledger.find(rec(o))] == [9]
    assert ledger.find(rec(4, partition=1)) is not None


async def test_the_ledger_is_bounded_and_forgets_the_oldest_first() -> None:
    ledger = DeadLetterLedger(capacity=3)
    for offset in range(5):
        ledger.written(rec(offset))

    assert len(ledger) == 3
    assert [o for o in range(5) if ledger.find(rec(o))] == [2, 3, 4]
