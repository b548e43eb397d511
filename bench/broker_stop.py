"""Benchmark: the embedded broker stops at once while a client is still connected (the
budget that tests/integration/test_broker.py held as a wall-clock assertion).

    .venv/bin/python bench/broker_stop.py [--rounds 5] [--budget-s 2]

Tansu drains open client connections for about 5 s on SIGTERM and exits at once on
SIGINT, which `EmbeddedBroker.stop()` sends. Each round starts a broker, opens a client
connection, and times `stop()`. Prints the load average before and after: a figure taken
while tests or other benchmarks run is not evidence. Exits 1 when a round missed the budget.

Bounded: `--rounds` brokers, one at a time, each stopped (killed after 5 s at worst).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.kafka.broker import EmbeddedBroker


async def one_stop() -> float:
    """Seconds `stop()` takes with a client connection open."""
    broker = EmbeddedBroker()
    await broker.start()
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))):
        started = time.monotonic()
        await broker.stop()
        return time.monotonic() - started


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=2.0)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} cores")
    took = [await one_stop() for _ in range(args.rounds)]
    for i, seconds in enumerate(took, 1):
        verdict = "kept" if seconds < args.budget_s else "MISSED"
        print(f"round {i}: stop with a client connected {seconds * 1000:.0f} ms "
              f"({verdict} the {args.budget_s:g} s budget)")
    print(f"load average after: {os.getloadavg()}")
    return 0 if max(took) < args.budget_s else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
