"""The delivery partition's decisions (actors.delivery.path.book), with plain `now` integers:
commits over gaps, pausing, retries and give-ups, Retry-After, drains, and the restart
after a truncated log."""

from __future__ import annotations

import asyncio

import pytest

from actors.delivery.document.settings import cursor_of, retry_policy
from actors.delivery.document.subscription import SubscriptionMethod, TopicConfig
from actors.delivery.path.book import PartitionBook, retry_backoff
from actors.delivery.path.lanes import Mode
from actors.shared.messages import Drain, Record, RetryInfo
from runtime.errors import UsageError
from runtime.kernel.backoff import Backoff


def rec(offset: int, key: bytes | None = b"k") -> Record:
    return Record("orders", 0, offset, key, b"v%d" % offset, (), 0, 0)


def recs(*offsets: int) -> list[Record]:
    return [rec(o) for o in offsets]


def new_book(*, ordering: Mode = "none", window: int = 10, limit: int = 20,
             retries: int = 0, delay_ms: int = 100, position: int | None = 0
             ) -> PartitionBook:
    book = PartitionBook(ordering, window, window, limit, Backoff(delay_ms), retries)
    book.assign(position)
    return book


def started(book: PartitionBook, *offsets: int) -> list[Record]:
    records = recs(*offsets)
    book.take(records)
    assert book.dispatch() == records
    return records


def offsets(records: list[Record]) -> list[int]:
    return [r.offset for r in records]


def drain(deadline_ms: int = 5000) -> Drain:
    return Drain(deadline_ms, asyncio.get_running_loop().create_future())


# -- commits ---------------------------------------------------------------------------------


def test_commit_moves_over_gaps_between_offsets() -> None:
    book = new_book(position=10)
    r10, r11, r13, r14 = started(book, 10, 11, 13, 14)  # 12: a transaction marker
    assert book.finish(r11) is None and book.finish(r13) is None
    assert book.finish(r10) is None  # 14 is still pending: commits wait for the tick
    assert book.request_commit() == 14
    assert book.finish(r14) == 15  # nothing pending: commit now


def test_commit_never_passes_an_unfinished_record() -> None:
    book = new_book()
    first, *rest = started(book, *range(10))
    for record in reversed(rest):
        assert book.finish(record) is None
    assert book.request_commit() is None  # still 0: where the partition started
    assert book.position() == 0
    assert book.finish(first) == 10


def test_a_position_is_requested_only_when_it_moved_forward() -> None:
    book = new_book()
    (record,) = started(book, 0)
    assert book.finish(record) == 1
    assert book.request_commit() is None
    assert book.committed == 1


def test_a_partition_without_a_committed_position_pins_where_it_started() -> None:
    book = new_book(position=None)
    assert book.pin() is None  # nothing fetched: nothing to pin
    book.take(recs(42, 43))
    assert book.pin() == 42
    assert book.pin() is None


def test_a_partition_of_an_earliest_group_pins_nothing_and_commits_its_first_finish() -> None:
    """Issue 37: with `auto.offset.reset=earliest` a later owner starts at the log's
    start too; a pin per new cursor was a commit round of every new group."""
    book = PartitionBook("none", 10, 1, 100, Backoff(100))
    book.assign(None, pin=False)
    book.take(recs(42, 43))
    assert book.pin() is None
    first, _second = book.dispatch()
    assert book.finish(first) is None  # 43 still pending: the position waits
    assert book.request_commit() == 43


def test_a_truncated_log_pins_the_new_start_even_without_pins() -> None:
    book = PartitionBook("none", 10, 1, 100, Backoff(100))
    book.assign(100, pin=False)  # committed before the topic was recreated
    assert book.restart_if_truncated(5) == 100
    book.take(recs(5, 6))
    assert book.pin() == 5


def test_a_refetch_after_a_rewind_takes_only_the_new_records() -> None:
    book = new_book()
    book.take(recs(0, 1, 2))
    assert offsets(book.take(recs(1, 2, 3))) == [3]
    assert offsets(book.dispatch()) == [0, 1, 2, 3]


def test_taking_records_before_assign_says_what_to_call() -> None:
    book = PartitionBook("none", 1, 1, 2, Backoff(100))
    assert not book.accepts_batches
    with pytest.raises(UsageError, match="assign"):
        book.take(recs(0))


def test_assign_happens_once_per_incarnation() -> None:
    book = new_book(position=5)
    assert book.assign(9) is False
    assert book.position() == 5


# -- the log was truncated below the committed position (`_check_reset`) ----------------------


def test_a_position_past_the_log_restarts_at_the_first_fetched_offset() -> None:
    book = new_book(position=100)  # committed before the topic was recreated
    assert book.restart_if_truncated(5) == 100
    book.take(recs(5, 6))
    assert book.position() == 5
    assert book.pin() == 5  # the commit goes back: the old position means nothing now


def test_no_restart_when_the_first_offset_is_at_or_past_the_position() -> None:
    book = new_book(position=100)
    assert book.restart_if_truncated(100) is None
    assert book.restart_if_truncated(150) is None
    assert book.committed == 100


def test_no_restart_once_records_were_taken() -> None:
    book = new_book(position=10)
    book.take(recs(10))
    assert book.restart_if_truncated(3) is None


# -- dispatch and flow control ------------------------------------------------------------


def test_dispatch_starts_what_the_window_allows_as_first_attempts() -> None:
    book = new_book(window=2)
    book.take(recs(0, 1, 2))
    ready = book.dispatch()
    assert offsets(ready) == [0, 1] and [r.attempt for r in ready] == [1, 1]
    assert book.dispatch() == []
    assert book.finish(ready[0]) is None
    assert offsets(book.dispatch()) == [2]


def test_partition_order_starts_one_record_at_a_time() -> None:
    book = new_book(ordering="partition", window=10)
    book.take(recs(0, 1))
    assert offsets(book.dispatch()) == [0]


def test_pauses_at_the_limit_and_resumes_at_half_of_it() -> None:
    book = new_book(window=1, limit=4)
    book.take(recs(0, 1, 2, 3))
    (first,) = book.dispatch()
    assert book.flow() is None  # 3 buffered
    book.take(recs(4))
    assert book.flow() is True and book.paused  # 4 buffered
    assert book.flow() is None
    book.finish(first)
    (second,) = book.dispatch()
    assert book.flow() is None  # 3 buffered: above half
    book.finish(second)
    book.dispatch()
    assert book.flow() is False and not book.paused  # 2 buffered


def test_buffer_limit_is_the_load_factor_times_the_window() -> None:
    method = SubscriptionMethod(uri="http://x")

    def buffer_limit(config: TopicConfig) -> int:
        return cursor_of(config, method).buffer_limit

    assert buffer_limit(TopicConfig(concurrencyFactor=10)) == 20
    assert buffer_limit(TopicConfig(concurrencyFactor=3, loadFactor=1.5)) == 5
    assert buffer_limit(TopicConfig(concurrencyFactor=10, ordering="partition")) == 2


# -- retries -----------------------------------------------------------------------------------


def test_failed_records_are_retried_n_times_then_given_up() -> None:
    book = new_book(retries=3, delay_ms=100)
    (record,) = started(book, 0)
    now, deadlines = 1000, []
    while (deadline := book.retry_at(record, now)) is not None:
        deadlines.append(deadline)
        now = deadline
        book.retrying(record)
    assert deadlines == [1100, 1200, 1300]
    assert record.attempt == 4  # the first attempt and three retries


def test_retry_before_commit_zero_retries_forever() -> None:
    book = new_book(retries=0, delay_ms=100)
    (record,) = started(book, 0)
    record.attempt = 10_000
    assert book.retry_at(record, 5) == 105


def test_a_receiver_that_gives_a_record_up_ends_its_retries_even_when_they_are_endless() -> None:
    book = new_book(retries=0, delay_ms=100)
    (record,) = started(book, 0)
    assert book.retry_at(record, 5, give_up=True) is None
    assert book.retry_at(record, 5) == 105


def test_retry_after_is_a_lower_bound_on_the_delay() -> None:
    book = new_book(delay_ms=100)
    (record,) = started(book, 0)
    assert book.retry_at(record, 1000, retry_after_ms=5000) == 6000
    assert book.retry_at(record, 1000, retry_after_ms=20) == 1100


def test_exponential_backoff_is_capped_at_a_hundred_first_delays_by_default() -> None:
    method = SubscriptionMethod(uri="http://x", delayOnErrorMs=100, backoffMultiplier=2.0)
    backoff = retry_backoff(retry_policy(method))
    assert [backoff.delay_ms(n) for n in (1, 2, 3)] == [100, 200, 400]
    assert backoff.delay_ms(40) == 10_000
    flat = SubscriptionMethod(uri="http://x", delayOnErrorMs=100)
    assert retry_backoff(retry_policy(flat)).max_ms == 0


def test_jitter_takes_from_the_delay_with_the_books_randomness() -> None:
    book = PartitionBook("none", 1, 1, 2, Backoff(100, jitter=1.0), rand=lambda: 0.25)
    book.assign(0)
    (record,) = started(book, 0)
    assert book.retry_at(record, 0) == 75


# -- drain ---------------------------------------------------------------------------------------


async def test_a_drain_waits_for_records_in_flight_and_answers_every_waiter() -> None:
    book = new_book(window=2)
    book.take(recs(0, 1, 2))
    r0, r1 = book.dispatch()
    revoke, shutdown = drain(5000), drain(9000)
    assert book.drain(revoke) == 5000  # wake up at the first deadline
    assert book.drain(shutdown) is None
    assert not book.accepts_batches and book.dispatch() == []
    book.finish(r0)
    assert not book.drained
    book.finish(r1)
    assert book.drained
    assert book.finish_drain() == 2  # 2 was buffered, dropped: the next owner fetches it
    assert revoke.done.result() == 2 and shutdown.done.result() == 2


async def test_a_drain_with_nothing_in_flight_can_finish_at_once() -> None:
    book = new_book()
    (record,) = started(book, 0)
    book.finish(record)
    waiter = drain()
    assert book.drain(waiter) is None and book.drained
    assert book.finish_drain() == 1
    assert waiter.done.result() == 1


async def test_a_drain_at_the_deadline_answers_the_position_so_far() -> None:
    book = new_book(window=2)
    r0, _ = started(book, 0, 1)
    first = drain()
    assert book.drain(first) == 5000
    book.finish(r0)
    assert book.finish_drain() == 1  # the deadline passed with 1 still in flight
    assert first.done.result() == 1
    late = drain()
    assert book.drain(late) is None and not late.done.done()
    book.close()  # the actor stops
    assert late.done.result() == 1


async def test_a_drain_forgets_a_pause_and_drops_the_buffer() -> None:
    book = new_book(window=1, limit=2)
    book.take(recs(0, 1, 2))
    book.dispatch()
    assert book.flow() is True
    book.drain(drain())
    assert not book.paused and book.dispatcher.buffered == 0


async def test_a_waiter_that_gave_up_is_skipped() -> None:
    book = new_book()
    gone, waiting = drain(), drain()
    gone.done.cancel()
    book.drain(gone)
    book.drain(waiting)
    assert book.drained
    assert book.finish_drain() == 0
    assert waiting.done.result() == 0


# -- health: lag, oldest pending, the stall watchdog ----------------------------------------


def test_lag_follows_every_fetch_while_nothing_finishes() -> None:
    book = new_book(position=0)
    book.take(recs(0, 1, 2), highwater=3)
    assert book.lag() == 3
    book.take(recs(3, 4), highwater=50)  # delivery is stuck, the log grows: so does lag
    assert book.lag() == 50


def test_lag_follows_the_high_watermark_read_while_no_batch_comes() -> None:
    book = new_book(position=0)
    book.take(recs(0, 1, 2), highwater=3)
    assert book.note_highwater(2050) == 2050  # paused: the log grew meanwhile
    assert book.note_highwater(40) == 2050  # an older reading never lowers it


def test_oldest_pending_is_the_age_of_the_lowest_unfinished_record() -> None:
    book = new_book(position=0)
    records = [Record("orders", 0, o, b"k", b"v", (), 0, fetched_ms=100 * o) for o in range(3)]
    book.take(records)
    r0, r1, r2 = book.dispatch()
    assert book.oldest_pending_ms(now_ms=1000) == 1000
    book.finish(r1)
    assert book.oldest_pending_ms(now_ms=1000) == 1000  # 0 still waits
    book.finish(r0)
    assert book.oldest_pending_ms(now_ms=1000) == 800  # now 2 is the oldest
    book.finish(r2)
    assert book.oldest_pending_ms(now_ms=1000) is None


def test_the_watchdog_fires_once_when_the_position_stands_still_while_records_wait() -> None:
    book = new_book(position=0)
    (r0,) = started(book, 0)
    assert book.watch(0, stall_after_ms=60_000) is False
    assert book.watch(59_999, stall_after_ms=60_000) is False
    assert book.watch(60_000, stall_after_ms=60_000) is True
    assert book.stalled_since == 0
    assert book.watch(90_000, stall_after_ms=60_000) is False  # once, not on every tick
    book.finish(r0)
    assert book.watch(91_000, stall_after_ms=60_000) is False
    assert book.stalled_since is None


def test_an_idle_partition_never_stalls() -> None:
    book = new_book(position=5)
    assert not any(book.watch(t, stall_after_ms=10) for t in range(0, 1000, 100))


# -- 410 Gone ----------------------------------------------------------------------------------


def test_a_halted_book_dispatches_nothing_and_never_commits_past_the_gone_record() -> None:
    book = new_book(ordering="partition", window=1)
    book.take(recs(0, 1, 2))
    [first] = book.dispatch()
    book.halt(first)
    assert book.dispatch() == []
    assert book.inflight == 0 and book.request_commit() is None
    assert book.position() == 0


# -- filters (issue 26) -------------------------------------------------------------------


def odd(record: Record) -> bool:
    return record.offset % 2 == 1


@pytest.mark.parametrize("ordering", ["none", "partition", "key"])
def test_filtered_records_are_finished_at_intake_and_the_position_passes_them(
        ordering: Mode) -> None:
    book = new_book(ordering=ordering, position=10)
    kept, filtered = book.take_wanted(recs(10, 11, 12, 13, 14), None, odd)
    assert offsets(kept) == [11, 13] and filtered == [10, 12, 14]
    assert book.pending == 2 and book.position() == 11
    first = book.dispatch()
    for record in first:  # partition order: one at a time
        book.finish(record)
    for record in book.dispatch():
        book.finish(record)
    assert book.position() == 15 and book.pending == 0


def test_a_batch_the_filter_refuses_entirely_leaves_nothing_pending() -> None:
    book = new_book(position=0)
    kept, filtered = book.take_wanted(recs(0, 2, 4), None, odd)
    assert kept == [] and filtered == [0, 2, 4]
    assert book.dispatch() == [] and book.pending == 0
    assert book.request_commit() == 5


def test_a_record_read_back_from_the_retry_topic_skips_the_filter() -> None:
    book = new_book(position=0)
    back = rec(0)
    back.retry = RetryInfo("orders", 0, 0, 1, 0, stage=1)
    kept, filtered = book.take_wanted([back], None, odd)
    assert kept == [back] and filtered == []
