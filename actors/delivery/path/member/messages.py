"""What the instance member is told: by riders and the control plane, and by its own tasks
(the fetcher, commit rounds, position and topic reads, drains), which only do I/O and tell
the member what came back (issue 32, item 10)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from actors.delivery.path.catchup import CatchUpRead
from actors.delivery.path.member.commits import Outcome, Round, Seat
from actors.delivery.path.member.positions import Bounds
from actors.delivery.path.roster import Rider
from actors.shared.messages import Record


@dataclass(slots=True)
class Join:
    rider: Rider


@dataclass(slots=True)
class Leave:
    """A seat leaves: its cursors drain and commit, then it is gone. Only that seat: one
    of the same subscription that joined since (its tree built again) stays."""

    rider: Rider
    done: asyncio.Future[None]


@dataclass(slots=True)
class Hold:
    """Control plane -> member: do not subscribe until `Release` (the riders are still
    changing: a restore, or an update's leave and join)."""


@dataclass(slots=True)
class Release:
    """Control plane -> member: subscribe to the riders' union once, if it changed."""


@dataclass(slots=True)
class CaughtUp:
    """Catch-up reader -> member: may the read of `read` end at `next_offset`?"""

    read: CatchUpRead
    next_offset: int
    answer: asyncio.Future[bool]


@dataclass(slots=True)
class CatchUpEnded:
    """Catch-up task -> member: the read of `seat` is over."""

    seat: Seat
    read: CatchUpRead


@dataclass(slots=True)
class TopicsListed:
    """Listing task -> member: the cluster's topic names (None: the broker did not
    answer; the last listing stands)."""

    topics: frozenset[str] | None


@dataclass(slots=True)
class Fetched:
    """Fetcher -> member (asked): what one fetch brought, per partition, with each
    partition's high watermark. The answer is the next fetch's `FetchPlan`."""

    batches: dict[TopicPartition, list[Record]]
    highwaters: dict[TopicPartition, int | None]


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """Member -> fetcher: whether to fetch (subscribed to something), for how long, how
    many records at most."""

    listening: bool
    timeout_ms: int
    max_records: int


@dataclass(slots=True)
class CommitsSettled:
    """Commit task -> member: how a round went."""

    round: Round
    outcome: Outcome


@dataclass(slots=True)
class PositionsRead:
    """Position task -> member: the committed offsets of new cursors (per seat, with the
    epoch asked for) and the logs' bounds; `failed` says why nothing could be read."""

    asked: dict[Seat, int]
    committed: dict[Seat, int | None] = field(default_factory=dict)
    marks: dict[Seat, str] = field(default_factory=dict)
    """Who wrote each committed offset (its metadata)."""
    bounds: dict[TopicPartition, Bounds] = field(default_factory=dict)
    failed: str | None = None
    last: bool = True
    """The last part of the read (`io.read_positions` tells a read in parts)."""


@dataclass(slots=True)
class WritersRead:
    """Verification task -> member: each group's commits (offset, metadata) per
    partition read, or nothing when the read failed."""

    marks: dict[str, dict[TopicPartition, tuple[int | None, str]]]


@dataclass(slots=True)
class Problems:
    """Readiness -> member (asked): why it is not ready (foreign writers)."""


@dataclass(slots=True)
class HighwatersRead:
    """High watermark task -> member: the log ends of partitions nobody fetches now."""

    highwaters: dict[TopicPartition, int]


@dataclass(slots=True)
class Drained:
    """Drain task -> member: the final positions of cursors being retired (None: the
    cursor did not answer; its last commit stands)."""

    retirement: int
    positions: dict[Seat, int | None]


@dataclass(slots=True)
class Retired:
    """Stop task -> member: the retired cursors are stopped."""

    retirement: int


@dataclass(slots=True)
class StartNext:
    """Start task -> member: its cursors started (or nothing was left to start in a turn):
    start the next claimed ones (`rested`: the rest after a wave is over; waves.py)."""

    rested: bool = False


@dataclass(slots=True)
class CursorFailed:
    """Start task -> member: a cursor could not start (its subscription is stopping)."""

    seat: Seat
