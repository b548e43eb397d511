"""What a cursor's burst costs the partition actor and the kernel (issue 37), without Kafka,
HTTP or the instance member: instructions or CPU per burst, deterministic enough for
callgrind.

    .venv/bin/python bench/cursor_burst.py [--cursors 1000] [--records 3] [--rounds 5]
        [--window 20] [--callgrind]

`--cursors` `PartitionActor`s (each its own subscription, `concurrencyFactor` `--window`,
ordering none, a commit period no run reaches: no tick rings, whatever the slowdown)
under one `ActorSystem` on uvloop, as at fan-out. A round tells each a `Batch` of
`--records` new records; a stand-in egress (an actor) answers each `DeliverMany` at once
with its `BatchOutcome`, as the HTTP egress gathers a burst's answers, and a stand-in
member (an actor) takes the commits; the round ends when every cursor committed past its
records. One round first (the pins of positions never committed), then the collector
set as a runtime sets it (what exists frozen, young collections every 20,000 objects),
then `--rounds` timed.

Instructions (callgrind, independent of the machine's load): run under
`valgrind --tool=callgrind --instr-atstart=no --dump-instr=no` with `--callgrind`: the
timed rounds alone are collected (`callgrind_control` toggles them) and dumped as
`<out>.1`; its `summary` divided by cursors x rounds is the instructions per burst.
Compare trees with `PYTHONPATH=<tree>`. Issue 37, 2026-11-28: `--cursors 1000 --records 3`
(fan-out: 1,000 subscribers, a few records each) and `--cursors 4 --records 100
--rounds 100 --window 100` (one subscription of four partitions).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import time

import uvloop

from actors.delivery.document.settings import cursor_settings
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.path.partition import PartitionActor, PartitionPeers
from actors.shared.messages import (
    Assigned,
    Batch,
    BatchOutcome,
    CommitRequest,
    Deliver,
    Delivered,
    DeliverMany,
    Record,
)
from runtime.host.app import GC_YOUNG_THRESHOLD
from runtime.host.metrics import Registry
from runtime.kernel.actor import Actor
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor
from runtime.kernel.system import ActorSystem


class Egress(Actor):
    """Answers every push at once: a burst's records in one outcome."""

    mailbox_capacity = 1_000_000

    async def handle(self, message: object) -> None:
        if isinstance(message, DeliverMany):
            message.reply_to.tell_system(BatchOutcome(message.records, message.epoch, None))
        elif isinstance(message, Deliver):
            message.reply_to.tell_system(Delivered(message.record, message.epoch, 200, 1.0))


class Member(Actor):
    """Takes the commits; `done` resolves once `want` cursors committed `target`."""

    mailbox_capacity = 1_000_000

    def __init__(self) -> None:
        super().__init__("member")
        self.done: asyncio.Future[None] | None = None
        self.want = self.committed = self.target = 0

    async def handle(self, message: object) -> None:
        if isinstance(message, CommitRequest) and message.offset == self.target:
            self.committed += 1
            if self.committed >= self.want and self.done is not None \
                    and not self.done.done():
                self.done.set_result(None)


def callgrind(*command: str) -> None:
    subprocess.run(["callgrind_control", *command, str(os.getpid())],
                   stdout=subprocess.DEVNULL, check=False)


async def main(args: argparse.Namespace) -> None:
    system = ActorSystem(emit=lambda event: None, delivered=lambda row: None)
    await system.start()
    member = Member()
    await system.spawn(ChildSpec("member", lambda: member))
    tree = Supervisor("tree", children=[ChildSpec("egress", lambda: Egress("egress"))])
    await system.spawn(ChildSpec("tree", lambda: tree))
    peers = PartitionPeers(ChildRef(system.root, "member"), ChildRef(tree, "egress"), None)
    metrics, cursors = Registry(), []
    for n in range(args.cursors):
        consumer = decode_consumer({
            "id": f"s{n}", "group": {"id": f"g{n}", "name": "g"}, "broker": "Kafka",
            "topics": [{"name": "t", "config": {"autoCommitPeriodMs": 3_600_000,
                                                "concurrencyFactor": args.window}}],
            "subscriptionMethod": {"type": "http", "uri": "http://127.0.0.1:9/hook"}})
        cursor = PartitionActor(f"t-0-{n}", cursor_settings(consumer, "t"), "t", 0, 1, peers,
                                metrics)
        await system.spawn(ChildSpec(f"cursor-{n}", lambda cursor=cursor: cursor))
        await cursor.tell(Assigned(0, 1))
        cursors.append(cursor)
    offset = 0

    async def round_() -> None:
        nonlocal offset
        member.done = asyncio.get_running_loop().create_future()
        member.want, member.committed, member.target = len(cursors), 0, offset + args.records
        now = int(time.monotonic() * 1000)
        for cursor in cursors:
            cursor.tell_nowait(Batch([Record("t", 0, offset + k, None, b"v" * 100, (), 0, now)
                                      for k in range(args.records)], offset + args.records))
        offset += args.records
        await member.done

    await round_()  # the pins: positions never committed before
    gc.collect()  # the collector as a runtime sets it after start (runtime/host/app.py)
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    if args.callgrind:
        callgrind("-z")
        callgrind("-i", "on")
    cpu = time.process_time()
    for _ in range(args.rounds):
        await round_()
    took = time.process_time() - cpu
    if args.callgrind:
        callgrind("-d", "bursts")
        callgrind("-i", "off")
    bursts = args.cursors * args.rounds
    print(f"{args.cursors} cursors x {args.records} records x {args.rounds} rounds: "
          f"{took / bursts * 1e6:.1f} us CPU per burst, "
          f"{took / (bursts * args.records) * 1e6:.2f} per record", flush=True)
    await system.stop(deadline_ms=5000)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cursors", type=int, default=1000)
    parser.add_argument("--records", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--callgrind", action="store_true",
                        help="collect the timed rounds alone (run under callgrind)")
    uvloop.run(main(parser.parse_args()))
