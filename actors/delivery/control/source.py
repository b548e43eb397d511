"""Where the subscriptions live: one interface, two sources.

- `LocalFiles`: the persistence folder, one JSON file per subscription (actors/delivery/
  document/store.py) plus the lists of paused and disabled ones. A change is applied by
  the control actor, which then writes the files.
- `ClusterTopic`: the cluster's compacted subscriptions topic (actors/delivery/cluster/
  log.py). A change is written to the topic; every instance's control actor applies it
  as it reads it back, this one included, before the write returns.

The facade (actors/delivery/control/service.py) calls the first half (`subscribe` ...
`resume`); the control actor the second (`open`, `follow`, `save` ...), on its own task.
Nothing above this module asks which source it has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import msgspec

from actors.delivery.cluster.log import DISABLED_PREFIX, PAUSED_PREFIX, SubscriptionLog
from actors.delivery.cluster.sealed import clear_in, opened_value, refuse_clear, sealed_value
from actors.delivery.control.messages import (
    Check,
    Listed,
    Marks,
    PauseSubscription,
    Publish,
    ResumeSubscription,
    Subscribe,
    Unsubscribe,
    Update,
    ask,
)
from actors.delivery.document.store import SubscriptionStore
from actors.delivery.document.subscription import Consumer
from actors.delivery.errors import SubscriptionStartFailed
from runtime.host.files import atomic_write
from runtime.host.sealing import Unsealable
from runtime.kernel.actor import Ref

if TYPE_CHECKING:
    from runtime.host.app import Runtime

log = logging.getLogger(__name__)
PAUSED_FILE: Final = "paused.list"  # not *.json: those are subscriptions
DISABLED_FILE: Final = "disabled.list"  # key -> reason: subscriptions a 410 Gone disabled
Apply = Callable[[str, bytes | None], Awaitable[None]]
T = TypeVar("T")


@dataclass(slots=True)
class Stored:
    """What a source holds when the control actor starts."""

    consumers: list[Consumer] = field(default_factory=list)
    paused: set[str] = field(default_factory=set)
    disabled: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


class SubscriptionSource(Protocol):
    # -- the facade's side: where a change is written ------------------------------------
    async def subscribe(self, control: Ref, consumer: Consumer) -> None: ...

    async def unsubscribe(self, control: Ref, key: str) -> Consumer: ...

    async def update(self, control: Ref, key: str, consumer: Consumer) -> None: ...

    async def pause(self, control: Ref, key: str) -> None: ...

    async def resume(self, control: Ref, key: str) -> None: ...

    # -- the control actor's side -------------------------------------------------------
    async def open(self, apply: Apply) -> Stored:
        """Read what is stored; records read on the way go through `apply`."""
        ...

    async def follow(self, apply: Apply) -> None:
        """Apply later changes until cancelled (returns at once when there are none)."""
        ...

    async def close(self) -> None: ...

    @property
    def problem(self) -> str | None:
        """Why the source cannot be read yet (None: it can), for readiness."""
        ...

    def failed(self, exc: Exception, attempt: int) -> bool:
        """`open` failed for the `attempt`-th time in a row: True when it is worth trying
        again later (the broker may come back), False when the failure is final."""
        ...

    def check_name(self, key: str) -> None:
        """`InvalidSubscription` for a name this source cannot keep."""
        ...

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        """Start storing `consumer`; the future is done once it is durable (a future, not
        a coroutine: its answer reaches the asker without a task's turns between)."""
        ...

    async def delete(self, *keys: str) -> None: ...

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None:
        """The paused and the disabled subscriptions, for the next start."""
        ...

    async def disabled(self, key: str, reason: str) -> None:
        """A 410 Gone disabled `key` here: tell whoever else must know."""
        ...

    async def publish(self, records: tuple[tuple[str, bytes | None], ...]) -> None:
        """Write records; return once this instance applied them."""
        ...


def restored_note(consumers: list[Consumer], directory: Path,
                  is_embedded: Callable[[str], bool]) -> str:
    """What a restart kept (issue 27): the subscriptions in `directory` survive it, but an
    embedded broker keeps nothing, so theirs start from empty topics."""
    note = f"restored {len(consumers)} subscription(s) from {directory}"
    embedded = sorted({c.broker for c in consumers if is_embedded(c.broker)})
    if not embedded:
        return note
    return (f"{note}; the embedded broker {', '.join(map(repr, embedded))} started empty "
            f"(records, topics and committed positions are gone): they wait for their "
            f"topics; remove {directory} to start without them")


def current_keys(consumers: list[Consumer]) -> Callable[[str], str]:
    """Maps a name in the lists to its subscription's key: a version before issue 25 wrote
    `<id>_<group.id>` (`Consumer.joined`), which is no longer the key when `group.id` has
    a `_`. A name that is some subscription's key stays that key."""
    keys = {c.key for c in consumers}
    earlier = {c.joined: c.key for c in consumers}
    return lambda name: name if name in keys else earlier.get(name, name)


class Direct:
    """Changes asked of the control actor, applied here at once. In-process
    subscriptions (the embedding program's, never in a source) are changed so in either
    mode; `LocalFiles` adds the files."""

    async def subscribe(self, control: Ref, consumer: Consumer) -> None:
        await ask(control, Subscribe(consumer, persist=True))

    async def unsubscribe(self, control: Ref, key: str) -> Consumer:
        consumer: Consumer = await ask(control, Unsubscribe(key))
        return consumer

    async def update(self, control: Ref, key: str, consumer: Consumer) -> None:
        await ask(control, Update(key, consumer))

    async def pause(self, control: Ref, key: str) -> None:
        await ask(control, PauseSubscription(key))

    async def resume(self, control: Ref, key: str) -> None:
        await ask(control, ResumeSubscription(key))


class LocalFiles(Direct):
    """Subscriptions in the persistence folder; changes apply at once, here."""

    problem: str | None = None

    def __init__(self, folder: str | Path,
                 is_embedded: Callable[[str], bool] = lambda broker: False) -> None:
        self.folder = Path(folder)
        self.store = SubscriptionStore(self.folder)
        self.is_embedded = is_embedded

    async def open(self, apply: Apply) -> Stored:
        consumers, problems = await self.store.load_all()
        if consumers:
            log.info("%s", restored_note(consumers, self.folder, self.is_embedded))
        paused = await asyncio.to_thread(self._read, PAUSED_FILE, list[str], [])
        disabled = await asyncio.to_thread(self._read, DISABLED_FILE, dict[str, str], {})
        key = current_keys(consumers)
        return Stored(consumers, {key(k) for k in paused},
                      {key(k): reason for k, reason in disabled.items()}, problems)

    async def follow(self, apply: Apply) -> None:
        return None  # only this instance changes its files, through the control actor

    async def close(self) -> None:
        return None

    def failed(self, exc: Exception, attempt: int) -> bool:
        return False  # files that cannot be read now will not be readable later

    def check_name(self, key: str) -> None:
        self.store.path(key)  # InvalidSubscription for a key no pair has

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        return self.store.save(consumer)

    async def delete(self, *keys: str) -> None:
        await self.store.delete(*keys)

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None:
        await asyncio.to_thread(atomic_write, self.folder / PAUSED_FILE,
                                msgspec.json.encode(paused))
        await asyncio.to_thread(atomic_write, self.folder / DISABLED_FILE,
                                msgspec.json.encode(disabled))

    async def disabled(self, key: str, reason: str) -> None:
        return None  # `keep_flags` wrote it

    async def publish(self, records: tuple[tuple[str, bytes | None], ...]) -> None:
        raise NotImplementedError("local subscriptions have no topic to publish to")

    def _read(self, name: str, kind: type[T], default: T) -> T:
        path = self.folder / name
        try:
            return msgspec.json.decode(path.read_bytes(), type=kind)
        except FileNotFoundError:
            return default
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("ignoring unreadable %s: %s", path, exc)
            return default

    def __repr__(self) -> str:
        return f"<LocalFiles {self.folder}>"


async def earlier_records(control: Ref, consumer: Consumer,
                          *prefixes: str) -> list[tuple[str, None]]:
    """Tombstones for what a version before issue 25 may have written under `consumer`'s
    joined name, when that is not its key (a `_` in `group.id`) nor another
    subscription's: compaction would keep those records, and the next start obey them."""
    name = consumer.joined
    if name == consumer.key or await ask(control, Listed(name)):
        return []
    return [(prefix + name, None) for prefix in prefixes]


class ClusterTopic:
    """Subscriptions in the cluster's subscriptions topic (Kafka Connect's distributed
    mode keeps its configuration the same way): written here, applied everywhere."""

    def __init__(self, runtime: Runtime) -> None:
        cluster = runtime.config.cluster
        self.runtime = runtime
        self.topic = cluster.subscriptions_topic
        self._keys = cluster.sealing_keys()  # actors/delivery/cluster/sealed.py
        self._log: SubscriptionLog | None = None
        self._problem: str | None = None  # kept from one attempt to open to the next
        self._unopened: dict[str, str] = {}  # key -> why its secrets cannot be opened

    async def subscribe(self, control: Ref, consumer: Consumer) -> None:
        refuse_clear(consumer, self._keys)
        await ask(control, Check(consumer))
        await self._publish(control, (consumer.key, sealed_value(consumer, self._keys)))
        if not await ask(control, Listed(consumer.key)):  # written, but not applied
            raise SubscriptionStartFailed("subscription not applied",
                                          f"{consumer.key}: see this instance's log")

    async def unsubscribe(self, control: Ref, key: str) -> Consumer:
        marks: Marks = await ask(control, Marks(key))
        records: list[tuple[str, bytes | None]] = []
        if marks.paused:
            records.append((PAUSED_PREFIX + key, None))
        if marks.disabled:
            records.append((DISABLED_PREFIX + key, None))
        assert marks.consumer is not None
        records += await earlier_records(control, marks.consumer, "", PAUSED_PREFIX,
                                         DISABLED_PREFIX)
        await self._publish(control, *records, (key, None))
        return marks.consumer

    async def update(self, control: Ref, key: str, consumer: Consumer) -> None:
        kept: Consumer = await ask(control, Check(consumer, update=key))  # secrets kept
        refuse_clear(kept, self._keys)
        await self._publish(control, (key, sealed_value(kept, self._keys)))

    async def pause(self, control: Ref, key: str) -> None:
        await ask(control, Marks(key))  # SubscriptionNotFound
        await self._publish(control, (PAUSED_PREFIX + key, b"true"))

    async def resume(self, control: Ref, key: str) -> None:
        marks: Marks = await ask(control, Marks(key))
        records: list[tuple[str, bytes | None]] = []
        if marks.disabled:
            records.append((DISABLED_PREFIX + key, None))
        if marks.consumer is not None:
            records += await earlier_records(control, marks.consumer, PAUSED_PREFIX,
                                             DISABLED_PREFIX)
        await self._publish(control, *records, (PAUSED_PREFIX + key, None))

    @staticmethod
    async def _publish(control: Ref, *records: tuple[str, bytes | None]) -> None:
        written: asyncio.Future[None] = await ask(control, Publish(records))
        await written

    async def open(self, apply: Apply) -> Stored:
        cluster, runtime = self.runtime.config.cluster, self.runtime
        await self.close()  # what an earlier incarnation (or attempt) left: read anew
        broker = cluster.broker or runtime.config.brokers[0].name
        unapplied = runtime.metrics.counter(
            "hookstream_subscription_records_unapplied_total",
            "Records of the subscriptions topic this instance could not apply (retries "
            "included)").labels(topic=self.topic)
        self._log = SubscriptionLog(runtime.bootstrap(broker), self.topic,
                                    replication_factor=cluster.replication_factor,
                                    client_settings=runtime.consumer_settings(broker),
                                    clock=runtime.clock, on_unapplied=unapplied.inc)
        self._unopened.clear()
        await self._log.start(self._opening(apply))  # all applied before we are ready
        self._problem = None
        return Stored()

    def _opening(self, apply: Apply) -> Apply:
        """`apply` given plain documents: sealed secrets opened (cluster/sealed.py). A
        subscription whose secrets do not open is not applied (it would run without
        them): the log and `problem` say why until a record of its key opens."""
        async def opened(key: str, value: bytes | None) -> None:
            if value is not None and not key.startswith((PAUSED_PREFIX, DISABLED_PREFIX)):
                try:
                    value = opened_value(value, self._keys)
                except Unsealable as exc:
                    self._unopened[key] = str(exc)
                    log.error("subscription %s in topic %s does not run here: its secrets "
                              "cannot be opened: %s", key, self.topic, exc)
                    return
                self._warn_clear(key, value)
            self._unopened.pop(key, None)
            await apply(key, value)
        return opened

    def _warn_clear(self, key: str, value: bytes) -> None:
        fields = clear_in(value)
        if fields:
            log.warning("subscription %s: %s in clear in topic %s (%s)", key,
                        ", ".join(fields), self.topic,
                        "a PUT of it seals them" if self._keys
                        else "set [cluster] secrets_key to seal them")

    @property
    def problem(self) -> str | None:
        unopened = [f"subscription {key} does not run: its secrets cannot be opened "
                    f"({why})" for key, why in sorted(self._unopened.items())]
        unapplied = self._log.unapplied_problem if self._log is not None else None
        return "; ".join(([self._problem] if self._problem else []) + unopened
                         + ([unapplied] if unapplied else [])) or None

    def failed(self, exc: Exception, attempt: int) -> bool:
        """The broker is away (down at boot) or refuses us: it may come back (#25)."""
        if self._log is None:
            return False  # not even built: the config is wrong
        self._problem = self._log.failed(exc, attempt)
        return True

    async def follow(self, apply: Apply) -> None:
        assert self._log is not None
        await self._log.follow(self._opening(apply))

    async def close(self) -> None:
        subscription_log, self._log = self._log, None
        if subscription_log is not None:
            await subscription_log.stop()

    def check_name(self, key: str) -> None:
        return None  # a key of the topic, not a file

    def save(self, consumer: Consumer) -> asyncio.Future[None]:
        stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stored.set_result(None)  # the topic is the record
        return stored

    async def delete(self, *keys: str) -> None:
        return None

    async def keep_flags(self, paused: list[str], disabled: dict[str, str]) -> None:
        return None  # pauses live in the subscriptions topic

    async def disabled(self, key: str, reason: str) -> None:
        await self.publish(((DISABLED_PREFIX + key, reason.encode()),))

    async def publish(self, records: tuple[tuple[str, bytes | None], ...]) -> None:
        if self._log is None or not self._log.ready:
            raise SubscriptionStartFailed(
                f"topic {self.topic} not reachable",
                self._problem or "this instance is starting or stopping")
        for key, value in records:
            await self._log.write(key, value)

    def __repr__(self) -> str:
        return f"<ClusterTopic {self.topic}>"
