"""The package as a user installs it: the wheel ships the suites, and the H100 example runs from anywhere."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_the_suites_and_the_entry_points(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next(tmp_path.glob("pytest_gpuaccept-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for suite in ("test_gpus.py", "test_nvlink.py", "test_p2p.py", "test_memory_bandwidth.py", "test_compute.py", "test_host_bandwidth.py", "test_allreduce.py", "test_network.py", "test_utilisation.py"):
        assert f"pytest_gpuaccept/suites/{suite}" in names
    for contract in ("h100_sxm5_8gpu.yaml", "h200_sxm_1gpu.yaml", "a100_sxm4_80gb_8gpu.yaml", "l40s_pcie_4gpu.yaml"):
        assert f"pytest_gpuaccept/contracts/{contract}" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuaccept = pytest_gpuaccept.plugin" in entry_points


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_the_h100_example_on_a_machine_without_gpus_is_rejected_with_reasons(tmp_path):
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pytest", f"--contract={REPO / 'contracts' / 'h100_sxm5_8gpu.yaml'}",
                           "-p", "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:]
    results = json.loads((tmp_path / "gpuaccept-results.json").read_text())
    assert results["verdict"] == "rejected" and results["complete"] is True
    assert results["checks"]
    for check in results["checks"]:
        assert check["outcome"] in ("failed", "not_measured"), check
        assert check["message"] and check["test"].startswith("suites/"), check
    assert "REJECTED" in (tmp_path / "gpuaccept-report.html").read_text()
    assert "gpuaccept: REJECTED" in done.stdout


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_a_preset_runs_by_name_from_an_empty_directory(tmp_path):
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--contract=h100-sxm5-8gpu", "-p", "no:cacheprovider"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:]
    results = json.loads((tmp_path / "gpuaccept-results.json").read_text())
    assert results["verdict"] == "rejected" and results["contract"]["path"].endswith("h100_sxm5_8gpu.yaml")
    assert done.stdout.rstrip().splitlines()[-1].startswith("gpuaccept verdict: REJECTED")


def test_an_unknown_contract_name_suggests_the_closest_presets_and_lists_them(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--contract=h100-sxm9", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4
    assert "h100-sxm9: no such preset, nor a contract file here; did you mean h100-sxm5-8gpu or h200-sxm-1gpu?" in done.stderr
    assert "the shipped presets are: a100-sxm4-80gb-8gpu, h100-sxm5-8gpu, h200-sxm-1gpu, l40s-pcie-4gpu" in done.stderr


def test_contracts_lists_and_copies_the_presets(tmp_path):
    listed = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "contracts"], capture_output=True, text=True,
                            timeout=60)
    assert "h100-sxm5-8gpu           8x H100 SXM5 80GB, NVSwitch, 8x 400G NDR, trial host" in listed.stdout
    copied = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "contracts", "--copy", "h200-sxm-1gpu"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert copied.returncode == 0 and (tmp_path / "h200-sxm-1gpu.yaml").read_text().startswith("# 1x NVIDIA H200")
    again = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "contracts", "--copy", "h200-sxm-1gpu"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "exists: not overwritten" in again.stdout
