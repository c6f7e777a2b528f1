"""The real H200 recordings (tests/data/h200, recorded on the lent device machine on 2026-11-30): each read
to the figures SOURCES.md gives for it, by the parser the plugin uses on that output, or, for the records a
person reads (nvidia-smi -q, the sysfs listings, provenance, pytest's output), the lines a person reads."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import DATA

from pytest_gpuaccept.probes import gemm, kernel_log, membw, nvml, torch_hostbw

H200 = DATA / "h200"


def text(name: str) -> str:
    return (H200 / name).read_text()


def test_the_workload_outputs_give_the_figures_of_the_run():
    assert membw.parse_membw(text("run-membw_torch.txt"))[0].gbyte_s == pytest.approx(4252.9, abs=0.05)
    run = gemm.parse_gemm(text("run-gemm_torch.txt"))
    assert (run.dtype, run.n, run.duration_s) == ("bf16", 8192, 20.0)
    assert run.runs[0].sustained(20.0) == pytest.approx(728.6, abs=0.05)
    host = torch_hostbw.parse_torch_hostbw(text("run-hostbw_torch.txt"))
    assert host.figures == {(0, "h2d"): 55.287, (0, "d2h"): 55.174}


@pytest.mark.parametrize("name", ["run-nvml-samples.json", "run-nvml-samples-gemm.json"])
def test_the_nvml_samples_are_one_h200_on_pcie_gen5_x16(name):
    series = nvml.parse_samples(json.loads(text(name)))
    assert [s.index for s in series] == [0]
    assert {(s.pcie_gen, s.pcie_width) for s in series[0].samples} == {(5, 16)}


def test_the_builtin_workload_was_stopped_at_the_end_of_its_window():
    run = json.loads(text("run-workload_builtin.json"))
    assert (run["returncode"], run["timed_out"], run["timeout_s"]) == (-15, False, 20.0)


def test_the_kernel_log_after_the_accepted_load_holds_no_xid_and_the_window_is_on_the_boot_clock():
    assert kernel_log.parse_xids(text("accepted-dmesg_after_load.txt")).xids == ()
    assert json.loads(text("accepted-load-window.json")) == {"ended_uptime_s": 77.06, "started_uptime_s": 48.68}


@pytest.mark.parametrize(("name", "verdict", "checks", "not_passed"), [
    ("accepted-results.json", "accepted", 16, []),
    ("run-results.json", "rejected", 15, [("utilisation", "failed")]),
])
def test_the_results_files_give_the_verdict_of_their_run(name, verdict, checks, not_passed):
    results = json.loads(text(name))
    assert (results["verdict"], results["mode"], len(results["checks"])) == (verdict, "live", checks)
    assert [(c["clause"], c["outcome"]) for c in results["checks"] if c["outcome"] != "passed"] == not_passed
    if verdict == "accepted":
        measured = {c["clause"]: c["measured"] for c in results["checks"]}
        assert (measured["memory_bandwidth"], measured["compute"], measured["gpus.identity"]) == (
            4255.308, 728.411, "0x2335")


@pytest.mark.parametrize(("name", "last"), [
    ("accepted-pytest.txt", "gpuaccept verdict: ACCEPTED"),
    ("accepted-by-preset-pytest.txt", "gpuaccept verdict: ACCEPTED"),
    ("run-pytest.txt", "gpuaccept verdict: REJECTED"),
])
def test_pytests_output_ends_with_the_verdict(name, last):
    lines = [line for line in text(name).splitlines() if line.startswith("gpuaccept verdict:")]
    assert lines and lines[-1].startswith(last)


def test_nvidia_smi_q_and_the_query_csv_agree_on_the_card():
    fields = {}
    for line in text("nvidia-smi-q.txt").splitlines():
        key, sep, value = line.partition(" : ")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    assert (fields["Product Name"], fields["Driver Version"], fields["Bus Id"]) == (
        "NVIDIA H200", "580.159.04", "00000000:00:06.0")
    assert (fields["Default Power Limit"], fields["Max Power Limit"]) == ("700.00 W", "700.00 W")
    row = next(csv.DictReader(text("nvidia-smi-query.csv").splitlines(), skipinitialspace=True))
    assert (row["name"], row["pci.bus_id"], row["pci.device_id"]) == ("NVIDIA H200", "00000000:00:06.0", "0x233510DE")
    assert row["enforced.power.limit [W]"] == "700.00 W"


def test_the_sysfs_listing_has_one_nvidia_3d_controller_and_a_virtio_nic():
    pci = [dict(part.split("=", 1) for part in line.split()[1:]) | {"address": line.split()[0]}
           for line in text("sysfs-pci-list.txt").splitlines() if line.strip()]
    nvidia = [f for f in pci if f["vendor"] == "0x10de"]
    assert [(f["address"], f["device"], f["class"], f["driver"]) for f in nvidia] == [
        ("0000:00:06.0", "0x2335", "0x030200", "nvidia")]
    assert text("sysfs-net.txt").startswith("eth0 device=/sys/devices/pci0000:00/0000:00:03.0/virtio2 ")


def test_provenance_names_a_driver_mount_no_package_owns():
    lines = text("provenance.txt").splitlines()
    assert lines[0] == "nvidia-smi /usr/local/nvidia/bin/nvidia-smi /usr/local/nvidia/bin/nvidia-smi"
    assert lines[1].startswith("4a384a7189c79d73897c4c0a1000e1e09e5eea6218d350061fd6babbb30ae29f  ")
    assert "dpkg-query: no path found matching pattern /usr/local/nvidia/bin/nvidia-smi" in lines
