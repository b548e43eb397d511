"""Real parts for delivery tests: an aiohttp receiver on loopback, a runtime on the
session's broker, a producer and an admin client. Nothing here is a mock."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import make_producer
from tests import waits

Behaviour = Callable[["Push"], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class Push:
    """One request the receiver got."""

    headers: dict[str, str]
    body: bytes
    query: dict[str, str]
    method: str = "POST"
    path: str = "/hook"

    @property
    def topic(self) -> str:
        return self.headers["QOH-Topic"]

    @property
    def partition(self) -> int:
        return int(self.headers["QOH-Partition"])

    @property
    def offset(self) -> int:
        return int(self.headers["QOH-Message-Number"])

    @property
    def consumer(self) -> str:
        return self.headers["QOH-Consumer"]


async def always_ok(push: Push) -> int:
    return 200


@dataclass
class Receiver:
    """An HTTP endpoint that records every push and answers with `behaviour`."""

    behaviour: Behaviour = always_ok
    answer_body: Callable[[Push, int], bytes] | None = None  # (push, status) -> body
    answer_headers: Callable[[Push, int], dict[str, str]] | None = None  # -> headers
    pushes: list[Push] = field(default_factory=list)
    ok: list[Push] = field(default_factory=list)
    port: int = 0
    path: str = "/hook"
    backlog: int = 128  # its listen backlog: a small one overflows under a burst of connects
    _runner: web.AppRunner | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", self.path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=self.backlog)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        push = Push(dict(request.headers), await request.read(), dict(request.query),
                    request.method, request.path)
        self.pushes.append(push)
        status = await self.behaviour(push)
        if 200 <= status < 300:
            self.ok.append(push)
        self._changed.set()
        body = self.answer_body(push, status) if self.answer_body is not None else None
        headers = self.answer_headers(push, status) if self.answer_headers else None
        return web.Response(status=status, body=body, headers=headers)

    def delivered(self) -> set[tuple[str, str, int, int]]:
        return {(p.consumer, p.topic, p.partition, p.offset) for p in self.ok}

    def duplicates(self) -> list[tuple[str, str, int, int]]:
        counts = Counter((p.consumer, p.topic, p.partition, p.offset) for p in self.ok)
        return [k for k, n in counts.items() if n > 1]

    def unexplained_duplicates(self, journal: Path) -> list[tuple[str, str, int, int]]:
        """Records pushed twice that the runtime's journal (in `journal`) does not explain.
        At least once allows a second push after a failed attempt (a request that timed
        out but reached the receiver late, as at a receiver whose accept queue overflowed
        on a machine under load), and of the records from a `drain_cut`'s position on: the
        drain of a stop or revoke reached its deadline with a push in flight there, so the
        next owner starts at that record (and pushes again what was finished above it)."""
        failed = set(failed_records(journal))
        cuts: dict[tuple[str, str, int], int] = {}
        for cut in journal_events(journal, "drain_cut"):
            cursor = cut["subscription"], cut["topic"], cut["partition"]
            cuts[cursor] = min(cut["offset"], cuts.get(cursor, cut["offset"]))
        return [key for key in self.duplicates() if key not in failed
                and key[3] < cuts.get(key[:3], key[3] + 1)]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
        """Until `predicate()` holds, checked at each push (and every 0.5 s, for state
        elsewhere); `timeout_s` bounds a hang (tests/waits.py)."""
        try:
            await waits.until(predicate, timeout_s=timeout_s, wake=self._changed, poll_s=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {len(self.pushes)} pushes, {len(self.ok)} ok, "
                                 f"{len(self.delivered())} distinct") from None


def runtime_config(bootstrap: str, tmp: Path, **extra: Any) -> dict[str, Any]:
    return {
        "brokers": [{"name": "Kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0", **extra.pop("admin", {})},
        "persistence": {"dir": str(tmp / "persist")},
        "journal": {"dir": str(tmp / "journal"), "flush_interval_ms": 50,
                    **extra.pop("journal", {})},
        "runtime": {"shutdown_deadline_ms": 8000},
        # quick rebalances of the instance group (conftest.fast_group_kwargs says why)
        "delivery": {"session_timeout_ms": 2000, "settle_ms": 0, **extra.pop("delivery", {})},
        **extra,
    }


def make_runtime(bootstrap: str, tmp: Path, **extra: Any) -> Runtime:
    return Runtime(parse_config(runtime_config(bootstrap, tmp, **extra)),
                   services=[DeliveryService])


def subscription(sub_id: str, topics: list[dict[str, Any]], uri: str,
                 group: str | None = None, fast_group: dict[str, int] | None = None,
                 **method: Any) -> dict[str, Any]:
    properties = {k.replace("_", "."): str(v) for k, v in (fast_group or {}).items()}
    return {
        "id": sub_id,
        "group.id": group or f"g-{sub_id}",
        "broker": "Kafka",
        "topics": topics,
        "subscriptionMethod": {"type": "http", "uri": uri, "delayOnErrorMs": 50, **method},
        "properties": properties,
    }


class Admin:
    """A client of the runtime's admin API."""

    def __init__(self, runtime: Runtime, token: str = "") -> None:
        self.base = runtime.admin.url
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def call(self, method: str, path: str, body: Any = None,
                   raw: bytes | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """`body` is sent as JSON; `raw` bytes too (`Content-Type: application/json`)
        unless `headers` say otherwise."""
        sent = {**self.headers, **({"Content-Type": "application/json"} if raw else {}),
                **(headers or {})}
        async with aiohttp.ClientSession() as session, session.request(
                method, self.base + path, json=body if raw is None else None,
                data=raw, headers=sent) as response:
            return response.status, await response.json(content_type=None)

    async def subscribe(self, body: dict[str, Any]) -> Any:
        status, reply = await self.call("POST", "/broker/subscription", body)
        assert status == 200, reply
        return reply


async def produce(bootstrap: str, topic: str, count: int, *, partitions: int = 1,
                  key: Callable[[int], bytes | None] = lambda i: None,
                  start: int = 0,
                  timestamp: Callable[[int], int | None] = lambda i: None) -> None:
    producer = make_producer(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, f"v{i}".encode(), key=key(i),
                                       partition=i % partitions, timestamp_ms=timestamp(i))
                   for i in range(start, start + count)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        result: dict[int, int] = {}
        for p in range(partitions):
            offset = await consumer.committed(TopicPartition(topic, p))
            result[p] = -1 if offset is None else offset
        return result
    finally:
        await consumer.stop()


async def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    """Poll `check` (for state that has no event to wait on): tests/waits.py's `until`."""
    await waits.until(check, timeout_s=timeout_s, poll_s=0.1)


def per_partition_offsets(pushes: list[Push]) -> dict[tuple[str, int], list[int]]:
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    for push in pushes:
        seen[(push.topic, push.partition)].append(push.offset)
    return seen


class LiveMember:
    """A consumer of the test's own in a subscription's group, polling and assigned: Kafka
    then refuses commits from outside the group's membership (the instance member's, #34).
    `leave()` ends its membership at once; `stop()` is idempotent.

    Its session is 6 s, not the 2 s of `fast_group_kwargs`: it heartbeats from the test's
    event loop, which the runtime under test shares, and on a loaded machine a 2 s session
    ran out there (a `make test` at load 8: the member left the group, so Kafka accepted
    the commits the test expects refused). The join costs about 3 s on the embedded broker."""

    SESSION = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from runtime.kafka.client import make_consumer

        self.consumer = make_consumer(bootstrap, topic, group_id=group,
                                      enable_auto_commit=False, **self.SESSION)
        self._polling: asyncio.Task[None] | None = None

    async def start(self) -> LiveMember:
        await self.consumer.start()
        self._polling = asyncio.create_task(self._polls())
        # the group's member has its partition: nothing to await, so polled
        await waits.until(self.consumer.assignment, timeout_s=15,
                          what="the live member's assignment")
        return self

    async def _polls(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=100)

    async def leave(self) -> None:
        from runtime.kafka import compat

        if self._polling is not None:
            self._polling.cancel()
        await compat.leave_group(self.consumer)  # False when its session ended (load)
        await self.stop()

    async def stop(self) -> None:
        if self._polling is not None:
            self._polling.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.consumer.stop(), 15)


def journal_events(folder: Path, kind: str) -> list[dict[str, Any]]:
    """The events of type `kind` in the journal folder `folder` (its segments, closed and
    open), as JSON objects."""
    found = []
    for path in folder.glob("segment-*"):
        found += [e for e in map(json.loads, path.read_text().splitlines())
                  if e["type"] == kind]
    return found


def failed_records(journal: Path) -> list[tuple[str, str, int, int]]:
    """(subscription, topic, partition, offset) of every failed attempt in `journal`."""
    return [(e["subscription"], e["topic"], e["partition"], e["offset"])
            for e in journal_events(journal, "failed")]
