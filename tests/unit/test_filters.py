"""Subscription filters (issue 26): decoding with limits and errors naming the field,
every condition on headers, key and JSON, `not`, and evaluation memoised per record per
distinct filter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actors.delivery.document.filters import (
    MAX_CONDITIONS,
    MAX_FILTER_COST,
    MAX_JSON_BYTES,
    MAX_NOT_DEPTH,
    MAX_PATH_SEGMENTS,
    MAX_TEXT,
    MAX_VALUES,
    Filter,
    decode_filter,
    filter_cost,
    filter_document,
    matches,
)
from actors.delivery.document.store import encode
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.errors import InvalidSubscription
from actors.shared.messages import Record

WHERE = "topics[0].filter"


def record(value: bytes | None = b"{}", key: bytes | None = None,
           headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
    return Record("events", 0, 7, key, value, headers, 0, 0)


def decoded(wire: dict[str, Any]) -> Filter:
    result = decode_filter(wire, WHERE)
    assert result is not None
    return result


def passes(wire: dict[str, Any], rec: Record) -> bool:
    return matches(decoded(wire), rec)


def refused(wire: Any) -> InvalidSubscription:
    with pytest.raises(InvalidSubscription) as info:
        decode_filter(wire, WHERE)
    return info.value


# -- headers ------------------------------------------------------------------------------
def test_a_header_string_condition_is_equality_on_the_utf8_bytes() -> None:
    wire = {"headers": {"event-type": "order.créé"}}
    assert passes(wire, record(headers=(("event-type", "order.créé".encode()),)))
    assert not passes(wire, record(headers=(("event-type", b"order.cr"),)))
    assert not passes(wire, record(headers=(("Event-Type", "order.créé".encode()),)))


def test_a_header_list_matches_any_value_and_any_occurrence() -> None:
    wire = {"headers": {"event-type": ["order.created", "order.paid"]}}
    twice = (("event-type", b"invoice.sent"), ("event-type", b"order.paid"))
    assert passes(wire, record(headers=twice))
    assert not passes(wire, record(headers=(("event-type", b"invoice.sent"),)))
    assert not passes(wire, record())


def test_header_equals_in_prefix_and_exists_objects() -> None:
    headers = (("tenant", b"acme/eu"),)
    assert passes({"headers": {"tenant": {"equals": "acme/eu"}}}, record(headers=headers))
    assert passes({"headers": {"tenant": {"in": ["x", "acme/eu"]}}}, record(headers=headers))
    assert passes({"headers": {"tenant": {"prefix": "acme/"}}}, record(headers=headers))
    assert passes({"headers": {"tenant": {"prefix": ["zz", "acme"]}}}, record(headers=headers))
    assert not passes({"headers": {"tenant": {"prefix": "eu"}}}, record(headers=headers))
    assert passes({"headers": {"tenant": {"exists": True}}}, record(headers=headers))
    assert not passes({"headers": {"tenant": {"exists": False}}}, record(headers=headers))
    assert passes({"headers": {"tenant": {"exists": False}}}, record())


# -- key ---------------------------------------------------------------------------------------
def test_key_conditions_compare_the_key_as_utf8() -> None:
    rec = record(key=b"tenant-42/order-7")
    assert passes({"key": {"prefix": "tenant-42/"}}, rec)
    assert not passes({"key": {"prefix": "tenant-4/"}}, rec)
    assert passes({"key": "tenant-42/order-7"}, rec)
    assert passes({"key": ["a", "tenant-42/order-7"]}, rec)
    assert passes({"key": {"exists": True}}, rec)


def test_a_record_without_key_matches_only_key_exists_false() -> None:
    assert passes({"key": {"exists": False}}, record(key=None))
    assert not passes({"key": {"prefix": ""}}, record(key=None))
    assert not passes({"key": {"exists": True}}, record(key=None))
    assert passes({"key": {"exists": True}}, record(key=b""))  # an empty key is a key


# -- json -------------------------------------------------------------------------------------
ORDER = (b'{"type": "order.created", "amount": 12.50, "count": 3, "paid": true, '
         b'"note": null, "customer": {"tier": "gold", "tags": ["vip", "new"]}}')


@pytest.mark.parametrize(("path", "condition", "expected"), [
    ("type", {"prefix": "order."}, True),
    ("type", "order.created", True),
    ("type", ["order.paid", "order.created"], True),
    ("type", {"in": ["order.paid"]}, False),
    ("customer.tier", ["gold", "platinum"], True),
    ("customer.tier", {"equals": "silver"}, False),
    ("customer.tags.0", "vip", True),  # a decimal segment indexes an array
    ("customer.tags.5", {"exists": False}, True),
    ("amount", "12.50", True),  # numbers compare by their JSON text
    ("amount", "12.5", False),
    ("count", "3", True),
    ("paid", "true", True),
    ("note", "null", True),
    ("note", {"exists": True}, True),  # null is a value
    ("customer", {"exists": True}, True),
    ("customer", {"prefix": ""}, False),  # an object has no text
    ("missing", {"exists": False}, True),
    ("missing", {"exists": True}, False),
    ("type.deeper", {"exists": False}, True),
])
def test_json_conditions(path: str, condition: Any, expected: bool) -> None:
    assert passes({"json": {path: condition}}, record(ORDER)) is expected


@pytest.mark.parametrize("value", [b"not json", b"\xff\xfe", None, b'{"type": '])
def test_a_value_that_is_not_json_matches_only_exists_false(value: bytes | None) -> None:
    assert not passes({"json": {"type": {"prefix": ""}}}, record(value))
    assert not passes({"json": {"type": {"exists": True}}}, record(value))
    assert passes({"json": {"type": {"exists": False}}}, record(value))


def test_every_condition_must_hold() -> None:
    wire = {"headers": {"event-type": ["order.created", "order.paid"]},
            "key": {"prefix": "tenant-42/"},
            "json": {"type": {"prefix": "order."}, "amount": {"exists": True},
                     "customer.tier": ["gold", "platinum"]}}
    good = record(ORDER, b"tenant-42/1", (("event-type", b"order.created"),))
    assert passes(wire, good)
    assert not passes(wire, record(ORDER, b"tenant-43/1", (("event-type", b"order.created"),)))
    assert not passes(wire, record(ORDER, b"tenant-42/1", (("event-type", b"order.shipped"),)))
    assert not passes(wire, record(ORDER.replace(b"gold", b"iron"), b"tenant-42/1",
                                   (("event-type", b"order.created"),)))


def test_not_negates_a_nested_filter() -> None:
    wire = {"json": {"type": {"prefix": "order."}},
            "not": {"headers": {"test": "true"}, "not": {"key": "keep"}}}
    test = (("test", b"true"),)
    assert passes(wire, record(ORDER))
    assert not passes(wire, record(ORDER, headers=test))
    assert passes(wire, record(ORDER, b"keep", test))  # not (test and not keep)
    assert not passes({"not": {}}, record())  # an empty filter matches all; not: none


# -- memo -------------------------------------------------------------------------------------
def test_equal_filters_are_one_object_whatever_the_order_or_form() -> None:
    one = decoded({"headers": {"a": "x", "b": ["y"]}, "json": {"p": {"prefix": "q"}}})
    two = decoded({"json": {"p": {"prefix": "q"}}, "headers": {"b": {"in": ["y"]},
                                                               "a": {"equals": "x"}}})
    assert one is two and hash(one) == hash(two)


def test_a_thousand_subscribers_with_ten_distinct_filters_evaluate_ten_times() -> None:
    subscribers = [decoded({"headers": {"event-type": f"type-{i % 10}"},
                            "json": {"amount": {"exists": True}}}) for i in range(1000)]
    rec = record(b'{"amount": 1}', headers=(("event-type", b"type-3"),))
    results = [matches(f, rec) for f in subscribers]
    assert results.count(True) == 100
    assert rec.memo is not None
    assert len(rec.memo) == 10 + 1  # ten results and the one JSON condition's
    assert set(rec.memo.values()) <= {True, False}  # no decoded value kept (#34)


def test_a_memoised_result_is_reused_and_no_decoded_value_is_kept() -> None:
    only_gold = decoded({"json": {"tier": "gold"}})
    rec = record(b'{"tier": "gold"}')
    assert matches(only_gold, rec)
    rec.value = b'{"tier": "iron"}'  # not how records behave: shows the memo answers
    assert matches(only_gold, rec)
    assert rec.memo == {only_gold: True, (("tier",), only_gold.json[0][1]): True}


def test_a_record_no_filter_saw_has_no_memo() -> None:
    assert record().memo is None


# -- decoding -----------------------------------------------------------------------------
def test_no_filter_and_an_empty_filter_are_none() -> None:
    assert decode_filter(None, WHERE) is None
    assert decode_filter({}, WHERE) is None
    assert decode_filter({"headers": {}, "json": {}}, WHERE) is None


def test_get_shows_the_short_form_which_decodes_to_the_same_filter() -> None:
    wire = {"headers": {"event-type": {"in": ["a", "b"]}}, "key": {"equals": "k"},
            "json": {"type": {"prefix": ["order.", "invoice."]}, "x": {"exists": False}},
            "not": {"json": {"test": "true"}}}
    shown = filter_document(decoded(wire))
    assert shown == {"headers": {"event-type": ["a", "b"]}, "key": "k",
                     "json": {"type": {"prefix": ["order.", "invoice."]},
                              "x": {"exists": False}},
                     "not": {"json": {"test": "true"}}}
    assert decoded(shown) is decoded(wire)


@pytest.mark.parametrize(("wire", "field"), [
    ([], WHERE),
    ({"header": {}}, f"{WHERE}.header"),
    ({"headers": []}, f"{WHERE}.headers"),
    ({"headers": {"": "x"}}, f"{WHERE}.headers."),
    ({"headers": {"h": 42}}, f"{WHERE}.headers.h"),
    ({"key": {"equals": "a", "prefix": "b"}}, f"{WHERE}.key"),
    ({"key": {"startsWith": "b"}}, f"{WHERE}.key"),
    ({"key": {"equals": 1}}, f"{WHERE}.key.equals"),
    ({"key": {"exists": "yes"}}, f"{WHERE}.key.exists"),
    ({"key": {"in": []}}, f"{WHERE}.key.in"),
    ({"key": {"in": ["a", 2]}}, f"{WHERE}.key.in[1]"),
    ({"key": []}, f"{WHERE}.key"),
    ({"json": {"amount": 42}}, f"{WHERE}.json.amount"),
    ({"json": {"amount": [1.5]}}, f"{WHERE}.json.amount[0]"),
    ({"json": {"a..b": "x"}}, f"{WHERE}.json.a..b"),
    ({"json": {"a": {"prefix": 3}}}, f"{WHERE}.json.a.prefix"),
    ({"not": "x"}, f"{WHERE}.not"),
    ({"not": {"key": None}}, f"{WHERE}.not.key"),
])
def test_a_bad_filter_is_refused_naming_the_field(wire: Any, field: str) -> None:
    assert refused(wire).reason == f"invalid {field}"


def test_limits_on_size_and_depth() -> None:
    too_deep: dict[str, Any] = {"key": "k"}
    for _ in range(MAX_NOT_DEPTH + 1):
        too_deep = {"not": too_deep}
    assert refused(too_deep).reason == f"invalid {WHERE}" + ".not" * (MAX_NOT_DEPTH + 1)
    many = {f"h{i}": "x" for i in range(MAX_CONDITIONS + 1)}
    assert refused({"headers": many}).reason == f"invalid {WHERE}.headers"
    half = {f"h{i}": "x" for i in range(MAX_CONDITIONS // 2 + 1)}
    assert refused({"headers": half, "json": half}).reason == f"invalid {WHERE}"
    values = [str(i) for i in range(MAX_VALUES + 1)]
    assert refused({"key": values}).reason == f"invalid {WHERE}.key"
    assert refused({"key": "x" * (MAX_TEXT + 1)}).reason == f"invalid {WHERE}.key"
    path = ".".join(["a"] * (MAX_PATH_SEGMENTS + 1))
    assert refused({"json": {path: "x"}}).reason == f"invalid {WHERE}.json.{path}"
    deep_enough: dict[str, Any] = {"key": "k"}
    for _ in range(MAX_NOT_DEPTH):
        deep_enough = {"not": deep_enough}
    assert decode_filter(deep_enough, WHERE) is not None


def test_a_filter_survives_the_stored_and_cluster_form_of_a_subscription() -> None:
    sub = decode_consumer({
        "id": "s", "group": {"id": "g"}, "broker": "Kafka",
        "topics": [{"name": "events", "filter": {"json": {"type": {"prefix": "order."}}}},
                   {"name": "audit\\..*", "pattern": True, "filter": {"key": "k"}},
                   {"name": "other"}],
        "subscriptionMethod": {"uri": "http://h/x"}})
    again = decode_consumer(encode(sub))  # the file and the subscriptions topic's value
    assert again == sub
    assert again.topic_filter("events") is sub.topic_filter("events") is not None
    assert again.topic_filter("audit.x") == decoded({"key": "k"})
    assert again.topic_filter("other") is None
    assert again.topic_filter("events.retry") is None  # read for no entry


# -- the README's example ------------------------------------------------------------------
def readme_example() -> dict[str, Any]:
    """The JSON block of the README's filters section."""
    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text.split("### Filters:", 1)[1]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    topic: dict[str, Any] = json.loads(block)
    return topic


def test_the_readme_example_passes_a_matching_record_and_each_condition_can_refuse() -> None:
    wire = readme_example()["filter"]
    body = {"currency": "EUR", "status": "paid", "customer": {"tier": "gold"}, "amount": 12}
    headers = (("event-type", b"order.paid"),)

    def one(key: bytes = b"tenant-42/o-1", value: dict[str, Any] | None = None,
            extra: tuple[tuple[str, bytes], ...] = ()) -> Record:
        return record(json.dumps(value or body).encode(), key, (*headers, *extra))
    assert passes(wire, one())
    assert not passes(wire, record(json.dumps(body).encode(), b"tenant-42/o-1",
                                   (("event-type", b"invoice.sent"),)))  # a list
    assert not passes(wire, one(extra=(("test", b"1"),)))  # exists: false
    assert not passes(wire, one(key=b"tenant-7/o-1"))  # prefix
    for path, other in (("currency", "USD"), ("status", "open"), ("customer", {"tier": "x"}),
                        ("channel", "sandbox")):  # a string, equals, in, not
        assert not passes(wire, one(value={**body, path: other})), path
    assert not passes(wire, one(value={k: v for k, v in body.items() if k != "amount"}))


def test_a_filter_past_its_cost_budget_is_refused_though_each_part_is_within_limits() -> None:
    """#34's filter: 5 nested `not`, 32 json conditions of 16-segment paths with 256
    strings each (748 KB), 1-2.3 ms per record."""
    path = ".".join(f"s{i}" for i in range(MAX_PATH_SEGMENTS))
    level: dict[str, Any] = {"json": {f"{path}{c}": [f"v{c}-{i}" for i in range(MAX_VALUES)]
                                      for c in range(MAX_CONDITIONS)}}
    for _ in range(MAX_NOT_DEPTH):
        level = {**level, "not": level}
    error = refused(level)
    assert error.reason == f"invalid {WHERE}" and str(MAX_FILTER_COST) in error.details
    one = {"json": {"a.b": [f"v{i}" for i in range(MAX_VALUES)]}}  # costs 2 + 256
    nested = {**one, "not": {**one, "not": {**one, "not": one}}}  # 4 x 258 = 1032
    assert refused(nested).reason == f"invalid {WHERE}"
    assert decode_filter({**one, "not": {**one, "not": one}}, WHERE) is not None  # 774
    assert filter_cost(decoded({"headers": {"h": "x"}, "key": ["a", "b"],
                                "json": {"a.b.c": {"exists": True}}})) == (2 + 3 + 3, 7)


def test_a_filter_of_many_long_strings_is_refused_by_its_characters() -> None:
    long = [f"{i:04d}" + "x" * (MAX_TEXT - 4) for i in range(MAX_VALUES)]
    assert refused({"json": {"a": long}}).reason == f"invalid {WHERE}"  # 256 KiB
    assert decode_filter({"json": {"a": long[:60]}}, WHERE) is not None


def test_a_value_over_the_json_cap_counts_as_not_json() -> None:
    big = b'{"type": "order", "pad": "' + b"x" * MAX_JSON_BYTES + b'"}'
    assert not passes({"json": {"type": "order"}}, record(big))
    assert passes({"json": {"type": {"exists": False}}}, record(big))
    assert passes({"json": {"type": "order"}}, record(big[:40] + b'"}'))
