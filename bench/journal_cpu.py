"""The journal's own CPU per delivery (issue 35): this tree, and another to compare.

    .venv/bin/python bench/journal_cpu.py [--cursors 4000] [--records 25]
        [--commit-every 11] [--flush-every 2000] [--rounds 5] [--compare DIR]

What a delivery costs the journal, without the broker, HTTP and the rest of the runtime
around it: for `--records` records of each of `--cursors` cursors (subscription x
partition; 4,000 is 1,000 subscriptions of a 4-partition topic), answers interleaved
across the cursors as at fan-out, the egress's journal calls of a successful first
attempt exactly as its outlet makes them (`_journal_sent` where the tree has it, then
`_journal_outcome`; into the journal's ledger where the tree has one; where the ledger
is flat, 2026-11-28, the HTTP egress's inline hand-over, `EgressActor._delivered`,
expression for expression, or with `--via-outcome` `_journal_outcome`), a `committed`
event per cursor every `--commit-every` deliveries (as the instance member journals its
commit rounds; bench/journal_bytes.py's run says how often; a tree with commit rounds as
one event, issue 35, gets one event per step holding every cursor's commit) and a flush
every `--flush-every` deliveries (the flusher's 200 ms tick),
through the actors' emit sink in a runtime (`Runtime._emit`) to a real `Journal` writing
to a temporary directory, then its `stop()`. Process
CPU of that (`time.process_time`: every thread, the writer's too), records and commit
events made beforehand. Each round is a child process per tree, the trees taking turns;
the medians over the rounds, the minimum and the ratio per round are printed, with the
load average. The journal's work is the pass minus the same loop over the same work
without the journal's calls (timed in the same child; until 2026-11-28 the pass was
taken whole, charging the loop's own cost to the journal, and callgrind's baseline
skipped the loop). Where the outlet reads the wall clock once for the endpoint's health,
the journal and the attempts ring, the baseline reads it too (since 2026-11-28): the
health needs that read without the journal, and trees before kept it apart (their
journal calls read the clock themselves, charged to the journal as before).

`--instructions` counts instructions instead (valgrind's callgrind, each tree's child
with and without the journal's work; independent of the machine's load): use a smaller
pass there, e.g. `--cursors 400 --records 25 --instructions`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


async def one_pass(args: argparse.Namespace, workdir: Path) -> float:
    """CPU seconds of the journal's work for every delivery of one pass."""
    from actors.delivery.egress.outlet import Answer, OutletActor
    from actors.shared.messages import Record
    from runtime.host import journal as journal_module
    from runtime.host.app import Runtime
    from runtime.host.config import parse_config
    from runtime.host.journal import Event, Journal
    from runtime.host.metrics import Registry
    from runtime.kernel.actor import ActorContext
    from runtime.kernel.clock import RealClock

    class Instant(OutletActor):
        async def push(self, record: Record) -> Answer:
            return Answer(200)

    clock = RealClock()
    journal = Journal(workdir / f"j-{time.monotonic_ns()}", clock=clock)
    await journal.open()
    # the actors' emit sink in a runtime: Runtime._emit (the journal, then listeners)
    runtime = Runtime(parse_config({"brokers": [{"name": "Kafka",
                                                 "bootstrap_servers": "127.0.0.1:9"}]}),
                      clock=clock)
    runtime.journal = journal
    subs = args.cursors // args.partitions
    outlets = [Instant(f"egress-{n}", f"s{n}_g-s{n}", "http://127.0.0.1:8080/hook", 20,
                       Registry()) for n in range(subs)]
    # since issue 35 the egress hands plain deliveries to the journal's ledger
    # (its `extend` since the ledger is flat, as in Runtime)
    flat = getattr(journal_module, "ROW_WIDTH", None) is not None
    ledger: dict[str, Any] = {
        "delivered": journal.ledger.extend if flat else journal.ledger.append} \
        if hasattr(journal, "ledger") else {}
    for outlet in outlets:
        outlet.context = ActorContext(path=f"/{outlet.name}", clock=clock, emit=runtime._emit,
                                      **ledger)
    # since issue 35 the instance member journals a commit round as one event
    rounds = getattr(journal_module, "commit_round", None)
    now = clock.monotonic_ms()
    work: list[Any] = []  # (outlet, record, commit after it) in the order answers come back
    for offset in range(args.records):
        commit = (offset + 1) % args.commit_every == 0 or offset + 1 == args.records
        positions = []
        for n, outlet in enumerate(outlets):
            for partition in range(args.partitions):
                record = Record("orders", partition, offset, None, b"x" * 100, (),
                                1_700_000_000_000 + offset, now)
                record.attempt = 1
                positions.append((f"s{n}_g-s{n}", "orders", partition, offset + 1))
                work.append((outlet, record, Event(
                    type="committed", ts_ms=clock.wall_ms(), subscription=f"s{n}_g-s{n}",
                    topic="orders", partition=partition, offset=offset + 1)
                    if commit and rounds is None else None))
        if commit and rounds is not None:  # every cursor's commit of this step: a round
            outlet, record, _ = work[-1]
            work[-1] = (outlet, record, rounds(clock.wall_ms(), positions))
    sent = getattr(OutletActor, "_journal_sent", None)  # trees before issue 35 have it
    # since issue 35 the outlet reads the wall clock once per answer (health, journal and
    # attempts ring share it) and hands it to `_journal_outcome`: read here the same. The
    # endpoint's health needs that read without the journal too (before, it read the
    # clock itself, apart from the journal's reads), so the baseline reads it as well
    # (since 2026-11-28; until then the journal was charged with it).
    shares_clock = "now_wall" in inspect.signature(OutletActor._journal_outcome).parameters
    # a flat ledger (2026-11-28): the HTTP egress's hand-over is inline, in
    # `EgressActor._delivered` (actors/delivery/egress/http.py, issue 37), no call:
    # timed here as that code makes it
    inline = getattr(journal_module, "ROW_WIDTH", None) is not None and not args.via_outcome
    emit = runtime._emit
    if args.runtime_gc:  # as the runtime sets it once started (runtime/host/app.py)
        gc.freeze()
        gc.set_threshold(20_000, *gc.get_threshold()[1:])
    wall = clock.wall_ms if shares_clock else None
    loop_s = 0.0 if args.no_loop_baseline else await loop_only(work, args, wall)
    if args.skip_journal:  # the loop alone (`--instructions` counts it apart)
        return await loop_only(work, args, wall)
    latency_ms = 1.234
    start = time.process_time()
    for done, (outlet, record, commit) in enumerate(work, 1):
        if sent is not None:
            sent(outlet, record)  # the egress's journal calls of one attempt, as it makes them
        if inline:  # EgressActor._delivered's hand-over, expression for expression
            now_wall = clock.wall_ms()
            outlet.context.delivered((
                outlet._subscription, record.topic, record.partition, record.offset,
                now_wall, latency_ms, record.timestamp_ms, record.fetched_ms, 200,
                outlet.endpoint))
        elif shares_clock:
            outlet._journal_outcome("delivered", record, 200, latency_ms, None,
                                    clock.wall_ms())
        else:
            outlet._journal_outcome("delivered", record, 200, latency_ms, None)
        if commit is not None:
            emit(commit)  # as the instance member journals its commit rounds
        if done % args.flush_every == 0:
            await journal.flush()
    await journal.stop()
    return time.process_time() - start - loop_s


async def loop_only(work: list[Any], args: argparse.Namespace,
                    wall: Callable[[], int] | None) -> float:
    """CPU seconds of the measuring loop itself, without the journal's calls (the
    baseline subtracted from the pass), with the outlet's wall-clock read where the
    outlet shares it with the endpoint's health (`wall`)."""
    start = time.process_time()
    for done, (_outlet, _record, commit) in enumerate(work, 1):
        if wall is not None:
            wall()
        if commit is not None:
            pass
        if done % args.flush_every == 0:
            await asyncio.sleep(0)
    return time.process_time() - start


async def child(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="journal-cpu-") as workdir:
        cpu = await one_pass(args, Path(workdir))
    deliveries = args.cursors // args.partitions * args.partitions * args.records
    return {"deliveries": deliveries,
            "journal_us_per_delivery": round(cpu / deliveries * 1e6, 3),
            "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One pass against the code of `tree`, in a child process."""
    done = subprocess.run(child_command(args), env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, check=False, cwd=tree)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def child_command(args: argparse.Namespace, *more: str) -> list[str]:
    return [sys.executable, str(HERE / "journal_cpu.py"), "--child",
            "--cursors", str(args.cursors), "--partitions", str(args.partitions),
            "--records", str(args.records), "--commit-every", str(args.commit_every),
            "--flush-every", str(args.flush_every),
            *(["--runtime-gc"] if args.runtime_gc else []),
            *(["--via-outcome"] if args.via_outcome else []), *more]


def instructions(tree: Path, args: argparse.Namespace, *more: str) -> int:
    """Instructions of one child pass of `tree` under callgrind (every thread)."""
    with tempfile.TemporaryDirectory(prefix="journal-cg-") as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out",
             *child_command(args, "--no-loop-baseline", *more)],
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True, text=True, check=False, cwd=tree)
        if done.returncode != 0:
            raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
        totals = [line for line in Path(out, "cg.out").read_text().splitlines()
                  if line.startswith(("summary:", "totals:"))]
        return int(totals[-1].split()[1])


def count_instructions(trees: list[Path], args: argparse.Namespace) -> None:
    """Per tree: instructions per delivery of the pass minus those of the same loop
    without the journal's work (`--skip-journal`); the load does not change them."""
    deliveries = args.cursors // args.partitions * args.partitions * args.records
    per: dict[Path, float] = {}
    for tree in trees:
        whole, base = instructions(tree, args), instructions(tree, args, "--skip-journal")
        per[tree] = (whole - base) / deliveries
        print(json.dumps({"tree": str(tree), "instructions": whole, "baseline": base,
                          "journal_instructions_per_delivery": round(per[tree])}), flush=True)
    if len(trees) == 2:
        print(f"journal instructions per delivery, this tree / the other: "
              f"{per[trees[0]] / per[trees[1]]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cursors", type=int, default=4000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=25)
    parser.add_argument("--commit-every", type=int, default=11)
    parser.add_argument("--flush-every", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--runtime-gc", action="store_true",
                        help="the runtime's garbage collector settings (gc.freeze() after "
                             "start-up, young collections every 20,000 allocations)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under valgrind instead of timing")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-journal", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-loop-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--via-outcome", action="store_true",
                        help="hand deliveries over through OutletActor._journal_outcome (a "
                             "handler's or a batch's path) even where the HTTP egress's "
                             "hand-over is inline")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    trees = [HERE.parent, *([args.compare.resolve()] if args.compare else [])]
    if args.instructions:
        count_instructions(trees, args)
        return
    rounds: dict[Path, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for n in range(args.rounds):  # the trees take turns: the load moves, both see it
        for tree in trees:
            result = run_tree(tree, args)
            rounds[tree].append(result)
            print(f"round {n + 1} {tree}: {json.dumps(result)}", flush=True)
    medians = {tree: statistics.median(r["journal_us_per_delivery"] for r in results)
               for tree, results in rounds.items()}
    for tree, results in rounds.items():
        print(json.dumps({"tree": str(tree), "journal_us_per_delivery_median": medians[tree],
                          "min": min(r["journal_us_per_delivery"] for r in results)}))
    if len(trees) == 2:
        mine, other = (rounds[tree] for tree in trees)
        ratios = sorted(round(a["journal_us_per_delivery"] / b["journal_us_per_delivery"], 2)
                        for a, b in zip(mine, other, strict=True))
        print(f"journal CPU per delivery, this tree / the other: "
              f"{medians[trees[0]] / medians[trees[1]]:.2f} (medians); per round {ratios}")
    print(f"load average now: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
