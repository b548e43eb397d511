"""A runtime under load while a seeded schedule (tests/chaos/schedule.py) kills its actors,
pauses, resumes and updates its subscriptions, and, given a `CutProxy` in front of the
broker, also cuts every broker connection for a while and unsubscribes subscriptions (and
subscribes them again later); then what a counting receiver got, the dead letter topics
and the commits must agree.

The verdict: every record a subscription should see (its topic's, less what its filter
leaves out) was answered 2xx or is in its dead letter topic (0 lost); nothing else came
(0 unexpected); a record answered 2xx more than once came again only after a fault that
found it uncommitted (the commits are read, from the `committed` events, as each fault
fires); and every subscription's group committed every partition to its end.

Real parts only: the session's broker, a runtime with the delivery service, one aiohttp
receiver per subscription (its own origin: a failing endpoint must not open the others'
breakers). Used by tests/chaos/test_seeded_chaos.py (~60 s in `make test`) and
bench/chaos.py (`--minutes N`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from actors.delivery.path.member.actor import InstanceMemberActor
from runtime.host.app import Runtime
from runtime.host.journal import Event
from runtime.kafka import create_topics, make_producer
from runtime.kernel.actor import Actor
from runtime.kernel.errors import ActorDeadError
from runtime.kernel.supervisor import Supervisor
from tests.chaos.schedule import Fault, choose_by_kind, plan
from tests.integration.cut_proxy import CutProxy
from tests.integration.delivery_harness import Admin, make_runtime, subscription
from tests.integration.test_poison_records import dlt_offsets, read_to_end
from tests.waits import until

Key = tuple[str, int, int]  # topic, partition, offset
FILTER = {"headers": {"kind": ["a"]}}  # the filtered subscription sees kind "a" only
KINDS = ("a", "a", "b")
ADMIN_RETRY_S = 30.0  # an admin call may meet a killed control actor: it is retried


@dataclass(frozen=True, slots=True)
class Shape:
    seconds: float = 40.0
    """How long records are produced and faults fire."""
    topics: int = 2
    partitions: int = 2
    records_per_s: int = 20
    """Per topic."""
    drain_s: float = 120.0
    """How long the end may take to arrive once the load stops (a hang bound)."""


# -- what each endpoint does -------------------------------------------------------------

def _tenth(seed: int, key: Key, salt: str) -> bool:
    """One record in ten, the same ones for the same seed."""
    return zlib.crc32(f"{seed}:{salt}:{key}".encode()) % 10 == 0


Behaviour = Callable[[Key], Awaitable[int]]


def behaviours(seed: int) -> dict[str, Callable[[], Behaviour]]:
    """Endpoint kinds by name; each call makes a fresh one (state of its own)."""

    def ok() -> Behaviour:
        async def answer(key: Key) -> int:
            return 200
        return answer

    def flaky() -> Behaviour:  # 10% of first attempts fail; their retries get through
        failed: set[Key] = set()

        async def answer(key: Key) -> int:
            if _tenth(seed, key, "flaky") and key not in failed:
                failed.add(key)
                return 500
            return 200
        return answer

    def picky() -> Behaviour:  # 10% always fail: dead letters
        async def answer(key: Key) -> int:
            return 500 if _tenth(seed, key, "picky") else 200
        return answer

    def slow() -> Behaviour:
        async def answer(key: Key) -> int:
            await asyncio.sleep(0.005 + (key[2] % 4) * 0.005)  # a slow endpoint, on purpose
            return 200
        return answer

    return {"ok": ok, "flaky": flaky, "picky": picky, "slow": slow, "filtered": ok}


ENDPOINT_KINDS = ("ok", "flaky", "picky", "slow", "filtered")


@dataclass
class Counting:
    """An HTTP endpoint that counts its 2xx answers per record, with their times."""

    behaviour: Behaviour
    ok: dict[Key, list[float]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> Counting:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        key = (request.headers["QOH-Topic"], int(request.headers["QOH-Partition"]),
               int(request.headers["QOH-Message-Number"]))
        status = await self.behaviour(key)
        if 200 <= status < 300:
            self.ok.setdefault(key, []).append(time.monotonic())
            self.changed.set()
        return web.Response(status=status)


@dataclass
class Sub:
    id: str
    topic: str
    kind: str
    dlt: str
    receiver: Counting

    @property
    def key(self) -> str:
        return f"{self.id}_g-{self.id}"

    @property
    def path(self) -> str:
        return f"/broker/subscription/{self.id}/g-{self.id}"

    def document(self, concurrency: int = 5) -> dict[str, Any]:
        topic: dict[str, Any] = {"name": self.topic, "config": {
            "concurrencyFactor": concurrency, "autoCommitPeriodMs": 100}}
        if self.kind == "filtered":
            topic["filter"] = FILTER
        return subscription(self.id, [topic], self.receiver.url, delayOnErrorMs=20,
                            retryBeforeCommit=2, deadLetterTopic=self.dlt,
                            fast_group={"session_timeout_ms": 2000,
                                        "heartbeat_interval_ms": 300})

    def wants(self, kind: str) -> bool:
        return self.kind != "filtered" or kind == "a"


# -- the verdict ---------------------------------------------------------------------------

@dataclass
class Verdict:
    seed: int
    hits: list[str] = field(default_factory=list)
    produced: int = 0
    delivered: int = 0
    dead_lettered: int = 0
    explained_duplicates: int = 0
    unacknowledged: int = 0
    """Records the topics hold that no produce answer named (sent again after a cut)."""
    lost: dict[str, list[Key]] = field(default_factory=dict)
    unexpected: dict[str, list[Key]] = field(default_factory=dict)
    unexplained_duplicates: dict[str, list[Key]] = field(default_factory=dict)
    uncommitted: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.unexpected or self.unexplained_duplicates
                    or self.uncommitted)

    def summary(self, faults_shown: int | None = None) -> str:
        """The counts, what went wrong, and the faults (the first `faults_shown`)."""
        lines = [f"chaos seed {self.seed} (replay: HOOKSTREAM_CHAOS_SEED={self.seed}): "
                 f"{len(self.hits)} faults, {self.produced} records produced, "
                 f"{self.delivered} delivered, {self.dead_lettered} dead-lettered, "
                 f"{self.explained_duplicates} duplicates after faults, "
                 f"{self.unacknowledged} records held unacknowledged"]
        for name, found in (("LOST", self.lost), ("UNEXPECTED", self.unexpected),
                            ("UNEXPLAINED DUPLICATES", self.unexplained_duplicates),
                            ("NOT COMMITTED TO THE END", self.uncommitted)):
            for sub, what in found.items():
                shown = what if isinstance(what, dict) else sorted(what)[:20]
                lines.append(f"  {name} {sub}: {shown}")
        hits = self.hits if faults_shown is None else self.hits[:faults_shown]
        lines += [f"  fault {hit}" for hit in hits]
        if len(hits) < len(self.hits):
            kinds = Counter(hit.split()[2] for hit in self.hits)
            lines.append(f"  ... {len(self.hits) - len(hits)} more; all: {dict(kinds)}")
        return "\n".join(lines)


# -- the run ---------------------------------------------------------------------------------

@dataclass
class Snapshot:
    at: float
    commits: dict[tuple[str, str, int], int]


class ChaosRun:
    def __init__(self, bootstrap: str, tmp: Path, seed: int, shape: Shape,
                 log: Callable[[str], None] = print, proxy: CutProxy | None = None) -> None:
        """`proxy`: the broker's connections pass through it (the broker advertises its
        address); then the schedule also cuts them and unsubscribes (`plan(extra=True)`)."""
        self.bootstrap, self.tmp, self.seed, self.shape = bootstrap, tmp, seed, shape
        self.log, self.proxy = log, proxy
        self.faults = plan(seed, shape.seconds, extra=proxy is not None)
        self.paused: Counter[str] = Counter()  # sub id -> pauses not yet resumed
        self.away: set[str] = set()  # sub ids unsubscribed, to be subscribed again
        self.cuts_open = 0  # cuts whose hold has not ended: the last one heals
        self.subs: list[Sub] = []
        self.records: dict[Key, str] = {}  # -> its kind header
        self.commits: dict[tuple[str, str, int], int] = {}  # (sub key, topic, p) -> next
        self.snapshots: list[Snapshot] = []
        self.dead_seen: set[tuple[str, Key]] = set()
        self.verdict = Verdict(seed)

    # -- setting up -------------------------------------------------------------------
    async def _make_subs(self) -> None:
        suffix = f"{self.seed}-{time.monotonic_ns() % 10**8}"
        make = behaviours(self.seed)
        for t in range(self.shape.topics):
            topic = f"chaos-{suffix}-{t}"
            await create_topics(self.bootstrap, {topic: self.shape.partitions})
            for kind in ENDPOINT_KINDS:
                sub_id = f"c{t}{kind}"
                dlt = f"{topic}-{kind}-dlt"
                await create_topics(self.bootstrap, {dlt: 1})
                receiver = await Counting(make[kind]()).start()
                self.subs.append(Sub(sub_id, topic, kind, dlt, receiver))

    def _listen(self, runtime: Runtime) -> None:
        def committed(event: Event) -> None:
            if event.subscription and event.topic and event.offset is not None:
                key = (event.subscription, event.topic, event.partition or 0)
                self.commits[key] = max(self.commits.get(key, 0), event.offset)

        def dead(event: Event) -> None:
            if event.subscription and event.topic and event.offset is not None:
                self.dead_seen.add((event.subscription,
                                    (event.topic, event.partition or 0, event.offset)))
                for sub in self.subs:
                    if sub.key == event.subscription:
                        sub.receiver.changed.set()

        runtime.listen("committed", committed)
        runtime.listen("dead_lettered", dead)

    # -- load ---------------------------------------------------------------------------
    async def _produce(self) -> None:
        producer = make_producer(self.bootstrap, acks="all", linger_ms=5)
        await producer.start()
        topics = sorted({s.topic for s in self.subs})
        per_tick = max(1, self.shape.records_per_s // 10)
        started = time.monotonic()
        n = 0
        try:
            while time.monotonic() - started < self.shape.seconds:
                sent = []
                for topic in topics:
                    for _ in range(per_tick):
                        kind = KINDS[n % len(KINDS)]
                        future = await producer.send(
                            topic, f"r{n}".encode(), partition=n % self.shape.partitions,
                            headers=[("kind", kind.encode())])
                        sent.append((topic, kind, future))
                        n += 1
                for topic, kind, future in sent:
                    meta = await future
                    self.records[(topic, meta.partition, meta.offset)] = kind
                await asyncio.sleep(0.1)  # the load's pace, not a wait for anything
        finally:
            await producer.stop()

    async def _read_log(self) -> None:
        """What the topics hold is what must be delivered: a produce whose answer a cut
        lost is sent again by the producer, and the broker may hold both copies (the
        first under an offset no answer named)."""
        for topic in sorted({s.topic for s in self.subs}):
            for partition in range(self.shape.partitions):
                for record in await read_to_end(self.bootstrap, topic, partition):
                    key = (topic, partition, record.offset)
                    if key not in self.records:
                        self.records[key] = dict(record.headers)["kind"].decode()
                        self.verdict.unacknowledged += 1

    # -- faults ---------------------------------------------------------------------------
    async def _inject(self, runtime: Runtime, admin: Admin) -> None:
        started = time.monotonic()
        ends: list[asyncio.Task[None]] = []  # resumes, heals and subscribes again
        for fault in self.faults:
            delay = fault.at_s - (time.monotonic() - started)
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's time, not a wait for an event
            self._snapshot()
            hit = await self._fire(fault, runtime, admin, ends)
            self.verdict.hits.append(f"{fault.at_s:7.2f} s {fault.kind} {hit} "
                                     f"({time.strftime('%H:%M:%S')})")  # as in a --log
        await asyncio.gather(*ends)

    def _snapshot(self) -> None:
        self.snapshots.append(Snapshot(time.monotonic(), dict(self.commits)))

    async def _fire(self, fault: Fault, runtime: Runtime, admin: Admin,
                    ends: list[asyncio.Task[None]]) -> str:
        if fault.kind == "kill":
            actors = {a.path: a for a in _actors(runtime.system.root)}
            if not actors:
                return "(no actor)"
            victim = choose_by_kind({path: type(a).__name__ for path, a in actors.items()},
                                    fault.pick)
            actors[victim].kill(f"chaos seed {self.seed}")
            return victim
        if fault.kind == "cut":
            assert self.proxy is not None  # planned only with one
            self.proxy.cut()
            self.cuts_open += 1
            ends.append(asyncio.ensure_future(self._heal_later(fault.hold_s)))
            return f"every broker connection for {fault.hold_s} s"
        sub = self.subs[int(fault.pick * len(self.subs))]
        if sub.id in self.away or (fault.kind == "unsubscribe" and self.paused[sub.id]):
            return f"{sub.id} (skipped: unsubscribed or paused)"  # no such target now
        if fault.kind == "pause":
            self.paused[sub.id] += 1
            await self._admin(admin, "POST", sub.path + "/pause")
            ends.append(asyncio.ensure_future(self._resume_later(admin, sub, fault.hold_s)))
            return f"{sub.id} for {fault.hold_s} s"
        if fault.kind == "unsubscribe":
            self.away.add(sub.id)
            await self._admin(admin, "POST", "/broker/unsubscribe", sub.document(),
                              done=lambda status, _: status in (200, 404))  # 404: a retry
            ends.append(asyncio.ensure_future(self._subscribe_later(admin, sub, fault.hold_s)))
            return f"{sub.id} for {fault.hold_s} s"
        concurrency = 3 if fault.pick < 0.5 else 8
        await self._admin(admin, "PUT", sub.path, sub.document(concurrency))
        return f"{sub.id} concurrency {concurrency}"

    async def _resume_later(self, admin: Admin, sub: Sub, hold_s: float) -> None:
        await asyncio.sleep(hold_s)  # the schedule's pause length
        self._snapshot()
        await self._admin(admin, "POST", sub.path + "/resume")
        self.paused[sub.id] -= 1

    async def _subscribe_later(self, admin: Admin, sub: Sub, hold_s: float) -> None:
        await asyncio.sleep(hold_s)  # the schedule's time away
        self._snapshot()

        def subscribed(status: int, reply: Any) -> bool:  # exists: an earlier try went in
            return status == 200 or "already exists" in str(reply)

        await self._admin(admin, "POST", "/broker/subscription", sub.document(),
                          done=subscribed)
        self.away.discard(sub.id)

    async def _heal_later(self, hold_s: float) -> None:
        await asyncio.sleep(hold_s)  # the schedule's cut length
        assert self.proxy is not None
        self.cuts_open -= 1
        if not self.cuts_open:
            self.proxy.heal()

    async def _admin(self, admin: Admin, method: str, path: str, body: Any = None,
                     done: Callable[[int, Any], bool] = lambda status, _: status == 200,
                     ) -> None:
        """A fault's admin call, retried while a killed actor behind it restarts."""
        async def answered() -> bool:
            status, reply = await admin.call(method, path, body)
            return done(status, reply)

        await until(answered, timeout_s=ADMIN_RETRY_S, poll_s=0.2, what=f"{method} {path}")

    # -- the end -----------------------------------------------------------------------------
    def _expected(self, sub: Sub) -> set[Key]:
        return {k for k, kind in self.records.items() if k[0] == sub.topic and sub.wants(kind)}

    def _settled(self) -> bool:
        for sub in self.subs:
            dead = {k for s, k in self.dead_seen if s == sub.key}
            if not self._expected(sub) <= set(sub.receiver.ok) | dead:
                return False
        return True

    def _owed(self) -> dict[str, dict[int, str]]:
        """Per subscription and partition: how many records are owed, from which offset,
        and the group's last commit seen (what a failing drain prints)."""
        owed: dict[str, dict[int, str]] = {}
        for sub in self.subs:
            dead = {k for s, k in self.dead_seen if s == sub.key}
            missing: dict[tuple[str, int], list[int]] = {}
            for topic, partition, offset in self._expected(sub) - set(sub.receiver.ok) - dead:
                missing.setdefault((topic, partition), []).append(offset)
            if missing:
                owed[sub.key] = {p: f"{len(o)} from {min(o)} (committed "
                                    f"{self.commits.get((sub.key, t, p), 0)})"
                                 for (t, p), o in sorted(missing.items())}
        return owed

    def _explain(self, runtime: Runtime) -> str:
        """What a failing drain shows besides what is owed: the faults fired, in order,
        the members, and every actor of an owing subscription as they are now."""
        owing = set(self._owed())
        actors = [f"  {a.describe() if isinstance(a, InstanceMemberActor) else repr(a)}"
                  for a in _actors(runtime.system.root)
                  if a.path.startswith("/hookstream/groups") or any(k in a.path for k in owing)]
        return "\n".join([*(f"  fault {hit}" for hit in self.verdict.hits), *actors])

    def _ends(self) -> dict[tuple[str, str, int], int]:
        ends: dict[tuple[str, int], int] = {}
        for topic, partition, offset in self.records:
            ends[(topic, partition)] = max(ends.get((topic, partition), 0), offset + 1)
        return {(s.key, t, p): end for s in self.subs for (t, p), end in ends.items()
                if t == s.topic}

    def _committed_to_end(self) -> bool:
        return all(self.commits.get(k, 0) >= end for k, end in self._ends().items())

    async def run(self) -> Verdict:
        await self._make_subs()
        try:
            async with make_runtime(self.bootstrap, self.tmp) as runtime:
                self._listen(runtime)
                admin = Admin(runtime)
                for sub in self.subs:
                    await admin.subscribe(sub.document())
                await asyncio.gather(self._produce(), self._inject(runtime, admin))
                await self._read_log()
                self.log(f"chaos seed {self.seed}: load and faults over, draining")
                try:
                    await until(self._settled, timeout_s=self.shape.drain_s,
                                what=f"every record delivered or dead-lettered (seed {self.seed})")
                except AssertionError as exc:
                    raise AssertionError(
                        f"{exc}; owed: {self._owed()}\n{self._explain(runtime)}") from None
                with contextlib.suppress(AssertionError):  # judged below, with the rest
                    await until(self._committed_to_end, timeout_s=self.shape.drain_s,
                                what="every group committed to the end")
        finally:
            for sub in self.subs:
                await sub.receiver.stop()
        await self._judge()
        return self.verdict

    async def _judge(self) -> None:
        verdict = self.verdict
        verdict.produced = len(self.records)
        for sub in self.subs:
            expected = self._expected(sub)
            in_dlt = await read_to_end(self.bootstrap, sub.dlt)
            dead = {(dict(r.headers)["dlt-topic"].decode(),
                     int(dict(r.headers)["dlt-partition"]), offset)
                    for r, offset in zip(in_dlt, dlt_offsets(in_dlt), strict=True)}
            judge(verdict, sub.id, sub.key, expected, sub.receiver.ok, dead, self.snapshots)
        ends = self._ends()
        for (sub_key, topic, partition), end in ends.items():
            have = self.commits.get((sub_key, topic, partition), 0)
            if have < end:
                verdict.uncommitted.setdefault(sub_key, {})[f"{topic}-{partition}"] = have


def judge(verdict: Verdict, sub_id: str, sub_key: str, expected: set[Key],
          ok: dict[Key, list[float]], dead: set[Key], snapshots: list[Snapshot]) -> None:
    """One subscription's part of the verdict: what it should have seen (`expected`), the
    times of its receiver's 2xx answers (`ok`), its dead letters, and the commits read as
    each fault fired."""
    got = set(ok)
    verdict.delivered += len(got)
    verdict.dead_lettered += len(dead)
    if lost := expected - got - dead:
        verdict.lost[sub_id] = sorted(lost)
    if unexpected := (got | dead) - expected:
        verdict.unexpected[sub_id] = sorted(unexpected)
    unexplained = []
    for key, times in ok.items():
        for again in times[1:]:
            if explained(sub_key, key, again, snapshots):
                verdict.explained_duplicates += 1
            else:
                unexplained.append(key)
    if unexplained:
        verdict.unexplained_duplicates[sub_id] = sorted(set(unexplained))


def explained(sub_key: str, key: Key, again: float, snapshots: list[Snapshot]) -> bool:
    """A second 2xx for `key` (at `again`) is explained by a fault before it that found
    the record uncommitted."""
    topic, partition, offset = key
    return any(s.at <= again and s.commits.get((sub_key, topic, partition), 0) <= offset
               for s in snapshots)


def _actors(root: Supervisor) -> list[Actor]:
    """Every actor under `root` (not `root`: killing it ends the runtime)."""
    found: list[Actor] = []
    for name in root.children():
        try:
            child = root.child(name)
        except ActorDeadError:
            continue  # stopped meanwhile
        found.append(child)
        if isinstance(child, Supervisor):
            found += _actors(child)
    return found
