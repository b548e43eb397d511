"""What the delivery path's actors answer a `StatusQuery` with (actors/shared/
messages.py): typed once here, built by each actor in its handler, encoded as they are
into the status API's answer (actors/delivery/control/status.py). Field names are the
JSON's: the status API shows them unchanged since they were dicts."""

from __future__ import annotations

from typing import Final

import msgspec

from actors.delivery.path.fanout import State as CursorState

STATUS_TIMEOUT_MS: Final = 500
"""How long an asker waits for status answers, all asked at once (a listing of every
subscription, readiness, one subscription's status): an actor that has not answered by
then (busy, restarting, stopping) shows nothing instead of holding the answer."""


class PartitionStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One partition (cursor) of a subscription: the `PartitionActor`'s answer
    (actors/delivery/path/partition.py)."""

    topic: str
    partition: int
    committed: int | None = None
    highwater: int | None = None
    lag: int | None = None
    inflight: int = 0
    retrying: int = 0
    pending: int = 0
    oldest_pending_ms: int | None = None
    paused: bool = False
    last_error: str | None = None
    dead_lettered: int = 0
    filtered: int = 0
    stalled_for_ms: int | None = None


class MemberStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The instance member a subscription reads through, as that subscription sees it:
    the `InstanceMemberActor`'s answer (actors/delivery/path/member/), relayed by the
    subscription's `RiderActor`."""

    group: str
    member: str
    member_id: str = msgspec.field(name="memberId")
    generation: int
    subscriptions: int
    rebalances: int
    assigned: list[str]
    cursors: dict[str, CursorState]
    commit_error: str | None = msgspec.field(name="commitError")
    waiting_for_topics: list[str] = msgspec.field(name="waitingForTopics")
    pattern_topics: list[str] = msgspec.field(name="patternTopics")
    group_partitions: int = msgspec.field(name="groupPartitions")
