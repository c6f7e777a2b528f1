"""Each clause owns its measurement: a measuring function beside its judge, made a fixture of its own name by
the registry; the shipped tests are ordinary functions; no import circle through the plugin's modules."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from pytest_gpuaccept import fixtures, suite
from pytest_gpuaccept.clauses import registry

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_gpuaccept"
RUN_FIXTURES = {"gpuaccept_state", "gpuaccept_contract", "gpuaccept_runner"}  # fixtures.py (and its run plugin)


def test_every_clause_reads_a_measuring_function_the_registry_makes_a_fixture():
    names = [measure.__name__ for measure in registry.MEASUREMENTS]
    assert len(names) == len(set(names)) and all(name.startswith("gpuaccept_") for name in names)
    assert {clause.measure for clause in registry.CLAUSES} <= set(registry.MEASUREMENTS)
    for measure in registry.MEASUREMENTS:  # each reads only fixtures that exist
        assert set(inspect.signature(measure).parameters) <= set(names) | RUN_FIXTURES, measure.__name__
        assert measure.__module__.startswith("pytest_gpuaccept.clauses."), measure.__name__
    plugin = suite.measurement_fixtures()
    assert sorted(name for name in dir(plugin) if name.startswith("gpuaccept_")) == sorted(names)


def test_the_fixtures_the_docs_name_exist():
    page = (ROOT / "docs" / "running.md").read_text()
    documented = set(re.findall(r"`(gpuaccept_[a-z_0-9]+)`", page.split("## Using the fixtures")[1]))
    made = {measure.__name__ for measure in registry.MEASUREMENTS}
    assert documented and documented <= made | RUN_FIXTURES | {"gpuaccept_judge"}
    assert all(hasattr(fixtures, name) for name in ("gpuaccept_contract", "gpuaccept_runner", "gpuaccept_judge"))


def test_no_clause_module_names_a_fixture_by_a_string():
    for path in (PACKAGE / "clauses").glob("*.py"):
        strings = [node.value for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        assert [s for s in strings if re.fullmatch(r"gpuaccept_\w+", s)] == [], path.name


def test_a_shipped_test_is_an_ordinary_function_of_its_fixtures():
    test = suite.clause_tests(str(ROOT / "suites" / "test_gpus.py"))["test_gpu_count"]
    assert list(inspect.signature(test).parameters) == ["request", "gpuaccept_subject", "gpuaccept_contract"]
    marks = {mark.name: mark.args for mark in test.pytestmark}
    assert marks == {"gpuaccept": ("gpus.count",), "usefixtures": ("gpuaccept_host_identity",)}


def _imports(path: Path, module: str) -> set[str]:
    """The package's modules `module` imports, inside functions too, TYPE_CHECKING blocks aside."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, ast.ImportFrom | ast.Import):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
            continue
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
            if node.level else node.module or ""
        found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


def test_no_import_circle_through_the_plugin_state_fixtures_suite_contract_or_clauses():
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    graph = {m: {d for d in _imports(p, m) if d in modules and d != m} for m, p in modules.items()}
    assert "pytest_gpuaccept.plugin" not in graph["pytest_gpuaccept.state"]

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                if nxt == goal:
                    return True
                seen.add(nxt)
                todo.append(nxt)
        return False

    ours = [m for m in modules if m.rsplit(".", 1)[-1] in ("plugin", "state", "fixtures", "suite", "contract")
            or m.startswith("pytest_gpuaccept.clauses.")]
    assert [m for m in ours if reaches(m, m)] == []
