"""Which subscription of a group already consumes a topic of a new one: the control
plane's registry refuses the new one (actors/delivery/control/registry.py).

Two subscriptions of one group may not consume the same topic (issue 17): Kafka would split
its partitions between them, each seeing only part of the topic. How overlap is decided:

- a topic name against a topic name: equal names overlap;
- a pattern against a topic name: the pattern matches the whole name (RE2's full match,
  `patterns.matches`: no backtracking engine ever runs a subscription's pattern);
- a pattern against a pattern: only identical patterns are refused, since whether two
  regular expressions can match a common name is not decidable here. A topic that matches
  several riders' patterns at run time goes to the rider that joined first
  (actors/delivery/path/roster.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from actors.delivery.document.patterns import matches
from actors.delivery.document.subscription import Consumer, TopicSpec


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
