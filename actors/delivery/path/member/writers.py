"""Writers: who else commits to a subscription's group (issue 32, item 8). Pure logic.

A subscription's `group.id` must be written by one instance group only: two deployments
(two instances with their own folders and no shared `[delivery] instance_group`) each own
every partition and push every record twice. The member reads its groups' commits back, a
rotating sample every `VERIFY_MS` (and every group when a cursor starts). A commit is
foreign when

- its metadata names another instance group (every commit of the member carries its own,
  `mark`; Apache Kafka keeps it, the embedded broker drops it: runtime/kafka/compat.py), or
- its offset is not the one this member last wrote there, while none of its own commits
  of that partition is pending or under way, and none settled since the read was asked
  (`asking`: a read sent before one of ours landed answers the older offset; under load
  that race reported the member's own groups as written by another deployment).

A foreign writer is reported (an ERROR, the subscription's status, `/readyz` not ready)
and stays reported until `CLEAN_READS` reads in a row find only this member's commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import TopicPartition

PREFIX = "hookstream:"
VERIFY_MS = 2000
SAMPLE = 64
"""Groups read back per verification round."""
CLEAN_READS = 30
"""Reads in a row that find only this member's commits before a foreign writer is
forgotten (a minute at `VERIFY_MS`: two deployments that take turns stay reported)."""


def mark(instance_group: str) -> str:
    return f"{PREFIX}{instance_group}"


UNKNOWN = ""
"""The other writer when the broker keeps no commit metadata to name it."""


@dataclass(slots=True)
class Writers:
    ours: str
    foreign: dict[str, str] = field(default_factory=dict)
    """group.id -> the other instance group that writes it."""
    clean: dict[str, int] = field(default_factory=dict)
    written: dict[tuple[str, TopicPartition], int] = field(default_factory=dict)
    """The last offset this member wrote per group and partition."""
    asked: dict[tuple[str, TopicPartition], int | None] = field(default_factory=dict)
    """What this member had written where a read-back is under way, as it was asked."""
    next_ms: int = 0
    reading: bool = False
    _turn: int = 0

    def wrote(self, group: str, tp: TopicPartition, offset: int) -> None:
        self.written[(group, tp)] = offset

    def asking(self, reads: dict[str, list[TopicPartition]]) -> None:
        """A read-back of these groups' partitions is sent now."""
        written = self.written
        self.asked = {(g, tp): written.get((g, tp)) for g, tps in reads.items() for tp in tps}

    def forget(self, group: str, tp: TopicPartition) -> None:
        """No cursor of ours writes there any more (revoked, left)."""
        self.written.pop((group, tp), None)

    def seen(self, group: str, tp: TopicPartition, offset: int | None, metadata: str, *,
             settled: bool) -> str | None:
        """A commit of `group` read back (`settled`: none of ours is pending or under way
        for it); the other writer when the group newly turns foreign."""
        other = self._other(group, tp, offset, metadata, settled)
        if other is None:
            if group in self.foreign:
                self.clean[group] = self.clean.get(group, 0) + 1
                if self.clean[group] >= CLEAN_READS:
                    del self.foreign[group], self.clean[group]
            return None
        self.clean.pop(group, None)
        new = group not in self.foreign
        if new or other != UNKNOWN:
            self.foreign[group] = other
        return other if new else None

    def _other(self, group: str, tp: TopicPartition, offset: int | None, metadata: str,
               settled: bool) -> str | None:
        if metadata.startswith(PREFIX) and metadata != self.ours:
            return metadata[len(PREFIX):]
        mine = self.written.get((group, tp))
        if self.asked.pop((group, tp), mine) != mine:
            return None  # ours landed after the read was asked: it may predate it
        if settled and mine is not None and offset is not None and offset != mine:
            return UNKNOWN
        return None

    def due(self, now_ms: int) -> bool:
        return not self.reading and now_ms >= self.next_ms

    def sample(self, groups: list[str], now_ms: int) -> list[str]:
        """The next groups to read back (rotating over all of them)."""
        self.next_ms = now_ms + VERIFY_MS
        if not groups:
            return []
        start = self._turn % len(groups)
        self._turn = start + SAMPLE
        picked = (groups[start:] + groups[:start])[:SAMPLE]
        self.reading = bool(picked)
        return picked

    def reason(self, group: str) -> str | None:
        other = self.foreign.get(group)
        if other is None:
            return None
        who = ("another writer (an offset this instance did not commit; the broker keeps "
               "no commit metadata to name it)" if other == UNKNOWN
               else f"instance group {other!r}")
        return (f"group {group} is also committed to by {who}: two deployments push every "
                "record twice (give them the same [delivery] instance_group, or different "
                "group.ids)")
