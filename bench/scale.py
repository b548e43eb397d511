"""Scale: many partitions, many subscriptions, subscribe latency, start-up (issue 14 goal 4).

    .venv/bin/python bench/scale.py [--cases a,b,c] [--records 20000] [--partitions 1024]
        [--subscriptions 500] [--extra-subscribes 5] [--timeout-s 300] [--tracemalloc]

Everything runs on loopback, started here and stopped at the end: the embedded broker
(Tansu), the receiver (bench/receiver.py, a uvloop responder answering `200`) and, in this
process on uvloop, the runtime with the delivery service (journal on).

Cases:

- (a) baseline: 1 subscription x 4 partitions;
- (b) 1 subscription x `--partitions` (1,024) partitions;
- (c) `--subscriptions` (500) subscriptions x 1 partition, each on its own topic and with
  its own group.id (one group shared by all is the group engineer's case).

Per case:

1. Memory. The subscriptions start on empty topics; once every partition actor exists
   (one `hookstream_inflight` series each), the garbage is collected and the RSS of this
   process (/proc/self/status VmRSS) is read. Growth per partition actor = (RSS now - RSS
   of the same runtime before its subscriptions) / partitions. In (c) that includes the
   whole subscription (Kafka client, HTTP session, actors), since there is one partition
   per subscription. `--tracemalloc` adds the Python allocations per partition and the
   top allocation sites (slow: for profiling only).
2. Throughput. `--records` records of 100 B, spread evenly over the case's partitions, are
   produced by a separate process (spawned, so its CPU is not ours) while the
   subscriptions run (linger 500 ms: full batches, as a backlog has); records/s from the
   first delivery to the last, CPU of this process (all threads) per delivered record over
   the same window. The subscriptions set fetch.max.wait.ms to 100 ms (`subscription()`).
   The producing time is printed: when it is close to the delivery time the producer, not
   the runtime, set the rate. On a shared machine records/s follows the CPU this process
   gets; the CPU per record is the steadier number.
3. Subscribe latency (case c): `--extra-subscribes` more subscriptions, one after the
   other, through the admin API, with the others present: p50 and max.
4. Start-up (case c): the case's subscriptions are written to the persistence directory
   (as the store writes them) and a new runtime starts on it: time until `start()`
   returns, until every subscription is running with its partition, and until `GET
   /readyz` answers 200 (polled every 50 ms; the admin API listens once the services
   have started, so /readyz cannot answer earlier).

Every loop is bounded in count and in time (`--timeout-s` per phase).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import logging
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from actors.delivery.document.store import SubscriptionStore
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import create_topics, make_producer
from runtime.kafka.broker import EmbeddedBroker

RECEIVER_SCRIPT = Path(__file__).resolve().parent / "receiver.py"
POLL_S = 0.01
SIZE = 100
TOPIC_BATCH = 100  # topics created per CreateTopics request


# -- helpers -------------------------------------------------------------------------------
def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def settled_rss() -> int:
    gc.collect()
    return rss_bytes()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@contextlib.contextmanager
def receiver(timeout_s: float = 10.0) -> Iterator[str]:
    """bench/receiver.py on a free port; yields its URL."""
    process = subprocess.Popen([sys.executable, str(RECEIVER_SCRIPT)], stdout=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "listening <port>"
        if not line.startswith("listening"):
            raise RuntimeError(f"receiver did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/hook"
    finally:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


FETCH_MAX_WAIT_MS = 100
HEARTBEAT_MS = 300
"""`--client-defaults` sets both to what a subscription has by default (500 ms, aiokafka's;
1,000 ms, actors/shared/group_consumer.py): each idle consumer then sends 3 requests a
second instead of 13, which is what decides case (c)."""


def subscription(sub_id: str, group: str, topic: str, url: str) -> dict[str, Any]:
    # Tansu answers a JoinGroup after about half the session timeout: keep joins quick.
    # Tansu also holds every fetch for the whole fetch.max.wait.ms even when records are
    # there (bench/delivery.py's docstring): with aiokafka's 500 ms, a partition fed while
    # it is consumed gets one fetch (at most one prefetch buffer) per half second.
    return {
        "id": sub_id, "group": {"id": group, "name": group}, "broker": "Kafka",
        "topics": [{"name": topic, "config": {"concurrencyFactor": 100}}],
        "subscriptionMethod": {"type": "http", "uri": url, "delayOnErrorMs": 100},
        "properties": {"session.timeout.ms": "2000", "heartbeat.interval.ms": str(HEARTBEAT_MS),
                       "fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS)},
    }


def config(bootstrap: str, workdir: Path) -> Any:
    return parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"dir": str(workdir / "journal"), "enabled": True},
        "runtime": {"shutdown_deadline_ms": 30_000},
    })


@contextlib.asynccontextmanager
async def running(bootstrap: str, workdir: Path) -> AsyncIterator[Runtime]:
    runtime = Runtime(config(bootstrap, workdir), services=[DeliveryService])
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


def family_total(runtime: Runtime, name: str) -> float:
    return sum(c.value for c in runtime.metrics.counter(name, "").children.values())


def partition_actors(runtime: Runtime) -> int:
    """One `hookstream_inflight` series per live partition actor."""
    return len(runtime.metrics.gauge("hookstream_inflight", "").children)


def note(*parts: object) -> None:
    """Progress of a worker, on stderr as it happens (a case may outlive its bound)."""
    print(*parts, file=sys.stderr, flush=True)


async def wait_for(what: str, check: Any, timeout_s: float, poll_s: float = POLL_S) -> float:
    """Poll `check()` until true; the seconds it took."""
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(poll_s)
    return time.perf_counter() - start


async def admin_subscribe(session: aiohttp.ClientSession, runtime: Runtime,
                          body: dict[str, Any], timeout_s: float) -> float:
    start = time.perf_counter()
    async with session.post(runtime.admin.url + "/broker/subscription", json=body,
                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        reply = await response.json(content_type=None)
        if response.status != 200:
            raise RuntimeError(f"subscription refused: {response.status} {reply}")
    return time.perf_counter() - start


async def create_many(bootstrap: str, topics: dict[str, int]) -> None:
    names = list(topics)
    for first in range(0, len(names), TOPIC_BATCH):
        await create_topics(bootstrap, {n: topics[n] for n in names[first:first + TOPIC_BATCH]},
                            timeout_s=60)


# -- producing (a separate process) --------------------------------------------------------
def targets(topics: dict[str, int]) -> list[tuple[str, int]]:
    return [(topic, p) for topic, count in topics.items() for p in range(count)]


async def produce(bootstrap: str, topics: dict[str, int], count: int, go: Any,
                  ready: Any) -> None:
    spots = targets(topics)
    # a long linger: full batches, as a backlog would have (Tansu hands out few per fetch)
    producer = make_producer(bootstrap, acks=1, linger_ms=500, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        for topic in topics:  # metadata before the clock starts
            await producer.partitions_for(topic)
        ready.set()
        await asyncio.to_thread(go.wait, 120)
        for first in range(0, count, 5000):
            futures = []
            for i in range(first, min(first + 5000, count)):
                topic, partition = spots[i % len(spots)]
                value = f"{i:012d}".encode().ljust(SIZE, b".")
                futures.append(await producer.send(topic, value, partition=partition))
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


def producer_process(bootstrap: str, topics: dict[str, int], count: int, go: Any,
                     ready: Any) -> None:
    """The producer, started and connected before `go` is set: its start-up is not timed."""
    uvloop.run(produce(bootstrap, topics, count, go, ready))


# -- measurements --------------------------------------------------------------------------
@dataclass
class CaseResult:
    name: str
    partitions: int
    rss_per_partition_kib: float = 0.0
    rss_growth_kib: float = 0.0
    runtime_fixed_kib: float = 0.0
    py_per_partition_kib: float | None = None
    subscribe_s: list[float] = field(default_factory=list)
    records: int = 0
    seconds: float = 0.0
    cpu_us: float = 0.0
    produce_s: float = 0.0
    extra_subscribe_s: list[float] = field(default_factory=list)
    startup: dict[str, float] = field(default_factory=dict)
    top_sites: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


async def memory(result: CaseResult, runtime: Runtime, rss_before: int, expected: int,
                 args: argparse.Namespace, traced: bool) -> None:
    await wait_for(f"{expected} partition actors", lambda: partition_actors(runtime) >= expected,
                   args.timeout_s)
    await asyncio.sleep(1.0)  # let the first fetches and commit ticks settle
    result.rss_growth_kib = (settled_rss() - rss_before) / 1024
    result.rss_per_partition_kib = result.rss_growth_kib / expected
    note("memory: RSS growth KiB", result.rss_growth_kib, "per partition",
         result.rss_per_partition_kib)
    if traced:
        snapshot = tracemalloc.take_snapshot()
        stats = snapshot.statistics("lineno")
        result.py_per_partition_kib = sum(s.size for s in stats) / expected / 1024
        result.top_sites = [f"{s.size / expected:8.0f} B/partition  {s.traceback}"
                            for s in stats[:15]]
        tracemalloc.stop()


async def throughput(result: CaseResult, runtime: Runtime, bootstrap: str,
                     topics: dict[str, int], args: argparse.Namespace) -> None:
    before = family_total(runtime, "hookstream_delivered_total")
    context = multiprocessing.get_context("spawn")
    go, ready = context.Event(), context.Event()
    process = context.Process(target=producer_process,
                              args=(bootstrap, topics, args.records, go, ready))
    process.start()
    if not await asyncio.to_thread(ready.wait, 60):
        process.kill()
        raise RuntimeError("the producer did not start")
    started = time.perf_counter()
    go.set()
    first_t = first_cpu = 0.0
    first_count = before
    try:
        deadline = time.monotonic() + args.timeout_s
        while True:
            delivered = family_total(runtime, "hookstream_delivered_total")
            if delivered > before and not first_t:
                first_t, first_cpu, first_count = time.perf_counter(), time.process_time(), \
                    delivered
            if not result.produce_s and process.exitcode is not None:
                result.produce_s = time.perf_counter() - started
            if delivered - before >= args.records:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {delivered - before:.0f} of {args.records} delivered")
            await asyncio.sleep(POLL_S)
        result.seconds = time.perf_counter() - first_t
        result.records = int(delivered - first_count)
        result.cpu_us = (time.process_time() - first_cpu) / max(result.records, 1) * 1e6
        note("throughput:", result.records, "records in", result.seconds, "s, CPU us/record",
             result.cpu_us)
    finally:
        await asyncio.to_thread(process.join, 30)
        if process.is_alive():
            process.kill()
            process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"producer ended with {process.exitcode}")
    result.produce_s = result.produce_s or time.perf_counter() - started


async def one_subscription_case(name: str, partitions: int, bootstrap: str, url: str,
                                workdir: Path, args: argparse.Namespace) -> CaseResult:
    result = CaseResult(name, partitions)
    tag = uuid.uuid4().hex[:6]
    topics = {f"scale-{tag}": partitions}
    await create_many(bootstrap, topics)
    rss_empty = settled_rss()
    async with running(bootstrap, workdir) as runtime, aiohttp.ClientSession() as session:
        rss_before = settled_rss()
        result.runtime_fixed_kib = (rss_before - rss_empty) / 1024
        traced = args.tracemalloc
        if traced:
            tracemalloc.start()
        result.subscribe_s.append(await admin_subscribe(
            session, runtime, subscription("scale", f"g-{tag}", f"scale-{tag}", url),
            args.timeout_s))
        await memory(result, runtime, rss_before, partitions, args, traced)
        await throughput(result, runtime, bootstrap, topics, args)
    return result


async def many_subscriptions_case(count: int, bootstrap: str, url: str, workdir: Path,
                                  args: argparse.Namespace) -> CaseResult:
    """Case (c): `count` subscriptions persisted, a runtime started on them (start-up),
    memory, throughput, then more subscribes with them present."""
    result = CaseResult(f"(c) {count} subscriptions x 1", count)
    tag = uuid.uuid4().hex[:6]
    topics = {f"scale-{tag}-{i:04d}": 1 for i in range(count + args.extra_subscribes)}
    await create_many(bootstrap, topics)
    names = list(topics)
    store = SubscriptionStore(workdir / "persist")
    for i, topic in enumerate(names[:count]):
        await store.save(decode_consumer(subscription(f"s{i:04d}", f"g-{tag}-{i:04d}",
                                                      topic, url)))
    rss_before = settled_rss()
    traced = args.tracemalloc
    if traced:
        tracemalloc.start()
    runtime = Runtime(config(bootstrap, workdir), services=[DeliveryService])
    begin = time.perf_counter()
    await runtime.start()
    try:
        result.startup["start() returned"] = time.perf_counter() - begin
        note("start-up: start() returned", result.startup["start() returned"])
        service = runtime.service(DeliveryService)
        await wait_for("every subscription running", lambda: all(
            s.state == "running" for s in service.status.values()), args.timeout_s)
        result.startup["all running"] = time.perf_counter() - begin
        note("start-up: all running", result.startup["all running"])
        await wait_for("every partition actor", lambda: partition_actors(runtime) >= count,
                       args.timeout_s)
        result.startup["all partition actors"] = time.perf_counter() - begin
        note("start-up: all partition actors", result.startup["all partition actors"])
        async with aiohttp.ClientSession() as session:
            await readyz(session, runtime, args.timeout_s)
            result.startup["/readyz 200"] = time.perf_counter() - begin
            note("start-up: /readyz 200", result.startup["/readyz 200"])
            await memory(result, runtime, rss_before, count, args, traced)
            await throughput(result, runtime, bootstrap,
                             {n: 1 for n in names[:count]}, args)
            for i, topic in enumerate(names[count:]):
                result.extra_subscribe_s.append(await admin_subscribe(
                    session, runtime, subscription(f"x{i:04d}", f"gx-{tag}-{i:04d}", topic,
                                                   url), args.timeout_s))
    finally:
        stop_begin = time.perf_counter()
        await runtime.stop()
        result.startup["stop()"] = time.perf_counter() - stop_begin
    return result


async def readyz(session: aiohttp.ClientSession, runtime: Runtime, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        async with session.get(runtime.admin.url + "/readyz") as response:
            if response.status == 200:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"/readyz not 200 within {timeout_s} s")
        await asyncio.sleep(0.05)


# -- the run -------------------------------------------------------------------------------
RESULT_PREFIX = "RESULT "


async def run_case(args: argparse.Namespace) -> CaseResult:
    """One case, in a process of its own (`--worker`): its RSS is its own."""
    workdir = Path(args.workdir)
    boot, url = args.bootstrap, args.url
    if args.worker == "a":
        return await one_subscription_case("(a) 1 subscription x 4", 4, boot, url, workdir,
                                           args)
    if args.worker == "b":
        return await one_subscription_case(f"(b) 1 subscription x {args.partitions}",
                                           args.partitions, boot, url, workdir, args)
    return await many_subscriptions_case(args.subscriptions, boot, url, workdir, args)


async def broker_and_cases(argv: list[str], args: argparse.Namespace, url: str,
                           workdir: Path) -> list[CaseResult]:
    """The broker for every case; each case runs in a fresh process, one after the other."""
    results: list[CaseResult] = []
    async with EmbeddedBroker() as broker:
        for case in args.cases:
            command = [sys.executable, __file__, *argv, "--worker", case,
                       "--bootstrap", broker.bootstrap, "--url", url,
                       "--workdir", str(workdir / case)]
            process = await asyncio.create_subprocess_exec(*command,
                                                           stdout=asyncio.subprocess.PIPE)
            try:
                out, _ = await asyncio.wait_for(process.communicate(), args.timeout_s * 8)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            lines = [ln for ln in out.decode().splitlines() if ln.startswith(RESULT_PREFIX)]
            if process.returncode != 0 or not lines:
                raise RuntimeError(f"case {case} failed ({process.returncode})")
            results.append(CaseResult(**json.loads(lines[-1].removeprefix(RESULT_PREFIX))))
            print_case(results[-1], flush=True)
    return results


def print_case(r: CaseResult, flush: bool = False) -> None:
    py = f", Python allocations {r.py_per_partition_kib:.1f} KiB" \
        if r.py_per_partition_kib is not None else ""
    print(f"{r.name}: RSS {r.rss_per_partition_kib:.1f} KiB per partition actor{py}; "
          f"{r.records} records in {r.seconds:.2f} s = {r.rate:.0f} records/s, "
          f"CPU {r.cpu_us:.0f} us/record (producer took {r.produce_s:.2f} s)", flush=flush)
    if r.subscribe_s:
        print(f"  subscribe answered in {max(r.subscribe_s):.2f} s")
    if r.extra_subscribe_s:
        print(f"  {len(r.extra_subscribe_s)} more subscribes with {r.partitions} present: "
              f"p50 {statistics.median(r.extra_subscribe_s):.2f} s, "
              f"max {max(r.extra_subscribe_s):.2f} s")
    for what, seconds in r.startup.items():
        print(f"  start-up: {what} after {seconds:.2f} s")
    for line in r.top_sites:
        print(f"  {line}")


def print_summary(results: list[CaseResult]) -> None:
    base = next((r for r in results if r.name.startswith("(a)")), None)
    if base is None:
        return
    print()
    print(f"runtime's own start-up RSS (no subscription), case (a): "
          f"{base.runtime_fixed_kib:.0f} KiB")
    for r in results:
        if r.startup:  # started with its subscriptions: take the runtime's own part out
            r.rss_per_partition_kib = (r.rss_growth_kib - base.runtime_fixed_kib) / r.partitions
    print(f"{'case':<28} {'RSS KiB/actor':>14} {'records/s':>10} {'CPU us/rec':>11}  vs (a)")
    for r in results:
        print(f"{r.name:<28} {r.rss_per_partition_kib:>14.1f} {r.rate:>10.0f} "
              f"{r.cpu_us:>11.0f}  RSS {r.rss_per_partition_kib / base.rss_per_partition_kib:.2f}"
              f", rate {r.rate / base.rate:.2f}, CPU {r.cpu_us / base.cpu_us:.2f}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="a,b,c", help="comma-separated: a, b, c")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=1024, help="case (b)")
    parser.add_argument("--subscriptions", type=int, default=500, help="case (c)")
    parser.add_argument("--extra-subscribes", type=int, default=5, help="case (c)")
    parser.add_argument("--timeout-s", type=float, default=300.0,
                        help="bound on each measured phase")
    parser.add_argument("--client-defaults", action="store_true",
                        help="fetch.max.wait.ms 500 and heartbeats every 1,000 ms (the "
                        "defaults) instead of 100 and 300")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="Python allocations per partition and the top sites (slow)")
    parser.add_argument("--worker", choices=("a", "b", "c"), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not set(args.cases) <= {"a", "b", "c"} or not args.cases:
        parser.error("--cases takes a, b and c")
    if min(args.records, args.partitions, args.subscriptions) < 1:
        parser.error("--records, --partitions, --subscriptions must be >= 1")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.client_defaults:
        global FETCH_MAX_WAIT_MS, HEARTBEAT_MS
        FETCH_MAX_WAIT_MS, HEARTBEAT_MS = 500, 1000
    if args.worker:
        result = uvloop.run(run_case(args))
        print(RESULT_PREFIX + json.dumps(asdict(result)), flush=True)
        return
    print(f"scale benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, uvloop; {args.records} records of {SIZE} B "
          f"per case", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        with receiver() as url:
            results = uvloop.run(broker_and_cases(argv, args, url, workdir))
        print_summary(results)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
