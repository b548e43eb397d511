"""The control plane's decisions, pure: which subscriptions exist and in what state, what
to start, when to retry a start, what to refuse, and what a record of the cluster's
subscriptions topic asks for. The control actor (actors/delivery/control/actor.py) owns
one registry, performs what it decides (starting and stopping actor trees, files, the
topic) and reports the outcome back (`started`, `start_failed`, `exited`).

Time comes from the injected clock: `since` and `next_attempt_at` in the status answer
are wall time, a retry's deadline is monotonic (the actor's timer). The delay between
attempts is the kernel's restart backoff (runtime/kernel/backoff.py), one per
subscription: it grows with the failures in a row and a running tree resets it. A
`Retry` carries the failure count it was scheduled for, so a retry that comes after the
subscription started, paused or changed is recognised as stale and dropped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from actors.delivery.cluster.log import DISABLED_PREFIX, PAUSED_PREFIX
from actors.delivery.control.messages import Marks
from actors.delivery.control.status import RETRYING, STOPPED, State, SubscriptionStatus
from actors.delivery.document.overlap import conflict
from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.errors import (
    InvalidSubscription,
    LimitReached,
    SubscriptionExists,
    SubscriptionNotFound,
)
from runtime.host.config import (
    DEFAULT_MAX_PATTERNS,
    DEFAULT_MAX_SUBSCRIPTIONS,
    DEFAULT_MAX_TOPICS,
)
from runtime.kernel.backoff import Backoff, RestartBackoff
from runtime.kernel.clock import Clock

SUBSCRIPTION_RESTARTS = Backoff(initial_ms=500, multiplier=2.0, max_ms=5000)
"""Between attempts to start a subscription's tree: 0.5 s, doubling, at most 5 s."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one instance holds at most (`[delivery] max_subscriptions`, `max_topics`,
    `max_patterns`): 2,000 subscriptions of 90 topics and 10 patterns each took the
    process's loop seconds per health check and a minute per unsubscribe (#34)."""

    subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    topics: int = DEFAULT_MAX_TOPICS
    patterns: int = DEFAULT_MAX_PATTERNS


@dataclass(frozen=True, slots=True)
class Retry:
    """Start `key` again at monotonic `at_ms`, unless `failures` is no longer current."""

    key: str
    failures: int
    at_ms: int
    delay_ms: int


@dataclass(slots=True)
class Entry:
    consumer: Consumer
    status: SubscriptionStatus
    restarts: RestartBackoff = field(default_factory=lambda: RestartBackoff(
        SUBSCRIPTION_RESTARTS))

    @property
    def in_process(self) -> bool:
        return self.status.in_process


# What a record of the subscriptions topic asks of this instance (`SubscriptionRegistry.
# change_of`); the actor performs it.
@dataclass(frozen=True, slots=True)
class Adopt:
    consumer: Consumer


@dataclass(frozen=True, slots=True)
class Replace:
    consumer: Consumer


@dataclass(frozen=True, slots=True)
class Remove:
    key: str


@dataclass(frozen=True, slots=True)
class Pause:
    key: str


@dataclass(frozen=True, slots=True)
class Resume:
    key: str


@dataclass(frozen=True, slots=True)
class Disable:
    key: str
    reason: str


Change = Adopt | Replace | Remove | Pause | Resume | Disable


@dataclass(frozen=True, slots=True)
class Published:
    """What the registry shows to readers outside the control actor (the status API,
    readiness, the cluster view): read-only views whose entries are copies, each
    replaced when its subscription changes (never written in place). One change costs
    one entry, not a copy of every subscription (10,000 subscriptions took minutes to
    subscribe or restore while each change copied them all: bench/RESULTS.md)."""

    consumers: Mapping[str, Consumer] = field(default_factory=dict)
    statuses: Mapping[str, SubscriptionStatus] = field(default_factory=dict)


class SubscriptionRegistry:
    def __init__(self, clock: Clock, limits: Limits | None = None) -> None:
        self.clock = clock
        self.limits = limits or Limits()
        # how many listed subscriptions name each topic, give each pattern
        self._topic_uses: Counter[str] = Counter()
        self._pattern_uses: Counter[str] = Counter()
        self._entries: dict[str, Entry] = {}
        self._consumers: dict[str, Consumer] = {}
        self._by_group: dict[str, dict[str, Consumer]] = {}  # group.id -> its subscriptions
        self._statuses: dict[str, SubscriptionStatus] = {}
        self.published = Published(MappingProxyType(self._consumers),
                                    MappingProxyType(self._statuses))
        # what the subscriptions topic (or the files) say, also of keys not listed yet
        self.marked_paused: set[str] = set()
        self.marked_disabled: dict[str, str] = {}
        # record names a version before issue 25 wrote (`<id>_<group.id>`) -> the key of
        # the subscription in that record, where the two differ
        self._earlier: dict[str, str] = {}

    # -- reading -------------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def known(self, key: str) -> Entry:
        entry = self._entries.get(key)
        if entry is None:
            raise SubscriptionNotFound("subscription not found", key)
        return entry

    def get(self, key: str) -> Entry | None:
        return self._entries.get(key)

    def marks(self, key: str) -> Marks:
        """The subscription and whether it is paused or marked disabled."""
        entry = self.known(key)
        return Marks(key, entry.consumer, entry.status.state == "paused",
                     key in self.marked_disabled)

    @property
    def consumers(self) -> Mapping[str, Consumer]:
        return {k: e.consumer for k, e in self._entries.items()}

    @property
    def statuses(self) -> Mapping[str, SubscriptionStatus]:
        return {k: e.status for k, e in self._entries.items()}

    def in_process(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.in_process

    def state(self, key: str) -> State:
        return self.known(key).status.state

    # -- refusals: what would fail later, checked before anything starts -----------------
    def refuse_new(self, consumer: Consumer) -> None:
        if consumer.key in self._entries:
            raise SubscriptionExists("subscription already exists",
                                     f"{consumer.key}: unsubscribe it first")
        held = self._earlier.get(consumer.key)
        if held in self._entries:  # its record would replace the one that holds `held`
            raise SubscriptionExists(
                "subscription name held by an earlier version's record",
                f"the subscriptions topic keeps subscription {held} under {consumer.key}: "
                f"unsubscribe and subscribe {held} again to move it to its own key")
        self.refuse_shared_topic(consumer)
        if len(self._entries) >= self.limits.subscriptions:
            raise LimitReached("too many subscriptions", f"this instance holds "
                               f"{len(self._entries)}, its [delivery] max_subscriptions: "
                               "unsubscribe one first")
        self.refuse_past_limits(consumer, None)

    def refuse_update(self, key: str, consumer: Consumer) -> None:
        entry = self.known(key)
        if consumer.key != key:
            raise InvalidSubscription("id and group.id cannot change",
                                      f"{key} would become {consumer.key}")
        if entry.in_process:
            raise InvalidSubscription("in-process subscription",
                                      "its program owns it: stop and consume again")
        self.refuse_shared_topic(consumer)
        self.refuse_past_limits(consumer, entry.consumer)

    def refuse_past_limits(self, consumer: Consumer, replacing: Consumer | None) -> None:
        """`LimitReached` when listing `consumer` (instead of `replacing`) would name more
        distinct topics or patterns than the limits allow."""
        old_names, old_patterns = _sources(replacing)
        names, patterns = _sources(consumer)
        for what, uses, new, old, limit, key in (
                ("topics", self._topic_uses, names, old_names, self.limits.topics,
                 "max_topics"),
                ("patterns", self._pattern_uses, patterns, old_patterns,
                 self.limits.patterns, "max_patterns")):
            after = _distinct_after(uses, old, new)
            if after > limit and after > len(uses):
                raise LimitReached(f"too many {what}", f"this instance's subscriptions would "
                                   f"name {after} distinct {what}, past its [delivery] "
                                   f"{key} ({limit})")

    def refuse_shared_topic(self, consumer: Consumer) -> None:
        """Two subscriptions of one group may not consume one topic: Kafka would split its
        partitions between them (actors/delivery/document/overlap.py says how overlap is
        decided)."""
        found = conflict(consumer, self._by_group.get(consumer.group_id, {}).values())
        if found is not None:
            other, topic = found
            raise InvalidSubscription(
                "topic already consumed in this group",
                f"{topic} is consumed by subscription {other.key} of group "
                f"{consumer.group_id}: use another group.id or unsubscribe {other.key}")

    # -- changes ---------------------------------------------------------------------------
    def add(self, consumer: Consumer, *, in_process: bool = False,
            paused_reason: str = "paused before the restart", refused: str = "") -> bool:
        """List `consumer`; True when its tree should start now (False: it is paused or
        disabled, as the files or the topic say, or `refused` says why it may not run)."""
        key, now = consumer.key, self.clock.wall_ms()
        status = SubscriptionStatus("starting", now, in_process=in_process)
        self._entries[key] = Entry(consumer, status)
        if refused:
            status.move("refused", now, refused)
        elif key in self.marked_disabled:
            status.move("disabled", now, self.marked_disabled[key])
        elif key in self.marked_paused:
            status.move("paused", now, paused_reason)
        self._publish(key)
        return status.state == "starting"

    def remove(self, key: str) -> Consumer:
        consumer = self._entries.pop(key).consumer
        self._publish(key)
        return consumer

    def replace(self, key: str, consumer: Consumer) -> bool:
        """Change `key`'s settings; True when its tree should start again (it ran, or was
        to run)."""
        entry = self.known(key)
        entry.consumer = consumer
        self._publish(key)
        return entry.status.state not in STOPPED

    def runs(self, key: str) -> bool:
        """Whether `key` is meant to run (not paused or disabled)."""
        return self.state(key) not in STOPPED

    def move(self, key: str, state: State, reason: str = "") -> None:
        self.known(key).status.move(state, self.clock.wall_ms(), reason)
        self._publish(key)

    def started(self, key: str) -> None:
        entry = self.known(key)
        entry.status.move("running", self.clock.wall_ms())
        entry.restarts.succeeded()
        self._publish(key)

    def start_failed(self, key: str, reason: str, broker_down: bool) -> Retry:
        """The tree could not start: a retry after the kernel's restart backoff."""
        entry = self.known(key)
        delay = entry.restarts.failed()
        entry.status.retrying(self.clock.wall_ms(), reason, broker_down, delay)
        self._publish(key)
        return Retry(key, entry.restarts.failures, self.clock.monotonic_ms() + delay, delay)

    def exited(self, key: str, reason: str, broker_down: bool) -> Retry | None:
        """The tree ended by itself (crashed past its own restart budget, or its
        supervisor went): a retry, unless it was meant to stop."""
        entry = self._entries.get(key)
        if entry is None or entry.status.state in (*STOPPED, "stopping", "refused",
                                                   *RETRYING):
            return None
        return self.start_failed(key, reason, broker_down)

    def due(self, retry: Retry) -> Consumer | None:
        """The subscription to start for `retry`, None when it is stale."""
        entry = self._entries.get(retry.key)
        if (entry is None or entry.status.state not in RETRYING
                or entry.restarts.failures != retry.failures):
            return None
        return entry.consumer

    def wants_pause(self, key: str) -> bool:
        """A refused subscription stays refused: a pause and resume would start it."""
        return self.state(key) not in ("paused", "refused")

    def wants_resume(self, key: str) -> bool:
        return self.state(key) in STOPPED

    def wants_disable(self, key: str) -> bool:
        """Only a running subscription is disabled by a 410 (a second 410 of the same
        tree, or one after a pause, changes nothing)."""
        entry = self._entries.get(key)
        return entry is not None and entry.status.state == "running"

    def _publish(self, key: str) -> None:
        """Show `key`'s change: a copy of its status, its document; gone when removed.
        The index by group follows (a subscribe checks only its own group's)."""
        before = self._consumers.get(key)
        entry = self._entries.get(key)
        if before is not None:
            group = self._by_group[before.group_id]
            group.pop(key, None)
            if not group:
                del self._by_group[before.group_id]
            if entry is None or entry.consumer is not before:
                self._count_sources(before, -1)
        if entry is None:
            self._consumers.pop(key, None)
            self._statuses.pop(key, None)
            return
        if entry.consumer is not before:
            self._count_sources(entry.consumer, +1)
        self._consumers[key] = entry.consumer
        self._by_group.setdefault(entry.consumer.group_id, {})[key] = entry.consumer
        self._statuses[key] = dataclasses.replace(entry.status)

    def _count_sources(self, consumer: Consumer, step: int) -> None:
        names, patterns = _sources(consumer)
        for uses, found in ((self._topic_uses, names), (self._pattern_uses, patterns)):
            for name in found:
                uses[name] += step
                if uses[name] <= 0:
                    del uses[name]

    # -- what the files keep (local mode) ----------------------------------------------
    def paused_keys(self) -> list[str]:
        return sorted(k for k, e in self._entries.items()
                      if e.status.state == "paused" and not e.in_process)

    def disabled_reasons(self) -> dict[str, str]:
        return {k: e.status.reason for k, e in sorted(self._entries.items())
                if e.status.state == "disabled" and not e.in_process}

    # -- cluster mode: what a record of the subscriptions topic asks for ---------------
    def change_of(self, key: str, value: bytes | None) -> Change | None:
        """Note the record's flags; the change it asks of this instance, if any. A record
        written under an earlier name applies to the subscription that name was for."""
        if key.startswith(PAUSED_PREFIX):
            target = self._named(key.removeprefix(PAUSED_PREFIX))
            (self.marked_paused.add if value else self.marked_paused.discard)(target)
            if target not in self._entries:
                return None
            return Pause(target) if value else Resume(target)
        if key.startswith(DISABLED_PREFIX):
            return self._disabled_change(self._named(key.removeprefix(DISABLED_PREFIX)), value)
        if value is None:
            target = self._named(key)
            self._earlier.pop(key, None)
            return Remove(target) if target in self._entries else None
        consumer = decode_consumer(value)
        self._note_name(key, consumer.key)
        entry = self._entries.get(consumer.key)
        if entry is None:
            return Adopt(consumer)
        return Replace(consumer) if consumer != entry.consumer else None

    def _named(self, name: str) -> str:
        return self._earlier.get(name, name)

    def _note_name(self, name: str, key: str) -> None:
        """Record `name` holds subscription `key`; flags read under `name` before are
        `key`'s (after compaction a flag may come before the record it flags)."""
        if name == key:
            self._earlier.pop(name, None)
            return
        self._earlier[name] = key
        if name in self.marked_paused:
            self.marked_paused.discard(name)
            self.marked_paused.add(key)
        if name in self.marked_disabled:
            self.marked_disabled[key] = self.marked_disabled.pop(name)

    def _disabled_change(self, key: str, reason: bytes | None) -> Change | None:
        entry = self._entries.get(key)
        if reason is None:
            self.marked_disabled.pop(key, None)
            if entry is not None and entry.status.state == "disabled":
                return Resume(key)
            return None
        self.marked_disabled[key] = reason.decode(errors="replace")
        return Disable(key, self.marked_disabled[key]) if entry is not None else None

    def __repr__(self) -> str:
        return f"<SubscriptionRegistry { {k: e.status.state for k, e in self._entries.items()} }>"


def _sources(consumer: Consumer | None) -> tuple[set[str], set[str]]:
    """The topic names and the patterns `consumer` reads (none for no consumer)."""
    if consumer is None:
        return set(), set()
    return ({t.name for t in consumer.topics if t.name is not None},
            {t.pattern for t in consumer.topics if t.pattern is not None})


def _distinct_after(uses: Counter[str], old: set[str], new: set[str]) -> int:
    """Distinct names in use once `old` (one subscription's) is replaced by `new`."""
    gone = sum(1 for name in old - new if uses[name] == 1)
    return len(uses) - gone + sum(1 for name in new if name not in uses)
