"""The Consumer JSON: Queue-Over-Http's exact document decodes (issue 9), the deprecated
flat forms still do, answers are in Queue-Over-Http's shape with secrets redacted, and
every hostile input found in issue 13 is refused with a reason naming its field."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from actors.delivery.document.subscription import (
    MAX_TOPICS,
    Consumer,
    InvalidSubscription,
    decode_consumer,
    document,
    redact_uri,
    redacted,
)

QOH: dict[str, Any] = {
    "id": "svc-1",
    "group": {"id": "svc", "name": "NO_NAME"},
    "broker": "Kafka",
    "topics": [{"name": "test", "pattern": False, "partitions": [{"number": "0"}],
                "config": {"concurrencyFactor": 1, "autoCommitPeriodMs": 0}}],
    "subscriptionMethod": {"type": "http", "uri": "http://host/path", "method": "POST",
                           "queryParamKey": "message", "charset": "UTF-8",
                           "additionalHeaders": {}, "delayOnErrorMs": 0,
                           "retryBeforeCommit": 0},
}


def qoh(**changes: Any) -> dict[str, Any]:
    """QOH with `changes`; `subscriptionMethod__uri="x"` changes a nested field."""
    doc = copy.deepcopy(QOH)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = doc
        for part in parents:
            target = target[part]
        target[last] = value
    return doc


def decode(doc: dict[str, Any]) -> Consumer:
    return decode_consumer(json.dumps(doc).encode())


def refused(doc: dict[str, Any] | bytes) -> InvalidSubscription:
    with pytest.raises(InvalidSubscription) as caught:
        decode_consumer(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return caught.value


def test_queue_over_http_document_decodes_as_its_clients_send_it() -> None:
    consumer = decode(QOH)
    assert (consumer.id, consumer.group_id, consumer.group.name) == ("svc-1", "svc", "NO_NAME")
    assert consumer.key == "svc-1_svc"
    [topic] = consumer.topics
    assert (topic.name, topic.pattern, [p.number for p in topic.partitions or []]) == (
        "test", None, [0])
    assert consumer.subscriptionMethod.charset == "UTF-8"
    assert consumer.subscriptionMethod.delayOnErrorMs == 0


def test_group_name_defaults_to_no_name_and_partition_numbers_may_be_integers() -> None:
    consumer = decode(qoh(group={"id": "svc"}, topics=[
        {"name": "t", "partitions": [{"number": 3}, {"number": "4"}]}]))
    assert consumer.group.name == "NO_NAME"
    assert [p.number for p in consumer.topics[0].partitions or []] == [3, 4]


def test_a_boolean_pattern_makes_the_name_a_regex() -> None:
    consumer = decode(qoh(topics=[{"name": "orders\\..*", "pattern": True,
                                   "config": {"concurrencyFactor": 7}}]))
    [topic] = consumer.topics
    assert (topic.name, topic.pattern) == (None, "orders\\..*")
    assert consumer.topic_config("orders.eu").concurrencyFactor == 7


@pytest.mark.parametrize("charset", ["UTF-8", "utf-8", "Utf8", "ISO-8859-1", "latin1"])
def test_charset_names_are_case_insensitive(charset: str) -> None:
    assert decode(qoh(subscriptionMethod__charset=charset)).subscriptionMethod.charset == charset


def test_the_deprecated_flat_group_id_and_string_pattern_still_decode() -> None:
    old = {"id": "a", "group.id": "g", "broker": "Kafka",
           "topics": [{"pattern": "ev\\..*"}, {"name": "x"}],
           "subscriptionMethod": {"uri": "http://h/"}}
    consumer = decode(old)
    assert (consumer.group_id, consumer.group.name) == ("g", "NO_NAME")
    assert [(t.name, t.pattern) for t in consumer.topics] == [(None, "ev\\..*"), ("x", None)]


def test_answers_use_the_queue_over_http_shape() -> None:
    doc = document(decode(qoh(topics=[{"name": "ev.*", "pattern": True}])), redact=False)
    assert doc["group"] == {"id": "svc", "name": "NO_NAME"}
    assert "group.id" not in doc
    assert doc["topics"][0] | {"config": None} == {
        "name": "ev.*", "pattern": True, "partitions": [], "config": None}
    pinned = document(decode(QOH), redact=False)["topics"][0]
    assert (pinned["pattern"], pinned["partitions"]) == (False, [{"number": "0"}])
    assert doc["subscriptionMethod"]["type"] == "http"  # Jackson picks the subtype by it


@pytest.mark.parametrize("doc", [
    QOH,
    qoh(topics=[{"name": "ev.*", "pattern": True}]),
    {"id": "a", "group.id": "g", "broker": "K", "topics": [{"pattern": "p.*"}, {"name": "n"}],
     "subscriptionMethod": {"uri": "http://h", "signingSecret": "whsec_c2VjcmV0",
                            "additionalHeaders": {"Authorization": "Bearer x"}}},
])
def test_a_written_document_and_the_struct_encoding_both_decode_to_the_same_consumer(
        doc: dict[str, Any]) -> None:
    consumer = decode(doc)
    assert decode(document(consumer, redact=False)) == consumer
    assert decode_consumer(msgspec.json.encode(consumer)) == consumer


def test_redacted_hides_header_values_the_secret_and_the_uri_credentials() -> None:
    consumer = decode(qoh(subscriptionMethod__uri="https://user:pw@h.example:8443/p?apikey=k1&x",
                          subscriptionMethod__signingSecret="whsec_c2VjcmV0",
                          subscriptionMethod__additionalHeaders={"Authorization": "Bearer t"}))
    shown = redacted(consumer)
    text = json.dumps(shown)
    for secret in ("user", "pw", "k1", "c2VjcmV0", "Bearer t"):
        assert secret not in text
    method = shown["subscriptionMethod"]
    assert method["uri"] == "https://***@h.example:8443/p?apikey=***&***"
    assert method["additionalHeaders"] == {"Authorization": "***"}
    assert method["signingSecret"] == "***"


@pytest.mark.parametrize(("uri", "shown"), [
    ("http://h/p", "http://h/p"),
    ("http://u@h/p", "http://***@h/p"),
    ("http://u:p@ss@h:81/p", "http://***@h:81/p"),
    ("http://h/p?a=1&b=&c", "http://h/p?a=***&b=***&***"),
    ("http://h/p#frag", "http://h/p#***"),
    ("http://[::1/p?token=t", "http://***"),
])
def test_redact_uri(uri: str, shown: str) -> None:
    assert redact_uri(uri) == shown


@pytest.mark.parametrize(("doc", "reason"), [
    # issue 13: 500s for bad input
    (b'{"id": "\xff\xfe"}', "malformed JSON"),
    (b"[" * 5000 + b"]" * 5000, "malformed JSON"),
    (qoh(subscriptionMethod__charset="utf\x008"), "invalid subscriptionMethod.charset"),
    (qoh(topics=[{"name": "a{4294967296}", "pattern": True}]), "invalid topics[0].pattern"),
    (qoh(topics=[{"name": "(" * 5000 + ")" * 5000, "pattern": True}]), "invalid topics[0].name"),
    (qoh(topics=[{"name": ""}]), "invalid topics[0].name"),
    (qoh(topics=[{"pattern": ""}]), "invalid topics[0].pattern"),
    # a pattern that hangs a backtracking engine
    (qoh(topics=[{"name": "((a|a)*)*b", "pattern": True}]), "invalid topics[0].pattern"),
    (qoh(topics=[{"name": "(a|aa)*b", "pattern": True}]), "invalid topics[0].pattern"),
    # saved state diverges: names that could not be stored
    (qoh(id="a" * 150, group={"id": "g" * 60}), "invalid subscription name"),
    (qoh(group={"id": "g\n"}), "invalid group.id"),
    (qoh(id="a\n"), "invalid id"),
    (qoh(id="../x"), "invalid id"),
    # resource exhaustion, topic names
    (qoh(topics=[{"name": f"t{i}"} for i in range(MAX_TOPICS + 1)]), "invalid topics"),
    (qoh(topics=[{"name": "../x"}]), "invalid topics[0].name"),
    (qoh(topics=[{"name": "a\x01b"}]), "invalid topics[0].name"),
    (qoh(topics=[{"name": "x" * 100_000}]), "invalid topics[0].name"),
    (qoh(topics=[{"name": "t"}, {"name": "t"}]), "invalid topics[1].name"),
    # header values with NUL, VT or DEL; framing headers
    (qoh(subscriptionMethod__additionalHeaders={"X-A": "a\x00b"}),
     "invalid subscriptionMethod.additionalHeaders.X-A"),
    (qoh(subscriptionMethod__additionalHeaders={"X-A": "a\x0bb"}),
     "invalid subscriptionMethod.additionalHeaders.X-A"),
    (qoh(subscriptionMethod__additionalHeaders={"X-A": "a\x7fb"}),
     "invalid subscriptionMethod.additionalHeaders.X-A"),
    (qoh(subscriptionMethod__additionalHeaders={"X-A": "a", "x-a": "b"}),
     "invalid subscriptionMethod.additionalHeaders.x-a"),
    # numbers out of range
    (qoh(subscriptionMethod__delayOnErrorMs=10**30), "invalid subscriptionMethod.delayOnErrorMs"),
    (qoh(topics=[{"name": "t", "partitions": [{"number": "99999999999"}]}]),
     "invalid topics[0].partitions[0].number"),
    (qoh(topics=[{"name": "t", "partitions": [{"number": -1}]}]),
     "invalid topics[0].partitions[0].number"),
    (qoh(topics=[{"name": "t", "config": {"concurrencyFactor": 0}}]),
     "invalid topics[0].config.concurrencyFactor"),
    # the rest of the document
    (qoh(subscriptionMethod__uri="http://h:99999/"), "invalid subscriptionMethod.uri"),
    (qoh(subscriptionMethod__uri="http://h/a b"), "invalid subscriptionMethod.uri"),
    (qoh(subscriptionMethod__uri="file:///etc/passwd"), "invalid subscriptionMethod.uri"),
    (qoh(subscriptionMethod__charset="base64"), "invalid subscriptionMethod.charset"),
    (qoh(subscriptionMethod__method="TRACE"), "invalid subscriptionMethod.method"),
    (qoh(group={"id": "svc", "nme": "x"}), "invalid group.nme"),
    (qoh(group={"name": "x"}), "invalid group.id"),
    (qoh(group=None), "invalid group"),
    ({**QOH, "group.id": "svc"}, "invalid group"),
    (qoh(topics=[{"name": "t", "pattern": "t.*"}]), "invalid topics[0]"),
    (qoh(topics=[{"name": "t.*", "pattern": True, "partitions": [{"number": 0}]}]),
     "invalid topics[0]"),
    (qoh(properties={"auto.offset.reset": "never"}), "invalid properties.auto.offset.reset"),
    (qoh(properties={"bootstrap.servers": "evil:9092"}), "invalid properties.bootstrap.servers"),
    (b"[]", "invalid subscription"),
    (b'"just a string"', "invalid subscription"),
])
def test_hostile_documents_are_refused_naming_the_field(
        doc: dict[str, Any] | bytes, reason: str) -> None:
    assert refused(doc).reason == reason


@pytest.mark.parametrize("header", [
    "Content-Length", "transfer-encoding", "Host", "Connection", "Upgrade", "TE", "Trailer",
    "Keep-Alive", "Proxy-Authorization", "QOH-Topic", "webhook-signature",
])
def test_reserved_request_headers_are_refused_naming_the_header(header: str) -> None:
    exc = refused(qoh(subscriptionMethod__additionalHeaders={header: "0"}))
    assert exc.reason == f"invalid subscriptionMethod.additionalHeaders.{header}"
    assert header in exc.details


def test_a_library_caller_gets_the_same_checks_as_the_admin_api() -> None:
    with pytest.raises(InvalidSubscription, match="invalid id"):
        decode_consumer(qoh(id="bad\udcff"))
    assert decode_consumer(QOH) == decode(QOH)


def test_a_header_value_may_hold_a_tab_and_any_printable_text() -> None:
    headers = {"X-Note": "a\tb", "X-Name": "Zoë"}
    consumer = decode(qoh(subscriptionMethod__additionalHeaders=headers))
    assert consumer.subscriptionMethod.additionalHeaders == headers
