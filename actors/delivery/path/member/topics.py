"""Topics: the instance member's room for what it subscribes to. It runs on the member's
task only, each fetch turn: it applies roster changes (once the riders stopped changing
for `SETTLE_MS`, so a burst of subscriptions to new topics costs one rebalance), matches
the riders' patterns with RE2 (`TopicMatcher`, a bounded number of pairs per round, issue
25), lists the cluster's topics when the `TopicPlan` says so (in a task: io.list_topics),
and subscribes to the wanted topics that exist.

Patterns never reach aiokafka (its pattern subscription runs Python's backtracking `re`
against every topic on each metadata refresh). A missing named topic is listed again
every two seconds, so one created after its subscriptions is read within one listing
(issue 32, item 3), whatever else the member reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from actors.delivery.path.member import io
from actors.delivery.path.member.shape import Member
from actors.delivery.path.member.topic_plan import TopicPlan
from actors.delivery.path.roster import Rider
from actors.delivery.path.topic_matcher import TopicMatcher
from runtime.host.logs import few
from runtime.kafka import compat

log = logging.getLogger(__name__)
SETTLE_MS = 300
"""The default of `[delivery] settle_ms`."""
SETTLE_MAX_MS = 3000


class Topics:
    def __init__(self, member: Member, changed: Callable[[], None],
                 route: Callable[[], None], *, held: bool, settle_ms: int = SETTLE_MS,
                 ) -> None:
        self.member = member
        self.changed = changed
        """Called when the riders changed (the cursors room retunes the fetch)."""
        self.route = route
        """Called when the topics stay the same: new riders get cursors at once."""
        self.held = held
        """While the control plane restores its subscriptions or replaces one: no
        subscribe until `Release` (one change with the whole union instead of one each)."""
        self.plan = TopicPlan()
        self.matcher = TopicMatcher()
        self.listening = False
        self._version = -1  # the roster version applied
        self.settle_ms = settle_ms
        self._settling: tuple[int, int, int] | None = None  # first change, version, since
        self._patterns: list[str] = []
        self._waiting: frozenset[str] = frozenset()  # missing topics last logged

    def listed(self, topics: frozenset[str] | None) -> None:
        self.plan.listed_now(topics, self._now())
        self._match(again=True)

    def turn(self) -> None:
        if self.held:
            return
        roster = self.member.roster
        if roster.version != self._version:
            self._version = roster.version
            self.plan.want(frozenset(roster.topics()), roster.uses_pattern())
            self.changed()
            self._match(again=False)
        now = self._now()
        if self.plan.listing_due(now):
            self.plan.list_started(now)
            member = self.member
            if member.kafka is not None:
                member.spawn(io.list_topics(member.kafka, member.context.clock, member),
                             name=f"{member.path}:topics")
        self._announce()
        target = self.plan.to_subscribe()
        if target is None:
            self._settling = None
            self.route()  # same topics: new riders ride at once
        elif self._settled(now):
            self._subscribe(target)

    def _match(self, *, again: bool) -> None:
        """Match the riders' patterns against the last listing when either changed."""
        patterns = self.member.roster.patterns()
        if patterns == self._patterns and not again:
            return
        self._patterns = patterns
        found = self.matcher.round(patterns, self.plan.listed or frozenset())
        self.plan.match(found)
        if self.matcher.pending:
            log.warning("%s: %d pattern/topic pairs left for the next round (at most %d "
                        "per round): %r", self.member.path, self.matcher.pending,
                        self.matcher.budget, self.matcher)

    def _settled(self, now: int) -> bool:
        """Whether a change of topics may be subscribed now: once the riders stopped
        changing for `settle_ms` (at most `SETTLE_MAX_MS` after the first change)."""
        version = self.member.roster.version
        first, seen, since = self._settling or (now, version, now)
        if version != seen:
            seen, since = version, now
        self._settling = (first, seen, since)
        if now - since >= self.settle_ms or now - first >= min(SETTLE_MAX_MS,
                                                                10 * self.settle_ms):
            self._settling = None
            return True
        return False

    def _subscribe(self, target: frozenset[str]) -> None:
        member, kafka = self.member, self.member.kafka
        if kafka is None:
            return
        self.plan.subscribed_to(target)
        if target:
            kafka.subscribe(topics=sorted(target), listener=member.listener)
            self.listening = True
        elif self.listening:
            self.listening = False
            member.spawn(_leave(kafka), name=f"{member.path}:leave")
        log.info("%s: subscribed to %d topics for %d subscriptions (roster version %d)",
                 member.path, len(target), len(member.roster), member.roster.version)

    def _announce(self) -> None:
        """Say once which wanted topics the cluster does not have (after a listing)."""
        if self.plan.listed is None:
            return
        missing = self.plan.missing
        if missing is self._waiting:  # the plan's own, unchanged since the last turn
            return
        new = missing - self._waiting
        if new:
            names = sorted(new)
            log.info("%s: waiting for %d topics that do not exist yet: %s", self.member.path,
                     len(names), few(names))
            log.debug("%s: waiting for topics: %s", self.member.path, ", ".join(names))
        self._waiting = missing

    def pattern_topics(self, rider: Rider | None) -> list[str]:
        """The topics `rider`'s patterns were found to match."""
        patterns = rider.settings.patterns if rider else ()
        return sorted({topic for p in patterns for topic in self.matcher.matching(p)})

    def _now(self) -> int:
        return self.member.context.clock.monotonic_ms()


async def _leave(kafka: AIOKafkaConsumer) -> None:
    """Nothing to read: leave the group first (unsubscribing forgets the member id,
    runtime/kafka/compat.py quirks 6 and 9), then unsubscribe."""
    await compat.leave_group(kafka)
    kafka.unsubscribe()
