"""The admin API: Queue-Over-Http bodies, 4xx with a JSON reason for bad input, bearer
tokens, persistence across restarts, health and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    make_runtime,
    produce,
    subscription,
)
from tests.standard_webhooks import accepts

pytestmark = pytest.mark.integration


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    started = await Receiver().start()
    yield started
    await started.stop()


async def test_bad_requests_get_4xx_with_a_json_reason(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    topic = await topic_factory()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    async with runtime:
        admin = Admin(runtime)
        good = subscription("a", [{"name": topic}], receiver.url)
        cases = [
            (b"{not json", "malformed JSON"),
            (b'{"id": "x"}', "invalid broker"),  # the reason names the field
            (b'[]', "invalid subscription"),
        ]
        for raw, reason in cases:
            status, body = await admin.call("POST", "/broker/subscription", raw=raw)
            assert status == 400 and body["success"] is False and body["reason"] == reason
        bad_bodies = {
            "unknown broker": {**good, "broker": "Nope"},
            "invalid id": {**good, "id": "../../etc"},
            "invalid subscriptionMethod.uri": {
                **good, "subscriptionMethod": {"type": "http", "uri": "ftp://x"}},
            "invalid topics[0]": {**good, "topics": [{"name": topic, "pattern": "x.*"}]},
        }
        for reason, body in bad_bodies.items():
            status, reply = await admin.call("POST", "/broker/subscription", body)
            assert status == 400, reply
            assert reply["reason"] == reason, reply
        assert (await admin.call("POST", "/broker/subscription", good))[0] == 200
        status, reply = await admin.call("POST", "/broker/subscription", good)
        assert status == 400 and reply["reason"] == "subscription already exists"
        status, reply = await admin.call("POST", "/broker/unsubscribe",
                                         {"id": "zz", "group.id": "zz"})
        assert status == 404 and reply["reason"] == "subscription not found"
        status, reply = await admin.call("POST", "/broker/unsubscribe", raw=b"nope")
        assert status == 400
        status, _ = await admin.call("GET", "/no/such/route")
        assert status == 404


async def test_list_hides_header_values_and_secrets_and_unsubscribe_removes(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    topic = await topic_factory()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    async with runtime:
        admin = Admin(runtime)
        sub = subscription("s", [{"name": topic}], receiver.url,
                           additionalHeaders={"Authorization": "Bearer hush"},
                           signingSecret="whsec_c2VjcmV0")
        reply = await admin.subscribe(sub)
        assert reply["data"]["subscriptionMethod"]["signingSecret"] == "***"
        status, listed = await admin.call("GET", "/broker/subscription")
        text = str(listed)
        assert status == 200 and "hush" not in text and "c2VjcmV0" not in text
        assert listed["data"][0]["subscriptionMethod"]["additionalHeaders"] == {
            "Authorization": "***"}
        assert (tmp_path / "persist" / "s_g-s.json").exists()
        status, _ = await admin.call("POST", "/broker/unsubscribe", sub)
        assert status == 200
        assert (await admin.call("GET", "/broker/subscription"))[1]["data"] == []
        assert not (tmp_path / "persist" / "s_g-s.json").exists()


async def test_a_token_is_required_when_configured(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    runtime = make_runtime(kafka_bootstrap, tmp_path, admin={"token": "t0k"})
    async with runtime:
        status, body = await Admin(runtime).call("GET", "/broker/subscription")
        assert status == 401 and body["reason"] == "unauthorized"
        status, _ = await Admin(runtime, token="wrong").call("GET", "/broker/subscription")
        assert status == 401
        status, body = await Admin(runtime, token="t0k").call("GET", "/broker/subscription")
        assert status == 200 and body == {"success": True, "data": []}


async def test_a_corrupt_subscription_file_is_skipped_and_the_rest_restored(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver, fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        await Admin(runtime).subscribe(subscription(
            "keep", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs))
    (tmp_path / "persist" / "broken_g.json").write_text("{half a file")
    await produce(kafka_bootstrap, topic, 3)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        service = runtime.service("delivery")
        assert list(service.subscriptions) == ["keep_g-keep"]
        assert any("broken_g.json" in p for p in service.problems)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
    assert (tmp_path / "persist" / "broken_g.json.corrupt").exists()


async def test_health_and_metrics_report_deliveries(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver, fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    await produce(kafka_bootstrap, topic, 5)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        status, health = await admin.call("GET", "/healthz")
        assert status == 200 and health["status"] == "ok"
        await admin.subscribe(subscription("m", [{"name": topic}], receiver.url,
                                           fast_group=fast_group_kwargs))
        await receiver.wait_for(lambda: len(receiver.delivered()) == 5)
        text = await metrics_text(admin)
        line = f'hookstream_delivered_total{{subscription="m_g-m",topic="{topic}",partition="0"}} 5'
        assert line in text
        assert "hookstream_http_request_duration_ms_bucket" in text
        assert "hookstream_lag" in text


async def metrics_text(admin: Admin) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(
            admin.base + "/metrics") as response:
        assert response.status == 200
        return await response.text()


async def test_a_subscription_to_an_unknown_pinned_topic_is_refused_and_nothing_else_breaks(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver, fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    await produce(kafka_bootstrap, topic, 2)
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        await admin.subscribe(subscription("ok", [{"name": topic}], receiver.url,
                                           fast_group=fast_group_kwargs))
        status, reply = await admin.call("POST", "/broker/subscription", subscription(
            "bad", [{"name": "no-such-topic-xyz", "partitions": [{"number": 0}]},
                    {"name": "nor-this-one-xyz"}], receiver.url))
        assert status == 503 and reply["reason"] == "subscription failed to start", reply
        assert "nor-this-one-xyz" in reply["details"]
        await receiver.wait_for(lambda: len(receiver.delivered()) == 2)
        status, listed = await admin.call("GET", "/broker/subscription")
        assert [s["id"] for s in listed["data"]] == ["ok"]


async def test_a_put_of_what_get_showed_keeps_the_stored_secrets(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    topic = await topic_factory()
    secret = "whsec_c2VjcmV0"
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        await admin.subscribe(subscription(
            "k", [{"name": topic}], receiver.url + "?token=t0k&plain=1",
            additionalHeaders={"Authorization": "Bearer hush"},
            signingSecret=f"{secret} whsec_b2xk"))
        _, shown = await admin.call("GET", "/broker/subscription/k/g-k")
        document = shown["data"]["consumer"]
        assert document["subscriptionMethod"]["uri"].endswith("?token=***&plain=***")
        document["subscriptionMethod"]["delayOnErrorMs"] = 60  # the change meant
        status, reply = await admin.call("PUT", "/broker/subscription/k/g-k", document)
        assert status == 200, reply
        await produce(kafka_bootstrap, topic, 1)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
        [push] = receiver.pushes
        assert push.headers["Authorization"] == "Bearer hush"
        assert push.query["token"] == "t0k" and push.query["plain"] == "1"
        assert accepts(secret, push.headers, push.body)
        assert len(push.headers["webhook-signature"].split(" ")) == 2
        document["subscriptionMethod"]["additionalHeaders"]["X-New"] = "***"
        status, reply = await admin.call("PUT", "/broker/subscription/k/g-k", document)
        assert (status, reply["reason"]) == (
            400, "invalid subscriptionMethod.additionalHeaders.X-New"), reply
        del document["subscriptionMethod"]["additionalHeaders"]["X-New"]
        document["subscriptionMethod"]["signingSecret"] = "*** *** ***"
        status, reply = await admin.call("PUT", "/broker/subscription/k/g-k", document)
        assert (status, reply["reason"]) == (
            400, "invalid subscriptionMethod.signingSecret"), reply


async def test_past_the_instances_limits_a_subscribe_is_a_429_and_the_list_pages(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    topics = [await topic_factory() for _ in range(3)]
    async with make_runtime(kafka_bootstrap, tmp_path, delivery={
            "max_subscriptions": 3, "max_topics": 3, "max_patterns": 0}) as runtime:
        admin = Admin(runtime)
        for i, topic in enumerate(topics):
            await admin.subscribe(subscription(f"s{i}", [{"name": topic}], receiver.url))
        status, reply = await admin.call("POST", "/broker/subscription", subscription(
            "s3", [{"name": topics[0]}], receiver.url))
        assert (status, reply["reason"]) == (429, "too many subscriptions"), reply
        assert "max_subscriptions" in reply["details"]
        status, reply = await admin.call("PUT", "/broker/subscription/s0/g-s0", subscription(
            "s0", [{"name": "other.*", "pattern": True}], receiver.url))
        assert (status, reply["reason"]) == (429, "too many patterns"), reply
        status, page = await admin.call("GET", "/broker/subscription?offset=1&limit=1")
        assert status == 200 and [s["id"] for s in page["data"]] == ["s1"]
        async with aiohttp.ClientSession() as session:
            async with session.get(admin.base + "/broker/subscription?limit=2") as first:
                assert first.headers["Link"] == \
                    '</broker/subscription?offset=2&limit=2>; rel="next"'
            async with session.get(admin.base + "/broker/subscription?offset=2") as last:
                assert "Link" not in last.headers
                assert [s["id"] for s in (await last.json())["data"]] == ["s2"]
        for query in ("limit=0", "offset=-1", "limit=x", "offset=1&offset=2"):
            status, reply = await admin.call("GET", f"/broker/subscription?{query}")
            assert status == 400, (query, reply)
        status, listed = await admin.call("GET", "/broker/subscription")
        assert [s["id"] for s in listed["data"]] == ["s0", "s1", "s2"]  # all, as before


async def test_two_runtimes_in_one_process_push_with_their_own_transport(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        receiver: Receiver) -> None:
    """#34: the transport was a process-wide module default every runtime shared."""
    from actors.delivery.egress.http import EgressActor
    from actors.delivery.service import DeliveryService

    topic = await topic_factory()
    shown: dict[str, str] = {}
    for transport in ("aiohttp", "lean"):
        async with make_runtime(kafka_bootstrap, tmp_path / transport,
                                egress={"transport": transport}) as runtime:
            await Admin(runtime).subscribe(subscription(f"t{transport}", [{"name": topic}],
                                                        receiver.url))
            tree = runtime.service(DeliveryService).tree(f"t{transport}_g-t{transport}")
            egress = tree.child("egress")
            assert isinstance(egress, EgressActor)
            shown[transport] = type(egress._session).__name__
    assert shown == {"aiohttp": "AiohttpTransport", "lean": "LeanTransport"}
