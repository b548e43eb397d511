"""Delivery's domain errors: one hierarchy, a reason and details for the JSON body, and
one table from error class to the admin API's HTTP status."""

from __future__ import annotations

import pytest

import actors.delivery
import actors.delivery.document.subscription
from actors.delivery.api.subscriptions import status_of, unsubscribe_pair
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
    UnknownBroker,
)


@pytest.mark.parametrize(("error", "status"), [
    (InvalidSubscription, 400), (SubscriptionExists, 400), (UnknownBroker, 400),
    (SubscriptionNotFound, 404), (SubscriptionStartFailed, 503), (DeliveryError, 400),
])
def test_each_error_class_answers_with_its_status(
        error: type[DeliveryError], status: int) -> None:
    assert status_of(error("why", "what")) == status


def test_an_error_carries_reason_and_details_and_says_both() -> None:
    exc = SubscriptionNotFound("subscription not found", "a_g")
    assert (exc.reason, exc.details, str(exc)) == (
        "subscription not found", "a_g", "subscription not found: a_g")
    assert str(UnknownBroker("unknown broker")) == "unknown broker"


def test_only_a_start_failure_is_worth_retrying() -> None:
    assert SubscriptionStartFailed("x").retriable
    assert not any(cls("x").retriable for cls in (
        InvalidSubscription, SubscriptionExists, SubscriptionNotFound, UnknownBroker))


def test_invalid_subscription_is_importable_where_it_was_and_still_a_value_error() -> None:
    assert actors.delivery.document.subscription.InvalidSubscription is InvalidSubscription
    assert actors.delivery.InvalidSubscription is InvalidSubscription
    assert issubclass(InvalidSubscription, ValueError)
    assert issubclass(InvalidSubscription, DeliveryError)
    with pytest.raises(InvalidSubscription, match="malformed JSON") as caught:
        decode_consumer(b"{not json")
    assert isinstance(caught.value, DeliveryError)


def test_unsubscribe_takes_id_and_group_in_either_form_or_says_what_is_wrong() -> None:
    assert unsubscribe_pair(b'{"id": "a", "group": {"id": "g"}, "broker": "K"}') == ("a", "g")
    assert unsubscribe_pair(b'{"id": "a", "group.id": "g"}') == ("a", "g")
    with pytest.raises(InvalidSubscription, match="malformed JSON"):
        unsubscribe_pair(b"nope")
    with pytest.raises(InvalidSubscription, match="invalid unsubscribe request"):
        unsubscribe_pair(b"[]")
    with pytest.raises(InvalidSubscription, match=r"invalid group\.id"):
        unsubscribe_pair(b'{"id": "a", "group": {"name": "g"}}')
    with pytest.raises(InvalidSubscription, match="invalid id"):
        unsubscribe_pair(b'{"id": "a\\n", "group": {"id": "g"}}')
