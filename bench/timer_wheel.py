"""TimerWheel against a heapq timer doing the same work on the same deadlines.

    .venv/bin/python bench/timer_wheel.py [--n 1000000] [--seed 7] [--repeat 3] [--no-memory]

Each scenario schedules `--n` timers at now=0 with deadlines uniform over one hour, then
drives time forward until every timer has expired (or was cancelled), exactly as the
owning actor would:

- `sleep-to-next`: the actor sleeps until `next_deadline()`, then calls `advance(now)`.
  This is the delay actor's loop, and it pays for `next_deadline` after every advance.
- `10ms-steps`: the actor advances every 10 ms whether or not anything is due, as a
  loop woken by other traffic (or by a 10 ms poll) does; 1 ms steps would be 3.6 M calls
  that mostly find nothing and only measure the empty-advance check.
- `10%-cancelled`: `10ms-steps` after cancelling a random 10% of the timers, as retries
  that are answered in time get cancelled.

Throughput counts timers scheduled and expired (or cancelled) per second of wall time over
the whole run, best of `--repeat` runs (the machine is shared; the best run is the one
least disturbed); `cpu s` is the same run's process CPU time, which other processes
disturb less. Peak memory is measured in a second, identical run under tracemalloc (which
slows Python down, so it is kept out of the timed run); it covers the timer structures,
the handles and the script's list of them, not the pre-generated deadlines. Both timers
must return the same items in the same order, or the script fails.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime.kernel.timer_wheel import TimerWheel

T = TypeVar("T")
HOUR_MS = 3_600_000
STEP_MS = 10


class _HeapHandle(Generic[T]):
    __slots__ = ("deadline_ms", "item", "state")

    def __init__(self, deadline_ms: int, item: T) -> None:
        self.deadline_ms = deadline_ms
        self.item = item
        self.state = 0  # 0 pending, 1 cancelled, 2 expired


class HeapTimer(Generic[T]):
    """The usual alternative (asyncio's own scheduler): a heap of (deadline, seq, handle),
    cancel marks the handle and the entry stays in the heap until it reaches the top."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._heap: list[tuple[int, int, _HeapHandle[T]]] = []
        self._seq = 0
        self._pending = 0

    def schedule(self, deadline_ms: int, item: T) -> _HeapHandle[T]:
        handle = _HeapHandle(deadline_ms, item)
        heappush(self._heap, (deadline_ms, self._seq, handle))
        self._seq += 1
        self._pending += 1
        return handle

    def cancel(self, handle: _HeapHandle[T]) -> bool:
        if handle.state:
            return False
        handle.state = 1
        self._pending -= 1
        return True

    def advance(self, now_ms: int) -> list[T]:
        if now_ms < self._now:
            raise ValueError("backwards")
        self._now = now_ms
        heap = self._heap
        out: list[T] = []
        while heap and heap[0][0] <= now_ms:
            handle = heappop(heap)[2]
            if not handle.state:
                handle.state = 2
                out.append(handle.item)
        self._pending -= len(out)
        return out

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap and heap[0][2].state:
            heappop(heap)
        return heap[0][0] if heap else None

    def __len__(self) -> int:
        return self._pending


class Timer(Protocol):
    def schedule(self, deadline_ms: int, item: int) -> Any: ...

    def cancel(self, handle: Any) -> bool: ...

    def advance(self, now_ms: int) -> list[int]: ...

    def next_deadline(self) -> int | None: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class Scenario:
    name: str
    drive: Callable[[Timer], Iterator[list[int]]]
    cancel_fraction: float


@dataclass
class Result:
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process only: less disturbed by other load
    schedule_seconds: float = 0.0  # scheduling (and cancelling) only
    peak_bytes: int = 0
    fired: int = 0
    checksum: int = 0


def sleep_to_next(timer: Timer) -> Iterator[list[int]]:
    while (deadline := timer.next_deadline()) is not None:
        yield timer.advance(deadline)


def fixed_steps(timer: Timer) -> Iterator[list[int]]:
    for now in range(STEP_MS, HOUR_MS + STEP_MS, STEP_MS):
        yield timer.advance(now)


SCENARIOS = (
    Scenario("sleep-to-next", sleep_to_next, 0.0),
    Scenario("10ms-steps", fixed_steps, 0.0),
    Scenario("10%-cancelled", fixed_steps, 0.10),
)


def run_once(
    make: Callable[[], Timer], deadlines: Sequence[int], cancels: Sequence[int], scenario: Scenario
) -> Result:
    """Schedule everything, cancel the chosen ones, drive time until nothing is pending."""
    result = Result()
    started, cpu_started = time.perf_counter(), time.process_time()
    timer = make()
    schedule = timer.schedule
    handles = [schedule(deadline, item) for item, deadline in enumerate(deadlines)]
    for index in cancels:
        timer.cancel(handles[index])
    del handles
    result.schedule_seconds = time.perf_counter() - started
    order_hash = 0
    for fired in scenario.drive(timer):
        result.fired += len(fired)
        for item in fired:
            order_hash = (order_hash * 1_000_003 + item) & 0xFFFF_FFFF_FFFF
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    if len(timer):
        raise AssertionError(f"{len(timer)} timers still pending at the end of the hour")
    result.checksum = order_hash
    return result


def measure(
    makers: dict[str, Callable[[], Timer]],
    deadlines: Sequence[int],
    cancels: Sequence[int],
    scenario: Scenario,
    args: argparse.Namespace,
) -> dict[str, Result]:
    """Best of `--repeat` timed runs per timer, interleaved so both see the same machine
    load, then one tracemalloc run each for the peak."""
    best: dict[str, Result] = {}
    for _ in range(args.repeat):
        for name, make in makers.items():
            result = run_once(make, deadlines, cancels, scenario)
            if name not in best or result.seconds < best[name].seconds:
                best[name] = result
    if not args.no_memory:
        for name, make in makers.items():
            tracemalloc.start()
            run_once(make, deadlines, cancels, scenario)
            best[name].peak_bytes = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return best


def report(scenario: Scenario, n: int, results: dict[str, Result]) -> None:
    for name, result in results.items():
        rate = n / result.seconds
        peak = f"{result.peak_bytes / 2**20:9.1f}" if result.peak_bytes else f"{'-':>9}"
        print(
            f"{scenario.name:<15} {name:<6} {result.schedule_seconds:10.2f} "
            f"{result.seconds:8.2f} {result.cpu_seconds:6.2f} {rate:11,.0f} {peak}"
        )
    wheel, heap = results["wheel"], results["heapq"]
    ratio = (
        f"wheel vs heapq: throughput x{heap.seconds / wheel.seconds:.2f} "
        f"(cpu x{heap.cpu_seconds / wheel.cpu_seconds:.2f})"
    )
    if heap.peak_bytes:
        ratio += f", peak memory x{wheel.peak_bytes / heap.peak_bytes:.2f}"
    print(f"{'':<15} {ratio}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="timers per scenario")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best counts")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    deadlines = [rng.randrange(1, HOUR_MS + 1) for _ in range(args.n)]
    cancels = rng.sample(range(args.n), int(args.n * 0.10))
    makers: dict[str, Callable[[], Timer]] = {"wheel": TimerWheel, "heapq": HeapTimer}
    python = sys.version.split()[0]
    print(
        f"n={args.n:,} seed={args.seed} best of {args.repeat}, "
        f"deadlines uniform over 1 h, Python {python}"
    )
    header = (
        f"{'scenario':<15} {'timer':<6} {'schedule s':>10} {'total s':>8} {'cpu s':>6} "
        f"{'timers/s':>11} {'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for scenario in SCENARIOS:
        chosen = cancels if scenario.cancel_fraction else []
        results = measure(makers, deadlines, chosen, scenario, args)
        if len({(r.fired, r.checksum) for r in results.values()}) != 1:
            raise AssertionError(f"{scenario.name}: the timers expired different items")
        report(scenario, args.n, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
