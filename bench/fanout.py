"""High fan-out (issue 24): many subscriptions of one topic, this code against another tree.

    .venv/bin/python bench/fanout.py [--subscribers 1000] [--partitions 4] [--records 10]
        [--baseline-records 20000] [--idle-s 10] [--compare DIR] [--repeat N]
        [--timeout-s 300]

Runs on loopback, everything started here and stopped at the end: the embedded broker,
the receiver (bench/receiver.py, a uvloop responder answering `200`), and per code tree a
worker process that runs the runtime in-process (uvloop, journal on). `--compare DIR`
runs the same worker on another checkout (e.g. `git worktree add /tmp/old <commit>`)
right after, against the same broker and receiver, so the figures come from one run.
`--repeat N` runs the trees in turn N times (A B A B ...) and ends with each tree's
medians: minutes apart, one tree's single-subscription figure moved by a third.

Per tree, on fresh topics:

1. Single subscription (the reference): one subscription reads a backlog of
   `--baseline-records` 100-byte records on a `--partitions` topic; CPU of the worker per
   record, from the first delivery to the last.
2. Fan-out: `--subscribers` subscriptions (each its own group.id) of one `--partitions`
   topic, subscribed through the admin API `--in-flight` at a time: the time until all
   answered, until every cursor runs (exists and knows where it starts), RSS growth per
   subscription then (and again after the deliveries below, and 22 s later: idle outlets'
   workers end after 10 to 20 s), idle CPU of the worker and of the broker over
   `--idle-s` from 2 s later, with nothing produced, then `--records` records
   produced: the time until every subscriber has them all (records x subscribers
   deliveries), and the worker's CPU per delivery over that window.

The load average is printed beside every figure: a figure taken on a busy machine is not
evidence. Every wait is bounded by `--timeout-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any

RESULT = "RESULT "
T0 = time.perf_counter()
HERE = Path(__file__).resolve().parent
POLL_S = 0.02
VALUE = attrgetter("value")
IN_FLIGHT = 8
"""Subscribes posted at a time (issue 32 measured "posted 8 at a time")."""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


POLLS_CPU_S = [0.0]
"""CPU seconds this process spent counting deliveries for the bench's own waits."""


def system_and_faults() -> tuple[float, int]:
    """This process's system CPU seconds and minor page faults so far: a burst's share
    of kernel work (first touches of memory, sockets) beside its CPU."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_stime, usage.ru_minflt


def cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds of a process; this one's (the default) without the
    bench's polls of the delivery counters (`POLLS_CPU_S`)."""
    if pid is None:
        return time.process_time() - POLLS_CPU_S[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Requests:
    """Kafka requests this process sends, counted by kind (`--requests`): wraps aiokafka's
    `AIOKafkaConnection.send`, so it counts every client's requests."""

    def __init__(self) -> None:
        from collections import Counter

        from aiokafka.conn import AIOKafkaConnection

        self.counts: Counter[str] = Counter()
        from runtime.kafka import pipeline

        send, send_all = AIOKafkaConnection.send, pipeline.send_all
        send_commits = pipeline.send_commits
        counts = self.counts

        def kind(request: Any) -> str:
            return type(request).__name__.removeprefix("Fast").rsplit("Request", 1)[0]

        def counted(conn: Any, request: Any, expect_response: bool = True) -> Any:
            counts[kind(request)] += 1
            return send(conn, request, expect_response)

        def counted_all(conn: Any, requests: Any) -> Any:  # the group offsets' rounds
            counts.update(map(kind, requests))
            return send_all(conn, requests)

        def counted_commits(conn: Any, commits: Any) -> Any:
            counts["OffsetCommit"] += len(commits)
            return send_commits(conn, commits)

        AIOKafkaConnection.send = counted
        pipeline.send_all = counted_all
        pipeline.send_commits = counted_commits

    def taken(self) -> str:
        """The counts since the last call, most first."""
        text = ", ".join(f"{kind} {n}" for kind, n in self.counts.most_common())
        self.counts.clear()
        return text or "none"

    async def per_second(self, seconds: float, note: Any) -> None:
        """Sleep `seconds`, noting each second's requests."""
        for second in range(int(seconds)):
            await asyncio.sleep(1)
            note(f"  idle second {second + 1}: {self.taken()}")
        await asyncio.sleep(seconds - int(seconds))


def watch_members() -> weakref.WeakSet[Any]:
    """The instance members this process builds (the bench reads their commit books)."""
    from actors.delivery.path.member.actor import InstanceMemberActor

    members: weakref.WeakSet[Any] = weakref.WeakSet()
    init = InstanceMemberActor.__init__

    def noted(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        members.add(self)

    InstanceMemberActor.__init__ = noted  # type: ignore[method-assign]
    return members


async def committed(members: weakref.WeakSet[Any]) -> float:
    """Seconds until no member holds a position to commit (pending or in a round) for
    0.2 s in a row: a burst's CPU with its commits (the protocol's one request per group
    that moved, which at fan-out mostly goes out after the last delivery)."""
    start, quiet_since = time.perf_counter(), None
    while time.perf_counter() - start < 60:
        book = [m.commits for m in members]
        if any(b.pending or b.in_flight is not None for b in book):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.perf_counter()
        elif time.perf_counter() - quiet_since >= 0.2:
            return quiet_since - start
        await asyncio.sleep(POLL_S)
    raise TimeoutError("commits: still pending after 60 s")


def kernel_share(since: tuple[float, int], total: int) -> tuple[float, float]:
    """System CPU (us) and minor page faults per delivery since `since`."""
    system, faults = system_and_faults()
    return (system - since[0]) / total * 1e6, (faults - since[1]) / total


def rss_kib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1])
    return 0.0


# -- the worker: one code tree ---------------------------------------------------------
def body(sub_id: str, topic: str, url: str, filter_: dict[str, Any] | None = None,
         **method: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": topic, "config": {"concurrencyFactor": 20}}
    if filter_ is not None:
        spec["filter"] = filter_
    return {"id": sub_id, "group": {"id": f"g-{sub_id}", "name": sub_id}, "broker": "Kafka",
            "topics": [spec],
            "subscriptionMethod": {"type": "http", "uri": url, "delayOnErrorMs": 100,
                                   **method},
            "properties": {"fetch.max.wait.ms": "100"}}


async def worker(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    from actors.delivery.service import DeliveryService
    from runtime.host.app import Runtime
    from runtime.host.config import parse_config
    from runtime.kafka import create_topics, make_producer

    sys.path.insert(0, str(HERE))  # the worker's cwd is the tree; bench/delivery.py is here
    from delivery import py_spy

    workdir = Path(args.workdir)
    config = parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": args.bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"dir": str(workdir / "journal"), "enabled": True},
        "runtime": {"shutdown_deadline_ms": 30_000,
                    **({"switch_interval_ms": args.switch_interval_ms}
                       if args.switch_interval_ms else {})},
        "delivery": {"max_subscriptions": args.subscribers + 1000},
        **({"egress": {"origin_max_connections": args.origin_connections}}
           if args.origin_connections else {}),
    })
    result: dict[str, Any] = {"tree": args.tree}
    import gc
    gc_time = [0.0, 0.0]  # total seconds, start of the running collection
    passes, collected = [0, 0, 0], [0.0, 0.0, 0.0]  # per generation: passes, seconds

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            took = time.perf_counter() - gc_time[1]
            gc_time[0] += took
            passes[info["generation"]] += 1
            collected[info["generation"]] += took
            if took > 0.02 and parts is not None:
                note(f"  GC at {time.perf_counter() - T0:.2f} s: gen {info['generation']} "
                     f"{took * 1000:.0f} ms, collected {info['collected']}")

    parts = SubscribeParts() if args.subscribe_parts else None
    requests = Requests() if args.requests else None
    gc.callbacks.append(on_gc)
    stalls = Stalls(args.stall_ms) if args.stalls else None
    beating = asyncio.create_task(stalls.beat_forever()) if stalls else None
    producer = make_producer(args.bootstrap, acks=1, linger_ms=50)
    await producer.start()
    members = watch_members()
    runtime = Runtime(config, services=[DeliveryService])
    await runtime.start()
    if args.gc_threshold:  # after the start, which sets the young generation's own
        gc.set_threshold(*(int(n) for n in args.gc_threshold.split(",")))

    def delivered() -> float:
        """Deliveries so far, summed in C: the waits poll it every `POLL_S`. Its CPU is
        the bench's, not the runtime's (`cpu_s` leaves it out): at 10,000 subscribers a
        sum walks 10,000 counters scattered among 4 million objects, and py-spy still
        found 7% of the cold burst's samples in it after the generator was gone."""
        started = time.thread_time()
        family = runtime.metrics.counter("hookstream_delivered_total", "")
        count = sum(map(VALUE, family.children.values()))
        POLLS_CPU_S[0] += time.thread_time() - started
        return count

    def connections_opened() -> int:
        """Connections the lean transport opened to the endpoints (trees before issue 37's
        `Shelf.opened`: -1)."""
        origins = runtime.service(DeliveryService).origins
        return sum(getattr(origin.shelf, "opened", -1) for origin in origins)

    async def until(what: str, check: Any) -> float:
        start = time.perf_counter()
        while not check():
            if time.perf_counter() - start > args.timeout_s:
                raise TimeoutError(f"{what}: not within {args.timeout_s} s "
                                   f"({delivered():.0f} delivered)")
            await asyncio.sleep(POLL_S)
        return time.perf_counter() - start

    async def produce(topic: str, count: int, types: int = 0) -> None:
        futures = [await producer.send(
            topic, f"{i:012d}".encode().ljust(100, b"."), partition=i % args.partitions,
            headers=[("event-type", f"type-{i % types}".encode())] if types else None)
            for i in range(count)]
        await asyncio.gather(*futures)

    latencies: list[float] = []  # of each subscribe request, in the order they answered

    async def subscribe(session: aiohttp.ClientSession, bodies: list[dict[str, Any]]) -> None:
        async def one(b: dict[str, Any]) -> None:
            sent = time.perf_counter()
            async with session.post(runtime.admin.url + "/broker/subscription", json=b,
                                    timeout=aiohttp.ClientTimeout(total=args.timeout_s)) as r:
                if r.status != 200:
                    raise RuntimeError(f"refused: {r.status} {await r.text()}")
            latencies.append(time.perf_counter() - sent)

        pending = iter(bodies)

        async def poster() -> None:  # one of `--in-flight` clients, each posting in turn
            for body in pending:
                await one(body)

        await asyncio.gather(*(poster() for _ in range(args.in_flight)))

    def cursors() -> int:
        return len(runtime.metrics.gauge("hookstream_inflight", "").children)

    def awaiting() -> float:
        """Cursors started and not yet told where they start (trees before this gauge:
        0, and a cursor counts as running once it exists)."""
        family = runtime.metrics.gauge("hookstream_group_cursors_awaiting_position", "")
        return sum(c.value for c in family.children.values())

    async def positioned() -> float:
        """Until no cursor awaits its position, for 0.2 s in a row (a cursor just built
        tells the member it runs a moment later)."""
        start, calm = time.perf_counter(), 0
        while calm < 10:
            calm = calm + 1 if awaiting() == 0 else 0
            if time.perf_counter() - start > args.timeout_s:
                raise TimeoutError(f"positions: not within {args.timeout_s} s")
            await asyncio.sleep(POLL_S)
        return time.perf_counter() - start - 10 * POLL_S

    health: list[float] = []  # /healthz answer times while subscribing, idle, delivering

    async def probe_health(session: aiohttp.ClientSession) -> None:
        while True:
            sent = time.perf_counter()
            async with session.get(runtime.admin.url + "/healthz") as answer:
                await answer.read()
            health.append(time.perf_counter() - sent)
            await asyncio.sleep(0.2)

    async def hanging_endpoint() -> tuple[asyncio.AbstractServer, str]:
        """Accepts connections, reads, never answers."""
        async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while await reader.read(65536):
                    pass
            writer.close()

        server = await asyncio.start_server(never, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        return server, f"http://127.0.0.1:{port}/hook"

    async def isolation(session: aiohttp.ClientSession, result: dict[str, Any]) -> None:
        """5. `--isolation-subscribers` subscribers of a topic each get `--isolation`
        records; once all answered, once with subscriber 0's endpoint hanging (1 s
        timeout, retried): the others' rate with and without it; then it heals."""
        count, n = args.isolation, args.isolation_subscribers
        server, hang_url = await hanging_endpoint()
        try:
            for hung in (False, True):
                topic = f"iso-{uuid.uuid4().hex[:8]}"
                await create_topics(args.bootstrap, {topic: args.partitions})
                first = body(f"i{int(hung)}-0", topic, hang_url if hung else args.url,
                             timeoutMs=1000)
                await subscribe(session, [first] + [body(f"i{int(hung)}-{i}", topic,
                                                         args.url) for i in range(1, n)])
                await asyncio.sleep(5)  # every cursor placed
                d0, rss0 = delivered(), rss_kib()
                await produce(topic, count)
                others = count * (n - 1)
                took = await until("isolation",
                                   lambda d0=d0, others=others: delivered() - d0 >= others)
                name = "hung" if hung else "healthy"
                result[f"iso_{name}_rate"] = others / took
                result[f"iso_{name}_rss_kib"] = rss_kib() - rss0
                note(args.tree, "isolation", name, took)
        finally:
            server.close()

    async def produce_all(topics: list[str], count: int) -> None:
        await asyncio.gather(*(produce(topic, count) for topic in topics))

    async def restart(topics: list[str], want: int, result: dict[str, Any]) -> None:
        """4. Stop, then start a new runtime on the persisted subscriptions: until every
        cursor runs, and until every subscriber got one new record of its topic."""
        nonlocal runtime
        await runtime.stop()
        start = time.perf_counter()
        runtime = Runtime(config, services=[DeliveryService])
        await runtime.start()
        result["restart_ready_s"] = time.perf_counter() - start
        await until("cursors after the restart", lambda: cursors() >= want)
        result["restart_cursors_s"] = time.perf_counter() - start
        d0 = delivered()
        await asyncio.gather(*(producer.send_and_wait(topic, b"after the restart",
                                                      partition=0) for topic in topics))
        await until("every subscriber after the restart",
                    lambda: delivered() - d0 >= args.subscribers - args.unsubscribes)
        result["restart_delivering_s"] = time.perf_counter() - start
        note(args.tree, "restart:", result)

    async def unsubscribes(session: aiohttp.ClientSession, topics: list[str],
                           result: dict[str, Any]) -> None:
        """`--unsubscribes` subscriptions leave at once while every subscriber gets
        `--records` more records: until every one of them answered."""
        loading = asyncio.create_task(produce_all(topics, args.records))

        async def leave(i: int) -> None:
            async with session.post(runtime.admin.url + "/broker/unsubscribe",
                                    json={"id": f"s{i}", "group": {"id": f"g-s{i}"}},
                                    timeout=aiohttp.ClientTimeout(total=args.timeout_s)) as r:
                if r.status != 200:
                    raise RuntimeError(f"unsubscribe refused: {r.status} {await r.text()}")

        start = time.perf_counter()
        await asyncio.gather(*(leave(i) for i in range(args.unsubscribes)))
        result["unsubscribe_s"] = time.perf_counter() - start
        result["unsubscribe_load"] = load()
        await loading
        note(args.tree, "unsubscribes:", result)

    async def filtered(session: aiohttp.ClientSession, result: dict[str, Any]) -> None:
        """3. The same number of subscribers, each with one of `--filters` distinct
        header filters; records of as many event types, evenly mixed, so each record goes
        to subscribers / filters of them: as many deliveries as the unfiltered phase."""
        kinds, topic = args.filters, f"filt-{uuid.uuid4().hex[:8]}"
        await create_topics(args.bootstrap, {topic: args.partitions})
        bodies = [body(f"f{i}", topic, args.url, {"headers": {"event-type": [
            f"type-{i % kinds}"]}}) for i in range(args.subscribers)]
        try:
            await subscribe(session, bodies)
        except RuntimeError as exc:
            note(args.tree, "filters refused:", exc)
            return
        want = base_cursors + 2 * args.subscribers * args.partitions
        await until("filtered cursors", lambda: cursors() >= want)
        await asyncio.sleep(2)
        count = args.records * kinds
        d0, c0 = delivered(), cpu_s()
        await produce(topic, count, kinds)
        total = count * args.subscribers // kinds
        result["filtered_s"] = await until("filtered", lambda: delivered() - d0 >= total)
        result["filtered_us"] = (cpu_s() - c0) / total * 1e6
        result["filtered_ratio"] = result["filtered_us"] / result["fanout_us"]
        result["filtered_load"] = load()
        note(args.tree, "filtered:", result)

    base_cursors = 0
    try:
        async with aiohttp.ClientSession() as session:
            # 1. the single subscription
            single = f"single-{uuid.uuid4().hex[:8]}"
            await create_topics(args.bootstrap, {single: args.partitions})
            await produce(single, args.baseline_records)
            await subscribe(session, [body("one", single, args.url)])
            await until("first delivery", lambda: delivered() > 0)
            t0, c0, d0 = time.perf_counter(), cpu_s(), delivered()
            await until("baseline", lambda: delivered() >= args.baseline_records)
            n = delivered() - d0
            result["single_us"] = (cpu_s() - c0) / n * 1e6
            result["single_rate"] = n / (time.perf_counter() - t0)
            result["single_load"] = load()
            note(args.tree, "single:", result)
            # 2. fan-out
            run = uuid.uuid4().hex[:8]
            topics = [f"fan-{run}-{n}" for n in range(args.topics)]
            for first in range(0, len(topics), 100):
                await create_topics(args.bootstrap, dict.fromkeys(topics[first:first + 100],
                                                                  args.partitions))
            base_rss = rss_kib()
            base_cursors = cursors()
            if args.tracemalloc:
                import tracemalloc
                gc.collect()
                tracemalloc.start()
                before = tracemalloc.take_snapshot()
            probing = asyncio.create_task(probe_health(session))
            start = time.perf_counter()
            await subscribe(session, [body(f"s{i}", topics[i % args.topics], args.url)
                                      for i in range(args.subscribers)])
            result["subscribe_s"] = time.perf_counter() - start
            marks = [len(health)]  # where each phase's /healthz answers end
            mine = sorted(latencies[-args.subscribers:])
            result["subscribe_p50_ms"] = mine[len(mine) // 2] * 1000
            result["subscribe_p99_ms"] = mine[int(len(mine) * 0.99)] * 1000
            last = latencies[-min(1000, args.subscribers):]  # the last thousand, alone
            result["subscribe_last_1000_mean_ms"] = sum(last) / len(last) * 1000
            if parts is not None:
                for line in parts.report():
                    note(line)
            if stalls is not None:
                note("  while subscribing:")
                for where, count in stalls.taken():
                    note(f"  stalled {count * 10:5d} ms in {where}")
            want = base_cursors + args.subscribers * args.partitions
            result["cursors_built_s"] = result["subscribe_s"] + await until(
                "cursors", lambda: cursors() >= want)
            result["cursors_s"] = result["cursors_built_s"] + await positioned()
            await asyncio.sleep(2)
            gc.collect()
            result["rss_kib_per_sub"] = (rss_kib() - base_rss) / args.subscribers
            result["frozen_objects"] = gc.get_freeze_count()
            result["young_threshold"] = gc.get_threshold()[0]
            if args.tracemalloc:
                result["python_kib_per_sub"], result["python_top"] = allocations(
                    before, tracemalloc.take_snapshot(), args.subscribers)
            note(args.tree, "subscribed:", result)
            marks.append(len(health))
            c0, b0, t0 = cpu_s(), cpu_s(args.broker_pid), time.perf_counter()
            with py_spy(args.py_spy_idle):
                if requests is not None:
                    note("  Kafka requests while subscribing and until 2 s after every "
                         "cursor ran:", requests.taken())
                    await requests.per_second(args.idle_s, note)
                else:
                    await asyncio.sleep(args.idle_s)
            marks.append(len(health))
            wall = time.perf_counter() - t0
            result["idle_runtime_pct"] = (cpu_s() - c0) / wall * 100
            result["idle_broker_pct"] = (cpu_s(args.broker_pid) - b0) / wall * 100
            result["idle_load"] = load()
            note(args.tree, "idle:", result)
            profile = None
            if args.profile:
                import cProfile
                profile = cProfile.Profile()
                if args.profile_phase != "warm":
                    profile.enable()
            d0, c0, t0 = delivered(), cpu_s(), time.perf_counter()
            k0 = system_and_faults()
            g0, p0, s0 = gc_time[0], list(passes), list(collected)
            polls0 = POLLS_CPU_S[0]
            opened = connections_opened()
            if requests is not None:
                requests.taken()
            with py_spy(args.py_spy):
                await produce_all(topics, args.records)
                total = args.records * args.subscribers
                result["fanout_s"] = await until("fan-out", lambda: delivered() - d0 >= total)
            if requests is not None:
                note("  Kafka requests in the cold burst:", requests.taken())
            result["fanout_connections"] = connections_opened() - opened
            result["fanout_us"] = (cpu_s() - c0) / total * 1e6
            result["fanout_system_us"], result["fanout_faults"] = kernel_share(k0, total)
            result["fanout_polls_us"] = (POLLS_CPU_S[0] - polls0) / total * 1e6
            with py_spy(args.py_spy_commits):
                result["committed_s"] = result["fanout_s"] + await committed(members)
            result["committed_us"] = (cpu_s() - c0) / total * 1e6
            result["committed_ratio"] = result["committed_us"] / result["single_us"]
            result["fanout_gc_us"] = (gc_time[0] - g0) / total * 1e6
            result["fanout_gc_passes"] = [
                f"gen {g}: {passes[g] - p0[g]} passes, {(collected[g] - s0[g]) * 1000:.0f} ms"
                for g in range(3)]
            result["fanout_load"] = load()
            result["fanout_ratio"] = result["fanout_us"] / result["single_us"]
            probing.cancel()
            answered = sorted(health)
            result["health_p99_ms"] = answered[int(len(answered) * 0.99)] * 1000
            result["health_max_ms"] = answered[-1] * 1000
            for phase, (begin, end) in zip(("subscribing", "idle", "delivering"), (
                    (0, marks[0]), (marks[1], marks[2]), (marks[2], len(health))), strict=True):
                some = sorted(health[begin:end]) or [float("nan")]
                result[f"health_{phase}_ms"] = (some[len(some) // 2] * 1000,
                                                some[int(len(some) * 0.99)] * 1000,
                                                some[-1] * 1000, end - begin)
            note(args.tree, "fan-out:", result)
            if profile is not None and args.profile_phase == "cold":
                profile.disable()
            # the same again: workers, connections and series exist now (warm)
            await asyncio.sleep(1)
            if profile is not None and args.profile_phase == "warm":
                profile.enable()
            d0, c0 = delivered(), cpu_s()
            k0 = system_and_faults()
            opened = connections_opened()
            if requests is not None:
                requests.taken()
            await produce_all(topics, args.records)
            result["warm_s"] = await until("warm", lambda: delivered() - d0 >= total)
            if requests is not None:
                note("  Kafka requests in the warm burst:", requests.taken())
            result["warm_connections"] = connections_opened() - opened
            result["warm_us"] = (cpu_s() - c0) / total * 1e6
            result["warm_system_us"], result["warm_faults"] = kernel_share(k0, total)
            result["warm_ratio"] = result["warm_us"] / result["single_us"]
            result["warm_load"] = load()
            gc.collect()  # and after delivering: what records, connections and rings added
            result["rss_after_kib_per_sub"] = (rss_kib() - base_rss) / args.subscribers
            await asyncio.sleep(22)  # past twice the outlets' WORKER_IDLE_MS: idle workers end
            gc.collect()
            result["rss_idle_kib_per_sub"] = (rss_kib() - base_rss) / args.subscribers
            if args.tracemalloc:
                note("after delivering:")
                result["python_after_kib_per_sub"], _ = allocations(
                    before, tracemalloc.take_snapshot(), args.subscribers)
                tracemalloc.stop()
            if profile is not None:
                profile.disable()
                profile.dump_stats(args.profile)
            if args.unsubscribes:
                await unsubscribes(session, topics, result)
            if args.filters:
                await filtered(session, result)
            if args.isolation:
                await isolation(session, result)
        if args.restart:
            await restart(topics, want - args.unsubscribes * args.partitions, result)
    finally:
        if stalls is not None and beating is not None:
            beating.cancel()
            result["stalls"] = stalls.stalls
            for where, count in stalls.report():
                note(f"  stalled {count * 10:5d} ms in {where}")
        await runtime.stop()
        await producer.stop()
    return result


def allocations(before: Any, after: Any, subscribers: int,
                ) -> tuple[float, list[tuple[str, float]]]:
    """Python allocations per subscription between two tracemalloc snapshots, and the
    files that made most of them (KiB per subscription)."""
    diff = after.compare_to(before, "filename")
    total = sum(d.size_diff for d in diff) / 1024 / subscribers
    top = [(_short(d.traceback[0].filename), d.size_diff / 1024 / subscribers)
           for d in diff[:12]]
    for line in after.compare_to(before, "lineno")[:25]:  # where, to the line
        frame = line.traceback[0]
        note(f"  {line.size_diff / 1024 / subscribers:6.2f} KiB/sub "
             f"{_short(frame.filename)}:{frame.lineno}")
    return total, top


def _timed_turns(handle: Any) -> Any:
    async def timed(actor: Any, message: Any) -> Any:
        began = time.perf_counter()
        try:
            return await handle(actor, message)
        finally:
            took = time.perf_counter() - began
            if took > 0.015:
                note(f"  turn at {began - T0:.2f} s: {type(actor).__name__} "
                     f"{type(message).__name__} {took * 1000:.0f} ms")
    return timed


class SubscribeParts:
    """`--subscribe-parts`: where a subscribe's time goes inside the runtime: waiting for
    the control actor's mailbox, its turn (listing the subscription), the tree's start
    beside the mailbox (with the batch it joined), and the file's write after it; the
    rest of a request's latency is HTTP and the document's decoding. Printed as they
    happen: member and supervisor turns over 15 ms, file batches over 50 ms, fsyncs over
    30 ms, collections over 20 ms (their time since the worker started). Patches classes
    (and `os.fsync`) in this worker only."""

    PARTS = {"queued": ("asked", "turn"), "turn": ("turn", "listed"),
             "started": ("listed", "joined"), "saved": ("joined", "answered")}

    def __init__(self) -> None:
        from actors.delivery.control.actor import ControlActor
        from actors.delivery.control.source import Direct

        self.times: dict[str, dict[str, float]] = {}
        self.saving: dict[str, dict[str, float]] = {}
        """Per file stem, the save's stages: queued (loop), thread (its batch's job began),
        written (the job ended), stored (the store's future ran its callbacks)."""
        self.started_cpu: list[tuple[float, float]] = []
        """Per subscribe: its tree's start, wall and the loop thread's CPU meanwhile."""
        from actors.delivery.control.joining import Joining

        times, asked, turn = self.times, Direct.subscribe, ControlActor._subscribe
        joined = Joining._joined

        async def ask(source: Any, control: Any, consumer: Any) -> None:
            times[consumer.key] = {"asked": time.perf_counter()}
            await asked(source, control, consumer)
            times[consumer.key]["returned"] = time.perf_counter()

        async def subscribe(actor: Any, message: Any) -> Any:
            mine = times.get(message.consumer.key, {})
            mine["turn"] = time.perf_counter()
            pending = await turn(actor, message)
            mine["listed"] = time.perf_counter()
            mine["listed_cpu"] = time.thread_time()
            if pending is not None:
                pending.answer.add_done_callback(
                    lambda _: mine.setdefault("answered", time.perf_counter()))
            return pending

        async def join(room: Any, one: Any, error: Any) -> None:
            mine = times.get(one.consumer.key, {})
            mine["joined"] = time.perf_counter()
            if "listed_cpu" in mine:  # the loop thread's CPU while the tree started
                self.started_cpu.append((mine["joined"] - mine["listed"],
                                         time.thread_time() - mine["listed_cpu"]))
            await joined(room, one, error)

        from actors.delivery.document.store import SubscriptionStore
        name = "_write_files" if hasattr(SubscriptionStore, "_write_files") else "_write_all"
        write_all = getattr(SubscriptionStore, name)

        def timed(store: Any, files: Any) -> Any:
            began = time.perf_counter()
            try:
                return write_all(store, files)
            finally:
                ended = time.perf_counter()
                took = ended - began
                for path, _ in files:  # the save's stages (`saves` below), by file stem
                    stage = self.saving.setdefault(path.stem, {})
                    stage.update(thread=began, written=ended, batch=len(files))
                if took > 0.05:
                    note(f"  files at {began - T0:.2f} s: {len(files)} in {took * 1000:.0f} ms")

        setattr(SubscriptionStore, name, timed)
        queue = SubscriptionStore._queue

        def queued(store: Any, path: Any, data: Any) -> Any:
            done = queue(store, path, data)
            stage = self.saving[path.stem] = {"queued": time.perf_counter()}
            done.add_done_callback(lambda _: stage.setdefault("stored", time.perf_counter()))
            return done

        SubscriptionStore._queue = queued  # type: ignore[method-assign]
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            began = time.perf_counter()
            real_fsync(fd)
            took = time.perf_counter() - began
            if took > 0.03:
                note(f"  fsync at {began - T0:.2f} s: {took * 1000:.0f} ms")

        os.fsync = fsync
        from actors.delivery.path.member.actor import InstanceMemberActor
        from runtime.kernel.supervisor import Supervisor
        for kind in (InstanceMemberActor, Supervisor):
            kind.handle = _timed_turns(kind.handle)  # type: ignore[method-assign]
        Direct.subscribe = ask  # type: ignore[method-assign]
        ControlActor._subscribe = subscribe  # type: ignore[method-assign]
        Joining._joined = join  # type: ignore[method-assign]

    def report(self) -> list[str]:
        """p50/p99/max of each part, and the parts of the slowest 1% of subscribes."""
        rows = [t for t in self.times.values() if len(t) == 7]
        parts = {**self.PARTS, "in all": ("asked", "returned")}
        lines = [f"  subscribe parts ({len(rows)}): "]
        for name, (a, b) in parts.items():
            ordered = sorted(t[b] - t[a] for t in rows)
            lines.append(f"    {name:7s} p50 {ordered[len(ordered) // 2] * 1000:6.1f} p99 "
                         f"{ordered[int(len(ordered) * 0.99)] * 1000:6.1f} max "
                         f"{ordered[-1] * 1000:6.1f} ms")
        slow = sorted(rows, key=lambda t: t["returned"] - t["asked"])[-max(1, len(rows) // 100):]
        for name, (a, b) in self.PARTS.items():
            mean = sum(t[b] - t[a] for t in slow) / len(slow) * 1000
            lines.append(f"    slowest 1%: {name} mean {mean:.1f} ms")
        lines += self._saves(slow)
        cpu = sorted(self.started_cpu)  # by wall time: the slowest 1% of starts
        slowest = cpu[-max(1, len(cpu) // 100):]
        lines.append(f"    started: loop CPU meanwhile p50 {cpu[len(cpu) // 2][1] * 1000:.1f} "
                     f"ms; slowest 1% of starts: wall {_mean(w for w, _ in slowest):.1f}, "
                     f"loop CPU {_mean(c for _, c in slowest):.1f} ms")
        first = min(t["asked"] for t in rows)
        lines.append("    slowest 1% (s after the first: " + "/".join(self.PARTS) + " ms): "
                     + ", ".join(f"{t['asked'] - first:.2f}: " + "/".join(
                         f"{(t[b] - t[a]) * 1000:.0f}" for a, b in self.PARTS.values())
                         for t in sorted(slow, key=lambda t: t["asked"])[:40]))
        return lines


    SAVES = {"to thread": ("queued", "thread"), "in thread": ("thread", "written"),
             "to loop": ("written", "stored")}

    def _saves(self, slow: list[dict[str, float]]) -> list[str]:
        """The file's save split: waiting for its batch's thread job (the batch before,
        the pool), the job (files, fsyncs, the GIL), the job's end reaching the loop;
        then from the store's answer to the subscribe's (the hops to the asker)."""
        stages = {key: stage for key, stage in self.saving.items() if len(stage) == 5}
        lines = []
        for name, (a, b) in self.SAVES.items():
            ordered = sorted(s[b] - s[a] for s in stages.values())
            if ordered:
                lines.append(f"    save {name:9s} p50 {ordered[len(ordered) // 2] * 1000:6.1f} "
                             f"p99 {ordered[int(len(ordered) * 0.99)] * 1000:6.1f} ms")
        keys = [key for key, t in self.times.items() if t in slow]
        mine = [(self.times[key], stages[key]) for key in keys if key in stages]
        for name, (a, b) in self.SAVES.items():
            lines.append(f"    slowest 1%: save {name} mean "
                         f"{_mean(s[b] - s[a] for _, s in mine):.1f} ms")
        lines.append(f"    slowest 1%: store answered -> subscribe answered mean "
                     f"{_mean(t['answered'] - s['stored'] for t, s in mine):.1f} ms, "
                     f"joined after stored {sum(t['joined'] > s['stored'] for t, s in mine)}"
                     f"/{len(mine)}, batch mean "
                     f"{sum(s['batch'] for _, s in mine) / max(1, len(mine)):.1f}")
        return lines


def _short(filename: str) -> str:
    return filename.split("/site-packages/")[-1].replace(str(HERE.parent) + "/", "")


def _mean(values: Iterable[float]) -> float:
    """The mean of seconds, in ms."""
    listed = list(values)
    return sum(listed) / max(1, len(listed)) * 1000


class Stalls:
    """`--stalls`: a watchdog thread that names what holds the event loop. The loop beats
    every 10 ms; when a beat is more than `--stall-ms` late, the watchdog samples the loop
    thread's stack every 10 ms until it beats again, and counts the innermost project frames
    seen (file:line function), printed at the end."""

    def __init__(self, stall_ms: float = 100.0) -> None:
        self.stall_s = stall_ms / 1000
        import collections
        import threading
        self.beat = time.perf_counter()
        self.seen: collections.Counter[str] = collections.Counter()
        self.stalls = 0
        self.loop_thread = threading.get_ident()
        self.done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    async def beat_forever(self) -> None:
        while True:
            self.beat = time.perf_counter()
            await asyncio.sleep(0.01)

    def _watch(self) -> None:
        stalled = False
        while not self.done.wait(0.01):
            late = time.perf_counter() - self.beat > self.stall_s
            if late and not stalled:
                self.stalls += 1
            stalled = late
            if late:
                frame = sys._current_frames().get(self.loop_thread)
                self.seen[_where(frame)] += 1

    def report(self) -> list[tuple[str, int]]:
        self.done.set()
        return self.seen.most_common(15)

    def taken(self) -> list[tuple[str, int]]:
        """What was seen so far (counting starts again)."""
        seen, self.seen = self.seen, type(self.seen)()
        return seen.most_common(15)


def _where(frame: Any) -> str:
    """The innermost frames of the project (three), else the innermost frame."""
    mine, top = [], None
    while frame is not None:
        top = top or f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"
        name = frame.f_code.co_filename
        if str(HERE.parent) in name and "/.venv/" not in name:
            mine.append(f"{_short(name)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(mine[:3]) or str(top)


def note(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -- the driver ------------------------------------------------------------------------
@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    process = subprocess.Popen([sys.executable, str(HERE / "receiver.py")],
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening"):
            raise RuntimeError(f"receiver did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/hook", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.asynccontextmanager
async def broker() -> AsyncIterator[tuple[str, int]]:
    sys.path.insert(0, str(HERE.parent))
    from runtime.kafka.broker import EmbeddedBroker

    async with EmbeddedBroker() as running:
        assert running.pid is not None
        yield running.bootstrap, running.pid


async def run_tree(tree: Path, args: argparse.Namespace, bootstrap: str, broker_pid: int,
                   url: str, workdir: Path) -> dict[str, Any]:
    command = [sys.executable, str(HERE / "fanout.py"), "--worker", "--tree", str(tree),
               "--bootstrap", bootstrap, "--broker-pid", str(broker_pid), "--url", url,
               "--workdir", str(workdir), "--subscribers", str(args.subscribers),
               "--partitions", str(args.partitions), "--records", str(args.records),
               "--baseline-records", str(args.baseline_records), "--idle-s", str(args.idle_s),
               "--timeout-s", str(args.timeout_s), "--filters", str(args.filters),
               "--topics", str(args.topics), "--isolation", str(args.isolation),
               "--isolation-subscribers", str(args.isolation_subscribers),
               "--unsubscribes", str(args.unsubscribes), "--in-flight", str(args.in_flight)]
    command += ["--restart"] if args.restart else []
    if args.gc_threshold:
        command += ["--gc-threshold", args.gc_threshold]
    if args.origin_connections:
        command += ["--origin-connections", str(args.origin_connections)]
    command += ["--tracemalloc"] if args.tracemalloc else []
    command += ["--stalls", "--stall-ms", str(args.stall_ms)] if args.stalls else []
    command += ["--subscribe-parts"] if args.subscribe_parts else []
    command += ["--requests"] if args.requests else []
    if args.switch_interval_ms:
        command += ["--switch-interval-ms", str(args.switch_interval_ms)]
    for option in ("py_spy", "py_spy_commits", "py_spy_idle"):  # this tree's only
        if getattr(args, option) and tree == HERE.parent:
            command += [f"--{option.replace('_', '-')}", getattr(args, option)]
    if args.profile and tree == HERE.parent:
        command += ["--profile", args.profile, "--profile-phase", args.profile_phase]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                   cwd=tree, env=env)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), args.timeout_s * 6)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    # the worker's own output (the runtime logs to stdout), kept for a look afterwards
    log_file = Path(tempfile.gettempdir()) / f"fanout-worker-{workdir.name}.log"
    log_file.write_bytes(out)
    text = out.decode().splitlines()
    for line in text:  # the runtime logs to stdout: its errors are part of the result
        if " ERROR " in line or "crashed" in line:
            print(line[:400], file=sys.stderr)
    lines = [ln for ln in text if ln.startswith(RESULT)]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"worker on {tree} failed ({process.returncode})")
    return dict(json.loads(lines[-1].removeprefix(RESULT)))


async def drive(args: argparse.Namespace, trees: list[Path]) -> None:
    with receiver() as (url, _), tempfile.TemporaryDirectory() as tmp:
        async with broker() as (bootstrap, pid):
            results = []
            for turn in range(args.repeat):  # the trees in turn: A B A B ...
                for n, tree in enumerate(trees):
                    results.append(await run_tree(tree, args, bootstrap, pid, url,
                                                  Path(tmp) / f"{turn}-{n}"))
    print(f"fanout: {args.subscribers} subscribers on {args.topics} topic(s) x "
          f"{args.partitions} partitions, "
          f"{args.records} records each; python {sys.version.split()[0]}")
    for r in results:
        print(f"{r['tree']}:\n"
              f"  single subscription: {r['single_us']:.0f} us/record, "
              f"{r['single_rate']:.0f} records/s ({r['single_load']})\n"
              f"  subscribe all: {r['subscribe_s']:.1f} s (cursors built at "
              f"{r.get('cursors_built_s', r['cursors_s']):.1f} s, every one placed and "
              f"running at {r['cursors_s']:.1f} s), "
              f"RSS {r['rss_kib_per_sub']:.0f} KiB/subscription\n"
              f"  subscribe latency ({args.in_flight} posted at a time): p50 "
              f"{r['subscribe_p50_ms']:.0f} ms, p99 "
              f"{r['subscribe_p99_ms']:.0f} ms, last thousand mean "
              f"{r['subscribe_last_1000_mean_ms']:.0f} ms\n"
              f"  idle: runtime {r['idle_runtime_pct']:.1f}% of a core, broker "
              f"{r['idle_broker_pct']:.1f}% ({r['idle_load']})\n"
              f"  {args.records * args.subscribers} deliveries in {r['fanout_s']:.2f} s, "
              f"{r['fanout_us']:.0f} us/delivery = {r['fanout_ratio']:.2f} x single "
              f"({r['fanout_load']}; of which garbage collection "
              f"{r['fanout_gc_us']:.0f} us; {r.get('fanout_connections', '?')} connections "
              f"opened; the bench's counter polls, not counted: "
              f"{r.get('fanout_polls_us', 0):.1f} us; system CPU "
              f"{r.get('fanout_system_us', 0):.0f} us and {r.get('fanout_faults', 0):.1f} "
              f"page faults a delivery)\n"
              f"  /healthz while subscribing, idle and delivering: p99 "
              f"{r['health_p99_ms']:.0f} ms, max {r['health_max_ms']:.0f} ms; "
              + "; ".join(f"{phase} p50/p99/max {p50:.0f}/{p99:.0f}/{top:.0f} ms ({n})"
                          for phase in ("subscribing", "idle", "delivering")
                          for p50, p99, top, n in [r[f"health_{phase}_ms"]]))
        print(f"  with its commits: {r['committed_s']:.2f} s, {r['committed_us']:.0f} "
              f"us/delivery = {r['committed_ratio']:.2f} x single")
        print(f"  RSS after delivering: {r['rss_after_kib_per_sub']:.0f} KiB/subscription, "
              f"{r['rss_idle_kib_per_sub']:.0f} after 22 s idle")
        if "python_kib_per_sub" in r:
            print(f"  Python allocations: {r['python_kib_per_sub']:.1f} KiB/subscription "
                  f"({r['python_after_kib_per_sub']:.1f} after delivering); "
                  "most in: " + ", ".join(f"{name} {kib:.1f}" for name, kib in r["python_top"]))
        if "iso_hung_rate" in r:
            print(f"  isolation ({args.isolation_subscribers} subscribers x "
                  f"{args.isolation} records): the others at {r['iso_healthy_rate']:.0f} "
                  f"deliveries/s without a hung endpoint, {r['iso_hung_rate']:.0f} with one "
                  f"({r['iso_hung_rate'] / r['iso_healthy_rate']:.2f} x); RSS grew "
                  f"{r['iso_healthy_rss_kib']:.0f} / {r['iso_hung_rss_kib']:.0f} KiB")
        if "unsubscribe_s" in r:
            print(f"  {args.unsubscribes} unsubscribes under load: {r['unsubscribe_s']:.2f} s "
                  f"({r['unsubscribe_load']})")
        if "restart_ready_s" in r:
            print(f"  restart: started in {r['restart_ready_s']:.1f} s, every cursor running "
                  f"at {r['restart_cursors_s']:.1f} s, every subscriber delivering at "
                  f"{r['restart_delivering_s']:.1f} s")
        print(f"  again (warm): {r['warm_s']:.2f} s, {r['warm_us']:.0f} us/delivery = "
              f"{r['warm_ratio']:.2f} x single ({r['warm_load']}; "
              f"{r.get('warm_connections', '?')} connections opened; system CPU "
              f"{r.get('warm_system_us', 0):.0f} us and {r.get('warm_faults', 0):.1f} page "
              f"faults a delivery)")
        if "filtered_us" in r:
            print(f"  filtered ({args.filters} distinct header filters): "
                  f"{r['filtered_us']:.0f} us/delivery = {r['filtered_ratio']:.2f} x "
                  f"unfiltered fan-out, in {r['filtered_s']:.2f} s ({r['filtered_load']})")
    if args.repeat > 1:
        print_medians(results, trees)


def print_medians(results: list[dict[str, Any]], trees: list[Path]) -> None:
    """Each tree's medians over its runs (`--repeat`): a run's ratio is to its own
    single subscription, taken minutes before in the same worker."""
    print(f"medians over {len(results) // len(trees)} runs of each tree, in turn:")
    for tree in trees:
        mine = [r for r in results if r["tree"] == str(tree)]
        single, cold_us, cold, warm = (statistics.median(r[key] for r in mine) for key in (
            "single_us", "fanout_us", "fanout_ratio", "warm_ratio"))
        runs = ", ".join(f"{r['fanout_ratio']:.2f}" for r in mine)
        print(f"  {tree}: single {single:.0f} us/record; cold {cold_us:.0f} us/delivery = "
              f"{cold:.2f} x single (runs: {runs}); warm {warm:.2f} x")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--baseline-records", type=int, default=60_000,
                        help="records of the single-subscription phase (20,000 before "
                        "the seventh session: a one-second window, whose figure moved "
                        "33-48 us between runs minutes apart)")
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--compare", default="")
    parser.add_argument("--topics", type=int, default=1,
                        help="subscriber i reads topic i %% topics")
    parser.add_argument("--isolation", type=int, default=0,
                        help="records per subscriber in the hung-endpoint phase (0: none)")
    parser.add_argument("--isolation-subscribers", type=int, default=100)
    parser.add_argument("--unsubscribes", type=int, default=0,
                        help="subscriptions that leave at once under load (0: none)")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT,
                        help="subscribes posted at a time, each client posting its next "
                             "when answered")
    parser.add_argument("--restart", action="store_true",
                        help="then restart from the persisted subscriptions")
    parser.add_argument("--filters", type=int, default=0,
                        help="distinct header filters for the filtered phase (0: none)")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the trees in turn this many times and print each one's "
                             "medians (the machine's speed moves by a third within an hour)")
    parser.add_argument("--profile-phase", choices=("cold", "warm", "both"), default="both",
                        help="--profile: the first fan-out, the second, or both")
    parser.add_argument("--py-spy", default=None, type=os.path.abspath,
                        help="sample the cold fan-out with py-spy (on PATH) into this file "
                             "(bench/profile_summary.py reads it)")
    parser.add_argument("--py-spy-commits", default=None, type=os.path.abspath,
                        help="sample the cold burst's commits (from its last delivery to "
                             "the last commit round's end) into this file")
    parser.add_argument("--py-spy-idle", default=None, type=os.path.abspath,
                        help="sample the idle window after subscribing into this file")
    parser.add_argument("--profile", default="",
                        help="cProfile the fan-out phases of this tree into this file")
    parser.add_argument("--gc-threshold", default="",
                        help="gc.set_threshold for the workers, e.g. 10000,20,100")
    parser.add_argument("--origin-connections", type=int, default=0,
                        help="[egress] origin_max_connections (0: the default)")
    parser.add_argument("--stalls", action="store_true",
                        help="name what holds the event loop (a watchdog thread)")
    parser.add_argument("--requests", action="store_true",
                        help="count the worker's Kafka requests by kind: while subscribing, "
                        "and each second of the idle window")
    parser.add_argument("--subscribe-parts", action="store_true",
                        help="where a subscribe's time goes (mailbox, turn, file)")
    parser.add_argument("--stall-ms", type=float, default=100.0,
                        help="--stalls: a loop beat later than this is a stall")
    parser.add_argument("--switch-interval-ms", type=float, default=0.0,
                        help="[runtime] switch_interval_ms (0: the default)")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="Python allocations per subscription and the top files (slow)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=str(HERE.parent), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    import uvloop

    args = parse(argv)
    if args.worker:
        import logging
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        sys.path.insert(0, args.tree)
        result = uvloop.run(worker(args))
        print(RESULT + json.dumps(result), flush=True)
    else:
        trees = [HERE.parent] + ([Path(args.compare).resolve()] if args.compare else [])
        uvloop.run(drive(args, trees))


if __name__ == "__main__":
    main(sys.argv[1:])
