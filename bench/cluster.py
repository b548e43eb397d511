"""Two runtime instances against one on this machine: records/s and CPU per record; with
`--kill`, kill -9 of one instance mid-stream: lost and duplicated records per subscription.

    .venv/bin/python bench/cluster.py [--records 30000] [--partitions 8]
        [--concurrency 50] [--instances 1,2] [--rounds 1] [--timeout-s 180]
        [--subscribers 1] [--kill [SHARE]]

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

`--kill [SHARE]` (default share 0.5) is a correctness run, not a timing one (issue 24,
goal 4: 0 lost for every subscription, duplicates <= its uncommitted deliveries). The
receiver runs with `--count`: each subscription's URL ends in its run's group and its id
(`.../hook/<group>/bench-<i>`) and the receiver counts receipts per (path, `webhook-id`); the
records are produced with one fixed timestamp, so each record's id (actors/delivery/
document/signing.py: topic, partition, offset, timestamp) is known here from the produce
acknowledgements. Per configuration with 2 or more instances: once the group settled,
this script reads (a) the partitions the last instance (the victim) runs for each
subscription, from its status API; it produces, and once the receiver has SHARE of
`--records` x `--subscribers` receipts (its `GET /counts/summary`, polled every 50 ms), it
reads (b) each subscription group's committed offsets (`GroupOffsets.fetch`,
runtime/kafka/group_offsets.py) and sends the victim SIGKILL. 0.5 s after it died (well
inside the instance group's 6 s session timeout) it takes a snapshot of the receiver's
counts, and checks that the survivors then run exactly the other partitions of every
subscription (else the bound is in doubt: printed loudly, exit code 1). The bound of
subscription s is the number of distinct records of s in that snapshot on the victim's
partitions at offsets >= the committed offsets read in (b): the survivors resume each of
those partitions at the group's committed offset at takeover, which is >= (b) (commits
only move forward), so what they deliver a second time is among these records; records
of other partitions are not delivered again when nothing else moves. At small sizes the
stream is short (about 30,000 deliveries/s here): the share actually received at the
kill is printed, and 100% means the kill came after the stream, not mid-stream.
records. Then it waits (at most `--timeout-s`) until every subscription has received
every record and every group has committed the end of every partition (after that
nothing is delivered again), and prints per subscription: produced, distinct received,
lost, duplicates (records received more than once), extra receipts, the bound, and
duplicates outside the bound set. Lost > 0, a duplicate count above the bound, a
duplicate outside the bound set or a receipt without a known `webhook-id` is printed
loudly and makes the exit code 1, as does the wait timing out. One-instance
configurations and the bare loop are skipped (nothing to kill; the receiver counts, so
no rate figures).
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
from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.structs import RecordMetadata

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from actors.delivery.document.signing import webhook_id
from runtime.host.workers import LISTEN_ENV, WORKER_ENV
from runtime.kafka import create_topics, make_producer
from runtime.kafka.broker import EmbeddedBroker, free_port, port_accepts
from runtime.kafka.group_offsets import GroupOffsets

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
def receiver(count: bool = False) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(RECEIVER), "--port", str(port)]
                               + (["--count"] if count else []),
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


async def produce(bootstrap: str, topic: str, count: int, partitions: int,
                  timestamp_ms: int | None = None) -> list[RecordMetadata]:
    """Produce `count` records round-robin over the partitions; their acknowledgements."""
    producer = make_producer(bootstrap, acks="all", linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    acks: list[RecordMetadata] = []
    try:
        for first in range(0, count, 5000):
            futures = [await producer.send(topic, f"{i:012d}".encode().ljust(SIZE, b"."),
                                           partition=i % partitions,
                                           timestamp_ms=timestamp_ms)
                       for i in range(first, min(first + 5000, count))]
            acks.extend(await asyncio.gather(*futures))
    finally:
        await producer.stop()
    return acks


async def subscribe(admin: str, args: argparse.Namespace, topic: str, group: str,
                    uri_of: Any) -> None:
    """Post `--subscribers` subscriptions (`bench-<i>`, group `<group>-<i>`, pushing to
    `uri_of(i)`) to the instance at `admin`."""
    async with aiohttp.ClientSession() as session:
        for i in range(args.subscribers):
            body = {"id": f"bench-{i}", "group.id": f"{group}-{i}", "broker": "Kafka",
                    "topics": [{"name": topic,
                                "config": {"concurrencyFactor": args.concurrency}}],
                    "subscriptionMethod": {"type": "http", "uri": uri_of(i),
                                           "delayOnErrorMs": 100},
                    "properties": {"fetch.max.wait.ms": "10"}}
            async with session.post(admin + "/broker/subscription", json=body) as response:
                assert response.status == 200, await response.text()


async def settled(urls: list[str], group: str, partitions: int) -> bool:
    """Every instance owns partitions and together they own all of them."""
    owned = [s[0] for s in await shares(urls, group)]
    return sum(owned) == partitions and min(owned) > 0


async def cluster_run(n: int, args: argparse.Namespace, bootstrap: str, url: str,
                      pids: dict[str, int], workdir: Path) -> Result:
    topic, group = f"bench-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    deliveries: int = args.records * args.subscribers
    await create_topics(bootstrap, {topic: args.partitions})
    config = write_config(workdir, bootstrap)
    async with instances(n, config, workdir) as running:
        urls = [u for u, _ in running]
        await subscribe(urls[0], args, topic, group, lambda i: url)
        await until(lambda: settled(urls, group, args.partitions), 60,
                    "the group did not settle")
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


@dataclass
class KillRow:
    """One subscription of a kill run (counts are of records unless said otherwise)."""

    sub: str
    produced: int
    distinct: int  # records received at least once
    duplicates: int  # records received more than once
    extra: int  # receipts beyond the first, all records together
    bound: int  # records of the victim's partitions at or past (b), received by the kill
    outside: int  # duplicated records not among those of `bound`
    unknown: int  # receipts whose webhook-id is no produced record's
    at_kill: int  # records received by the snapshot after the kill

    @property
    def lost(self) -> int:
        return self.produced - self.distinct

    def failures(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{self.lost} LOST")
        if self.duplicates > self.bound:
            found.append(f"{self.duplicates} duplicates > bound {self.bound}")
        if self.outside:
            found.append(f"{self.outside} duplicates outside the bound set")
        if self.unknown:
            found.append(f"{self.unknown} receipts of unknown webhook-id")
        return found


@dataclass
class KillRun:
    name: str
    rows: list[KillRow]
    victim: str  # which instance, and the partitions it ran
    share_at_kill: float  # receipts at the trigger's last reading / deliveries
    share_at_snapshot: float  # records in the snapshot / deliveries
    moved: bool  # at the snapshot the survivors did not run exactly the other partitions
    takeover_s: float | None  # kill -> the survivors run every partition (seen)
    complete_s: float | None  # kill -> all received and committed; None: timed out
    load: float


async def partitions_of(url: str, sub: str, group: str) -> set[int]:
    """The partitions the instance at `url` runs for one subscription (its status API)."""
    status, reply = await get(f"{url}/broker/subscription/{sub}/{group}")
    data = reply.get("data", {}).get("status", {}) if status == 200 else {}
    return {int(p["partition"]) for p in data.get("partitions", [])}


async def kill_run(n: int, args: argparse.Namespace, bootstrap: str, url: str,
                   workdir: Path) -> KillRun:
    """One configuration with `--kill`: see the module docstring."""
    topic, group = f"bench-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    deliveries: int = args.records * args.subscribers
    share: float = args.kill
    subs = [f"bench-{i}" for i in range(args.subscribers)]
    groups = [f"{group}-{i}" for i in range(args.subscribers)]
    base = url.partition("//")[2].partition("/")[2]  # "hook"
    paths = [f"/{base}/{group}/{sub}" for sub in subs]  # the receiver serves every run
    counts_url = url.rpartition(f"/{base}")[0] + "/counts"
    tps = [TopicPartition(topic, p) for p in range(args.partitions)]
    await create_topics(bootstrap, {topic: args.partitions})
    config = write_config(workdir, bootstrap)
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    offsets = GroupOffsets(client)
    try:
        async with instances(n, config, workdir) as running:
            urls = [u for u, _ in running]
            await subscribe(urls[0], args, topic, group, lambda i: f"{url}/{group}/bench-{i}")
            await until(lambda: settled(urls, group, args.partitions), 60,
                        "the group did not settle")
            victim_url, victim = running[-1]
            survivors = urls[:-1]
            owned = await asyncio.gather(*(partitions_of(victim_url, sub, g)
                                           for sub, g in zip(subs, groups, strict=True)))
            stamp = int(time.time() * 1000)
            producing = asyncio.create_task(
                produce(bootstrap, topic, args.records, args.partitions, stamp))
            at_trigger = 0

            async def share_reached() -> bool:  # one small GET: the trigger must be quick
                nonlocal at_trigger
                if producing.done():
                    producing.result()  # raises what the producer raised
                summary = (await get(counts_url + "/summary"))[1]
                at_trigger = sum(summary.get(path, [0, 0])[1] for path in paths)
                return at_trigger >= share * deliveries

            await until(share_reached, args.timeout_s, "the kill share was never reached")
            before = await asyncio.gather(*(offsets.fetch(g, tps) for g in groups))
            victim.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            await asyncio.to_thread(victim.wait)
            await asyncio.sleep(0.5)  # what the victim wrote before it died is read
            snapshot: dict[str, dict[str, int]] = (await get(counts_url))[1]
            moved = False  # the survivors run anything but the victim's complement
            for i, (sub, g) in enumerate(zip(subs, groups, strict=True)):
                theirs = [await partitions_of(u, sub, g) for u in survivors]
                moved |= set().union(*theirs) != set(range(args.partitions)) - owned[i]
            acks = await producing
            ids = {webhook_id(topic, a.partition, a.offset, stamp): (a.partition, a.offset)
                   for a in acks}
            ends = {tp: 0 for tp in tps}
            for a in acks:
                tp = TopicPartition(topic, a.partition)
                ends[tp] = max(ends[tp], a.offset + 1)
            takeover_s: float | None = None
            complete_s: float | None = None
            deadline = time.monotonic() + args.timeout_s
            while time.monotonic() < deadline:
                if takeover_s is None and sum(
                        s[0] for s in await shares(survivors, group)) == args.partitions:
                    takeover_s = time.perf_counter() - killed
                summary = (await get(counts_url + "/summary"))[1]
                if all(summary.get(path, [0, 0])[0] >= args.records for path in paths):
                    committed = await asyncio.gather(*(offsets.fetch(g, tps) for g in groups))
                    if all(c == ends for c in committed):
                        complete_s = time.perf_counter() - killed
                        break
                await asyncio.sleep(0.5)
            final: dict[str, dict[str, int]] = (await get(counts_url))[1]
    finally:
        await client.close()
    rows = []
    for i, sub in enumerate(subs):
        at_kill, received = snapshot.get(paths[i], {}), final.get(paths[i], {})
        bound_set = {w for w in at_kill if w in ids and ids[w][0] in owned[i]
                     and ids[w][1] >= (before[i][TopicPartition(topic, ids[w][0])] or 0)}
        known = {w: c for w, c in received.items() if w in ids}
        twice = [w for w, c in known.items() if c > 1]
        rows.append(KillRow(
            sub, len(ids), len(known), len(twice), sum(known[w] - 1 for w in twice),
            len(bound_set), sum(1 for w in twice if w not in bound_set),
            sum(c for w, c in received.items() if w not in ids),
            sum(1 for w in at_kill if w in ids)))
    return KillRun(f"{n} instances", rows,
                   f"runtime-{n - 1} (partitions {sorted(owned[0])} of {subs[0]})",
                   at_trigger / deliveries, sum(r.at_kill for r in rows) / deliveries, moved,
                   takeover_s, complete_s, os.getloadavg()[0])


def print_kill_run(run: KillRun) -> None:
    done = (f"every record received and committed {run.complete_s:.1f} s after the kill"
            if run.complete_s is not None else "NOT COMPLETE within --timeout-s")
    takeover = (f"survivors ran every partition {run.takeover_s:.1f} s after the kill"
                if run.takeover_s is not None else "the survivors' takeover was not seen")
    if run.moved:
        takeover += (" (!!! at the snapshot the survivors did not run exactly the other "
                     "partitions: the bound may be wrong !!!)")
    print(f"\n{run.name}: kill -9 of {run.victim} with {run.share_at_kill:.0%} of the "
          f"deliveries received ({run.share_at_snapshot:.0%} 0.5 s later); {takeover}; "
          f"{done}; load average {run.load:.2f}")
    print("| subscription | produced | received (distinct) | lost | duplicates "
          "| extra receipts | bound (uncommitted at kill) | duplicates outside bound "
          "| received at kill |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in run.rows:
        print(f"| {r.sub} | {r.produced:,} | {r.distinct:,} | {r.lost:,} | {r.duplicates:,} "
              f"| {r.extra:,} | {r.bound:,} | {r.outside:,} | {r.at_kill:,} |")
    total = KillRow(f"all {len(run.rows)}", *(sum(getattr(r, f) for r in run.rows)
                                              for f in ("produced", "distinct", "duplicates",
                                                        "extra", "bound", "outside",
                                                        "unknown", "at_kill")))
    print(f"| **{total.sub}** | {total.produced:,} | {total.distinct:,} | {total.lost:,} "
          f"| {total.duplicates:,} | {total.extra:,} | {total.bound:,} | {total.outside:,} "
          f"| {total.at_kill:,} |")
    for r in run.rows:
        if r.failures():
            print(f"!!! {run.name}, {r.sub}: {'; '.join(r.failures())} !!!")


async def kill_main(args: argparse.Namespace, bootstrap: str, url: str,
                    workdir: Path) -> int:
    """`--kill`: the kill run of each configuration with 2 or more instances; 1 when a
    subscription lost a record or duplicated past its bound (or the wait timed out)."""
    failed = False
    for round_ in range(args.rounds):
        for n in args.instances:
            if n < 2:
                print(f"{n} instance: nothing to kill, skipped")
                continue
            run = await kill_run(n, args, bootstrap, url, workdir)
            run.name += f" (round {round_ + 1})"
            print_kill_run(run)
            failed |= (run.complete_s is None or run.moved
                       or any(r.failures() for r in run.rows))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if failed:
        print("!!! FAILED: a record was lost, a duplicate was outside its bound, or the "
              "wait timed out (see above) !!!")
        return 1
    print("every subscription: 0 lost, duplicates within the bound")
    return 0


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


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, receiver(
            count=args.kill is not None) as (url, recv):
        broker = EmbeddedBroker()
        await broker.start()
        try:
            assert broker.pid is not None
            pids = {"broker": broker.pid, "receiver": recv.pid, "self": os.getpid()}
            print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
            if args.kill is not None:
                return await kill_main(args, broker.bootstrap, url, Path(tmp))
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
            return 0
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
    parser.add_argument("--kill", type=float, nargs="?", const=0.5, default=None,
                        metavar="SHARE",
                        help="kill -9 one instance of each configuration with 2 or more "
                             "once SHARE (default 0.5) of the deliveries are done; count "
                             "lost and duplicated records per subscription (no rates)")
    args = parser.parse_args(argv)
    if args.kill is not None and not 0 < args.kill < 1:
        parser.error("--kill SHARE must be between 0 and 1")
    return args


if __name__ == "__main__":
    sys.exit(uvloop.run(main(parse_args(sys.argv[1:]))))
