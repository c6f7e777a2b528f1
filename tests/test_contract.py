"""The contract loader: valid files load, and every kind of mistake is one line naming file, line and key."""

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from pytest_gpuaccept import schema
from pytest_gpuaccept.clauses import allreduce, cluster, gpus, network, nvlink, utilisation
from pytest_gpuaccept.contract import ContractError, load_contract, parse_contract

CONTRACTS = sorted((Path(__file__).parent.parent / "contracts").glob("*.yaml"))
GOOD = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
gpus:
  count: 8
"""


@pytest.mark.parametrize("path", CONTRACTS, ids=[p.name for p in CONTRACTS])
def test_the_example_contracts_are_valid(path):
    contract = load_contract(path)
    assert contract.vendor and contract.sections()


def test_the_spec_example_is_valid():
    contract = parse_contract((Path(__file__).parent / "data" / "spec_example_contract.yaml").read_text())
    assert allreduce.SECTION.of(contract).min_busbw.gbyte_s == 450
    assert allreduce.SECTION.of(contract).max_bytes.nbytes == 8 * 2**30
    assert nvlink.SECTION.of(contract).min_links == 18
    assert network.RDMA.of(contract).line_rate.gbit_s == 400
    assert network.IPERF3.of(contract).streams == 8
    assert utilisation.UTILISATION.of(contract).workload == "builtin"
    assert cluster.SECTION.get(contract) is None  # typed, None where the contract has no such section


def test_a_section_is_read_typed_never_as_an_attribute_of_the_contract():
    contract = parse_contract(GOOD)
    assert gpus.SECTION.of(contract).count == 8
    assert not hasattr(contract, "gpus") and not hasattr(contract, "nvlink")
    with pytest.raises(LookupError, match="no nvlink section"):
        nvlink.SECTION.of(contract)


def problems(text: str) -> list[str]:
    with pytest.raises(ContractError) as info:
        parse_contract(text, "vendor.yaml")
    return info.value.problems


@pytest.mark.parametrize("extra, expected", [
    ("  memry: '80 GB'\n",
     "vendor.yaml:5: gpus.memry: unknown key (did you mean 'memory'?); expected one of: count, model, memory, driver, cuda, form_factor, persistence_mode, "
     "mig, modified_memory"),
    ("  memory: 80\n", "vendor.yaml:5: gpus.memory: expected a size such as '8 GiB', got 80"),
    ("  driver: 550\n", "vendor.yaml:5: gpus.driver: expected a version specifier such as '>=550' (quoted), got 550"),
    ("  driver: '>>550'\n", "vendor.yaml:5: gpus.driver: expected a PEP 440 version specifier such as '>=550', got '>>550'"),
    ("  count: 9\n", "vendor.yaml:5: gpus.count: duplicate key"),
    ("  model: [H100]\n", "vendor.yaml:5: gpus.model: expected a non-empty text, got a list"),
])
def test_a_mistake_in_gpus_names_line_and_key(extra, expected):
    assert problems(GOOD + extra) == [expected]


@pytest.mark.parametrize("text, expected", [
    (GOOD + "allreduce:\n  min_busbw: 450\n",
     "vendor.yaml:6: allreduce.min_busbw: expected a bandwidth such as '450 GB/s', got 450"),
    (GOOD + "allreduce:\n  min_busbw: '450 GiB/s'\n",
     "vendor.yaml:6: allreduce.min_busbw: expected a bandwidth such as '450 GB/s', got '450 GiB/s'"),
    (GOOD + "allreduce:\n  max_bytes: '8 GiB'\n", "vendor.yaml:5: allreduce.min_busbw: missing: this key is required"),
    (GOOD + "nics:\n  interfaces: ['eth0;rm -rf /']\n  min_speed: '10 Gb/s'\n",
     "vendor.yaml:6: nics.interfaces: expected names of the characters A-Za-z0-9_.:-*?[], got 'eth0;rm -rf /'"),
    (GOOD + "nics:\n  interfaces: ['eth[0']\n  min_speed: '10 Gb/s'\n",
     "vendor.yaml:6: nics.interfaces: expected a valid glob, got 'eth[0' (unbalanced brackets)"),
    (GOOD + "nics:\n  interfaces: []\n  min_speed: '10 Gb/s'\n",
     "vendor.yaml:6: nics.interfaces: expected a non-empty list of names or globs such as ['ens1f0', 'ib*'], got a list"),
    (GOOD + "rdma:\n  devices: [mlx5_0]\n  min_fraction_of_line_rate: 90\n",
     "vendor.yaml:7: rdma.min_fraction_of_line_rate: expected a number in (0, 1], got 90"),
    (GOOD + "iperf3:\n  server: '-s'\n  min_throughput: '10 Gb/s'\n",
     "vendor.yaml:6: iperf3.server: expected a host name or IP address (letters, digits, '.', ':', '-'), got '-s'"),
    (GOOD + "utilisation:\n  min_percent: 80\n  workload: python\n",
     "vendor.yaml:7: utilisation.workload: expected 'builtin' or an argv list such as ['torchrun', 'train.py'], got 'python'"),
    (GOOD + "gpus2: {}\n",
     "vendor.yaml:5: gpus2: unknown key (did you mean 'gpus'?); expected one of: gpuaccept, vendor, reference, description, tools, gpus, nvlink, p2p, memory_bandwidth, compute, host_bandwidth, allreduce, sdc, nics, rdma, iperf3, utilisation, health, burnin, dcgm, cluster, node_check"),
    (GOOD + "tools:\n  all_reduce_perf: build/all_reduce_perf\n",
     "vendor.yaml:6: tools.all_reduce_perf: expected an absolute path, got 'build/all_reduce_perf'"),
    (GOOD + "tools:\n  timeout: 600\n", "vendor.yaml:6: tools.timeout: expected a duration such as '60 s', got 600"),
    (GOOD + "nvlink:\n  every_pair: false\n",
     "vendor.yaml:5: nvlink.every_pair: expected true: 'false' checks nothing, remove the nvlink section instead"),
    (GOOD + "health: {}\n", "vendor.yaml:5: health: expected at least one key: an empty section checks nothing"),
])
def test_a_mistake_in_a_section_names_line_and_key(text, expected):
    assert problems(text) == [expected]


def test_nvlink_without_gpu_count_is_invalid():
    text = "gpuaccept: 1\nvendor: X\nnvlink:\n  every_pair: true\n"
    assert problems(text) == [
        "vendor.yaml:3: nvlink: needs gpus.count: this clause is judged over the host's GPUs, add gpus.count"]


def test_a_missing_format_version_is_named():
    assert problems("vendor: X\ngpus:\n  count: 8\n") == [
        "vendor.yaml:1: gpuaccept: missing: expected 'gpuaccept: 1' (the format version) as the first key"]


def test_an_unknown_format_version_is_refused():
    assert problems("gpuaccept: 2\nvendor: X\ngpus: {count: 1}\n") == [
        "vendor.yaml:1: gpuaccept: expected 1 (the only format this version reads), got 2"]


def test_every_problem_is_listed_not_just_the_first():
    found = problems("gpuaccept: 1\ngpus:\n  count: -1\n  modle: x\n")
    assert found == [
        "vendor.yaml:1: vendor: missing: expected the vendor's name, e.g. vendor: \"Example GPU Cloud\"",
        "vendor.yaml:3: gpus.count: expected a whole number from 1 to 64, got -1",
        "vendor.yaml:4: gpus.modle: unknown key (did you mean 'model'?); expected one of: count, model, memory, driver, cuda, form_factor, persistence_mode, "
     "mig, modified_memory",
    ]


@pytest.mark.parametrize("text, expected", [
    ("", "vendor.yaml:1: contract: expected a mapping with 'gpuaccept: 1', got an empty file"),
    ("- a\n- b\n", "vendor.yaml:1: contract: expected a mapping, got a list"),
    ("gpuaccept: 1\nvendor: [\n", "vendor.yaml:3: contract: expected valid YAML, got a syntax error: expected the node content, but found '<stream end>'"),
    ("gpuaccept: 1\nvendor: X\n", "vendor.yaml:1: contract: expected at least one section to check (gpus, nvlink, p2p, memory_bandwidth, compute, host_bandwidth, allreduce, sdc, nics, rdma, iperf3, utilisation, health, burnin, dcgm, cluster), got none"),
])
def test_a_file_that_is_not_a_contract(text, expected):
    assert problems(text) == [expected]


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "nope.yaml")
    assert info.value.problems == [f"{tmp_path / 'nope.yaml'}: contract: no such file"]


def test_the_contract_digest_is_of_its_bytes(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    assert load_contract(path).sha256 == hashlib.sha256(GOOD.encode()).hexdigest()


def test_the_readme_example_contract_is_valid():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", readme, re.S).group(1)
    assert parse_contract(example, "README.md").sections()


def _tree(node):
    if isinstance(node, yaml.MappingNode):
        return ("map", node.tag, node.start_mark.line, tuple((_tree(k), _tree(v)) for k, v in node.value))
    if isinstance(node, yaml.SequenceNode):
        return ("seq", node.tag, node.start_mark.line, tuple(_tree(v) for v in node.value))
    return ("scalar", node.tag, node.value, node.start_mark.line, node.start_mark.column)


@pytest.mark.parametrize("contract", sorted((Path(__file__).parent.parent / "contracts").glob("*.yaml")), ids=lambda p: p.name)
def test_libyaml_composes_each_shipped_contract_as_the_pure_python_loader_does(contract):
    text = contract.read_text()
    assert schema._LIBYAML is not None  # PyYAML's wheels carry libyaml: the fast path is the one taken
    assert _tree(schema.compose(text)) == _tree(yaml.compose(text, Loader=schema.Loader))


def test_a_contract_holding_a_control_character_is_refused_naming_its_line(tmp_path):
    """libyaml refuses it; PyYAML's pure-Python reader reads it again for its message, which names the line."""
    bad = tmp_path / "vendor.yaml"
    bad.write_bytes(b"gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\x07\n")
    with pytest.raises(ContractError) as refused:
        load_contract(str(bad))
    assert "vendor.yaml:4" in str(refused.value) and "special characters are not allowed" in str(refused.value)


def test_the_node_check_key_is_part_of_the_contract_and_checked_by_a_judging_run_too():
    # One file serves acceptance and the scheduler's node-check (docs/node-check.md): a judging run reads it as data
    marked = GOOD + "node_check:\n  quick: [gpus]\n"
    assert parse_contract(marked, "vendor.yaml").vendor == "Example GPU Cloud"
    with pytest.raises(ContractError) as error:
        parse_contract(GOOD + "node_check:\n  quick: [burnin]\n", "vendor.yaml")
    assert error.value.problems == ["vendor.yaml:6: node_check.quick: 'burnin' is not a section of this contract "
                                    "(it has gpus)"]
