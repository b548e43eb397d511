"""The document decoded once into each actor's settings (actors/delivery/document/settings.py,
issue 23 item 5): every field an actor acts on arrives under its snake_case name."""

from __future__ import annotations

from typing import Any

import msgspec

from actors.delivery.document.filters import decode_filter
from actors.delivery.document.replay import ReplayRange, ReplayRequest, replay_range
from actors.delivery.document.settings import (
    REPLAY_RETRIES,
    CursorCatalog,
    RetryPolicy,
    RetryTopicSettings,
    TlsFiles,
    cursor_settings,
    egress_settings,
    reader_settings,
    replay_settings,
    rider_settings,
    with_retry_topic,
)
from actors.delivery.document.subscription import Consumer, decode_consumer


def consumer(topics: list[dict[str, Any]] | None = None,
             properties: dict[str, str] | None = None, **method: Any) -> Consumer:
    return decode_consumer({
        "id": "s", "group": {"id": "g"}, "broker": "Kafka",
        "topics": topics or [{"name": "orders"}],
        "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook", **method},
        "properties": properties or {}})


ORDERS = {"name": "orders", "filter": {"key": "k"},
          "config": {"concurrencyFactor": 7, "ordering": "key", "lanes": 3,
                     "loadFactor": 1.5, "autoCommitPeriodMs": 500}}
AUDIT = {"name": "audit\\..*", "pattern": True, "config": {"concurrencyFactor": 2}}


def test_a_cursor_takes_its_topic_entry_and_the_retry_policy() -> None:
    sub = consumer([ORDERS, AUDIT], delayOnErrorMs=200, backoffMultiplier=2.0,
                   maxDelayOnErrorMs=1000, jitter=0.1, retryBeforeCommit=3,
                   deadLetterTopic="orders.dlt", batchSize=5)
    cursor = cursor_settings(sub, "orders")
    assert (cursor.subscription, cursor.ordering, cursor.concurrency, cursor.lanes,
            cursor.load_factor, cursor.commit_period_ms, cursor.batch_size) == (
        "s_g", "key", 7, 3, 1.5, 500, 5)
    assert cursor.retry == RetryPolicy(delay_ms=200, backoff_multiplier=2.0,
                                       max_delay_ms=1000, jitter=0.1, retries=3)
    assert (cursor.dead_letter_topic, cursor.retry_topics) == ("orders.dlt", None)
    assert cursor.filter == decode_filter({"key": "k"}, "f")
    assert (cursor.window, cursor.buffer_limit) == (7, 11)
    audit = cursor_settings(sub, "audit.eu")
    assert (audit.concurrency, audit.filter, audit.reads_retries) == (2, None, False)


def test_the_retry_topic_is_read_with_the_first_topics_settings_and_no_filter() -> None:
    sub = with_retry_topic(consumer([ORDERS], retryTopics={"topic": "orders.retry",
                                                           "delaysMs": [1000, 60_000]}))
    cursor = cursor_settings(sub, "orders.retry")
    assert (cursor.concurrency, cursor.filter, cursor.reads_retries) == (7, None, True)
    assert cursor.retry_topics == RetryTopicSettings(topic="orders.retry",
                                                     delays_ms=(1000, 60_000))
    assert not cursor_settings(sub, "orders").reads_retries


def test_a_catalog_builds_a_topics_settings_once_for_all_its_partitions() -> None:
    cursors = CursorCatalog(consumer([ORDERS, AUDIT]))
    assert cursors("audit.eu") is cursors("audit.eu")
    assert cursors("orders") == cursor_settings(cursors.consumer, "orders")


def test_the_egress_takes_the_request_with_its_defaults_applied() -> None:
    sub = consumer(method="get", additionalHeaders={"X-A": "${env:A}"}, timeoutMs=2000,
                   signingSecret="${env:SECRET}", batchLingerMs=10, retryBeforeCommit=2)
    egress = egress_settings(sub)
    assert (egress.subscription, egress.consumer_header, egress.broker) == ("s_g", "s_g",
                                                                           "Kafka")
    assert (egress.method, egress.query_param_key, egress.charset) == ("GET", "message",
                                                                        "utf-8")
    # references are resolved when the egress starts, never written into settings
    assert (egress.headers, egress.signing_secret) == ({"X-A": "${env:A}"}, "${env:SECRET}")
    assert (egress.timeout_ms, egress.connect_timeout_ms, egress.batch_linger_ms) == (
        2000, 5000, 10)
    assert (egress.pool, egress.fail_fast, egress.tls) == (10, True, None)
    assert not egress_settings(consumer()).fail_fast


def test_tls_files_keep_their_paths() -> None:
    sub = consumer(uri="https://127.0.0.1:9/hook", tls={"caFile": "/ca.pem"})
    assert egress_settings(sub).tls == TlsFiles(ca_file="/ca.pem")


def test_a_reader_takes_pinned_partitions_and_client_properties() -> None:
    sub = consumer([{"name": "a", "partitions": [{"number": 0}, {"number": "2"}]},
                    {"name": "b"}],
                   properties={"auto.offset.reset": "latest", "fetch.max.wait.ms": "50"})
    reader = reader_settings(sub)
    assert reader.topics == {"a": (0, 2), "b": ()}
    assert (reader.pinned, reader.auto_offset_reset, reader.client) == (
        True, "latest", {"fetch_max_wait_ms": 50})
    assert not reader_settings(consumer()).pinned


def test_a_rider_takes_its_names_patterns_group_and_fetch_properties() -> None:
    sub = with_retry_topic(consumer(
        [ORDERS, AUDIT], properties={"auto.offset.reset": "latest", "fetch.max.wait.ms": "5"},
        retryTopics={"topic": "orders.retry", "delaysMs": [1000]}))
    rider = rider_settings(sub)
    assert (rider.key, rider.group_id) == ("s_g", "g")
    assert (rider.topics, rider.patterns) == (("orders", "orders.retry"), ("audit\\..*",))
    assert (rider.auto_offset_reset, rider.fetch_wait_ms) == ("latest", 5)
    assert rider.largest_buffer == 11  # orders (and its retry topic): 7 x 1.5; audit 4


def test_a_rider_without_properties_starts_at_the_earliest_with_the_members_fetch_wait(
        ) -> None:
    rider = rider_settings(consumer())
    assert (rider.topics, rider.patterns) == (("orders",), ())
    assert (rider.auto_offset_reset, rider.fetch_wait_ms, rider.largest_buffer) == (
        "earliest", None, 2)


def test_a_replay_takes_the_group_the_retry_policy_and_the_filters() -> None:
    replay = replay_settings(consumer([ORDERS], deadLetterTopic="dlt", retryBeforeCommit=1))
    assert (replay.group_id, replay.dead_letter_topic, replay.retry.retries) == ("g", "dlt", 1)
    assert replay.cursors("orders").filter is not None
    assert replay.cursors("elsewhere").filter is None


def test_a_replay_request_is_decoded_once_into_its_range() -> None:
    request = msgspec.json.decode(
        b'{"source": "topic", "topic": "t", "partition": 1, "fromOffset": 3, "toOffset": 9,'
        b' "from": "1970-01-01T00:00:01Z", "to": 2000, "limit": 5, "applyFilter": false}',
        type=ReplayRequest)
    assert replay_range(request) == ReplayRange("topic", "t", 1, 3, 9, 1000, 2000, 5, False)


def test_a_replay_ends_even_when_its_subscription_retries_forever() -> None:
    """#34: a replay to a dead endpoint with `retryBeforeCommit` 0 never ended."""
    forever = replay_settings(consumer(retryBeforeCommit=0, delayOnErrorMs=50))
    assert forever.retry.retries == REPLAY_RETRIES and forever.retry.delay_ms == 50
    assert replay_settings(consumer(retryBeforeCommit=3)).retry.retries == 3
