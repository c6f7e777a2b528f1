"""Every claim from two independent sources: each fraud a vendor could stage is rejected, naming both
sources; the same host telling the truth is accepted. Real H200 readings where a device machine recorded
them (tests/data/h200), constructed NVML recordings beside real sysfs layouts elsewhere."""

from __future__ import annotations

from pathlib import Path

from conftest import DATA, pci_tree, staged_recording

H200 = DATA / "h200"
GPUS_1 = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 1\n  model: H200\n  form_factor: sxm\n"
GPUS_8 = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n  model: H100 SXM5\n"


def real_sysfs(root: Path) -> str:
    """The H200 machine's PCI bus as `sysfs-pci-list.txt` recorded it: every function's vendor, device, class."""
    for line in (H200 / "sysfs-pci-list.txt").read_text().splitlines():
        bus, *fields = line.split()
        folder = root / "bus" / "pci" / "devices" / bus
        folder.mkdir(parents=True)
        for field in fields:
            name, _, value = field.partition("=")
            if name in ("vendor", "device", "class"):
                (folder / name).write_text(value + "\n")
    (root / "class" / "net").mkdir(parents=True)
    return f"--gpuaccept-sysfs={root}"


def identity(run) -> dict[str, dict]:
    return {c["subject"]: c for c in run.checks("gpus.identity")}


def test_a_real_h200_is_who_nvml_sysfs_and_cuda_say(accept, tmp_path):
    run = accept(GPUS_1, f"--gpuaccept-nvml={H200 / 'nvml-h200.json'}", real_sysfs(tmp_path / "sys"))
    check = identity(run)["GPU0"]
    assert (check["outcome"], check["measured"]) == ("passed", "0x2335"), check["message"]
    assert check["message"] == ("GPU0: NVML 'NVIDIA H200' at 0000:00:06.0, sysfs PCI device 0x2335 (H200 SXM 141GB), "
                                "visible to CUDA, MIG off")
    assert run.json["verdict"] == "accepted"


def test_a_gpu_hidden_from_cuda_by_cuda_visible_devices_fails(accept, tmp_path):
    """Recorded for real on the H200 with CUDA_VISIBLE_DEVICES= : NVML lists the GPU, CUDA cannot start."""
    run = accept(GPUS_1, f"--gpuaccept-nvml={H200 / 'nvml-h200-cuda-visible-devices-empty.json'}",
                 real_sysfs(tmp_path / "sys"))
    check = identity(run)["GPU0"]
    assert check["outcome"] == "failed" and check["measured"] == "0x2335"
    assert check["message"] == "CUDA in this run cannot use GPU0: cuInit returned CUDA error 100, CUDA_VISIBLE_DEVICES=''"
    assert run.json["verdict"] == "rejected"


def test_one_of_eight_gpus_hidden_from_cuda_is_named(accept, tmp_path):
    def hide(reading):
        reading["cuda_devices"].update(count=7, bus_ids=reading["cuda_devices"]["bus_ids"][:3] +
                                       reading["cuda_devices"]["bus_ids"][4:], visible_devices="0,1,2,4,5,6,7")
    run = accept(GPUS_8, staged_recording(tmp_path, "h100_sxm5_8gpu.json", hide))
    failed = {s: c["message"] for s, c in identity(run).items() if c["outcome"] != "passed"}
    assert list(failed) == ["GPU3"]
    assert failed["GPU3"].startswith("GPU3 (0000:48:00.0) is listed by NVML but not visible to CUDA in this run: "
                                     "CUDA sees 7 device(s) at 0000:18:00.0")
    assert failed["GPU3"].endswith("CUDA_VISIBLE_DEVICES='0,1,2,4,5,6,7'")


def test_mig_partitioned_gpus_fail(accept, tmp_path):
    def mig(reading):
        reading["gpus"][5]["mig_mode"] = 1
    run = accept(GPUS_8, staged_recording(tmp_path, "h100_sxm5_8gpu.json", mig))
    failed = {s: c["message"] for s, c in identity(run).items() if c["outcome"] != "passed"}
    assert failed == {"GPU5": "MIG mode is on for GPU5: it is partitioned into instances, not one whole GPU"}


def test_one_gpu_presented_eight_times_fails_on_every_source(accept, tmp_path):
    """A shim NVML that answers eight indices with the same GPU: one UUID, serial and bus ID; the PCI bus has one."""
    def clone(reading):
        reading["gpus"] = [{**reading["gpus"][0], "index": i} for i in range(8)]
        reading["cuda_devices"].update(count=1, bus_ids=["0000:18:00.0"])
    run = accept(GPUS_8, staged_recording(tmp_path, "h100_sxm5_8gpu.json", clone),
                 pci_tree(tmp_path / "sys", recording="h100_sxm5_4gpu.json"))
    checks = identity(run)
    assert {c["outcome"] for c in checks.values()} == {"failed"}
    message = checks["GPU1"]["message"]
    assert "NVML gives GPU1 the same UUID 'GPU-h100-00aaaaaaa-0000-0000-0000-000000000000' as GPU0, GPU2" in message
    assert "the same serial '1652322000000'" in message and "the same PCI bus ID '00000000:18:00.0'" in message
    assert "NVML lists 8 GPUs, the PCI bus in sysfs has 4 NVIDIA GPU functions" in message
    assert run.checks("gpus.count")[0]["outcome"] == "passed"  # NVML's count alone would have passed


def test_an_h100_pcie_named_like_an_sxm5_fails_on_its_device_id(accept, tmp_path):
    """NVML (or a shim) names the cards 'NVIDIA H100 80GB HBM3'; the PCI functions are 0x2331, H100 PCIe."""
    run = accept(GPUS_8 + "  form_factor: sxm\n", f"--gpuaccept-nvml={DATA / 'nvml' / 'h100_sxm5_8gpu.json'}",
                 pci_tree(tmp_path / "sys", "0x2331"))
    check = identity(run)["GPU0"]
    assert check["outcome"] == "failed"
    assert check["message"] == "NVML says GPU0 is PCI device 0x2330, sysfs says 0x2331 at 0000:18:00.0"
    assert run.checks("gpus.form_factor")[0]["message"] == ("GPU0 is PCI device 0x2331, a H100 PCIe (pcie), "
                                                            "not sxm as contracted")


def test_a_name_that_is_not_its_device_ids_model_fails(accept, tmp_path):
    """A shim NVML that renames cards and also reports the device ID sysfs has: the name gives it away."""
    def rename(reading):
        for gpu in reading["gpus"]:
            gpu["name"], gpu["pci_device_id"] = "NVIDIA H100 80GB HBM3", "0x20b0"
    run = accept(GPUS_8, staged_recording(tmp_path, "a100_sxm4_40gb_8gpu.json", rename))
    check = identity(run)["GPU0"]
    assert check["message"] == ("NVML names GPU0 'NVIDIA H100 80GB HBM3', but sysfs says PCI device 0x20b0 at "
                                "0000:18:00.0, a A100 SXM4 40GB (NVML name 'NVIDIA A100-SXM4-40GB')")


def test_nvml_without_a_pci_function_behind_it_fails(accept, tmp_path):
    run = accept(GPUS_8, f"--gpuaccept-nvml={DATA / 'nvml' / 'h100_sxm5_8gpu.json'}",
                 pci_tree(tmp_path / "sys", recording="h100_sxm5_4gpu.json"))
    failed = {s: c["message"] for s, c in identity(run).items() if c["outcome"] != "passed"}
    assert len(failed) == 8  # every GPU: NVML lists 8 where the PCI bus has 4
    assert failed["GPU0"] == "NVML lists 8 GPUs, the PCI bus in sysfs has 4 NVIDIA GPU functions (0000:18:00.0, " \
        "0000:28:00.0, 0000:38:00.0, 0000:48:00.0)"
    assert "NVML puts GPU4 ('NVIDIA H100 80GB HBM3') at PCI 0000:58:00.0, where sysfs has no NVIDIA GPU function" \
        in failed["GPU4"]


def test_a_recording_without_cudas_word_is_not_measured(accept, tmp_path):
    def old(reading):
        del reading["cuda_devices"]
    run = accept(GPUS_8, staged_recording(tmp_path, "h100_sxm5_8gpu.json", old))
    check = identity(run)["GPU0"]
    assert check["outcome"] == "not_measured"
    assert check["message"] == "not measured: GPU0: CUDA's device list could not be read, so NVML's word stands alone"
