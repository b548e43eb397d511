"""The egress alone (issue 37): CPU per push of the HTTP egress actor, beside a bare
aiohttp POST loop and a raw asyncio `Protocol` loop, on loopback, in one run.

    .venv/bin/python bench/egress.py [--pushes 50000] [--window 100] [--rounds 3]
        [--transport lean|aiohttp] [--py-spy FILE] [--phases raw,bare,egress]

Everything runs here and stops at the end: the receiver (bench/receiver.py, a uvloop
responder answering `200`, its own process) and, in this process on uvloop:

- raw: `--window` connections, each writing a pre-built request and waiting for its
  answer (the floor: what one HTTP/1.1 request costs a Python client);
- bare: one `aiohttp.ClientSession` and `--window` workers POSTing 100 bytes;
- egress: an `ActorSystem` with the product's `EgressActor` (the lean transport unless
  `--transport aiohttp`) and a `Feeder` actor standing where a cursor stands: it keeps
  `--window` records in flight, telling the egress a `Deliver` for each outcome it gets.
  Journal events go to a list (the journal's own cost is bench/journal_cpu.py's). Its
  records are first attempts and the egress has its subscription's attempts ring, as in
  the runtime (before 2026-11-28 09:30 they were attempt 0, journaled as events, and no
  ring: figures taken before are not comparable with those after).

CPU microseconds per request of this process (`time.process_time`), the receiver's
apart. Instructions per push, which no other load on the machine changes: run the egress
phase alone under callgrind twice and divide the difference by the pushes between
(`valgrind --tool=callgrind .venv/bin/python bench/egress.py --phases egress --rounds 1
--pushes 1000`, then `--pushes 5000`: (I refs of the second - of the first) / 4000).
To compare two trees, run the script of one with the other on `PYTHONPATH`
(`PYTHONPATH=/tmp/old .venv/bin/python bench/egress.py`): it uses only APIs both have.
The load average is printed beside every figure: a figure from a busy machine is not
evidence. Every phase is bounded by `--timeout-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import uvloop

from actors.delivery.document.settings import egress_settings
from actors.delivery.document.subscription import (
    Consumer,
    Group,
    SubscriptionMethod,
    TopicConfig,
    TopicSpec,
)
from actors.delivery.egress.attempts import AttemptRing
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.origin import Origins
from actors.shared.messages import Deliver, DeliverMany, Record
from runtime.host.metrics import Registry
from runtime.kernel.actor import Actor
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem

RECEIVER = Path(__file__).resolve().parent / "receiver.py"
BODY = b"x" * 100


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def receiver() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, str(RECEIVER)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening"):
            raise RuntimeError(f"the receiver did not start: {line!r}")
        yield int(line.split()[1])
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


# -- raw: the floor -------------------------------------------------------------------
class _Raw(asyncio.Protocol):
    def __init__(self, request: bytes, left: list[int], done: asyncio.Future[None]) -> None:
        self.request, self.left, self.done = request, left, done
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def data_received(self, data: bytes) -> None:  # one small answer per read here
        self._next()

    def _next(self) -> None:
        if self.left[0] <= 0:
            if not self.done.done():
                self.done.set_result(None)
            return
        self.left[0] -= 1
        assert self.transport is not None
        self.transport.write(self.request)


async def raw(port: int, count: int, window: int) -> None:
    loop = asyncio.get_running_loop()
    request = (f"POST /hook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: "
               f"{len(BODY)}\r\n\r\n").encode() + BODY
    left, done = [count], loop.create_future()
    transports = [(await loop.create_connection(lambda: _Raw(request, left, done),
                                                "127.0.0.1", port))[0]
                  for _ in range(window)]
    await done
    for transport in transports:
        transport.close()


# -- bare aiohttp ---------------------------------------------------------------------
async def bare(port: int, count: int, window: int) -> None:
    left = [count]
    url = f"http://127.0.0.1:{port}/hook"
    connector = aiohttp.TCPConnector(limit=window)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with session.post(url, data=BODY) as response:
                    await response.read()

        await asyncio.gather(*(worker() for _ in range(window)))


# -- the egress -----------------------------------------------------------------------
class Feeder(Actor):
    """Where a cursor stands: keeps `window` records in flight until `count` were sent."""

    def __init__(self, count: int, window: int) -> None:
        super().__init__("feeder")
        self.count, self.window = count, window
        self.sent = self.answered = self.failed = 0
        self.egress: EgressActor | None = None
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def begin(self, egress: EgressActor) -> None:
        self.egress = egress
        for _ in range(min(self.window, self.count)):
            self._send()

    def _send(self) -> None:
        assert self.egress is not None
        offset = self.sent
        self.sent += 1
        # a first attempt, as a cursor sends it (attempt 1: the journal's ledger row)
        record = Record("bench", 0, offset, b"k", BODY, (), timestamp_ms=0, fetched_ms=0,
                        attempt=1)
        self.egress.tell_nowait(Deliver(record, epoch=1, reply_to=self))

    async def handle(self, message: object) -> None:
        # a burst's deliveries may come as one BatchOutcome (trees since issue 37)
        records = getattr(message, "records", None)
        answered = 1 if records is None else len(records)
        self.answered += answered
        self.failed += type(message).__name__ == "Failed" or (
            records is not None and getattr(message, "failure", None) is not None)
        for _ in range(min(answered, self.count - self.sent)):
            self._send()
        if self.answered == self.count and not self.finished.done():
            self.finished.set_result(None)


def consumer(port: int, window: int, transport: str) -> Consumer:
    method: dict[str, Any] = {"type": "http", "uri": f"http://127.0.0.1:{port}/hook",
                              "maxConnections": window}
    return Consumer(id="bench", group=Group(id="bench"), broker="Kafka",
                    topics=[TopicSpec(name="bench", config=TopicConfig(
                        concurrencyFactor=window))],
                    subscriptionMethod=msgspec.convert(method, SubscriptionMethod))


async def egress(port: int, count: int, window: int, transport: str) -> int:
    events: list[object] = []
    rows: list[object] = []  # the journal's ledger takes delivered rows so, by append
    system = ActorSystem(emit=events.append, delivered=rows.append)
    await system.start()
    try:
        feeder = Feeder(count, window)
        await system.spawn(ChildSpec("feeder", lambda: feeder))
        actor = EgressActor("egress", egress_settings(consumer(port, window, transport)),
                            Registry(), transport=transport)  # type: ignore[arg-type]
        actor.attempts = AttemptRing()  # as the control plane gives it (the attempts API)
        await system.spawn(ChildSpec("egress", lambda: actor))
        feeder.begin(actor)
        await feeder.finished
        return feeder.failed
    finally:
        await system.stop(deadline_ms=3000)


# -- fan-out: many egress actors, one origin -------------------------------------------
class Fan(Actor):
    """Where the cursors of one partition stand at fan-out: tells each subscription's
    egress a burst of records in one `DeliverMany` (as a cursor's dispatch does) and
    counts the outcomes."""

    def __init__(self) -> None:
        super().__init__("fan")
        self.answered = self.failed = self.want = self.messages = 0
        self.done: asyncio.Future[None] | None = None

    def burst(self, egresses: list[EgressActor], size: int, first: int) -> asyncio.Future[None]:
        self.done = asyncio.get_running_loop().create_future()
        self.answered, self.want = 0, len(egresses) * size
        for egress in egresses:
            records = [Record("bench", 0, first + n, b"k", BODY, (), timestamp_ms=0,
                              fetched_ms=0, attempt=1) for n in range(size)]
            egress.tell_nowait(DeliverMany(records, epoch=1, reply_to=self))
        return self.done

    async def handle(self, message: object) -> None:
        records = getattr(message, "records", None)
        self.messages += 1  # outcome messages: a cursor's turns in the runtime
        self.answered += 1 if records is None else len(records)
        self.failed += type(message).__name__ == "Failed" or (
            records is not None and getattr(message, "failure", None) is not None)
        if self.answered >= self.want and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def fanout(port: int, subscriptions: int, size: int, bursts: int, limit: int,
                 transport: str) -> None:
    """`bursts` bursts of `size` records to each of `subscriptions` egress actors that
    share one origin (`limit` connections; 0: the default): CPU per delivery and the
    connections each burst opened. The first burst is cold (no connection yet)."""
    events: list[object] = []
    rows: list[object] = []
    system = ActorSystem(emit=events.append, delivered=rows.append)
    await system.start()
    origins = Origins(max_connections=limit) if limit else Origins()
    try:
        fan = Fan()
        await system.spawn(ChildSpec("fan", lambda: fan))
        egresses = []
        for n in range(subscriptions):
            settings = egress_settings(Consumer(
                id=f"s{n}", group=Group(id="bench"), broker="Kafka",
                topics=[TopicSpec(name="bench")],
                subscriptionMethod=msgspec.convert(
                    # no timeout under callgrind (50 x slower)
                    {"type": "http", "uri": f"http://127.0.0.1:{port}/hook",
                     "timeoutMs": 600_000, "connectTimeoutMs": 600_000},
                    SubscriptionMethod)))
            actor = EgressActor(f"egress-{n}", settings, Registry(),
                                origin=origins.get(settings.uri),
                                transport=transport)  # type: ignore[arg-type]
            actor.attempts = AttemptRing()
            egresses.append(await system.spawn(ChildSpec(f"egress-{n}",
                                                         lambda actor=actor: actor)))
        origin = origins.get(f"http://127.0.0.1:{port}/hook")
        print(f"  fan-out: {subscriptions} subscriptions x {size} records, origin limit "
              f"{origin.max_connections}", flush=True)
        for n in range(bursts):
            opened, fan.messages = origin.shelf.opened, 0
            started, cpu = time.perf_counter(), time.process_time()
            await fan.burst(egresses, size, n * size)  # type: ignore[arg-type]
            total = subscriptions * size
            print(f"  burst {n + 1} ({'cold' if n == 0 else 'warm'}): "
                  f"{(time.process_time() - cpu) / total * 1e6:6.1f} us CPU/delivery, "
                  f"{time.perf_counter() - started:.3f} s, "
                  f"{origin.shelf.opened - opened} connections opened, "
                  f"{fan.messages / subscriptions:.1f} outcome messages per subscription, "
                  f"{len(origin.shelf)} idle after ({load()})"
                  + (f", {fan.failed} failed" if fan.failed else ""), flush=True)
    finally:
        await system.stop(deadline_ms=10_000)


# -- the run --------------------------------------------------------------------------
async def timed(name: str, run: Any, count: int, timeout_s: float) -> float:
    started, cpu = time.perf_counter(), time.process_time()
    result = await asyncio.wait_for(run, timeout_s)
    cpu_us = (time.process_time() - cpu) / count * 1e6
    wall = time.perf_counter() - started
    extra = f", {result} failed" if result else ""
    print(f"  {name:<8} {count / wall:>9.0f} requests/s  {cpu_us:6.1f} us CPU/request "
          f"({load()}){extra}", flush=True)
    return cpu_us


async def main(args: argparse.Namespace) -> None:
    print(f"egress benchmark, {time.strftime('%Y-%m-%dT%H:%M:%S')}, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, uvloop; {args.pushes} requests of "
          f"{len(BODY)} B, window {args.window}, transport {args.transport}")
    results: dict[str, list[float]] = {"raw": [], "bare": [], "egress": []}
    with receiver() as port:
        if args.phases == "fanout":
            await fanout(port, args.subscriptions, args.burst, args.bursts,
                         args.origin_connections, args.transport)
            return
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}")
            for name, run in (("raw", raw(port, args.pushes, args.window)),
                              ("bare", bare(port, args.pushes, args.window)),
                              ("egress", egress(port, args.pushes, args.window,
                                                args.transport))):
                if name not in args.phases.split(","):
                    run.close()
                    continue
                with spy(args.py_spy if name == "egress" and round_ == 1 else ""):
                    results[name].append(await timed(name, run, args.pushes,
                                                     args.timeout_s))
    if not all(results.values()):
        return  # some phases left out: no comparison
    medians = {name: statistics.median(cpus) for name, cpus in results.items()}
    print(f"median CPU per request: raw {medians['raw']:.1f} us, bare aiohttp "
          f"{medians['bare']:.1f} us, egress {medians['egress']:.1f} us = "
          f"{medians['bare'] / medians['egress']:.2f} x cheaper than bare, "
          f"{medians['egress'] / medians['raw']:.1f} x raw ({load()})")


@contextlib.contextmanager
def spy(output: str) -> Iterator[None]:
    """py-spy (on PATH) sampling this process into `output` (collapsed stacks)."""
    if not output:
        yield
        return
    sampler = subprocess.Popen(["py-spy", "record", "-p", str(os.getpid()), "-r", "200",
                                "--format", "raw", "-o", output],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(30)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pushes", type=int, default=50_000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transport", choices=("lean", "aiohttp"), default="lean")
    parser.add_argument("--py-spy", default="", help="sample the first egress phase")
    parser.add_argument("--phases", default="raw,bare,egress",
                        help="which phases run (callgrind: egress alone); `fanout` alone: "
                             "bursts to many egress actors of one origin")
    parser.add_argument("--subscriptions", type=int, default=1000, help="fanout: egresses")
    parser.add_argument("--burst", type=int, default=10, help="fanout: records each")
    parser.add_argument("--bursts", type=int, default=3, help="fanout: the first is cold")
    parser.add_argument("--origin-connections", type=int, default=0,
                        help="fanout: the origin's limit (0: the default)")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    uvloop.run(main(parse_args(sys.argv[1:])))
