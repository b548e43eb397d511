"""Roster: the subscriptions riding one shared group member, and which of them owns a topic.

Pure logic (no I/O): the `InstanceMemberActor` (actors/delivery/path/member/), its only
owner, asks it what to subscribe to and whose partition actors a topic's records go to.
A rider carries its subscription's `RiderSettings` (document/settings.py), never the
wire document. A topic that matches several riders' patterns goes to the rider that
joined first (the control plane refuses other overlaps within a group: document/
overlap.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.delivery.document.patterns import matches

if TYPE_CHECKING:
    from actors.delivery.document.settings import RiderSettings
    from actors.delivery.path.consumer import ConsumerDeps
    from runtime.kernel import ChildRef


@dataclass(slots=True)
class Rider:
    """One subscription on a shared member: what its partition actors need."""

    settings: RiderSettings
    partitions: ChildRef
    """The Supervisor of this subscription's partition actors (follows its restarts)."""
    deps: ConsumerDeps


@dataclass(slots=True)
class Roster:
    """The riders of one member, in the order they joined. The member owns it; others
    change it by messages to the member (actors/delivery/path/member/)."""

    group_id: str
    riders: dict[str, Rider] = field(default_factory=dict)
    version: int = 0
    """Moves on every join or leave: the member re-subscribes when it differs from the
    version it subscribed with."""
    _owners: dict[str, str | None] = field(default_factory=dict)
    _groups: dict[str, set[str]] = field(default_factory=dict)
    """The riders of each group.id (usually one; several only through patterns)."""
    joins: int = 0
    """Joins so far: the last `joins - n` riders joined after the `n`-th (a join is last)."""
    _joined: list[str] = field(default_factory=list)  # since the last `joined()`
    _names: Counter[str] = field(default_factory=Counter)  # topics named, by how many
    _patterns: Counter[str] = field(default_factory=Counter)  # patterns, by how many

    def join(self, rider: Rider) -> None:
        """`rider` joins last (a new seat of the same subscription replaces its old one;
        the same seat again changes nothing)."""
        key = rider.settings.key
        if self.riders.get(key) is rider:
            return
        self._drop(key)
        self.riders[key] = rider
        self._groups.setdefault(rider.settings.group_id, set()).add(key)
        self._names.update(rider.settings.topics)
        self._patterns.update(rider.settings.patterns)
        self._joined.append(key)
        self.joins += 1
        self._changed()

    def leave(self, key: str) -> Rider | None:
        rider = self._drop(key)
        if rider is not None:
            self._changed()
        return rider

    def _drop(self, key: str) -> Rider | None:
        rider = self.riders.pop(key, None)
        if rider is not None:
            keys = self._groups.get(rider.settings.group_id, set())
            keys.discard(key)
            if not keys:
                self._groups.pop(rider.settings.group_id, None)
            self._names.subtract(rider.settings.topics)
            self._patterns.subtract(rider.settings.patterns)
        return rider

    def joined(self) -> list[str]:
        """The riders that joined since the last call (still seated), in order."""
        keys, self._joined = self._joined, []
        return [key for key in dict.fromkeys(keys) if key in self.riders]

    def groups(self) -> list[str]:
        """Every group.id a rider uses, in the order they first joined."""
        return list(self._groups)

    def of_group(self, group_id: str) -> set[str]:
        """The riders whose subscriptions use `group_id`."""
        return self._groups.get(group_id, set())

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
        owners = [key for key, rider in self.riders.items()
                  if consumes(rider.settings, topic)]
        return owners[0] if owners else None

    def claimants(self, topic: str) -> list[str]:
        """Every rider that consumes `topic` (more than one only through patterns)."""
        return [key for key, rider in self.riders.items()
                if consumes(rider.settings, topic)]

    def topics(self) -> list[str]:
        """The topics the riders name (the member adds those their patterns match)."""
        return sorted(name for name, count in self._names.items() if count > 0)

    def uses_pattern(self) -> bool:
        return bool(self.patterns())

    def patterns(self) -> list[str]:
        """Every rider's patterns, once each (matched by the member's `TopicMatcher`)."""
        return sorted(pattern for pattern, count in self._patterns.items() if count > 0)

    def __len__(self) -> int:
        return len(self.riders)


def consumes(settings: RiderSettings, topic: str) -> bool:
    """Whether the subscription reads `topic` (by name, or a pattern of it matches the
    whole name)."""
    return topic in settings.topics or any(matches(p, topic) for p in settings.patterns)
