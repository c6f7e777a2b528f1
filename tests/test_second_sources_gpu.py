"""Issue 28: every GPU figure from a second source the vendor does not print. Each fraud a vendor who owns the host
can stage with NVML-only claims or a tool's output is REJECTED with the clause it attacks failed; each honest host
is still ACCEPTED; every bandwidth check says its cap and where the cap came from; the report lists what had no
second source.

The tool outputs are real (tests/data, SOURCES.md); where a fraud needs other figures, the real output is edited
here, in code, with its SUM lines added up again so that the parser reads it whole. The NVML states are the
constructed recordings of tests/data/nvml, staged here; a real nvbandwidth output is judged on the host it ran on
(`h100_sxm5_8gpu_acceptance_sheet.json`: the driver and CUDA version its header prints), never on another's. The
sysfs trees are built here in the kernel's layout and wording (`32.0 GT/s PCIe`, `16`)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from builders import COMPUTE_CONTRACT, GEMM_CPU_RUN, as_gpus, host_copy_runs, pcie_links, recording, series
from conftest import DATA, pci_tree, staged_recording
from judging import Output, judge, option_path, workload

from pytest_gpuaccept.clauses import sources
from pytest_gpuaccept.verdict import Check, Outcome

NVB_H100 = DATA / "nvbandwidth" / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt"
NVB_H20 = DATA / "nvbandwidth" / "h20-3e_8gpu_v0.8_device_local_copy.txt"
XD670 = DATA / "topo" / "h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt"
B200_TOPO = DATA / "topo" / "b200_8gpu_nv18_16nic_lines_repr.txt"
H100_8 = "h100_sxm5_8gpu.json"
SHEET = "h100_sxm5_8gpu_acceptance_sheet.json"  # NVB_H100's host: driver 595.71.05, CUDA 13.2 (SOURCES.md)
BAD = ("failed", "not_measured")


def scaled(text: str, cases: tuple[str, ...], factor: float) -> str:
    """A real nvbandwidth output with the cells of `cases` multiplied by `factor`, each SUM line added up again (as a
    tool rebuilt to print bigger figures would print them)."""
    out, cells, case = [], [], ""
    for line in text.splitlines():
        tokens = line.split()
        case = line.strip().removeprefix("Running ").rstrip(".") if line.startswith("Running ") else case
        if case in cases and tokens and tokens[0].isdigit() and any("." in t for t in tokens[1:]):
            values = [t if t == "N/A" else f"{float(t) * factor:.2f}" for t in tokens[1:]]
            cells += [float(t) for t in values if t != "N/A"]
            line = f" {tokens[0]}" + "".join(t.rjust(10) for t in values)
        elif case in cases and line.startswith("SUM "):
            line, cells = f"SUM {tokens[1]} {sum(cells):.2f}", []
        out.append(line)
    return "\n".join(out) + "\n"


def gpus(count: int = 8, extra: str = "") -> str:
    return f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\n{extra}"


def rejected_by(judged, clause: str) -> list[Check]:
    """The session is rejected and `clause` failed: its failing checks."""
    assert judged.verdict == "rejected"
    failing = [c for c in judged.of(clause) if c.outcome is Outcome.FAILED]
    assert failing, [(c.clause, c.outcome.value, c.message) for c in judged.checks]
    return failing


def accepted(judged) -> None:
    bad = [(c.clause, c.subject, c.message) for c in judged.checks if c.outcome is not Outcome.PASSED]
    assert bad == [] and judged.verdict == "accepted"


def honest_hgx(root, nvml: str = SHEET) -> Path:
    """The HGX H100's sysfs: its GPUs (0x2330, at `nvml`'s bus IDs) on Gen5 x16 links and its four NVSwitches
    (0x22a3)."""
    pci_tree(root, "0x2330", nvml)
    pcie_links(root, recording=nvml)
    return root


def tree(root, device: str | None = None, nvml: str | Path = H100_8) -> Path:
    """conftest.pci_tree's sysfs, as the folder the harness reads."""
    pci_tree(root, device, nvml)
    return root


def staged(tmp_path, source: str, change) -> Path:
    """conftest.staged_recording's NVML recording, as the file the harness reads."""
    return Path(staged_recording(tmp_path, source, change).split("=", 1)[1])






# ------------------------------------------------------------------ GPU bandwidth


def test_a_cat_of_a_saved_nvbandwidth_log_is_not_a_measurement(tmp_path):
    """nvbandwidth replaced by a script that `cat`s a saved log (one process runs every testcase): whatever it is
    asked, it prints the log at once (seconds=0). The H100's copies, on the host it ran on: instant, the p2p and host
    figures claim 9.83 s of copies the run never had time for. The H20's local copies (8 x 16 GiB at 1.1 TB/s, 0.12 s)
    do not fit in its 10 ms either; and printed after as long as they took, the log still names the GPUs it ran on,
    H20-3es where NVML has H100s: not this host's."""
    contract = gpus(extra="p2p: {min_bandwidth: '10 GB/s'}\nhost_bandwidth: {min_bandwidth: '10 GB/s'}\n")
    judged = judge(contract, {"nvbandwidth": Output(NVB_H100, seconds=0)}, tmp_path / "h100", nvml=SHEET,
                   sysfs=honest_hgx(tmp_path / "sys"))
    for clause in ("p2p", "host_bandwidth"):
        failing = rejected_by(judged, clause)
        assert len(failing) == len(judged.of(clause)) == {"p2p": 56}.get(clause, 16), clause
        assert all(c.message.endswith("9.83 s of copies (512 MiB x 16 copies x 2 of 3 samples per figure): not a "
                                      "measurement") for c in failing), (clause, failing[0].message)
    assert " ran 0.0" in judged.of("p2p")[0].message
    contract = gpus(extra="memory_bandwidth: {min_bandwidth: '10 GB/s', tool: nvbandwidth}\n")
    judged = judge(contract, {"nvbandwidth": Output(NVB_H20, seconds=0)}, tmp_path / "h20",
                   sysfs=honest_hgx(tmp_path / "sys2", H100_8))
    failing = rejected_by(judged, "memory_bandwidth")
    assert len(failing) == len(judged.of("memory_bandwidth")) == 8
    assert {c.message for c in failing} == {
        "`nvbandwidth -t device_local_copy` ran 0.05 s but reports moving 128 GiB at 1.12e+03 GB/s on average, 0.12 s "
        "of copies (512 MiB x 16 copies x 2 of 3 samples per figure): not a measurement"}
    judged = judge(contract, {"nvbandwidth": Output(NVB_H20)}, tmp_path / "h20-waited",
                   sysfs=honest_hgx(tmp_path / "sys3", H100_8))
    failing = rejected_by(judged, "memory_bandwidth")
    assert len(failing) == len(judged.of("memory_bandwidth")) == 8
    assert all(c.message.endswith("lists Device 0: NVIDIA H20-3e at PCI 00000000:18:00, where NVML has GPU0 "
                                     "'NVIDIA H100 80GB HBM3': not this host's output") for c in failing), failing[0].message


def test_1300_gb_s_over_h100_nvlinks_is_physically_impossible(tmp_path):
    nvb = scaled(NVB_H100.read_text(), ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce"), 3.3)
    judged = judge(gpus(extra="p2p: {min_bandwidth: '350 GB/s'}\n"),
                   {"nvidia-smi topo": Output(XD670), "nvbandwidth": Output(nvb)}, tmp_path, nvml=SHEET,
                   sysfs=honest_hgx(tmp_path / "sys"))
    failing = rejected_by(judged, "p2p")
    assert len(failing) == 56
    check = {c.subject: c for c in failing}["GPU0->GPU1"]
    assert "physically impossible" in check.message and "at most 450 GB/s each way" in check.message
    assert check.details["physical_cap"] == 450
    assert check.details["physical_cap_source"].startswith("18 NVLinks (nvidia-smi topo -m: NV18) x 25 GB/s per link")
    assert "the model table" in check.details["physical_cap_source"]


def test_190_gb_s_host_copies_on_a_gen5_x16_link_are_physically_impossible(tmp_path):
    nvb = scaled(NVB_H100.read_text(), ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce"), 3.44)
    judged = judge(gpus(extra="host_bandwidth: {min_bandwidth: '50 GB/s'}\n"), {"nvbandwidth": Output(nvb)}, tmp_path,
                   nvml=SHEET, sysfs=honest_hgx(tmp_path / "sys"))
    failing = rejected_by(judged, "host_bandwidth")
    assert len(failing) == 16
    check = {c.subject: c for c in failing}["GPU0:h2d"]
    assert re.fullmatch(r"GPU0:h2d host to GPU reads 19\d\.\d+ GB/s but the path is PCIe Gen5 x16, at most 63 GB/s each "
                        r"way: physically impossible \(nvbandwidth\)", check.message), check.message
    assert (check.details["physical_cap"], check.details["physical_cap_source"]) == (
        63, "PCIe Gen5 x16; from sysfs 0000:19:00.0 (max_link_speed, max_link_width)")


def test_every_bandwidth_check_of_an_honest_hgx_carries_its_cap_and_its_source(tmp_path):
    contract = gpus(extra="p2p: {min_bandwidth: '350 GB/s'}\nhost_bandwidth: {min_bandwidth: '50 GB/s'}\n")
    judged = judge(contract, {"nvidia-smi topo": Output(XD670), "nvbandwidth": Output(NVB_H100)}, tmp_path, nvml=SHEET,
                   sysfs=honest_hgx(tmp_path / "sys"))
    accepted(judged)
    for check in judged.of("p2p") + judged.of("host_bandwidth"):
        details = check.details
        assert details["physical_cap"] in (450, 63) and details["physical_cap_source"], check
        assert len(details["sources"]) == 2 and details["sources"][0] == "nvbandwidth"


def test_a_gemm_above_the_models_dense_peak_is_physically_impossible(tmp_path):
    """The recorded GEMM windows with 100,000 times the products: thousands of tf32 TFLOPS on an H100 SXM5 (494.5)."""
    inflated = re.sub(r'"matmuls": (\d+)', lambda m: f'"matmuls": {int(m.group(1)) * 100000}',
                      as_gpus(GEMM_CPU_RUN, "tf32"))
    contract = COMPUTE_CONTRACT.format(python=tmp_path / "bin" / "python", dtype="tf32", threshold="min_tflops: 100")
    judged = judge(contract, {"python": Output(inflated)}, tmp_path, nvml=option_path(recording(tmp_path, gpus=2)),
                   sysfs=tree(tmp_path / "sys", "0x2330", "h100_sxm5_4gpu.json"))
    failing = rejected_by(judged, "compute")
    assert len(failing) == 2
    assert re.fullmatch(r"GPU0 burst tf32 \d+\.\d TFLOPS is implausible: above 543\.95 TFLOPS \(physically impossible: the "
                        r"published dense tf32 peak 494\.5 TFLOPS \+ 10%, from the model table \(pytest_gpuaccept/models/"
                        r"gpus\.json\) for PCI device 0x2330 \(sysfs\)\)", failing[0].message), failing[0].message
    assert failing[0].details["physical_cap"] == 494.5


# ------------------------------------------------------------------ NVML against the kernel and the table


def _a100_with_80gb(reading: dict) -> None:
    for gpu in reading["gpus"]:
        gpu["memory_total_bytes"] = 85520809984  # what an H100 80GB reports, on the A100 40GB's device ID


def test_80_gb_on_the_device_id_of_the_40_gb_a100_fails_gpus_memory(accept, tmp_path):
    """A whole run, rejected: the fraud as the vendor's host would stage it."""
    run = accept(gpus(extra="  memory: '80 GB'\n"), staged_recording(tmp_path, "a100_sxm4_40gb_8gpu.json", _a100_with_80gb))
    assert run.json["verdict"] == "rejected"
    failing = [c for c in run.checks("gpus.memory") if c["outcome"] == "failed"]
    assert len(failing) == 8
    assert failing[0]["message"] == ("GPU0 total memory 85.52 GB (NVML), but sysfs says GPU0 is PCI device 0x20b0, a "
                                     "A100 SXM4 40GB, published with 40 GB: more than the card has (at most 43.81 GB)")
    assert failing[0]["details"]["sources"] == ["NVML", "sysfs PCI device 0x20b0 in the model table"]


def test_nvml_saying_x16_where_the_kernel_reads_x8_fails_health_pcie(tmp_path):
    sysfs = tree(tmp_path / "sys", nvml="h100_sxm5_4gpu.json")
    pcie_links(tmp_path / "sys", width="8", recording="h100_sxm5_4gpu.json")  # the kernel: x8; NVML's samples: x16
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                       "health: {pcie_gen: 5, pcie_width: 16}\n")
    judged = judge(contract, workload(), tmp_path, nvml=option_path(recording(tmp_path)), sysfs=sysfs)
    failing = rejected_by(judged, "health.pcie")
    assert len(failing) == 4
    assert failing[0].measured == "gen5 x8"
    assert failing[0].message == ("PCIe gen 5 x8 in sysfs as the load ended; NVML: gen 5 x16 under load (lowest of 55 "
                                     "samples): NVML and the kernel disagree: NVML says x16, sysfs current_link_width says x8")


def test_the_same_link_read_x16_by_both_passes_with_two_sources(accept, fake_tools, tmp_path):
    fake_tools.add("train-job", "training\n", hang=30)
    sysfs = pci_tree(tmp_path / "sys", recording="h100_sxm5_4gpu.json")
    pcie_links(tmp_path / "sys", recording="h100_sxm5_4gpu.json")
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                       "health: {pcie_gen: 5, pcie_width: 16}\n")
    run = accept(contract, recording(tmp_path), sysfs)
    check = run.checks("health.pcie")[0]
    assert (check["outcome"], check["measured"]) == ("passed", "gen5 x16")
    assert check["details"]["sources"] == ["sysfs current_link_speed/width", "NVML"]
    samples = json.loads((run.path / "gpuaccept-evidence" / "nvml-samples.json").read_text())
    assert samples["gpus"][0]["pcie_sysfs"]["current_link_width"] == "16"  # the kernel's reading kept as evidence


def _without_switches(root) -> None:
    for bus in ("0000:c0:00.0", "0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0"):
        shutil.rmtree(root / "bus" / "pci" / "devices" / bus)


def _a100_switches(root) -> None:
    for bus in ("0000:c0:00.0", "0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0"):
        (root / "bus" / "pci" / "devices" / bus / "device").write_text("0x1af1\n")


def _two_switches(reading: dict) -> None:
    for gpu in reading["gpus"]:
        for link in gpu["nvlinks"]:
            link["remote_bus_id"] = link["remote_bus_id"].replace("C2:", "C0:").replace("C3:", "C1:")


@pytest.mark.parametrize("sysfs_change, nvml_change, message", [
    (_without_switches, None, "NVML says the NVLinks of GPU0, GPU1, GPU2, GPU3 lead into NVSwitches at 0000:c0:00.0, "
                              "0000:c1:00.0, 0000:c2:00.0, 0000:c3:00.0, but sysfs has no NVIDIA bridge function (an "
                              "NVSwitch) at 0000:c0:00.0, 0000:c1:00.0, 0000:c2:00.0, 0000:c3:00.0"),
    (_a100_switches, None, "sysfs has device 0x1af1 at 0000:c0:00.0, where NVML's links lead, but the NVSwitches of a "
                           "H100 SXM5 80GB baseboard are 0x22a3"),
    (None, _two_switches, "NVML's links lead into 2 NVSwitches (0000:c0:00.0, 0000:c1:00.0); a H100 SXM5 80GB "
                          "baseboard has 4"),
], ids=["no NVSwitch in sysfs", "another model's NVSwitches", "fewer NVSwitches than the baseboard has"])
def test_phantom_nvswitches_fail_every_nvlink_pair(tmp_path, sysfs_change, nvml_change, message):
    sysfs = honest_hgx(tmp_path / "sys", H100_8)
    if sysfs_change:
        sysfs_change(tmp_path / "sys")
    nvml = staged(tmp_path, H100_8, nvml_change) if nvml_change else H100_8
    judged = judge(gpus(extra="nvlink: {every_pair: true, min_links: 18}\n"), {"nvidia-smi topo": Output(XD670)}, tmp_path,
                   nvml=nvml, sysfs=sysfs)
    failing = rejected_by(judged, "nvlink")
    assert len(failing) == 28 and {c.message for c in failing} == {message}
    assert "sysfs-nvswitches.json" in failing[0].evidence


def _stuffed(name: str, device: str):
    def change(reading: dict) -> None:
        for gpu in reading["gpus"]:
            gpu["name"], gpu["pci_device_id"] = name, device
    return change


@pytest.mark.parametrize("device, table_name", [("0x2330", "H100 SXM5 80GB: 'NVIDIA H100 80GB HBM3'"),
                                                ("0x2331", "H100 PCIe: 'NVIDIA H100 PCIe'")])
def test_a_name_stuffed_with_another_models_name_fails_gpus_model(tmp_path, device, table_name):
    """NVML's name must equal its device ID's name: one that contains it and another's ("... H100 PCIe") is no match,
    on the SXM device ID and on the PCIe one."""
    stuffed = "NVIDIA H100 80GB HBM3 H100 PCIe"
    judged = judge(gpus(extra="  model: 'H100 PCIe'\n"), {}, tmp_path, nvml=staged(tmp_path, H100_8, _stuffed(stuffed, device)),
                   sysfs=tree(tmp_path / "sys", device))
    failing = rejected_by(judged, "gpus.model")
    assert len(failing) == 8
    assert failing[0].message == (f"GPU0 is {stuffed!r}, which is not the name of its PCI device {device} in sysfs "
                                  f"({table_name})")
    assert {c.outcome.value for c in judged.of("gpus.identity")} == {"failed"}


def _app_clocks(t: float):
    return 0x2 if t >= 0.6 else 0x1  # the clock event reason an application-clock setting sets


def test_gpus_held_at_705_mhz_by_application_clocks_fail_health_clocks_and_throttle(tmp_path):
    held = [[t, u, 705 if u > 50 else c, p, tc, r, g, w]
            for t, u, c, p, tc, r, g, w in series(reasons=_app_clocks)]
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                       "health: {clocks: true, throttle: true}\n")
    judged = judge(contract, workload(), tmp_path, nvml=option_path(recording(tmp_path, overrides={i: held for i in range(4)})))
    clocks = rejected_by(judged, "health.clocks")
    assert len(clocks) == 4
    assert clocks[0].message == ("GPU0 held at 705 MHz by application clocks (clock event reason "
                                    "applications_clocks_setting in 55 of 55 busy samples, first at t=1.0 s), 36% of the "
                                    "1980 MHz boost of a H100 SXM5 80GB")
    assert clocks[0].required == ">= 1683 (0.85 x the 1980 MHz boost of a H100 SXM5 80GB)"
    throttle = rejected_by(judged, "health.throttle")
    assert throttle[0].message.startswith("57 of 60 samples throttled, first at t=0.6 s: applications_clocks_setting "
                                             "(SM clock 705 MHz, under 1683)")


def test_a_contract_fraction_of_the_boost_clock_is_the_floor(tmp_path):
    """Honest clocks (1980 MHz busy, the model's boost) pass the default 0.85; 0.9 of boost passes too; the floor
    follows min_clock_fraction, and a GPU at 1600 MHz without a power-limit reason fails 0.85."""
    slow = [[t, u, 1600 if u > 50 else c, p, tc, r, g, w] for t, u, c, p, tc, r, g, w in series()]
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                       "health: {min_clock_fraction: 0.9}\n")
    judged = judge(contract, workload(), tmp_path, nvml=option_path(recording(tmp_path, overrides={3: slow})))
    checks = {c.subject: c for c in judged.of("health.clocks")}
    assert (checks["GPU0"].outcome.value, checks["GPU0"].measured) == ("passed", 1980)
    assert checks["GPU0"].threshold == pytest.approx(1782)
    assert (checks["GPU3"].outcome.value, checks["GPU3"].measured) == ("failed", 1600)
    assert checks["GPU3"].message.endswith("(81% of the 1980 MHz boost of a H100 SXM5 80GB) < 1782 MHz")


# ------------------------------------------------------------------ load figures corroborate each other


def test_100_percent_busy_at_idle_power_and_idle_clock_is_not_busy(tmp_path):
    idle_but_busy = [[t, 100, 345, 72.0, 34, 0x1, 5, 16] for t, *_rest in series()]
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n")
    judged = judge(contract, workload(), tmp_path, nvml=option_path(recording(tmp_path, overrides={2: idle_but_busy})))
    failing = rejected_by(judged, "utilisation")
    assert [c.subject for c in failing] == ["GPU2"] and failing[0].measured == 0
    # judged from its first busy sample (the warm-up is measured): busy from the start, at idle power and clock
    assert failing[0].message.startswith(
        "GPU2 reports 100 % busy at t=0.0 s while drawing 72 W (10% of its 700 W published TDP (H100 SXM5 80GB)) at "
        "345 MHz (17% of the 1980 MHz boost of a H100 SXM5 80GB): an idle GPU's power and clock, not busy")
    honest = {c.subject: c for c in judged.of("utilisation")}["GPU0"]
    assert honest.details["sources"] == ["NVML utilisation", "NVML power draw", "NVML SM clock"]


def test_a_power_limit_lowered_during_the_load_is_read_at_every_sample(tmp_path):
    """Samples as record-nvml writes them now: the enforced limit in each (700 W, 350 W for a stretch of GPU1's)."""
    health = {i: {"power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0} for i in range(4)}
    path = Path(recording(tmp_path, health=health).split("=", 1)[1])
    reading = json.loads(path.read_text())
    reading["utilisation"]["fields"].append("power_limit_w")
    for gpu in reading["utilisation"]["gpus"]:
        for row in gpu["samples"]:
            row.append(350.0 if gpu["index"] == 1 and 4.0 <= row[0] < 6.0 else 700.0)
    path.write_text(json.dumps(reading))
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                       "health: {power_limit: default}\n")
    judged = judge(contract, workload(), tmp_path, nvml=path)
    failing = rejected_by(judged, "health.power_limit")
    assert [c.subject for c in failing] == ["GPU1"]
    assert failing[0].message == ("enforced power limit 350 W at t=4.0 s of the load (read at each of 60 samples), "
                                     "default 700 W: capped to 50% of the default")


# ------------------------------------------------------------------ honest hosts stay accepted


def _renamed(name: str, device: str, mib: int, links: bool = True):
    def change(reading: dict) -> None:
        for gpu in reading["gpus"]:
            gpu.update(name=name, pci_device_id=device, memory_total_bytes=mib * 2**20)
            if not links:
                gpu.update(nvlinks=[], nvlink_error="NVMLError_NotSupported: Not Supported")
    return change


def test_an_honest_hgx_h100_is_accepted_with_every_new_check(tmp_path):
    contract = gpus(extra="  model: 'H100 SXM5'\n  memory: '80 GB'\nnvlink: {every_pair: true, min_links: 18}\n"
                          "p2p: {min_bandwidth: '350 GB/s'}\nhost_bandwidth: {min_bandwidth: '50 GB/s'}\n")
    judged = judge(contract, {"nvidia-smi topo": Output(XD670), "nvbandwidth": Output(NVB_H100)}, tmp_path, nvml=SHEET,
                   sysfs=honest_hgx(tmp_path / "sys"))
    accepted(judged)
    assert judged.of("nvlink")[0].details["sources"] == ["`nvidia-smi topo -m`", "NVML's links", "sysfs NVSwitches"]


def test_an_honest_h100_load_is_accepted_with_clocks_pcie_power_and_utilisation(tmp_path):
    sysfs = tree(tmp_path / "sys", nvml="h100_sxm5_4gpu.json")
    pcie_links(tmp_path / "sys", recording="h100_sxm5_4gpu.json")
    health = {i: {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "power_limit_enforced_w": 700.0,
                  "power_limit_default_w": 700.0} for i in range(4)}
    contract = gpus(4, "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                       "health: {clocks: true, throttle: true, pcie_gen: 5, pcie_width: 16, power_limit: default}\n")
    accepted(judge(contract, workload(), tmp_path, nvml=option_path(recording(tmp_path, health=health)), sysfs=sysfs))


def test_a_real_h200_load_at_its_power_limit_passes_health_clocks(tmp_path):
    """The real H200's samples (tests/data/h200/run-nvml-samples.json): once busy it sits at its 700 W limit,
    clocks 1455-1845 MHz with sw_power_cap; those samples are the power's, the ramp's free ones run at 1710-1845."""
    real = json.loads((DATA / "h200" / "run-nvml-samples.json").read_text())
    reading = json.loads((DATA / "h200" / "nvml-h200.json").read_text())
    reading["utilisation"] = real
    path = tmp_path / "nvml-h200-with-samples.json"
    path.write_text(json.dumps(reading))
    contract = gpus(1, "utilisation: {min_percent: 1, duration: '1.5 s', warmup: '18.4 s', workload: ['train-job']}\n"
                       "health: {clocks: true}\n")
    contract = contract.replace("duration: '1.5 s'", "duration: '20 s'")
    judged = judge(contract, workload(20), tmp_path, nvml=path, sysfs=tree(tmp_path / "sys", nvml=path))
    check = judged.of("health.clocks")[0]
    assert check.outcome.value == "passed", check.message
    assert check.message.endswith("more at the power limit, not counted")


@pytest.mark.parametrize("name, device, mib, topo", [
    ("NVIDIA B200", "0x2901", 183359, B200_TOPO),  # the table knows no NVSwitch of a B200: said, not failed
    ("NVIDIA H200", "0x2335", 143771, XD670),
])
def test_honest_8_gpu_baseboards_are_accepted(tmp_path, name, device, mib, topo):
    nvml = staged(tmp_path, H100_8, _renamed(name, device, mib))
    contract = gpus(extra=f"  model: '{name.removeprefix('NVIDIA ')}'\n  memory: '{mib * 2**20 // 10**9} GB'\n"
                          "nvlink: {every_pair: true, min_links: 18}\n")
    accepted(judge(contract, {"nvidia-smi topo": Output(topo)}, tmp_path, nvml=nvml, sysfs=tree(tmp_path / "sys", device)))


@pytest.mark.parametrize("name, device, mib", [("NVIDIA H200 NVL", "0x233b", 143771), ("NVIDIA H100 PCIe", "0x2331", 81559),
                                               ("NVIDIA L40S", "0x26b9", 46068)])
def test_honest_pcie_and_nvl_cards_are_accepted(tmp_path, name, device, mib):
    nvml = staged(tmp_path, "h100_sxm5_4gpu.json", _renamed(name, device, mib, links=False))
    contract = gpus(4, f"  model: '{name.removeprefix('NVIDIA ')}'\n  memory: '{mib * 2**20 // 10**9} GB'\n")
    accepted(judge(contract, {}, tmp_path, nvml=nvml, sysfs=tree(tmp_path / "sys", device, "h100_sxm5_4gpu.json")))


# ------------------------------------------------------------------ what we could not confirm


def test_the_report_lists_the_clauses_taken_on_one_sources_word(accept, fake_tools, tmp_path):
    """An unknown device ID: no published capacity for gpus.memory, no cap for host_bandwidth; the driver version is
    NVML's alone. Each is a sentence of the report's box; the checks with two sources are not in it."""
    fake_tools.add("nvbandwidth", host_copy_runs(NVB_H100.read_text()))
    contract = gpus(extra="  memory: '80 GB'\n  driver: '>=550'\nhost_bandwidth: {min_bandwidth: '50 GB/s'}\n")
    unknown = _renamed("NVIDIA H100 80GB HBM3", "0xffff", 81559)  # a device ID the table lacks, NVML and sysfs agreeing
    run = accept(contract, staged_recording(tmp_path, SHEET, unknown), pci_tree(tmp_path / "sys", "0xffff", SHEET))
    assert run.json["verdict"] == "accepted", [(c["clause"], c["message"]) for c in run.checks() if c["outcome"] != "passed"]
    page = run.html
    assert "What we could not confirm" in page
    for line in ["gpus.driver (host): taken on NVML&#x27;s word: NVML&#x27;s driver version alone (no second reading of "
                 "it is compared).",
                 "gpus.memory (GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7): taken on NVML&#x27;s word: NVML&#x27;s "
                 "total not compared with a published capacity: device ID 0xffff is not in the model table "
                 "(pytest_gpuaccept/models/gpus.json): add it.",
                 "host_bandwidth (GPU0:h2d, GPU0:d2h, GPU1:h2d, GPU1:d2h, GPU2:h2d, GPU2:d2h, GPU3:h2d, GPU3:d2h and 8 "
                 "more): taken on nvbandwidth&#x27;s word: no physical cap"]:
        assert line in page, line
    assert "gpus.identity (" not in page.split("What we could not confirm")[1].split("</ul>")[0]
    memory = run.checks("gpus.memory")[0]["details"]
    assert memory["sources"] == ["NVML"] and memory["unconfirmed"].startswith("NVML's total not compared")


def _check(clause: str, subject: str, named: list[str] | None, outcome: Outcome = Outcome.PASSED, why: str = "") -> Check:
    details = {} if named is None else {"sources": named, **({"unconfirmed": why} if why else {})}
    return Check(clause, subject, outcome, 1.0, None, "", "", (), details)


def test_the_box_names_each_single_sourced_clause_once_and_nothing_else():
    checks = [_check("a", "GPU0", ["NVML"], why="no sysfs"), _check("a", "GPU1", ["NVML"], why="no sysfs"),
              _check("b", "GPU0", ["NVML", "sysfs"]), _check("c", "host", None),
              _check("d", "GPU0", ["tool"], Outcome.NOT_MEASURED), _check("e", "x<y>", [], Outcome.FAILED)]
    assert list(sources.unconfirmed(checks)) == ["a", "e"]
    box = sources.box(checks)
    assert box.count("<li>") == 2
    assert "<li>a (GPU0, GPU1): taken on NVML&#x27;s word: no sysfs.</li>" in box
    assert "<li>e (x&lt;y&gt;): taken on one source&#x27;s word.</li>" in box  # escaped
    assert sources.box(checks[2:4]) == ""


def test_sources_are_added_once_each_and_never_to_a_check_not_measured():
    check = sources.with_sources(_check("a", "GPU0", None), "NVML", "", "NVML", unconfirmed="why")
    assert check.details == {"sources": ["NVML"], "unconfirmed": "why"}
    two = sources.with_sources(_check("a", "GPU0", None), "NVML", "sysfs")
    assert two.details == {"sources": ["NVML", "sysfs"]}
    unmeasured = _check("a", "GPU0", None, Outcome.NOT_MEASURED)
    assert sources.with_sources(unmeasured, "NVML") is unmeasured
