"""Summarise py-spy collapsed stacks (`py-spy record --format raw`, or bench/delivery.py
--py-spy FILE): where the samples of the process went.

    .venv/bin/python bench/profile_summary.py FILE [--top 25]

Prints the share of samples per thread, the functions with the most samples at the top
of the stack (self time), and the inclusive share of a few groups of our own and library
code (a frame anywhere in the stack counts the sample once per group).
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
    "group consumer": "actors/shared/group_consumer.py",
}
LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")


def frames(stack: str) -> list[str]:
    return [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]


def summarise(path: Path, top: int) -> None:
    threads: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        if match is None:
            continue
        count, stack = int(match["count"]), frames(match["stack"])
        total += count
        threads[stack[0]] += count
        leaves[stack[-1]] += count
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
        print(f"  {100 * count / total:5.1f}%  {name}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    summarise(args.file, args.top)


if __name__ == "__main__":
    main(sys.argv[1:])
