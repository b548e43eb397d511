"""InstanceMemberActor: the one Kafka group member of this instance for a broker; every
subscription is a cursor on the partitions it reads (issue 24). RiderActor: a
subscription's seat on it.

The runtime's instances form one consumer group of their own (`[delivery]
instance_group`), subscribed to the union of the subscriptions' topics; Kafka assigns
each topic-partition to one instance. The member fetches and decodes each owned partition
once and hands the records to one cursor per subscription of that topic: a
`PartitionActor` in the subscription's own tree, with its own window, lanes, retries and
offset tracker. Which cursor gets which records is `Fanout`'s decision
(actors/delivery/path/fanout.py): a bounded shared buffer per partition; a cursor that
falls behind it reads on its own (actors/delivery/path/catchup.py) until it is back.

No subscription joins a group: a subscription's `group.id` is where its positions are
committed, without membership, one request per group that moved per commit round, all
through this member's client (runtime/kafka/group_offsets.py). A cursor starts at its
group's committed offset, else at its `auto.offset.reset`.

Tree::

    groups (one_for_one)                    under the runtime's root
    └── instance:<broker>                   InstanceMemberActor (a GroupConsumerActor)
    delivery
    └── <id>_<group.id>
        ├── egress, deadletter, partitions  partition actors (the cursors) live here
        └── consumer                        RiderActor: joins on start, leaves on stop

Changes go through the member's fetch loop, the one place that calls the client: a join
bumps the roster's version; when the union of topics is unchanged, the new subscription
gets cursors on the partitions already owned (no rebalance); a new topic subscribes anew
(one rebalance of the instance group for changes that arrive together). A leave drains
and commits that subscription's cursors, then stops them.

Patterns never reach aiokafka (its pattern subscription runs Python's backtracking `re`
against every topic on each metadata refresh: issue 25). The member lists the cluster's
topics every `PATTERN_METADATA_MAX_AGE_MS` in a task of its own, its `TopicMatcher`
matches the riders' patterns against them with RE2 (each pair once, a bounded number per
round), and the member subscribes to the names: the riders' topics and what their
patterns match. A change in that set is a change of topics like any other.

The member is its roster's only owner (issue 23, item 4): riders join and leave by
message (`Join`, `Leave`), the control plane holds and releases its subscribe by message
(`Hold`, `Release`: while it restores, or while an update replaces a rider, so the leave
and the join make one change). The control plane keeps its own record of which
subscriptions ride which member (actors/delivery/control/trees.py); a member it builds,
first or after a crash, starts from a copy of that record, so a restarted member finds
its riders again without anyone sharing the dead one's roster. A rebalance is a message
too: aiokafka's listener asks the member `Revoke` and `Assign` (actors/shared/rebalance.py),
so partitions and their cursors change on the member's task, never on aiokafka's. The
fetch loop runs beside it: after each await it keeps only what is still owned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from actors.delivery.path.catchup import CATCH_UP_READERS, CatchUpRead, catch_up
from actors.delivery.path.consumer import PATTERN_METADATA_MAX_AGE_MS, fetch_size
from actors.delivery.path.fanout import EARLIEST, CatchUp, Fanout, Feed
from actors.delivery.path.partition import PartitionActor, PartitionPeers
from actors.delivery.path.roster import Rider, Roster, consumes
from actors.delivery.path.status import STATUS_TIMEOUT_MS, MemberStatus
from actors.delivery.path.topic_matcher import TopicMatcher
from actors.shared.errors import UnexpectedMessage
from actors.shared.group_consumer import (
    DRAIN_GRACE_MS,
    HIGHWATER_REFRESH_MS,
    POLL_MS,
    ClientSettings,
    GroupConsumerActor,
    Wiring,
    child_name,
    records_of,
)
from actors.shared.messages import (
    Assigned,
    Batch,
    CommitRequest,
    Drain,
    FlowControl,
    Highwater,
    Rewind,
    StatusQuery,
)
from actors.shared.rebalance import Assign, Revoke
from runtime.errors import ActorDeadError, ActorStartError
from runtime.host.journal import Event
from runtime.host.metrics import Registry
from runtime.kafka import compat, topic_creation
from runtime.kafka.group_offsets import GroupOffsets
from runtime.kernel import Actor, ChildRef, ChildSpec, Supervisor, settle_within, within

log = logging.getLogger(__name__)
LEAVE_GRACE_MS = 2000
"""How long a rider waits for its member beyond the drain deadline before leaving alone."""
SETTLE_MS = 300
SETTLE_MAX_MS = 3000
RING_MIN_RECORDS = 2000
"""The shared buffer of a partition holds at least this many records (more when one
fetch brings more), so a cursor that paused briefly resumes from memory."""

Seat = tuple[str, TopicPartition]
"""A cursor: (subscription key, topic-partition)."""


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
class TopicsListed:
    """The member's listing task -> member: the cluster's topic names (None: the broker
    did not answer; the last listing stands)."""

    topics: frozenset[str] | None


class InstanceMemberActor(GroupConsumerActor):
    def __init__(self, name: str, group_id: str, riders: Iterable[Rider], wiring: Wiring,
                 settings: ClientSettings, metrics: Registry,
                 long_lived: Callable[[], None] = lambda: None, *, held: bool = False,
                 ) -> None:
        super().__init__(name, wiring)
        self.roster = Roster(group_id)  # ours alone: changed by messages only
        for rider in riders:
            self.roster.join(rider)
        self.held = held
        """While the control plane restores its subscriptions or replaces one: no
        subscribe until `Release` (one join with the whole union instead of one each)."""
        self.long_lived = long_lived
        """Called once new cursors run: what they built lives long (`Runtime.
        keep_long_lived`, out of the garbage collector's full passes)."""
        self.settings = settings
        self.fanouts: dict[TopicPartition, Fanout] = {}
        self.offsets: GroupOffsets | None = None
        self.commit_errors: dict[str, str] = {}  # group.id -> why its last commit failed
        self._epochs: dict[Seat, int] = {}
        self._seat_rewinds: dict[Seat, int] = {}
        self._seat_flow: dict[Seat, bool] = {}
        self._seat_commits: dict[Seat, int] = {}
        self._caught: list[CaughtUp] = []
        self._reads: dict[Seat, CatchUpRead] = {}
        self._readers = asyncio.Semaphore(CATCH_UP_READERS)
        self._subscribed: int | None = None  # the roster version subscribed with
        self._target: tuple[str, ...] | None = None  # the topics subscribed to
        self.matcher = TopicMatcher()
        self._topics: frozenset[str] = frozenset()  # the cluster's, as last listed
        self._matched: frozenset[str] = frozenset()  # those the riders' patterns match
        self._subscribed_matched = self._matched  # `_matched` when last subscribed
        self._matched_with: list[str] = []  # the patterns `_matched` is for
        self._patterns: tuple[int, list[str]] = (-1, [])  # the riders' at a roster version
        self._rematch = False  # a listing arrived: match again
        self._listing = False  # a listing task runs
        self._list_at = 0  # when the next listing is due (monotonic ms)
        self._listening = False
        self._missing: set[str] = set()  # named topics not on the broker yet (watched)
        self._leaves: list[Leave] = []
        self._client_wait_ms: int | None = None  # the client's fetch wait, once started
        self._settling: tuple[int, int, int] | None = None  # first change, version, since
        self._routed: set[str] = set()  # riders whose cursors on owned partitions exist
        self._tuned: set[str] = set()  # riders counted in the fetch size and wait
        self._retune = False  # a rider left: recompute the fetch size and wait
        self._fetch_records = 0
        self._rider_wait_ms: int | None = None
        self.rebalances = 0
        labels = {"group": group_id, "member": name}
        self.m_generation = metrics.gauge(
            "hookstream_group_generation", "Generation of the instance group member"
        ).labels(**labels)
        self.m_assigned = metrics.gauge(
            "hookstream_group_assigned_partitions",
            "Partitions assigned to the instance group member").labels(**labels)
        self.m_riders = metrics.gauge(
            "hookstream_group_subscriptions",
            "Subscriptions reading through the instance group member").labels(**labels)
        self.m_rebalances = metrics.counter(
            "hookstream_group_rebalances_total",
            "Assignments the instance group member received").labels(**labels)

    def client_settings(self) -> ClientSettings:
        return self.settings

    async def subscribe(self, kafka: AIOKafkaConsumer) -> None:
        self.offsets = GroupOffsets(compat.client_of(kafka))
        # a previous incarnation's cursors (it crashed): their positions are committed
        # or not; the new assignment starts them again from what is
        for rider in list(self.roster.riders.values()):
            with contextlib.suppress(ActorDeadError):
                sup = rider.partitions.actor_as(Supervisor)
                if sup.children():
                    await sup.stop_children(sup.children())
        if not self.held:
            if self.roster.uses_pattern():  # the first subscription has what they match
                with contextlib.suppress(KafkaError):
                    self._topics = frozenset(await kafka.topics())
                self._match_patterns()
                self._list_at = self.context.clock.monotonic_ms() + PATTERN_METADATA_MAX_AGE_MS
            await self._resubscribe(kafka)

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: object) -> MemberStatus | None:
        if isinstance(message, CommitRequest):
            seat = _seat(message)
            if self._epochs.get(seat) == message.epoch:
                self._seat_commits[seat] = message.offset
        elif isinstance(message, FlowControl):
            seat = _seat(message)
            if self._epochs.get(seat) == message.epoch:
                self._seat_flow[seat] = message.paused
                read = self._reads.get(seat)
                if read is not None and not message.paused:
                    read.resumed.set()
        elif isinstance(message, Rewind):
            self._seat_rewinds[_seat(message)] = message.epoch
        elif isinstance(message, Assign | Revoke):
            await self.rebalance(message)
        elif isinstance(message, CaughtUp):
            self._caught.append(message)
        elif isinstance(message, Join):
            self.roster.join(message.rider)  # the fetch loop subscribes anew
        elif isinstance(message, Leave):
            self._leaves.append(message)
        elif isinstance(message, Hold | Release):
            self.held = isinstance(message, Hold)  # a release subscribes on the next turn
        elif isinstance(message, TopicsListed):
            self._listing = False
            if message.topics is not None:
                self._topics, self._rematch = message.topics, True
        elif isinstance(message, StatusQuery) and message.subscription is not None:
            return self._status_of(message.subscription)
        else:
            raise UnexpectedMessage(self.path, message)
        return None

    # -- the fetch loop ----------------------------------------------------------------
    async def _apply_requests(self, kafka: AIOKafkaConsumer) -> None:
        leaves, self._leaves = self._leaves, []
        for leave in leaves:
            await self._leave(leave)
        self._apply_flow()
        await self._flush_commits()
        await self._apply_rewinds(kafka)
        self._apply_caught_up()
        self._steer(kafka)
        await self._refresh_highwaters(kafka)
        self._match_patterns()
        self._list_topics_when_due(kafka)
        moved = (self._subscribed != self.roster.version
                 or self._subscribed_matched is not self._matched)
        if not self.held and moved:
            if self._target == self._wanted():
                await self._reroute()
            elif self._settled():
                await self._resubscribe(kafka)
        elif self._missing and topic_creation.missing(kafka, self._missing) != self._missing:
            await self._resubscribe(kafka)

    # -- patterns ----------------------------------------------------------------------
    def _wanted(self) -> tuple[str, ...]:
        """The topics to subscribe to: the riders' names and what their patterns match."""
        return tuple(sorted(set(self.roster.topics()) | self._matched))

    def _match_patterns(self) -> None:
        """Match the riders' patterns against the last listing when either changed: one
        bounded round of the `TopicMatcher` (what it leaves waits for the next listing)."""
        patterns = self._riders_patterns()
        if patterns == self._matched_with and not self._rematch:
            return
        if patterns != self._matched_with:
            self._list_at = 0  # a new pattern: list the topics now
        self._matched_with, self._rematch = patterns, False
        found = self.matcher.round(patterns, self._topics)
        if found != self._matched:
            self._matched = found
        if self.matcher.pending:
            log.warning("%s: %d pattern/topic pairs left for the next round (at most %d "
                        "per round): %r", self.path, self.matcher.pending,
                        self.matcher.budget, self.matcher)

    def _riders_patterns(self) -> list[str]:
        """The riders' patterns, looked for again only when the roster changed (the fetch
        loop asks every turn; thousands of riders must not be scanned each time)."""
        version = self.roster.version
        if self._patterns[0] != version:
            self._patterns = (version, self.roster.patterns())
        return self._patterns[1]

    def _list_topics_when_due(self, kafka: AIOKafkaConsumer) -> None:
        """List the cluster's topics every `PATTERN_METADATA_MAX_AGE_MS` while a rider
        has a pattern, in a task: the fetch loop never waits for the broker's answer."""
        now = self.context.clock.monotonic_ms()
        if self._listing or not self._matched_with or now < self._list_at:
            return
        self._listing, self._list_at = True, now + PATTERN_METADATA_MAX_AGE_MS
        self.spawn(self._list_topics(kafka), name=f"{self.path}:topics")

    async def _list_topics(self, kafka: AIOKafkaConsumer) -> None:
        try:
            topics: frozenset[str] | None = frozenset(await kafka.topics())
        except KafkaError as exc:
            log.warning("%s: listing the cluster's topics failed (%r); trying again",
                        self.path, exc)
            topics = None
        self.tell_system(TopicsListed(topics))

    def _settled(self) -> bool:
        """Whether a change of topics may be subscribed now: once the riders stopped
        changing for `SETTLE_MS` (at most `SETTLE_MAX_MS` after the first change), so a
        burst of subscriptions to new topics costs one rebalance, not one each."""
        now, version = self.context.clock.monotonic_ms(), self.roster.version
        first, seen, since = self._settling or (now, version, now)
        if version != seen:
            seen, since = version, now
        self._settling = (first, seen, since)
        if now - since >= SETTLE_MS or now - first >= SETTLE_MAX_MS:
            self._settling = None
            return True
        return False

    async def _poll(self, kafka: AIOKafkaConsumer) -> None:
        if not self._listening:
            # not subscribed: getmany would wait for an assignment, and joins with it
            await self.context.clock.sleep_ms(POLL_MS)
            return
        batches = await kafka.getmany(timeout_ms=self._poll_ms(kafka),
                                      max_records=self.wiring.max_records)
        self._pace(kafka, quiet=not any(batches.values()) and not self._seat_commits)
        now = self.context.clock.monotonic_ms()
        for tp, messages in batches.items():
            fanout = self.fanouts.get(tp)
            if messages and fanout is not None:
                records = records_of(messages, now)
                highwater = kafka.highwater(tp)
                self._feed(tp, fanout.append(records, highwater), highwater)

    def _feed(self, tp: TopicPartition, feed: Feed, highwater: int | None) -> None:
        """Hand records to cursors. With several cursors each gets its own copies: a
        cursor counts attempts on its records."""
        shared = len(self.fanouts[tp].cursors) > 1
        for key, records in feed:
            cursor = self._cursor(key, tp)
            if cursor is not None:
                batch = [r.clone() for r in records] if shared else records
                cursor.tell_system(Batch(batch, highwater))

    def _steer(self, kafka: AIOKafkaConsumer) -> None:
        """Fetch a partition only while some cursor is live on it."""
        paused, assigned = kafka.paused(), kafka.assignment()
        for tp, fanout in self.fanouts.items():
            if fanout.fetching == (tp in paused) and tp in assigned:
                (kafka.resume if fanout.fetching else kafka.pause)(tp)

    def _apply_flow(self) -> None:
        flow, self._seat_flow = self._seat_flow, {}
        for (key, tp), paused in flow.items():
            fanout = self.fanouts.get(tp)
            if fanout is None:
                continue
            if paused:
                fanout.pause(key)
            else:
                self._perform(tp, fanout.resume(key))

    def _perform(self, tp: TopicPartition, decision: Feed | CatchUp) -> None:
        if isinstance(decision, CatchUp):
            self._start_catch_up(tp, decision)
        elif decision:
            self._feed(tp, decision, self._highwater(tp))

    def _highwater(self, tp: TopicPartition) -> int | None:
        """The highest high watermark known: the last fetch's, or one read since."""
        kafka, fanout = self.kafka, self.fanouts.get(tp)
        if kafka is None or tp not in self.owned or fanout is None:
            return None
        fetched: int | None = kafka.highwater(tp)
        if fetched is None or fanout.highwater is None:
            return fanout.highwater if fetched is None else fetched
        return max(fetched, fanout.highwater)

    async def _refresh_highwaters(self, kafka: AIOKafkaConsumer) -> None:
        """Every `HIGHWATER_REFRESH_MS`: read the high watermark of the partitions whose
        fetch is paused (one request per leader for all of them, from the last one
        known: right on the embedded broker too, runtime/kafka/highwater.py), then tell
        each cursor that gets no batch (paused, behind) the log's end it has not heard."""
        now = self.context.clock.monotonic_ms()
        if now < self._highwater_due:
            return
        self._highwater_due = now + HIGHWATER_REFRESH_MS
        paused = kafka.paused()
        starts = {tp: hw for tp in self.fanouts
                  if tp in paused and (hw := self._highwater(tp)) is not None}
        read = await self.read_highwaters(kafka, starts)
        for tp, fanout in list(self.fanouts.items()):  # the await let a revoke through
            self._tell_highwater(tp, fanout, read.get(tp))

    def _tell_highwater(self, tp: TopicPartition, fanout: Fanout, read: int | None) -> None:
        """Tell the cursors of `tp` that get no batch the log's end (`read` just now, or
        the last one known) unless they heard it already."""
        known = [hw for hw in (read, self._highwater(tp)) if hw is not None]
        if not known:
            return
        highwater = max(known)
        for key in fanout.note_highwater(highwater):
            cursor = self._cursor(key, tp)
            if cursor is not None:
                cursor.tell_system(Highwater(highwater))

    # -- commits -----------------------------------------------------------------------
    async def _flush_commits(self) -> None:
        """One commit round: every cursor that moved, one request per group."""
        commits, self._seat_commits = self._seat_commits, {}
        by_group: dict[str, dict[TopicPartition, int]] = defaultdict(dict)
        for (key, tp), offset in commits.items():
            rider = self.roster.riders.get(key)
            if rider is not None and tp in self.owned:
                by_group[rider.settings.group_id][tp] = offset
        if not by_group or self.offsets is None:
            return
        refused = {r.group: r.reason for r in await self.offsets.commit(by_group)}
        for (key, tp), offset in commits.items():
            rider = self.roster.riders.get(key)
            if rider is None or tp not in by_group.get(rider.settings.group_id, {}):
                continue
            if rider.settings.group_id in refused:
                self._seat_commits.setdefault((key, tp), offset)  # sent again next round
            else:
                self._journal_commit(key, tp, offset)
        self._note_refusals(set(by_group), refused)

    def _note_refusals(self, groups: set[str], refused: dict[str, str]) -> None:
        for group in groups:
            reason = refused.get(group)
            if reason is None:
                self.commit_errors.pop(group, None)
            elif self.commit_errors.get(group) != reason:
                self.commit_errors[group] = reason
                log.warning("%s: group %s: %s", self.path, group, reason)

    def _journal_commit(self, key: str, tp: TopicPartition, offset: int) -> None:
        self.context.emit(Event(type="committed", ts_ms=self.context.clock.wall_ms(),
                                subscription=key, topic=tp.topic, partition=tp.partition,
                                offset=offset))

    # -- positions ---------------------------------------------------------------------
    async def _apply_rewinds(self, kafka: AIOKafkaConsumer) -> None:
        """New cursors: read their groups' committed offsets (one request per group),
        place the shared fetch where nothing was fetched yet, and start each cursor."""
        rewinds, self._seat_rewinds = self._seat_rewinds, {}
        current = {seat: e for seat, e in rewinds.items() if self._current(seat, e)}
        if not current:
            return
        positions = await self._committed(current)
        if positions is None:
            self._seat_rewinds.update(current)  # the coordinator did not answer: again
            return
        # the awaits let the member's task handle a `Revoke` (and an `Assign` again): keep
        # the seats still ours in the same incarnation; a new one sends its own rewind
        positions = {seat: p for seat, p in positions.items()
                     if self._current(seat, current[seat])}
        starts = await self._starts(kafka, positions)
        positions = {seat: p for seat, p in positions.items()
                     if self._current(seat, current[seat])}
        for tp in {tp for _key, tp in positions}:
            self._seek(kafka, tp, {k: s for (k, t), s in starts.items() if t == tp})
        for seat, position in positions.items():
            self._start_cursor(seat, current[seat], position, starts[seat])

    async def _committed(self, seats: dict[Seat, int]) -> dict[Seat, int | None] | None:
        by_group: dict[str, list[Seat]] = defaultdict(list)
        for seat in seats:
            by_group[self.roster.riders[seat[0]].settings.group_id].append(seat)
        assert self.offsets is not None
        try:
            found = await asyncio.gather(*(
                self.offsets.fetch(group, sorted({tp for _k, tp in group_seats}))
                for group, group_seats in by_group.items()))
        except KafkaError as exc:
            log.warning("%s: reading committed offsets failed (%r); trying again",
                        self.path, exc)
            return None
        positions: dict[Seat, int | None] = {}
        for group_seats, offsets in zip(by_group.values(), found, strict=True):
            for seat in group_seats:
                positions[seat] = offsets[seat[1]]
        return positions

    async def _starts(self, kafka: AIOKafkaConsumer, committed: dict[Seat, int | None],
                      ) -> dict[Seat, int | None]:
        """Where each cursor starts on the shared fetch: its group's commit, else its
        `auto.offset.reset`: `earliest` the log's start, `latest` the log's end now (None:
        the head of a fetch that runs already)."""
        starts: dict[Seat, int | None] = {}
        latest: list[Seat] = []
        for (key, tp), position in committed.items():
            reset = self.roster.riders[key].settings.auto_offset_reset
            if position is None and reset != "earliest":
                latest.append((key, tp))
            starts[(key, tp)] = position if position is not None else EARLIEST
        unread = sorted({tp for _key, tp in latest if self.fanouts[tp].head is None})
        ends = await self._log_ends(kafka, unread)
        for seat in latest:
            starts[seat] = ends.get(seat[1])
        return starts

    async def _log_ends(self, kafka: AIOKafkaConsumer, tps: list[TopicPartition],
                        ) -> dict[TopicPartition, int]:
        """The log end of partitions nothing was fetched from yet (ListOffsets; on the
        embedded broker it may say less after multi-record batches, runtime/kafka/compat.py
        quirk 2: then older records are delivered too, never skipped). Unknown: the first
        fetch's high watermark decides (`Fanout`'s `latest` state)."""
        if not tps:
            return {}
        try:
            return {tp: int(offset) for tp, offset in (await kafka.end_offsets(tps)).items()}
        except KafkaError as exc:
            log.warning("%s: reading log ends failed (%r); starting at the first fetch's "
                        "high watermark", self.path, exc)
            return {}

    def _seek(self, kafka: AIOKafkaConsumer, tp: TopicPartition,
              starts: dict[str, int | None]) -> None:
        fanout = self.fanouts[tp]
        target = fanout.seek_target(starts)
        if target is not None and tp in kafka.assignment():  # else being revoked
            kafka.seek(tp, target)
            fanout.seeked(target)

    def _start_cursor(self, seat: Seat, epoch: int, committed: int | None,
                      start: int | None) -> None:
        key, tp = seat
        cursor = self._cursor(key, tp)
        if cursor is None:
            return
        told = committed if committed is not None or start == EARLIEST else start
        cursor.tell_system(Assigned(told, epoch))
        self._perform(tp, self.fanouts[tp].position(key, start))

    def _current(self, seat: Seat, epoch: int) -> bool:
        key, tp = seat
        return (tp in self.owned and tp in self.fanouts and key in self.roster.riders
                and self._epochs.get(seat) == epoch)

    # -- catch-up reads ----------------------------------------------------------------
    def _start_catch_up(self, tp: TopicPartition, decision: CatchUp) -> None:
        seat = (decision.key, tp)
        cursor = self._cursor(decision.key, tp)
        if cursor is None or seat in self._reads:
            return
        read = self._reads[seat] = CatchUpRead(tp, decision.key, decision.position, cursor)
        self.spawn(self._run_catch_up(read), name=f"{self.path}:catch-up:{decision.key}")

    async def _run_catch_up(self, read: CatchUpRead) -> None:
        clock = self.context.clock
        try:
            async with self._readers:
                if read.cancelled:
                    return
                await catch_up(read, self.wiring.bootstrap, self.wiring.broker_settings,
                               self._handover, clock.monotonic_ms)
        except ActorDeadError:
            pass  # the cursor went away: its successor starts from the commit
        finally:
            if self._reads.get((read.key, read.tp)) is read:
                del self._reads[(read.key, read.tp)]

    async def _handover(self, read: CatchUpRead, next_offset: int) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.tell_system(CaughtUp(read, next_offset, answer))
        return await answer

    def _apply_caught_up(self) -> None:
        caught, self._caught = self._caught, []
        for message in caught:
            read = message.read
            fanout = self.fanouts.get(read.tp)
            feed = fanout.caught_up(read.key, message.next_offset) if fanout else []
            if feed:
                self._feed(read.tp, feed, self._highwater(read.tp))
            if not message.answer.done():
                message.answer.set_result(feed is not None)

    # -- cursors -----------------------------------------------------------------------
    def _group_reads(self, fanout: Fanout, group: str) -> bool:
        """Whether a subscription of `group` has a cursor on that partition already."""
        riders = self.roster.riders
        return any(k in riders and riders[k].settings.group_id == group for k in fanout.cursors)

    def _claimants(self, topic: str) -> list[str]:
        """The subscriptions that get a cursor on `topic`'s partitions: every one that
        reads it, but one per group (two cursors of one group would commit over each
        other; only patterns can overlap within a group, the first to join wins)."""
        riders, groups, keys = self.roster.riders, set(), []
        for key in self.roster.claimants(topic):
            group = riders[key].settings.group_id
            if group not in groups:
                groups.add(group)
                keys.append(key)
        return keys

    def _cursor(self, key: str, tp: TopicPartition) -> Actor | None:
        rider = self.roster.riders.get(key)
        if rider is None:
            return None
        with contextlib.suppress(ActorDeadError):
            sup = rider.partitions.actor_as(Supervisor)
            if sup.alive and sup.has_child(child_name(tp)):
                return sup.child(child_name(tp))
        return None

    async def _add_cursor(self, rider: Rider, tp: TopicPartition) -> None:
        """Start `rider`'s cursor on `tp` unless it has one. The fetch loop (a new rider)
        and the member's task (a new partition, `Assign`) may both ask: the fanout's
        entry, taken before the first await, says it is being started."""
        key, fanout = rider.settings.key, self.fanouts[tp]
        if key in fanout.cursors:
            return
        try:
            sup = rider.partitions.actor_as(Supervisor)
        except ActorDeadError:
            return
        if not sup.alive or sup.has_child(child_name(tp)):
            return
        fanout.add(key)
        try:
            await sup.start_child(ChildSpec(child_name(tp), self._cursor_factory(rider, tp),
                                            restart="transient",
                                            shutdown_ms=self.wiring.drain_ms + 2000))
        except (ActorDeadError, ActorStartError):
            fanout.remove(key)  # its subscription is stopping: it leaves anyway

    def _cursor_factory(self, rider: Rider, tp: TopicPartition) -> Callable[[], Actor]:
        def build() -> Actor:
            seat = (rider.settings.key, tp)
            epoch = self._epochs.get(seat, 0) + 1
            self._epochs[seat] = epoch
            fanout = self.fanouts.get(tp)
            if fanout is not None:
                fanout.add(rider.settings.key)  # a restart waits for its position again
            self._cancel_read(seat)
            deps = rider.deps
            peers = PartitionPeers(self, deps.egress, deps.deadletter, deps.retrytopic)
            return PartitionActor(child_name(tp), deps.cursors(tp.topic), tp.topic,
                                  tp.partition, epoch, peers, deps.metrics, deps.stall_after_ms)

        return build

    def _cancel_read(self, seat: Seat) -> None:
        read = self._reads.pop(seat, None)
        if read is not None:
            read.cancelled = True
            read.resumed.set()

    async def _drain_cursors(self, seats: list[Seat]) -> dict[Seat, int | None]:
        clock = self.context.clock
        deadline = clock.monotonic_ms() + self.wiring.drain_ms

        async def drain(seat: Seat) -> int | None:
            cursor = self._cursor(*seat)
            if cursor is None:
                return None
            done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
            try:
                await cursor.tell(Drain(deadline, done))
                return await within(clock, done, self.wiring.drain_ms + DRAIN_GRACE_MS)
            except (ActorDeadError, TimeoutError):
                return None  # nothing trustworthy to commit: the last commit stands

        found = await asyncio.gather(*(drain(seat) for seat in seats))
        return dict(zip(seats, found, strict=True))

    async def _retire(self, seats: list[Seat]) -> None:
        """Drain the cursors, commit their final positions, stop them."""
        if not seats:
            return
        final = await self._drain_cursors(seats)
        for seat, position in final.items():
            self._seat_commits.pop(seat, None)
            if position is not None:
                self._seat_commits[seat] = position
        await self._flush_commits()
        for key, tp in seats:
            self._cancel_read((key, tp))
            rider = self.roster.riders.get(key)
            fanout = self.fanouts.get(tp)
            if fanout is not None:
                fanout.remove(key)
            if rider is not None:
                with contextlib.suppress(ActorDeadError):
                    sup = rider.partitions.actor_as(Supervisor)
                    if sup.alive and sup.has_child(child_name(tp)):
                        await sup.stop_child(child_name(tp))

    # -- rebalance ---------------------------------------------------------------------
    async def assign(self, tps: set[TopicPartition]) -> None:
        """Cursors on the new partitions for every rider. This runs on the member's task,
        as joins do (`Join` is a message), so the riders do not change meanwhile but for
        leaves (the fetch loop's)."""
        # nothing owned before (aiokafka revokes everything before it assigns): every
        # rider has all its cursors at the end; else those not routed yet still lack the
        # partitions kept, and the next `_reroute` adds them
        fresh = not self.owned
        self.rebalances += 1
        self.m_rebalances.inc()
        kafka = self.kafka
        if kafka is not None:
            self.m_generation.set(self.generation())
            self.m_assigned.set(len(tps))
        new = sorted(tps - self.owned)
        if new:
            log.info("%s: partitions assigned: %s", self.path,
                     ", ".join(child_name(tp) for tp in new))
        capacity = max(RING_MIN_RECORDS, self.wiring.max_records)
        for tp in new:
            self.owned.add(tp)
            self.fanouts[tp] = Fanout(capacity)
            if kafka is not None and tp in kafka.assignment():
                # until some cursor knows where it starts; not assigned any more: a new
                # subscription of the client came meanwhile, a rebalance follows
                kafka.pause(tp)
            for key in self._claimants(tp.topic):
                rider = self.roster.riders.get(key)  # a leave may have run meanwhile
                if rider is not None:
                    await self._add_cursor(rider, tp)
            self._journal("partition_assigned", tp, actor=self.path)
        if fresh:
            self._routed.update(self.roster.riders)
        if new:
            self.long_lived()

    async def _revoke_with(self, kafka: AIOKafkaConsumer, tps: set[TopicPartition]) -> None:
        ordered = sorted(tps & self.owned)
        if not ordered:
            return
        clock = self.context.clock
        started = clock.monotonic_ms()
        await self._retire([(key, tp) for tp in ordered for key in self.fanouts[tp].cursors])
        log.info("%s: partitions revoked (drained and committed in %d ms): %s", self.path,
                 clock.monotonic_ms() - started, ", ".join(child_name(tp) for tp in ordered))
        for tp in ordered:
            self.owned.discard(tp)
            self.fanouts.pop(tp, None)
            self._journal("partition_revoked", tp, actor=self.path)

    # -- joins and leaves --------------------------------------------------------------
    async def _leave(self, leave: Leave) -> None:
        """Drain and commit what the leaving seat holds; then it is gone."""
        key = leave.rider.settings.key
        try:
            if self._seated(leave.rider):
                await self._retire([(key, tp) for tp, fanout in self.fanouts.items()
                                    if key in fanout.cursors])
        finally:
            if self._seated(leave.rider):  # again: a new seat may have joined meanwhile
                self.roster.leave(key)
                self._routed.discard(key)
                self._retune = True
                for tp, fanout in self.fanouts.items():  # a cursor an assignment started
                    if key in fanout.cursors:  # while this drained: its tree stops it
                        self._cancel_read((key, tp))
                        fanout.remove(key)
            if not leave.done.done():
                leave.done.set_result(None)

    def _seated(self, rider: Rider) -> bool:
        return self.roster.riders.get(rider.settings.key) is rider

    async def _reroute(self) -> None:
        """The riders changed, the union did not: riders that joined since get cursors
        on the partitions already owned (only theirs are looked at: a burst of thousands
        of joins must not rescan every rider); no rebalance."""
        self._noted()
        riders, added = self.roster.riders, 0
        joined = [key for key in riders if key not in self._routed]
        self._routed.update(joined)
        # a snapshot: a rebalance (the member's task: `Assign`, `Revoke`) may add or drop
        # partitions while a cursor starts; one dropped meanwhile is passed over
        owned = list(self.fanouts.items())
        for key in joined:
            rider = riders[key]
            for tp, fanout in owned:
                if self.fanouts.get(tp) is fanout and key not in fanout.cursors \
                        and consumes(rider.settings, tp.topic) \
                        and not self._group_reads(fanout, rider.settings.group_id):
                    await self._add_cursor(rider, tp)
                    added += 1
        if added:
            self.long_lived()
        log.info("%s: %d subscriptions (roster version %d): %d cursors added without a "
                 "rebalance", self.path, len(self.roster), self.roster.version, added)

    async def _resubscribe(self, kafka: AIOKafkaConsumer) -> None:
        """Subscribe to the roster's union; named topics not on the broker yet are
        watched instead, and joined when they appear (runtime/kafka/topic_creation.py)."""
        roster = self.roster
        self._noted()
        self._target = self._wanted()
        listened, self._listening, self._missing = self._listening, False, set()
        if not roster.riders:
            if listened:  # leave first: unsubscribing forgets the member id (quirks 6, 9)
                await compat.leave_group(kafka)
            _unsubscribe(kafka, listened)
            return
        present, self._missing = await topic_creation.split(kafka, list(self._target))
        if present:
            kafka.subscribe(topics=present, listener=self.listener)
            self._listening = True
        else:
            _unsubscribe(kafka, listened)
        topic_creation.watch(kafka, self._missing)
        if self._missing:
            log.info("%s: waiting for topics that do not exist yet: %s", self.path,
                        ", ".join(sorted(self._missing)))
        log.info("%s: subscribed for %d subscriptions (roster version %d)", self.path,
                 len(roster), roster.version)

    def _noted(self) -> None:
        """The roster's version is taken into account: its size, fetch size and fetch
        wait apply (over every rider only when some left; joins only raise the bounds:
        a burst of thousands of joins must not rescan them all each time)."""
        roster = self.roster
        self._subscribed, self._subscribed_matched = roster.version, self._matched
        self.m_riders.set(len(roster))
        left, self._retune = self._retune, False
        riders = roster.riders.values() if left else [
            roster.riders[k] for k in roster.riders if k not in self._tuned]
        if left:
            self._fetch_records, self._rider_wait_ms = 0, None
            self._tuned.clear()
        for rider in riders:
            settings = rider.settings
            self._tuned.add(settings.key)
            self._fetch_records = max(self._fetch_records, fetch_size(settings.largest_buffer))
            asked = settings.fetch_wait_ms
            if asked is not None:
                self._rider_wait_ms = (asked if self._rider_wait_ms is None
                                       else min(asked, self._rider_wait_ms))
        if self._fetch_records:
            self.wiring.max_records = self._fetch_records
        self._apply_fetch_wait()

    async def on_start(self) -> None:
        await super().on_start()
        self._client_wait_ms = self._configured_wait_ms
        self._apply_fetch_wait()

    def _apply_fetch_wait(self) -> None:
        """The shortest `fetch.max.wait.ms` a subscription asks for (a fetch serves them
        all; on the embedded broker every fetch waits that long, compat.py quirk 4), else
        the client's."""
        client = self._client_wait_ms
        if client is not None:
            rider = self._rider_wait_ms
            self._configured_wait_ms = client if rider is None else rider

    # -- status ------------------------------------------------------------------------
    def subscription_of(self, tp: TopicPartition) -> str | None:
        return None  # a partition serves every subscription of its topic

    def generation(self) -> int:
        return compat.generation(self.kafka)

    def member_id(self) -> str:
        return compat.member_id(self.kafka)

    def owned_by(self, key: str) -> set[TopicPartition]:
        """The partitions on which `key` has a cursor."""
        return {tp for tp, fanout in self.fanouts.items() if key in fanout.cursors}

    def _status_of(self, key: str) -> MemberStatus:
        """The answer to a rider's `StatusQuery`: group, member id, generation, the
        subscription's cursors and the commit error of its group."""
        mine = sorted(self.owned_by(key))
        rider = self.roster.riders.get(key)
        return MemberStatus(
            group=self.roster.group_id, member=self.name, member_id=self.member_id(),
            generation=self.generation(), subscriptions=len(self.roster),
            rebalances=self.rebalances, assigned=[child_name(tp) for tp in mine],
            cursors={child_name(tp): self.fanouts[tp].cursors[key].state for tp in mine},
            commit_error=(self.commit_errors.get(rider.settings.group_id)
                          if rider is not None else None),
            waiting_for_topics=sorted(self._missing),
            pattern_topics=self._pattern_topics(rider), group_partitions=len(self.owned))

    def _pattern_topics(self, rider: Rider | None) -> list[str]:
        """The topics `rider`'s patterns were found to match."""
        patterns = rider.settings.patterns if rider else ()
        return sorted({topic for p in patterns for topic in self.matcher.matching(p)})

    def __repr__(self) -> str:
        return (f"<InstanceMemberActor {self.path} riders={len(self.roster)} "
                f"owned={len(self.owned)} reads={len(self._reads)} "
                f"mailbox={len(self._mailbox)}>")


class RiderActor(Actor):
    """A subscription's seat on the instance member: the `consumer` of its tree."""

    def __init__(self, name: str, rider: Rider, member: ChildRef, leave_ms: int) -> None:
        super().__init__(name)
        self.rider = rider
        self.member = member
        self.leave_ms = leave_ms

    async def on_start(self) -> None:
        # told, not asked: the member may be busy with a rebalance (its Assign starts
        # thousands of cursors); the join is in its mailbox before any later Leave
        await self.member.tell(Join(self.rider))

    async def on_stop(self) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self.member.tell(Leave(self.rider, done))
            await within(self.context.clock, done, self.leave_ms + LEAVE_GRACE_MS)
        except (ActorDeadError, TimeoutError):
            # no member runs to drain us: its last commits stand; a member rebuilt
            # meanwhile never had us (the control plane's record drops us first)
            pass

    async def handle(self, message: object) -> MemberStatus | None:
        if isinstance(message, StatusQuery):
            return await self._member_status()
        raise UnexpectedMessage(self.path, message)

    async def _member_status(self) -> MemberStatus | None:
        """The member's status for this subscription, asked of the member (None when it
        does not answer in time: busy with a rebalance, say). The member's handler never
        waits for a rider, so this wait cannot close a circle; it holds only this rider,
        whose mailbox carries nothing else but its stop."""
        try:
            reply = self.member.ask_nowait(StatusQuery(self.rider.settings.key))
        except ActorDeadError:
            return None
        await settle_within(self.context.clock, [reply], STATUS_TIMEOUT_MS)
        if reply.cancelled() or reply.exception() is not None:
            return None
        status = reply.result()
        return status if isinstance(status, MemberStatus) else None

    def __repr__(self) -> str:
        return f"<RiderActor {self.path} {self.rider.settings.key} on {self.member.name}>"


def _seat(message: CommitRequest | FlowControl | Rewind) -> Seat:
    """The cursor a message of a partition actor comes from."""
    return message.subscription, TopicPartition(message.topic, message.partition)


def _unsubscribe(kafka: AIOKafkaConsumer, listened: bool) -> None:
    """Unsubscribe, unless never subscribed: aiokafka's unsubscribe asks the broker for the
    metadata of every topic (no topic tracked means all), which a new member with no rider
    yet did for nothing."""
    if listened:
        kafka.unsubscribe()
