"""No import circles between flatshare's packages: a new one fails here.

The graph is read from the source with `ast` (nothing is imported): every `import` and `from ... import`
of a flatshare module counts, also those inside functions and under `TYPE_CHECKING`, since a circle
there still means two packages that cannot be read one without the other. A node is a subpackage
(`flatshare.sim`) or a top-level module (`flatshare.errors`). A `__main__` module is left out: it is an
entry point (`python -m flatshare.gateway` runs the gateway's commands of `flatshare.cli`), which nothing
imports. Run this file as a script to print the circles (packages, and modules with `--modules`).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "flatshare"

# Package circles left for another part of issue 36 to remove, each the set of packages in one circle
# (none: the run files' package broke sim <-> replay, gateway <-> replay and colocation <-> listen).
ALLOWED: set[frozenset[str]] = set()
# Module circles inside one package. The co-location experiment's plan, its real-server runs and their
# server commands import each other (lazily); the main path's rework (issue 36, not this round) owns them.
ALLOWED_MODULES: set[frozenset[str]] = {
    frozenset(
        {"flatshare.colocation.experiment", "flatshare.colocation.real", "flatshare.colocation.servers"}
    ),
}


def module_names(src: Path = SRC) -> dict[str, Path]:
    """Dotted name -> file, for every module under `src/flatshare` (a package is its `__init__`)."""
    names = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        if path.name == "__main__.py":
            continue
        parts = path.relative_to(src).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(path: Path, modules: Iterable[str]) -> Iterator[str]:
    """The flatshare modules `path` imports (`from a import b` is `a.b` when that is a module)."""
    known = set(modules)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                for a in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                yield name


def module_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = module_names(src)
    return {name: set(imported(path, modules)) - {name} for name, path in modules.items()}


def package_of(module: str) -> str:
    """`flatshare.sim.engine` -> `flatshare.sim`; a top-level module is its own node."""
    return ".".join(module.split(".")[:2])


def package_graph(src: Path = SRC) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph(src).items():
        if module == ROOT:
            continue
        node = package_of(module)
        graph.setdefault(node, set()).update(package_of(t) for t in targets if t != ROOT)
    return {node: targets - {node} for node, targets in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return sorted(found, key=sorted)


def edges_within(graph: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    return [f"{a} -> {b}" for a in sorted(component) for b in sorted(graph[a] & component)]


def test_circles_finds_a_cycle_and_ignores_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    package = tmp_path / ROOT
    for name in ("one", "two"):
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "one" / "a.py").write_text("from flatshare.two import b\n")
    (package / "two" / "b.py").write_text("def f():\n    from flatshare.one.a import x\n")
    assert circles(package_graph(tmp_path)) == [frozenset({"flatshare.one", "flatshare.two"})]


def test_no_new_package_circles() -> None:
    graph = package_graph()
    new = [c for c in circles(graph) if c not in ALLOWED]
    assert not new, "import circles between packages:\n" + "\n".join(
        ", ".join(edges_within(graph, c)) for c in new
    )


def test_no_new_module_circles() -> None:
    graph = module_graph()
    new = [c for c in circles(graph) if c not in ALLOWED_MODULES]
    assert not new, "import circles between modules:\n" + "\n".join(
        ", ".join(edges_within(graph, c)) for c in new
    )


def test_run_files_import_nothing_else_of_flatshare() -> None:
    """Every package may read and write run files, so `flatshare.runfiles` imports none of them."""
    graph = package_graph()
    leaves = {"flatshare.errors", "flatshare.jsonin", "flatshare.safeout"}
    assert graph["flatshare.runfiles"] <= leaves
    assert all(graph[leaf] <= {"flatshare.errors"} for leaf in leaves)


def test_allowed_circles_still_exist() -> None:
    """An allowlisted circle that is gone should leave the list, so it cannot come back unnoticed."""
    assert set(circles(package_graph())) >= ALLOWED
    assert set(circles(module_graph())) >= ALLOWED_MODULES


if __name__ == "__main__":
    graph = module_graph() if "--modules" in sys.argv else package_graph()
    for component in circles(graph):
        print(f"{len(component)}: " + ", ".join(sorted(component)))
        for edge in edges_within(graph, component):
            print(f"    {edge}")
