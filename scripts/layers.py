"""The house's floors: which s3kv module may import which, and a check that none goes up.

    python scripts/layers.py            # imports between floors, then any circle or upward import
    python scripts/layers.py --modules  # every module with its floor and what it imports

Read from the source (``ast``; nothing is imported or run). An import under
``if TYPE_CHECKING:`` is a type's name, not a dependency, and is left out. Exits 1 when a
module imports a higher floor or modules import each other in a circle
(tests/unit/test_layers.py runs this check). docs/architecture.md shows the floors.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "s3kv"

# Lowest first. A module belongs to the first floor whose prefix it starts with; a module
# may import its own floor and the floors below. ``s3kv`` itself (the package's module)
# holds the version and names the public classes lazily (PEP 562): loading it loads only
# the exception tree, so it stands with the foundations.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", (
        "s3kv", "s3kv.errors", "s3kv.settings", "s3kv.integrity", "s3kv.progress", "s3kv.report",
        "s3kv.retry", "s3kv.tenant_keys", "s3kv.units",
    )),
    ("keys and namespaces", ("s3kv.naming",)),
    ("stores", ("s3kv.stores",)),
    ("listings and transfers", ("s3kv.transfers",)),
    ("operations on a location, the tier's data path", ("s3kv.ops", "s3kv.worker")),
    ("front ends", ("s3kv.cli", "s3kv.vllm")),
]

# Imports that would close a circle, each allowed for the reason given.
ALLOWED = {
    ("s3kv.vllm._version", "s3kv.vllm"): "reads the package's UNSUPPORTED_VLLM (public, set "
    "by the package before it loads the tier) when a tier starts, inside the function",
}


def floor_of(module: str) -> int:
    for n, (_, prefixes) in enumerate(FLOORS):
        if module in prefixes:
            return n
    for n, (_, prefixes) in enumerate(FLOORS):
        if any(module.startswith((p + ".", p + "_")) for p in prefixes if p != "s3kv"):
            return n
    raise SystemExit(f"{module}: on no floor; add it to FLOORS in {__file__}")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The s3kv modules ``name`` imports when it runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_only(node):
            for child in getattr(node, "orelse", []):
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    """What each module imports, less the :data:`ALLOWED` imports."""
    known = modules()
    return {
        name: {dep for dep in imports(name, path, known) if (name, dep) not in ALLOWED}
        for name, path in known.items()
    }


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, bs in edges.items() for b in bs if floor_of(b) > floor_of(a))


def main(argv: list[str]) -> int:
    edges = graph()
    if "--modules" in argv:
        for name in sorted(edges, key=lambda m: (floor_of(m), m)):
            deps = ", ".join(sorted(d.removeprefix("s3kv.") for d in edges[name])) or "-"
            print(f"{floor_of(name)} {name.removeprefix('s3kv.') or 's3kv'}: {deps}")
        return 0
    between: dict[tuple[int, int], int] = defaultdict(int)
    lines: dict[int, int] = defaultdict(int)
    for name, deps in edges.items():
        lines[floor_of(name)] += len(modules()[name].read_text().splitlines())
        for dep in deps:
            between[(floor_of(name), floor_of(dep))] += 1
    for n, (label, _) in enumerate(FLOORS):
        below = ", ".join(f"{FLOORS[b][0]} ({between[(n, b)]})"
                          for b in range(n) if between[(n, b)]) or "nothing"
        print(f"{n} {label} ({lines[n]} lines): imports {below}")
    bad = 0
    for group in circles(edges):
        print("circle: " + " -> ".join(group))
        bad += 1
    for a, b in upward(edges):
        print(f"upward: {a} (floor {floor_of(a)}) imports {b} (floor {floor_of(b)})")
        bad += 1
    print("no circle, no upward import" if not bad else f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
