"""The control actor (actors/delivery/control/actor.py) on a FakeClock: changes go
through its mailbox, a failed start is retried by a timer message at the exact virtual
time the kernel's restart backoff gives, a tree's exit and a 410 Gone come as messages,
and the local files keep what the next start needs.

The subscriptions' actor trees are the edge here (Kafka, HTTP): `Plot` stands in for
`Trees`, starting nothing and failing starts on demand. The files are real (tmp_path).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from actors.delivery.control.actor import ControlActor, Programmed
from actors.delivery.control.messages import (
    Gone,
    Listed,
    PauseSubscription,
    Publish,
    Replay,
    ResumeSubscription,
    Subscribe,
    TreeExited,
    Unsubscribe,
    Update,
    ask,
)
from actors.delivery.control.registry import Limits
from actors.delivery.control.replays import (
    FINISHED_REPLAYS_KEPT,
    MAX_REPLAYS,
    MAX_REPLAYS_PER_SUBSCRIPTION,
)
from actors.delivery.control.source import (
    DISABLED_FILE,
    PAUSED_FILE,
    Apply,
    LocalFiles,
    Stored,
)
from actors.delivery.control.trees import Starting
from actors.delivery.document.replay import ReplayRequest
from actors.delivery.document.store import SubscriptionStore, encode
from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.egress.handler import HandlerDestination
from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
    LimitReached,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
)
from actors.delivery.path.replay import ReplayProgress
from runtime.host.journal import Event
from runtime.host.metrics import Registry
from runtime.kernel.clock import FakeClock
from runtime.kernel.gate import Gate
from runtime.kernel.supervisor import ChildRef, ChildSpec
from runtime.kernel.system import ActorSystem

KEY = "orders_team"


def consumer(sub_id: str = "orders", topic: str = "orders") -> Consumer:
    return decode_consumer({"id": sub_id, "group": {"id": "team"}, "broker": "Kafka",
                            "topics": [{"name": topic}],
                            "subscriptionMethod": {"type": "http", "uri": "http://e/hook"}})


@dataclass
class Host:
    clock: FakeClock
    metrics: Registry = field(default_factory=Registry)
    events: list[Event] = field(default_factory=list)

    @property
    def journal(self) -> Host:
        return self

    def emit(self, event: Event) -> None:
        self.events.append(event)


@dataclass
class Plot:
    """A `Plant` that starts nothing: it notes each start (key, virtual time) and fails
    the next `failing` ones as a broker that is away would."""

    clock: FakeClock
    handlers: dict[str, HandlerDestination] = field(default_factory=dict)
    restoring: bool = False
    running: set[str] = field(default_factory=set)
    starts: list[tuple[str, int]] = field(default_factory=list)
    failing: int = 0
    own: set[str] = field(default_factory=set)
    forgotten: list[str] = field(default_factory=list)
    replays: set[tuple[str, str]] = field(default_factory=set)  # running: (key, replay id)
    batches: list[list[str]] = field(default_factory=list)  # trees stopped together
    gate: asyncio.Event = field(default_factory=lambda: _opened(asyncio.Event()))
    """Holds those stops while cleared."""
    launches: list[list[str]] = field(default_factory=list)  # subscribes started together
    launching: asyncio.Event = field(default_factory=lambda: _opened(asyncio.Event()))
    """Holds those starts while cleared."""

    def has_tree(self, key: str) -> bool:
        return key in self.running

    def bootstrap(self, consumer: Consumer) -> str:
        return "127.0.0.1:9"

    def check_retry_topics(self, consumer: Consumer) -> str | None:
        return None

    def broker_down(self, consumer: Consumer) -> bool:
        return False

    def own_topics(self) -> set[str]:
        return self.own

    def replaying(self, key: str) -> set[str]:
        return {rid for k, rid in self.replays if k == key}

    def forget(self, key: str) -> None:
        self.forgotten.append(key)

    async def start(self, consumer: Consumer) -> None:
        self.starts.append((consumer.key, self.clock.monotonic_ms()))
        if self.failing:
            self.failing -= 1
            raise SubscriptionStartFailed("subscription failed to start", "broker away")
        self.running.add(consumer.key)

    async def start_together(self, consumers: list[Consumer]) -> dict[str, DeliveryError]:
        failed: dict[str, DeliveryError] = {}
        for one in consumers:
            try:
                await self.start(one)
            except SubscriptionStartFailed as exc:
                failed[one.key] = exc
        return failed

    def prepare(self, consumers: list[Consumer]) -> Starting:
        return Starting(consumers)

    async def launch(self, starting: Starting) -> None:
        self.launches.append([c.key for c in starting.consumers])
        await self.launching.wait()
        starting.failed.update(await self.start_together(starting.consumers))

    async def settle(self, starting: Starting) -> dict[str, DeliveryError]:
        return starting.failed

    async def stop(self, consumer: Consumer, *, keep_member: bool = False) -> None:
        self.running.discard(consumer.key)

    async def stop_all(self, keys: list[str]) -> None:
        self.running.difference_update(keys)

    async def stop_trees(self, keys: list[str]) -> None:
        self.batches.append(list(keys))
        await self.gate.wait()
        self.running.difference_update(keys)

    def unseat(self, consumer: Consumer) -> None:
        return None

    async def release_member(self, consumer: Consumer) -> None:
        return None

    async def stop_leftovers(self) -> int:
        return 0

    async def start_replay(self, consumer: Consumer, request: ReplayRequest,
                           progress: ReplayProgress) -> None:
        self.replays.add((consumer.key, progress.replay_id))  # ends when the test says

    def settle_origin(self, uri: str, joining: Consumer | None = None,
                      leaving: str | None = None) -> object:
        return None

    async def hold_member(self, old: Consumer, new: Consumer) -> bool:
        return False

    async def release_hold(self, consumer: Consumer) -> None:
        return None

    async def release_holds(self) -> None:
        return None


@dataclass
class Plane:
    clock: FakeClock
    host: Host
    plot: Plot
    control: ChildRef
    folder: Path

    @property
    def actor(self) -> ControlActor:
        return self.control.actor_as(ControlActor)

    def state(self, key: str = KEY) -> str:
        return self.actor.registry.state(key)


async def started(folder: Path, failing: int = 0, own: frozenset[str] = frozenset(),
                  limits: Limits | None = None,
                  source: LocalFiles | None = None) -> AsyncIterator[Plane]:
    clock = FakeClock()
    host, plot = Host(clock), Plot(clock, failing=failing, own=set(own))
    system = ActorSystem(clock=clock)
    await system.start()
    source, programmed = source or LocalFiles(folder), Programmed()
    control = await system.spawn(ChildSpec(
        "control", lambda: ControlActor("control", host, plot, source, programmed, limits)))
    try:
        yield Plane(clock, host, plot, control, folder)
    finally:
        await system.stop()


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[Plane]:
    async for ready in started(tmp_path):
        yield ready


async def test_unsubscribes_asked_meanwhile_stop_at_once_and_later_changes_wait_for_them(
        plane: Plane) -> None:
    """Each unsubscribe's tree starts stopping as it is asked, beside those already
    stopping (none waits for another's drain). A change asked of a leaving subscription
    waits for its leave (a pause then finds it gone, a subscribe starts it anew), as if
    queued behind it."""
    keys = []
    for i in range(5):
        await ask(plane.control, Subscribe(consumer(f"s{i}", topic=f"t{i}")))
        keys.append(consumer(f"s{i}").key)
    plane.plot.gate.clear()
    leaves = [asyncio.ensure_future(ask(plane.control, Unsubscribe(k))) for k in keys]
    pause = asyncio.ensure_future(ask(plane.control, PauseSubscription(keys[0])))
    again = asyncio.ensure_future(ask(plane.control, Subscribe(consumer("s1", topic="t1"))))
    assert await ask(plane.control, Listed(keys[4]))  # every ask above is handled
    for _ in range(5):  # and the batches' tasks run (to the gate)
        await asyncio.sleep(0)
    assert plane.plot.batches == [[k] for k in keys] and not any(f.done() for f in leaves)
    assert {plane.state(k) for k in keys} == {"stopping"}
    plane.plot.gate.set()
    assert [c.key for c in await asyncio.gather(*leaves)] == keys
    assert plane.plot.batches == [[k] for k in keys]
    with pytest.raises(SubscriptionNotFound):
        await pause
    await again
    assert list(plane.actor.registry) == [keys[1]] and plane.state(keys[1]) == "running"
    assert sorted(p.name for p in plane.folder.glob("*.json") if p.name != PAUSED_FILE
                  and p.name != DISABLED_FILE) == [f"{keys[1]}.json"]


async def test_subscribes_asked_while_a_start_is_under_way_start_together_and_changes_wait(
        plane: Plane) -> None:
    """A subscribe is listed by the mailbox and its tree starts beside it: those asked
    while a batch starts are the next batch, started together. An unsubscribe or a pause
    of a subscription whose start is under way waits for it, as if queued behind it."""
    plane.plot.launching.clear()
    first = asyncio.ensure_future(ask(plane.control, Subscribe(consumer("s0", "t0"))))
    await asyncio.sleep(0)  # asked
    assert await ask(plane.control, Listed(consumer("s0").key))  # handled: it is listed
    assert plane.state(consumer("s0").key) == "starting" and not first.done()
    later = [asyncio.ensure_future(ask(plane.control, Subscribe(consumer(f"s{i}", f"t{i}"))))
             for i in range(1, 4)]
    leave = asyncio.ensure_future(ask(plane.control, Unsubscribe(consumer("s1").key)))
    pause = asyncio.ensure_future(ask(plane.control, PauseSubscription(consumer("s2").key)))
    await asyncio.sleep(0)
    assert await ask(plane.control, Listed(consumer("s3").key))  # every ask above handled
    assert plane.plot.launches == [[consumer("s0").key]] and not leave.done()
    plane.plot.launching.set()
    await asyncio.gather(first, *later)
    assert plane.plot.launches == [[consumer("s0").key],
                                   [consumer(f"s{i}").key for i in range(1, 4)]]
    assert (await leave).key == consumer("s1").key
    await pause
    assert {k: plane.state(k) for k in plane.actor.registry} == {
        consumer("s0").key: "running", consumer("s2").key: "paused",
        consumer("s3").key: "running"}
    assert not (plane.folder / f"{consumer('s1').key}.json").exists()


async def test_a_subscribe_starts_the_tree_and_keeps_the_file(plane: Plane) -> None:
    await ask(plane.control, Subscribe(consumer()))
    assert plane.state() == "running" and plane.plot.running == {KEY}
    assert (plane.folder / f"{KEY}.json").exists()
    with pytest.raises(SubscriptionExists):
        await ask(plane.control, Subscribe(consumer()))
    assert plane.actor.alive  # a refusal is the asker's answer, not the actor's crash


async def test_a_subscribe_that_cannot_start_is_refused_and_not_kept(plane: Plane) -> None:
    plane.plot.failing = 1
    with pytest.raises(SubscriptionStartFailed):
        await ask(plane.control, Subscribe(consumer()))
    assert KEY not in plane.actor.registry and not (plane.folder / f"{KEY}.json").exists()


async def test_a_stored_subscription_that_cannot_start_is_retried_on_timer_messages(
        tmp_path: Path) -> None:
    await SubscriptionStore(tmp_path).save(consumer())
    async for plane in started(tmp_path, failing=2):
        assert plane.state() == "failed" and plane.plot.starts == [(KEY, 0)]
        await plane.clock.advance_settled(499)
        assert len(plane.plot.starts) == 1  # nothing polls before the deadline
        await plane.clock.advance_settled(1)
        await plane.clock.advance_settled(999)
        assert len(plane.plot.starts) == 2
        await plane.clock.advance_settled(1)
        assert plane.plot.starts == [(KEY, 0), (KEY, 500), (KEY, 1500)]
        assert plane.state() == "running"


async def test_a_tree_that_exits_by_itself_starts_again_after_the_backoff(
        plane: Plane) -> None:
    await ask(plane.control, Subscribe(consumer()))
    plane.plot.running.clear()  # its supervisor gave up on it
    plane.control.tell_system(TreeExited(KEY, RuntimeError("boom")))
    assert await ask(plane.control, Listed(KEY))
    assert plane.state() == "failed"
    assert "boom" in plane.actor.registry.known(KEY).status.reason
    await plane.clock.advance_settled(500)
    assert plane.plot.starts[-1] == (KEY, 500) and plane.state() == "running"


async def test_a_410_disables_the_subscription_journals_it_and_keeps_it_disabled(
        plane: Plane) -> None:
    await ask(plane.control, Subscribe(consumer()))
    plane.control.tell_system(Gone(KEY, "http://e/hook answered 410 Gone"))
    plane.control.tell_system(Gone(KEY, "http://e/hook answered 410 Gone"))  # once only
    assert await ask(plane.control, Listed(KEY))  # handled after both: one mailbox
    assert plane.state() == "disabled" and plane.plot.running == set()
    assert [e.type for e in plane.host.events] == ["subscription_disabled"]
    disabled = msgspec.json.decode((plane.folder / DISABLED_FILE).read_bytes())
    assert disabled == {KEY: "http://e/hook answered 410 Gone"}
    await ask(plane.control, ResumeSubscription(KEY))
    assert plane.state() == "running"
    assert msgspec.json.decode((plane.folder / DISABLED_FILE).read_bytes()) == {}


async def test_pause_keeps_the_subscription_paused_across_a_restart(tmp_path: Path) -> None:
    async for plane in started(tmp_path):
        await ask(plane.control, Subscribe(consumer()))
        await ask(plane.control, PauseSubscription(KEY))
        assert plane.state() == "paused" and plane.plot.running == set()
        assert msgspec.json.decode((tmp_path / PAUSED_FILE).read_bytes()) == [KEY]
    async for plane in started(tmp_path):
        assert plane.state() == "paused" and plane.plot.starts == []


async def test_the_lists_of_before_issue_25_name_a_pair_by_its_joined_name(
        tmp_path: Path) -> None:
    """`k_a_b` in the lists was (`k`, `a_b`), whose key is now `k_a%5Fb`; a name that is
    a subscription's key stays its own."""
    old = decode_consumer({"id": "k", "group": {"id": "a_b"}, "broker": "Kafka",
                           "topics": [{"name": "orders"}],
                           "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook"}})
    await SubscriptionStore(tmp_path).save(old)
    (tmp_path / PAUSED_FILE).write_bytes(msgspec.json.encode(["k_a_b", "x_y"]))
    (tmp_path / DISABLED_FILE).write_bytes(msgspec.json.encode({"k_a_b": "410"}))
    stored = await LocalFiles(tmp_path).open(_ignore)
    assert (stored.paused, stored.disabled) == ({"k_a%5Fb", "x_y"}, {"k_a%5Fb": "410"})


class DiskFull(LocalFiles):
    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        full: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        full.set_exception(OSError(28, "No space left on device"))
        return full


async def test_a_subscription_whose_file_cannot_be_written_is_refused_and_stopped(
        tmp_path: Path) -> None:
    async for plane in started(tmp_path, source=DiskFull(tmp_path)):
        with pytest.raises(OSError, match="No space"):
            await ask(plane.control, Subscribe(consumer()))
        await until_gone(plane, KEY)
        assert plane.plot.running == set() and not (tmp_path / f"{KEY}.json").exists()
        await ask(plane.control, Subscribe(consumer(), persist=False))  # still serving
        assert plane.state() == "running"


async def test_an_unsubscribe_right_after_a_subscribe_leaves_no_file(plane: Plane) -> None:
    first = asyncio.ensure_future(ask(plane.control, Subscribe(consumer())))
    await asyncio.sleep(0)  # asked first
    gone = await ask(plane.control, Unsubscribe(KEY))
    await first
    assert gone.key == KEY and not (plane.folder / f"{KEY}.json").exists()
    assert KEY not in plane.actor.registry


async def until_gone(plane: Plane, key: str) -> None:
    for _ in range(100):
        if not await ask(plane.control, Listed(key)):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{key} still listed")


def _opened(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event


async def _ignore(key: str, value: bytes | None) -> None:
    return None


class CountedFiles(LocalFiles):
    flags_written = 0

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None:
        self.flags_written += 1
        await super().keep_flags(paused, disabled)


async def test_the_flags_files_are_written_only_when_the_flags_change(tmp_path: Path) -> None:
    """An unsubscribe of a subscription neither paused nor disabled deleted its file and
    rewrote both flag files (three fsynced writes in the mailbox per unsubscribe)."""
    source = CountedFiles(tmp_path)
    async for plane in started(tmp_path, source=source):
        for i in range(3):
            await ask(plane.control, Subscribe(consumer(f"s{i}", topic=f"t{i}")))
        await ask(plane.control, PauseSubscription(consumer("s0").key))
        assert source.flags_written == 1
        await ask(plane.control, Unsubscribe(consumer("s1").key))
        assert source.flags_written == 1
        await ask(plane.control, Unsubscribe(consumer("s0").key))  # a paused one leaves
        assert source.flags_written == 2
        assert json.loads((tmp_path / PAUSED_FILE).read_bytes()) == []


async def test_subscribes_are_answered_while_the_journal_holds_the_data_path(
        tmp_path: Path) -> None:
    clock, gate = FakeClock(), Gate()
    system = ActorSystem(clock=clock, pace=gate)
    await system.start()
    control = await system.spawn(ChildSpec("control", lambda: ControlActor(
        "control", Host(clock), Plot(clock), LocalFiles(tmp_path), Programmed())))
    gate.close()  # the journal fell behind
    try:
        await asyncio.wait_for(ask(control, Subscribe(consumer())), 5)
        assert control.actor_as(ControlActor).registry.state(KEY) == "running"
    finally:
        gate.reopen()
        await system.stop()


async def test_unsubscribe_stops_the_tree_and_deletes_the_file(plane: Plane) -> None:
    await ask(plane.control, Subscribe(consumer()))
    gone: Any = await ask(plane.control, Unsubscribe(KEY))
    assert gone.key == KEY and plane.plot.running == set()
    assert not (plane.folder / f"{KEY}.json").exists()
    with pytest.raises(SubscriptionNotFound):
        await ask(plane.control, Unsubscribe(KEY))


class Topic:
    """The subscriptions topic as a list in memory (the edge here is Kafka): `open`
    applies what was written before, `follow` hands over each later record, `publish`
    returns once the record was applied, as `SubscriptionLog.write` does."""

    def __init__(self, *records: tuple[str, bytes | None]) -> None:
        self.before = list(records)
        self.queue: asyncio.Queue[tuple[str, bytes | None, asyncio.Event]] = asyncio.Queue()
        self.told = asyncio.Event()  # a 410's `disabled:` record came back applied

    async def open(self, apply: Apply) -> Stored:
        for key, value in self.before:
            await apply(key, value)
        return Stored()

    async def follow(self, apply: Apply) -> None:
        while True:
            key, value, applied = await self.queue.get()
            await apply(key, value)
            applied.set()

    async def publish(self, records: tuple[tuple[str, bytes | None], ...]) -> None:
        for key, value in records:
            applied = asyncio.Event()
            self.queue.put_nowait((key, value, applied))
            await applied.wait()

    async def close(self) -> None:
        return None

    def check_name(self, key: str) -> None:
        return None

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        kept: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        kept.set_result(None)
        return kept

    async def delete(self, *keys: str) -> None:
        return None

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None:
        return None

    async def disabled(self, key: str, reason: str) -> None:
        await self.publish(((f"disabled:{key}", reason.encode()),))
        self.told.set()


async def test_in_cluster_mode_the_topics_records_are_applied_through_the_mailbox() -> None:
    clock = FakeClock()
    other = consumer("other", "payments")
    topic = Topic(("orders_team", encode(consumer())), ("paused:orders_team", b"true"),
                  ("other_team", encode(other)))
    host, plot = Host(clock), Plot(clock)
    system = ActorSystem(clock=clock)
    await system.start()
    control = await system.spawn(ChildSpec(
        "control", lambda: ControlActor("control", host, plot, cast(Any, topic),
                                        Programmed())))
    try:
        actor = control.actor_as(ControlActor)
        assert actor.registry.state(KEY) == "paused"
        assert plot.running == {"other_team"}
        written = await ask(control, Publish((("paused:orders_team", None),)))
        await written  # applied here before the write returns
        assert actor.registry.state(KEY) == "running" and plot.running == {KEY, "other_team"}
        control.tell_system(Gone(KEY, "410"))  # disabled here, then told to the topic
        await asyncio.wait_for(topic.told.wait(), 5)
        assert actor.registry.state(KEY) == "disabled"
        assert actor.registry.marked_disabled == {KEY: "410"}
        await (await ask(control, Publish((("other_team", None),))))
        assert "other_team" not in actor.registry and plot.running == set()
    finally:
        await system.stop()



class Unreachable(LocalFiles):
    """Files behind a broker that is away at boot: `open` fails `away` times first."""

    def __init__(self, folder: Path, away: int) -> None:
        super().__init__(folder)
        self.away, self.opened = away, 0
        self.problem: str | None = None

    async def open(self, apply: Apply) -> Stored:
        self.opened += 1
        if self.away:
            self.away -= 1
            raise ConnectionError("broker away")
        self.problem = None
        return await super().open(apply)

    def failed(self, exc: Exception, attempt: int) -> bool:
        self.problem = f"cannot read yet ({attempt} attempts): {exc!r}"
        return True


async def test_a_source_that_cannot_be_read_at_boot_is_opened_again_on_timer_messages(
        tmp_path: Path) -> None:
    await SubscriptionStore(tmp_path).save(consumer())
    clock = FakeClock()
    host, plot, source = Host(clock), Plot(clock), Unreachable(tmp_path, away=2)
    system = ActorSystem(clock=clock)
    await system.start()
    control = await system.spawn(ChildSpec(
        "control", lambda: ControlActor("control", host, plot, source, Programmed())))
    try:  # started (ready) although nothing could be read
        actor = control.actor_as(ControlActor)
        assert source.opened == 1 and source.problem is not None and "1 attempts" in source.problem
        assert KEY not in actor.registry and plot.starts == []
        await clock.advance_settled(500)  # RETRY: 0.5 s (less its jitter), then 1 s
        assert source.opened == 2 and "2 attempts" in (source.problem or "")
        await clock.advance_settled(1000)
        assert await ask(control, Listed(KEY))  # after the restore (files read in a thread)
        assert source.opened == 3 and source.problem is None
        assert actor.registry.state(KEY) == "running" and plot.running == {KEY}
    finally:
        await system.stop()


async def test_the_runtimes_own_topics_are_refused_and_an_unsubscribe_forgets_its_ring(
        plane: Plane) -> None:
    plane.plot.own = {"orders"}
    with pytest.raises(InvalidSubscription, match="topics"):
        await ask(plane.control, Subscribe(consumer()))
    plane.plot.own = set()
    await ask(plane.control, Subscribe(consumer()))
    await ask(plane.control, Unsubscribe(KEY))
    assert plane.plot.forgotten == [KEY]


def writing_to(dead_letters: str | None = None, retry: str | None = None) -> Consumer:
    method: dict[str, Any] = {"type": "http", "uri": "http://e/hook"}
    if dead_letters is not None:
        method["deadLetterTopic"] = dead_letters
    if retry is not None:
        method["retryTopics"] = {"topic": retry, "delaysMs": [1000]}
    return decode_consumer({"id": "orders", "group": {"id": "team"}, "broker": "Kafka",
                            "topics": [{"name": "orders"}], "subscriptionMethod": method})


async def test_the_runtimes_own_topics_are_refused_as_dead_letter_or_retry_topic(
        plane: Plane) -> None:
    plane.plot.own = {"hookstream.subscriptions"}
    for given, named in ((writing_to(dead_letters="hookstream.subscriptions"),
                          "deadLetterTopic"),
                         (writing_to(retry="hookstream.subscriptions"), "retryTopics.topic")):
        with pytest.raises(InvalidSubscription) as refused:
            await ask(plane.control, Subscribe(given))
        assert refused.value.reason == f"invalid subscriptionMethod.{named}"
        assert KEY not in plane.actor.registry
    await ask(plane.control, Subscribe(writing_to(dead_letters="orders.dlt")))
    with pytest.raises(InvalidSubscription, match="deadLetterTopic"):
        await ask(plane.control, Update(KEY, writing_to(dead_letters="hookstream.subscriptions")))


async def test_a_stored_document_writing_to_an_own_topic_is_listed_refused_not_started(
        tmp_path: Path) -> None:
    await SubscriptionStore(tmp_path).save(writing_to(dead_letters="hookstream.subscriptions"))
    async for plane in started(tmp_path, own=frozenset({"hookstream.subscriptions"})):
        assert plane.state() == "refused" and plane.plot.starts == []
        assert "deadLetterTopic" in plane.actor.registry.known(KEY).status.reason
        with pytest.raises(InvalidSubscription, match="replay"):  # its dead letters
            await ask(plane.control, Replay(KEY, ReplayRequest(source="deadLetter")))
        await ask(plane.control, PauseSubscription(KEY))
        await ask(plane.control, ResumeSubscription(KEY))  # no way around the refusal
        assert plane.state() == "refused" and plane.plot.starts == []
        await ask(plane.control, Update(KEY, writing_to(dead_letters="orders.dlt")))
        assert plane.state() == "running" and plane.plot.running == {KEY}


async def test_a_dead_letter_replay_never_reads_an_own_topic(plane: Plane) -> None:
    await ask(plane.control, Subscribe(writing_to(dead_letters="hookstream.subscriptions")))
    plane.plot.own = {"hookstream.subscriptions"}  # as an earlier version let it be
    with pytest.raises(InvalidSubscription, match="replay"):
        await ask(plane.control, Replay(KEY, ReplayRequest(source="deadLetter")))


async def test_a_record_of_the_topic_writing_to_an_own_topic_is_refused_on_adopt_and_replace(
        ) -> None:
    clock = FakeClock()
    bad = writing_to(dead_letters="hookstream.subscriptions")
    topic = Topic((KEY, encode(bad)))
    host, plot = Host(clock), Plot(clock, own={"hookstream.subscriptions"})
    system = ActorSystem(clock=clock)
    await system.start()
    control = await system.spawn(ChildSpec(
        "control", lambda: ControlActor("control", host, plot, cast(Any, topic),
                                        Programmed())))
    try:
        actor = control.actor_as(ControlActor)
        assert actor.registry.state(KEY) == "refused" and plot.starts == []
        await (await ask(control, Publish(((KEY, encode(writing_to("orders.dlt"))),))))
        assert actor.registry.state(KEY) == "running" and plot.running == {KEY}
        await (await ask(control, Publish(((KEY, encode(writing_to(
            retry="hookstream.subscriptions"))),))))
        assert actor.registry.state(KEY) == "refused" and plot.running == set()
    finally:
        await system.stop()


async def test_replays_are_bounded_per_subscription_and_per_instance_and_ended_ones_go(
        plane: Plane) -> None:
    keys = [f"s{i}_team" for i in range(MAX_REPLAYS // MAX_REPLAYS_PER_SUBSCRIPTION + 1)]
    for key in keys:
        await ask(plane.control, Subscribe(consumer(key.removesuffix("_team"), key)))
    request = ReplayRequest(source="topic", topic=keys[0], partition=0)
    first = [await ask(plane.control, Replay(keys[0], request))
             for _ in range(MAX_REPLAYS_PER_SUBSCRIPTION)]
    with pytest.raises(LimitReached, match="s0_team"):
        await ask(plane.control, Replay(keys[0], request))
    for key in keys[1:-1]:
        for _ in range(MAX_REPLAYS_PER_SUBSCRIPTION):
            await ask(plane.control, Replay(key, ReplayRequest(source="topic", topic=key,
                                                               partition=0)))
    last = ReplayRequest(source="topic", topic=keys[-1], partition=0)
    with pytest.raises(LimitReached, match="instance"):
        await ask(plane.control, Replay(keys[-1], last))
    plane.plot.replays.discard((keys[0], first[0].replay_id))  # one ended
    await ask(plane.control, Replay(keys[-1], last))
    assert first[0].replay_id in plane.actor.desk.replays  # its progress is still shown
    plane.plot.replays.clear()  # all ended: only the newest ended ones are kept
    for _ in range(FINISHED_REPLAYS_KEPT + 1):
        await ask(plane.control, Replay(keys[0], request))
        plane.plot.replays.clear()
    assert len(plane.actor.desk.replays) == FINISHED_REPLAYS_KEPT
    await ask(plane.control, Unsubscribe(keys[0]))
    assert all(p.subscription != keys[0] for p in plane.actor.desk.replays.values())


def reading(sub_id: str, *topics: dict[str, Any]) -> Consumer:
    return decode_consumer({"id": sub_id, "group": {"id": sub_id}, "broker": "Kafka",
                            "topics": list(topics),
                            "subscriptionMethod": {"type": "http", "uri": "http://e/hook"}})


async def test_subscriptions_topics_and_patterns_per_instance_are_bounded(
        tmp_path: Path) -> None:
    """#34: 2,000 subscriptions of 90 topics and 10 patterns each were all accepted."""
    a, b, c = ({"name": n} for n in "abc")
    x_star, y_star = {"name": "x.*", "pattern": True}, {"name": "y.*", "pattern": True}
    async for plane in started(tmp_path, limits=Limits(subscriptions=3, topics=2, patterns=1)):
        await ask(plane.control, Subscribe(reading("one", a, b, x_star)))
        await ask(plane.control, Subscribe(reading("two", a, x_star)))  # nothing new
        with pytest.raises(LimitReached, match="max_topics"):
            await ask(plane.control, Subscribe(reading("three", c)))
        with pytest.raises(LimitReached, match="max_patterns"):
            await ask(plane.control, Subscribe(reading("three", a, y_star)))
        with pytest.raises(LimitReached, match="max_topics"):  # an update counts too
            await ask(plane.control, Update("two_two", reading("two", a, c)))
        await ask(plane.control, Update("one_one", reading("one", a, b)))  # nothing new
        assert plane.state("one_one") == "running"
        await ask(plane.control, Subscribe(reading("three", b)))
        with pytest.raises(LimitReached, match="max_subscriptions"):
            await ask(plane.control, Subscribe(reading("four", a)))
        await ask(plane.control, Unsubscribe("one_one"))
        await ask(plane.control, Unsubscribe("three_three"))  # nobody reads b now
        await ask(plane.control, Subscribe(reading("four", c)))
        assert sorted(plane.actor.registry) == ["four_four", "two_two"]
