"""One clause, one place: the registry is the only list of clauses, and everything else agrees with it."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from builders import APART_CLAUSES, CLUSTER_CLAUSES, EVERY_CLAUSE_CONTRACT

from pytest_gpuaccept import suite
from pytest_gpuaccept.clauses import registry
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.subjects import Host, Subject

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_gpuaccept"
EVERY_CLAUSE = parse_contract(EVERY_CLAUSE_CONTRACT)
HOST_NAMES = {"net": ["ens6f0", "lo"], "infiniband": ["mlx5_0"]}


def test_the_docs_table_is_the_registry():
    page = (ROOT / "docs" / "contract.md").read_text()
    between = page.split("<!-- registry:clauses -->\n")[1].split("\n<!-- /registry:clauses -->")[0]
    assert between == registry.docs_table()


def _string_literals(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


# Strings that spell a clause's name but mean something else, each with what it means.
NOT_CLAUSE_NAMES = {
    ("pytest_gpuaccept/contract.py", "iperf3"): "the tool's name, a key of `tools:`",
    ("pytest_gpuaccept/probes/iperf3.py", "iperf3"): "the tool's name",
    ("pytest_gpuaccept/probes/nvidia_smi.py", "nvlink"): "the `nvidia-smi nvlink` subcommand",
    ("pytest_gpuaccept/probes/nvml.py", "utilisation"): "the key of the sample series in an NVML recording",
    ("pytest_gpuaccept/models/__init__.py", "nvlink"): "a key of the model table, gpus.json",
    ("pytest_gpuaccept/doctor.py", "iperf3"): "the tool's name",
    ("pytest_gpuaccept/clauses/cluster.py", "allreduce"): "the key cluster.allreduce of the cluster section",
    ("pytest_gpuaccept/clauses/cluster.py", "iperf3"): "the key cluster.links.iperf3 of the cluster section",
    ("pytest_gpuaccept/clauses/cluster.py", "rdma"): "the key cluster.links.rdma of the cluster section",
    ("pytest_gpuaccept/clauses/cluster.py", "utilisation"): "the key cluster.utilisation of the cluster section",
    ("pytest_gpuaccept/clauses/cluster.py", "cluster.utilisation"): "the dotted key in the section's messages",
    ("pytest_gpuaccept/clauses/dcgm.py", "memory_bandwidth"): "DCGM's test of that name (a level-3 plugin)",
    ("pytest_gpuaccept/probes/nccl_tests.py", "allreduce"): "NCCL_ALGO's collective name (`allreduce:nvls,ring`)",
}


def test_no_clause_name_is_written_outside_its_clause_module():
    """Plan, plugin, report, fixtures and suites name no clause: they read the registry."""
    owners = {clause.key: clause.judge.__module__ for clause in registry.CLAUSES}
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "suites").glob("*.py")]
    strays = []
    for path in files:
        module = "pytest_gpuaccept." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts) \
            if PACKAGE in path.parents else f"suites.{path.stem}"
        for key in _string_literals(path) & set(owners):
            if owners[key] != module and (str(path.relative_to(ROOT)), key) not in NOT_CLAUSE_NAMES:
                strays.append(f"{path.relative_to(ROOT)}: {key!r}")
    assert strays == []


def test_every_clause_has_one_suite_test_and_every_suite_test_one_clause():
    made = {}
    for path in sorted((ROOT / "suites").glob("test_*.py")):
        made.update(suite.clause_tests(str(path)))
    assert sorted(made) == sorted(clause.test for clause in registry.CLAUSES)
    for name, test in made.items():
        assert test.pytestmark[0].args == (registry.BY_TEST[name].key,)


def test_plan_covers_every_clause_of_a_full_contract():
    expected = registry.expected_checks(EVERY_CLAUSE, lambda: HOST_NAMES)
    assert [c.key for c in registry.present_clauses(EVERY_CLAUSE)] == [
        c for c in registry.ALL_CLAUSES if c not in APART_CLAUSES | CLUSTER_CLAUSES]
    assert {clause for clause, _subject in expected} == set(registry.ALL_CLAUSES) - APART_CLAUSES - CLUSTER_CLAUSES
    assert registry.not_in_contract(EVERY_CLAUSE) == [c for c in registry.ALL_CLAUSES if c in APART_CLAUSES | CLUSTER_CLAUSES]
    assert CLUSTER_CLAUSES == {c.key for c in registry.clauses_of("cluster")}
    with_counts = parse_contract(EVERY_CLAUSE_CONTRACT.replace('min_speed: "25 Gb/s"}', 'min_speed: "25 Gb/s", count: 1}')
                                 .replace("min_fraction_of_line_rate: 0.9}", "min_fraction_of_line_rate: 0.9, count: 1}"))
    assert set(registry.not_in_contract(with_counts)) == {"nics", "rdma", "gpus.mig", "allreduce.algo"} | CLUSTER_CLAUSES


def test_a_cluster_contract_judges_the_cluster_on_the_login_node_and_the_rest_on_each_node():
    cluster = parse_contract(EVERY_CLAUSE_CONTRACT + "cluster:\n  engine: slurm\n  nodes: ['gpu[01-04]']\n"
                                        "  pairs: {min_busbw: '360 GB/s'}\n")
    assert [c.key for c in registry.present_clauses(cluster)] == ["cluster.nodes", "cluster.pairs"]
    on_a_node = replace(cluster, node="gpu02")
    assert [c.key for c in registry.present_clauses(on_a_node)] == [
        c for c in registry.ALL_CLAUSES if c not in APART_CLAUSES | CLUSTER_CLAUSES]
    assert registry.not_in_contract(cluster) == ["gpus.mig", "allreduce.algo", "nics.count", "rdma.count", "cluster.allreduce", "cluster.links",
                                                 "cluster.links.rdma", "cluster.fabric", "cluster.utilisation", "cluster.nvlink_domain.fabric",
                                                 "cluster.nvlink_domain.imex",
                                                 "cluster.nvlink_domain.min_busbw"]
    listing = {"cluster_nodes": ["gpu01", "gpu02", "gpu03"]}
    nodes = registry.BY_KEY["cluster.nodes"].subjects(cluster, lambda: listing)
    assert [str(s) for s in nodes] == ["gpu01", "gpu02", "gpu03"]
    pairs = registry.BY_KEY["cluster.pairs"].subjects(cluster, lambda: listing)
    assert [str(s) for s in pairs] == ["gpu01+gpu02", "gpu01+gpu03", "gpu02+gpu03"]


@pytest.mark.parametrize("clause", [c for c in registry.CLAUSES if c.key not in CLUSTER_CLAUSES], ids=lambda c: c.key)
def test_any_subject_can_be_put_on_a_node_without_its_clause_knowing(clause):
    node = Host("gpu03")
    for subject in clause.subjects(EVERY_CLAUSE, lambda: HOST_NAMES):
        assert str(subject.on(node)) == f"gpu03/{subject}"
        assert subject.on(node).id == f"gpu03/{subject}"


def test_subjects_format_once():
    assert [str(s) for s in (Subject.of_gpu(3), Subject.all_gpus(), Subject.pair(1, 0), Subject.ordered(2, 5),
                             Subject.both_ways(5, 2), Subject.of_gpu(0, "h2d"), Subject.named("ib*", "ib0"),
                             Subject.named("ib*", None), Subject.whole(), Subject.whole("all_reduce"))] == [
        "GPU3", "GPUs", "GPU0-GPU1", "GPU2->GPU5", "GPU2<->GPU5", "GPU0:h2d", "ib0", "ib*", "host", "all_reduce"]
    assert Subject.named("x", "<b>x").id.startswith("unsafe-")


def test_a_clause_with_no_subject_still_expects_a_check(monkeypatch):
    """A clause whose rule enumerates nothing is not silently complete: one check is expected on the host."""
    empty = registry.BY_KEY["nics"]
    monkeypatch.setattr(type(empty.rule), "subjects", lambda *_args: [])
    expected = registry.expected_checks(EVERY_CLAUSE, lambda: HOST_NAMES)
    assert ("nics", Subject.whole()) in expected


def test_importing_the_plugin_imports_no_yaml_packaging_or_probe():
    """The plugin loads in every pytest run of the environment: without --contract it must stay light."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest_gpuaccept.plugin"],
                         capture_output=True, text=True, check=True).stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in out.splitlines() if "|" in line]
    heavy = [name for name in imported if name.split(".")[0] in ("yaml", "packaging", "pynvml")
             or name.startswith(("pytest_gpuaccept.probes", "pytest_gpuaccept.clauses", "pytest_gpuaccept.contract"))]
    assert heavy == []


def test_clause_modules_do_not_import_pytest():
    for module in ("subjects", "verdict", "schema", "contract", "measurements", *(
            f"clauses.{p.stem}" for p in (PACKAGE / "clauses").glob("*.py"))):
        imported = {node.names[0].name for node in ast.walk(ast.parse(
            (PACKAGE / (module.replace(".", "/") + ".py")).read_text())) if isinstance(node, ast.Import)}
        assert "pytest" not in imported, module
        importlib.import_module(f"pytest_gpuaccept.{module}")
