"""What a subscription's running tree shows of itself, for the status API and readiness:
its partitions, its endpoint, its counters, the instance member it rides. Typed here
(actors/delivery/control/status.py) from what each actor reports: `PartitionActor.
status()`, the outlet's `health` and `counters()`, the member's `describe`."""

from __future__ import annotations

import msgspec

from actors.delivery.control.status import Counters, Live, PartitionStatus
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.outlet import OutletActor
from actors.delivery.path.member import RiderActor
from actors.delivery.path.partition import PartitionActor
from actors.shared.group_consumer import GroupConsumerActor
from runtime.kernel.supervisor import Supervisor


def live(tree: Supervisor | None, key: str) -> Live:
    """Partitions, endpoint, counters and member of a running tree."""
    if tree is None:
        return Live()
    partitions = sorted(partitions_of(tree), key=lambda p: (p.topic, p.partition))
    outlet = tree.child("egress") if tree.has_child("egress") else None
    if not isinstance(outlet, OutletActor):
        return Live(partitions=partitions, member=_member_of(tree, key))
    endpoint = outlet.health.as_dict()
    if isinstance(outlet, EgressActor):
        clock = outlet.context.clock
        endpoint["origin"] = outlet.origin.as_dict(  # breaker, throttle, rate
            clock.monotonic_ms(), clock.wall_ms())
    counts = outlet.counters()
    counters = Counters(delivered=counts["delivered"],
                        failed_attempts=counts["failed_attempts"],
                        dead_lettered=sum(p.dead_lettered for p in partitions),
                        filtered=sum(p.filtered for p in partitions))
    return Live(partitions=partitions, endpoint=endpoint, counters=counters,
                member=_member_of(tree, key))


def partitions_of(tree: Supervisor) -> list[PartitionStatus]:
    """What each partition actor of the tree reports (`PartitionActor.status()`)."""
    parts = tree.child("partitions") if tree.has_child("partitions") else None
    if not isinstance(parts, Supervisor):
        return []
    return [msgspec.convert(a.status(), PartitionStatus) for n in parts.children()
            if isinstance(a := parts.child(n), PartitionActor)]


def _member_of(tree: Supervisor, key: str) -> dict[str, object] | None:
    """The shared group member the subscription rides on (None: its own consumer)."""
    rider = tree.child("consumer") if tree.has_child("consumer") else None
    member = rider.shared_member() if isinstance(rider, RiderActor) else None
    return member.describe(key) if member is not None else None


def stalls(tree: Supervisor, key: str, stall_after_ms: int) -> list[str]:
    """A readiness reason per partition whose commit position stopped moving, with its
    lag (kept right while the partition's fetch pauses: issue 25)."""
    return [f"subscription {key} partition {p.topic}-{p.partition} stalled: commit "
            f"position {p.committed} has not moved for over {stall_after_ms // 1000} s"
            + (f" (lag {p.lag})" if p.lag is not None else "")
            for p in partitions_of(tree) if p.stalled_for_ms is not None]


def has_partitions(tree: Supervisor) -> bool:
    consumer = tree.child("consumer") if tree.has_child("consumer") else None
    return isinstance(consumer, GroupConsumerActor | RiderActor) and bool(consumer.owned)
