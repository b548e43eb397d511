"""TopicPlan: which topics the instance member subscribes to, and when it lists the
cluster's topics (issue 32, item 3). Pure logic, driven by `now`.

The member wants the topics its riders name and those their patterns match. It subscribes
only to those the cluster has (a group member subscribed to a missing topic is assigned
nothing for it, and on the embedded broker keeps that empty assignment after the topic
appears: runtime/kafka/topic_creation.py). Which topics exist is learned by listing them,
from a task of the member's, never from the client's own metadata:

- at once when a wanted name is not in the last listing (a new subscription, a new
  pattern);
- every `MISSING_RECHECK_MS` while a wanted topic is missing (created later: read within
  one listing of its creation);
- every `PATTERN_RECHECK_MS` while a pattern is wanted (a new topic it matches);
- never otherwise: a thousand subscriptions of existing topics list nothing.

A listing that lacks a topic subscribed to says it is gone (deleted): the member
subscribes without it, and with it again once it is back; the rebalances that follow end
the old partitions' cursors and start new ones at their groups' positions of the new topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.delivery.path.consumer import PATTERN_METADATA_MAX_AGE_MS

MISSING_RECHECK_MS = 2000
PATTERN_RECHECK_MS = PATTERN_METADATA_MAX_AGE_MS


@dataclass(slots=True)
class TopicPlan:
    named: frozenset[str] = frozenset()
    """The topics the riders name."""
    matched: frozenset[str] = frozenset()
    """The topics the riders' patterns match (the member's `TopicMatcher` says)."""
    patterns: bool = False
    """Whether any rider has a pattern (listings go on to find new matches)."""
    listed: frozenset[str] | None = None
    """The cluster's topics, as last listed (None: never listed)."""
    subscribed: frozenset[str] | None = None
    """What the member subscribed to last (None: never)."""
    listing: bool = False
    """A listing is under way."""
    next_listing_ms: int = 0
    _wanted: frozenset[str] | None = field(default=None, repr=False)
    _missing: frozenset[str] | None = field(default=None, repr=False)
    """`wanted` and `missing`, worked out once per change of `named`, `matched` or
    `listed`: the member asks them every turn (every 100 ms while idle), and with 10,000
    names missing (the default `max_topics`, #34 item 7) each took a millisecond or two."""

    # -- what the member tells it ------------------------------------------------------
    def want(self, named: frozenset[str], patterns: bool) -> None:
        """The riders' names and whether they have patterns (after joins and leaves)."""
        if self.listed is not None and not named <= self.listed:
            self.next_listing_ms = 0  # a name not seen yet: look now
        if patterns and not self.patterns:
            self.next_listing_ms = 0
        if named != self.named:
            self.named, self._wanted, self._missing = named, None, None
        self.patterns = patterns

    def match(self, matched: frozenset[str]) -> None:
        if matched != self.matched:
            self.matched, self._wanted, self._missing = matched, None, None

    def list_started(self, now_ms: int) -> None:
        self.listing = True
        self.next_listing_ms = now_ms + self._interval_ms()

    def listed_now(self, topics: frozenset[str] | None, now_ms: int) -> None:
        """A listing came back (None: it failed; the last one stands, and the next one
        is due as if it had worked)."""
        self.listing = False
        if topics is not None and topics != self.listed:
            self.listed, self._missing = topics, None
        self.next_listing_ms = now_ms + self._interval_ms()

    def subscribed_to(self, topics: frozenset[str]) -> None:
        self.subscribed = topics

    # -- decisions ---------------------------------------------------------------------
    @property
    def wanted(self) -> frozenset[str]:
        if self._wanted is None:
            self._wanted = self.named | self.matched
        return self._wanted

    @property
    def missing(self) -> frozenset[str]:
        """Wanted topics the last listing lacks (all of them before the first listing)."""
        if self._missing is None:
            self._missing = self.wanted - (self.listed or frozenset())
        return self._missing

    @property
    def present(self) -> frozenset[str]:
        return self.wanted & (self.listed or frozenset())

    def listing_due(self, now_ms: int) -> bool:
        if self.listing or not (self.wanted or self.patterns):
            return False
        if self.listed is None:
            return True
        return (bool(self.missing) or self.patterns) and now_ms >= self.next_listing_ms

    def to_subscribe(self) -> frozenset[str] | None:
        """The topics to subscribe to now (None: what is subscribed is right, or nothing
        is known yet)."""
        if self.listed is None and self.wanted:
            return None  # list first
        present = self.present
        return None if present == (self.subscribed or frozenset()) else present

    def _interval_ms(self) -> int:
        return MISSING_RECHECK_MS if self.missing or self.listed is None else PATTERN_RECHECK_MS
