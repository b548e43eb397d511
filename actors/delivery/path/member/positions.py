"""Where a new cursor starts (issue 32, item 2): pure logic.

A cursor starts at its group's committed offset when that lies inside the log, as a Kafka
consumer does. A committed offset outside the log (above its end: the topic was deleted
and created again, or the group's offsets came from elsewhere; below its start: retention
removed what it pointed at) applies the subscription's `auto.offset.reset`, and says so:
the member journals an `offset_reset` event and logs it. Nothing committed applies the
reset too, silently (that is a first start).

The log's bounds come from the member's reads: its start from ListOffsets (earliest), its
end from a fetch's high watermark (ListOffsets "latest" is wrong on the embedded broker,
runtime/kafka/compat.py quirk 2). A bound that could not be read is not checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import TopicPartition

EARLIEST: int = 0
"""The start of a cursor reset to `earliest` while the log's start is unknown: the fetch
goes back to the log's start (an offset below it resets to the start)."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's log, as read: its first offset and its end (None: not known)."""

    start: int | None = None
    end: int | None = None

    def holds(self, offset: int) -> bool:
        """Whether a cursor may start at `offset` (the end itself is inside: nothing to
        read yet)."""
        below = self.start is not None and offset < self.start
        above = self.end is not None and offset > self.end
        return not (below or above)


@dataclass(frozen=True, slots=True)
class Start:
    """Decision: a cursor starts at `offset` (None: at the head of the shared fetch, for
    `latest` with the log's end unknown). `reset_from` is the committed offset that lay
    outside the log (None: no reset to report)."""

    offset: int | None
    reset_from: int | None = None


def start_of(committed: int | None, reset: str, bounds: Bounds) -> Start:
    """Where a cursor with this committed offset and `auto.offset.reset` starts."""
    if committed is not None and bounds.holds(committed):
        return Start(committed)
    offset: int | None
    if reset == "earliest":
        offset = bounds.start if bounds.start is not None else EARLIEST
    else:
        offset = bounds.end  # None: the first fetch's high watermark decides
    return Start(offset, committed)


@dataclass(slots=True)
class Incarnations:
    """Partitions whose topic was deleted (a commit was refused as unknown) and may come
    back under the same name: a group's committed offset there predates the new topic
    (some brokers keep a deleted topic's offsets; Kafka drops them) until that group
    commits on the new one. Until then it is not trusted: the cursor starts as if nothing
    were committed, and the reset is reported."""

    reborn: dict[TopicPartition, set[str]] = field(default_factory=dict)
    """Gone partitions -> the groups that have committed since."""

    def gone(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.reborn[tp] = set()

    def trusts(self, group: str, tp: TopicPartition) -> bool:
        groups = self.reborn.get(tp)
        return groups is None or group in groups

    def committed(self, group: str, tp: TopicPartition) -> None:
        groups = self.reborn.get(tp)
        if groups is not None:
            groups.add(group)
