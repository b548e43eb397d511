"""Positions committed under many consumer groups without joining them (issue 24).

A subscription's `group.id` names where its positions are kept (Queue-Over-Http's model),
not a group membership: the instance that reads a partition commits each subscription's
position under that subscription's group, as a manually assigned consumer does
(`OffsetCommit` with generation -1 and no member id), and reads it back with `OffsetFetch`.
Everything goes through one client (the instance member's), never one per subscription.

The Kafka protocol carries one group per `OffsetCommit` and per `OffsetFetch` (before
OffsetFetch v8, which aiokafka does not speak), so a commit round sends one request per
group that moved, all at once, to each group's coordinator (looked up once and cached;
looked up again after `NOT_COORDINATOR`).

A group with live members (a foreign consumer, an instance of an older version during a
rolling upgrade) refuses commits without a generation (`UNKNOWN_MEMBER_ID`,
`ILLEGAL_GENERATION`, `REBALANCE_IN_PROGRESS`): `commit` returns the refusal per group and
the caller keeps the position to send it again; nothing is lost, the records since the
last accepted commit are delivered again if the partition moves meanwhile.

A round never raises (issue 32, item 4): a broker cut closes the client's transport, and
aiokafka then raises `RuntimeError` or `OSError`, not only `KafkaError`; every failure is a
`Refusal`. A partition the broker does not know (`UNKNOWN_TOPIC_OR_PARTITION`: the topic
was deleted) is named in `gone`, so the caller drops the position instead of sending it
to a topic created again under that name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Response
from aiokafka.protocol.commit import OffsetFetchRequest

from runtime.kafka.client import make_client
from runtime.kafka.commit_wire import FastOffsetCommitRequest

log = logging.getLogger(__name__)
GROUP_COORDINATOR = 0  # FindCoordinator key type
NO_GENERATION = -1
NO_MEMBER = ""
KEEP_FOREVER = -1  # retention_time: the broker's default
_STALE_COORDINATOR = frozenset({14, 15, 16})  # loading, not available, not coordinator
_UNKNOWN_PARTITION = 3
PER_TURN = 64
"""Requests of a commit round or an offset read started per turn of the loop (`in_turns`)."""
T = TypeVar("T")


@dataclass(slots=True)
class Refusal:
    """Why a group did not take a commit (or an offset fetch)."""

    group: str
    reason: str
    retriable: bool = True
    gone: frozenset[TopicPartition] = frozenset()
    """Partitions the broker does not know (deleted topics)."""


@dataclass(slots=True)
class GroupOffsets:
    """Commits and fetches of many groups' offsets through one aiokafka client.

    `client` is an `AIOKafkaClient` that is started (the instance member's consumer's,
    `runtime.kafka.compat.client_of`)."""

    client: AIOKafkaClient
    _coordinators: dict[str, int] = field(default_factory=dict)

    @classmethod
    async def started(cls, bootstrap: str) -> GroupOffsets:
        """Offsets through a client of their own: on a connection shared with a consumer,
        every request waits behind the fetch the broker holds for up to
        `fetch.max.wait.ms` (brokers answer a connection's requests in order), and a
        read of positions for new cursors came back in one burst of hundreds of answers
        that held the event loop 30-50 ms (the tail of a subscribe's latency)."""
        client = make_client(bootstrap)
        try:
            await client.bootstrap()
        except BaseException:
            await client.close()
            raise
        return cls(client)

    async def close(self) -> None:
        await self.client.close()

    async def commit(self, positions: Mapping[str, Mapping[TopicPartition, int]],
                     metadata: str = "") -> list[Refusal]:
        """Commit every group's positions (one request per group, all under way,
        `PER_TURN` started per loop turn), each with `metadata` (who wrote it); the groups
        that refused, with why."""
        groups = [g for g, tps in positions.items() if tps]
        results = await in_turns([partial(self._commit_one, g, positions[g], metadata)
                                  for g in groups])
        return [r for r in results if r is not None]

    async def fetch_many(self, groups: Mapping[str, list[TopicPartition]],
                         ) -> list[dict[TopicPartition, tuple[int | None, str]]]:
        """`fetch_with_metadata` of each group (in `groups`' order), started a few per loop turn."""
        return await in_turns([partial(self.fetch_with_metadata, g, tps)
                               for g, tps in groups.items()])

    async def fetch(self, group: str, tps: list[TopicPartition]
                    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of `tps` (None: nothing committed). Raises
        `KafkaError` when the group's coordinator cannot answer."""
        found = await self.fetch_with_metadata(group, tps)
        return {tp: offset for tp, (offset, _metadata) in found.items()}

    async def fetch_with_metadata(self, group: str, tps: list[TopicPartition],
                                  ) -> dict[TopicPartition, tuple[int | None, str]]:
        """The group's committed offsets of `tps`, each with the metadata its writer
        left ("" when none)."""
        wanted = [(topic, [p for p, _ in parts])
                  for topic, parts in _by_topic(dict.fromkeys(tps, 0)).items()]
        request = OffsetFetchRequest(group, wanted)
        response = await self._send(group, request)
        found: dict[TopicPartition, tuple[int | None, str]] = dict.fromkeys(tps, (None, ""))
        for topic, partitions in response.topics:
            for partition, offset, metadata, error in partitions:
                tp = TopicPartition(topic, partition)
                if error:
                    raise for_code(error)(f"offset fetch of group {group} {tp}")
                if tp in found:
                    found[tp] = (offset if offset >= 0 else None, metadata or "")
        return found

    async def _commit_one(self, group: str, positions: Mapping[TopicPartition, int],
                          metadata: str) -> Refusal | None:
        topics = [(topic, [(p, off, metadata) for p, off in parts])
                  for topic, parts in _by_topic(positions).items()]
        request = FastOffsetCommitRequest(group, NO_GENERATION, NO_MEMBER, KEEP_FOREVER, topics)
        try:
            response = await self._send(group, request)
        except (KafkaError, OSError, RuntimeError, TimeoutError) as exc:
            return Refusal(group, f"commit failed: {exc!r}")
        errors = {TopicPartition(topic, partition): error
                  for topic, partitions in response.topics
                  for partition, error in partitions if error}
        gone = frozenset(tp for tp, error in errors.items() if error == _UNKNOWN_PARTITION)
        if gone:
            return Refusal(group, f"commit refused: {', '.join(map(str, sorted(gone)))} "
                                  "unknown (deleted)", gone=gone)
        return self._refused(group, next(iter(errors.values()))) if errors else None

    def _refused(self, group: str, code: int) -> Refusal:
        if code in _STALE_COORDINATOR:
            self._coordinators.pop(group, None)
        name = for_code(code).__name__
        if code in (22, 25, 27):  # illegal generation, unknown member, rebalancing
            return Refusal(group, f"the group has live members ({name}): another consumer "
                                  "uses this group.id; the commit is retried")
        return Refusal(group, f"commit refused: {name}")

    async def _send(self, group: str, request: object) -> Response:
        node = await self._coordinator(group)
        try:
            return await self.client.send(node, request)
        except (KafkaError, OSError, RuntimeError):
            self._coordinators.pop(group, None)
            raise

    async def _coordinator(self, group: str) -> int:
        node = self._coordinators.get(group)
        if node is None:
            found = await self.client.coordinator_lookup(GROUP_COORDINATOR, group)
            node = self._coordinators[group] = int(found)
        return node


async def in_turns(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Start every call, `PER_TURN` in each turn of the event loop, and wait for them all
    (their results in order; a failure or a cancel ends the others). A commit round of
    4,000 groups started at once held the loop 0.4 s encoding every request in one turn;
    waves of 512 still held it ~50 ms each (the tail of a subscribe's latency at 10,000
    subscribers); a window of 64 under way made a read of 512 groups eight round trips,
    each behind the embedded broker's held fetch on the shared connection (~2 s: 10,000
    new cursors waited 20 s for their positions)."""
    started: list[asyncio.Future[T]] = []
    try:
        for n, call in enumerate(calls, 1):
            started.append(asyncio.ensure_future(call()))
            if n % PER_TURN == 0:
                await asyncio.sleep(0)  # these encode and send in the next turn
        return list(await asyncio.gather(*started))
    except BaseException:  # a deadline passed, or a call failed: none outlives this
        for request in started:
            request.cancel()
        await asyncio.gather(*started, return_exceptions=True)
        raise


def _by_topic(positions: Mapping[TopicPartition, int]) -> dict[str, list[tuple[int, int]]]:
    topics: dict[str, list[tuple[int, int]]] = {}
    for tp, offset in sorted(positions.items()):
        topics.setdefault(tp.topic, []).append((tp.partition, offset))
    return topics
