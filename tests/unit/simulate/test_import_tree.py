"""The simulator's modules import each other as a tree: counting the imports made only for type hints, no
module of txnsim/simulate/ reaches itself again (the actors see the cluster model through roles.py)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "txnsim" / "simulate"


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("txnsim.simulate"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("txnsim.simulate"))
    return names


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_of_the_simulator_imports_itself_through_others() -> None:
    modules = {module_of(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}
    # a package's __init__ re-exporting its modules is not a cycle of theirs
    graph = {name: {m for m in deps if not name.startswith(m + ".")} for name, deps in graph.items()}
    cycles = []

    def visit(name: str, path: list[str], done: set[str]) -> None:
        if name in path:
            cycles.append(" -> ".join([*path[path.index(name):], name]))
            return
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, [*path, name], done)
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [], done)
    assert not cycles, "imports in a circle:\n" + "\n".join(cycles[:10])
