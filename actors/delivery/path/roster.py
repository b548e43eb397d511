"""Roster: the subscriptions riding one shared group member, and which of them owns a topic.

Pure logic (no I/O): the `InstanceMemberActor` (actors/delivery/path/member.py), its only
owner, asks it what to subscribe to and whose partition actors a topic's records go to;
the control plane's registry asks `conflict` before a subscription joins a group.

Two subscriptions of one group may not consume the same topic (issue 17): Kafka would split
its partitions between them, each seeing only part of the topic. How overlap is decided:

- a topic name against a topic name: equal names overlap;
- a pattern against a topic name: the pattern matches the whole name (RE2's full match,
  `patterns.matches`: no backtracking engine ever runs a subscription's pattern);
- a pattern against a pattern: only identical patterns are refused, since whether two
  regular expressions can match a common name is not decidable here. A topic that matches
  several riders' patterns at run time goes to the rider that joined first (a warning is
  logged once per topic).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.delivery.document.patterns import matches

if TYPE_CHECKING:
    from actors.delivery.document.subscription import Consumer, TopicSpec
    from actors.delivery.path.consumer import ConsumerDeps
    from runtime.kernel import ChildRef


def specs_overlap(a: TopicSpec, b: TopicSpec) -> bool:
    """True when a record of one topic spec could also be a record of the other."""
    if a.pattern and b.pattern:
        return a.pattern == b.pattern
    if a.pattern or b.pattern:
        pattern, name = (a.pattern, b.name) if a.pattern else (b.pattern, a.name)
        return bool(pattern and name and matches(pattern, name))
    return a.name == b.name


def overlapping_topic(new: Consumer, other: Consumer) -> str | None:
    """The first topic (or pattern) of `new` that `other` consumes too, else None."""
    for spec in new.topics:
        if any(specs_overlap(spec, theirs) for theirs in other.topics):
            return spec.name or f"/{spec.pattern}/"
    return None


def conflict(new: Consumer, others: Iterable[Consumer]) -> tuple[Consumer, str] | None:
    """The first subscription of `new`'s broker and group that consumes one of its topics
    (and that topic), else None. `new` itself (same key) never conflicts."""
    for other in others:
        if (other.key == new.key or other.broker != new.broker
                or other.group_id != new.group_id):
            continue
        topic = overlapping_topic(new, other)
        if topic is not None:
            return other, topic
    return None


@dataclass(slots=True)
class Rider:
    """One subscription on a shared member: what its partition actors need."""

    sub: Consumer
    partitions: ChildRef
    """The Supervisor of this subscription's partition actors (follows its restarts)."""
    deps: ConsumerDeps


@dataclass(slots=True)
class Roster:
    """The riders of one member, in the order they joined. The member owns it; others
    change it by messages to the member (actors/delivery/path/member.py)."""

    group_id: str
    riders: dict[str, Rider] = field(default_factory=dict)
    version: int = 0
    """Moves on every join or leave: the member re-subscribes when it differs from the
    version it subscribed with."""
    _owners: dict[str, str | None] = field(default_factory=dict)

    def join(self, rider: Rider) -> None:
        """`rider` joins last (a new seat of the same subscription replaces its old one;
        the same seat again changes nothing)."""
        if self.riders.get(rider.sub.key) is rider:
            return
        self.riders.pop(rider.sub.key, None)
        self.riders[rider.sub.key] = rider
        self._changed()

    def leave(self, key: str) -> Rider | None:
        rider = self.riders.pop(key, None)
        if rider is not None:
            self._changed()
        return rider

    def _changed(self) -> None:
        self.version += 1
        self._owners.clear()

    def owner_of(self, topic: str) -> Rider | None:
        """The rider whose subscription owns `topic` (None: no one, any more)."""
        if topic not in self._owners:
            self._owners[topic] = self._find_owner(topic)
        key = self._owners[topic]
        return self.riders.get(key) if key is not None else None

    def _find_owner(self, topic: str) -> str | None:
        owners = [key for key, rider in self.riders.items() if consumes(rider.sub, topic)]
        return owners[0] if owners else None

    def claimants(self, topic: str) -> list[str]:
        """Every rider that consumes `topic` (more than one only through patterns)."""
        return [key for key, rider in self.riders.items() if consumes(rider.sub, topic)]

    def topics(self) -> list[str]:
        """The topics the riders name (the member adds those their patterns match)."""
        return sorted({t.name for r in self.riders.values() for t in r.sub.topics if t.name})

    def uses_pattern(self) -> bool:
        return any(t.pattern for r in self.riders.values() for t in r.sub.topics)

    def patterns(self) -> list[str]:
        """Every rider's patterns, once each (matched by the member's `TopicMatcher`)."""
        return sorted({t.pattern for r in self.riders.values() for t in r.sub.topics
                       if t.pattern})

    def __len__(self) -> int:
        return len(self.riders)


def consumes(sub: Consumer, topic: str) -> bool:
    """Whether `sub` reads `topic` (by name, or its pattern matches the whole name)."""
    return any(t.name == topic if not t.pattern else matches(t.pattern, topic)
               for t in sub.topics)
