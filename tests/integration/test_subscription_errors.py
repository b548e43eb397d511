"""The library API raises delivery's domain errors (never the admin API's `BadRequest`),
and a subscription the store could not keep is refused before anything starts."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from tests.waits import until

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


async def test_a_refused_commit_shows_apart_from_the_position_kafka_accepted(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    """#34: with a live consumer in the subscription's group Kafka refuses the member's
    commits, and the status said `committed` 30 where Kafka held nothing."""
    from tests.integration.delivery_harness import LiveMember, Receiver, produce

    topic = await topic_factory(partitions=1)
    old = await LiveMember(kafka_bootstrap, topic, "g-live").start()
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("live", [{"name": topic}], receiver.url))
            await produce(kafka_bootstrap, topic, 30)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 30)

            async def shown() -> dict[str, Any]:
                answer = await admin.call("GET", "/broker/subscription/live/g-live")
                status: dict[str, Any] = answer[1]["data"]["status"]
                return status

            async def refusal_reported() -> dict[str, Any] | None:
                status = await shown()
                refused = status["member"]["commitError"] and status["refused_commits"]
                return status if refused else None

            status = await until(refusal_reported, timeout_s=15,
                                 what="the member reports the refused commits")
            assert [(p["partition"], p["committed"]) for p in status["partitions"]] == [
                (0, None)], status
            assert [(r["partition"], r["position"], r["accepted"])
                    for r in status["refused_commits"]] == [(0, 30, None)], status
            await refusal_listed_everywhere(admin, runtime.admin.url, topic)
            await old.leave()

            async def commit_taken() -> dict[str, Any] | None:
                status = await shown()
                return None if status["member"]["commitError"] else status

            status = await until(commit_taken, timeout_s=15,
                                 what="the member's commit taken")
            assert status["refused_commits"] == []
            assert [p["committed"] for p in status["partitions"]] == [30]
            listed = (await admin.call("GET", "/broker/subscription"))[1]["data"]
            assert [item["refusedCommits"] for item in listed] == [[]]
            row = await until(lambda: summary_row(admin, lambda r: not r["refused_commits"]),
                              timeout_s=15, what="the summary without refused commits")
            assert "commit_refused" not in row["attention"], row
    finally:
        await old.stop()
        await receiver.stop()


async def test_a_refused_commit_shows_in_the_status_while_kafka_cannot_be_read(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A flaky status page (a loaded machine): the row showed the refused commit, the
    details none, because they came only from reading Kafka, which timed out. Kafka is
    made silent for that read here (a listener that never answers): the refused position
    the member knows still shows, with why what Kafka holds does not."""
    from tests.integration.delivery_harness import LiveMember, Receiver, produce

    topic = await topic_factory(partitions=1)
    other = await LiveMember(kafka_bootstrap, topic, "g-silent").start()
    receiver = await Receiver().start()
    silent = socket.socket()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription("silent", [{"name": topic}], receiver.url))
            await produce(kafka_bootstrap, topic, 30)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 30)
            await until(lambda: summary_row(admin, lambda r: bool(r["refused_commits"])),
                        timeout_s=15, what="the summary's row shows the refused commit")
            silent.bind(("127.0.0.1", 0))
            silent.listen()  # connections wait in the backlog: no answer ever
            address = f"127.0.0.1:{silent.getsockname()[1]}"
            monkeypatch.setattr(runtime, "bootstrap", lambda _broker: address)
            code, answer = await admin.call("GET", "/broker/subscription/silent/g-silent")
            assert code == 200, answer
            status = answer["data"]["status"]
            assert [(r["partition"], r["position"], r["accepted"])
                    for r in status["refused_commits"]] == [(0, 30, None)], status
            assert status["positions_unavailable"].startswith("TimeoutError"), status
            assert [(p["partition"], p["committed"]) for p in status["partitions"]] == [
                (0, None)], status
            code, answer = await admin.call("GET", "/broker/subscription/silent/nope")
            assert code == 404 and answer["success"] is False, answer
    finally:
        silent.close()
        await other.stop()
        await receiver.stop()


async def summary_row(admin: Admin, wanted: Callable[[dict[str, Any]], bool]
                      ) -> dict[str, Any] | None:
    """The summary's only row once `wanted` holds for it (the summary is gathered at most
    every `OVERVIEW_FRESH_MS`)."""
    rows = (await admin.call("GET", "/broker/summary"))[1]["data"]["items"]
    return rows[0] if rows and wanted(rows[0]) else None


async def refusal_listed_everywhere(admin: Admin, url: str, topic: str) -> None:
    """#34: the list, the summary and `hookstream status` show the refused position apart
    from the accepted one (none yet: the old member's group never took ours)."""
    from tests.integration.test_console import hookstream

    refused = [{"topic": topic, "partition": 0, "position": 30, "accepted": None,
                "reason": ""}]
    listed = (await admin.call("GET", "/broker/subscription"))[1]["data"]
    assert [item["refusedCommits"] for item in listed] == [refused], listed
    row = await until(lambda: summary_row(admin, lambda r: bool(r["refused_commits"])),
                      timeout_s=15, what="the summary's row shows the refused commit")
    assert row["refused_commits"] == refused and "commit_refused" in row["attention"], row
    code, out, err = await hookstream("status", "--url", url)
    assert code == 1, err  # a subscription needs attention
    assert "commits Kafka refuses" in out, out
    line = next(line for line in out.splitlines() if f"{topic}/0" in line)
    assert line.split()[-2:] == ["30", "-"], out  # refused 30, accepted none
