"""One dead-letter header scheme (actors.shared.deadletter): what delivery and the delay
queue write, and the reader that understands it and the delay queue's legacy names."""

from __future__ import annotations

from actors.delay.book import dead_letter
from actors.delivery.path.deadletter import WriteDeadLetter
from actors.shared.deadletter import (
    Attempts,
    DeadLetterSource,
    dead_letter_headers,
    dead_letter_source,
)
from actors.shared.messages import Record
from runtime.kernel.actor import Actor


def rec(*headers: tuple[str, bytes], offset: int = 7) -> Record:
    return Record("orders", 3, offset, b"k", b"v", headers, 0, 0, attempt=4)


def test_delivery_writes_where_why_attempts_and_status_after_the_records_headers() -> None:
    message = WriteDeadLetter(rec(("trace", b"t1")), "gave up after 4 attempts: HTTP 500",
                              500, 1, Actor("partition"))
    assert message.headers() == [
        ("trace", b"t1"),
        ("dlt-reason", b"gave up after 4 attempts: HTTP 500"),
        ("dlt-topic", b"orders"),
        ("dlt-partition", b"3"),
        ("dlt-offset", b"7"),
        ("dlt-timestamp-ms", b"0"),
        ("dlt-attempts", b"4"),
        ("dlt-status", b"500"),
    ]


def test_no_http_status_is_an_empty_status_header() -> None:
    headers = dict(dead_letter_headers(rec(), "timeout", Attempts(2, None)))
    assert headers["dlt-status"] == b"" and headers["dlt-attempts"] == b"2"


def test_the_delay_queue_writes_the_scheme_and_its_legacy_names() -> None:
    out = dead_letter(rec(("delay-target", b"")), "dlt", "missing delay-target header")
    assert out.kind == "dead_letter" and out.topic == "dlt"
    headers = dict(out.headers)
    assert headers["dlt-reason"] == headers["delay-error"] == b"missing delay-target header"
    assert headers["dlt-topic"] == headers["delay-source-topic"] == b"orders"
    assert headers["dlt-partition"] == headers["delay-source-partition"] == b"3"
    assert headers["dlt-offset"] == headers["delay-source-offset"] == b"7"
    assert "dlt-attempts" not in headers and "dlt-status" not in headers


def test_the_reader_reads_what_delivery_wrote() -> None:
    headers = dead_letter_headers(rec(), "gave up", Attempts(4, 503))
    assert dead_letter_source(headers) == DeadLetterSource("orders", 3, 7, "gave up", 4, 503, 0)


def test_the_reader_reads_the_delay_queues_legacy_headers() -> None:
    legacy = [("delay-error", b"bad due"), ("delay-source-topic", b"delay.5s"),
              ("delay-source-partition", b"0"), ("delay-source-offset", b"12")]
    assert dead_letter_source(legacy) == DeadLetterSource("delay.5s", 0, 12, "bad due")


def test_the_reader_prefers_the_scheme_and_the_last_of_repeated_headers() -> None:
    # a replayed dead letter that failed again carries an older set before ours
    older = dead_letter_headers(rec(offset=1), "first time", Attempts(2, 500))
    again = Record("orders.replay", 0, 9, None, b"v", tuple(older), 0, 0, attempt=3)
    source = dead_letter_source(dead_letter_headers(again, "second time", Attempts(3, 502)))
    assert source == DeadLetterSource("orders.replay", 0, 9, "second time", 3, 502, 0)
    delayed = dead_letter_source(dead_letter(again, "dlt", "bad due").headers)
    assert delayed is not None and (delayed.offset, delayed.reason) == (9, "bad due")


def test_the_reader_answers_none_without_a_complete_source() -> None:
    assert dead_letter_source([]) is None
    assert dead_letter_source([("dlt-topic", b"orders"), ("dlt-partition", b"x"),
                               ("dlt-offset", b"1")]) is None
    assert dead_letter_source([("dlt-topic", None), ("dlt-partition", b"0"),
                               ("dlt-offset", b"1")]) is None
