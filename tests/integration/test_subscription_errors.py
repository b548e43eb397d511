"""The library API raises delivery's domain errors (never the admin API's `BadRequest`),
and a subscription the store could not keep is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.delivery import DeliveryService, decode_consumer
from actors.delivery.errors import (
    InvalidSubscription,
    SubscriptionExists,
    SubscriptionNotFound,
    UnknownBroker,
)
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, make_runtime, subscription

pytestmark = pytest.mark.integration

UNREACHABLE = "http://127.0.0.1:9/hook"


async def test_subscribe_and_unsubscribe_raise_domain_errors(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    body = subscription("lib", [{"name": topic}], UNREACHABLE, fast_group=fast_group_kwargs)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        service = runtime.service(DeliveryService)
        with pytest.raises(UnknownBroker, match="unknown broker"):
            await service.subscribe(decode_consumer({**body, "broker": "Nope"}))
        await service.subscribe(decode_consumer(body))
        with pytest.raises(SubscriptionExists) as exists:
            await service.subscribe(decode_consumer(body))
        assert exists.value.details == "lib_g-lib: unsubscribe it first"
        assert (await service.unsubscribe("lib_g-lib")).id == "lib"
        with pytest.raises(SubscriptionNotFound):
            await service.unsubscribe("lib_g-lib")


async def test_a_name_too_long_to_store_is_refused_before_anything_starts(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory()
    long = subscription("a" * 150, [{"name": topic}], UNREACHABLE, group="g" * 150)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, reply = await admin.call("POST", "/broker/subscription", long)
        assert status == 400 and reply["reason"] == "invalid subscription name", reply
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []
        service = runtime.service(DeliveryService)
        with pytest.raises(InvalidSubscription):
            await service.subscribe(decode_consumer(long))
        assert service.subscriptions == {}
    assert list((tmp_path / "persist").glob("*")) == []
