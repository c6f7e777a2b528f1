"""The evidence bundle: verify names any changed byte; a replayed bundle gives the same verdict."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from builders import BUNDLE_CONTRACT, p5_log
from conftest import DATA, nvml_recording

from pytest_gpuaccept.__main__ import main as cli
from pytest_gpuaccept.evidence import files_under


@pytest.fixture
def live(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    run = accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "accepted"
    return run


def test_an_untouched_bundle_verifies(live, capsys):
    assert cli(["verify", str(live.path)]) == 0
    assert "\nOK: every file matches the manifest; manifest SHA-256 " in capsys.readouterr().out


@pytest.mark.parametrize("target", [
    "gpuaccept-evidence/nvidia-smi_topo_-m.txt", "gpuaccept-evidence/nvml-host.json",
    "gpuaccept-evidence/all_reduce_perf_-g_8_-b_8388608_-e_17179869184_-f_2_-c_1_-n_1.run1.json",
    "gpuaccept-results.json", "vendor.yaml", "gpuaccept-evidence/manifest.json",
])
def test_changing_one_byte_anywhere_fails_verify_and_names_the_file(live, capsys, target):
    path = live.path / target
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert cli(["verify", str(live.path)]) == 1
    out = capsys.readouterr().out
    name = target.split("/")[-1]
    assert "FAIL changed: " in out and name in out, out


def test_an_added_or_removed_file_fails_verify(live, capsys):
    (live.path / "gpuaccept-evidence" / "extra.txt").write_text("planted")
    (live.path / "gpuaccept-evidence" / "nvidia-smi_topo_-m.stderr.txt").unlink()
    assert cli(["verify", str(live.path / "gpuaccept-evidence")]) == 1
    out = capsys.readouterr().out
    assert "FAIL added: extra.txt (not in the manifest)" in out
    assert "FAIL missing: nvidia-smi_topo_-m.stderr.txt" in out


def test_verify_runs_as_a_module(live):
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "verify", str(live.path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "OK" in done.stdout


def test_replaying_a_bundle_gives_the_same_checks_without_touching_hardware(live, accept, fake_tools, tmp_path):
    bundle = tmp_path / "vendor-bundle"
    shutil.copytree(live.path / "gpuaccept-evidence", bundle / "gpuaccept-evidence")
    shutil.copy(live.path / "gpuaccept-report.html", bundle)
    shutil.copy(live.path / "gpuaccept-results.json", bundle)
    shutil.copy(live.path / "vendor.yaml", bundle)
    calls_before = len(fake_tools.calls())
    shutil.rmtree(fake_tools.bin_dir)  # no tool left: a replay must not need one
    replayed = accept(BUNDLE_CONTRACT, f"--gpuaccept-replay={bundle}", f"--html={tmp_path / 'replay' / 'report.html'}",
                      f"--gpuaccept-json={tmp_path / 'replay' / 'results.json'}")
    result = json.loads((tmp_path / "replay" / "results.json").read_text())
    assert result["checks"] == live.json["checks"]
    assert result["verdict"] == live.json["verdict"] == "accepted"
    assert result["replayed_from"] == str(bundle / "gpuaccept-evidence")
    assert replayed.result.ret == 0
    assert len(fake_tools.calls()) == calls_before


def test_a_stricter_contract_judges_the_same_bundle_differently(live, accept, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(live.path, bundle)
    replayed = accept(BUNDLE_CONTRACT.replace("450 GB/s", "490 GB/s"), f"--gpuaccept-replay={bundle}",
                      f"--html={tmp_path / 'r' / 'report.html'}", f"--gpuaccept-json={tmp_path / 'r' / 'results.json'}")
    result = json.loads((tmp_path / "r" / "results.json").read_text())
    allreduce = [c for c in result["checks"] if c["clause"] == "allreduce"][0]
    assert (allreduce["outcome"], allreduce["measured"]) == ("failed", 483.05)
    assert replayed.result.ret == 1


def test_a_bundle_that_does_not_verify_is_refused_for_replay(live, accept, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(live.path, bundle)
    log = next((bundle / "gpuaccept-evidence").glob("all_reduce_perf*.run1.txt"))
    log.write_bytes(log.read_bytes().replace(b"483.05", b"583.05"))
    replayed = accept(BUNDLE_CONTRACT, f"--gpuaccept-replay={bundle}", f"--html={tmp_path / 'r' / 'report.html'}")
    assert replayed.result.ret == 4
    replayed.result.stderr.fnmatch_lines(["*does not verify*", "changed: all_reduce_perf*.run1.txt"])


def test_a_contract_asking_what_the_bundle_lacks_is_not_measured(live, accept, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(live.path, bundle)
    accept(BUNDLE_CONTRACT + "nics:\n  interfaces: [eth0]\n  min_speed: '10 Gb/s'\n", f"--gpuaccept-replay={bundle}",
                      f"--html={tmp_path / 'r' / 'report.html'}", f"--gpuaccept-json={tmp_path / 'r' / 'results.json'}")
    result = json.loads((tmp_path / "r" / "results.json").read_text())
    nics = [c for c in result["checks"] if c["clause"] == "nics"]
    assert nics and all(c["outcome"] != "passed" for c in nics)
    assert result["verdict"] == "rejected"


def test_the_evidence_walk_lists_what_pathlib_s_rglob_and_is_file_list_in_their_order(tmp_path):
    """files_under (os.scandir) replaced sorted(rglob("*")) + is_file() in the digest, the manifest, verify and the
    seals' check: the same files in the same order, or every bundle's digest would change. Tried on what a tool
    could leave: links to files and to folders, a broken link, a FIFO, dot files, names that sort differently
    as strings than as parts ("a-c" before "a/b" as text, after it by parts)."""
    root = tmp_path / "evidence"
    for name in ("a/b", "a-c", "a/.hidden", "a/z/deep.txt", "b c", "ü.txt", ".ledger/x.seals", "nodes/n1/r.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    (root / "empty").mkdir()
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "f.txt").write_text("x")
    (outside / "file.txt").write_text("y")
    os.symlink(outside / "file.txt", root / "link-to-file")
    os.symlink(outside / "inner", root / "link-to-folder")
    os.symlink(tmp_path / "nowhere", root / "broken-link")
    os.mkfifo(root / "a" / "fifo")
    expected = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*")) if p.is_file()]
    assert files_under(root) == expected
    assert expected.index("a/b") < expected.index("a-c") and "link-to-file" in expected
    assert not any(name.startswith(("link-to-folder", "broken-link", "empty")) or name.endswith("fifo")
                   for name in expected)
    assert files_under(tmp_path / "missing") == []
