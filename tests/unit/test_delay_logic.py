"""Delay decisions (actors.delay.book), driven by a fake clock: due, not due, cascade,
recycle, bad headers, commit positions, pausing, and a wall clock that steps back."""

from __future__ import annotations

import pytest

from actors.delay.book import (
    DELAY_DUE_MS,
    DELAY_ERROR,
    DELAY_TARGET,
    MIN_RECYCLE_MS,
    DelayBook,
    Output,
    Routing,
    fitting_level,
    forward_headers,
    parse_due_ms,
    parse_routing,
    pick_topic,
)
from actors.delay.producer import DelayProducer
from actors.shared.messages import Record
from runtime.errors import UsageError
from runtime.host.config import DelayLevel
from runtime.kernel.clock import FakeClock

SHORT = DelayLevel(name="1s", delay_ms=1000, topics=["d.1s"])
MID = DelayLevel(name="10s", delay_ms=10_000, topics=["d.10s"])
LONG = DelayLevel(name="1m", delay_ms=60_000, topics=["d.1m.a", "d.1m.b"])
LEVELS = [SHORT, MID, LONG]


def _record(offset: int, ts_ms: int, *headers: tuple[str, bytes], key: bytes | None = b"k",
            topic: str = "d.1s") -> Record:
    return Record(topic, 0, offset, key, b"value-%d" % offset, tuple(headers), ts_ms, 0)


def _routed(offset: int, ts_ms: int, due_ms: int | None = None, target: bytes = b"orders",
            topic: str = "d.1s") -> Record:
    headers = [(DELAY_TARGET, target), ("trace", b"t-%d" % offset)]
    if due_ms is not None:
        headers.append((DELAY_DUE_MS, str(due_ms).encode()))
    return _record(offset, ts_ms, *headers, topic=topic)


def _book(clock: FakeClock, level: DelayLevel = SHORT, max_waiting: int = 100,
          position: int | None = 0) -> DelayBook:
    return DelayBook(level, LEVELS, dead_letter_topic="dlt", max_waiting=max_waiting,
                     position=position, now_ms=clock.wall_ms())


def _kinds(outputs: list[Output]) -> list[tuple[str, int]]:
    return [(out.kind, out.record.offset) for out in outputs]


# -- headers -----------------------------------------------------------------------------


def test_routing_uses_the_due_header_when_present() -> None:
    headers = [(DELAY_TARGET, b"orders"), (DELAY_DUE_MS, b"1700000005000")]
    assert parse_routing(headers, 1_700_000_000_000, 1000) == Routing("orders", 1_700_000_005_000)


def test_routing_without_due_header_is_record_timestamp_plus_level_delay() -> None:
    assert parse_routing([(DELAY_TARGET, b"orders")], 5_000, 1000) == Routing("orders", 6_000)


@pytest.mark.parametrize(("headers", "reason"), [
    ([], "missing delay-target"),
    ([("delay-target ", b"orders")], "missing delay-target"),
    ([(DELAY_TARGET, b"")], "invalid delay-target"),
    ([(DELAY_TARGET, None)], "invalid delay-target"),
    ([(DELAY_TARGET, b"bad topic")], "invalid delay-target"),
    ([(DELAY_TARGET, "ördér".encode())], "invalid delay-target"),
    ([(DELAY_TARGET, b"a"), (DELAY_TARGET, b"b")], "duplicate"),
    ([(DELAY_TARGET, b"a"), (DELAY_DUE_MS, b"1"), (DELAY_DUE_MS, b"2")], "duplicate"),
    ([(DELAY_TARGET, b"a"), (DELAY_DUE_MS, b"-5")], "invalid delay-due-ms"),
    ([(DELAY_TARGET, b"a"), (DELAY_DUE_MS, b"12.5")], "invalid delay-due-ms"),
    ([(DELAY_TARGET, b"a"), (DELAY_DUE_MS, b" 12")], "invalid delay-due-ms"),
    ([(DELAY_TARGET, b"a"), (DELAY_DUE_MS, b"")], "invalid delay-due-ms"),
    ([(DELAY_TARGET, b"a"), (DELAY_DUE_MS, "١٢".encode())], "invalid delay-due-ms"),
    ([(DELAY_TARGET, b"d.1s")], "is a delay level topic"),
])
def test_bad_routing_headers_give_a_reason(headers: list[tuple[str, bytes | None]],
                                           reason: str) -> None:
    result = parse_routing(headers, 0, 1000, ["d.1s"])
    assert isinstance(result, str)
    assert reason in result


def test_due_header_is_ascii_decimal_epoch_ms() -> None:
    assert parse_due_ms(b"0") == 0
    assert parse_due_ms(b"1700000000123") == 1_700_000_000_123
    assert parse_due_ms(b"9" * 17) is None
    assert parse_due_ms(None) is None


def test_forward_drops_only_the_routing_headers() -> None:
    headers = [(DELAY_TARGET, b"t"), ("a", b"1"), (DELAY_DUE_MS, b"5"), ("delay-x", b"2")]
    assert forward_headers(headers) == [("a", b"1"), ("delay-x", b"2")]


# -- levels ------------------------------------------------------------------------------


@pytest.mark.parametrize(("remaining", "level"), [
    (0, SHORT), (999, SHORT), (1000, SHORT), (9_999, SHORT), (10_000, MID), (59_999, MID),
    (60_000, LONG), (10**9, LONG),
])
def test_fitting_level_is_the_largest_not_longer_than_the_wait(remaining: int,
                                                               level: DelayLevel) -> None:
    assert fitting_level(remaining, LEVELS) == level


def test_a_key_stays_on_one_topic_of_a_multi_topic_level() -> None:
    picks = {pick_topic(LONG, b"order-7", seq) for seq in range(10)}
    assert len(picks) == 1
    assert {pick_topic(LONG, None, seq) for seq in range(4)} == set(LONG.topics)


# -- the book: due, not due --------------------------------------------------------------


def test_record_is_forwarded_at_its_due_time_and_not_a_millisecond_earlier() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()

    assert book.offer([_routed(0, now)], now) == []
    assert book.next_deadline() == now + 1000
    clock.advance(999)
    assert book.advance(clock.wall_ms()) == []
    clock.advance(1)
    (out,) = book.advance(clock.wall_ms())

    assert (out.kind, out.topic, out.lateness_ms, out.due_ms) == ("forward", "orders", 0,
                                                                  now + 1000)
    assert out.headers == [("trace", b"t-0")]
    assert out.record.key == b"k" and out.record.value == b"value-0"


def test_lateness_is_now_minus_due() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    book.offer([_routed(0, now, due_ms=now + 200)], now)
    clock.advance(237)
    (out,) = book.advance(clock.wall_ms())
    assert out.lateness_ms == 37


def test_past_due_record_is_forwarded_on_arrival() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    (out,) = book.offer([_routed(0, now - 5000, due_ms=now - 10)], now)
    assert (out.kind, out.lateness_ms) == ("forward", 10)
    assert book.waiting == 0


def test_record_arriving_one_millisecond_before_due_waits_for_it() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    assert book.offer([_routed(0, now, due_ms=now + 1)], now) == []
    assert book.advance(now) == []
    assert _kinds(book.advance(now + 1)) == [("forward", 0)]


def test_records_come_due_in_due_order_not_offset_order() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    book.offer([_routed(0, now, due_ms=now + 900), _routed(1, now, due_ms=now + 100),
                _routed(2, now, due_ms=now + 500)], now)
    clock.advance(1000)
    assert [o.record.offset for o in book.advance(clock.wall_ms())] == [1, 2, 0]


# -- cascade and recycle -----------------------------------------------------------------


def test_due_beyond_the_level_cascades_to_the_largest_fitting_level() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    (out,) = book.offer([_routed(0, now, due_ms=now + 30_000)], now)

    assert (out.kind, out.topic) == ("cascade", "d.10s")
    assert (DELAY_DUE_MS, str(now + 30_000).encode()) in out.headers
    assert (DELAY_TARGET, b"orders") in out.headers
    assert ("trace", b"t-0") in out.headers
    assert book.waiting == 0


def test_due_beyond_the_level_but_below_the_next_level_waits_here() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    assert book.offer([_routed(0, now, due_ms=now + 9_000)], now) == []
    clock.advance(9_000)
    assert _kinds(book.advance(clock.wall_ms())) == [("forward", 0)]


def test_cascade_without_due_header_writes_the_derived_due_time() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    # A producer whose clock runs 20 s ahead: timestamp + 1 s is 21 s away.
    (out,) = book.offer([_routed(0, now + 20_000)], now)
    assert out.kind == "cascade"
    assert (DELAY_DUE_MS, str(now + 21_000).encode()) in out.headers


def test_top_level_recycles_a_very_long_wait_into_itself() -> None:
    clock = FakeClock()
    book = _book(clock, level=LONG)
    now = clock.wall_ms()
    due = now + 3 * 86_400_000
    assert book.offer([_routed(0, now, due_ms=due, topic="d.1m.a")], now) == []
    clock.advance(MIN_RECYCLE_MS - 1)
    assert book.advance(clock.wall_ms()) == []
    clock.advance(1)
    (out,) = book.advance(clock.wall_ms())
    assert out.kind == "recycle"
    assert out.topic in LONG.topics
    assert (DELAY_DUE_MS, str(due).encode()) in out.headers


def test_top_level_holds_a_wait_within_its_recycle_limit() -> None:
    clock = FakeClock()
    book = _book(clock, level=LONG)
    now = clock.wall_ms()
    assert book.offer([_routed(0, now, due_ms=now + MIN_RECYCLE_MS, topic="d.1m.a")], now) == []
    clock.advance(MIN_RECYCLE_MS)
    assert _kinds(book.advance(clock.wall_ms())) == [("forward", 0)]


# -- bad headers -------------------------------------------------------------------------


def test_bad_records_are_dead_lettered_with_a_reason_and_the_rest_flows() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    outputs = book.offer([
        _record(0, now, ("other", b"x")),
        _routed(1, now, due_ms=now - 1),
        _record(2, now, (DELAY_TARGET, b"orders"), (DELAY_DUE_MS, b"soon")),
    ], now)

    assert _kinds(outputs) == [("dead_letter", 0), ("forward", 1), ("dead_letter", 2)]
    dead = outputs[0]
    assert dead.topic == "dlt"
    assert ("other", b"x") in dead.headers
    assert (DELAY_ERROR, b"missing delay-target header") in dead.headers
    assert ("delay-source-offset", b"0") in dead.headers
    assert outputs[2].reason.startswith("invalid delay-due-ms")


# -- commit positions --------------------------------------------------------------------


def test_commit_position_never_passes_a_waiting_record() -> None:
    clock = FakeClock()
    book = _book(clock, position=10)
    now = clock.wall_ms()
    immediate = book.offer([_routed(10, now, due_ms=now + 500), _routed(11, now, due_ms=now),
                            _routed(13, now, due_ms=now)], now)  # 12: a transaction marker
    book.finish(o.record.offset for o in immediate)
    assert book.committable() == 10

    clock.advance(500)
    book.finish(o.record.offset for o in book.advance(clock.wall_ms()))
    assert book.committable() == 14


def test_refetched_records_are_not_taken_twice() -> None:
    clock = FakeClock()
    book = _book(clock)
    now = clock.wall_ms()
    book.offer([_routed(0, now), _routed(1, now)], now)
    book.offer([_routed(1, now), _routed(2, now)], now)
    assert book.waiting == 3


# -- flow control ------------------------------------------------------------------------


def test_partition_pauses_when_full_and_resumes_at_half() -> None:
    clock = FakeClock()
    book = _book(clock, max_waiting=4)
    now = clock.wall_ms()
    book.offer([_routed(i, now, due_ms=now + 10 * (i + 1)) for i in range(3)], now)
    assert book.flow() is None
    book.offer([_routed(3, now, due_ms=now + 40)], now)
    assert book.flow() is True
    assert book.flow() is None
    clock.advance(10)
    book.advance(clock.wall_ms())
    assert book.flow() is None  # 3 waiting: above half
    clock.advance(10)
    book.advance(clock.wall_ms())
    assert book.flow() is False


# -- the wall clock --------------------------------------------------------------------------


def test_a_wall_clock_that_steps_back_delays_but_never_forwards_early() -> None:
    book = DelayBook(SHORT, LEVELS, dead_letter_topic="dlt", max_waiting=10, position=0,
                     now_ms=10_000)
    book.offer([_routed(0, 10_000, due_ms=10_500)], 10_000)
    assert book.advance(10_400) == []
    # the clock steps back 300 ms; a record due at 10_200 arrives
    book.offer([_routed(1, 9_000, due_ms=10_200)], 10_100)
    assert book.advance(10_150) == []  # behind the last reading: nothing is due
    assert _kinds(book.advance(10_400)) == [("forward", 1)]
    assert book.advance(10_499) == []
    assert _kinds(book.advance(10_500)) == [("forward", 0)]


# -- the producer's level choice -----------------------------------------------------------


def _producer(clock: FakeClock) -> DelayProducer:
    return DelayProducer("127.0.0.1:1", LEVELS, clock=clock)


def test_send_picks_the_largest_level_not_longer_than_the_delay() -> None:
    clock = FakeClock()
    producer = _producer(clock)
    topic, headers = producer.route("orders", b"k", [("a", b"1")], 15_000, None)
    assert topic == "d.10s"
    assert headers == [("a", b"1"), (DELAY_TARGET, b"orders"),
                       (DELAY_DUE_MS, str(clock.wall_ms() + 15_000).encode())]


@pytest.mark.parametrize("delay_ms", [0, 1, 999])
def test_short_delays_go_to_the_smallest_level_with_their_due_time(delay_ms: int) -> None:
    clock = FakeClock()
    topic, headers = _producer(clock).route("orders", None, None, delay_ms, None)
    assert topic == "d.1s"
    assert (DELAY_DUE_MS, str(clock.wall_ms() + delay_ms).encode()) in headers


def test_send_takes_an_absolute_due_time() -> None:
    clock = FakeClock()
    due = clock.wall_ms() + 120_000
    topic, headers = _producer(clock).route("orders", b"k", None, None, due)
    assert topic in LONG.topics
    assert (DELAY_DUE_MS, str(due).encode()) in headers


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"delay_ms": None, "due_ms": None}, "exactly one"),
    ({"delay_ms": 5, "due_ms": 5}, "exactly one"),
    ({"delay_ms": -1, "due_ms": None}, ">= 0"),
    ({"delay_ms": 5, "due_ms": None, "target": "d.1s"}, "is a delay level topic"),
    ({"delay_ms": 5, "due_ms": None, "target": "no spaces"}, "not a valid"),
    ({"delay_ms": 5, "due_ms": None, "headers": [(DELAY_TARGET, b"x")]}, "set by the delay"),
])
def test_send_rejects_misuse_with_a_clear_message(kwargs: dict[str, object],
                                                  message: str) -> None:
    args: dict[str, object] = {"target": "orders", "key": None, "headers": None, **kwargs}
    with pytest.raises(UsageError, match=message):
        _producer(FakeClock()).route(**args)  # type: ignore[arg-type]


async def test_send_before_start_says_how_to_start() -> None:
    with pytest.raises(UsageError, match="async with DelayProducer"):
        await _producer(FakeClock()).send("orders", b"v", delay_ms=5)


def test_done_offsets_round_trip_as_ranges() -> None:
    from actors.delay.book import decode_done, encode_done

    text = encode_done([5, 6, 7, 9, 12, 13])
    assert text == "done:5-7,9,12-13"
    assert decode_done(text) == {5, 6, 7, 9, 12, 13}
    assert encode_done([]) == "" and decode_done("") == set()
    assert decode_done("someone else's metadata") == set()
    assert decode_done("done:5-x") == set()


def test_done_offsets_are_cut_at_the_metadata_limit() -> None:
    from actors.delay.book import MAX_DONE_METADATA, decode_done, encode_done

    scattered = list(range(0, 20_000, 2))  # no ranges: one entry each
    text = encode_done(scattered)
    assert len(text) <= MAX_DONE_METADATA
    assert decode_done(text) <= set(scattered) and 0 in decode_done(text)


def test_a_book_skips_records_its_predecessor_forwarded() -> None:
    clock = FakeClock()
    book = DelayBook(SHORT, LEVELS, dead_letter_topic="dlt", max_waiting=100, position=0,
                     now_ms=clock.wall_ms(), done={1})
    now = clock.wall_ms()
    out = book.offer([_routed(offset, now, due_ms=now) for offset in range(3)], now)
    assert _kinds(out) == [("forward", 0), ("forward", 2)]
    assert book.tracker.is_finished(1)
