"""The contract loader: valid files load, and every kind of mistake is one line naming file, line and key."""

from pathlib import Path

import pytest

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
     "vendor.yaml:5: gpus.memry: unknown key (did you mean 'memory'?); expected one of: count, model, memory, driver, cuda, form_factor"),
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
     "vendor.yaml:5: gpus2: unknown key (did you mean 'gpus'?); expected one of: gpuaccept, vendor, reference, description, tools, gpus, nvlink, p2p, memory_bandwidth, compute, host_bandwidth, allreduce, nics, rdma, iperf3, utilisation, health, cluster"),
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
        "vendor.yaml:4: gpus.modle: unknown key (did you mean 'model'?); expected one of: count, model, memory, driver, cuda, form_factor",
    ]


@pytest.mark.parametrize("text, expected", [
    ("", "vendor.yaml:1: contract: expected a mapping with 'gpuaccept: 1', got an empty file"),
    ("- a\n- b\n", "vendor.yaml:1: contract: expected a mapping, got a list"),
    ("gpuaccept: 1\nvendor: [\n", "vendor.yaml:3: contract: expected valid YAML, got a syntax error: expected the node content, but found '<stream end>'"),
    ("gpuaccept: 1\nvendor: X\n", "vendor.yaml:1: contract: expected at least one section to check (gpus, nvlink, p2p, memory_bandwidth, compute, host_bandwidth, allreduce, nics, rdma, iperf3, utilisation, health, cluster), got none"),
])
def test_a_file_that_is_not_a_contract(text, expected):
    assert problems(text) == [expected]


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "nope.yaml")
    assert info.value.problems == [f"{tmp_path / 'nope.yaml'}:0: contract: file not found"]


def test_the_contract_digest_is_of_its_bytes(tmp_path):
    import hashlib

    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    assert load_contract(path).sha256 == hashlib.sha256(GOOD.encode()).hexdigest()


def test_the_readme_example_contract_is_valid():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", readme, re.S).group(1)
    assert parse_contract(example, "README.md").sections()


def _tree(node):
    import yaml

    if isinstance(node, yaml.MappingNode):
        return ("map", node.tag, node.start_mark.line, tuple((_tree(k), _tree(v)) for k, v in node.value))
    if isinstance(node, yaml.SequenceNode):
        return ("seq", node.tag, node.start_mark.line, tuple(_tree(v) for v in node.value))
    return ("scalar", node.tag, node.value, node.start_mark.line, node.start_mark.column)


@pytest.mark.parametrize("contract", sorted((Path(__file__).parent.parent / "contracts").glob("*.yaml")), ids=lambda p: p.name)
def test_libyaml_composes_each_shipped_contract_as_the_pure_python_loader_does(contract):
    import yaml

    from pytest_gpuaccept import schema

    text = contract.read_text()
    assert schema._LIBYAML is not None  # PyYAML's wheels carry libyaml: the fast path is the one taken
    assert _tree(schema.compose(text)) == _tree(yaml.compose(text, Loader=schema.Loader))


def test_the_cheaper_reader_pattern_matches_every_code_point_pyyaml_s_own_does():
    """_pyyaml gives PyYAML's reader its NON_PRINTABLE class written as the complement (0.2 ms to compile, not 10):
    tried on every code point against PyYAML's own text, compiled apart (re.UNICODE: the same class, another key)."""
    import re

    from pytest_gpuaccept import _pyyaml

    pyyamls, ours = re.compile(_pyyaml.PYYAML_NON_PRINTABLE, re.UNICODE), re.compile(_pyyaml.SAME_SET)
    assert ours is not pyyamls and ours.pattern != pyyamls.pattern
    differ = [c for c in range(0x110000) if (pyyamls.match(chr(c)) is None) != (ours.match(chr(c)) is None)]
    assert differ == []
    sample = "gpus:\n  count: 8\x07\n  model: H100\ud800 \u00a0ok\ufffe\U0001F600\x85\x9f"
    assert [m.start() for m in pyyamls.finditer(sample)] == [m.start() for m in ours.finditer(sample)] != []


def test_pyyaml_s_reader_gets_the_cheaper_pattern_and_still_refuses_a_control_character(tmp_path):
    """In a fresh interpreter (as a run is): the seed takes on this Python and this PyYAML (whose reader's pattern is
    still the text _pyyaml names), and a contract holding a control character is refused, naming its line."""
    import ast
    import subprocess
    import sys

    import yaml

    from pytest_gpuaccept import _pyyaml

    source = Path(yaml.reader.__file__).read_text()
    compiled = [ast.literal_eval(call.args[0]) for call in ast.walk(ast.parse(source)) if isinstance(call, ast.Call)
                and getattr(call.func, "attr", "") == "compile" and call.args and isinstance(call.args[0], ast.Constant)]
    assert compiled == [_pyyaml.PYYAML_NON_PRINTABLE]
    bad = tmp_path / "vendor.yaml"
    bad.write_bytes(b"gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\x07\n")
    probe = ("import pytest_gpuaccept.contract as c, pytest_gpuaccept._pyyaml as p, yaml\n"
             "print(yaml.reader.Reader.NON_PRINTABLE.pattern == p.SAME_SET)\n"
             f"try:\n    c.load_contract({str(bad)!r})\nexcept c.ContractError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "True"
    assert "vendor.yaml:4" in out[1] and "special characters are not allowed" in out[1]
