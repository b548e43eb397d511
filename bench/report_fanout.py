"""The report of a fan-out journal (issue 35, item 4): 10,000 subscribers x 100 records.

    .venv/bin/python bench/report_fanout.py [--subscribers 10000] [--records 100]
        [--partitions 4] [--commit-every 12] [--master 'local[2]'] [--keep DIR]

Writes, through the real `Journal` (a flush every 10,000 deliveries, as the flusher's
ticks would), the journal a runtime writes when `--subscribers` subscriptions of one
`--partitions` topic each deliver `--records` records: per cursor (subscription x
partition) an `actor_started`, one `fetched` for its batch (offsets as ranges), its
deliveries as the egress emits them (`Delivery`: the journal ranges them per cursor),
answered out of order, and every `--commit-every` deliveries of each cursor a commit
round (one `committed` event holding every cursor's position, as the instance member
journals its rounds since issue 35; before, one `committed` per cursor). One record is
left undelivered and one delivered twice, so the audit has something to find. Then runs
`python -m runtime report` on it in a fresh process (a cold JVM, `--master`), times it
(wall clock, the whole command) and checks the summary: every record delivered but the
planted one, 1 lost, 1 duplicate. Prints the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.host.journal import (
    Delivery,
    Event,
    Journal,
    closed_segments,
    commit_round,
    offset_ranges,
)
from runtime.kernel.clock import FakeClock

T0 = 1_700_000_000_000
TOPIC = "orders"
FLUSH_EVERY = 10_000
LOST = ("s7_g-s7", 1, 3)
TWICE = ("s11_g-s11", 2, 5)


async def write(directory: Path, args: argparse.Namespace) -> tuple[int, int]:
    """The journal; returns (deliveries, lines)."""
    clock = FakeClock(start_ms=0, wall_offset_ms=T0)
    journal = Journal(directory, clock=clock, max_buffered=1_000_000)
    await journal.open()
    per_partition = args.records // args.partitions
    shuffle = random.Random(35)
    cursors = [(f"s{n}_g-s{n}", n, partition) for partition in range(args.partitions)
               for n in range(args.subscribers)]
    orders = {}
    for sub, _, partition in cursors:
        journal.emit(Event(type="actor_started", ts_ms=T0, actor=f"/cursor/{sub}/{partition}"))
        journal.emit(Event(type="fetched", ts_ms=T0 + 5, subscription=sub, topic=TOPIC,
                           partition=partition, offset=0, count=per_partition,
                           offsets=offset_ranges(list(range(per_partition)))))
        orders[(sub, partition)] = shuffle.sample(range(per_partition), per_partition)
    deliveries = 0
    for step in range(0, per_partition, args.commit_every):  # a commit round per step
        positions = []
        for sub, n, partition in cursors:
            order = orders[(sub, partition)]
            for done, offset in enumerate(order[step:step + args.commit_every], step + 1):
                at = T0 + 10 + done * 7
                times = 2 if (sub, partition, offset) == TWICE else \
                    0 if (sub, partition, offset) == LOST else 1
                for _ in range(times):
                    journal.emit(Delivery(sub, f"http://127.0.0.1:8080/hook/{n}", TOPIC,
                                          partition, offset, 200, at,
                                          800 + (offset * 131 + n) % 3000, T0 - 50 + offset,
                                          5))  # monotonic: fetched at T0 + 5
                    deliveries += 1
                    if deliveries % FLUSH_EVERY == 0:
                        await journal.flush()
            done = min(step + args.commit_every, per_partition)
            positions.append((sub, TOPIC, partition, min(order[done:] or [per_partition])))
        journal.emit(commit_round(T0 + 10 + (step + args.commit_every) * 7 + 1, positions))
    await journal.stop()
    lines = sum(len(p.read_bytes().splitlines()) for p in closed_segments(directory))
    return deliveries, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-every", type=int, default=12)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", type=Path, help="write the journal and report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-fanout-") as scratch:
        base = args.keep or Path(scratch)
        journal, out = base / "journal", base / "report"
        started = time.monotonic()
        deliveries, lines = asyncio.run(write(journal, args))
        size = sum(p.stat().st_size for p in closed_segments(journal))
        print(f"journal: {deliveries:,} deliveries in {lines:,} lines, {size / 1e6:.1f} MB, "
              f"written in {time.monotonic() - started:.1f} s", flush=True)
        load = os.getloadavg()[0]
        command = [sys.executable, "-m", "runtime", "report", str(journal), "--out", str(out),
                   "--master", args.master]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=1800)
        took = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"report failed: {done.stderr[-3000:]}")
        summary = json.loads((out / "summary.json").read_text())
        want = args.subscribers * args.records
        got = {k: summary[k] for k in ("records_fetched", "delivered", "lost", "duplicates",
                                       "unknown")}
        print(f"report: {took:.1f} s wall (`{' '.join(command[1:])}`), load average "
              f"{load:.2f} before, {os.getloadavg()[0]:.2f} after; {json.dumps(got)}")
        assert got == {"records_fetched": want, "delivered": want - 1, "lost": 1,
                       "duplicates": 1, "unknown": 0}, got


if __name__ == "__main__":
    main()
