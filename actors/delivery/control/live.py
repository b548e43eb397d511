"""What a subscription's running tree shows of itself, for the status API and readiness:
its partitions, its endpoint, its counters, the instance member it rides."""

from __future__ import annotations

from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.outlet import OutletActor
from actors.delivery.path.member import RiderActor
from actors.delivery.path.partition import PartitionActor
from actors.shared.group_consumer import GroupConsumerActor
from runtime.kernel.supervisor import Supervisor

NOT_RUNNING: dict[str, object] = {"partitions": [], "endpoint": None, "counters": None,
                                  "member": None}


def live(tree: Supervisor | None, key: str) -> dict[str, object]:
    """Partitions, endpoint, counters and member of a running tree."""
    if tree is None:
        return dict(NOT_RUNNING)
    partitions = [a.status() for a in _partitions(tree)]
    outlet = tree.child("egress") if tree.has_child("egress") else None
    endpoint = outlet.health.as_dict() if isinstance(outlet, OutletActor) else None
    if endpoint is not None and isinstance(outlet, EgressActor):
        endpoint["origin"] = outlet.origin.as_dict()  # breaker, throttle, rate
    counters: dict[str, object] | None = None
    if isinstance(outlet, OutletActor):
        dead = sum(int(str(p["dead_lettered"])) for p in partitions)
        counters = {**outlet.counters(), "dead_lettered": dead}
    return {"partitions": sorted(partitions, key=lambda p: (str(p["topic"]),
                                                             str(p["partition"]))),
            "endpoint": endpoint, "counters": counters, "member": _member_of(tree, key)}


def _partitions(tree: Supervisor) -> list[PartitionActor]:
    parts = tree.child("partitions") if tree.has_child("partitions") else None
    if not isinstance(parts, Supervisor):
        return []
    return [a for n in parts.children() if isinstance(a := parts.child(n), PartitionActor)]


def _member_of(tree: Supervisor, key: str) -> dict[str, object] | None:
    """The shared group member the subscription rides on (None: its own consumer)."""
    rider = tree.child("consumer") if tree.has_child("consumer") else None
    member = rider.shared_member() if isinstance(rider, RiderActor) else None
    return member.describe(key) if member is not None else None


def stalls(tree: Supervisor, key: str) -> list[str]:
    return [f"subscription {key} partition {a.topic}-{a.partition} stalled: commit "
            f"position {a.book.position()} has not moved for over "
            f"{a.traits.stall_after_ms // 1000} s"
            for a in _partitions(tree) if a.book.stalled_since is not None]


def has_partitions(tree: Supervisor) -> bool:
    consumer = tree.child("consumer") if tree.has_child("consumer") else None
    return isinstance(consumer, GroupConsumerActor | RiderActor) and bool(consumer.owned)
