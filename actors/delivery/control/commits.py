"""A subscription's positions as Kafka took them (#34 item 16): while the instance
member's commits to the subscription's group are refused (a live consumer in that group:
`commitError` in the member's status), each partition actor's `committed` is the position
it asked for, not one Kafka holds. The status answer then shows the position Kafka last
accepted as `committed` (read back with OffsetFetch) and the refused one apart
(`refused_commits`). `with_accepted` is pure; `accepted_positions` asks Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from aiokafka import TopicPartition

from actors.delivery.control.status import Live, RefusedCommit
from runtime.kafka.client import make_admin
from runtime.kernel.clock import Clock, within

Positions = Mapping[tuple[str, int], int | None]
FETCH_TIMEOUT_MS = 2000


def with_accepted(shown: Live, accepted: Positions, reason: str) -> Live:
    """`shown` with each partition's `committed` the accepted position, and each position
    asked for that differs from it in `refused_commits`."""
    partitions, refused = [], []
    for p in shown.partitions:
        taken = accepted.get((p.topic, p.partition))
        if taken != p.committed:
            refused.append(RefusedCommit(topic=p.topic, partition=p.partition,
                                         position=p.committed, accepted=taken,
                                         reason=reason))
        partitions.append(msgspec.structs.replace(p, committed=taken))
    return msgspec.structs.replace(shown, partitions=partitions, refused_commits=refused)


async def accepted_positions(bootstrap: str, group: str, partitions: list[tuple[str, int]],
                             clock: Clock) -> dict[tuple[str, int], int | None]:
    """The positions `group` holds in Kafka for `partitions` (None: none committed); the
    broker's security settings are the registered ones (runtime/kafka/client.py)."""
    admin = make_admin(bootstrap)
    try:
        await within(clock, admin.start(), FETCH_TIMEOUT_MS)
        found = await within(clock, admin.list_consumer_group_offsets(
            group, partitions=[TopicPartition(t, p) for t, p in partitions]),
            FETCH_TIMEOUT_MS)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): (meta.offset if meta.offset >= 0 else None)
            for tp, meta in found.items()}

