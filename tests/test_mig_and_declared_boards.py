"""Honest hosts the plugin refused (issue 38): an H100 sold as MIG slices, and modified 48 GB RTX 4090 boards the
contract declares. Each beside the frauds that must still fail: slices renamed to a bigger profile, more slices than
a GPU has, a GPU sold as slices with MIG off, and memory above what the contract declares.

The H100's MIG devices are the real ones of tests/data/mig (nvidia-smi's MIG table: GPU instance, memory), named as
NVML names them; the 4090s are the real nvidia-smi table of tests/data/smi. Judged in process (tests/judging.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import DATA, pci_tree
from judging import judge

from pytest_gpuaccept.contract import ContractError, parse_contract

MIG_TABLE = DATA / "mig" / "h100_80gb_all_balanced_nvidia_smi_535.txt"
# The GPU operator's all-balanced config for an H100 80GB, by the MIG devices' memory (the table gives no names)
PROFILES = {40320: "3g.40gb", 20096: "2g.20gb", 9984: "1g.10gb"}
ROW = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\d+MiB /\s+(\d+)MiB")


def mig_devices(table: Path = MIG_TABLE) -> list[dict]:
    """NVML's MIG devices of GPU 0 as the real nvidia-smi table lists them: index, GPU instance, memory."""
    devices = []
    for line in table.read_text().splitlines():
        row = ROW.match(line)
        if row:
            gpu, gi, _ci, index, mib = (int(x) for x in row.groups())
            devices.append({"index": index, "name": f"NVIDIA H100 80GB HBM3 MIG {PROFILES[mib]}",
                            "uuid": f"MIG-5a6ef5fb-e69b-5021-a35e-ad178130{index:04d}", "memory_total_bytes": mib * 2**20,
                            "gpu_instance_id": gi})
            assert gpu == 0
    return devices


def h100_in_mig(tmp_path: Path, change=lambda gpu: None) -> Path:
    """The H100 of the table (81559 MiB, MIG on) as the one GPU of an NVML recording, its MIG devices read."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    gpu = reading["gpus"][0]
    gpu.update(memory_total_bytes=81559 * 2**20, mig_mode=1, mig_devices=mig_devices(), pci_bus_id="00000000:8B:00.0")
    change(gpu)
    reading["gpus"] = [gpu]
    reading["cuda_devices"] = {"count": 4, "bus_ids": ["0000:8b:00.0"], "error": None, "visible_devices": None}
    path = tmp_path / "nvml-h100-mig.json"
    path.write_text(json.dumps(reading))
    return path


def contract(profile: str = "1g.10gb", count: int = 2, extra: str = "") -> str:
    return f"gpus: {{count: 1, mig: {{profile: '{profile}', count: {count}}}}}\n{extra}"


def judged(tmp_path: Path, text: str, nvml: Path):
    pci_tree(tmp_path / "sys", recording=nvml)
    return judge("gpuaccept: 1\nvendor: V\n" + text, {}, tmp_path, nvml=nvml, sysfs=tmp_path / "sys")


def test_an_h100_sold_as_mig_slices_is_accepted_slice_by_slice(tmp_path):
    result = judged(tmp_path, contract(), h100_in_mig(tmp_path))
    mig, identity = result.one("gpus.mig", "host"), result.one("gpus.identity", "GPU0")
    assert result.verdict == "accepted", [c.message for c in result.checks if not c.passed]
    assert (mig.measured, mig.unit, mig.required) == (2, "MIG devices", ">= 2 x 1g.10gb")
    assert mig.message == "2 MIG devices of profile 1g.10gb, at least 2 sold (GPU0)"
    assert mig.details["sources"] == ["NVML MIG devices", "the profile's slices and memory", "the model table"]
    assert mig.details["mig_devices"] == ["GPU0: 3g.40gb (42.28 GB)", "GPU0: 2g.20gb (21.07 GB)",
                                          "GPU0: 1g.10gb (10.47 GB)", "GPU0: 1g.10gb (10.47 GB)"]
    assert "MIG on, as the contract's gpus.mig sells it" in identity.message
    assert result.one("gpus.count", "host").passed  # CUDA counts MIG devices, NVML GPUs: not compared under gpus.mig


def test_fewer_slices_than_sold_fail_with_what_there_is(tmp_path):
    check = judged(tmp_path, contract("1g.10gb", 3), h100_in_mig(tmp_path)).one("gpus.mig", "host")
    assert (check.outcome.value, check.measured) == ("failed", 2)


def test_a_1g_5gb_slice_renamed_1g_10gb_fails_on_its_memory(tmp_path):
    """A100 40GB 1g.5gb slices (4864 MiB) named as 1g.10gb: the name is NVML's, the memory is what it holds."""
    def shrunk(gpu):
        gpu["mig_devices"][3]["memory_total_bytes"] = 4864 * 2**20
    check = judged(tmp_path, contract(), h100_in_mig(tmp_path, shrunk)).one("gpus.mig", "host")
    assert check.outcome.value == "failed"
    assert "GPU0 MIG device 3 (1g.10gb) has 5.1 GB (NVML): a 1g.10gb has 10 GB" in check.message


def test_more_slices_than_a_gpu_has_fail(tmp_path):
    """Eight 1g.10gb on one H100: a GPU has 7 slices, and 8 x 9984 MiB fits 81559 MiB only as a claim."""
    def eight(gpu):
        gpu["mig_devices"] = [dict(gpu["mig_devices"][2], index=i, gpu_instance_id=9 + i,
                                   uuid=f"MIG-5a6ef5fb-e69b-5021-a35e-ad17813000{i:02d}") for i in range(8)]
    check = judged(tmp_path, contract("1g.10gb", 8), h100_in_mig(tmp_path, eight)).one("gpus.mig", "host")
    assert check.outcome.value == "failed"
    assert "GPU0's MIG devices add up to 8 GPU slices: a GPU has 7" in check.message


def test_a_whole_gpu_sold_as_slices_and_slices_of_another_gpu_fail(tmp_path):
    def off(gpu):
        gpu.update(mig_mode=0, mig_devices=None)
    result = judged(tmp_path, contract(), h100_in_mig(tmp_path, off))
    assert result.verdict == "rejected"
    assert "GPU0's MIG mode is off" in result.one("gpus.mig", "host").message
    assert "MIG mode is off for GPU0: the contract sells it as MIG slices (1g.10gb)" in result.one("gpus.identity", "GPU0").message

    def foreign(gpu):
        gpu["mig_devices"][2]["name"] = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    check = judged(tmp_path / "b", contract(), h100_in_mig(tmp_path, foreign)).one("gpus.mig", "host")
    assert check.outcome.value == "failed"
    assert ("GPU0 MIG device 2 is named 'NVIDIA A100-SXM4-80GB MIG 1g.10gb': not 'NVIDIA H100 80GB HBM3' with a MIG "
            "profile") in check.message


def test_a_gpu_in_mig_mode_without_the_contract_still_fails_identity(tmp_path):
    result = judged(tmp_path, "gpus: {count: 1}\n", h100_in_mig(tmp_path))
    assert "MIG mode is on for GPU0: it is partitioned into instances" in result.one("gpus.identity", "GPU0").message


@pytest.mark.parametrize("extra, problem", [
    ("p2p: {min_bandwidth: '1 GB/s'}\n", "vendor.yaml:4: p2p: judges whole GPUs, and gpus.mig sells MIG slices: a "
     "MIG device has no peer access or NVLink to another"),
    ("dcgm: {level: 1}\n", "vendor.yaml:4: dcgm: judges whole GPUs, and gpus.mig sells MIG slices"),
    ("", None),
])
def test_sections_mig_makes_meaningless_are_refused_before_anything_runs(extra, problem):
    text = "gpuaccept: 1\nvendor: V\n" + contract(extra=extra)
    if problem is None:
        assert parse_contract(text, "vendor.yaml")
        return
    with pytest.raises(ContractError) as raised:
        parse_contract(text, "vendor.yaml")
    assert any(p.startswith(problem) for p in raised.value.problems), raised.value.problems


@pytest.mark.parametrize("mig, problem", [
    ("{profile: '10gb', count: 1}", "profile: expected a MIG profile as NVIDIA names it, such as '1g.10gb' or "
                                    "'3g.40gb', got '10gb'"),
    ("{profile: '8g.80gb', count: 1}", "profile: expected a MIG profile"),
    ("{profile: '1g.10gb'}", "expected exactly the keys profile and count"),
    ("{profile: '1g.10gb', count: 0}", "count: expected a whole number of MIG devices from 1 to 448, got 0"),
    ("'1g.10gb'", "expected a mapping such as {profile: '1g.10gb', count: 7}"),
])
def test_a_mig_clause_that_names_no_profile_is_a_usage_error(mig, problem):
    with pytest.raises(ContractError) as raised:
        parse_contract(f"gpuaccept: 1\nvendor: V\ngpus:\n  mig: {mig}\n", "vendor.yaml")
    assert any(problem in p and p.startswith("vendor.yaml:4: gpus.mig: ") for p in raised.value.problems), \
        raised.value.problems


def test_gpus_memory_beside_mig_is_refused():
    with pytest.raises(ContractError) as raised:
        parse_contract("gpuaccept: 1\nvendor: V\ngpus: {memory: '80 GB', mig: {profile: '1g.10gb', count: 1}}\n",
                       "vendor.yaml")
    assert any("gpus.memory: with gpus.mig the memory sold is each MIG device's" in p for p in raised.value.problems)


# ------------------------------------------------------------------ a modified board, declared

SMI_4090 = DATA / "smi" / "rtx4090_48gb_modified_595.txt"


def rtx4090_48gb(tmp_path: Path) -> Path:
    """The two boards of the real table: NVIDIA GeForce RTX 4090, 49140 MiB, at 85:00.0 and 86:00.0."""
    rows = re.findall(r"\|\s+(\d)\s+(NVIDIA GeForce RTX 4090)\s+\w+\s+\|\s+(\S+) ", SMI_4090.read_text())
    mib = [int(x) for x in re.findall(r"/\s+(\d+)MiB", SMI_4090.read_text())]
    gpus = [{"index": int(i), "name": name, "uuid": f"GPU-4090{i}aaa-0000-0000-0000-000000000000", "serial": "",
             "memory_total_bytes": mib[int(i)] * 2**20, "pci_bus_id": bus, "pci_device_id": "0x2684", "mig_mode": None,
             "nvlinks": None, "nvlink_error": "NotSupported", "persistence_mode": 0}
            for i, name, bus in rows]
    assert len(gpus) == 2 and mib == [49140, 49140]
    reading = {"hostname": "rig", "driver": "595.71.05", "cuda": "13.2", "error": None, "gpus": gpus,
               "cuda_devices": {"count": 2, "bus_ids": ["0000:85:00.0", "0000:86:00.0"], "error": None,
                                "visible_devices": None}}
    path = tmp_path / "nvml-4090-48gb.json"
    path.write_text(json.dumps(reading))
    return path


def test_a_modified_48gb_4090_declared_in_the_contract_is_accepted_and_said_so(tmp_path):
    result = judged(tmp_path, "gpus: {count: 2, memory: '48 GB', modified_memory: '48 GB'}\n", rtx4090_48gb(tmp_path))
    assert result.verdict == "accepted", [c.message for c in result.checks if not c.passed]
    memory = result.of("gpus.memory")[0]
    assert memory.measured == 51.527  # 49140 MiB
    assert memory.message.endswith("(a modified board, as the contract declares: 48 GB; a GeForce RTX 4090 is "
                                   "published with 24 GB)"), memory.message
    assert "the contract's modified_memory" in memory.details["sources"]


def test_the_same_boards_undeclared_stay_above_what_the_card_has(tmp_path):
    memory = judged(tmp_path, "gpus: {count: 2, memory: '48 GB'}\n", rtx4090_48gb(tmp_path)).of("gpus.memory")[0]
    assert memory.outcome.value == "failed" and "more than the card has" in memory.message


def test_memory_above_what_the_contract_declares_fails(tmp_path):
    memory = judged(tmp_path, "gpus: {count: 2, memory: '24 GB', modified_memory: '32 GB'}\n",
                    rtx4090_48gb(tmp_path)).of("gpus.memory")[0]
    assert memory.outcome.value == "failed"
    assert "more than the 32 GB the contract declares this modified GeForce RTX 4090 to have" in memory.message
