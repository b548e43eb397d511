"""The package layout shows the design (issue 23): no import circle anywhere in `actors/`
or `runtime/`, counting imports inside functions and under `TYPE_CHECKING`, and the
layers of the delivery package import only downwards."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "runtime")
# who may import whom inside actors/delivery: a sub-package imports only those listed
DELIVERY_LAYERS = {
    "document": set(),
    "egress": {"document"},
    "path": {"document", "egress"},
    "cluster": {"document", "control"},
    "control": {"document", "egress", "path", "cluster"},
    "api": {"document", "path", "control"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """Every project module `path` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found.update(n for n in names if n in known)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, known) - {name} for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue  # a package re-exports its own modules; they need not import it
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_no_import_circle_in_actors_or_runtime() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_sees_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_runtime_never_imports_actors() -> None:
    edges = graph()
    wrong = sorted(f"{m} -> {t}" for m, ts in edges.items() if m.startswith("runtime")
                   for t in ts if t.startswith("actors"))
    assert wrong == []


def test_delivery_sub_packages_import_only_downwards() -> None:
    wrong: list[str] = []
    for module, targets in graph().items():
        layer = _delivery_layer(module)
        if layer is None:
            continue
        for target in targets:
            other = _delivery_layer(target)
            if other is not None and other != layer and other not in DELIVERY_LAYERS[layer]:
                wrong.append(f"{module} -> {target}")
    assert sorted(wrong) == []


def _delivery_layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["actors", "delivery"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in DELIVERY_LAYERS else None


def test_the_data_path_never_imports_the_wire_document() -> None:
    """Actors take settings made at the edge (document/settings.py), never the `Consumer`
    (issue 23, item 5)."""
    wire = "actors.delivery.document.subscription"
    wrong = sorted(f"{m} -> {t}" for m, ts in graph().items()
                   if m.startswith("actors.delivery.path.") for t in ts
                   if t == wire or t.startswith(wire + "."))
    assert wrong == []


def test_only_the_kernel_creates_tasks_in_the_domain() -> None:
    # every task has an owner that awaits it: domain code runs its work through an
    # actor's `spawn` (or a kernel `OwnedTasks`), never a bare `create_task`
    starters = {"create_task", "ensure_future"}
    found = [f"{path.relative_to(ROOT)}:{node.lineno}"
             for path in (ROOT / "actors").rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr in starters]
    assert found == []
