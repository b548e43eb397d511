"""Delay queue: forwarding throughput of one level-topic partition, and lateness under load.

    .venv/bin/python bench/delay.py [--records 30000] [--rate 5000] [--seconds 10]
                                    [--bootstrap HOST:PORT] [--no-uvloop]

Without `--bootstrap` an embedded broker (Tansu) is started for the run.

1. Throughput. A level topic with one partition is pre-filled with `--records` records
   that are already due (`delay-due-ms` in the past), for values of 10 bytes and 2 KB.
   Then each contender moves them all to a target topic:
   - `bare`: an aiokafka loop, `getmany` -> `send` each record (target from the header,
     routing headers dropped) -> await the acks -> commit, the least a forwarder must do;
     the acks of one batch are awaited while the next one is sent;
   - `bare-batch`: the same loop producing with `create_batch`/`send_batch` (one batch per
     target partition), the trick the runtime uses for bursts;
   - `bare-eos`: the `bare` loop, one transaction per batch with `send_offsets_to_transaction`;
   - `runtime`: the DelayService (consumer actor, delay actor, timer wheel, acks=all);
   - `runtime-eos`: the same level with `exactly_once = true`.
   Rate = records / time from the moment the partition is assigned (the runtime's
   `partition_assigned` event; for the bare loops, after `assign()` and client start-up)
   to the last acknowledgement (or transaction commit): group joins and client start-up
   are left out of every contender alike, the first fetch is in.
2. Lateness. A separate process produces `--rate` records/s for `--seconds` with
   `delay_ms=1000` through `DelayProducer`; the runtime forwards them. Lateness is what
   the delay actor records: wall ms when the forward is handed to the producer minus the
   due ms (the `hookstream_delay_lateness_ms` histogram and the journal's `lateness_ms`).
   Also reported: records forwarded early (must be 0), and the floor the machine allows:
   a bare `asyncio.sleep(1 ms)` loop in the same process measures how late this process
   wakes up at all (scheduler, other processes, GC); its samples are weighted by time so
   they compare with records that fall due at any moment.

Everything runs on loopback; the broker shares the machine's cores with the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from aiokafka import TopicPartition

from actors.delay.book import DELAY_TARGET, forward_headers, routing_headers
from actors.delay.service import DelayService
from runtime.host.app import Runtime
from runtime.host.config import Config, parse_config
from runtime.host.journal import Event
from runtime.kafka import create_topics, make_consumer, make_producer
from runtime.kafka.broker import EmbeddedBroker

GROUP_SETTINGS = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}
RUN_TIMEOUT_S = 120


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _uid() -> str:
    return uuid.uuid4().hex[:8]


async def until(condition: Callable[[], bool], timeout_s: float) -> None:
    """Poll a condition (bounded in count and time)."""
    for _ in range(int(timeout_s * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"not done within {timeout_s}s")


class Collector:
    """Stands in for the journal: keeps forward events with the time they arrived."""

    def __init__(self) -> None:
        self.assigned = 0.0
        self.first: float | None = None
        self.last = 0.0
        self.count = 0
        self.lateness: list[float] = []

    def emit(self, event: Event) -> None:
        if event.type == "partition_assigned":
            self.assigned = time.perf_counter()
        if event.type != "delay_forwarded":
            return
        now = time.perf_counter()
        self.first = now if self.first is None else self.first
        self.last = now
        self.count += 1
        self.lateness.append(event.lateness_ms or 0.0)

    async def stop(self) -> None:
        return None


# -- setup -------------------------------------------------------------------------------


async def prefill(bootstrap: str, level_topic: str, target: str, count: int,
                  size: int) -> None:
    """`count` records on partition 0 of `level_topic`, all due a second ago."""
    producer = make_producer(bootstrap, acks="all", linger_ms=5,
                             max_batch_size=1024 * 1024)
    await producer.start()
    try:
        value = b"x" * size
        headers = [("trace", b"abc"), *routing_headers(target, _now_ms() - 1000)]
        acks = [await producer.send(level_topic, value, key=b"k%d" % (i % 1000),
                                    headers=headers, partition=0) for i in range(count)]
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


def level_config(bootstrap: str, topic: str, delay_ms: int, exactly_once: bool) -> Config:
    return parse_config({
        "brokers": [{"name": "bench", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "journal": {"enabled": False},
        "delay": {"group_id": f"bench-{_uid()}", "partitions": 1,
                  "dead_letter_topic": f"bench-dlt-{_uid()}",
                  "levels": [{"name": "bench", "delay_ms": delay_ms, "topics": [topic],
                              "exactly_once": exactly_once}]},
    })


# -- contenders ----------------------------------------------------------------------------


async def run_runtime(bootstrap: str, topic: str, count: int, exactly_once: bool) -> float:
    runtime = Runtime(level_config(bootstrap, topic, 1000, exactly_once),
                      services=[lambda: DelayService(consumer_settings=GROUP_SETTINGS)])  # type: ignore[list-item]
    collector = Collector()
    runtime.journal = collector  # type: ignore[assignment]
    async with runtime:
        await until(lambda: collector.count >= count, RUN_TIMEOUT_S)
    return collector.count / (collector.last - collector.assigned)


async def run_bare(bootstrap: str, topic: str, count: int, exactly_once: bool,
                   batched: bool = False) -> float:
    group = f"bare-{_uid()}"
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    consumer.assign([tp])
    settings: dict[str, Any] = {"acks": "all", "max_batch_size": 256 * 1024}
    if exactly_once:
        settings |= {"transactional_id": f"bare-{_uid()}", "enable_idempotence": True}
    producer = make_producer(bootstrap, **settings)
    await consumer.start()
    await producer.start()
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            return await _bare_loop(consumer, producer, tp, group, count, exactly_once,
                                    batched)
    finally:
        await producer.stop()
        await consumer.stop()


async def _bare_loop(consumer: Any, producer: Any, tp: TopicPartition, group: str,
                     count: int, exactly_once: bool, batched: bool) -> float:
    """At-least-once: batch i is sent while batch i-1's acks are awaited and committed
    (two batches in flight, as the runtime pipelines). Exactly-once: one transaction per
    batch, one at a time."""
    done, start, last = 0, time.perf_counter(), 0.0
    pending: tuple[list[Any], int, int] | None = None
    while done < count:
        batches = await consumer.getmany(timeout_ms=100, max_records=2000)
        records = [r for rs in batches.values() for r in rs]
        current = await _bare_forward(consumer, producer, tp, group, records, exactly_once,
                                      batched)
        if exactly_once:
            pending, current = current, None
        if pending is not None:
            acks, position, n = pending
            await asyncio.gather(*acks)
            if not exactly_once:
                await consumer.commit({tp: position})
            last = time.perf_counter()
            done += n
        pending = current
    return done / (last - start)


async def _bare_send_each(producer: Any, records: list[Any]) -> list[Any]:
    acks = []
    for r in records:
        target = dict(r.headers)[DELAY_TARGET].decode()
        acks.append(await producer.send(target, r.value, key=r.key,
                                        headers=forward_headers(r.headers)))
    return acks


async def _bare_send_batches(producer: Any, records: list[Any]) -> list[Any]:
    """One BatchBuilder per target partition (the bench's targets have one partition)."""
    acks: list[Any] = []
    batches: dict[str, Any] = {}
    for r in records:
        target = dict(r.headers)[DELAY_TARGET].decode()
        batch = batches.get(target) or batches.setdefault(target, producer.create_batch())
        if batch.append(key=r.key, value=r.value, timestamp=None,
                        headers=forward_headers(r.headers)) is None:
            acks.append(await producer.send_batch(batch, target, partition=0))
            batch = batches[target] = producer.create_batch()
            batch.append(key=r.key, value=r.value, timestamp=None,
                         headers=forward_headers(r.headers))
    for target, batch in batches.items():
        acks.append(await producer.send_batch(batch, target, partition=0))
    return acks


async def _bare_forward(consumer: Any, producer: Any, tp: TopicPartition, group: str,
                        records: list[Any], exactly_once: bool, batched: bool
                        ) -> tuple[list[Any], int, int] | None:
    if not records:
        return None
    if exactly_once:
        await producer.begin_transaction()
    acks = await (_bare_send_batches if batched else _bare_send_each)(producer, records)
    position = records[-1].offset + 1
    if exactly_once:
        await producer.send_offsets_to_transaction({tp: position}, group)
        await producer.commit_transaction()
    return acks, position, len(records)


async def run_bare_batch(bootstrap: str, topic: str, count: int, exactly_once: bool) -> float:
    return await run_bare(bootstrap, topic, count, exactly_once, batched=True)


CONTENDERS = {"bare": (run_bare, False), "bare-batch": (run_bare_batch, False),
              "runtime": (run_runtime, False), "bare-eos": (run_bare, True),
              "runtime-eos": (run_runtime, True)}


async def throughput(bootstrap: str, count: int, names: list[str],
                     sizes: list[int]) -> list[tuple[str, int, float]]:
    rows: list[tuple[str, int, float]] = []
    for size in sizes:
        n = count if size <= 100 else max(count // 3, 1000)
        for name in names:
            runner, eos = CONTENDERS[name]
            topic, target = f"bench-level-{_uid()}", f"bench-target-{_uid()}"
            await create_topics(bootstrap, {topic: 1, target: 1})
            await prefill(bootstrap, topic, target, n, size)
            rate = await runner(bootstrap, topic, n, eos)
            rows.append((name, size, rate))
            print(f"  {name:12} {size:5d} B  {n:6d} records  {rate:9.0f} records/s",
                  flush=True)
    return rows


# -- lateness ----------------------------------------------------------------------------

_LOAD = """
import asyncio, sys, time
sys.path.insert(0, {repo!r})
from actors.delay.producer import DelayProducer
from runtime.host.config import DelayLevel

async def main(bootstrap, topic, target, rate, seconds):
    levels = [DelayLevel(name="bench", delay_ms=1000, topics=[topic])]
    async with DelayProducer(bootstrap, levels, linger_ms=1) as delay:
        start, sent, acks = time.monotonic(), 0, []
        while (elapsed := time.monotonic() - start) < seconds:
            for _ in range(int(elapsed * rate) - sent):
                acks.append(await delay.submit(target, b"x" * 100, delay_ms=1000))
                sent += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*acks)
    print(sent, time.monotonic() - start, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))
"""


@dataclass(frozen=True, slots=True)
class Lateness:
    sent: int
    produce_s: float
    forwarded: int
    p50: float
    p99: float
    max: float
    early: int
    probe_p50: float
    probe_p99: float
    probe_max: float
    cpu_s: float


async def wake_probe(samples: list[float]) -> None:
    """The floor: how late a bare `asyncio.sleep(1 ms)` wakes up in this process, while
    the runtime works beside it (scheduler and event-loop delays, GC pauses)."""
    for _ in range(1_000_000):  # bounded; cancelled when the run ends
        target = time.perf_counter() + 0.001
        await asyncio.sleep(0.001)
        samples.append((time.perf_counter() - target) * 1000)


def time_weighted(samples: list[float]) -> list[float]:
    """What a record due at a random moment would suffer from the same stalls: a wake-up
    l ms late means records due during those l ms waited l, l-1, ..., 0 ms (records are
    spread in time; probe samples are not: one sample per stall)."""
    out: list[float] = []
    for late in samples:
        out.extend(max(late - i, 0.0) for i in range(int(late) + 1))
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def lateness(bootstrap: str, rate: int, seconds: float) -> Lateness:
    topic, target = f"bench-lat-{_uid()}", f"bench-lat-target-{_uid()}"
    await create_topics(bootstrap, {topic: 1, target: 1})
    runtime = Runtime(level_config(bootstrap, topic, 1000, False),
                      services=[lambda: DelayService(consumer_settings=GROUP_SETTINGS)])  # type: ignore[list-item]
    collector = Collector()
    runtime.journal = collector  # type: ignore[assignment]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    async with runtime:
        service = runtime.delay
        await until(lambda: bool(service.assignment()), 30)
        probe_samples: list[float] = []
        probe = asyncio.create_task(wake_probe(probe_samples))
        load = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _LOAD.format(repo=str(Path(__file__).parent.parent)),
            bootstrap, topic, target, str(rate), str(seconds), stdout=subprocess.PIPE)
        out, _ = await load.communicate()
        sent_s, produce_s = out.decode().split()
        sent = int(sent_s)
        await until(lambda: collector.count >= sent, 30)
        probe.cancel()
        await asyncio.gather(probe, return_exceptions=True)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    values = collector.lateness
    floor = time_weighted(probe_samples)
    return Lateness(sent, float(produce_s), collector.count, statistics.median(values),
                    _pct(values, 0.99), max(values), sum(1 for v in values if v < 0),
                    statistics.median(floor), _pct(floor, 0.99), max(floor),
                    usage.ru_utime + usage.ru_stime - cpu0)


# -- main ----------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    broker: EmbeddedBroker | None = None
    bootstrap = args.bootstrap
    if not bootstrap:
        broker = EmbeddedBroker()
        await broker.start()
        bootstrap = broker.bootstrap
    try:
        print(f"broker {bootstrap} ({'embedded' if broker else 'external'}), "
              f"uvloop={not args.no_uvloop}")
        rows: list[tuple[str, int, float]] = []
        if args.only in ("", "throughput"):
            print("throughput, one level-topic partition:")
            rows = await throughput(bootstrap, args.records, args.contenders.split(","),
                                    [int(v) for v in args.sizes.split(",")])
        lat = None
        if args.only in ("", "lateness"):
            print("lateness:")
            lat = await lateness(bootstrap, args.rate, args.seconds)
    finally:
        if broker is not None:
            await broker.stop()
    report(rows, lat, args)


def report(rows: list[tuple[str, int, float]], lat: Lateness | None,
           args: argparse.Namespace) -> None:
    rates = {(name, size): rate for name, size, rate in rows}
    print("\n| contender | value | records/s | vs bare |\n|---|---|---|---|")
    for name, size, rate in rows:
        base = rates.get(("bare-eos" if name.endswith("eos") else "bare", size))
        ratio = f"{rate / base:.2f}" if base else "-"
        print(f"| {name} | {size} B | {rate:,.0f} | {ratio} |")
    if lat is None:
        return
    print(f"\nlateness at {lat.sent / lat.produce_s:,.0f} records/s for {lat.produce_s:.1f} s "
          f"({lat.sent} sent, {lat.forwarded} forwarded): p50 {lat.p50:.0f} ms, "
          f"p99 {lat.p99:.0f} ms, max {lat.max:.0f} ms, early {lat.early}; "
          f"floor (sleep(1 ms) probe, time-weighted) p50 {lat.probe_p50:.1f} ms, "
          f"p99 {lat.probe_p99:.1f} ms, max {lat.probe_max:.1f} ms; "
          f"runtime process CPU {lat.cpu_s:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(json.dumps({"throughput": rows, "lateness": asdict(lat)}))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=30_000,
                        help="records per throughput run (2 KB runs use a third)")
    parser.add_argument("--rate", type=int, default=5000, help="lateness load, records/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="lateness load duration")
    parser.add_argument("--bootstrap", default="", help="an existing Kafka instead of Tansu")
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument("--only", choices=("throughput", "lateness"), default="")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--sizes", default="10,2048", help="value sizes in bytes")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.no_uvloop:
        asyncio.run(main(arguments))
    else:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main(arguments))
