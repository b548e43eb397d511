"""Delivery throughput and added latency: the runtime against a bare aiohttp POST loop.

    .venv/bin/python bench/delivery.py [--records 50000] [--partitions 4]
        [--concurrency 100] [--rate 1000] [--duration-s 10] [--journal on|off|both]
        [--rounds 1] [--receiver auto|nginx|uvloop] [--fetch-max-wait-ms 10]
        [--no-bare-at-mean] [--gc-tune none|runtime|both] [--max-connections 0]

Everything runs on loopback, started by this script and stopped at the end: the embedded
broker (Tansu), the receiver (Debian's nginx answering `200` with an empty body, one
worker; or `bench/receiver.py`, a minimal uvloop responder, when nginx is not installed)
and, in this process on uvloop, the runtime with the delivery service.

Throughput. `--records` records of `--size` bytes are produced to a new topic with
`--partitions` partitions before anything is timed. Then, per round:

- the bare loop: one `aiohttp.ClientSession` and C workers POSTing a body of the same
  size, `--records` requests in all, where C is the concurrency the runtime is given:
  the window is per partition, so partitions x concurrencyFactor records may be in
  flight, capped by the egress HTTP pool (`maxConnections`, default 4 x the window, so
  4 x 100 = 400 with the defaults here: the pool does not cap it). The runtime does
  reach 400 requests at once (the peak is printed), but on average it has fewer on the
  wire, because a CPU-bound event loop keeps records queued between its actors.
- the runtime: a subscription (group, concurrencyFactor = `--concurrency`) on the topic,
  through the admin API; timed from the first record delivered to the last (the group
  join before it is not delivery). Completion is read from the runtime's own
  `hookstream_delivered_total` counter, polled every 5 ms; in-flight from
  `hookstream_http_inflight`, sampled at the same time (peak and mean are printed).
- with `--bare-at-mean` (the default), the bare loop again with as many workers as the
  runtime's mean HTTP requests in flight: aiohttp's cost per request grows with the
  number of connections (mostly garbage collection of the objects of requests in flight),
  so this is the stricter comparison.

CPU columns: CPU microseconds per record of this process (all threads: the runtime or the
bare loop, the journal writer), of the broker and of the receiver, from /proc. The machine
has 2 cores and this process is CPU-bound, so records/s follows its CPU per record.

Added latency. A new topic and a subscription with the journal on; after a warm-up
record per partition, a producer in a separate process (so that its work does not run
on the runtime's event loop) sends `--rate` records/s for `--duration-s` seconds, in
1 ms steps. The added latency is read from the journal: for each first attempt, its
send time minus `fetched_ts_ms` (the send time: a `sent` event's `ts_ms` in journals
before issue 35, since then the outcome's `ts_ms - latency_ms`), i.e. from the moment
`getmany` handed the record over to the moment the egress worker starts the HTTP
request, in whole milliseconds (+-1 ms).
End-to-end (Kafka record timestamp to 2xx received) is printed too, for context.

`fetch.max.wait.ms` (`--fetch-max-wait-ms`, default 10). Tansu holds every fetch for the
whole wait even when records arrive (a bare aiokafka consumer at 100 records/s: end to
end p50 125 ms / p99 248 ms with aiokafka's default 500 ms, 3 / 6 ms with 10 ms), while
Kafka answers as soon as `fetch.min.bytes` (1) is there. The subscriptions here set 10 ms
so that the broker's quirk does not decide the result; `0` keeps aiokafka's 500 ms.

Garbage collector. The runtime freezes what exists once it has started
(`[runtime] gc_freeze`, on by default); the bare loops run with Python's defaults (the
settings are restored after every phase). `--gc-tune` is an experiment beyond what the
product does: `gc.freeze()` and a young-generation threshold of 20,000 allocations instead
of 700, for the runtime runs (`runtime`) or for all runs (`both`).

Every loop is bounded in count and in time (`--timeout-s`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import logging
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from actors.delivery.document.settings import pool_size
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.egress import transport
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.host.journal import Event, closed_segments, expand
from runtime.kafka import create_topics, make_producer
from runtime.kafka.broker import EmbeddedBroker, free_port, port_accepts

POLL_S = 0.005
NGINX = "/usr/sbin/nginx"
RECEIVER_SCRIPT = Path(__file__).resolve().parent / "receiver.py"
NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 120s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{ return 200; }}
    }}
}}
"""


# -- the receiver --------------------------------------------------------------------------
@dataclass
class Receiver:
    kind: str
    port: int
    process: subprocess.Popen[bytes]
    description: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@contextlib.contextmanager
def receiver(kind: str, workdir: Path, timeout_s: float = 10.0) -> Iterator[Receiver]:
    """Start nginx (or the uvloop responder), wait until it accepts, stop it at the end."""
    if kind == "auto":
        kind = "nginx" if Path(NGINX).exists() else "uvloop"
    port = free_port()
    if kind == "nginx":
        conf = workdir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=workdir, port=port))
        command = [NGINX, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")]
        version = subprocess.run([NGINX, "-v"], capture_output=True, text=True, check=False)
        description = f"{version.stderr.strip().split(': ')[-1]}, 1 worker, `return 200`"
    else:
        command = [sys.executable, str(RECEIVER_SCRIPT), "--port", str(port)]
        description = "bench/receiver.py (uvloop protocol, 1 process)"
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not port_accepts("127.0.0.1", port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} receiver did not start on port {port}")
            time.sleep(0.01)
        yield Receiver(kind, port, process, description)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- CPU accounting -----------------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its children (nginx's worker), from /proc."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, IndexError, ValueError):
        return total
    return total + sum(process_cpu_s(int(child)) for child in children)


@dataclass
class CpuMeter:
    """CPU seconds used during a phase by this process, the broker and the receiver."""

    pids: dict[str, int]
    start: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.start = self.read()

    def read(self) -> dict[str, float]:
        used = {name: process_cpu_s(pid) for name, pid in self.pids.items()}
        used["self"] = time.process_time()
        return used

    def used(self) -> dict[str, float]:
        now = self.read()
        return {name: now[name] - self.start[name] for name in now}


# -- the garbage collector ----------------------------------------------------------------
GC_TUNED_THRESHOLD = (20_000, 20, 20)


@contextlib.contextmanager
def gc_state(tuned: bool) -> Iterator[None]:
    """A phase with the collector as the process has it, or tuned (`--gc-tune`: freeze what
    exists, then collect young objects every 20,000 allocations instead of 700); the
    process's settings are restored afterwards, whatever the phase changed, so every bare
    loop runs with Python's defaults unless it was asked to be tuned too."""
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    if tuned:
        gc.freeze()
        gc.set_threshold(*GC_TUNED_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if gc.get_freeze_count() != frozen:
            gc.unfreeze()


# -- producing -----------------------------------------------------------------------------
def payload(i: int, size: int) -> bytes:
    return f"{i:012d}".encode().ljust(size, b".")[:size]


async def produce_backlog(bootstrap: str, topic: str, count: int, partitions: int,
                          size: int) -> None:
    producer = make_producer(bootstrap, acks="all", linger_ms=20,
                             max_batch_size=512 * 1024)
    await producer.start()
    try:
        for first in range(0, count, 5000):
            futures = [await producer.send(topic, payload(i, size), partition=i % partitions)
                       for i in range(first, min(first + 5000, count))]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def paced_produce(bootstrap: str, topic: str, partitions: int, rate: int,
                        duration_s: float, size: int) -> None:
    """`rate` records/s for `duration_s`, sent in 1 ms steps (what is due is sent)."""
    total = int(rate * duration_s)
    producer = make_producer(bootstrap, acks=1, linger_ms=0)
    await producer.start()
    try:
        futures: list[asyncio.Future[Any]] = []
        start = time.monotonic()
        sent = 0
        while sent < total and time.monotonic() - start < duration_s + 5:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            while sent < due:
                futures.append(await producer.send(topic, payload(sent, size),
                                                   partition=sent % partitions))
                sent += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def paced_producer_process(bootstrap: str, topic: str, partitions: int, rate: int,
                           duration_s: float, size: int) -> None:
    """Entry point of the producer process (spawned: a fresh interpreter)."""
    uvloop.run(paced_produce(bootstrap, topic, partitions, rate, duration_s, size))


# -- the bare loop -------------------------------------------------------------------------
@dataclass
class RunResult:
    name: str
    records: int
    seconds: float
    peak_inflight: int
    mean_inflight: float
    cpu: dict[str, float]
    notes: str = ""

    def cpu_us(self, name: str) -> float:
        """CPU microseconds per record used by `name` (self, broker, receiver)."""
        return self.cpu.get(name, 0.0) / self.records * 1e6 if self.records else 0.0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


async def bare_loop(url: str, count: int, concurrency: int, size: int,
                    timeout_s: float, pids: dict[str, int],
                    name: str = "bare aiohttp POST loop") -> RunResult:
    """`count` POSTs by `concurrency` workers on one session; each checks for a 200."""
    body = payload(0, size)
    headers = {"Content-Type": "text/plain; charset=utf-8"}
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    issued = ok = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal issued, ok
        while issued < count:
            issued += 1
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                ok += response.status == 200

    async with aiohttp.ClientSession(connector=connector) as session:
        start, meter = time.perf_counter(), CpuMeter(pids)
        await asyncio.wait_for(
            asyncio.gather(*(worker(session) for _ in range(concurrency))), timeout_s)
        seconds, cpu = time.perf_counter() - start, meter.used()
    if ok != count:
        raise RuntimeError(f"bare loop: {ok} of {count} requests answered 200")
    return RunResult(name, count, seconds, concurrency, concurrency, cpu)


# -- the runtime ---------------------------------------------------------------------------
def subscription(group: str, topic: str, url: str, concurrency: int,
                 load_factor: float = 0.0, fetch_max_wait_ms: int = 0,
                 max_connections: int = 0, batch_size: int = 1,
                 batch_linger_ms: int = 0) -> dict[str, Any]:
    config: dict[str, Any] = {"concurrencyFactor": concurrency}
    if load_factor:
        config["loadFactor"] = load_factor
    # Tansu answers a JoinGroup after about half the session timeout: keep joins quick.
    properties = {"session.timeout.ms": "2000", "heartbeat.interval.ms": "300"}
    if fetch_max_wait_ms:
        properties["fetch.max.wait.ms"] = str(fetch_max_wait_ms)
    return {
        "id": "bench",
        "group.id": group,
        "broker": "Kafka",
        "topics": [{"name": topic, "config": config}],
        "subscriptionMethod": {"type": "http", "uri": url, "delayOnErrorMs": 100,
                               "maxConnections": max_connections, "batchSize": batch_size,
                               "batchLingerMs": batch_linger_ms},
        "properties": properties,
    }


@contextlib.asynccontextmanager
async def running(bootstrap: str, workdir: Path, journal: bool) -> AsyncIterator[Runtime]:
    config = parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"dir": str(workdir / "journal"), "enabled": journal},
        "runtime": {"shutdown_deadline_ms": 8000},
    })
    runtime = Runtime(config, services=[DeliveryService])
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def subscribe(runtime: Runtime, body: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            runtime.admin.url + "/broker/subscription", json=body) as response:
        reply = await response.json(content_type=None)
        if response.status != 200:
            raise RuntimeError(f"subscription refused: {response.status} {reply}")


def metric_total(runtime: Runtime, name: str, gauge: bool = False) -> float:
    family = (runtime.metrics.gauge(name, "") if gauge else runtime.metrics.counter(name, ""))
    return sum(child.value for child in family.children.values())


@dataclass
class Progress:
    pids: dict[str, int]
    first_t: float = 0.0
    first_count: float = 0.0
    samples: list[float] = field(default_factory=list)
    cpu: CpuMeter | None = None


async def wait_delivered(runtime: Runtime, count: int, timeout_s: float,
                         pids: dict[str, int]) -> Progress:
    """Poll the delivered counter until `count`; note when the first delivery was seen."""
    progress = Progress(pids)
    deadline = time.monotonic() + timeout_s
    while True:
        delivered = metric_total(runtime, "hookstream_delivered_total")
        if delivered > 0:
            if not progress.first_t:
                progress.first_t, progress.first_count = time.perf_counter(), delivered
                progress.cpu = CpuMeter(pids)
            progress.samples.append(metric_total(runtime, "hookstream_http_inflight", True))
        if delivered >= count:
            return progress
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {delivered:.0f} of {count} delivered in {timeout_s} s")
        await asyncio.sleep(POLL_S)


async def runtime_throughput(bootstrap: str, url: str, topic: str, args: argparse.Namespace,
                             journal: bool, workdir: Path, pids: dict[str, int]) -> RunResult:
    async with running(bootstrap, workdir, journal) as runtime:
        await subscribe(runtime, subscription(f"bench-{uuid.uuid4().hex[:8]}", topic, url,
                                              args.concurrency, args.load_factor,
                                              args.fetch_max_wait_ms, args.max_connections,
                                              args.batch_size, args.batch_linger_ms))
        with py_spy(args.py_spy if journal else None):
            progress = await wait_delivered(runtime, args.records, args.timeout_s, pids)
        seconds = time.perf_counter() - progress.first_t
        assert progress.cpu is not None
        cpu = progress.cpu.used()
        delivered = metric_total(runtime, "hookstream_delivered_total") - progress.first_count
        inflight = progress.samples or [0.0]
        failed = metric_total(runtime, "hookstream_failed_attempts_total")
        notes = f"{failed:.0f} failed attempts" if failed else ""
    if journal:
        notes = f"{notes}; journal: {journal_stats(runtime)}".lstrip("; ")
    name = f"runtime, journal {'on' if journal else 'off'}"
    return RunResult(name, int(delivered), seconds, int(max(inflight)),
                     statistics.fmean(inflight), cpu, notes)


@contextlib.contextmanager
def py_spy(output: str | None) -> Iterator[None]:
    """Sample this process (all threads) with py-spy while the block runs: collapsed
    stacks in `output` (bench/profile_summary.py reads them). py-spy is not a dependency:
    `pip install --target DIR py-spy` and put DIR/bin on PATH."""
    if not output:
        yield
        return
    binary = shutil.which("py-spy")
    if binary is None:
        raise SystemExit("--py-spy: py-spy is not on PATH")
    sampler = subprocess.Popen([binary, "record", "--pid", str(os.getpid()), "--format", "raw",
                                "--rate", "250", "--threads", "--nonblocking", "-o", output],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            sampler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sampler.kill()
            sampler.wait()


def journal_stats(runtime: Runtime) -> str:
    return f"{runtime.journal.written} events written, {runtime.journal.dropped} dropped"


# -- added latency -------------------------------------------------------------------------
@dataclass
class Latency:
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    achieved_rate: float
    dropped: int


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def added_latency(bootstrap: str, url: str, args: argparse.Namespace,
                        workdir: Path, pids: dict[str, int]) -> Latency:
    topic = f"bench-latency-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, {topic: args.partitions})
    total = int(args.rate * args.duration_s)
    async with running(bootstrap, workdir, journal=True) as runtime:
        await subscribe(runtime, subscription("bench-latency", topic, url, args.concurrency,
                                              args.load_factor, args.fetch_max_wait_ms,
                                              args.max_connections))
        # one record per partition: the group has joined and the pool is warm
        await produce_backlog(bootstrap, topic, args.partitions, args.partitions, args.size)
        await wait_delivered(runtime, args.partitions, args.timeout_s, pids)
        start_wall_ms = time.time_ns() // 1_000_000
        await run_paced_producer(bootstrap, topic, args)
        await wait_delivered(runtime, args.partitions + total, args.timeout_s, pids)
        dropped = runtime.journal.dropped
    return latency_from_journal(workdir / "journal", start_wall_ms, dropped)


async def run_paced_producer(bootstrap: str, topic: str, args: argparse.Namespace) -> None:
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=paced_producer_process, args=(
        bootstrap, topic, args.partitions, args.rate, args.duration_s, args.size))
    process.start()
    try:
        await asyncio.to_thread(process.join, args.duration_s + args.timeout_s)
        if process.exitcode != 0:
            raise RuntimeError(f"paced producer ended with {process.exitcode}")
    finally:
        if process.is_alive():
            process.kill()
            process.join()


def latency_from_journal(directory: Path, since_wall_ms: int, dropped: int) -> Latency:
    decoder = msgspec.json.Decoder(Event)
    added: list[float] = []
    e2e: list[float] = []
    sent_ts: list[int] = []
    events = (one for segment in closed_segments(directory)
              for line in segment.read_bytes().splitlines()
              for one in expand(decoder.decode(line)))  # a cursor's ranged deliveries
    for event in events:
        if event.ts_ms < since_wall_ms or event.attempt != 1:
            continue
        if event.type == "sent" and event.fetched_ts_ms is not None:  # before issue 35
            added.append(event.ts_ms - event.fetched_ts_ms)
            sent_ts.append(event.ts_ms)
        elif event.type in ("delivered", "failed") and event.fetched_ts_ms is not None \
                and event.latency_ms is not None:  # since: the send time is ts - latency
            sent_at = event.ts_ms - round(event.latency_ms)
            added.append(sent_at - event.fetched_ts_ms)
            sent_ts.append(sent_at)
        if event.type == "delivered" and event.record_ts_ms is not None:
            e2e.append(event.ts_ms - event.record_ts_ms)
    if not added:
        raise RuntimeError(f"no attempts in the journal at {directory}")
    span_s = max((max(sent_ts) - min(sent_ts)) / 1000, 1e-3)
    return Latency(len(added), percentile(added, 50), percentile(added, 99), max(added),
                   percentile(e2e, 50) if e2e else -1, percentile(e2e, 99) if e2e else -1,
                   len(added) / span_s, dropped)


# -- the run -------------------------------------------------------------------------------
def runtime_concurrency(args: argparse.Namespace, url: str) -> tuple[int, int]:
    """(records the runtime may have in flight, its HTTP pool size)."""
    consumer = decode_consumer(subscription("g", "t", url, args.concurrency,
                                            max_connections=args.max_connections))
    pool = pool_size(consumer)
    return min(args.partitions * args.concurrency, pool), pool


async def bench(args: argparse.Namespace, recv: Receiver, workdir: Path) -> None:
    window, pool = runtime_concurrency(args, recv.url)
    concurrency = args.bare_concurrency or window
    journals = {"on": [True], "off": [False], "both": [True, False]}[args.journal]
    async with EmbeddedBroker() as broker:
        assert broker.pid is not None
        pids = {"broker": broker.pid, "receiver": recv.process.pid}
        topic = f"bench-delivery-{uuid.uuid4().hex[:8]}"
        await create_topics(broker.bootstrap, {topic: args.partitions})
        await produce_backlog(broker.bootstrap, topic, args.records, args.partitions,
                              args.size)
        print_header(args, recv, window, pool, concurrency)
        results: dict[str, list[RunResult]] = {}  # by run name, one per round
        tune_bare, tune_runtime = args.gc_tune == "both", args.gc_tune != "none"
        for round_no in range(args.rounds):
            with gc_state(tune_bare):
                runs = [await bare_loop(recv.url, args.records, concurrency, args.size,
                                        args.timeout_s, pids)]
            for journal in journals:
                with gc_state(tune_runtime):
                    runs.append(await runtime_throughput(
                        broker.bootstrap, recv.url, topic, args, journal,
                        workdir / f"r{round_no}-{'on' if journal else 'off'}", pids))
            if args.bare_at_mean:
                mean = max(1, round(runs[1].mean_inflight))
                with gc_state(tune_bare):
                    extra = await bare_loop(recv.url, args.records, mean, args.size,
                                            args.timeout_s, pids, "bare, runtime's mean")
                extra.notes = f"{mean} workers: the runtime's mean HTTP requests in flight"
                runs.append(extra)
            for run in runs:
                results.setdefault(run.name, []).append(run)
            print_round(round_no, runs)
        latency = None
        if args.duration_s > 0:
            with gc_state(tune_runtime):
                latency = await added_latency(broker.bootstrap, recv.url, args,
                                              workdir / "lat", pids)
    print_summary(args, results, latency)


def print_header(args: argparse.Namespace, recv: Receiver, window: int, pool: int,
                 concurrency: int) -> None:
    print(f"delivery benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, uvloop")
    print(f"receiver: {recv.description}; broker: embedded Tansu")
    print(f"{args.records} records of {args.size} B on {args.partitions} partitions, "
          f"concurrencyFactor {args.concurrency} (per partition)")
    fetch_wait = f"{args.fetch_max_wait_ms} ms" if args.fetch_max_wait_ms else "500 ms (default)"
    print(f"subscription: fetch.max.wait.ms {fetch_wait}, loadFactor "
          f"{args.load_factor or 'default'}, batchSize {args.batch_size}, batchLingerMs "
          f"{args.batch_linger_ms}; garbage collector tuned: {args.gc_tune}; egress "
          f"transport: {transport.DEFAULT_TRANSPORT}")
    print(f"runtime in flight at most min({args.partitions} partitions x "
          f"{args.concurrency}, HTTP pool {pool}) = {window}; bare loop concurrency: "
          f"{concurrency}")
    print()
    print(f"{'round':>5}  {'run':<24} {'records':>8} {'seconds':>8} {'records/s':>10} "
          f"{'vs bare':>8} {'in flight':>9} {'CPU us/record self/broker/recv':>31}  notes")
    print(f"{'':>72}{'(peak/mean)':>9}")


def print_round(round_no: int, runs: list[RunResult]) -> None:
    bare = runs[0].rate
    for run in runs:
        print(f"{round_no + 1:>5}  {run.name:<24} {run.records:>8} {run.seconds:>8.2f} "
              f"{run.rate:>10.0f} {run.rate / bare:>8.2f} "
              f"{f'{run.peak_inflight}/{run.mean_inflight:.0f}':>9} "
              f"{run.cpu_us('self'):>13.0f}/{run.cpu_us('broker'):>4.0f}/"
              f"{run.cpu_us('receiver'):>4.0f}     {run.notes}",
              flush=True)


def print_summary(args: argparse.Namespace, results: dict[str, list[RunResult]],
                  latency: Latency | None) -> None:
    bare = results["bare aiohttp POST loop"]
    print()
    print(f"median over {args.rounds} round(s); the ratio is the median of each round's ratio "
          f"to that round's bare loop ({bare[0].peak_inflight} workers):")
    ratio_on: float | None = None
    for name, runs in results.items():
        rate = statistics.median(r.rate for r in runs)
        ratio = statistics.median(r.rate / b.rate for r, b in zip(runs, bare, strict=True))
        print(f"  {name:<24} {rate:>8.0f} records/s  {ratio:>5.2f} x bare  "
              f"CPU {statistics.median(r.cpu_us('self') for r in runs):.0f} us/record")
        if name == "runtime, journal on":
            ratio_on = ratio
    if latency is not None:
        print()
        print(f"added latency (fetch -> HTTP send), journal, first attempts, "
              f"{latency.samples} records at {latency.achieved_rate:.0f} records/s:")
        print(f"  p50 {latency.p50_ms:.0f} ms   p99 {latency.p99_ms:.0f} ms   "
              f"max {latency.max_ms:.0f} ms   (end to end: p50 {latency.e2e_p50_ms:.0f} ms, "
              f"p99 {latency.e2e_p99_ms:.0f} ms; journal dropped {latency.dropped})")
    print()
    if ratio_on is not None:
        verdict = "met" if ratio_on >= 0.8 else "MISSED"
        print(f"goal throughput >= 0.8 x bare (journal on): {ratio_on:.2f} -> {verdict}")
    if latency is not None:
        verdict = "met" if latency.p99_ms <= 5 else "MISSED"
        print(f"goal added latency p99 <= 5 ms: {latency.p99_ms:.0f} ms -> {verdict}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100, help="record value bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=100,
                        help="concurrencyFactor (per partition)")
    parser.add_argument("--bare-concurrency", type=int, default=0,
                        help="bare loop workers; 0: what the runtime has in flight")
    parser.add_argument("--bare-at-mean", action=argparse.BooleanOptionalAction,
                        default=True, help="also run the bare loop with as many workers as "
                        "the runtime had HTTP requests in flight on average")
    parser.add_argument("--gc-tune", choices=("none", "runtime", "both"), default="none",
                        help="an experiment: gc.freeze() and a young-generation threshold "
                        f"of {GC_TUNED_THRESHOLD[0]} for the runtime runs (or all runs)")
    parser.add_argument("--max-connections", type=int, default=0,
                        help="subscriptionMethod.maxConnections; 0: the default pool")
    parser.add_argument("--transport", choices=("aiohttp", "lean"), default="",
                        help="the egress transport of the runtime runs (default: the "
                             "product's default, actors/delivery/egress/transport.py)")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="subscriptionMethod.batchSize (records per request)")
    parser.add_argument("--batch-linger-ms", type=int, default=0,
                        help="subscriptionMethod.batchLingerMs")
    parser.add_argument("--py-spy", default="",
                        help="sample the runtime run (journal on) with py-spy into this "
                             "file (collapsed stacks; see bench/profile_summary.py)")
    parser.add_argument("--load-factor", type=float, default=0.0,
                        help="topics[].config.loadFactor; 0: the default (2.0)")
    parser.add_argument("--fetch-max-wait-ms", type=int, default=10,
                        help="the subscription's fetch.max.wait.ms; 0: aiokafka's 500 "
                             "(see the module docstring: Tansu holds every fetch that long)")
    parser.add_argument("--journal", choices=("on", "off", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rate", type=int, default=1000, help="latency run, records/s")
    parser.add_argument("--duration-s", type=float, default=10.0,
                        help="latency run length; 0 skips it")
    parser.add_argument("--receiver", choices=("auto", "nginx", "uvloop"), default="auto")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="bound on each measured phase")
    args = parser.parse_args(argv)
    if min(args.records, args.partitions, args.concurrency, args.rounds, args.size) < 1:
        parser.error("--records, --size, --partitions, --concurrency, --rounds must be >= 1")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.transport:
        transport.DEFAULT_TRANSPORT = args.transport
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="bench-delivery-"))
    workdir.chmod(0o755)  # nginx workers may run as another user
    try:
        with receiver(args.receiver, workdir) as recv:
            uvloop.run(bench(args, recv, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
