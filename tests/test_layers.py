"""The import graph of repro/ has no circle, counting the imports written inside functions.

``lint-imports`` (pyproject.toml) checks the layer order of ARCHITECTURE.md; this test checks what a layers
contract allows within a layer: no module reaches itself again through imports, at module level or inside a
function (a function-level import only hides a circle from the import machinery until the function runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, from every import statement in the file (inside
    functions, classes and conditionals too). ``from a import b`` names the module ``a.b`` when there is one,
    else ``a``; importing ``a.b`` is an edge to ``a.b`` only (its packages' ``__init__`` files are not edges)."""
    root = package.parent
    files = {module_name(path, root): path for path in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base)
        graph[name] = {edge for edge in edges if edge in files and edge != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as [a, b, ..., a], or None (depth-first search, modules in name order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = 1, path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node], _ = 2, path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_repro_imports_have_no_cycle():
    graph = import_graph(ROOT / "repro")
    assert len(graph) > 100 and "repro.run.runner" in graph["repro.cli.run"]  # function-level: run_app's import
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_a_planted_cycle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "planted"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "runner.py").write_text("from .sub import check\n\n\ndef run():\n    return check.ok()\n")
    (package / "sub" / "check.py").write_text("def ok():\n    from ..runner import run\n\n    return run\n")
    (package / "free.py").write_text("import planted.sub.check\n")
    graph = import_graph(package)
    assert graph["planted.free"] == {"planted.sub.check"}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and sorted(cycle[1:]) == ["planted.runner", "planted.sub.check"]
    del graph["planted.sub.check"]  # the function-level import was the edge that closed it
    assert find_cycle(graph) is None


def test_a_graph_without_a_cycle_has_none():
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
