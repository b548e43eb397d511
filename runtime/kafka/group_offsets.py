"""Positions committed under many consumer groups without joining them (issue 24).

A subscription's `group.id` names where its positions are kept (Queue-Over-Http's model),
not a group membership: the instance that reads a partition commits each subscription's
position under that subscription's group, as a manually assigned consumer does
(`OffsetCommit` with generation -1 and no member id), and reads it back with `OffsetFetch`.
Everything goes through one client (the instance member's), never one per subscription.

The Kafka protocol carries one group per `OffsetCommit` and per `OffsetFetch` (before
OffsetFetch v8, which aiokafka does not speak), so a commit round sends one request per
group that moved, all at once, to each group's coordinator (looked up once and cached;
looked up again after `NOT_COORDINATOR` or a failure). The requests of a turn go out in
one write, with no task each (runtime/kafka/pipeline.py: 70 us of CPU per group through
aiokafka's `send`).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Response
from aiokafka.protocol.commit import OffsetFetchRequest
from aiokafka.protocol.coordination import FindCoordinatorRequest

from runtime.kafka import pipeline
from runtime.kafka.client import make_client
from runtime.kafka.commit_wire import Commit, Refused
from runtime.kafka.pipeline import A

R = TypeVar("R")
"""A kind of request (the requests of one round are of one kind)."""
Send = Callable[[AIOKafkaConnection, list[R]], pipeline.Answers[A]]
"""Writes requests of a kind in one write (`pipeline.send_all`, `pipeline.send_commits`)."""

log = logging.getLogger(__name__)
GROUP_COORDINATOR = 0  # FindCoordinator key type
_STALE_COORDINATOR = frozenset({14, 15, 16})  # loading, not available, not coordinator
_UNKNOWN_PARTITION = 3
PER_TURN = 64
"""Requests of a commit round or an offset read written per turn of the loop."""
_FAILURES = (KafkaError, OSError, RuntimeError, TimeoutError)
"""What a request that cannot be sent raises: aiokafka's errors, and a transport closed
under it (`RuntimeError`, `OSError`)."""


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
        """Commit every group's positions (one request per group, all under way, written
        `PER_TURN` at a time: runtime/kafka/pipeline.py), each with `metadata` (who wrote
        it); the groups that refused, with why."""
        commits = {g: Commit(g, _by_topic(tps), metadata) for g, tps in positions.items()
                   if tps}
        answers = await self._ask(commits, pipeline.send_commits)
        return [r for g, a in answers.items() if (r := self._committed(g, a)) is not None]

    async def fetch_many(self, groups: Mapping[str, list[TopicPartition]],
                         ) -> list[dict[TopicPartition, tuple[int | None, str]]]:
        """`fetch_with_metadata` of each group (in `groups`' order), one request each, all
        under way together. Raises the first failure."""
        requests = {g: OffsetFetchRequest(g, [(topic, [p for p, _ in parts]) for topic, parts
                                              in _by_topic(dict.fromkeys(tps, 0)).items()])
                    for g, tps in groups.items()}
        answers = await self._ask(requests, pipeline.send_all)
        return [_fetched(g, groups[g], answers[g]) for g in groups]

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
        (found,) = await self.fetch_many({group: tps})
        return found

    def _committed(self, group: str, answer: Refused | BaseException) -> Refusal | None:
        if not answer:
            return None
        if isinstance(answer, BaseException):
            return Refusal(group, f"commit failed: {answer!r}")
        errors = {TopicPartition(topic, partition): error for topic, partition, error in answer}
        gone = frozenset(tp for tp, error in errors.items() if error == _UNKNOWN_PARTITION)
        if gone:
            return Refusal(group, f"commit refused: {', '.join(map(str, sorted(gone)))} "
                                  "unknown (deleted)", gone=gone)
        return self._refused(group, next(iter(errors.values())))

    def _refused(self, group: str, code: int) -> Refusal:
        if code in _STALE_COORDINATOR:
            self._coordinators.pop(group, None)
        name = for_code(code).__name__
        if code in (22, 25, 27):  # illegal generation, unknown member, rebalancing
            return Refusal(group, f"the group has live members ({name}): another consumer "
                                  "uses this group.id; the commit is retried")
        return Refusal(group, f"commit refused: {name}")

    async def _ask(self, requests: Mapping[str, R], send: Send[R, A],
                   ) -> dict[str, A | BaseException]:
        """Each group's request sent to its coordinator by `send`, written `PER_TURN` to a
        write and a loop turn (a commit round of 4,000 groups encoded in one turn held the
        loop 0.4 s), all answered under one deadline; per group its answer, or why none
        came (then its coordinator is looked up again next time)."""
        answers: dict[str, A | BaseException] = {}
        nodes = await self._coordinators_of(list(requests))
        by_node: dict[int, list[str]] = {}
        for group, node in nodes.items():
            if isinstance(node, BaseException):
                answers[group] = node
            else:
                by_node.setdefault(node, []).append(group)
        for node, groups in by_node.items():
            answered: dict[str, A | BaseException] = await self._ask_node(
                node, {g: requests[g] for g in groups}, send)
            answers.update(answered)
        for group, found in answers.items():
            if isinstance(found, BaseException):
                self._coordinators.pop(group, None)
        return {g: answers[g] for g in requests}

    async def _ask_node(self, node: int, requests: Mapping[str, R], send: Send[R, A],
                        ) -> dict[str, A | BaseException]:
        try:
            conn = await pipeline.connection(self.client, node)
        except _FAILURES as exc:
            return dict.fromkeys(requests, exc)
        groups, items = list(requests), list(requests.values())
        writes: list[pipeline.Answers[A]] = []
        failed: dict[str, A | BaseException] = {}
        for at in range(0, len(items), PER_TURN):
            if at:
                await asyncio.sleep(0)  # the next part encodes in the next turn
            try:
                writes.append(send(conn, items[at:at + PER_TURN]))
            except _FAILURES as exc:
                failed = dict.fromkeys(groups[at:], exc)
                break
        await pipeline.settle(writes, conn, self._timeout_s)
        answered = [answer for write in writes for answer in write.results()]
        return {**dict(zip(groups, answered, strict=False)), **failed}

    async def _coordinators_of(self, groups: list[str]) -> dict[str, int | BaseException]:
        """Each group's coordinator: cached, or looked up (the lookups written together
        to one broker)."""
        found: dict[str, int | BaseException] = {}
        unknown = []
        for group in groups:
            node = self._coordinators.get(group)
            if node is None:
                unknown.append(group)
            else:
                found[group] = node
        if unknown:
            asked = self.client.get_random_node()
            lookups = {g: FindCoordinatorRequest(g, GROUP_COORDINATOR) for g in unknown}
            for group, answer in (await self._ask_node(asked, lookups,
                                                       pipeline.send_all)).items():
                found[group] = self._coordinator_in(group, answer)
        return found

    def _coordinator_in(self, group: str, answer: Response | BaseException,
                        ) -> int | BaseException:
        if isinstance(answer, BaseException):
            return answer
        if answer.error_code:
            error: BaseException = for_code(answer.error_code)(f"coordinator of group {group}")
            return error
        node = self._coordinators[group] = int(answer.coordinator_id)
        return node

    @property
    def _timeout_s(self) -> float:
        return float(self.client._request_timeout_ms) / 1000


def _fetched(group: str, tps: list[TopicPartition], answer: Response | BaseException,
             ) -> dict[TopicPartition, tuple[int | None, str]]:
    """A group's committed offsets and metadata in its `OffsetFetch` answer; raises what
    failed it."""
    if isinstance(answer, BaseException):
        raise answer
    found: dict[TopicPartition, tuple[int | None, str]] = dict.fromkeys(tps, (None, ""))
    for topic, partitions in answer.topics:
        for partition, offset, metadata, error in partitions:
            tp = TopicPartition(topic, partition)
            if error:
                raise for_code(error)(f"offset fetch of group {group} {tp}")
            if tp in found:
                found[tp] = (offset if offset >= 0 else None, metadata or "")
    return found


def _by_topic(positions: Mapping[TopicPartition, int]) -> dict[str, list[tuple[int, int]]]:
    topics: dict[str, list[tuple[int, int]]] = {}
    for tp, offset in sorted(positions.items()):
        topics.setdefault(tp.topic, []).append((tp.partition, offset))
    return topics
