"""What subscriptions' running trees show of themselves, for the status API, the cluster
view and readiness: their partitions, endpoint, counters and the instance member they
ride. Asked by message (issue 23, item 4): each actor answers a `StatusQuery` with the
struct its owner defines (actors/delivery/path/status.py, actors/delivery/egress/
status.py), built in its own handler; nothing here reads an actor's attributes.

Costs and failures. Every question of one call (a whole listing of 10,000 subscriptions
too) is sent at once with `ask_nowait`, which neither waits for mailbox room nor starts a
task, and the replies are awaited together under one deadline, `STATUS_TIMEOUT_MS`. An
actor that has not answered by then (busy, restarting) or died (its reply fails with
`ActorDeadError`) simply gives no entry: never an error for the asker.

No deadlock: the askers are the admin API's and the library's callers and the cluster
status actor's publish task, never the control actor, and no actor of a tree waits for
any of them. The one actor that asks in its handler is the rider, of its instance member,
whose handler never waits for anyone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from actors.delivery.control.status import Counters, Live
from actors.delivery.egress.outlet import OutletActor
from actors.delivery.egress.status import OutletStatus
from actors.delivery.path.member import InstanceMemberActor, RiderActor
from actors.delivery.path.member.messages import Problems
from actors.delivery.path.partition import PartitionActor
from actors.delivery.path.status import STATUS_TIMEOUT_MS, MemberStatus, PartitionStatus
from actors.shared.messages import StatusQuery
from runtime.errors import ActorDeadError
from runtime.kernel import Actor, Clock, Supervisor, settle_within

T = TypeVar("T")
Reply = asyncio.Future[Any]


@dataclass(slots=True)
class Asked:
    """The status questions sent to one subscription tree's actors: their replies."""

    partitions: list[Reply] = field(default_factory=list)
    outlet: Reply | None = None
    member: Reply | None = None

    def replies(self) -> list[Reply]:
        return [*self.partitions, *(r for r in (self.outlet, self.member) if r is not None)]

    def live(self) -> Live:
        """What the answers show (a question unanswered shows nothing)."""
        partitions = sorted_partitions(self.partitions)
        member = answer(self.member, MemberStatus)
        outlet = answer(self.outlet, OutletStatus)
        if outlet is None:
            return Live(partitions=partitions, member=member)
        counters = Counters(delivered=outlet.delivered,
                            failed_attempts=outlet.failed_attempts,
                            dead_lettered=sum(p.dead_lettered for p in partitions),
                            filtered=sum(p.filtered for p in partitions))
        return Live(partitions=partitions, endpoint=outlet.endpoint, counters=counters,
                    member=member)


def ask_tree(tree: Supervisor | None) -> Asked:
    """Ask every actor of a subscription's tree that shows something: its partition
    actors, its outlet and (riding an instance member) its rider."""
    if tree is None:
        return Asked()
    return Asked(ask_partitions(tree), _ask(_child(tree, "egress"), OutletActor),
                 _ask(_child(tree, "consumer"), RiderActor))


def ask_partitions(tree: Supervisor) -> list[Reply]:
    replies = (_ask(actor, PartitionActor) for actor in partition_actors(tree))
    return [reply for reply in replies if reply is not None]


def partition_actors(tree: Supervisor) -> list[Actor]:
    """The tree's partition actors, one per partition it reads (children of its
    `partitions` supervisor)."""
    parts = _child(tree, "partitions")
    if not isinstance(parts, Supervisor):
        return []
    return [parts.child(name) for name in parts.children()]


def _child(tree: Supervisor, name: str) -> Actor | None:
    return tree.child(name) if tree.has_child(name) else None


def _ask(actor: Actor | None, kind: type[Actor]) -> Reply | None:
    """Ask `actor` if it is a `kind` (the kinds that answer a `StatusQuery`)."""
    if not isinstance(actor, kind):
        return None
    try:
        return actor.ask_nowait(StatusQuery())
    except ActorDeadError:  # stopping or stopped: nothing to show
        return None


def answer(reply: Reply | None, kind: type[T]) -> T | None:
    """The reply when it came in time and is a `kind`; else None."""
    if (reply is None or not reply.done() or reply.cancelled()
            or reply.exception() is not None):
        return None
    result = reply.result()
    return result if isinstance(result, kind) else None


def sorted_partitions(replies: Iterable[Reply]) -> list[PartitionStatus]:
    shown = (answer(reply, PartitionStatus) for reply in replies)
    return sorted((p for p in shown if p is not None), key=lambda p: (p.topic, p.partition))


async def lives(trees: Mapping[str, Supervisor | None], clock: Clock,
                timeout_ms: int = STATUS_TIMEOUT_MS) -> dict[str, Live]:
    """What each running tree shows, by subscription key: every question sent at once,
    every answer awaited under one deadline."""
    asked = {key: ask_tree(tree) for key, tree in trees.items()}
    await settle_within(clock, [r for a in asked.values() for r in a.replies()], timeout_ms)
    return {key: a.live() for key, a in asked.items()}


async def live(tree: Supervisor | None, clock: Clock,
               timeout_ms: int = STATUS_TIMEOUT_MS) -> Live:
    """What one running tree shows (nothing when it does not run)."""
    asked = ask_tree(tree)
    await settle_within(clock, asked.replies(), timeout_ms)
    return asked.live()


async def stalls(trees: Mapping[str, Supervisor], clock: Clock, stall_after_ms: int,
                 timeout_ms: int = STATUS_TIMEOUT_MS) -> list[str]:
    """A readiness reason per partition whose commit position stopped moving, with its
    lag (kept right while the partition's fetch pauses: issue 25). Readiness is polled:
    only the partition actors are asked, all at once."""
    asked = {key: ask_partitions(tree) for key, tree in trees.items()}
    await settle_within(clock, [r for rs in asked.values() for r in rs], timeout_ms)
    return [f"subscription {key} partition {p.topic}-{p.partition} stalled: commit "
            f"position {p.committed} has not moved for over {stall_after_ms // 1000} s"
            + (f" (lag {p.lag})" if p.lag is not None else "")
            for key, replies in asked.items() for p in sorted_partitions(replies)
            if p.stalled_for_ms is not None]


async def member_problems(groups: Supervisor, clock: Clock,
                          timeout_ms: int = STATUS_TIMEOUT_MS) -> list[str]:
    """What the instance members report against readiness (a foreign writer of a
    subscription's group: issue 32, item 8), asked of them all at once."""
    members = [actor for name in groups.children()
               if isinstance(actor := groups.child(name), InstanceMemberActor)]
    asked = [member.ask_nowait(Problems()) for member in members]
    await settle_within(clock, asked, timeout_ms)
    return [reason for reply in asked
            if reply.done() and not reply.cancelled() and reply.exception() is None
            for reason in reply.result()]


def has_partitions(tree: Supervisor) -> bool:
    """Whether the tree reads any partition yet (a partition actor runs for each)."""
    return bool(partition_actors(tree))
