"""`Runtime.consume`'s parameters as a Consumer document (actors/delivery/control/inprocess.py):
validated like a posted subscription, errors named after the parameters."""

from __future__ import annotations

from typing import Any

import pytest

from actors.delivery.control.inprocess import consumer_document, decode_in_process
from actors.delivery.control.service import DeliveryControl
from actors.delivery.document.subscription import (
    Consumer,
    HandlerMethod,
    InvalidSubscription,
    decode_consumer,
    redacted,
)
from actors.delivery.egress.handler import ConsumedRecord
from runtime.errors import UsageError


async def handle_order(record: ConsumedRecord) -> None:
    pass


class Handler:
    async def __call__(self, record: ConsumedRecord) -> None:
        pass


def consumer(**options: Any) -> Consumer:
    return decode_in_process(consumer_document("billing", handle_order, options, "Kafka"))


def test_every_parameter_lands_in_its_field() -> None:
    built = consumer(topics=["orders", "refunds"], ordering="key", concurrency=50, lanes=8,
                     retries=5, delay_on_error_ms=200, backoff_multiplier=2.0,
                     max_delay_on_error_ms=10_000, jitter=0.1, timeout_ms=3000,
                     dead_letter_topic="orders.dlt", broker="Other",
                     properties={"session.timeout.ms": 7000}, id="orders-worker",
                     auto_commit_period_ms=500, load_factor=3.0)

    assert built.key == "orders-worker_billing" and built.broker == "Other"
    assert [t.name for t in built.topics] == ["orders", "refunds"]
    config = built.topics[0].config
    assert (config.ordering, config.concurrencyFactor, config.lanes, config.autoCommitPeriodMs,
            config.loadFactor) == ("key", 50, 8, 500, 3.0)
    method = built.subscriptionMethod
    assert (method.retryBeforeCommit, method.delayOnErrorMs, method.backoffMultiplier,
            method.maxDelayOnErrorMs, method.jitter, method.timeoutMs,
            method.deadLetterTopic) == (5, 200, 2.0, 10_000, 0.1, 3000, "orders.dlt")
    assert built.properties == {"session.timeout.ms": "7000"}


def test_what_is_not_given_takes_the_consumer_documents_defaults() -> None:
    built = consumer(pattern=r"orders\..*")

    assert built.key == "handle_order_billing" and built.broker == "Kafka"
    [topic] = built.topics
    assert topic.pattern == r"orders\..*" and topic.name is None
    assert (topic.config.concurrencyFactor, topic.config.ordering) == (1, "none")
    method = built.subscriptionMethod
    assert (method.retryBeforeCommit, method.delayOnErrorMs, method.timeoutMs) == (0, 1000,
                                                                                  30_000)


def test_the_method_names_the_handler_and_has_no_url() -> None:
    built = consumer(topics=["orders"], retries=3)
    assert built.subscriptionMethod == HandlerMethod(
        handler="tests.unit.test_inprocess_document.handle_order", retryBeforeCommit=3)
    assert built.http is None
    shown = redacted(built)["subscriptionMethod"]
    assert shown == {"type": "handler",
                     "handler": "tests.unit.test_inprocess_document.handle_order",
                     "delayOnErrorMs": 1000, "retryBeforeCommit": 3, "deadLetterTopic": None,
                     "timeoutMs": 30_000, "backoffMultiplier": 1.0, "maxDelayOnErrorMs": 0,
                     "jitter": 0.0}


def test_the_admin_api_refuses_a_handler_document() -> None:
    document = consumer_document("billing", handle_order, {"topics": ["orders"]}, "Kafka")
    with pytest.raises(InvalidSubscription) as refused:
        decode_consumer(document)
    assert refused.value.reason == "invalid subscriptionMethod.type"
    assert "Runtime.consume" in refused.value.details


def test_a_callable_object_is_a_handler_too() -> None:
    document = consumer_document("billing", Handler(), {"topics": ["orders"]}, "Kafka")
    assert document["id"] == "Handler"


@pytest.mark.parametrize(("options", "reason"), [
    ({"topics": ["orders"], "concurrency": 0}, "invalid concurrency"),
    ({"topics": ["orders"], "ordering": "random"}, "invalid ordering"),
    ({"topics": ["orders"], "retries": -1}, "invalid retries"),
    ({"topics": ["orders"], "dead_letter_topic": "no spaces"}, "invalid dead_letter_topic"),
    ({"topics": ["orders"], "jitter": 2.0}, "invalid jitter"),
    ({"topics": ["bad topic"]}, "invalid topics"),
    ({"pattern": "(unclosed"}, "invalid pattern"),
    ({"topics": ["orders"], "id": "no/slash"}, "invalid id"),
    ({"topics": ["orders"], "properties": {"bogus.setting": "1"}},
     "invalid properties.bogus.setting"),
])
def test_an_invalid_value_is_refused_naming_the_parameter(options: dict[str, Any],
                                                          reason: str) -> None:
    with pytest.raises(InvalidSubscription) as refused:
        consumer(**options)
    assert refused.value.reason == reason


def test_group_id_is_checked_like_the_admin_apis() -> None:
    with pytest.raises(InvalidSubscription, match="invalid group_id"):
        decode_in_process(consumer_document("no space", handle_order, {"topics": ["o"]}, "K"))


@pytest.mark.parametrize(("handler", "options", "message"), [
    (lambda record: None, {"topics": ["orders"]}, "must be an async function"),
    (handle_order, {}, "needs topics=[...]"),
    (handle_order, {"topics": "orders"}, "write topics=['orders']"),
    (handle_order, {"topics": ["orders"], "concurency": 5}, "unknown parameters concurency"),
])
def test_a_misuse_says_what_to_write_instead(handler: Any, options: dict[str, Any],
                                             message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        consumer_document("billing", handler, options, "Kafka")


def test_a_filter_applies_to_every_topic_and_errors_name_the_parameter() -> None:
    wanted = {"headers": {"event-type": ("order.created", "order.paid")}}
    built = consumer(topics=["orders", "refunds"], pattern=r"audit\..*", filter=wanted)
    assert built.topics[0].filter is built.topics[1].filter is built.topics[2].filter
    assert built.topics[0].filter is not None
    with pytest.raises(InvalidSubscription) as info:
        consumer(topics=["orders"], filter={"json": {"amount": 42}})
    assert info.value.reason == "invalid filter.json.amount"


async def test_a_handler_document_without_its_handler_is_refused_by_the_library() -> None:
    with pytest.raises(UsageError, match=r"Runtime\.consume"):
        await DeliveryControl().subscribe(consumer(topics=["orders"]))
