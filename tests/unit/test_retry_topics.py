"""Non-blocking retries (actors/delivery/path/retrytopic.py and the book's decisions): when a
record moves to the retry topic, what it carries there, how it comes back, and which
delays the config's delay levels can hold."""

from __future__ import annotations

import pytest

from actors.delivery.document.settings import (
    check_levels,
    retry_topic_settings,
    with_retry_topic,
)
from actors.delivery.document.signing import webhook_id_of
from actors.delivery.document.subscription import RetryTopics, decode_consumer
from actors.delivery.errors import InvalidSubscription
from actors.delivery.path.book import PartitionBook
from actors.delivery.path.retrytopic import moved_headers, note_failure, read_retry
from actors.shared.deadletter import dead_letter_headers, dead_letter_source
from actors.shared.messages import Record
from runtime.host.config import DelayLevel
from runtime.kernel.backoff import Backoff

RETRY = RetryTopics(topic="orders.retry", delaysMs=[1000, 60_000])
LEVELS = [DelayLevel(name="1s", delay_ms=1000, topics=["delay.1s"]),
          DelayLevel(name="1m", delay_ms=60_000, topics=["delay.1m"])]


def rec(offset: int, topic: str = "orders") -> Record:
    return Record(topic, 0, offset, b"k", b"v", (("trace", b"1"),), 0, 0)


def new_book(retries: int) -> PartitionBook:
    book = PartitionBook("partition", 1, 1, 2, Backoff(100), retries,
                         retry_topics=retry_topic_settings(RETRY))
    book.assign(0)
    return book


def read_back(record: Record, offset: int) -> Record:
    """`record` as the retry topic gives it back: new coordinates, the moved headers."""
    back = Record("orders.retry", 2, offset, record.key, record.value,
                  tuple(moved_headers(record)), 0, 0)
    back.retry = read_retry(back.headers)
    return back


def test_a_record_moves_aside_after_its_local_retries_not_before() -> None:
    book = new_book(retries=4)
    book.take([rec(0)])
    [record] = book.dispatch()
    for attempt in range(1, 5):
        assert book.retry_at(record, 0) is not None, attempt
        book.retrying(record)
    assert record.attempt == 5
    assert book.retry_at(record, 0) is None  # five attempts made: move it aside
    assert book.move_aside_ms(record) == 1000


def test_zero_local_retries_with_retry_topics_moves_aside_after_the_first_failure() -> None:
    book = new_book(retries=0)
    book.take([rec(0)])
    [record] = book.dispatch()
    assert book.retry_at(record, 0) is None
    assert book.move_aside_ms(record) == 1000


def test_the_receiver_asking_for_a_dead_letter_skips_the_retry_topic() -> None:
    book = new_book(retries=3)
    book.take([rec(0)])
    [record] = book.dispatch()
    assert book.retry_at(record, 0, give_up=True) is None
    assert book.move_aside_ms(record, give_up=True) is None


def test_a_record_read_back_keeps_its_coordinates_count_and_first_failure() -> None:
    original = rec(7)
    original.attempt = 5
    note_failure(original, 1_700_000_000_000)
    back = read_back(original, 40)
    assert back.coordinates() == ("orders", 0, 7)  # pushed and journaled as the original
    assert back.retry is not None and back.retry.first_failure_ms == 1_700_000_000_000
    assert back.retry.stage == 1 and back.retry.attempts == 5
    assert ("trace", b"1") in back.headers
    book = new_book(retries=4)
    book.take([back])
    assert book.dispatch() == [back] and back.attempt == 6  # the count goes on


def test_a_record_read_back_gets_one_attempt_per_delay_then_the_dead_letter_topic() -> None:
    book = new_book(retries=4)
    first = rec(3)
    first.attempt = 5
    note_failure(first, 1)
    stage1 = read_back(first, 0)
    book.take([stage1])
    book.dispatch()
    assert book.retry_at(stage1, 0) is None  # no local retries for a read-back record
    assert book.move_aside_ms(stage1) == 60_000
    stage2 = read_back(stage1, 1)
    assert stage2.retry is not None and stage2.retry.stage == 2
    assert stage2.coordinates() == ("orders", 0, 3)
    assert book.move_aside_ms(stage2) is None  # the last delay is used up


def test_a_record_read_back_and_its_dead_letter_keep_the_original_webhook_id() -> None:
    original = Record("orders", 0, 9, b"k", b"v", (), 1_700_000_000_123, 0)
    note_failure(original, 1_700_000_009_000)
    back = read_back(original, 77)  # the retry topic's record has a timestamp of its own
    again = read_back(back, 78)
    assert back.timestamp_ms == 0 and back.original_timestamp_ms() == 1_700_000_000_123
    assert webhook_id_of(back) == webhook_id_of(again) == webhook_id_of(original)
    source = dead_letter_source(dead_letter_headers(again, "gave up"))
    assert source is not None and source.timestamp_ms == 1_700_000_000_123


def test_its_dead_letter_names_the_original_coordinates() -> None:
    original = rec(9)
    note_failure(original, 5)
    back = read_back(original, 77)
    source = dead_letter_source(dead_letter_headers(back, "gave up"))
    assert source is not None and (source.topic, source.offset) == ("orders", 9)


@pytest.mark.parametrize("headers", [
    (), (("retry-topic", b"orders"),),
    (("retry-topic", b"orders"), ("retry-partition", b"x"), ("retry-offset", b"1"),
     ("retry-attempts", b"1"), ("retry-first-failure-ms", b"1"), ("retry-stage", b"1")),
    (("retry-topic", b"orders"), ("retry-partition", b"0"), ("retry-offset", b"1"),
     ("retry-attempts", b"1"), ("retry-first-failure-ms", b"1"), ("retry-stage", b"0")),
])
def test_missing_or_malformed_retry_headers_make_an_ordinary_record(
        headers: tuple[tuple[str, bytes], ...]) -> None:
    assert read_retry(headers) is None


def test_delays_must_fit_a_delay_level_and_the_error_names_the_level_to_add() -> None:
    check_levels(RETRY, LEVELS)
    with pytest.raises(InvalidSubscription, match=r"delay_ms <= 500") as caught:
        check_levels(RetryTopics(topic="r", delaysMs=[1000, 500]), LEVELS)
    assert caught.value.reason == "invalid subscriptionMethod.retryTopics.delaysMs[1]"
    with pytest.raises(InvalidSubscription, match=r"no \[\[delay.levels\]\]"):
        check_levels(RETRY, [])


def _document(**method: object) -> dict[str, object]:
    return {"id": "a", "group": {"id": "g"}, "broker": "Kafka",
            "topics": [{"name": "orders"}],
            "subscriptionMethod": {"uri": "http://h/x", **method}}


def test_the_retry_topic_is_consumed_next_to_the_subscriptions_topics() -> None:
    consumer = decode_consumer(_document(retryTopics={"topic": "orders.retry",
                                                      "delaysMs": [1000]}))
    assert [t.name for t in with_retry_topic(consumer).topics] == ["orders", "orders.retry"]


@pytest.mark.parametrize(("retry", "field"), [
    ({"topic": "orders", "delaysMs": [1000]}, "retryTopics.topic"),
    ({"topic": "bad topic", "delaysMs": [1000]}, "retryTopics.topic"),
    ({"topic": "r", "delaysMs": []}, "retryTopics.delaysMs"),
    ({"topic": "r", "delaysMs": [-1]}, "retryTopics.delaysMs[0]"),
    ({"topic": "dlt", "delaysMs": [1]}, "retryTopics.topic"),
])
def test_bad_retry_topics_are_refused_naming_the_field(retry: dict[str, object],
                                                       field: str) -> None:
    with pytest.raises(InvalidSubscription) as caught:
        decode_consumer(_document(retryTopics=retry, deadLetterTopic="dlt"))
    assert caught.value.reason == f"invalid subscriptionMethod.{field}"
