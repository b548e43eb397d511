"""A dead endpoint opens its origin's circuit breaker (on by default): requests stop (no
hot loop of retries), the status, metrics and journal show it, the probe closes it again
once the endpoint is back, and with bounded retries its records still reach the
dead-letter topic on their retry schedule."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    journal_events,
    make_runtime,
    produce,
    subscription,
)
from tests.waits import until

pytestmark = pytest.mark.integration


class RetryAfterReceiver(Receiver):
    """Answers 503 with `Retry-After: 2` (seconds), everything else as told."""

    async def _handle(self, request: web.Request) -> web.Response:
        response = await super()._handle(request)
        if response.status == 503:
            response.headers["Retry-After"] = "2"
        return response


async def test_a_dead_endpoint_opens_the_breaker_and_a_probe_closes_it(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dead = {"yes": True}

    async def answer(push: Push) -> int:
        return 500 if dead["yes"] else 200

    receiver = await Receiver(answer).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:  # on by default
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "cb", [{"name": topic, "config": {"concurrencyFactor": 10}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=20,
                circuitBreaker={"openMs": 1000}))
            await produce(kafka_bootstrap, topic, 30)
            await until(lambda: _origin_says(admin, "cb", "open"), what="the breaker opens")
            before = len(receiver.pushes)
            # open for 1 s, until its probe: with retries every 20 ms a hot loop would send
            # hundreds meanwhile; one request in flight when it opened, and the probe, may come
            await until(lambda: _origin_says(admin, "cb", "half_open", transitioned=True),
                        what="the breaker probes")
            assert len(receiver.pushes) - before <= 2, "requests went to an open origin"
            dead["yes"] = False
            await receiver.wait_for(lambda: len(receiver.delivered()) == 30, timeout_s=30)
            _, one = await admin.call("GET", "/broker/subscription/cb/g-cb")
            origin = one["data"]["status"]["endpoint"]["origin"]
            assert origin["breaker"] == "closed"
            moves = [(t["from"], t["to"]) for t in reversed(origin["transitions"])]
            assert moves[:1] == [("closed", "open")] and moves[-1] == ("half_open", "closed")
    finally:
        await receiver.stop()


async def test_a_dead_endpoints_records_reach_the_dead_letter_topic_with_few_requests(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    records, retries = 100, 3

    async def dead(push: Push) -> int:
        return 500

    receiver = await Receiver(dead).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "dl", [{"name": topic, "config": {"concurrencyFactor": 10}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=20, retryBeforeCommit=retries,
                deadLetterTopic=f"{topic}.dlt",
                circuitBreaker={"failureRatio": 0.5, "minRequests": 5, "openMs": 1000}))
            await produce(kafka_bootstrap, topic, records, partitions=2)
            async def all_dead_lettered() -> dict[str, Any] | None:
                _, one = await admin.call("GET", "/broker/subscription/dl/g-dl")
                shown: dict[str, Any] = one["data"]["status"]
                done = sum(p["dead_lettered"] for p in shown["partitions"]) == records
                return shown if done else None

            status = await until(all_dead_lettered, poll_s=0.1,
                                 what=f"all {records} records dead-lettered")
            origin = status["endpoint"]["origin"]
            assert origin["open_ms"] == 1000 and origin["min_requests"] == 5
            _, metrics = await _metrics(admin)
        # without the breaker every attempt is a request: records x (1 + retries)
        assert len(receiver.pushes) < records * (1 + retries) // 4, len(receiver.pushes)
    finally:
        await receiver.stop()
    assert "hookstream_origin_breaker_transitions_total" in metrics
    changes = [e["reason"] for e in journal_events(tmp_path / "journal", "breaker_changed")]
    assert any(c.startswith("closed -> open") for c in changes), changes


async def _origin_says(admin: Admin, sub: str, state: str, transitioned: bool = False) -> bool:
    """The subscription's origin breaker is in `state` now, or (`transitioned`) went to it
    at least once (a half-open breaker whose probe failed is open again at once)."""
    _, one = await admin.call("GET", f"/broker/subscription/{sub}/g-{sub}")
    origin = one["data"]["status"]["endpoint"]["origin"]
    if transitioned:
        return any(t["to"] == state for t in origin["transitions"])
    return bool(origin["breaker"] == state)


async def _metrics(admin: Admin) -> tuple[int, str]:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(
            admin.base + "/metrics", headers=admin.headers) as response:
        return response.status, await response.text()


async def test_subscriptions_of_one_origin_share_the_strictest_rate_limit(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    arrivals: list[float] = []

    async def answer(push: Push) -> int:
        arrivals.append(asyncio.get_running_loop().time())
        return 200

    receiver = await Receiver(answer).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            for name, rate in (("fast", 500), ("slow", 5)):
                await admin.subscribe(subscription(
                    name, [{"name": topic, "config": {"concurrencyFactor": 10}}],
                    receiver.url, fast_group=fast_group_kwargs, rateLimitPerSecond=rate))
            await produce(kafka_bootstrap, topic, 10)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 20)
            for name in ("fast", "slow"):
                _, one = await admin.call("GET", f"/broker/subscription/{name}/g-{name}")
                assert one["data"]["status"]["endpoint"]["origin"]["rate_limit"] == 5
            # the strict one leaves: its limit goes with it
            status, _ = await admin.call("POST", "/broker/unsubscribe",
                                         {"id": "slow", "group.id": "g-slow"})
            assert status == 200
            _, one = await admin.call("GET", "/broker/subscription/fast/g-fast")
            assert one["data"]["status"]["endpoint"]["origin"]["rate_limit"] == 500
    finally:
        await receiver.stop()
    # 20 requests through one bucket of 5/s (a burst of 5): the last 15 take >= 3 s
    assert max(arrivals) - min(arrivals) >= 2.5


async def _most_in_flight(kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
                          fast_group_kwargs: dict[str, int], origin_limit: int) -> int:
    """The most requests two subscriptions of one origin had in flight at once."""
    topic = await topic_factory(partitions=1)
    inflight = {"now": 0, "most": 0}

    async def slow(push: Push) -> int:
        inflight["now"] += 1
        inflight["most"] = max(inflight["most"], inflight["now"])
        await asyncio.sleep(0.02)
        inflight["now"] -= 1
        return 200

    receiver = await Receiver(slow).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path,
                                egress={"origin_max_connections": origin_limit}) as runtime:
            admin = Admin(runtime)
            for name in ("one", "two"):
                await admin.subscribe(subscription(
                    name, [{"name": topic, "config": {"concurrencyFactor": 10}}],
                    receiver.url, fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, topic, 60)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 120)
    finally:
        await receiver.stop()
    return inflight["most"]


async def test_subscriptions_of_one_origin_share_its_connection_limit(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    # the control: with a wide limit the two subscriptions (10 each) go past 3 at once
    unlimited = await _most_in_flight(kafka_bootstrap, topic_factory, tmp_path / "wide",
                                      fast_group_kwargs, origin_limit=1000)
    assert unlimited > 3, unlimited
    limited = await _most_in_flight(kafka_bootstrap, topic_factory, tmp_path / "narrow",
                                    fast_group_kwargs, origin_limit=3)
    assert limited == 3, limited  # the limit is used, and never passed


async def test_a_503_with_retry_after_holds_every_subscription_of_the_origin(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    first, second = await topic_factory(partitions=1), await topic_factory(partitions=1)
    answered_503 = asyncio.Event()
    arrivals: list[tuple[str, float]] = []

    async def answer(push: Push) -> int:
        loop = asyncio.get_running_loop()
        arrivals.append((push.topic, loop.time()))
        if push.topic == first and not answered_503.is_set():
            answered_503.set()
            return 503
        return 200

    receiver = await RetryAfterReceiver(answer).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            for name, topic in (("a", first), ("b", second)):
                await admin.subscribe(subscription(name, [{"name": topic}], receiver.url,
                                                   fast_group=fast_group_kwargs))
            await produce(kafka_bootstrap, second, 1)  # b is assigned and running
            await receiver.wait_for(lambda: len(receiver.ok) == 1)
            await produce(kafka_bootstrap, first, 1)
            await asyncio.wait_for(answered_503.wait(), 30)
            await produce(kafka_bootstrap, second, 1, start=1)
            await receiver.wait_for(lambda: len(receiver.ok) == 3)
    finally:
        await receiver.stop()
    [throttled_at] = [t for topic, t in arrivals if topic == first][:1]
    later = [t for topic, t in arrivals if topic == second and t > throttled_at]
    assert later and min(later) - throttled_at >= 1.9  # Retry-After: 2 holds the origin


async def test_every_time_the_breaker_status_shows_is_epoch_ms(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)

    async def dead(push: Push) -> int:
        return 500

    receiver = await Receiver(dead).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "ep", [{"name": topic, "config": {"concurrencyFactor": 10}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=20,
                circuitBreaker={"minRequests": 5, "openMs": 60_000}))
            before = time.time() * 1000
            await produce(kafka_bootstrap, topic, 10)

            async def open_origin() -> dict[str, Any] | None:
                _, one = await admin.call("GET", "/broker/subscription/ep/g-ep")
                shown: dict[str, Any] = one["data"]["status"]["endpoint"]["origin"]
                return shown if shown["breaker"] == "open" else None

            origin = await until(open_origin, what="the breaker open")
            now = time.time() * 1000
            opened = origin["transitions"][0]["at"]
            assert before <= origin["opened_at"] <= now, (origin, before, now)  # epoch ms
            assert abs(origin["opened_at"] - opened) < 1_000, origin
            assert origin["probe_at"] == origin["opened_at"] + 60_000
            assert origin["throttled_until"] is None
    finally:
        await receiver.stop()
