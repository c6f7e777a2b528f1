"""The real variety among honest cards and hosts: a container given 4 of a node's 8 GPUs, a workstation card
in PCI class VGA, ECC switched off, a vGPU guest, a card whose own default power limit is below the table's
figure. Each honest one is accepted; what cannot be measured says why; ECC off never passes an ECC clause.

The `nvidia-smi -q` outputs in tests/data/smiq are real (tests/data/SOURCES.md). The plugin reads NVML, not
`nvidia-smi -q`; `smi_q` below reads, from such an output, the figures a person reads (and NVML gives the
plugin: N/A is None, never 0), so that the judges are fed what real cards report.

Whole hosts are judged in process from their recordings (tests/judging.py); a whole pytest run stays for one
accepted host (the vGPU guest, its exit code) and one rejected (a slice held to the contract's count)."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from builders import recording
from conftest import DATA, pci_tree, staged_recording
from judging import Output, judge, option_path

from pytest_gpuaccept.clauses import utilisation as health_clauses
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.measurements import GpuModels, LoadRun
from pytest_gpuaccept.models import by_device_id, vgpu_of
from pytest_gpuaccept.probes import nvml
from pytest_gpuaccept.probes.nvml import GpuSeries
from pytest_gpuaccept.probes.sysfs import is_nvidia_gpu, read_pci_devices
from pytest_gpuaccept.subjects import Subject

SMIQ = DATA / "smiq"


# ---------------------------------------------------------------- nvidia-smi -q, read as a person reads it

def _tree(text: str) -> list[tuple[tuple[str, ...], str]]:
    """Every `Key : value` line of the first GPU's block with the path of section titles above it (by indent)."""
    rows: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.strip() == "[...]" or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(" : ")
        if indent == 0 and line.startswith("GPU ") and any(p == ("GPU",) for p, _ in rows):
            break  # the second GPU's block
        while stack and stack[-1][0] >= indent:
            stack.pop()
        name = "GPU" if indent == 0 and line.startswith("GPU ") else key.strip()
        rows.append(((*[s for _, s in stack], name), value.strip() if sep else ""))
        stack.append((indent, name))
    return rows


def _find(rows: list[tuple[tuple[str, ...], str]], *tails: tuple[str, ...]) -> str | None:
    """The value of the first path ending in one of `tails` (alternatives as drivers spelled them)."""
    for tail in tails:
        for path, value in rows:
            if path[-len(tail):] == tail and value:
                return value
    return None


def _number(value: str | None) -> float | None:
    match = re.match(r"^(\d+(?:\.\d+)?)", value or "")
    return float(match.group(1)) if match else None


def smi_q(text: str) -> dict:
    """The first GPU of an `nvidia-smi -q` output: its name, PCI device ID, and the health NVML gives the plugin
    (`nvml._health`'s keys). N/A reads as None. The ECC section's title is `Ecc Mode` (R410) or `ECC Mode`; the
    enforced limit is `Enforced Power Limit` (to R525) or `Current Power Limit` (R535 on); volatile uncorrectable
    errors are `DRAM Uncorrectable` (R510 on) or `Double Bit`'s `Total` (older)."""
    rows = _tree(text)
    mode = {"Enabled": 1, "Disabled": 0}
    device = _find(rows, ("PCI", "Device Id"))
    remapped = _find(rows, ("Remapped Rows",))
    rows_values = [_find(rows, ("Remapped Rows", k)) for k in ("Correctable Error", "Uncorrectable Error", "Pending",
                                                              "Remapping Failure Occurred")]
    pending = _find(rows, ("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending"))
    uncorrected = _find(rows, ("Volatile", "DRAM Uncorrectable"), ("Volatile", "Double Bit", "Total"))
    return {
        "name": _find(rows, ("GPU", "Product Name")),
        "device_id": device[2:6].lower() if device else None,
        "bus_id": next((line.split()[1] for line in text.splitlines() if line.startswith("GPU ")), None),
        "health": {
            "ecc_mode_current": mode.get(_find(rows, ("ECC Mode", "Current"), ("Ecc Mode", "Current")) or ""),
            "ecc_mode_pending": mode.get(_find(rows, ("ECC Mode", "Pending"), ("Ecc Mode", "Pending")) or ""),
            "ecc_volatile_uncorrected": None if _number(uncorrected) is None else int(_number(uncorrected) or 0),
            "remapped_rows": None if remapped == "N/A" or rows_values[0] is None else
            [int(rows_values[0]), int(rows_values[1] or 0), rows_values[2] == "Yes", rows_values[3] == "Yes"],
            "retired_pages_pending": None if pending in (None, "N/A") else pending == "Yes",
            "power_limit_enforced_w": _number(_find(rows, ("Enforced Power Limit",), ("Current Power Limit",))),
            "power_limit_default_w": _number(_find(rows, ("Default Power Limit",))),
            "power_limit_min_w": _number(_find(rows, ("Min Power Limit",))),
            "power_limit_max_w": _number(_find(rows, ("Max Power Limit",))),
        },
    }


# What a person reads in each real file (the figures its source shows).
EXPECTED = {
    "rtx_a6000_q_ecc_disabled_537_wddm.txt": {
        "name": "NVIDIA RTX A6000", "device_id": "2230", "bus_id": "00000000:01:00.0",
        "health": {"ecc_mode_current": 0, "ecc_mode_pending": 0, "ecc_volatile_uncorrected": None,
                   "remapped_rows": [0, 0, False, False], "retired_pages_pending": None,
                   "power_limit_enforced_w": 300.0, "power_limit_default_w": 300.0,
                   "power_limit_min_w": 100.0, "power_limit_max_w": 300.0}},
    "grid_v100d_8c_vgpu_guest_q_535.txt": {
        "name": "GRID V100D-8C", "device_id": "1db6", "bus_id": "00000000:02:00.0",
        "health": {"ecc_mode_current": 1, "ecc_mode_pending": 1, "ecc_volatile_uncorrected": 0,
                   "remapped_rows": None, "retired_pages_pending": False,
                   "power_limit_enforced_w": None, "power_limit_default_w": None,
                   "power_limit_min_w": None, "power_limit_max_w": None}},
    "v100_pcie_32gb_q_driver410_microway.txt": {
        "name": "Tesla V100-PCIE-32GB", "device_id": "1db6", "bus_id": "00000000:18:00.0",
        "health": {"ecc_mode_current": 1, "ecc_mode_pending": 1, "ecc_volatile_uncorrected": 0,
                   "remapped_rows": None, "retired_pages_pending": False,
                   "power_limit_enforced_w": 250.0, "power_limit_default_w": 250.0,
                   "power_limit_min_w": 100.0, "power_limit_max_w": 250.0}},
    "a100_q_remapped_rows_pending_elided.txt": {
        "name": "NVIDIA A100-SXM4-80GB", "device_id": None, "bus_id": "00000000:10:1C.0",  # PCI section elided
        "health": {"ecc_mode_current": None, "ecc_mode_pending": None, "ecc_volatile_uncorrected": 0,
                   "remapped_rows": [1, 0, True, False], "retired_pages_pending": None,
                   "power_limit_enforced_w": None, "power_limit_default_w": None,
                   "power_limit_min_w": None, "power_limit_max_w": None}},
}


def test_every_smiq_file_is_read_to_the_figures_its_source_shows():
    assert sorted(p.name for p in SMIQ.glob("*.txt")) == sorted(EXPECTED)  # none left out
    for name, expected in EXPECTED.items():
        assert smi_q((SMIQ / name).read_text()) == expected, name


# ---------------------------------------------------------------- the health judges on what real cards report

HEALTH = ("gpuaccept: 1\nvendor: V\ngpus: {count: 1}\nutilisation: {min_percent: 80}\n"
          "health: {ecc: true, row_remapping: true, power_limit: default, max_remapped_rows: 0}\n")


def _judge(clause, health: dict, device_id: str | None = None):
    """One clause on GPU0 whose NVML health is `health` (no samples needed for these clauses)."""
    model = by_device_id(device_id) if device_id else None
    models = GpuModels({0: device_id}, {0: model}, ())
    load = LoadRun(None, {0: GpuSeries(0, (), health, None, {"events": []})}, None, None, (), models=models)
    contract = parse_contract(HEALTH)
    return clause.judge(clause.section.of(contract), Subject.of_gpu(0), load, contract)


def _real(name: str) -> dict:
    return smi_q((SMIQ / name).read_text())


def test_ecc_disabled_on_a_real_rtx_a6000_fails_every_ecc_clause_saying_so():
    card = _real("rtx_a6000_q_ecc_disabled_537_wddm.txt")
    for clause in (health_clauses.ECC, health_clauses.ROW_REMAPPING, health_clauses.REMAPPED_ROWS):
        check = _judge(clause, card["health"], card["device_id"])
        assert check.outcome.value == "failed", clause.key
        assert check.message == ("ECC is disabled on GPU0: memory errors are neither corrected, counted nor remapped, "
                                 "so none can be judged absent"), clause.key


def test_ecc_disabled_until_the_next_reboot_says_so_and_still_fails():
    health = {**_real("rtx_a6000_q_ecc_disabled_537_wddm.txt")["health"], "ecc_mode_pending": 1}  # constructed
    check = _judge(health_clauses.ECC, health)
    assert check.outcome.value == "failed" and "ECC is disabled on GPU0 (enabled after the next reboot)" in check.message


def test_counters_missing_with_ecc_enabled_or_mode_unknown_are_not_measured():
    base = _real("v100_pcie_32gb_q_driver410_microway.txt")["health"]
    enabled = _judge(health_clauses.ECC, {**base, "ecc_volatile_uncorrected": None})
    assert enabled.outcome.value == "not_measured"
    assert enabled.message.endswith("although NVML says ECC is enabled")
    older = {k: v for k, v in base.items() if not k.startswith("ecc_mode")} | {"ecc_volatile_uncorrected": None}
    assert _judge(health_clauses.ECC, older).message.endswith("(or ECC is off)")  # a recording made before the mode


def test_the_real_ecc_enabled_cards_pass_on_their_counters():
    v100 = _real("v100_pcie_32gb_q_driver410_microway.txt")
    assert _judge(health_clauses.ECC, v100["health"]).message == "0 volatile uncorrectable ECC errors"
    retired = _judge(health_clauses.ROW_REMAPPING, v100["health"])
    assert (retired.outcome.value, retired.message) == ("passed", "retired pages pending: no (this GPU retires pages "
                                                                  "instead of remapping rows)")
    a100 = _judge(health_clauses.ROW_REMAPPING, _real("a100_q_remapped_rows_pending_elided.txt")["health"])
    assert (a100.outcome.value, a100.message) == ("failed", "remapped rows: 1 correctable, 0 uncorrectable, "
                                                            "pending yes, failure no")


def test_a_vgpu_guest_is_judged_where_it_can_be_and_says_why_not_elsewhere():
    guest = _real("grid_v100d_8c_vgpu_guest_q_535.txt")
    power = _judge(health_clauses.POWER_LIMIT, guest["health"], guest["device_id"])
    assert (power.outcome.value, power.message) == (
        "not_measured", "not measured: NVML gives no enforced or default power limit for this GPU")
    assert _judge(health_clauses.ECC, guest["health"]).outcome.value == "passed"
    assert _judge(health_clauses.ROW_REMAPPING, guest["health"]).message.startswith("retired pages pending: no")


@pytest.mark.parametrize("name, message", [
    ("rtx_a6000_q_ecc_disabled_537_wddm.txt", "enforced power limit 300 W under load, default 300 W, NVML's limit "
                                              "constraints 100-300 W; published 300 W (RTX A6000)"),
    ("v100_pcie_32gb_q_driver410_microway.txt", "enforced power limit 250 W under load, default 250 W, NVML's limit "
                                                "constraints 100-250 W; published 250 W (Tesla V100 PCIe 32GB)"),
])
def test_real_power_limits_pass_against_the_cards_own_default_and_constraints(name, message):
    card = _real(name)
    check = _judge(health_clauses.POWER_LIMIT, card["health"], card["device_id"])
    assert (check.outcome.value, check.message) == ("passed", message)


# Constructed (no real output of one was at hand): an H100 NVL (0x2321, published 350-400 W) its maker ships at a
# default of 330 W of its 200-400 W range; NVML's figures as such a card would give them.
NVL_330 = {"power_limit_enforced_w": 330.0, "power_limit_default_w": 330.0, "power_limit_min_w": 200.0,
           "power_limit_max_w": 400.0}


def test_a_configurable_tdp_card_below_the_tables_figure_is_judged_on_its_own_limits():
    check = _judge(health_clauses.POWER_LIMIT, NVL_330, "2321")
    assert (check.outcome.value, check.message) == ("passed", "enforced power limit 330 W under load, default 330 W, "
                                                              "NVML's limit constraints 200-400 W; published 350-400 W "
                                                              "(H100 NVL)")


def test_an_older_recording_without_constraints_is_judged_as_before_and_says_so():
    old = {"power_limit_enforced_w": 280.0, "power_limit_default_w": 280.0}  # 80 % of the range's low end
    check = _judge(health_clauses.POWER_LIMIT, old, "2321")
    assert check.outcome.value == "failed" and check.message.endswith("is published at 350-400 W: 80% of 350 W")
    assert check.details["power_limit_constraints"].startswith("not in the recording")


@pytest.mark.parametrize("change, end", [
    ({"power_limit_enforced_w": 250.0}, "capped to 76% of the default"),
    ({"power_limit_default_w": 450.0, "power_limit_enforced_w": 450.0},
     "the default limit 450 W is outside them; the enforced limit 450 W is outside them (NVML contradicts itself)"),
    ({"power_limit_max_w": 290.0, "power_limit_default_w": 290.0, "power_limit_enforced_w": 290.0},
     "this card cannot be set above 83% of 350 W"),
])
def test_a_capped_or_contradictory_limit_still_fails_with_constraints(change, end):
    check = _judge(health_clauses.POWER_LIMIT, {**NVL_330, **change}, "2321")
    assert check.outcome.value == "failed" and check.message.endswith(end), check.message


def test_nvml_health_records_the_limit_constraints_and_ecc_mode(monkeypatch):
    """nvml._health against a stand-in pynvml (no GPU here): the new fields in watts and 0/1, None unsupported."""
    class NVMLError(Exception):
        pass

    def unsupported(*_):
        raise NVMLError("Not Supported")

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0, nvmlDeviceGetRemappedRows=lambda h: (0, 0, 0, 0),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 300000, nvmlDeviceGetPowerManagementDefaultLimit=lambda h: 300000,
        nvmlDeviceGetPowerManagementLimitConstraints=lambda h: [100000, 300000],
        nvmlDeviceGetEccMode=lambda h: [0, 0], nvmlDeviceGetTotalEccErrors=unsupported)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    health = nvml._health(fake, object())
    assert {k: health[k] for k in ("power_limit_min_w", "power_limit_max_w", "ecc_mode_current", "ecc_mode_pending",
                                   "ecc_volatile_uncorrected")} == {
        "power_limit_min_w": 100.0, "power_limit_max_w": 300.0, "ecc_mode_current": 0, "ecc_mode_pending": 0,
        "ecc_volatile_uncorrected": None}
    fake.nvmlDeviceGetEccMode = fake.nvmlDeviceGetPowerManagementLimitConstraints = unsupported
    health = nvml._health(fake, object())
    assert (health["ecc_mode_current"], health["power_limit_min_w"], health["power_limit_max_w"]) == (None, None, None)


def test_ecc_off_in_an_nvml_recording_rejects_the_host(tmp_path):
    off = {"ecc_mode_current": 0, "ecc_mode_pending": 0, "ecc_volatile_uncorrected": None, "remapped_rows": None,
           "retired_pages_pending": None}
    contract = ("gpuaccept: 1\nvendor: V\ngpus: {count: 4}\nutilisation: {min_percent: 80, duration: '1.5 s', "
                "warmup: '1 s', workload: ['train-job']}\nhealth: {ecc: true}\n")
    judged = judge(contract, {"train-job": Output("training\n", seconds=1.5)}, tmp_path,
                   nvml=option_path(recording(tmp_path, health={2: off})))
    ecc = {c.subject: c for c in judged.of("health.ecc")}
    assert ecc["GPU2"].outcome.value == "failed" and ecc["GPU2"].message.startswith("ECC is disabled on GPU2")
    assert ecc["GPU0"].outcome.value == "passed" and judged.verdict != "accepted"


# ---------------------------------------------------------------- a slice of a node, a VGA-class card, a vGPU guest

SLICE = "gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\n  model: H100 SXM5\n"
HIDDEN = ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0"]


def _slice(reading: dict) -> None:
    """What a container given GPUs 4-7 of the 8-GPU node sees: NVML and CUDA list those four, numbered 0-3."""
    reading["gpus"] = [{**g, "index": n} for n, g in enumerate(reading["gpus"][4:])]
    buses = reading["cuda_devices"]["bus_ids"][4:]
    reading["cuda_devices"].update(count=4, bus_ids=buses, visible_devices=None)




def test_an_honest_4_of_8_slice_is_accepted_naming_the_others(tmp_path):
    pci_tree(tmp_path / "sys", recording="h100_sxm5_8gpu.json")  # the host's sysfs: all eight
    judged = judge(SLICE.format(count=4), {}, tmp_path, nvml=option_path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", _slice)),
                   sysfs=tmp_path / "sys")
    count = judged.of("gpus.count")[0]
    assert (count.outcome.value, count.measured) == ("passed", 4)
    assert count.message == ("4 GPUs found, contract says 4; the PCI bus in sysfs also lists 4 NVIDIA GPU function(s) "
                             f"NVML does not ({', '.join(HIDDEN)}): GPUs of this machine given to others (a slice), "
                             "information, not judged")
    assert {c.outcome.value for c in judged.of("gpus.identity")} == {"passed"}
    assert judged.verdict == "accepted", [(c.clause, c.message) for c in judged.checks]


def test_a_slice_is_still_held_to_the_contracts_count(accept, tmp_path):
    """A whole run, rejected."""
    run = accept(SLICE.format(count=8), staged_recording(tmp_path, "h100_sxm5_8gpu.json", _slice),
                 pci_tree(tmp_path / "sys", recording="h100_sxm5_8gpu.json"))
    count = run.checks("gpus.count")[0]
    assert (count["outcome"], count["measured"]) == ("failed", 4)
    assert count["message"].startswith("4 GPUs found, contract says 8; the PCI bus in sysfs also lists 4")
    assert run.json["verdict"] == "rejected"


def test_nvml_and_cuda_disagreeing_on_the_count_fails(tmp_path):
    def fewer(reading):
        _slice(reading)
        reading["cuda_devices"].update(count=3, bus_ids=reading["cuda_devices"]["bus_ids"][:3],
                                       visible_devices="0,1,2")
    pci_tree(tmp_path / "sys", recording="h100_sxm5_8gpu.json")
    judged = judge(SLICE.format(count=4), {}, tmp_path, nvml=option_path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", fewer)),
                   sysfs=tmp_path / "sys")
    assert judged.of("gpus.count")[0].message == ("4 GPUs found, contract says 4; but NVML lists 4 and CUDA in this "
                                                  "run sees 3 (CUDA_VISIBLE_DEVICES='0,1,2')")


@pytest.mark.parametrize("pci_class, gpu", [("0x030000", True), ("0x030200", True), ("0x068000", False),
                                            ("0x040300", False), ("0x030000", True)])
def test_vga_and_3d_controllers_are_gpus_bridges_and_audio_are_not(pci_class, gpu):
    assert is_nvidia_gpu("0x10de", pci_class) is gpu
    assert is_nvidia_gpu("0x8086", pci_class) is False


def _vga(root: Path, recording: str) -> str:
    """The recording's GPUs in class VGA (0x030000), as an RTX A6000 lists itself (constructed sysfs)."""
    arg = pci_tree(root, recording=recording)
    for folder in (root / "bus" / "pci" / "devices").iterdir():
        if (folder / "class").read_text().strip() == "0x030200":
            (folder / "class").write_text("0x030000\n")
    return arg


def test_vga_class_gpus_are_listed_from_sysfs(tmp_path):
    _vga(tmp_path, "h100_sxm5_4gpu.json")
    reading = read_pci_devices(tmp_path, {})
    assert len(reading["nvidia_gpus"]) == 4  # the four GPUs; the NVSwitches (bridges) are not


def test_a_host_of_vga_class_gpus_is_accepted(tmp_path):
    _vga(tmp_path / "sys", "h100_sxm5_4gpu.json")
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  count: 4\n  model: H100\n", {}, tmp_path,
                   nvml="h100_sxm5_4gpu.json", sysfs=tmp_path / "sys")
    assert judged.verdict == "accepted", [(c.clause, c.message) for c in judged.checks]


def _vgpu_guest(tmp_path: Path) -> tuple[str, str]:
    """An NVML state of the real vGPU guest's figures (grid_v100d_8c_vgpu_guest_q_535.txt: name, bus, device ID
    0x1db6, 8192 MiB, no serial, MIG off; UUID as printed), with its PCI function in sysfs (constructed)."""
    guest = _real("grid_v100d_8c_vgpu_guest_q_535.txt")
    reading = {"hostname": "vgpu-guest", "driver": "535.216.01", "cuda": "12.2", "error": None,
               "gpus": [{"index": 0, "name": guest["name"], "uuid": "GPU-57abc772-1dd3-11b2-8fae-e31710b8f307",
                         "serial": "", "memory_total_bytes": 8192 * 2**20, "pci_bus_id": guest["bus_id"],
                         "pci_device_id": "0x1db6", "mig_mode": 0, "nvlinks": [],
                         "nvlink_error": "NVMLError_NotSupported: Not Supported"}],
               "cuda_devices": {"count": 1, "bus_ids": ["0000:02:00.0"], "error": None, "visible_devices": None}}
    path = tmp_path / "nvml-vgpu.json"
    path.write_text(json.dumps(reading))
    folder = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:02:00.0"
    folder.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x1db6"), ("class", "0x030000")):
        (folder / name).write_text(value + "\n")
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    return f"--gpuaccept-nvml={path}", f"--gpuaccept-sysfs={tmp_path / 'sys'}"


def test_a_vgpu_guest_is_counted_identified_and_accepted(accept, tmp_path):
    """A whole run, accepted."""
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 1\n  memory: 8 GB\n", *_vgpu_guest(tmp_path))
    assert run.result.ret in (0, 1), run.result.stdout.str()[-2000:]
    checks = {c["clause"]: c for c in run.checks()}
    assert (checks["gpus.count"]["outcome"], checks["gpus.count"]["message"]) == ("passed", "1 GPUs found, contract says 1")
    assert checks["gpus.memory"]["outcome"] == "passed"
    identity = checks["gpus.identity"]
    assert (identity["outcome"], identity["measured"]) == ("passed", "0x1db6")
    assert "(Tesla V100 PCIe 32GB, in a vGPU guest as profile 'GRID V100D-8C')" in identity["message"]
    assert run.json["verdict"] == "accepted"


@pytest.mark.parametrize(("device", "name", "profile_of"), [
    ("1db6", "GRID V100D-8C", True),  # the real guest above: V100 PCIe 32GB's D profiles
    ("20b1", "NVIDIA A100-40C", True),  # the whole A100 40GB as one C profile
    ("1eb8", "GRID T4-16Q", True),
    ("20b1", "GRID A10-24Q", False),  # an A10 profile on an A100 is a rename, not a profile
    ("26b5", "NVIDIA L40S-48C", False),  # an L40S profile on an L40
    ("1db6", "Tesla V100-PCIE-32GB", False),  # a plain name is no profile (answers_to judges it)
])
def test_a_vgpu_profile_name_is_accepted_only_for_its_own_board(device, name, profile_of):
    model = by_device_id(device)
    assert model is not None and vgpu_of(model, name) is profile_of


# ---------------------------------------------------------------- a configurable-TDP card (issue 38)

# An H100 NVL (0x2321) is published at 350-400 W, configurable (the H100 datasheet; shared/spec/gpu-figures.md).
# CONSTRUCTED readings (no real nvidia-smi -q of an H100 NVL was found): the card at 310 W, as issue 38's honest host
# shipped it, with NVML's constraints, and as a recording made before the constraints were read.
NVL_310 = {"power_limit_enforced_w": 310.0, "power_limit_default_w": 310.0, "power_limit_min_w": 200.0,
           "power_limit_max_w": 310.0}


def test_an_h100_nvl_at_its_310_w_default_is_judged_against_its_published_range():
    check = _judge(health_clauses.POWER_LIMIT, NVL_310, "2321")
    assert check.outcome.value == "passed", check.message
    assert check.message == ("enforced power limit 310 W under load, default 310 W, NVML's limit constraints 200-310 W; "
                             "published 350-400 W (H100 NVL)")
    old = _judge(health_clauses.POWER_LIMIT, {**NVL_310, "power_limit_min_w": None, "power_limit_max_w": None}, "2321")
    assert old.outcome.value == "passed", old.message


def test_an_h100_nvl_capped_below_its_published_range_still_fails():
    """A shim setting the card's own maximum to 250 W: 71 % of the range's low end, under 85 %."""
    capped = {**NVL_310, "power_limit_enforced_w": 250.0, "power_limit_default_w": 250.0, "power_limit_max_w": 250.0}
    check = _judge(health_clauses.POWER_LIMIT, capped, "2321")
    assert check.outcome.value == "failed"
    assert check.message.endswith("but a H100 NVL (PCI device 0x2321) is published at 350-400 W: this card cannot be set "
                                  "above 71% of 350 W")
