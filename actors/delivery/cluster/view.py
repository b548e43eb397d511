"""The cluster-wide view (`[cluster] status_topic`): every instance publishes what it does
to a compacted topic every `status_interval_ms`, and follows the topic to know what the
others do, so any instance's admin API and status page show which instance owns which
partition and the cluster's total lag.

Record: key the instance id (`<hostname>:<admin port>`), value an `InstanceStatus` (JSON):
its admin address, state, publish time, and per subscription the partitions it delivers
with their lag. A clean stop publishes the state `stopped`. An instance whose last record
is older than `gone_after_intervals` of its own interval is shown `gone` (killed, hung or
cut off); its partitions stay in the view, unowned with their last lag, until a running
instance reports them (issue 25: a failover must not hide lag). So do the partitions a
running instance gave up in a rebalance: every partition last reported stays in the view,
unowned with its last lag and `last_owner`, until an instance reports it again (#34: for
about 5 s of a failover the survivors' given-up partitions left the view and the total
lag fell to 0 while 175,000 deliveries were owed), for as long as some instance lists the
subscription and at most `FORGET_AFTER_INTERVALS`. Stopped and gone instances are
forgotten after `FORGET_AFTER_INTERVALS`, when the first instance to notice writes a
tombstone for them (compaction then drops them).

`ClusterView` is pure (takes `now`); `ClusterStatusActor` performs it: one
`SubscriptionLog` (actors/delivery/cluster/log.py) for the topic, whose follower is a task
the actor owns, and a timer message that publishes every interval (the first once the
admin server listens: its `listening` event, no polling for the port).
Ages use the older of the publisher's stamp and the local receive time: a record read at
start-up is judged by when it was written, a publisher whose clock runs ahead by when it
arrived. Clocks are assumed synchronised (NTP) to well under one interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Final, Literal, Protocol

import msgspec
from aiohttp import web

from actors.delivery.cluster.log import RETRY, SubscriptionLog
from actors.delivery.control.status import SubscriptionAnswer
from runtime.errors import UsageError
from runtime.host.admin import ok
from runtime.host.jsonbody import JSONObject
from runtime.host.openapi import OpenApi, json_answer, success
from runtime.kernel.actor import Actor
from runtime.kernel.backoff import RestartBackoff
from runtime.kernel.clock import within

if TYPE_CHECKING:
    from runtime.host.app import Runtime

log = logging.getLogger(__name__)
FORGET_AFTER_INTERVALS = 100
CLUSTER_SCHEMA: Final[JSONObject] = {
    "type": "object", "required": ["instances", "subscriptions", "total_lag"],
    "properties": {"instances": {"type": "array"}, "subscriptions": {"type": "object"},
                   "total_lag": {"type": "integer"}}}
InstanceState = Literal["running", "stopped"]
Shown = Literal["running", "stopped", "gone"]


class OwnedPartition(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    lag: int | None = None
    committed: int | None = None
    highwater: int | None = None


class Share(msgspec.Struct, frozen=True, kw_only=True):
    """One subscription on one instance: its state there and the partitions it owns."""

    state: str
    partitions: list[OwnedPartition] = []


class InstanceStatus(msgspec.Struct, frozen=True, kw_only=True):
    instance: str
    address: Annotated[str, msgspec.Meta(max_length=2048, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://")]
    """An instance's admin URL; anything else (the topic is writable by any client of the
    broker: a `javascript:` address) makes the record ignored (#25)."""
    state: InstanceState
    published_ms: int
    interval_ms: int
    subscriptions: dict[str, Share] = {}
    problems: list[str] = []
    """Why this instance may differ from the others (a record of the subscriptions topic
    it could not apply: #34)."""


class _Seen(msgspec.Struct, kw_only=True):
    status: InstanceStatus
    received_ms: int


@dataclass(frozen=True, slots=True)
class _Last:
    """A partition as its latest report showed it: by whom, and when that arrived."""

    partition: OwnedPartition
    instance: str
    received_ms: int
    interval_ms: int


class ClusterView:
    """The latest status of every instance, and what follows from it. Pure."""

    def __init__(self, gone_after_intervals: int) -> None:
        self.gone_after_intervals = gone_after_intervals
        self._seen: dict[str, _Seen] = {}
        # subscription key -> (topic, partition) -> its latest report by a running instance
        self._last: dict[str, dict[tuple[str, int], _Last]] = {}

    def apply(self, key: str, value: bytes | None, now_ms: int) -> None:
        if value is None:
            self._seen.pop(key, None)
            self._forget_unlisted()
            return
        status = msgspec.json.decode(value, type=InstanceStatus)
        self._seen[key] = _Seen(status=status, received_ms=now_ms)
        if status.state == "running":
            for sub, share in status.subscriptions.items():
                known = self._last.setdefault(sub, {})
                for p in share.partitions:
                    known[(p.topic, p.partition)] = _Last(p, status.instance, now_ms,
                                                          status.interval_ms)
        self._forget_unlisted()

    def _forget_unlisted(self) -> None:
        """The partitions of subscriptions no instance lists any more (unsubscribed)."""
        listed = {sub for seen in self._seen.values() for sub in seen.status.subscriptions}
        for sub in [s for s in self._last if s not in listed]:
            del self._last[sub]

    def _age(self, seen: _Seen, now_ms: int) -> int:
        return now_ms - min(seen.received_ms, seen.status.published_ms)

    def shown(self, instance: str, now_ms: int) -> Shown:
        seen = self._seen[instance]
        if seen.status.state == "stopped":
            return "stopped"
        limit = self.gone_after_intervals * seen.status.interval_ms
        return "gone" if self._age(seen, now_ms) > limit else "running"

    def expired(self, now_ms: int) -> list[str]:
        """Instances to forget: stopped or silent for `FORGET_AFTER_INTERVALS`."""
        return [i for i, s in self._seen.items()
                if self._age(s, now_ms) > FORGET_AFTER_INTERVALS * s.status.interval_ms]

    def _live(self, now_ms: int) -> list[InstanceStatus]:
        """Running instances, the freshest first (it wins a partition two claim)."""
        return self._showing("running", now_ms)

    def _showing(self, shown: Shown, now_ms: int) -> list[InstanceStatus]:
        """The instances shown `shown`, the freshest record first."""
        found = [s.status for i, s in self._seen.items() if self.shown(i, now_ms) == shown]
        return sorted(found, key=lambda s: -s.published_ms)

    def owners(self, key: str, now_ms: int) -> list[dict[str, object]]:
        """Each partition of subscription `key` a live instance owns, with its owner; then
        those a gone instance owned that no live one reports yet, unowned (`instance`
        None, `last_owner` the gone one) with their last known lag (issue 25: a failover
        must not make lag disappear until the new owner reports)."""
        rows: dict[tuple[str, int], dict[str, object]] = {}
        live, gone = self._live(now_ms), self._showing("gone", now_ms)
        for status in live:
            for p in _partitions(status, key):
                rows.setdefault((p.topic, p.partition), _row(p, status.instance,
                                                             status.address))
        for status in gone:
            for p in _partitions(status, key):
                rows.setdefault((p.topic, p.partition), _row(p, None, None, status.instance))
        if any(key in status.subscriptions for status in live + gone):
            for where, last in self._last.get(key, {}).items():  # given up, not taken yet
                if now_ms - last.received_ms <= FORGET_AFTER_INTERVALS * last.interval_ms:
                    rows.setdefault(where, _row(last.partition, None, None, last.instance))
        return [rows[k] for k in sorted(rows)]

    def subscription(self, key: str, now_ms: int) -> dict[str, object]:
        """What `GET /broker/subscription/{id}/{groupId}` shows under `cluster`."""
        owners = self.owners(key, now_ms)
        return {"total_lag": sum(int(str(o["lag"] or 0)) for o in owners),
                "partitions": owners, "instances": self.instances(now_ms, key)}

    def instances(self, now_ms: int, key: str | None = None) -> list[dict[str, object]]:
        rows = []
        for instance in sorted(self._seen):
            status = self._seen[instance].status
            shares = ([status.subscriptions[key]] if key in status.subscriptions else []
                      ) if key is not None else list(status.subscriptions.values())
            rows.append({"instance": instance, "address": status.address,
                         "state": self.shown(instance, now_ms),
                         "last_seen_ms_ago": self._age(self._seen[instance], now_ms),
                         "partitions": sum(len(s.partitions) for s in shares),
                         "lag": sum(p.lag or 0 for s in shares for p in s.partitions),
                         "problems": status.problems})
        return rows

    def as_dict(self, now_ms: int) -> dict[str, object]:
        """`GET /cluster`: instances, and per subscription its owners and total lag."""
        counted = self._live(now_ms) + self._showing("gone", now_ms)
        keys = sorted({k for s in counted for k in s.subscriptions})
        subscriptions = {k: self.subscription(k, now_ms) for k in keys}
        return {"instances": self.instances(now_ms), "subscriptions": subscriptions,
                "total_lag": sum(int(str(s["total_lag"])) for s in subscriptions.values())}

    def __repr__(self) -> str:
        return f"<ClusterView instances={sorted(self._seen)}>"


def _partitions(status: InstanceStatus, key: str) -> list[OwnedPartition]:
    share = status.subscriptions.get(key)
    return share.partitions if share is not None else []


def _row(p: OwnedPartition, instance: str | None, address: str | None,
         last_owner: str | None = None) -> dict[str, object]:
    """A partition in the view: its owner (None: unowned, `last_owner` is gone)."""
    row: dict[str, object] = {
        "topic": p.topic, "partition": p.partition, "instance": instance,
        "address": address, "lag": p.lag, "committed": p.committed,
        "highwater": p.highwater}
    if last_owner is not None:
        row["last_owner"] = last_owner
    return row


Snapshot = Callable[[], Awaitable[dict[str, Share]]]
"""This instance's share of every subscription, asked of its actors (a publish task
awaits it; the actor's handler never does)."""


@dataclass(frozen=True, slots=True)
class _Heard:
    """A record of the status topic, handed over by the follower."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class _Listening:
    """The admin server listens: this instance has its name and starts publishing."""


@dataclass(frozen=True, slots=True)
class _Tick:
    """Timer: publish again."""


@dataclass(frozen=True, slots=True)
class _Reach:
    """Timer: try the status topic again (the broker was away)."""


@dataclass(frozen=True, slots=True)
class ViewAsked:
    """`GET /cluster` (key None) or one subscription's part of the view."""

    key: str | None = None


class ClusterStatusActor(Actor):
    """Publishes this instance's status and follows everyone's (see the module doc).

    The topic's follower and the wait for the admin server's port are tasks this actor
    owns; each publish runs in an owned task too, so that `GET /cluster` never waits for
    a write. The view is read by asking (`ViewAsked`)."""

    def __init__(self, name: str, runtime: Runtime, snapshot: Snapshot,
                 problems: Callable[[], list[str]] = list) -> None:
        super().__init__(name)
        cluster = runtime.config.cluster
        self.runtime, self.snapshot, self.problems = runtime, snapshot, problems
        self.interval_ms = cluster.status_interval_ms
        self.view = ClusterView(cluster.gone_after_intervals)
        broker = cluster.broker or runtime.config.brokers[0].name
        self._log = SubscriptionLog(
            runtime.bootstrap(broker), cluster.status_topic,
            replication_factor=cluster.replication_factor,
            client_settings=runtime.consumer_settings(broker))
        self.instance = ""  # known once the admin server has its port
        self._publishing: asyncio.Task[None] | None = None
        self._reaching = RestartBackoff(RETRY)

    @property
    def problem(self) -> str | None:
        """Why the status topic is not followed yet (None: it is)."""
        return self._log.problem

    async def on_start(self) -> None:
        """Read the topic and follow it; with the broker away, try again on timer
        messages (`_Reach`) meanwhile (`problem` says why): the instance starts anyway."""
        self.spawn(self._await_listening(), name=f"{self.path}:listening")
        await self._reach()

    async def _reach(self) -> None:
        try:
            await self._log.start(self._read)
        except Exception as exc:  # the broker is away (or refuses us): try again later
            delay = self._reaching.failed()
            self._log.failed(exc, self._reaching.failures)
            self.schedule(self.runtime.clock.monotonic_ms() + delay, _Reach())
            return
        self._reaching.succeeded()
        self.spawn(self._log.follow(self._hand_over), name=f"{self.path}:follower")

    async def _read(self, key: str, value: bytes | None) -> None:
        """During `on_start`'s catch-up, on this actor's task."""
        self._apply(key, value)

    async def _hand_over(self, key: str, value: bytes | None) -> None:
        await self.tell(_Heard(key, value))

    async def _await_listening(self) -> None:
        await self.runtime.admin.listening.wait()  # an ephemeral port is bound by then
        await self.tell(_Listening())

    async def handle(self, message: object) -> object:
        if isinstance(message, _Heard):
            self._apply(message.key, message.value)
        elif isinstance(message, _Listening):
            self.instance = f"{socket.gethostname()}:{self.runtime.admin.port}"
            self._tick()
        elif isinstance(message, _Tick):
            self._tick()
        elif isinstance(message, _Reach):
            await self._reach()
        elif isinstance(message, ViewAsked):
            now = self.runtime.clock.wall_ms()
            return (self.view.as_dict(now) if message.key is None
                    else self.view.subscription(message.key, now))
        else:
            raise UsageError(f"{self.path}: unknown message {message!r}")
        return None

    def _apply(self, key: str, value: bytes | None) -> None:
        try:
            self.view.apply(key, value, self.runtime.clock.wall_ms())
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("status topic: ignoring the record of %r: %s", key, exc)

    def _tick(self) -> None:
        """Publish (unless the last publish still runs, or the topic is not reached yet),
        and again after the interval."""
        clock = self.runtime.clock
        if self._log.ready and (self._publishing is None or self._publishing.done()):
            expired = [i for i in self.view.expired(clock.wall_ms()) if i != self.instance]
            self._publishing = self.spawn(self._publish(expired), name=f"{self.path}:publish")
        self.schedule(clock.monotonic_ms() + self.interval_ms, _Tick())

    async def _status(self, state: InstanceState) -> InstanceStatus:
        subscriptions = await self.snapshot()
        return InstanceStatus(
            instance=self.instance, address=self.runtime.admin.url, state=state,
            published_ms=self.runtime.clock.wall_ms(), interval_ms=self.interval_ms,
            subscriptions=subscriptions, problems=self.problems())

    async def _publish(self, expired: list[str]) -> None:
        try:
            status = await self._status("running")
            await self._log.write(self.instance, msgspec.json.encode(status))
            for instance in expired:
                log.info("status topic: forgetting instance %s", instance)
                await self._log.write(instance, None)
        except Exception as exc:  # the broker may be away: try again next interval
            log.warning("status topic: cannot publish: %s", exc)

    async def on_stop(self) -> None:
        """Publish `stopped` (when we ever published): the others stop counting on us."""
        if self.instance:
            stopped = msgspec.json.encode(await self._status("stopped"))
            with contextlib.suppress(Exception):
                await within(self.runtime.clock, self._log.put(self.instance, stopped), 3000)
        await self._log.stop()

    def __repr__(self) -> str:
        return (f"<ClusterStatusActor {self.instance or '?'} {self.view!r} "
                f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>")


def describe_cluster_route(app: web.Application, openapi: OpenApi,
                           view: Callable[[], Awaitable[dict[str, object]]]) -> None:
    """`GET /cluster`: the whole view, from whoever holds it."""

    async def get(request: web.Request) -> web.Response:
        return ok(await view())

    app.router.add_get("/cluster", get)
    openapi.describe("GET", "/cluster", {
        "summary": "The cluster: every instance, the owner and lag of each partition",
        "responses": {"200": json_answer("The cluster view", success(CLUSTER_SCHEMA))}})


class _Delivery(Protocol):
    async def answers(self) -> dict[str, SubscriptionAnswer]: ...


async def snapshot_of(service: _Delivery) -> dict[str, Share]:
    """This instance's share of every subscription, from the delivery service's status."""
    return {key: Share(state=answer.status.state, partitions=[
        OwnedPartition(topic=p.topic, partition=p.partition, lag=p.lag,
                       committed=p.committed, highwater=p.highwater)
        for p in answer.status.partitions])
        for key, answer in (await service.answers()).items()}
