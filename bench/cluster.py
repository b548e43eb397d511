"""Two runtime instances against one on this machine: records/s and CPU per record.

    .venv/bin/python bench/cluster.py [--records 30000] [--partitions 8]
        [--concurrency 50] [--instances 1,2] [--rounds 1] [--timeout-s 180]
        [--subscribers 1]

Everything runs on loopback, started by this script and stopped by PID at the end: the
embedded broker (Tansu), the receiver (`bench/receiver.py`, a uvloop responder answering
`200`), and per configuration N runtime processes (`python -m runtime CONFIG`, the same
config file, cluster mode: `[cluster] subscriptions_topic`, journal off), each given its
admin port as `[runtime] workers` does.

Per configuration and round: a new topic with `--partitions` partitions and a new group;
`--subscribers` subscriptions (each its own `group.id`: cursors on the instances' shared
reads, issue 24) are posted to the first instance; once every instance owns partitions
(the instance group settled), `--records` records of 100 bytes are produced (by this
process, in about a second) and the clock runs from the first produce to the moment the
instances' `delivered` counters (their admin API, polled every 50 ms) add up to
`--records` x `--subscribers`; rates and CPU are per delivery. CPU:
user + system seconds from /proc of the runtime processes (together), of the broker and
of the receiver over the same window, per record. A bare aiohttp POST loop to the same
receiver (`--concurrency` x 2 workers, `--records` requests) runs in the same session as
the ceiling of one Python process on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime.host.workers import LISTEN_ENV, WORKER_ENV
from runtime.kafka import create_topics, make_producer
from runtime.kafka.broker import EmbeddedBroker, free_port, port_accepts

ROOT = Path(__file__).resolve().parent.parent
RECEIVER = Path(__file__).resolve().parent / "receiver.py"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SIZE = 100


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class Result:
    name: str
    records: int
    seconds: float
    cpu: dict[str, float]

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    def us(self, who: str) -> float:
        return self.cpu.get(who, 0.0) / self.records * 1e6


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(RECEIVER), "--port", str(port)],
                               stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not port_accepts("127.0.0.1", port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the receiver did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}/hook", process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def write_config(workdir: Path, bootstrap: str) -> Path:
    path = workdir / f"cluster-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(f"""
[[brokers]]
name = "Kafka"
bootstrap_servers = "{bootstrap}"
[admin]
listen = "127.0.0.1:0"
[persistence]
dir = "{workdir / 'persist'}"
[journal]
enabled = false
[cluster]
subscriptions_topic = "subs-{uuid.uuid4().hex[:8]}"
[runtime]
shutdown_deadline_ms = 4000
""")
    return path


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json(content_type=None)


def spawn(config: Path, workdir: Path, index: int, port: int) -> subprocess.Popen[bytes]:
    """`python -m runtime CONFIG`, with its admin port as `[runtime] workers` gives it."""
    env = {**os.environ, WORKER_ENV: str(index), LISTEN_ENV: f"127.0.0.1:{port}"}
    with (workdir / f"instance-{index}.log").open("ab") as err:
        return subprocess.Popen([sys.executable, "-m", "runtime", str(config)], cwd=ROOT,
                                env=env, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)


@contextlib.asynccontextmanager
async def instances(count: int, config: Path, workdir: Path) -> AsyncIterator[
        list[tuple[str, subprocess.Popen[bytes]]]]:
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for index in range(count):
            port = free_port()
            started.append((f"http://127.0.0.1:{port}", spawn(config, workdir, index, port)))
        for url, _ in started:
            await until(lambda u=url: healthy(u), 30, f"{url} did not start")
        yield started
    finally:
        for _, process in started:
            stop(process)


async def healthy(url: str) -> bool:
    with contextlib.suppress(aiohttp.ClientError):
        return (await get(url + "/healthz"))[0] == 200
    return False


async def until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(what)


async def shares(urls: list[str], group: str) -> list[tuple[int, int]]:
    """(partitions the first subscription reads there, records delivered to every
    subscription there) per instance: the first from its status, the second from the
    instance's metrics."""
    answers = []
    for url in urls:
        status, reply = await get(f"{url}/broker/subscription/bench-0/{group}-0")
        data = reply.get("data", {}).get("status", {}) if status == 200 else {}
        answers.append((len(data.get("partitions", [])), await delivered(url)))
    return answers


async def delivered(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        text = await response.text()
    return sum(int(float(line.rpartition(" ")[2])) for line in text.splitlines()
               if line.startswith("hookstream_delivered_total{"))


async def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = make_producer(bootstrap, acks="all", linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for first in range(0, count, 5000):
            futures = [await producer.send(topic, f"{i:012d}".encode().ljust(SIZE, b"."),
                                           partition=i % partitions)
                       for i in range(first, min(first + 5000, count))]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def cluster_run(n: int, args: argparse.Namespace, bootstrap: str, url: str,
                      pids: dict[str, int], workdir: Path) -> Result:
    topic, group = f"bench-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    deliveries: int = args.records * args.subscribers
    await create_topics(bootstrap, {topic: args.partitions})
    config = write_config(workdir, bootstrap)
    async with instances(n, config, workdir) as running:
        urls = [u for u, _ in running]
        async with aiohttp.ClientSession() as session:
            for i in range(args.subscribers):
                body = {"id": f"bench-{i}", "group.id": f"{group}-{i}", "broker": "Kafka",
                        "topics": [{"name": topic,
                                    "config": {"concurrencyFactor": args.concurrency}}],
                        "subscriptionMethod": {"type": "http", "uri": url,
                                               "delayOnErrorMs": 100},
                        "properties": {"fetch.max.wait.ms": "10"}}
                async with session.post(urls[0] + "/broker/subscription",
                                        json=body) as response:
                    assert response.status == 200, await response.text()

        async def settled() -> bool:
            owned = [s[0] for s in await shares(urls, group)]
            return sum(owned) == args.partitions and min(owned) > 0

        await until(settled, 60, "the group did not settle")
        who = {**pids, **{f"runtime-{i}": p.pid for i, (_, p) in enumerate(running)}}
        before = {k: cpu_s(p) for k, p in who.items()}
        start = time.perf_counter()
        await produce(bootstrap, topic, args.records, args.partitions)

        async def done() -> bool:
            return sum(s[1] for s in await shares(urls, group)) >= deliveries

        await until(done, args.timeout_s, "not everything was delivered in time")
        seconds = time.perf_counter() - start
        used = {k: cpu_s(p) - before[k] for k, p in who.items()}
    runtime = sum(v for k, v in used.items() if k.startswith("runtime-"))
    return Result(f"{n} instance{'s' if n > 1 else ''}", deliveries, seconds,
                  {"runtime": runtime, "broker": used["broker"], "receiver": used["receiver"],
                   "self": used["self"]})


async def bare_loop(url: str, count: int, concurrency: int, pids: dict[str, int]) -> Result:
    body = b".".ljust(SIZE, b".")
    issued = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal issued
        while issued < count:
            issued += 1
            async with session.post(url, data=body) as response:
                await response.read()
                assert response.status == 200

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        before = {k: cpu_s(p) for k, p in pids.items()}
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        seconds = time.perf_counter() - start
        used = {k: cpu_s(p) - before[k] for k, p in pids.items()}
    return Result("bare aiohttp POST loop", count, seconds,
                  {"runtime": used["self"], "broker": used["broker"],
                   "receiver": used["receiver"], "self": 0.0})


def print_table(results: list[Result]) -> None:
    print("| contender | records/s | runtime CPU us/record | runtime cores busy "
          "| broker us/record | receiver us/record | seconds |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        cores = r.cpu.get("runtime", 0.0) / r.seconds
        print(f"| {r.name} | {r.rate:,.0f} | {r.us('runtime'):.0f} | {cores:.2f} "
              f"| {r.us('broker'):.0f} | {r.us('receiver'):.0f} | {r.seconds:.1f} |")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, receiver() as (url, recv):
        broker = EmbeddedBroker()
        await broker.start()
        try:
            assert broker.pid is not None
            pids = {"broker": broker.pid, "receiver": recv.pid, "self": os.getpid()}
            print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
            results = [await bare_loop(url, args.records * args.subscribers,
                                       args.concurrency * 2, pids)]
            for round_ in range(args.rounds):
                for n in args.instances:
                    result = await cluster_run(n, args, broker.bootstrap, url, pids, Path(tmp))
                    result.name += f" (round {round_ + 1})"
                    results.append(result)
                    print(f"{result.name}: {result.rate:,.0f} records/s", flush=True)
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            print_table(results)
        finally:
            await broker.stop()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--instances", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 2])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=180.0)
    parser.add_argument("--subscribers", type=int, default=1,
                        help="subscriptions of the topic, each its own group.id")
    return parser.parse_args(argv)


if __name__ == "__main__":
    uvloop.run(main(parse_args(sys.argv[1:])))
