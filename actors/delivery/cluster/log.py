"""Cluster mode: the subscriptions live in a compacted Kafka topic that every instance
reads and follows (Kafka Connect's distributed mode keeps its configuration the same way).

Records: key `<id>_<group.id>`, value the subscription document (a tombstone on
unsubscribe); key `paused:<id>_<group.id>`, value `true` while paused (a tombstone on
resume); key `disabled:<id>_<group.id>`, value the reason, once an endpoint answered 410
Gone (a tombstone on resume). One partition, so every instance sees every change in the
same order: the last write of a key wins everywhere.

`SubscriptionLog.start(apply)` reads the topic from the beginning to its end (the high
watermark at that moment), applying the last record of each key, and only then returns,
so an instance is not ready before it knows every subscription; then its owner runs
`follow(apply)` as a task it owns (an actor's `spawn`), so a failure of the follower
crashes that actor and reaches its supervisor.
`write()` returns once the broker acknowledged the record (acks=all) *and* this instance's
follower applied it: an admin call answers when the change is in force here.

A record that cannot be applied (its document no longer decodes here, the control actor
refused it) is kept by key in `unapplied`, counted (`unapplied_total`), said in
`problem` (so `/readyz` and the cluster view show it) and applied again by the follower
after `RETRY`'s backoff, until it applies or a later record of its key replaces it (#34:
it was skipped with one log line, and the instance differed from the others until it
restarted).

When the broker cannot be reached (down at boot), `start` fails and closes what it
opened; its owner (an actor) tries again on a timer message after `RETRY`'s backoff, as
subscriptions stored in files wait for their broker (#25). Meanwhile `problem` says why
(for `/readyz`, see `failed`) and `write()` raises `SubscriptionStartFailed` (a 503):
nothing is known of the cluster's subscriptions yet, and nothing is lost by waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from actors.delivery.errors import SubscriptionStartFailed
from runtime.kafka import create_topics, make_consumer, make_producer
from runtime.kernel.backoff import Backoff, RestartBackoff
from runtime.kernel.clock import Clock, RealClock

log = logging.getLogger(__name__)
PAUSED_PREFIX = "paused:"
DISABLED_PREFIX = "disabled:"
CATCH_UP_ROUNDS = 300  # x 200 ms fetches
Apply = Callable[[str, bytes | None], Awaitable[None]]
RETRY: Final = Backoff(initial_ms=500, multiplier=2.0, max_ms=15_000, jitter=0.2)
"""Between attempts to reach the topic while the broker is away."""


@dataclass(slots=True)
class Unapplied:
    """A record that could not be applied: the latest of its key, retried."""

    value: bytes | None
    offset: int
    why: str
    retry_at_ms: int
    backoff: RestartBackoff = field(default_factory=lambda: RestartBackoff(RETRY))


class SubscriptionLog:
    def __init__(self, bootstrap: str, topic: str, *, replication_factor: int = 1,
                 client_settings: dict[str, object] | None = None,
                 clock: Clock | None = None,
                 on_unapplied: Callable[[], None] | None = None) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.clock: Clock = clock or RealClock()
        self.on_unapplied = on_unapplied  # counts each failure (a metric)
        self.unapplied: dict[str, Unapplied] = {}
        self.unapplied_total = 0  # records that failed to apply, retries included
        self.replication_factor = replication_factor
        self.client_settings = dict(client_settings or {})
        self._tp = TopicPartition(topic, 0)
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._applied = -1  # the offset of the last record applied
        self._read = -1  # during the catch-up: the offset of the last record read
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._caught_up = False
        self.problem: str | None = None
        """Why the topic is not read yet (None: it is, or it was never started)."""

    @property
    def ready(self) -> bool:
        """Read to its end once (and followed since, by its owner)."""
        return self._caught_up

    def failed(self, exc: BaseException, attempt: int) -> str:
        """Note that `start` failed for the `attempt`-th time; the problem, logged."""
        self.problem = f"cannot read topic {self.topic} yet ({attempt} attempts): {exc!r}"
        log.log(logging.WARNING if attempt == 1 or attempt % 10 == 0 else logging.INFO,
                "subscription log %s: %s; retrying", self.topic, self.problem)
        return self.problem

    async def start(self, apply: Apply) -> None:
        """Read the topic to its end; on failure nothing stays open."""
        try:
            await self._start(apply)
        except BaseException:
            await self._close_clients()
            raise
        if self.problem is not None:
            log.info("subscription log %s: reached", self.topic)
        self.problem = None
        self._caught_up = True

    async def _start(self, apply: Apply) -> None:
        self._applied = self._read = -1  # from the beginning (again, after a failure)
        self.unapplied.clear()  # read anew
        await create_topics(self.bootstrap, {self.topic: 1},
                            replication_factor=self.replication_factor,
                            configs={"cleanup.policy": "compact"})
        self._producer = make_producer(self.bootstrap, acks="all")
        await self._producer.start()
        self._consumer = make_consumer(self.bootstrap, enable_auto_commit=False,
                                       **self.client_settings)
        await self._consumer.start()
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)
        await self._catch_up(self._consumer, apply)

    async def _catch_up(self, consumer: AIOKafkaConsumer, apply: Apply) -> None:
        """Apply everything written before we started: up to the high watermark of the
        first fetch response (the embedded broker's ListOffsets is not to be trusted).
        Only the last record of each key is applied, as compaction would leave it (in the
        order of those last records): a subscription posted then updated starts once with
        its latest settings, instead of starting and restarting (a needless rebalance of
        its group on every instance start)."""
        end: int | None = None
        latest: dict[str, bytes | None] = {}
        for _ in range(CATCH_UP_ROUNDS):
            read = await self._read_batch(consumer, timeout_ms=200)
            for key, value, offset in read:
                latest.pop(key, None)  # re-inserted last: dicts keep insertion order
                latest[key] = value
                self._read = offset
            end = consumer.highwater(self._tp) if end is None else end
            if end is not None and self._read + 1 >= end:
                for key, value in latest.items():
                    await self._apply_one(apply, key, value, self._read)
                self._applied = self._read
                log.info("subscription log %s read to offset %d (%d keys)", self.topic, end,
                         len(latest))
                return
        raise TimeoutError(f"subscription log {self.topic}: could not read to its end")

    async def _read_batch(self, consumer: AIOKafkaConsumer,
                          timeout_ms: int) -> list[tuple[str, bytes | None, int]]:
        batches = await consumer.getmany(self._tp, timeout_ms=timeout_ms)
        return [(m.key.decode() if m.key else "", m.value, m.offset)
                for m in batches.get(self._tp, [])]

    async def _apply_one(self, apply: Apply, key: str, value: bytes | None,
                         offset: int) -> None:
        earlier = self.unapplied.pop(key, None)  # a later record of its key replaces it
        try:
            await apply(key, value)
        except Exception as exc:  # a record we cannot apply must not stop the follower
            self._failed(key, value, offset, exc, earlier if earlier is not None
                         and earlier.offset == offset else None)
            return
        if earlier is not None:
            log.info("subscription log %s: %r applied now (offset %d)", self.topic, key,
                     offset)

    def _failed(self, key: str, value: bytes | None, offset: int, exc: Exception,
                retried: Unapplied | None) -> None:
        self.unapplied_total += 1
        if self.on_unapplied is not None:
            self.on_unapplied()
        kept = retried or Unapplied(value, offset, "", 0)
        delay = kept.backoff.failed()
        kept.why, kept.retry_at_ms = repr(exc), self.clock.monotonic_ms() + delay
        self.unapplied[key] = kept
        if retried is None:
            log.exception("subscription log %s: cannot apply %r at offset %d; retrying in "
                          "%.1f s", self.topic, key, offset, delay / 1000)
        else:
            log.warning("subscription log %s: still cannot apply %r at offset %d (%d "
                        "attempts): %r", self.topic, key, offset, kept.backoff.failures, exc)

    async def _retry_due(self, apply: Apply) -> None:
        """Apply again the unapplied records whose backoff has passed."""
        now = self.clock.monotonic_ms()
        for key, kept in [(k, u) for k, u in self.unapplied.items() if u.retry_at_ms <= now]:
            if self.unapplied.get(key) is kept:  # not replaced meanwhile
                await self._apply_one(apply, key, kept.value, kept.offset)

    @property
    def unapplied_problem(self) -> str | None:
        """The records this instance could not apply (None: it applied every one)."""
        if not self.unapplied:
            return None
        return "; ".join(f"record {key!r} (offset {u.offset}) of topic {self.topic} not "
                         f"applied ({u.backoff.failures} attempts, retrying): {u.why}"
                         for key, u in sorted(self.unapplied.items()))

    async def follow(self, apply: Apply) -> None:
        """Apply what is written after `start`, until cancelled. An error of the client
        ends it (its owner crashes and is restarted by its supervisor)."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError(f"{self!r}: start() it before follow()")
        while True:
            await self._apply_batch(consumer, apply, timeout_ms=500)
            if self.unapplied:
                await self._retry_due(apply)

    async def _apply_batch(self, consumer: AIOKafkaConsumer, apply: Apply,
                           timeout_ms: int) -> None:
        for key, value, offset in await self._read_batch(consumer, timeout_ms):
            await self._apply_one(apply, key, value, offset)
            self._applied = offset
        self._wake()

    def _wake(self) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for offset, waiter in self._waiters:
            if offset <= self._applied:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((offset, waiter))
        self._waiters = still

    async def put(self, key: str, value: bytes | None) -> int:
        """Write a record (None: a tombstone); return its offset once the broker has it,
        without waiting for the follower (a last word before stopping)."""
        if self._producer is None or not self.ready:
            raise SubscriptionStartFailed(f"topic {self.topic} not reachable",
                                          self.problem or "not read yet: try again")
        meta = await self._producer.send_and_wait(self.topic, value, key=key.encode())
        return int(meta.offset)

    async def write(self, key: str, value: bytes | None) -> None:
        """Write a record (None: a tombstone); return once it is applied here too."""
        offset = await self.put(key, value)
        if offset <= self._applied:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, waiter))
        await waiter

    async def stop(self) -> None:
        """Close the clients (the owner cancelled `follow` before)."""
        for waiter in (w for _, w in self._waiters):
            waiter.cancel()
        self._caught_up = False
        await self._close_clients()

    async def _close_clients(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self._consumer = self._producer = None

    def __repr__(self) -> str:
        return f"<SubscriptionLog {self.topic} applied={self._applied}>"
