"""The package's shape, read from its source (issue 26): no import circle between its modules, counting the
imports inside functions (an `if TYPE_CHECKING:` block aside: it never runs), none between its rooms (a top-level
module or folder: state.py, clauses/, cluster/, probes/, report/, ...; issue 40), and no function over 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_gpuaccept

PACKAGE = Path(pytest_gpuaccept.__file__).parent
NAME = PACKAGE.name
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name, not `.__init__`)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import of a module wherever it stands (top, function, class, try), but not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif _type_checking(node):
            assert isinstance(node, ast.If)
            stack += node.orelse
        else:
            stack += ast.iter_child_nodes(node)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The package's modules an import statement loads by name (`from . import x` loads the submodule x)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    if not source.startswith(NAME):
        return set()
    found = set()
    for alias in node.names:
        child = f"{source}.{alias.name}"
        found.add(child if child in modules else source)
    return {m for m in found if m in modules}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(tree):
            edges |= _targets(module, is_package, node, modules)
        graph[module] = edges - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def _path_within(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """One circle through the group's first module, as `a -> b -> a`, for the message."""
    members = set(group)
    start = group[0]
    trail = [start]
    seen = {start}
    while True:
        here = trail[-1]
        following = sorted(graph[here] & members)
        if start in following and len(trail) > 1:
            return [*trail, start]
        step = next((m for m in following if m not in seen), None)
        if step is None:
            return [*trail, "..."]
        trail.append(step)
        seen.add(step)


def test_the_graph_is_read_right() -> None:
    """The walk sees imports inside functions and skips TYPE_CHECKING blocks (else this test proves nothing)."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n"
                     "def f():\n    from .b import y\n    from . import c\n")
    modules = {f"{NAME}.{m}": Path(m) for m in ("a", "b", "c", "here")}
    targets: set[str] = set()
    for node in _imports(tree):
        targets |= _targets(f"{NAME}.here", False, node, modules)
    assert targets == {f"{NAME}.b", f"{NAME}.c"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    assert len(graph) > 50 and f"{NAME}.cluster.run" in graph[f"{NAME}.clauses.cluster"]


def test_no_import_circle() -> None:
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles (imports inside functions counted): " + "; ".join(
        " -> ".join(_path_within(graph, group)) + f" (modules: {', '.join(group)})" for group in found)


ROOMS = ("state", "clauses", "cluster", "probes", "report")  # the rooms issue 40 names: none in a circle


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between rooms: a module counts as its top-level module or folder (`clauses.cluster` as
    `clauses`); imports inside one room are not arrows."""
    def room(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    for targets in list(rooms.values()):
        for target in targets:
            rooms.setdefault(target, set())
    return rooms


def test_no_import_circle_between_rooms() -> None:
    """state.py knows no clause and no engine, cluster/ no clause: the clauses stand above the engines, the engines
    above the session's state; a circle there made every room load every other."""
    assert room_graph({f"{NAME}.a.x": {f"{NAME}.b"}, f"{NAME}.b": {f"{NAME}.a.y"}}) == {"a": {"b"}, "b": {"a"}}
    graph = room_graph(import_graph())
    found = [group for group in circles(graph) if set(group) & set(ROOMS)]
    assert not found, "import circles between rooms: " + "; ".join(" -> ".join(_path_within(graph, g)) for g in found)


def test_no_function_over_60_lines() -> None:
    long = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name} ({path.relative_to(PACKAGE.parent)}:{node.lineno}): {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(long)
