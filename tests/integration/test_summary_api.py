"""`GET /broker/summary` (issue 36) against a running runtime: totals counted over every
subscription, the ones that need attention first (a failing endpoint whose origin's
breaker opened, a paused one), search and paging, and a 400 for a bad query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    produce,
    subscription,
)
from tests.waits import until

pytestmark = pytest.mark.integration


async def fails(push: Push) -> int:
    return 500


async def summary(admin: Admin, query: str = "") -> dict[str, Any]:
    status, reply = await admin.call("GET", "/broker/summary" + query)
    assert status == 200, reply
    data: dict[str, Any] = reply["data"]
    return data


async def test_the_summary_counts_every_subscription_and_shows_the_failing_ones_first(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    await produce(kafka_bootstrap, topic, 5)
    good, bad = await Receiver().start(), await Receiver(fails).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            for name in ("alpha", "beta", "gamma"):
                await admin.subscribe(subscription(name, [{"name": topic}], good.url,
                                                   fast_group=fast_group_kwargs))
            await admin.subscribe(subscription(
                "broken", [{"name": topic}], bad.url, fast_group=fast_group_kwargs,
                circuitBreaker={"minRequests": 2, "failureRatio": 0.5, "openMs": 600_000}))
            await good.wait_for(lambda: len(good.delivered()) == 15)
            await bad.wait_for(lambda: len(bad.pushes) >= 2)
            status, _ = await admin.call("POST", "/broker/subscription/gamma/g-gamma/pause")
            assert status == 200
            async def broken_and_paused_first() -> dict[str, Any] | None:
                shown = await summary(admin)  # gathered anew every 2 s at most
                keys = [r["key"] for r in shown["items"][:2]]
                return shown if keys == ["broken_g-broken", "gamma_g-gamma"] else None

            first = await until(broken_and_paused_first, timeout_s=20, poll_s=0.2,
                                what="the broken and the paused subscription first")
            rows = first["items"]
            assert [r["key"] for r in rows] == ["broken_g-broken", "gamma_g-gamma",
                                                "alpha_g-alpha", "beta_g-beta"]
            assert rows[0]["attention"] == ["failing", "breaker_open"]
            assert rows[0]["breaker"] == "open" and rows[0]["delivered"] == 0
            assert rows[1]["attention"] == ["paused"] and rows[1]["delivered"] is None
            assert rows[2]["attention"] == [] and rows[2]["delivered"] == 5
            totals = first["totals"]
            assert totals["subscriptions"] == 4 and totals["needing_attention"] == 2
            assert totals["states"] == {"paused": 1, "running": 3}
            assert totals["attention"]["breaker_open"] == 1
            assert totals["delivered"] == 10  # alpha and beta; gamma's outlet stopped
            assert first["origins"][0]["breaker"] == "open"
            assert first["origins"][0]["origin"] == f"http://127.0.0.1:{bad.port}"
            assert first["runtime"]["version"] and first["cluster"] is None

            searched = await summary(admin, "?q=BET")
            assert [r["key"] for r in searched["items"]] == ["beta_g-beta"]
            assert searched["matched"] == 1 and searched["totals"]["subscriptions"] == 4
            by_state = await summary(admin, "?state=paused")
            assert [r["key"] for r in by_state["items"]] == ["gamma_g-gamma"]
            attention = await summary(admin, "?attention=true")
            assert attention["matched"] == 2
            paged = await summary(admin, "?offset=1&limit=2")
            assert [r["key"] for r in paged["items"]] == ["gamma_g-gamma", "alpha_g-alpha"]
            assert paged["matched"] == 4
            by_endpoint = await summary(admin, f"?q=127.0.0.1:{bad.port}")
            assert [r["key"] for r in by_endpoint["items"]] == ["broken_g-broken"]
    finally:
        await good.stop()
        await bad.stop()


@pytest.mark.parametrize("query", ["?limit=0", "?limit=501", "?offset=-1", "?offset=x",
                                   "?state=sleepy", "?state=", "?attention=false",
                                   "?q=" + "x" * 201, "?limit=%D9%A3"])
async def test_a_bad_summary_query_is_a_400_naming_the_parameter(
        kafka_bootstrap: str, tmp_path: Path, query: str) -> None:
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        status, reply = await Admin(runtime).call("GET", "/broker/summary" + query)
        assert status == 400, reply
        assert reply["reason"].startswith("invalid ")
