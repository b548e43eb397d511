"""The shape issue 32 (item 13) asks of the code, kept: the instance member's class in at
most 300 lines, no class of actors/delivery over 400, and `Any` written fewer than 40
times outside the report (imports counted), no task created outside the kernel. Read from
the source, not from a run."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def classes(folder: str) -> dict[str, int]:
    """`path:Class` -> its lines, for every class under `folder`."""
    sizes: dict[str, int] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                name = f"{path.relative_to(ROOT)}:{node.name}"
                sizes[name] = node.end_lineno - node.lineno + 1
    return sizes


def test_the_instance_member_and_every_delivery_class_stay_small() -> None:
    sizes = classes("actors/delivery")
    member = sizes["actors/delivery/path/member/actor.py:InstanceMemberActor"]
    assert member <= 300, f"InstanceMemberActor has {member} lines"
    large = {name: lines for name, lines in sizes.items() if lines > 400}
    assert not large, f"classes over 400 lines: {large}"


def test_any_is_written_fewer_than_40_times_outside_the_report() -> None:
    written = 0
    for folder in ("actors", "runtime"):
        for path in (ROOT / folder).rglob("*.py"):
            if "report" not in path.relative_to(ROOT).parts[:2]:
                written += len(re.findall(r"\bAny\b", path.read_text()))
    assert written < 40, f"Any written {written} times"


def test_no_task_is_created_outside_the_kernel() -> None:
    """Every task of actors/ and runtime/ is an actor's or one it owns (`spawn`,
    `OwnedTasks`): made in runtime/kernel only, so none runs without an owner that ends
    it (issue 32, item 13: the journal's standalone loop was the last one)."""
    found = []
    for folder in ("actors", "runtime"):
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if relative.parts[:2] == ("runtime", "kernel"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\b(create_task|ensure_future)\(", line):
                    found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, found
