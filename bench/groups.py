"""Many subscriptions in one Kafka group (issue 17): start-up, delivery and the stall one
more subscription causes, with every subscription of one `group.id` (one shared member)
against every subscription in its own group (one member each), in the same run.

    .venv/bin/python bench/groups.py [--subs 500] [--probes 50] [--layouts shared,separate]
        [--feed-ms 20] [--timeout-s 120]

Everything runs on loopback, started here and stopped at the end: the embedded broker
(Tansu) and, in this process, the runtime and one HTTP receiver. Per layout:

1. `--subs` topics of one partition, and as many subscriptions, one per topic (each in
   group `bench-team` with `shared`, in `bench-<i>` with `separate`), subscribed through
   the library API (`DeliveryService.subscribe`, the admin API's path without HTTP).
   `subscribe`: time to subscribe them all; `ready`: from the last subscribe until
   readiness reports nothing (every subscription has its partition); `mb_per_sub`: this
   process's resident memory growth from before the first subscribe until ready, per
   subscription.
2. `probe`: one record produced to each of `--probes` topics; time until all delivered.
3. `join gap`: subscription 0 is fed one record every `--feed-ms` for a bounded time;
   one more subscription (a new topic, same group) is subscribed meanwhile. The longest
   gap between two deliveries to subscription 0 from the subscribe until 8 s later,
   against the longest gap in the 2 s before (the feed's own rhythm: the bare loop).
   `update gap`: the same while subscription 1 is updated (another `concurrencyFactor`,
   same topic).
4. `restart`: the runtime stops and a new one starts from the persisted subscriptions;
   time from its start until ready, then the probe again.

Every wait is bounded by `--timeout-s`; the feed by a count.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import logging
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import create_topics, make_producer
from runtime.kafka.broker import EmbeddedBroker

GROUP = "bench-team"


@dataclass
class Receiver:
    """Records when each subscription got a push."""

    arrivals: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    runner: web.AppRunner | None = None
    port: int = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.arrivals[request.headers["QOH-Consumer"]].append(time.monotonic())
        return web.Response(status=200)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def holds(predicate: Callable[[], bool | Awaitable[bool]]) -> bool:
    found = predicate()
    return bool(await found if inspect.isawaitable(found) else found)


async def until(predicate: Callable[[], bool | Awaitable[bool]], timeout_s: float,
                what: str) -> float:
    """Seconds until `predicate` holds (checked every 20 ms; it may be a coroutine
    function); raises after `timeout_s`."""
    started = time.monotonic()
    while not await holds(predicate):
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


@dataclass
class Layout:
    name: str
    subs: int
    prefix: str
    receiver: Receiver

    def topic(self, i: int) -> str:
        return f"{self.prefix}-{i}"

    def group(self, i: int) -> str:
        return GROUP if self.name == "shared" else f"{self.prefix}-g{i}"

    def key(self, i: int) -> str:
        return f"s{i}_{self.group(i)}"

    def document(self, i: int) -> dict[str, Any]:
        return {"id": f"s{i}", "group.id": self.group(i), "broker": "Kafka",
                "topics": [{"name": self.topic(i)}],
                "subscriptionMethod": {"type": "http",
                                       "uri": f"http://127.0.0.1:{self.receiver.port}/hook"},
                "properties": {"fetch.max.wait.ms": "50"}}


def rss_mb() -> float:
    """This process's resident memory now (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def config(bootstrap: str, workdir: Path) -> Any:
    return parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"enabled": False, "dir": str(workdir / "journal")},
        "egress": {"allow_networks": ["127.0.0.0/8"]},
    })


def service(runtime: Runtime) -> DeliveryService:
    found = runtime.service("delivery")
    assert isinstance(found, DeliveryService)
    return found


async def ready(delivery: DeliveryService) -> bool:
    """The delivery service has no readiness reason (it asks the partition actors)."""
    return not await delivery.readiness()


async def probe(bootstrap: str, layout: Layout, probes: int, timeout_s: float) -> float:
    """One record to each of the first `probes` topics; seconds until all delivered."""
    before = {layout.key(i): len(layout.receiver.arrivals[layout.key(i)])
              for i in range(probes)}
    producer = make_producer(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        started = time.monotonic()
        await asyncio.gather(*[await producer.send(layout.topic(i), b"probe")
                               for i in range(probes)])
    finally:
        await producer.stop()
    arrivals = layout.receiver.arrivals
    await until(lambda: all(len(arrivals[k]) > n for k, n in before.items()), timeout_s,
                f"{layout.name} probe")
    return time.monotonic() - started


async def fed_gap(bootstrap: str, layout: Layout, feed_ms: int, timeout_s: float,
                  change: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """(longest gap before `change`, longest gap after it) in deliveries to subscription 0,
    fed one record every `feed_ms` meanwhile."""
    arrivals = layout.receiver.arrivals[layout.key(0)]
    producer = make_producer(bootstrap, acks=1, linger_ms=0)
    await producer.start()
    feed_count = int(12_000 / feed_ms)  # about 12 s of feed: bounded

    async def feed() -> None:
        for _ in range(feed_count):
            await producer.send(layout.topic(0), b"feed")
            await asyncio.sleep(feed_ms / 1000)

    feeding = asyncio.create_task(feed())
    try:
        await asyncio.sleep(2.5)
        changed = time.monotonic()
        await change()
        await asyncio.wait_for(feeding, timeout_s)
        await asyncio.sleep(1)
    finally:
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)
        await producer.stop()
    return (longest_gap(arrivals, changed - 2, changed),
            longest_gap(arrivals, changed, changed + 8))


async def join_gap(bootstrap: str, runtime: Runtime, layout: Layout, feed_ms: int,
                   timeout_s: float) -> tuple[float, float]:
    """The gaps around one more subscription (a new topic, same group) subscribing."""
    extra = layout.subs
    await create_topics(bootstrap, {layout.topic(extra): 1})

    async def join() -> None:
        await service(runtime).subscribe(decode_consumer(layout.document(extra)))

    return await fed_gap(bootstrap, layout, feed_ms, timeout_s, join)


async def update_gap(bootstrap: str, runtime: Runtime, layout: Layout, feed_ms: int,
                     timeout_s: float) -> tuple[float, float]:
    """The gaps around an update of subscription 1 that keeps its topic (another
    `concurrencyFactor`): with a shared member, no rebalance."""
    document = layout.document(1)
    document["topics"][0]["config"] = {"concurrencyFactor": 2}

    async def update() -> None:
        await service(runtime).update(layout.key(1), decode_consumer(document))

    return await fed_gap(bootstrap, layout, feed_ms, timeout_s, update)


def longest_gap(times: list[float], start: float, end: float) -> float:
    inside = [start, *sorted(t for t in times if start <= t <= end), end]
    return max(b - a for a, b in itertools.pairwise(inside))


async def run_layout(bootstrap: str, layout: Layout, args: argparse.Namespace,
                     workdir: Path) -> dict[str, float]:
    created = time.monotonic()
    await create_topics(bootstrap, {layout.topic(i): 1 for i in range(layout.subs)})
    note(f"{layout.name}: {layout.subs} topics created in {time.monotonic() - created:.1f} s")
    result: dict[str, float] = {}
    cfg = config(bootstrap, workdir)
    async with Runtime(cfg, services=[DeliveryService]) as runtime:
        delivery = service(runtime)
        rss_before = rss_mb()
        started = time.monotonic()
        for i in range(layout.subs):
            await delivery.subscribe(decode_consumer(layout.document(i)))
            if (i + 1) % 100 == 0:
                note(f"{layout.name}: {i + 1} subscribed at {time.monotonic() - started:.1f} s")
        result["subscribe_s"] = time.monotonic() - started
        result["ready_s"] = await until(lambda: ready(delivery), args.timeout_s,
                                        f"{layout.name} ready")
        result["mb_per_sub"] = (rss_mb() - rss_before) / layout.subs
        note(f"{layout.name}: subscribe_s {result['subscribe_s']:.2f} ready_s "
             f"{result['ready_s']:.2f} mb_per_sub {result['mb_per_sub']:.3f}")
        result["probe_s"] = await probe(bootstrap, layout, args.probes, args.timeout_s)
        note(f"{layout.name}: probe_s {result['probe_s']:.2f}")
        before, after = await join_gap(bootstrap, runtime, layout, args.feed_ms,
                                       args.timeout_s)
        result["gap_before_s"], result["gap_join_s"] = before, after
        note(f"{layout.name}: gap_before_s {before:.2f} gap_join_s {after:.2f}")
        _, result["gap_update_s"] = await update_gap(bootstrap, runtime, layout,
                                                     args.feed_ms, args.timeout_s)
        note(f"{layout.name}: gap_update_s {result['gap_update_s']:.2f}")
        stopping = time.monotonic()
    result["stop_s"] = time.monotonic() - stopping
    restarted = time.monotonic()
    async with Runtime(cfg, services=[DeliveryService]) as runtime:
        delivery = service(runtime)
        await until(lambda: ready(delivery), args.timeout_s,
                    f"{layout.name} ready after restart")
        result["restart_ready_s"] = time.monotonic() - restarted
        result["restart_probe_s"] = await probe(bootstrap, layout, args.probes,
                                                args.timeout_s)
    return result


def dump_tasks() -> None:
    """On SIGUSR1: where every task waits (a stalled run says why)."""
    for task in asyncio.all_tasks():
        task.print_stack(limit=6, file=sys.stderr)


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, float]]:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
    broker = EmbeddedBroker()
    await broker.start()
    receiver = Receiver()
    await receiver.start()
    results: dict[str, dict[str, float]] = {}
    try:
        for name in args.layouts.split(","):
            layout = Layout(name, args.subs, f"bg-{name}-{uuid.uuid4().hex[:6]}", receiver)
            results[name] = await run_layout(broker.bootstrap, layout, args, workdir / name)
            print(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[name].items()),
                  flush=True)
    finally:
        await receiver.stop()
        await broker.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subs", type=int, default=500)
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--layouts", default="shared,separate")
    parser.add_argument("--feed-ms", type=int, default=20)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("actors").setLevel(args.log_level)
    workdir = Path(tempfile.mkdtemp(prefix="bench-groups-"))
    try:
        results = asyncio.run(bench(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    keys = list(next(iter(results.values())))
    print("| layout | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.2f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
