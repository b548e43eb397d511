"""In-process handlers (`Runtime.consume`, issue 18) against plain aiokafka loops that do
the same work.

    .venv/bin/python bench/inprocess.py [--records 20000] [--partitions 4]
        [--concurrency 100] [--work-ms 5] [--serial-seconds 10] [--orderings none,key]
        [--rounds 1] [--journal on|off] [--timeout-s 120]

Everything runs on loopback, started by this script and stopped at the end: the embedded
broker (Tansu) and, in this process on uvloop, the contenders one after another. The
work per record is `await asyncio.sleep(work_ms / 1000)` (a handler waiting on I/O).

`--records` records of 100 bytes, keyed `k<i mod 1000>`, are produced to a new topic with
`--partitions` partitions before anything is timed (key `k<j>` always lands on partition
`j mod partitions`). Each contender reads that backlog from the beginning in its own
consumer group and commits as it goes:

- `bare-serial`: `getmany()`, then `await work(record)` for each record in turn, then
  `commit()`: a Python service's usual loop. It needs `records x work_ms` (100 s for
  20,000 x 5 ms), so it stops after `--serial-seconds`; its rate is what it did by then.
- `bare-gather`: `getmany(max_records=partitions x concurrency)`, `gather` the work of the
  whole batch, `commit()`: the same in-flight bound as the runtime's windows.
- `bare-gather-all`: the same with aiokafka's default `getmany()`: everything fetched at
  once (up to 1 MiB per partition) is in flight together.
- `runtime`: `runtime.consume(group, handler, topics=[topic], concurrency=C,
  ordering=...)` for each `--orderings` mode (`key` uses `lanes = concurrency`); the
  runtime as the product runs it: journal on (unless `--journal off`), gc frozen after
  start, uvloop.

Timing: from the first record handed to the work to the last one done (group joins are
not timed). CPU: this process's CPU time during that interval, per record (the broker
runs in its own process and is not counted). `fetch.max.wait.ms` is 10 ms everywhere:
Tansu holds a fetch for the whole wait (see bench/delivery.py).

Every loop is bounded in count and in time (`--timeout-s`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import aiokafka
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from actors.delivery.egress.handler import ConsumedRecord
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import create_topics, make_consumer, make_producer
from runtime.kafka.broker import EmbeddedBroker

SIZE = 100
Ordering = Literal["none", "partition", "key"]
KEYS = 1000
FETCH_MAX_WAIT_MS = 10


@dataclass
class Result:
    name: str
    records: int
    seconds: float
    cpu_s: float
    notes: str = ""

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.records * 1e6 if self.records else 0.0


class Clock:
    """From the first record started to the last one done, with this process's CPU;
    `over` once `limit_s` passed since the first record."""

    def __init__(self, limit_s: float = float("inf")) -> None:
        self.limit_s = limit_s
        self.first: float | None = None
        self.last = 0.0
        self.cpu_first = 0.0
        self.cpu_last = 0.0
        self.done = 0

    def started(self) -> None:
        if self.first is None:
            self.first, self.cpu_first = time.monotonic(), time.process_time()

    @property
    def over(self) -> bool:
        return self.first is not None and time.monotonic() - self.first >= self.limit_s

    def finished(self, count: int = 1) -> None:
        self.done += count
        self.last, self.cpu_last = time.monotonic(), time.process_time()

    def result(self, name: str, notes: str = "") -> Result:
        seconds = self.last - self.first if self.first is not None else 0.0
        return Result(name, self.done, seconds, self.cpu_last - self.cpu_first, notes)


# -- the backlog ------------------------------------------------------------------------------
async def produce_backlog(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = make_producer(bootstrap, acks="all", linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for first in range(0, count, 5000):
            futures = [await producer.send(topic, f"{i:012d}".encode().ljust(SIZE, b"."),
                                           key=b"k%d" % (i % KEYS), partition=i % partitions)
                       for i in range(first, min(first + 5000, count))]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


# -- the bare loops ---------------------------------------------------------------------------
Step = Callable[[aiokafka.AIOKafkaConsumer, Clock], Awaitable[None]]


async def bare_loop(name: str, bootstrap: str, topic: str, total: int, step: Step,
                    limit_s: float) -> Result:
    consumer = make_consumer(bootstrap, topic, group_id=f"{name}-{uuid.uuid4().hex[:8]}",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=FETCH_MAX_WAIT_MS)
    await consumer.start()
    clock = Clock(limit_s)
    try:
        while clock.done < total and not clock.over:
            await step(consumer, clock)
    finally:
        await consumer.stop()
    notes = "" if clock.done >= total else f"stopped after {limit_s:.0f} s"
    return clock.result(name, notes)


def serial(work: Callable[[], Awaitable[None]]) -> Step:
    async def step(consumer: aiokafka.AIOKafkaConsumer, clock: Clock) -> None:
        batches = await consumer.getmany(timeout_ms=100)
        done: dict[aiokafka.TopicPartition, int] = {}
        for tp, records in batches.items():
            for record in records:
                if clock.over:
                    break
                clock.started()
                await work()
                clock.finished()
                done[tp] = record.offset + 1
        if done:
            await consumer.commit({tp: offset for tp, offset in done.items()})

    return step


def gathered(work: Callable[[], Awaitable[None]], max_records: int | None) -> Step:
    async def step(consumer: aiokafka.AIOKafkaConsumer, clock: Clock) -> None:
        batches = await consumer.getmany(timeout_ms=100, max_records=max_records)
        records = [r for batch in batches.values() for r in batch]
        if not records:
            return
        clock.started()
        await asyncio.gather(*(work() for _ in records))
        clock.finished(len(records))
        await consumer.commit()

    return step


# -- the runtime -------------------------------------------------------------------------------
def runtime_config(bootstrap: str, workdir: Path, journal: bool) -> Any:
    return parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"enabled": journal, "dir": str(workdir / "journal")},
    })


async def runtime_run(bootstrap: str, topic: str, args: argparse.Namespace, ordering: str,
                      workdir: Path) -> Result:
    clock, everything = Clock(), asyncio.Event()
    work_s = args.work_ms / 1000

    async def handler(record: ConsumedRecord) -> None:
        clock.started()
        await asyncio.sleep(work_s)
        clock.finished()
        if clock.done >= args.records:
            everything.set()

    config = runtime_config(bootstrap, workdir / ordering, args.journal == "on")
    async with Runtime(config, services=[DeliveryService]) as runtime:
        consumer = await runtime.consume(
            f"runtime-{ordering}-{uuid.uuid4().hex[:8]}", handler, topics=[topic],
            ordering=cast(Ordering, ordering), concurrency=args.concurrency,
            lanes=args.concurrency,  # key mode: one lane per window slot (others ignore it)
            properties={"fetch.max.wait.ms": FETCH_MAX_WAIT_MS})
        try:
            await asyncio.wait_for(everything.wait(), args.timeout_s)
        finally:
            await consumer.stop()
    return clock.result(f"runtime, ordering={ordering}",
                        f"journal {args.journal}, lanes {args.concurrency}"
                        if ordering == "key" else f"journal {args.journal}")


# -- the benchmark ----------------------------------------------------------------------------
async def bench(args: argparse.Namespace, workdir: Path) -> list[Result]:
    broker = EmbeddedBroker()
    await broker.start()
    try:
        bootstrap = broker.bootstrap
        topic = f"bench-inprocess-{uuid.uuid4().hex[:8]}"
        await create_topics(bootstrap, {topic: args.partitions})
        await produce_backlog(bootstrap, topic, args.records, args.partitions)
        work_s = args.work_ms / 1000

        async def work() -> None:
            await asyncio.sleep(work_s)

        results: list[Result] = []
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}/{args.rounds}", flush=True)
            results.append(await bare_loop("bare-serial", bootstrap, topic, args.records,
                                           serial(work), args.serial_seconds))
            print(line(results[-1]), flush=True)
            in_flight = args.partitions * args.concurrency
            results.append(await bare_loop("bare-gather", bootstrap, topic, args.records,
                                           gathered(work, in_flight), args.timeout_s))
            results[-1].notes = f"max_records {in_flight}"
            print(line(results[-1]), flush=True)
            results.append(await bare_loop("bare-gather-all", bootstrap, topic, args.records,
                                           gathered(work, None), args.timeout_s))
            print(line(results[-1]), flush=True)
            for ordering in args.orderings.split(","):
                results.append(await runtime_run(bootstrap, topic, args, ordering, workdir))
                print(line(results[-1]), flush=True)
        return results
    finally:
        await broker.stop()


def line(result: Result) -> str:
    return (f"{result.name:28s} {result.records:7d} records {result.seconds:7.2f} s "
            f"{result.rate:9.0f} records/s {result.cpu_us:6.0f} us CPU/record  {result.notes}")


def table(results: list[Result], args: argparse.Namespace) -> str:
    serial_rate = next((r.rate for r in results if r.name == "bare-serial"), 0.0)
    rows = ["| contender | records | records/s | vs bare-serial | CPU us/record | notes |",
            "|---|---|---|---|---|---|"]
    for r in results:
        ratio = r.rate / serial_rate if serial_rate else 0.0
        rows.append(f"| {r.name} | {r.records:,} | {r.rate:,.0f} | {ratio:.1f} | "
                    f"{r.cpu_us:.0f} | {r.notes} |")
    head = (f"{datetime.date.today()}, {platform.python_version()}, aiokafka "
            f"{aiokafka.__version__}, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f}; work {args.work_ms} ms per record, concurrency "
            f"{args.concurrency} x {args.partitions} partitions")
    return head + "\n\n" + "\n".join(rows)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=100,
                        help="concurrency per partition (the runtime's window)")
    parser.add_argument("--work-ms", type=float, default=5.0,
                        help="asyncio.sleep per record")
    parser.add_argument("--serial-seconds", type=float, default=10.0,
                        help="how long bare-serial runs (it needs records x work-ms)")
    parser.add_argument("--orderings", default="none,key")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--journal", choices=("on", "off"), default="on")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="bench-inprocess-"))
    try:
        results = uvloop.run(bench(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(results, args))


if __name__ == "__main__":
    main(sys.argv[1:])
