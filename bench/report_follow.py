"""Does the live audit keep up? `hookstream report --follow` against a journal written at
fan-out speed (issue 35, item 4).

    .venv/bin/python bench/report_follow.py [--subscribers 300] [--partitions 4]
        [--rate 20000] [--segment-s 2] [--seconds 60] [--catch-up-s 120]
        [--master 'local[2]']

A writer (this process) journals, through the real `Journal`, what `--subscribers`
subscriptions of one `--partitions` topic deliver at `--rate` deliveries per second in
all (the runtime's single-push speed on this machine is about 20,000/s, bench/RESULTS.md):
every `--segment-s` seconds one closed segment with each cursor's `fetched` batch, its
deliveries (the egress's ledger rows, ranged by the journal) and the commit round, for
`--seconds`. Meanwhile `python -m runtime report JOURNAL --follow --out OUT --master
MASTER --refresh-s 1` runs as a child (a cold JVM; the writing starts once it says
it is following), and its progress lines ("delivered N") are read as they come. Printed
every segment: seconds since the start, deliveries written so far, delivered per the
live report, and the lag (written minus reported, in records and in seconds of writing).
It keeps up when the lag stays bounded while writing and
reaches 0 within `--catch-up-s` after the writer stops; the script says which, with the
load average before and after. Bounded in time: the child is stopped (SIGTERM, then
killed after 60 s) when the catch-up ends or its time is up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.host.journal import Delivery, Event, Journal, commit_round, offset_ranges
from runtime.kernel.clock import FakeClock

T0 = 1_700_000_000_000
TOPIC = "orders"
DELIVERED = re.compile(r"delivered ([\d,]+) \(")


async def write_segment(directory: Path, args: argparse.Namespace, step: int,
                        per_cursor: int) -> int:
    """One closed segment: `per_cursor` records of every cursor, fetched, delivered
    and committed; returns the deliveries written."""
    clock = FakeClock(start_ms=0, wall_offset_ms=T0 + step * 1000 * args.segment_s)
    journal = Journal(directory, clock=clock, max_buffered=10_000_000)
    await journal.open()
    first, at = step * per_cursor, clock.wall_ms()
    offsets = list(range(first, first + per_cursor))
    positions = []
    for partition in range(args.partitions):
        for n in range(args.subscribers):
            sub = f"s{n}_g-s{n}"
            journal.emit(Event(type="fetched", ts_ms=at, subscription=sub, topic=TOPIC,
                               partition=partition, offset=first, count=per_cursor,
                               offsets=offset_ranges(offsets)))
            for offset in offsets:
                journal.emit(Delivery(sub, f"http://127.0.0.1:8080/hook/{n}", TOPIC,
                                      partition, offset, 200, at + 5, 900 + offset % 700,
                                      at - 20, 0))
            positions.append((sub, TOPIC, partition, first + per_cursor))
    journal.emit(commit_round(at + 6, positions))
    await journal.stop()
    return per_cursor * len(positions)


class Reported:
    """The live report's delivered count, read from the child's progress lines."""

    def __init__(self, stream: object) -> None:
        self.delivered = 0
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip())
            found = DELIVERED.search(line)
            if found:
                self.delivered = int(found.group(1).replace(",", ""))


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants (the follow job's JVM)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, grown = {pid}, True
    while grown:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    total = 0
    for member in tree:
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


BATCH = re.compile(r"batch (\d+):")


def stop(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=20_000, help="deliveries/s in all")
    parser.add_argument("--segment-s", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--catch-up-s", type=int, default=120)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    cursors = args.subscribers * args.partitions
    per_cursor = max(1, args.rate * args.segment_s // cursors)
    rate = per_cursor * cursors / args.segment_s
    print(f"load average {os.getloadavg()[0]:.2f}; {args.subscribers} subscriptions x "
          f"{args.partitions} partitions, {rate:,.0f} deliveries/s, a segment every "
          f"{args.segment_s} s for {args.seconds} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="report-follow-") as scratch:
        journal, out = Path(scratch, "journal"), Path(scratch, "report")
        journal.mkdir()
        child = subprocess.Popen(
            [sys.executable, "-m", "runtime", "report", str(journal), "--follow",
             "--out", str(out), "--master", args.master, "--refresh-s", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reported = Reported(child.stdout)
        try:
            ready = time.monotonic() + 180  # Spark's start: not the audit's lag
            while not any(line.startswith("following") for line in reported.lines) \
                    and time.monotonic() < ready and child.poll() is None:
                time.sleep(0.5)
            cpu_before = tree_cpu_s(child.pid)
            batch_before = _last_batch(reported)
            started = time.monotonic()
            written, lags = run(args, journal, per_cursor, rate, reported)
            elapsed = time.monotonic() - started
            cpu = tree_cpu_s(child.pid) - cpu_before
            batches = max(1, _last_batch(reported) - batch_before)
        finally:
            stop(child)
        print("\n".join(reported.lines[-5:]))
        caught = reported.delivered == written
        print(f"audited {reported.delivered / elapsed:,.0f} deliveries/s against "
              f"{rate:,.0f} written ({reported.delivered / elapsed / rate:.2f} x) over "
              f"{elapsed:.1f} s; follow job CPU {cpu:.1f} s in {batches} micro-batches, "
              f"{cpu / batches:.2f} s per micro-batch", flush=True)
        print(f"written {written:,}, reported {reported.delivered:,}; worst lag while "
              f"writing {max(lags, default=0):.1f} s; "
              f"{'caught up' if caught else 'NOT caught up'}; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)


def _last_batch(reported: Reported) -> int:
    found = [BATCH.search(line) for line in reported.lines]
    return max((int(m.group(1)) for m in found if m), default=0)


def run(args: argparse.Namespace, journal: Path, per_cursor: int, rate: float,
        reported: Reported) -> tuple[int, list[float]]:
    """Write for `--seconds`, then wait for the catch-up; (written, lags in s)."""
    start, written, lags, step = time.monotonic(), 0, [], 0
    while time.monotonic() - start < args.seconds:
        written += asyncio.run(write_segment(journal, args, step, per_cursor))
        step += 1
        lag = (written - reported.delivered) / rate
        lags.append(lag)
        print(f"{time.monotonic() - start:6.1f} s written {written:,} reported "
              f"{reported.delivered:,} lag {written - reported.delivered:,} ({lag:.1f} s)",
              flush=True)
        time.sleep(max(0.0, start + step * args.segment_s - time.monotonic()))
    deadline = time.monotonic() + args.catch_up_s
    while reported.delivered < written and time.monotonic() < deadline:
        time.sleep(1)
    print(f"catch-up: {time.monotonic() - start:.1f} s since the start", flush=True)
    return written, lags


if __name__ == "__main__":
    main()
