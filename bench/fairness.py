"""Fairness and the circuit breaker: does a slow or failing endpoint take more than its
share of the process?

    .venv/bin/python bench/fairness.py [--records 250] [--partitions 2]
        [--concurrency 10] [--rounds 2] [--scenario fairness|breaker|both]
        [--timeout-s 240]

Everything runs on loopback, started here and stopped at the end: the embedded broker
(Tansu), one receiver process (aiohttp on uvloop) listening on 10 ports, so 10 origins,
and the runtime with the delivery service in this process (uvloop). Every run uses a new
topic with `--partitions` partitions and `--records` records per partition, produced
before anything is timed, and new consumer groups.

Fairness (issue 15): 100 subscriptions over the 10 endpoints (subscription i pushes to
endpoint i % 10), on one topic. Endpoint 0 answers after 2 s, endpoint 1 answers 500;
the other 8 answer 200 at once. Two runs per round:

- `clean`: only the 80 subscriptions of the 8 healthy endpoints;
- `bad`: the same 80 plus the 20 of the slow and the failing endpoint.

The healthy delivery rate is the 80 healthy subscriptions' steady rate, from the
runtime's own `hookstream_delivered_total` (polled every 20 ms): deliveries from the
moment each of them delivered its first record (their groups join over a few seconds,
more so with 100 groups than with 80) until 80% of their records are delivered, divided
by that time. The same interval's CPU time of this process per healthy record gives a
second ratio (clean / bad) that the other jobs on a shared machine disturb less: when
this process is CPU-bound, its rate is the inverse of its CPU per record. The goal: `bad`
at least 0.9 x `clean`. The failing endpoint's subscriptions retry 3 times 100 ms apart,
then give up (no dead-letter topic: a give-up is journaled and skipped), so their records
flow through the breaker's fail-fast path.

Breaker: 10 subscriptions to a healthy endpoint and 10 to a dead one (500 to everything,
`retryBeforeCommit` 0: retried forever, `delayOnErrorMs` 100), with `[egress]
circuit_breaker` on and off, on a topic of `--breaker-records` per partition. The run
lasts until the healthy subscriptions delivered everything. Printed: the requests the
dead endpoint received (the receiver counts them) and the healthy rate.

The subscriptions use aiokafka's default `fetch.max.wait.ms` (500 ms): with 100 consumers
in one process, 10 ms (bench/delivery.py's setting for Tansu's latency quirk) makes each
idle consumer poll the broker 100 times a second, and that polling, not the endpoints,
then decides the result.

Every loop is bounded in count and in time (`--timeout-s` per run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import datetime
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from aiohttp import web

from actors.delivery.document.subscription import decode_consumer
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import create_topics, make_producer
from runtime.kafka.broker import EmbeddedBroker, free_port

ENDPOINTS = 10
SUBSCRIPTIONS = 100
SLOW, FAILING = 0, 1
SLOW_S = 2.0
POLL_S = 0.02
STEADY_END = 0.8


# -- the receiver (a separate process) ---------------------------------------------------
def serve(ports: list[int], behaviours: list[str]) -> None:
    """Run the receiver: `behaviours[i]` (`ok`, `slow`, `fail`) on `ports[i]`; `GET
    /_count` answers the number of pushes that port got."""
    counts = [0] * len(ports)

    def app_for(index: int) -> web.Application:
        async def push(request: web.Request) -> web.Response:
            await request.read()
            counts[index] += 1
            behaviour = behaviours[index]
            if behaviour == "slow":
                await asyncio.sleep(SLOW_S)
            return web.Response(status=500 if behaviour == "fail" else 200)

        async def count(request: web.Request) -> web.Response:
            return web.json_response({"count": counts[index]})

        app = web.Application()
        app.router.add_get("/_count", count)
        app.router.add_post("/hook", push)
        return app

    async def main() -> None:
        runners = []
        for index, port in enumerate(ports):
            runner = web.AppRunner(app_for(index), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
            runners.append(runner)
        print("ready", flush=True)
        await asyncio.Event().wait()  # until SIGTERM

    uvloop.run(main())


@dataclass
class Receivers:
    ports: list[int]
    process: subprocess.Popen[bytes]

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}/hook"

    async def count(self, index: int) -> int:
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{self.ports[index]}/_count") as response:
            return int((await response.json())["count"])


@contextlib.contextmanager
def receivers(behaviours: list[str]) -> Iterator[Receivers]:
    ports = [free_port() for _ in behaviours]
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", json.dumps([ports, behaviours])],
        stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != b"ready":
            raise RuntimeError("the receiver process did not start")
        yield Receivers(ports, process)
    finally:
        process.terminate()
        process.wait(10)


# -- the runtime ---------------------------------------------------------------------------
def document(name: str, topic: str, url: str, args: argparse.Namespace,
             **method: Any) -> dict[str, Any]:
    return {
        "id": name, "group": {"id": f"{name}-{uuid.uuid4().hex[:6]}"}, "broker": "Kafka",
        "topics": [{"name": topic, "config": {"concurrencyFactor": args.concurrency}}],
        "subscriptionMethod": {"type": "http", "uri": url, "delayOnErrorMs": 100, **method},
        "properties": {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000",
                       "fetch.max.wait.ms": str(args.fetch_max_wait_ms)},
    }


@contextlib.asynccontextmanager
async def running(bootstrap: str, workdir: Path, breaker: bool = True
                  ) -> AsyncIterator[Runtime]:
    config = parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"dir": str(workdir / "journal"), "enabled": False},
        "runtime": {"shutdown_deadline_ms": 8000, "log_level": "ERROR"},
        "egress": {"circuit_breaker": breaker},
    })
    runtime = Runtime(config, services=[DeliveryService])
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def new_topic(bootstrap: str, args: argparse.Namespace, records: int = 0) -> str:
    topic = f"fair-{uuid.uuid4().hex[:8]}"
    records = records or args.records
    await create_topics(bootstrap, {topic: args.partitions})
    producer = make_producer(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sends = [await producer.send(topic, b"x" * 100, partition=p)
                 for p in range(args.partitions) for _ in range(records)]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return topic


def delivered(runtime: Runtime, names: set[str]) -> dict[str, int]:
    """Deliveries so far of each subscription whose id is in `names`."""
    family = runtime.metrics.counter("hookstream_delivered_total", "")
    counts = dict.fromkeys(names, 0)
    for labels, value in family.children.items():
        name = dict(labels).get("subscription", "").split("_", 1)[0]
        if name in counts:
            counts[name] += int(value.value)
    return counts


@dataclass
class Rate:
    records: int
    seconds: float
    cpu_s: float = 0.0
    """This process's CPU time (all threads) over the same interval."""

    @property
    def per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        """CPU microseconds of the process per healthy record delivered."""
        return self.cpu_s * 1e6 / self.records if self.records else 0.0


async def measure(runtime: Runtime, names: set[str], expected: int, timeout_s: float) -> Rate:
    """The steady rate of the `names` subscriptions: from the moment every one of them
    delivered something (their consumer groups joined at slightly different times) until
    `STEADY_END` of `expected` are delivered (before the first ones run out of records).
    Then waits until all `expected` are delivered."""
    deadline = time.monotonic() + timeout_s
    start: tuple[float, int, float] | None = None
    rate: Rate | None = None
    while True:
        now, counts = time.perf_counter(), delivered(runtime, names)
        done = sum(counts.values())
        if start is None and all(counts.values()):
            start = (now, done, time.process_time())
        if start is not None and rate is None and done >= expected * STEADY_END:
            rate = Rate(done - start[1], now - start[0], time.process_time() - start[2])
        if done >= expected and rate is not None:
            return rate
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done} of {expected} delivered after {timeout_s} s")
        await asyncio.sleep(POLL_S)


async def fairness_run(bootstrap: str, recv: Receivers, args: argparse.Namespace,
                       workdir: Path, with_bad: bool) -> Rate:
    topic = await new_topic(bootstrap, args)
    healthy: set[str] = set()
    async with running(bootstrap, workdir) as runtime:
        service = runtime.service("delivery")
        assert isinstance(service, DeliveryService)
        for i in range(SUBSCRIPTIONS):
            endpoint, name = i % ENDPOINTS, f"s{i}"
            bad = endpoint in (SLOW, FAILING)
            if bad and not with_bad:
                continue
            if not bad:
                healthy.add(name)
            extra = {"retryBeforeCommit": 3} if endpoint == FAILING else {}
            await service.subscribe(decode_consumer(
                document(name, topic, recv.url(endpoint), args, **extra)), persist=False)
        expected = len(healthy) * args.records * args.partitions
        return await measure(runtime, healthy, expected, args.timeout_s)


async def breaker_run(bootstrap: str, recv: Receivers, args: argparse.Namespace,
                      workdir: Path, breaker: bool) -> tuple[Rate, int, float]:
    """(the healthy rate, requests the dead endpoint got, over how many seconds)."""
    topic = await new_topic(bootstrap, args, args.breaker_records)
    healthy = {f"h{i}" for i in range(10)}
    async with running(bootstrap, workdir, breaker) as runtime:
        service = runtime.service("delivery")
        assert isinstance(service, DeliveryService)
        before, start = await recv.count(FAILING), time.perf_counter()
        for i in range(10):
            for name, endpoint in ((f"h{i}", 2), (f"d{i}", FAILING)):
                await service.subscribe(decode_consumer(
                    document(name, topic, recv.url(endpoint), args)), persist=False)
        expected = len(healthy) * args.breaker_records * args.partitions
        rate = await measure(runtime, healthy, expected, args.timeout_s)
        dead = await recv.count(FAILING) - before
        return rate, dead, time.perf_counter() - start


@contextlib.contextmanager
def profiled(enabled: bool, name: str) -> Iterator[None]:
    """With `--profile NAME`: cProfile the `bad` runs, the top functions by own time
    printed and the stats written to NAME.<round>."""
    if not enabled:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(name)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


# -- output --------------------------------------------------------------------------------
def header(args: argparse.Namespace) -> None:
    print(f"fairness benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, uvloop")
    print(f"{args.records} records x {args.partitions} partitions per topic, "
          f"concurrencyFactor {args.concurrency}; receivers: aiohttp, {ENDPOINTS} ports")


async def bench(args: argparse.Namespace) -> None:
    header(args)
    behaviours = ["slow", "fail"] + ["ok"] * (ENDPOINTS - 2)
    with receivers(behaviours) as recv, tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedBroker() as broker:
            if args.scenario in ("fairness", "both"):
                await fairness(broker.bootstrap, recv, args, Path(tmp))
            if args.scenario in ("breaker", "both"):
                await breakers(broker.bootstrap, recv, args, Path(tmp))


async def fairness(bootstrap: str, recv: Receivers, args: argparse.Namespace,
                   tmp: Path) -> None:
    ratios, cpu_ratios = [], []
    for round_no in range(args.rounds):
        clean = await fairness_run(bootstrap, recv, args, tmp / f"c{round_no}", False)
        with profiled(args.profile, f"{args.profile}.{round_no}"):
            bad = await fairness_run(bootstrap, recv, args, tmp / f"b{round_no}", True)
        ratios.append(bad.per_s / clean.per_s)
        cpu_ratios.append(clean.cpu_us / bad.cpu_us)
        print(f"round {round_no + 1}: healthy rate clean {clean.per_s:,.0f}/s "
              f"({clean.records} in {clean.seconds:.1f} s, {clean.cpu_us:.0f} us CPU/record)"
              f", with slow+failing {bad.per_s:,.0f}/s ({bad.records} in "
              f"{bad.seconds:.1f} s, {bad.cpu_us:.0f} us CPU/record): ratio "
              f"{ratios[-1]:.2f}, CPU ratio {cpu_ratios[-1]:.2f}")
    print(f"fairness: median ratio {statistics.median(ratios):.2f} (goal >= 0.90); "
          f"median CPU ratio {statistics.median(cpu_ratios):.2f} (CPU per healthy record, "
          f"clean / with the bad ones: the rate ratio of a process alone on its cores)")


async def breakers(bootstrap: str, recv: Receivers, args: argparse.Namespace,
                   tmp: Path) -> None:
    for round_no in range(args.rounds):
        for breaker in (True, False):
            rate, dead, seconds = await breaker_run(bootstrap, recv, args,
                                                    tmp / f"k{round_no}{breaker}", breaker)
            print(f"round {round_no + 1}: breaker {'on ' if breaker else 'off'}: dead "
                  f"endpoint got {dead:,} requests in {seconds:.1f} s "
                  f"({dead / seconds:,.1f}/s); healthy rate {rate.per_s:,.0f}/s "
                  f"({rate.records} in {rate.seconds:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=250, help="per partition")
    parser.add_argument("--breaker-records", type=int, default=2500,
                        help="per partition, in the breaker runs")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scenario", choices=("fairness", "breaker", "both"),
                        default="both")
    parser.add_argument("--timeout-s", type=float, default=240.0)
    parser.add_argument("--fetch-max-wait-ms", type=int, default=500,
                        help="the subscriptions' fetch.max.wait.ms (aiokafka's default)")
    parser.add_argument("--profile", default="", help="cProfile the runs with the bad "
                        "endpoints; stats go to this file name (+ .round)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        ports, behaviours = json.loads(args.serve)
        serve(ports, behaviours)
        return
    uvloop.run(bench(args))


if __name__ == "__main__":
    main()
