"""Scale, quick form: one run of 1,024 partitions and N subscriptions (bench/scale.py:
the full one, case by case).

    .venv/bin/python bench/scale_quick.py [--partitions 1024] [--subscriptions 500]
        [--records-per-partition 20] [--timeout-s 300]

Everything on loopback, started here and stopped at the end (the embedded broker, the
receiver of bench/delivery.py, the runtime in this process on uvloop). Three phases:

1. baseline: one subscription on a topic of 4 partitions, `4 x --records-per-partition x
   --partitions / 4` records... i.e. the same record count as phase 2, so records/s and CPU
   per record compare directly.
2. partitions: one subscription on a topic of `--partitions` partitions, the same number
   of records spread over them. Resident memory before subscribing and once every
   partition delivered, divided by the partition count (memory per partition actor, with
   its metrics, book and lanes), records/s and CPU per record.
3. subscriptions: `--subscriptions` subscriptions (each its own group, on one topic of one
   partition, one record each), posted one after the other: the latency of each POST
   (p50, p99, max) with the others present; memory per subscription; then the runtime is
   stopped and started again on the same persistence directory and the time until every
   subscription delivered one more record is the start-up time.

Every phase is bounded by `--timeout-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from delivery import (
    CpuMeter,
    metric_total,
    produce_backlog,
    py_spy,
    receiver,
    running,
    subscribe,
    subscription,
)

from runtime.kafka import create_topics
from runtime.kafka.broker import EmbeddedBroker


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


async def wait_total(runtime: object, count: int, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while (delivered := metric_total(runtime, "hookstream_delivered_total")) < count:  # type: ignore[arg-type]
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {delivered:.0f} of {count} delivered in {timeout_s} s")
        await asyncio.sleep(0.01)
    return delivered


async def one_topic(bootstrap: str, url: str, partitions: int, records: int, workdir: Path,
                    pids: dict[str, int], timeout_s: float, profile: str = "") -> None:
    topic = f"scale-{partitions}-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, {topic: partitions})
    await produce_backlog(bootstrap, topic, records, partitions, 100)
    async with running(bootstrap, workdir, True) as runtime:
        before = rss_mb()
        meter = CpuMeter(pids)
        started = time.perf_counter()
        await subscribe(runtime, subscription(f"scale-{uuid.uuid4().hex[:8]}", topic, url, 100,
                                              fetch_max_wait_ms=10))
        with py_spy(profile or None):
            await wait_total(runtime, records, timeout_s)
        seconds = time.perf_counter() - started
        cpu = meter.used()
        after = rss_mb()
    print(f"{partitions:>5} partitions  {records:>7} records  {seconds:7.2f} s (join incl.)  "
          f"{records / seconds:8.0f} records/s  CPU {cpu['self'] * 1e6 / records:6.0f} "
          f"us/record  RSS {before:.0f} -> {after:.0f} MB  "
          f"{(after - before) * 1024 / partitions:.1f} KiB/partition")


async def many_subscriptions(bootstrap: str, url: str, count: int, workdir: Path,
                             timeout_s: float) -> None:
    topic = f"scale-subs-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, {topic: 1})
    await produce_backlog(bootstrap, topic, 1, 1, 100)
    latencies: list[float] = []
    async with running(bootstrap, workdir, True) as runtime:
        before = rss_mb()
        for i in range(count):
            started = time.perf_counter()
            await subscribe(runtime, subscription(f"g{i}", topic, url, 1))
            latencies.append(time.perf_counter() - started)
        await wait_total(runtime, count, timeout_s)
        after = rss_mb()
    latencies.sort()
    print(f"{count} subscriptions: subscribe p50 {statistics.median(latencies) * 1000:.0f} ms, "
          f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.0f} ms, max "
          f"{latencies[-1] * 1000:.0f} ms; RSS {before:.0f} -> {after:.0f} MB, "
          f"{(after - before) * 1024 / count:.0f} KiB/subscription")
    await produce_backlog(bootstrap, topic, 1, 1, 100)
    started = time.perf_counter()
    async with running(bootstrap, workdir, True) as runtime:
        ready = time.perf_counter() - started
        await wait_total(runtime, count, timeout_s)
        print(f"start-up with {count} persisted: runtime.start() {ready:.1f} s, every "
              f"subscription delivered its next record after {time.perf_counter() - started:.1f} s")


async def bench(args: argparse.Namespace, url: str, pid: int, workdir: Path) -> None:
    async with EmbeddedBroker() as broker:
        assert broker.pid is not None
        pids = {"broker": broker.pid, "receiver": pid}
        records = args.records_per_partition * args.partitions
        for partitions in ((4,) if args.with_baseline else ()) + (args.partitions,):
            await one_topic(broker.bootstrap, url, partitions, records,
                            workdir / f"p{partitions}", pids, args.timeout_s,
                            args.py_spy if partitions == args.partitions else "")
        if args.subscriptions:
            await many_subscriptions(broker.bootstrap, url, args.subscriptions,
                                     workdir / "subs", args.timeout_s)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--subscriptions", type=int, default=500)
    parser.add_argument("--records-per-partition", type=int, default=20)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--with-baseline", action=argparse.BooleanOptionalAction,
                        default=True, help="the 4-partition case first")
    parser.add_argument("--py-spy", default="",
                        help="sample the many-partitions case into this file")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    with receiver("auto", workdir) as recv:
        uvloop.run(bench(args, recv.url, recv.process.pid, workdir))


if __name__ == "__main__":
    main(sys.argv[1:])
