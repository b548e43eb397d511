"""A synthetic journal with known faults, for tests, benchmarks and documentation charts.

Deterministic: the same `SyntheticJournal` gives the same events. Records of every
subscription flow through `fetched -> sent -> delivered` at `rate_per_s`;
some first attempts fail and are retried, during the `outage` the last subscription's
endpoint fails until the outage ends, some records are dead-lettered, the chosen
`lost` records are fetched and never finished, the chosen `duplicates` are delivered twice,
and, when `crash_partition` is set, that partition actor crashes once after fetching
`crash_inflight` records, which are fetched again and delivered after the restart (so
they are not lost). `delay_forwards` adds delay-queue forwards with some lateness.
`replayed` and `replay_failed` name dead-lettered records that a replay (`REPLAY_ID`)
pushes again at the end, delivering or failing them as actors/delivery/path/replay.py journals.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from runtime.host.journal import Event, EventType

RecordId = tuple[str, int, int]  # (subscription, partition, offset)
REPLAY_ID = "r-0001"


class _Record(NamedTuple):
    subscription: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class SyntheticJournal:
    subscriptions: tuple[str, ...] = ("orders-hook", "audit-hook")
    topic: str = "orders"
    partitions: int = 4
    records_per_partition: int = 100
    start_ms: int = 1_700_000_000_000
    rate_per_s: float = 2_000.0
    fail_every: int = 25  # every Nth record's first attempt fails with a 503
    dead_letter_every: int = 0  # every Nth record fails for good (0: never)
    outage: tuple[float, float] | None = None  # (from, to) as fractions of the run
    commit_every: int = 50
    lost: frozenset[RecordId] = field(default_factory=frozenset)
    duplicates: frozenset[RecordId] = field(default_factory=frozenset)
    crash_partition: tuple[str, int] | None = None
    crash_inflight: int = 5
    delay_forwards: int = 0  # delay_forwarded events spread over the run
    replayed: frozenset[RecordId] = field(default_factory=frozenset)
    replay_failed: frozenset[RecordId] = field(default_factory=frozenset)

    def endpoint(self, subscription: str) -> str:
        return f"http://127.0.0.1:9000/{subscription}"

    def events(self) -> Iterator[Event]:
        yield from self._startup()
        n = self.records_per_partition
        for offset in range(n):
            for partition in range(self.partitions):
                for sub in self.subscriptions:
                    yield from self._record(sub, partition, offset)
                    if (offset + 1) % self.commit_every == 0 or offset == n - 1:
                        yield self._commit(sub, partition, offset + 1)
        yield from self._delay_forwards()
        yield from self._replays()
        yield from self._shutdown()

    def _time(self, sub: str, partition: int, offset: int) -> int:
        index = (offset * self.partitions + partition) * len(self.subscriptions)
        index += self.subscriptions.index(sub)
        return self.start_ms + int(index * 1000 / (self.rate_per_s * len(self.subscriptions)))

    def _outage_end_ms(self, sub: str, offset: int) -> int | None:
        """When the outage this record runs into ends (None: no outage for it)."""
        if self.outage is None or sub != self.subscriptions[-1]:
            return None
        n = self.records_per_partition
        if not self.outage[0] <= offset / max(1, n) < self.outage[1]:
            return None
        return self._time(sub, 0, math.ceil(self.outage[1] * n))

    def _event(self, type_: EventType, ts_ms: int, rec: _Record, **fields: Any) -> Event:
        return Event(type=type_, ts_ms=ts_ms, subscription=rec.subscription, topic=self.topic,
                     partition=rec.partition, offset=rec.offset, **fields)

    def _record(self, sub: str, partition: int, offset: int) -> Iterator[Event]:
        t = self._time(sub, partition, offset)
        if self.crash_partition == (sub, partition) and offset == self.records_per_partition // 2:
            yield from self._crash(sub, partition, offset, t)
        rec = _Record(sub, partition, offset)
        yield self._event("fetched", t, rec, record_ts_ms=t - 5 - offset % 20)
        if (sub, partition, offset) in self.lost:
            return
        endpoint = self.endpoint(sub)
        yield from self._attempts(t, rec, endpoint, self._outage_end_ms(sub, offset))
        if (sub, partition, offset) in self.duplicates:
            yield self._event("delivered", t + 900, rec, endpoint=endpoint, attempt=1,
                              status=200, latency_ms=4.0)

    def _attempts(
        self, t: int, rec: _Record, endpoint: str, outage_end_ms: int | None
    ) -> Iterator[Event]:
        offset = rec.offset
        latency = 2.0 + (offset * 7919) % 50 / 10
        sent = t + 2 + offset % 3
        doomed = self.dead_letter_every > 0 and offset % self.dead_letter_every == 7
        attempt = 1
        if outage_end_ms is not None or doomed or offset % self.fail_every == 3:
            yield self._event("sent", sent, rec, endpoint=endpoint, attempt=1, fetched_ts_ms=t)
            done = sent + int(latency)
            yield self._event("failed", done, rec, endpoint=endpoint, attempt=1, status=503,
                              latency_ms=latency)
            yield self._event("retry_scheduled", done, rec, endpoint=endpoint, attempt=2)
            # retried after 200 ms, or after the outage (spread over 2 s as backoff would)
            retry_ms = sent + 200 if outage_end_ms is None else outage_end_ms + offset * 7 % 2000
            sent, attempt = max(sent + 200, retry_ms), 2
        if doomed:
            yield self._event("dead_lettered", sent, rec, endpoint=endpoint, attempt=2,
                              reason="retries exhausted", status=500,
                              response='{"error": "ledger locked"}')
            return
        yield self._event("sent", sent, rec, endpoint=endpoint, attempt=attempt,
                          fetched_ts_ms=t)
        yield self._event("delivered", sent + int(latency), rec, endpoint=endpoint,
                          attempt=attempt, status=200, latency_ms=latency)

    def _crash(self, sub: str, partition: int, offset: int, t: int) -> Iterator[Event]:
        """Fetch a few records, crash before dispatching them, restart."""
        actor = f"partition:{sub}:{self.topic}-{partition}"
        for ahead in range(offset, offset + self.crash_inflight):
            yield self._event("fetched", t, _Record(sub, partition, ahead), record_ts_ms=t - 5)
        yield Event(type="actor_crashed", ts_ms=t + 1, actor=actor, reason="RuntimeError")
        yield Event(type="actor_restarted", ts_ms=t + 2, actor=actor)

    def _commit(self, sub: str, partition: int, next_offset: int) -> Event:
        return Event(type="committed", ts_ms=self._time(sub, partition, next_offset - 1) + 5,
                     subscription=sub, topic=self.topic, partition=partition,
                     offset=next_offset, actor=f"consumer:{sub}")

    def _delay_forwards(self) -> Iterator[Event]:
        span_ms = self._end_ms() - self.start_ms
        for i in range(self.delay_forwards):
            ts_ms = self.start_ms + i * span_ms // self.delay_forwards
            yield Event(type="delay_forwarded", ts_ms=ts_ms, topic="delay.5s", partition=i % 4,
                        offset=i // 4, lateness_ms=(i * 37) % 200 / 10)

    def _replays(self) -> Iterator[Event]:
        t = self._end_ms()
        for sub, partition, offset in sorted(self.replayed | self.replay_failed):
            rec, t = _Record(sub, partition, offset), t + 10
            ok = (sub, partition, offset) in self.replayed
            endpoint = self.endpoint(sub)
            yield self._event("sent", t, rec, endpoint=endpoint, attempt=1)
            yield self._event("delivered" if ok else "failed", t + 3, rec, endpoint=endpoint,
                              attempt=1, status=200 if ok else 500, latency_ms=3.0)
            outcome = "delivered again" if ok else "failed after 1 attempts"
            yield self._event("replayed", t + 3, rec, attempt=1,
                              reason=f"{REPLAY_ID}: {outcome}")

    def _end_ms(self) -> int:
        return self._time(self.subscriptions[-1], self.partitions - 1, self.records_per_partition)

    def _startup(self) -> Iterator[Event]:
        for sub in self.subscriptions:
            yield Event(type="actor_started", ts_ms=self.start_ms, actor=f"consumer:{sub}")
            for partition in range(self.partitions):
                actor = f"partition:{sub}:{self.topic}-{partition}"
                yield Event(type="actor_started", ts_ms=self.start_ms, actor=actor)
                yield Event(type="partition_assigned", ts_ms=self.start_ms, actor=actor,
                            subscription=sub, topic=self.topic, partition=partition)

    def _shutdown(self) -> Iterator[Event]:
        end = self._end_ms()
        for sub in self.subscriptions:
            for partition in range(self.partitions):
                actor = f"partition:{sub}:{self.topic}-{partition}"
                yield Event(type="partition_revoked", ts_ms=end, actor=actor,
                            subscription=sub, topic=self.topic, partition=partition)
                yield Event(type="actor_stopped", ts_ms=end, actor=actor)
            yield Event(type="actor_stopped", ts_ms=end, actor=f"consumer:{sub}")
