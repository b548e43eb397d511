"""Journal bytes per delivery at fan-out (issue 35): this tree, and another to compare.

    .venv/bin/python bench/journal_bytes.py [--subscribers 100] [--records 100]
        [--partitions 4] [--compare DIR] [--timeout-s 300] [--rounds 1] [--journal-off]

Runs everything in-process on loopback and stops it at the end: a runtime with an
embedded broker and the journal on (its default settings), an aiohttp receiver answering
`200`, `--subscribers` subscriptions of one `--partitions` topic. Produces `--records`
records once every subscription is in (each reads from the start), waits until every
subscriber has them all (records x subscribers deliveries), stops the runtime (which
flushes the journal), then reads the journal: lines and bytes per event type, per
delivery. `--compare DIR` runs the
same on another checkout (`git archive <commit> | tar -x -C /tmp/old`) right after;
`--rounds N` alternates the trees N times.

Also the process's CPU per delivery (user + system, every thread: `time.process_time`)
from the first record produced until every delivery was counted and the journal flushed
(`cpu_us_per_delivery`), and that of the runtime's stop; with `--journal-off` each tree
also runs with `[journal] enabled = false`, and `journal_cpu_us_per_delivery` is the
difference. CPU figures depend on the machine's load: each run prints the load average
at its start and end. bench/journal_cpu.py measures the journal's own CPU without the
broker and HTTP around it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import aiohttp
    from aiohttp import web

    from actors.delivery.service import DeliveryService
    from runtime.host.app import Runtime
    from runtime.host.config import parse_config
    from runtime.kafka import create_topics, make_producer

    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    runtime = Runtime(parse_config({
        "brokers": [{"name": "Kafka", "bootstrap_servers": "embedded"}],
        "admin": {"listen": "127.0.0.1:0"},
        "persistence": {"dir": str(workdir / "persist")},
        "journal": {"dir": str(workdir / "journal"), "enabled": not args.no_journal},
        "runtime": {"shutdown_deadline_ms": 30_000},
    }), services=[DeliveryService])
    load_start = os.getloadavg()[0]
    await runtime.start()
    journal = runtime.journal
    try:
        bootstrap = runtime.bootstrap("Kafka")
        topic = f"jb-{uuid.uuid4().hex[:8]}"
        await create_topics(bootstrap, {topic: args.partitions})
        async with aiohttp.ClientSession() as session:
            for first in range(0, args.subscribers, 25):
                await asyncio.gather(*(subscribe(session, runtime.admin.url, f"s{n}", topic,
                                                 f"http://127.0.0.1:{port}/hook")
                                       for n in range(first, min(first + 25,
                                                                 args.subscribers))))
        producer = make_producer(bootstrap, acks=1, linger_ms=20)
        await producer.start()
        cpu_start = time.process_time()
        try:
            sent = [await producer.send(topic, b"x" * 100, partition=i % args.partitions)
                    for i in range(args.records)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        want = args.records * args.subscribers
        deadline = time.monotonic() + args.timeout_s
        while delivered(runtime) < want:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{delivered(runtime):.0f} of {want} delivered")
            await asyncio.sleep(0.05)
        await journal.flush()  # type: ignore[attr-defined]  # both journals have it
        cpu = time.process_time() - cpu_start
    finally:
        stop_start = time.process_time()
        await runtime.stop()
        stop_cpu = time.process_time() - stop_start
        await runner.cleanup()
    return {"deliveries": want, "dropped": journal.dropped, "journal": not args.no_journal,
            "cpu_us_per_delivery": round(cpu / want * 1e6, 1),
            "stop_cpu_s": round(stop_cpu, 2),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            **journal_sizes(workdir / "journal", want)}


async def subscribe(session: Any, admin: str, sub_id: str, topic: str, url: str) -> None:
    body = {"id": sub_id, "group.id": f"g-{sub_id}", "broker": "Kafka",
            "topics": [{"name": topic, "config": {"concurrencyFactor": 20}}],
            "subscriptionMethod": {"type": "http", "uri": url},
            "properties": {"auto.offset.reset": "earliest"}}
    async with session.post(admin + "/broker/subscription", json=body) as reply:
        if reply.status != 200:
            raise RuntimeError(f"subscribe refused: {reply.status} {await reply.text()}")


def delivered(runtime: Any) -> float:
    family = runtime.metrics.counter("hookstream_delivered_total", "")
    return float(sum(c.value for c in family.children.values()))


def journal_sizes(directory: Path, deliveries: int) -> dict[str, Any]:
    lines: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for path in sorted(directory.glob("segment-*.jsonl")):
        for line in path.read_bytes().splitlines():
            kind = json.loads(line).get("type", "?")
            lines[kind] += 1
            size[kind] += len(line) + 1
    return {
        "bytes_per_delivery": round(sum(size.values()) / deliveries, 1),
        "events_per_delivery": round(sum(lines.values()) / deliveries, 3),
        "by_type": {kind: {"events": lines[kind],
                           "bytes_per_delivery": round(size[kind] / deliveries, 1)}
                    for kind in sorted(lines, key=lambda k: -size[k])},
    }


def run_tree(tree: Path, args: argparse.Namespace, no_journal: bool = False) -> dict[str, Any]:
    """This script against the code of `tree`, in a child process."""
    command = [sys.executable, str(HERE / "journal_bytes.py"), "--child",
               "--subscribers", str(args.subscribers), "--records", str(args.records),
               "--partitions", str(args.partitions), "--timeout-s", str(args.timeout_s),
               *(["--no-journal"] if no_journal else [])]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                          timeout=args.timeout_s + 120, cwd=tree)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), tree=str(tree))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--timeout-s", type=int, default=300)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--journal-off", action="store_true",
                        help="each tree also without the journal (its CPU: the difference)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-journal", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="journal-bytes-") as workdir:
            print(json.dumps(asyncio.run(measure(args, Path(workdir)))))
        return
    trees = [HERE.parent, *([args.compare.resolve()] if args.compare else [])]
    for _ in range(args.rounds):
        for tree in trees:
            on = run_tree(tree, args)
            if args.journal_off:
                off = run_tree(tree, args, no_journal=True)
                on["journal_off"] = {k: off[k] for k in ("cpu_us_per_delivery",
                                                         "load_average")}
                on["journal_cpu_us_per_delivery"] = round(
                    on["cpu_us_per_delivery"] - off["cpu_us_per_delivery"], 1)
            print(json.dumps(on, indent=2), flush=True)


if __name__ == "__main__":
    main()
