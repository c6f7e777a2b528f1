"""The mistakes of a buyer's first hour, each answered in one clear line: an empty or missing `--contract` (a usage
error that names no line 0), `verify` of a folder that is no bundle (no empty digest, no "1 problems"), and
`compare` of bundles of different hosts or contracts (refused, saying what differs, unless --allow-different)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_gpuaccept.__main__ import main as cli
from pytest_gpuaccept.compare import different
from pytest_gpuaccept.contract import ContractError, load_contract

PRESETS = "a100-sxm4-80gb-8gpu, h100-sxm5-8gpu, h200-sxm-1gpu, l40s-pcie-4gpu"
NAME = f"name a contract file or one of the shipped presets: {PRESETS}"


# ------------------------------------------------------------------ --contract

@pytest.mark.parametrize(("value", "said"), [
    ("", f"ERROR: --contract: empty; {NAME}"),
    ("missing.yaml", f"ERROR: --contract missing.yaml: no such file; {NAME}"),
    ("nope/vendor.yaml", f"ERROR: --contract nope/vendor.yaml: no such file; {NAME}"),
    (".", f"ERROR: --contract .: a folder; {NAME}"),
])
def test_a_contract_option_naming_no_file_is_a_usage_error_naming_no_line(pytester, value, said):
    result = pytester.runpytest_inprocess(f"--contract={value}", "-p", "no:cacheprovider")
    assert result.ret == 4
    assert [line for line in result.errlines if line.strip()] == [said]
    assert not (pytester.path / "gpuaccept-evidence").exists()


def test_doctor_says_the_same_of_a_contract_that_is_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(["doctor", "--contract", "missing.yaml"]) == 4
    assert capsys.readouterr().out == f"--contract missing.yaml: no such file; {NAME}\n"
    assert cli(["doctor", "--contract", ""]) == 4
    assert capsys.readouterr().out == f"--contract: empty; {NAME}\n"


def test_the_contract_loader_names_no_line_where_there_is_no_file(tmp_path):
    with pytest.raises(ContractError) as missing:
        load_contract(tmp_path / "nope.yaml")
    assert missing.value.problems == [f"{tmp_path / 'nope.yaml'}: contract: no such file"]
    with pytest.raises(ContractError) as folder:
        load_contract(tmp_path)
    assert folder.value.problems == [f"{tmp_path}: contract: a folder, not a contract file"]


# ------------------------------------------------------------------ verify

WHERE = "a bundle is the report's folder (gpuaccept-report.html beside gpuaccept-evidence/) or its evidence folder"


def test_verify_of_a_folder_that_is_no_bundle_says_so_in_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a bundle\n")
    assert cli(["verify", str(tmp_path)]) == 1
    assert capsys.readouterr().out == f"verify {tmp_path}: NOT a bundle: it holds no gpuaccept-evidence folder; {WHERE}\n"
    assert cli(["verify", str(tmp_path / "gone")]) == 1
    assert capsys.readouterr().out == f"verify {tmp_path / 'gone'}: NOT a bundle: no such file or folder; {WHERE}\n"
    (tmp_path / "gpuaccept-evidence").mkdir()
    assert cli(["verify", str(tmp_path)]) == 1
    assert capsys.readouterr().out == (f"verify {tmp_path}: NOT a bundle: {tmp_path / 'gpuaccept-evidence'} holds no "
                                       f"manifest.json; {WHERE}\n")


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> dict[str, Path]:
    """The demo's accepted and rejected bundles (a simulated H100 host; the rejected one has an H100 PCIe as GPU7)."""
    root = tmp_path_factory.mktemp("demos")
    assert cli(["demo", str(root / "accepted")]) == 0
    assert cli(["demo", str(root / "rejected"), "--rejected"]) == 1
    return {"accepted": root / "accepted", "rejected": root / "rejected"}


def test_a_bundle_with_one_problem_says_one_problem(demos, tmp_path, capsys):
    bundle = tmp_path / "bundle"
    shutil.copytree(demos["accepted"], bundle)
    with open(bundle / "gpuaccept-evidence" / "nvidia-smi_topo_-m.txt", "ab") as changed:  # its raw output
        changed.write(b" ")
    assert cli(["verify", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "bundle does NOT verify (1 problem); manifest SHA-256 " in out and "problems" not in out, out


# ------------------------------------------------------------------ compare

def test_compare_refuses_bundles_of_different_hosts_saying_what_differs_unless_allowed(demos, capsys):
    assert cli(["compare", str(demos["accepted"]), str(demos["rejected"])]) == 2
    assert capsys.readouterr().out.splitlines() == [
        "FAIL OLD and NEW differ: GPU model: OLD NVIDIA H100 80GB HBM3, NEW NVIDIA H100 80GB HBM3, NVIDIA H100 PCIe",
        "compare: refused: OLD and NEW are not bundles of the same host and contract (1 difference above); "
        "--allow-different compares them anyway"]
    assert cli(["compare", str(demos["accepted"]), str(demos["rejected"]), "--allow-different"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("NOTE OLD and NEW differ: GPU model: OLD NVIDIA H100 80GB HBM3, NEW NVIDIA H100 80GB HBM3, "
                        "NVIDIA H100 PCIe")
    assert lines[-1].startswith("compare: ") and "regressed" in lines[-1]


def test_compare_of_the_same_host_and_contract_is_not_refused(demos, capsys):
    assert cli(["compare", str(demos["accepted"]), str(demos["accepted"])]) == 0
    out = capsys.readouterr().out
    assert "differ" not in out and out.splitlines()[-1].startswith("compare: nothing regressed")


def _results(hostname="trial-h100-", gpus=8, name="NVIDIA H100 80GB HBM3", sha="a" * 64, mode="simulated",
             recorded=None) -> dict:
    return {"mode": mode, "recorded": recorded, "contract": {"sha256": sha},
            "host": {"hostname": hostname, "gpus": [{"index": i, "name": name} for i in range(gpus)]}}


def test_what_makes_two_bundles_different():
    assert different(_results(), _results()) == []
    assert different(_results(), _results(hostname="other-h100")) == ["host name: OLD trial-h100-, NEW other-h100"]
    assert different(_results(), _results(gpus=1)) == ["GPU count: OLD 8, NEW 1"]
    assert different(_results(), _results(sha="b" * 64)) == [f"contract SHA-256: OLD {'a' * 64}, NEW {'b' * 64}"]
    assert different(_results(), _results(mode="live")) == ["mode: OLD SIMULATED, NEW LIVE"]
    assert different(_results(), _results(mode=None)) == ["mode: OLD SIMULATED, NEW LIVE"]
    # a replay keeps the mode of the run it replayed: a replay of a simulated run is still a simulated one
    assert different(_results(), _results(mode="replay", recorded={"mode": "simulated"})) == []
