"""`GET /healthz` at the per-instance limits (issue 34, item 7): many subscriptions, each
naming many topics that do not exist and many topic patterns, up to the default limits.

    .venv/bin/python bench/health_limits.py [--subscriptions 10000] [--names 90]
        [--patterns 10] [--topic-pool 10000] [--pattern-pool 1000] [--measure-s 30]
        [--py-spy FILE] [--timeout-s 1800]

Everything on loopback, started here and stopped at the end: the embedded broker and the
runtime in this process (uvloop). Subscription `n` names `--names` topics of a pool of
`--topic-pool` names none of which exists (`absent-t00042`, ...) and `--patterns`
patterns of a pool of `--pattern-pool` (`absent-p0042-.*`), so the instance holds the
defaults' worst case: `[delivery] max_subscriptions` subscriptions, `max_topics` distinct
names, `max_patterns` distinct patterns (docs/limits.md). They are posted through the
admin API, 16 at a time.

`/healthz` is timed from a process of its own (sequential GETs, one every 50 ms, over
`--measure-s`), before the subscriptions are posted and after: p50, p99 and max in ms,
with the load average printed beside them. The issue's figures (2,000 x (90 + 10) before
any limit): idle `/healthz` 3-6.6 s. `--py-spy FILE` samples the runtime during the
second measurement (collapsed stacks: bench/profile_summary.py reads them).

A figure taken at a load average above 1.5 is not evidence (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from delivery import py_spy, running

from runtime import Runtime
from runtime.kafka.broker import EmbeddedBroker
from tests.browser.fleet import post_all
from tests.waits import until

PROBE_EVERY_S = 0.05


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class Warnings(logging.Handler):
    """The runtime's warnings, counted (at the limits a stop warns once per tree): the
    first few printed as they come, the count at the end."""

    SHOWN = 5

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if self.count <= self.SHOWN:
            print(f"  {record.levelname} {record.name}: {record.getMessage()[:200]}",
                  flush=True)


def documents(args: argparse.Namespace) -> list[dict[str, Any]]:
    def one(n: int) -> dict[str, Any]:
        names = [{"name": f"absent-t{(n * args.names + k) % args.topic_pool:05d}"}
                 for k in range(args.names)]
        patterns = [{"name": f"absent-p{(n * args.patterns + k) % args.pattern_pool:04d}-.*",
                     "pattern": True} for k in range(args.patterns)]
        return {"id": f"limit-{n:05d}", "group": {"id": f"g-{n:05d}"}, "broker": "Kafka",
                "topics": names + patterns,
                "subscriptionMethod": {"type": "http", "uri": "http://127.0.0.1:9/none"}}

    return [one(n) for n in range(args.subscriptions)]


def probe(url: str, seconds: float) -> None:
    """In a process of its own: time sequential GETs of `url`, print them as JSON."""
    took: list[float] = []
    failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                answer.read()
        except OSError:
            failed += 1
        took.append((time.perf_counter() - began) * 1000)
        time.sleep(PROBE_EVERY_S)
    print(json.dumps({"ms": took, "failed": failed}))


async def timed(url: str, seconds: float) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--probe", url, "--measure-s", str(seconds),
        stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    found = json.loads(out)
    ms = sorted(found["ms"])
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (f"/healthz over {seconds:.0f} s: {len(ms)} answers, p50 {statistics.median(ms):.1f} "
            f"ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms, {found['failed']} failed ({load()})")


def riding(runtime: Runtime) -> int:
    """Subscriptions the instance member has taken in (their joins handled)."""
    series = runtime.metrics.children("hookstream_group_subscriptions")
    return int(sum(value.value for value in series.values()))


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    async with EmbeddedBroker() as broker, running(broker.bootstrap, workdir,
                                                   journal=False) as runtime:
        health = runtime.admin.url + "/healthz"
        print("no subscription:", await timed(health, args.measure_s), flush=True)
        every = documents(args)
        began = time.monotonic()
        await asyncio.wait_for(post_all(runtime.admin.url, every), args.timeout_s)
        print(f"posted {len(every)} subscriptions x ({args.names} names + {args.patterns} "
              f"patterns) in {time.monotonic() - began:.1f} s ({load()})", flush=True)
        # a POST answers before the member has taken the subscription in
        await until(lambda: riding(runtime) >= len(every), timeout_s=args.timeout_s,
                    what="every subscription riding the instance member")
        print(f"{riding(runtime)} riding the instance member after "
              f"{time.monotonic() - began:.1f} s", flush=True)
        with py_spy(args.py_spy):
            print("at the limits:", await timed(health, args.measure_s), flush=True)
        began = time.monotonic()
    print(f"stopped in {time.monotonic() - began:.1f} s ({load()})")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--names", type=int, default=90)
    parser.add_argument("--patterns", type=int, default=10)
    parser.add_argument("--topic-pool", type=int, default=10_000)
    parser.add_argument("--pattern-pool", type=int, default=1_000)
    parser.add_argument("--measure-s", type=float, default=30.0)
    parser.add_argument("--py-spy", default="")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--probe", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.probe:
        probe(args.probe, args.measure_s)
        return
    print(f"{load()} at the start")
    warnings = Warnings()
    logging.getLogger().addHandler(warnings)
    with tempfile.TemporaryDirectory(prefix="hookstream-limits-") as workdir:
        uvloop.run(bench(args, Path(workdir)))
    print(f"{warnings.count} warnings logged (the first {Warnings.SHOWN} shown)")


if __name__ == "__main__":
    main(sys.argv[1:])
