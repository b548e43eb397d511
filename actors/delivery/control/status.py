"""What the control plane knows of each subscription's life: its state, why, since when,
and when the next start attempt is due. Pure: the registry (actors/delivery/control/
registry.py) moves it, the status API reads it.

States: `starting`; `running`; `paused` (on purpose: no consumer, position committed);
`disabled` (the endpoint answered 410 Gone: stopped like `paused` until the operator
resumes it; the record that got the 410 is delivered again then);
`waiting_for_broker` (its broker is unreachable: retried); `failed` (could not start or
crashed past its restart budget: retried with the kernel's restart backoff); `refused`
(its stored document fails a check a subscribe makes now, e.g. an earlier version let it
write to the runtime's own topics (#34): listed, never started, until a PUT with a
document that passes, or an unsubscribe); `stopping`.
A subscription leaves the registry only by unsubscribe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from actors.delivery.egress.status import EndpointStatus
from actors.delivery.path.status import MemberStatus, PartitionStatus

State = Literal["starting", "running", "paused", "disabled", "waiting_for_broker", "failed",
                "refused", "stopping"]
STOPPED: Final = ("paused", "disabled")
"""States in which a subscription has no actors on purpose (resume starts it again)."""
RETRYING: Final = ("failed", "waiting_for_broker")
"""States in which a retry of the start is scheduled."""


@dataclass(slots=True)
class SubscriptionStatus:
    state: State
    since_ms: int
    reason: str = ""
    retry_at_ms: int | None = None  # wall time of the next start attempt
    in_process: bool = False

    def move(self, state: State, now_ms: int, reason: str = "") -> bool:
        """Change state; True when it changed (worth a log line)."""
        if state == self.state and reason == self.reason:
            return False
        changed = state != self.state
        self.state, self.reason = state, reason
        if changed:
            self.since_ms = now_ms
        if state not in RETRYING:
            self.retry_at_ms = None
        return changed

    def retrying(self, now_ms: int, reason: str, broker_down: bool, delay_ms: int) -> None:
        """A start failed or the tree died: the next attempt comes in `delay_ms`."""
        self.move("waiting_for_broker" if broker_down else "failed", now_ms, reason)
        self.retry_at_ms = now_ms + delay_ms

    def answer(self, live: Live | None = None,
               activity: dict[str, object] | None = None) -> StatusAnswer:
        """The status API's answer, with what the running tree shows (`live`) and its
        recent attempts (`activity`, the status page's charts and table)."""
        shown = live or Live()
        return StatusAnswer(state=self.state, reason=self.reason, since=self.since_ms,
                            in_process=self.in_process,
                            next_attempt_at=(self.retry_at_ms if self.state != "running"
                                             else None),
                            partitions=shown.partitions, endpoint=shown.endpoint,
                            counters=shown.counters, member=shown.member,
                            refused_commits=shown.refused_commits,
                            positions_unavailable=shown.positions_unavailable,
                            activity=activity)


class Counters(msgspec.Struct, frozen=True, kw_only=True):
    """Since the subscription's outlet started."""

    delivered: int
    failed_attempts: int
    dead_lettered: int
    filtered: int = 0


class RefusedCommit(msgspec.Struct, frozen=True, kw_only=True):
    """A position Kafka did not take (a live consumer in the subscription's group), and
    `accepted`, the last one it took (#34): in one subscription's answer what Kafka holds
    for the group (the partition's `committed` shows it too); in the list and the summary
    the last position Kafka accepted from this instance, `null` when none since the
    partition's cursor started (actors/delivery/path/member/refusals.py)."""

    topic: str
    partition: int
    position: int | None
    accepted: int | None = None
    reason: str = ""


class Live(msgspec.Struct, frozen=True, kw_only=True):
    """What a running tree shows of itself (nothing when it does not run): its actors'
    answers to `StatusQuery` (actors/delivery/control/live.py asks them)."""

    partitions: list[PartitionStatus] = []
    endpoint: EndpointStatus | None = None
    counters: Counters | None = None
    member: MemberStatus | None = None
    refused_commits: list[RefusedCommit] = []
    positions_unavailable: str | None = None


class StatusAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """`status` in `GET /broker/subscription/{id}/{groupId}`: the life of the subscription
    and, while it runs, what its tree shows: `partitions` and `member` as the delivery
    path's actors answer them (actors/delivery/path/status.py), `endpoint` as the outlet
    does (actors/delivery/egress/status.py)."""

    state: State
    reason: str
    since: int
    in_process: bool
    next_attempt_at: int | None
    partitions: list[PartitionStatus] = []
    endpoint: EndpointStatus | None = None
    counters: Counters | None = None
    member: MemberStatus | None = None
    activity: dict[str, object] | None = None
    refused_commits: list[RefusedCommit] = []
    """While the member's commits to the subscription's group are refused (its
    `commitError`): each partition's position asked for, apart from `committed`, which
    then shows the position Kafka last accepted (one subscription's answer only)."""
    positions_unavailable: str | None = None
    """Why what Kafka holds for the group could not be read for this answer (None: it
    was read, or nothing was refused): `refused_commits` then come from the member alone,
    and their `accepted` (and a refused partition's `committed`) is the last position
    Kafka accepted from this instance (actors/delivery/control/commits.py)."""


class SubscriptionAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The consumer (redacted) and its status; `cluster` with `[cluster] status_topic`."""

    consumer: dict[str, object]
    status: StatusAnswer
    cluster: dict[str, object] | None = None
