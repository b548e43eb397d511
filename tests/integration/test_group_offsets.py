"""Positions under many groups without membership (runtime/kafka/group_offsets.py, issue
24): what the broker does with commits and offset fetches outside a group's membership."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient

from runtime.kafka import create_topics, make_admin, make_client, make_consumer, pipeline
from runtime.kafka.broker import EmbeddedBroker
from runtime.kafka.group_offsets import PER_TURN, GroupOffsets
from tests.conftest import TopicFactory
from tests.integration.cut_proxy import CutProxy
from tests.waits import until

pytestmark = pytest.mark.integration
# The shortest session the quirk test below can ask for with a heartbeat below it: the
# embedded broker joins a group after a second whatever the session (conftest's
# fast_group_kwargs), and it never expires a member, so a shorter session only shortens
# the window in which that is shown.
SHORT_SESSION_MS, SHORT_HEARTBEAT_MS = 300, 100


@pytest.fixture
async def client(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaClient]:
    kafka = AIOKafkaClient(bootstrap_servers=kafka_bootstrap)
    await kafka.bootstrap()
    try:
        yield kafka
    finally:
        await kafka.close()


async def test_many_groups_commit_through_one_client_and_read_back(
        client: AIOKafkaClient, topic_factory: TopicFactory) -> None:
    topic = await topic_factory(partitions=2)
    offsets = GroupOffsets(client)
    groups = [f"g-{uuid.uuid4().hex[:8]}-{i}" for i in range(50)]
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    refused = await offsets.commit({g: {tp0: i, tp1: i + 1} for i, g in enumerate(groups)})
    assert refused == []
    for i, group in enumerate(groups):
        assert await offsets.fetch(group, [tp0, tp1]) == {tp0: i, tp1: i + 1}


async def test_a_group_with_nothing_committed_reads_none(
        client: AIOKafkaClient, topic_factory: TopicFactory) -> None:
    topic = await topic_factory()
    tp = TopicPartition(topic, 0)
    assert await GroupOffsets(client).fetch(f"empty-{uuid.uuid4().hex}", [tp]) == {tp: None}


async def test_a_commit_is_seen_by_a_member_that_joins_later(
        client: AIOKafkaClient, topic_factory: TopicFactory, kafka_bootstrap: str,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    group, tp = f"later-{uuid.uuid4().hex[:8]}", TopicPartition(topic, 0)
    assert await GroupOffsets(client).commit({group: {tp: 7}}) == []
    consumer = make_consumer(kafka_bootstrap, group_id=group, enable_auto_commit=False,
                             **fast_group_kwargs)
    await consumer.start()
    try:
        assert await consumer.committed(tp) == 7
    finally:
        await consumer.stop()


async def test_a_group_with_a_live_member_refuses_commits_without_a_generation(
        client: AIOKafkaClient, topic_factory: TopicFactory, kafka_bootstrap: str,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory()
    group, tp = f"live-{uuid.uuid4().hex[:8]}", TopicPartition(topic, 0)
    member = make_consumer(kafka_bootstrap, topic, group_id=group, enable_auto_commit=False,
                           **fast_group_kwargs)
    await member.start()
    try:
        while not member.assignment():
            await member.getmany(timeout_ms=200)
        refused = await GroupOffsets(client).commit({group: {tp: 3}})
    finally:
        await member.stop()
    assert [r.group for r in refused] == [group]
    assert "live members" in refused[0].reason


async def test_a_member_gone_without_leave_group_keeps_refusing_outside_commits_quirk(
        client: AIOKafkaClient, topic_factory: TopicFactory, kafka_bootstrap: str,
        fast_group_kwargs: dict[str, int], broker_is_embedded: bool) -> None:
    """Quirk 9: a member that stops without LeaveGroup (aiokafka in generation 0, quirk 6,
    or a killed process) stays a member past its session timeout, so a group.id an older
    instance used keeps refusing commits without membership; after LeaveGroup they go."""
    if not broker_is_embedded:
        pytest.skip("the quirk is the embedded broker's; a real Kafka expires the session")
    topic = await topic_factory()
    group, tp = f"gone-{uuid.uuid4().hex[:8]}", TopicPartition(topic, 0)
    member = make_consumer(kafka_bootstrap, topic, group_id=group, enable_auto_commit=False,
                           session_timeout_ms=SHORT_SESSION_MS,
                           heartbeat_interval_ms=SHORT_HEARTBEAT_MS)
    await member.start()
    while not member.assignment():
        await member.getmany(timeout_ms=200)
    await member.stop()  # generation 0: aiokafka sends no LeaveGroup
    # The event waited for is the member's expiry (DescribeGroups lists no member): a
    # real Kafka shows it within a session; here it must not come in three of them.
    async def expired() -> bool:
        return await _members(kafka_bootstrap, group) == 0

    with pytest.raises(AssertionError, match="not met within"):
        await until(expired, timeout_s=3 * SHORT_SESSION_MS / 1000, poll_s=0.1,
                    what="the gone member expired")
    assert await _members(kafka_bootstrap, group) == 1  # still there, past its session
    offsets = GroupOffsets(client)
    assert [r.group for r in await offsets.commit({group: {tp: 1}})] == [group]


async def _members(bootstrap: str, group: str) -> int:
    """How many members the broker lists for `group` (DescribeGroups)."""
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = response.groups
    return len(described[5])  # (error_code, group, state, protocol_type, protocol, members)


async def test_offsets_of_their_own_commit_read_back_and_close(
        kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """The member's offsets run on a client of their own (not behind its consumer's held
    fetch): started from the bootstrap address alone, they commit and read back, and
    closing them closes their connections."""
    topic = await topic_factory()
    group, tp = f"own-{uuid.uuid4().hex[:8]}", TopicPartition(topic, 0)
    offsets = await GroupOffsets.started(kafka_bootstrap)
    try:
        assert await offsets.commit({group: {tp: 11}}) == []
        assert await offsets.fetch(group, [tp]) == {tp: 11}
    finally:
        await offsets.close()
    assert not any(conn.connected() for conn in offsets.client._conns.values())


async def test_a_round_of_many_groups_goes_out_a_write_per_part_and_reads_back_in_order(
        client: AIOKafkaClient, topic_factory: TopicFactory) -> None:
    """Issue 37: a round's requests are written `PER_TURN` to a write (one write each
    through aiokafka's `send`, 70 us of CPU per group of a round), every group's answer
    comes back to it, in the order asked."""
    topic = await topic_factory(partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    groups = [f"w-{uuid.uuid4().hex[:8]}-{i}" for i in range(3 * PER_TURN + 7)]
    offsets = GroupOffsets(client)
    assert await offsets.commit({g: {tp0: 1} for g in groups}) == []  # coordinators known
    [node] = set(offsets._coordinators[g] for g in groups)
    conn = await pipeline.connection(client, node)
    writes: list[int] = []
    write = conn._writer.write

    def counted(data: bytes) -> None:
        writes.append(len(data))
        write(data)

    conn._writer.write = counted
    assert await offsets.commit({g: {tp0: i, tp1: 2 * i} for i, g in enumerate(groups)}) == []
    assert len(writes) == 4  # 64 + 64 + 64 + 7 requests
    found = await offsets.fetch_many({g: [tp1, tp0] for g in groups})
    assert found == [{tp1: (2 * i, ""), tp0: (i, "")} for i in range(len(groups))]
    assert len(writes) == 8


async def test_a_cut_fails_a_round_group_by_group_and_the_next_round_after_it_commits() -> None:
    """Issue 32, item 4: a round under way when the broker's connections are cut never
    raises: every group is refused with why, its coordinator forgotten; once the cut
    heals, the next round looks them up again and commits."""
    proxy = CutProxy(0)  # its target: the broker below, once it listens
    async with proxy, EmbeddedBroker(advertised=proxy.address) as broker:
        proxy.target_port = int(broker.bootstrap.rsplit(":", 1)[1])
        await create_topics(proxy.address, {"cut": 1})
        tp = TopicPartition("cut", 0)
        offsets = await GroupOffsets.started(proxy.address)
        try:
            groups = [f"c{i}" for i in range(2 * PER_TURN)]
            assert await offsets.commit({g: {tp: 1} for g in groups}) == []
            round_ = asyncio.ensure_future(offsets.commit({g: {tp: 2} for g in groups}))
            proxy.cut()
            refused = await round_
            assert {r.group for r in refused} <= set(groups)
            assert all(r.reason.startswith("commit failed") for r in refused)
            failed = {r.group for r in refused}
            assert failed and not failed & set(offsets._coordinators)
            proxy.heal()
            assert await until_committed(offsets, {g: {tp: 3} for g in groups})
            assert await offsets.fetch_many({g: [tp] for g in groups}) == [
                {tp: (3, "")}] * len(groups)
        finally:
            await offsets.close()


async def until_committed(offsets: GroupOffsets,
                          positions: dict[str, dict[TopicPartition, int]]) -> bool:
    """Commit until no group refuses (the client reconnects after a cut in its own time)."""
    left = dict(positions)
    for _ in range(50):
        left = {r.group: positions[r.group] for r in await offsets.commit(left)}
        if not left:
            return True
        await asyncio.sleep(0.2)
    return False


async def test_a_round_a_broker_does_not_answer_is_refused_at_the_deadline() -> None:
    """A round whose answers do not come fails at the client's request timeout, each
    group refused with why (the round never hangs), and the connection is made again for
    the next round."""
    proxy = CutProxy(0)
    async with proxy, EmbeddedBroker(advertised=proxy.address) as broker:
        proxy.target_port = int(broker.bootstrap.rsplit(":", 1)[1])
        await create_topics(proxy.address, {"stalled": 1})
        tp = TopicPartition("stalled", 0)
        client = make_client(proxy.address, request_timeout_ms=1000)
        await client.bootstrap()
        offsets = GroupOffsets(client)
        try:
            groups = [f"s{i}" for i in range(PER_TURN + 1)]
            assert await offsets.commit({g: {tp: 1} for g in groups}) == []
            proxy.stall()
            started = asyncio.get_running_loop().time()
            refused = await offsets.commit({g: {tp: 2} for g in groups})
            assert asyncio.get_running_loop().time() - started < 5
            assert sorted(r.group for r in refused) == sorted(groups)
            assert all("RequestTimedOut" in r.reason for r in refused)
            proxy.flow()
            assert await until_committed(offsets, {g: {tp: 3} for g in groups})
        finally:
            await client.close()
