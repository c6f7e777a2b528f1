"""Binary provenance: where every tool came from (path, SHA-256, ELF or script, owning package and its
verification), shown in the report, and `tools.sha256` pins that refuse any other file."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from builders import BUNDLE_CONTRACT, p5_log
from conftest import DATA, nvml_recording

from pytest_gpuaccept.probes import provenance
from pytest_gpuaccept.probes.provenance import flags, read_provenance


@pytest.mark.skipif(shutil.which("dpkg") is None or shutil.which("ethtool") is None, reason="needs dpkg and ethtool")
def test_a_packaged_binary_is_elf_owned_and_verified():
    """The real ethtool CI installs from Debian; merged /usr: dpkg knows it as /sbin/ethtool."""
    record = read_provenance(shutil.which("ethtool"))
    assert (record["kind"], record["package_manager"], record["package"], record["verified"]) == \
        ("ELF", "dpkg", "ethtool", True)
    assert record["sha256"] == hashlib.sha256(Path(record["resolved"]).read_bytes()).hexdigest()
    assert flags(record, expects_binary=True) == []


def test_a_file_where_packages_do_not_install_is_not_looked_up(fake_tools, tmp_path):
    """0.1 s a query saved: a file under /tmp (or a home) belongs to no package, whatever a database says."""
    target = tmp_path / "all_reduce_perf"
    target.write_bytes(b"\x7fELF" + b"\0" * 60)
    fake_tools.add("dpkg-query", f"nccl-tests: {target}\n", when="-S")
    record = read_provenance(str(target))
    assert record["package"] is None and record["package_note"].startswith("no package owns this file (under /tmp/")
    assert fake_tools.calls("dpkg-query") == []


def test_a_script_where_a_binary_is_expected_is_flagged(fake_tools):
    fake_tools.add("all_reduce_perf", "canned\n")
    record = read_provenance(str(fake_tools.bin_dir / "all_reduce_perf"))
    assert record["kind"].startswith("script (") and record["package"] is None
    assert flags(record, expects_binary=True) == ["a script where a compiled binary is expected"]


def test_a_package_file_changed_since_install_is_flagged(fake_tools, tmp_path, monkeypatch):
    """dpkg's own answer for a replaced file (fake dpkg on PATH): the digest column says 5. (The file is in
    tmp_path, where no package installs, so that rule is lifted here.)"""
    monkeypatch.setattr(provenance, "NO_PACKAGE_PREFIXES", ())
    target = tmp_path / "all_reduce_perf"
    target.write_bytes(b"\x7fELF" + b"\0" * 60)
    fake_tools.add("dpkg-query", f"nccl-tests: {target}\n", when="-S")
    fake_tools.add("dpkg", f"??5??????   {target}\n", when="--verify", rc=1)
    record = read_provenance(str(target))
    assert (record["kind"], record["package"], record["verified"]) == ("ELF", "nccl-tests", False)
    assert flags(record, expects_binary=True) == [
        "dpkg says this file of nccl-tests was changed since it was installed"]


def test_the_report_shows_the_provenance_of_every_tool_run(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    run = accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    tools = {t["tool"]: t for t in run.json["tools"]}
    assert set(tools) == {"nvidia-smi", "all_reduce_perf"}
    smi = tools["nvidia-smi"]
    assert smi["resolved"] == str(fake_tools.bin_dir / "nvidia-smi")
    assert smi["sha256"] == hashlib.sha256((fake_tools.bin_dir / "nvidia-smi").read_bytes()).hexdigest()
    assert smi["flags"] == ["a script where a compiled binary is expected"]
    page = run.html
    assert "Tools run (provenance)" in page and smi["sha256"] in page
    row = page[page.index(f"<td>{smi['resolved']}<td>") - 200:][:1200]
    assert smi["sha256"] in row and "script (" in row and "a script where a compiled binary is expected" in row
    assert run.json["verdict"] == "accepted"  # flagged for a signer to read, not a failure by itself


def test_a_pinned_tool_whose_file_differs_is_not_run(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    real = hashlib.sha256((fake_tools.bin_dir / "nvidia-smi").read_bytes()).hexdigest()
    pins = f"tools:\n  sha256:\n    nvidia-smi: {real}\n    all_reduce_perf: '{'0' * 64}'\n"
    run = accept(BUNDLE_CONTRACT + pins, nvml_recording("h100_sxm5_8gpu.json"))
    check = run.checks("allreduce")[0]
    assert check["outcome"] == "not_measured"
    assert check["message"] == (f"not measured: run: all_reduce_perf at {fake_tools.bin_dir / 'all_reduce_perf'} has SHA-256 "
                                f"{hashlib.sha256((fake_tools.bin_dir / 'all_reduce_perf').read_bytes()).hexdigest()}, "
                                f"the contract pins {'0' * 64} (tools.sha256): not the binary the contract names, not run")
    assert fake_tools.calls("all_reduce_perf") == []
    assert {c["outcome"] for c in run.checks("nvlink")} == {"passed"}  # nvidia-smi matched its pin and ran


def test_a_pin_that_is_not_a_sha256_is_a_usage_error(accept, fake_tools):
    run = accept(BUNDLE_CONTRACT + f"tools:\n  sha256:\n    nvidia-smi: abc\n    iperf3: {'1' * 64}\n",
                 nvml_recording("h100_sxm5_8gpu.json"))
    assert run.result.ret == 4
    run.result.stderr.fnmatch_lines(["*:16: tools.sha256.nvidia-smi: expected a SHA-256 as 64 hex digits, got 'abc'*",
                                     "*:17: tools.sha256.iperf3: expected a SHA-256 as 64 hex digits in quotes*"])
    assert fake_tools.calls() == []
