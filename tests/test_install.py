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
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuaccept = pytest_gpuaccept.plugin" in entry_points


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_the_h100_example_on_a_machine_without_gpus_is_rejected_with_reasons(tmp_path):
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pytest", f"--contract={REPO / 'contracts' / 'h100_sxm5_8gpu_nvswitch.yaml'}",
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
