"""The journal's event types are one list: every listed type is emitted somewhere, and the
docs/report.md documents exactly that list."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from runtime.host.journal import EVENT_TYPES, LEGACY_EVENT_TYPES

ROOT = Path(__file__).resolve().parents[2]


def _call_arguments(path: Path) -> set[str]:
    """String constants passed to calls (`Event(type="x")`, `self._journal("x", ...)`):
    the `EventType` definition itself is a subscript, not a call, so it does not count."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            found |= {n.value for n in ast.walk(arg)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return found


def _emitted() -> set[str]:
    sources = [p for d in ("runtime", "actors") for p in (ROOT / d).rglob("*.py")
               if "report" not in p.parts]  # the report reads events, it emits none
    found: set[str] = set()
    for path in sources:
        found |= _call_arguments(path)
    return found


def test_every_event_type_is_emitted_by_some_actor_or_the_journal() -> None:
    emitted = _emitted()
    never = [t for t in EVENT_TYPES if t not in emitted and t not in LEGACY_EVENT_TYPES]
    assert never == [], f"listed in EventType but never emitted: {never}"


def test_legacy_event_types_are_no_longer_emitted() -> None:
    """`sent` is read in older journals only (issue 35)."""
    assert [t for t in LEGACY_EVENT_TYPES if t in _emitted()] == []


def test_the_report_page_documents_exactly_the_event_types() -> None:
    readme = (ROOT / "docs" / "report.md").read_text()
    table = readme.split("| type | emitted by | when |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"`([a-z_]+)`", "\n".join(
        line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|"))))
    assert documented == set(EVENT_TYPES)
