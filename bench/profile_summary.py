"""Summarise py-spy collapsed stacks (`py-spy record --format raw`, or bench/delivery.py
--py-spy FILE): where the samples of the process went.

    .venv/bin/python bench/profile_summary.py FILE [--top 25] [--thread MainThread]
        [--us PER_RECORD]

Prints the share of samples per thread, the functions with the most samples at the top
of the stack (self time), the inclusive share of a few groups of our own and library
code (a frame anywhere in the stack counts the sample once per group), and the functions
with the most samples anywhere in the stack (inclusive), and the parts of a delivery
(`PARTS`: each sample counted once, in the first part that matches). `--thread` keeps the samples of
the threads whose name contains it (py-spy names them `thread (id): name`); `--us` also
shows each share as microseconds of that CPU per record (issue 37: where they go).
Two leaves are system work, not Python: `_Connection.request` is the request's socket
write (the system call) and `Runner.run` the event loop's own C code (epoll, reads).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

GROUPS = {
    "aiohttp client": "aiohttp/",
    "aiokafka": "aiokafka/",
    "journal": "runtime/host/journal.py",
    "metrics": "runtime/host/metrics.py",
    "actor kernel": "runtime/kernel/actor.py",
    "partition actor": "actors/delivery/path/partition.py",
    "book + lanes + tracker": "actors/delivery/path/book.py|actors/delivery/path/lanes.py|"
                              "actors/shared/offsets.py",
    "outlet + egress": "actors/delivery/egress/outlet.py|actors/delivery/egress/http.py",
    "push + origin": "actors/delivery/egress/push.py|actors/delivery/egress/origin.py",
    "lean transport": "actors/delivery/egress/transport.py",
    "group consumer": "actors/shared/group_consumer.py",
}
LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
# Where a delivery's time goes (issue 37), each sample in the first part that matches
# (`--parts`): `leaf` tests the innermost frame, `any` any frame, `near` the last three.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("socket write (the request's system call)", "leaf", r"^_Connection\.request "),
    ("event loop C code (epoll, socket reads)", "leaf", r"^Runner\.run "),
    ("Kafka fetch (aiokafka, records_of)", "any", r"aiokafka/|records_of"),
    ("journal (emit, ranges, the writer hand-off)", "near",
     r"runtime/host/journal\.py|concurrent/futures"),
    ("attempts ring (the attempts API)", "any", r"egress/attempts\.py|_remember "),
    ("answer: parse, origin, metrics, journal event, outcome", "any",
     r"^_Connection\.data_received "),
    ("request: push, origin, headers, encode, start", "any", r"^EgressActor\.handle "),
    ("cursor: partition actor, book, lanes, tracker", "any", r"^PartitionActor\."),
    ("instance member: fan-out hand-off, commits", "any", r"InstanceMemberActor|/member/"),
    ("actor kernel: mailboxes, the actor loop", "any", r"runtime/kernel/"),
)


def part_of(stack: list[str]) -> str:
    for name, where, pattern in PARTS:
        frames_ = {"leaf": stack[-1:], "near": stack[-3:], "any": stack}[where]
        if any(re.search(pattern, frame) for frame in frames_):
            return name
    return "other"


def frames(stack: str) -> list[str]:
    return [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]


def summarise(path: Path, top: int, thread: str = "", us: float = 0.0) -> None:
    threads: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        if match is None:
            continue
        count, stack = int(match["count"]), frames(match["stack"])
        if thread and not (stack[0].startswith("thread") and thread in stack[0]):
            continue
        total += count
        threads[stack[0]] += count
        leaves[stack[-1]] += count
        inclusive.update(dict.fromkeys(set(stack), count))
        parts[part_of(stack)] += count
        joined = ";".join(stack)
        for name, pattern in GROUPS.items():
            if re.search(pattern, joined):
                groups[name] += count
    if not total:
        sys.exit(f"{path}: no samples")
    print(f"{total} samples")
    print("\nby thread:")
    for name, count in threads.most_common(8):
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("\ninclusive, by group:")
    for name, count in groups.most_common():
        print(f"  {100 * count / total:5.1f}%  {name}")
    print(f"\nself, top {top}:")
    for name, count in leaves.most_common(top):
        print(f"  {share(count, total, us)}  {name}")
    print("\nparts of a delivery (each sample once):")
    for name, count in parts.most_common():
        print(f"  {share(count, total, us)}  {name}")
    print(f"\ninclusive, top {top}:")
    for name, count in inclusive.most_common(top):
        print(f"  {share(count, total, us)}  {name}")


def share(count: int, total: int, us: float) -> str:
    part = count / total
    return f"{100 * part:5.1f}%" + (f" {part * us:5.1f} us" if us else "")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--thread", default="", help="only threads whose name has this")
    parser.add_argument("--us", type=float, default=0.0,
                        help="CPU us per record: shares shown as us too")
    args = parser.parse_args(argv)
    summarise(args.file, args.top, args.thread, args.us)


if __name__ == "__main__":
    main(sys.argv[1:])
