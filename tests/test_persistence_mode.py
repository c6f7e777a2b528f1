"""gpus.persistence_mode: NVML's persistence mode on for every GPU; a recording made before it was read is not measured.

The clause touched only clauses/gpus.py, the NVML probe's reading (one field) and the docs.
"""

import sys
import types
from pathlib import Path

from conftest import nvml_recording, staged_recording
from judging import judge

from pytest_gpuaccept.probes import nvml

CONTRACT = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n  persistence_mode: true\n"


def _modes(modes: dict[int, int | None]):
    def change(reading: dict) -> None:
        for gpu in reading["gpus"]:
            gpu["persistence_mode"] = modes.get(gpu["index"], 1)
    return change


def test_persistence_mode_off_on_one_gpu_fails_that_gpu(accept, fake_tools, tmp_path):
    run = accept(CONTRACT, staged_recording(tmp_path, "h100_sxm5_8gpu.json", _modes({3: 0})))
    checks = {c["subject"]: c for c in run.checks("gpus.persistence_mode")}
    assert sorted(checks) == [f"GPU{i}" for i in range(8)]
    assert checks["GPU3"]["outcome"] == "failed" and checks["GPU3"]["measured"] == "off"
    assert checks["GPU3"]["message"].startswith("GPU3 persistence mode is off")
    assert {checks[f"GPU{i}"]["outcome"] for i in range(8) if i != 3} == {"passed"}
    assert checks["GPU0"]["test"] == "suites/test_gpus.py::test_persistence_mode[GPU0]"
    assert checks["GPU0"]["required"] == "on" and checks["GPU0"]["unit"] is None
    assert run.json["verdict"] == "rejected"


def test_an_old_recording_without_the_mode_is_not_measured(tmp_path):
    judged = judge(CONTRACT, {}, tmp_path, nvml="h100_sxm5_8gpu.json")  # recorded before the mode was read
    checks = judged.of("gpus.persistence_mode")
    assert len(checks) == 8 and {c.outcome.value for c in checks} == {"not_measured"}
    assert "persistence mode is not in this NVML reading" in checks[0].message
    assert judged.verdict == "rejected"


def test_without_count_one_check_over_every_gpu(tmp_path):
    staged = Path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", _modes({})).split("=", 1)[1])
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  persistence_mode: true\n", {}, tmp_path, nvml=staged)
    [check] = judged.of("gpus.persistence_mode")
    assert (check.subject, check.outcome.value, check.measured) == ("GPUs", "passed", "on")


def test_false_or_absent_asks_for_nothing(accept, fake_tools):
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n  persistence_mode: false\n",
                 nvml_recording("h100_sxm5_8gpu.json"))
    assert run.checks("gpus.persistence_mode") == []
    assert "gpus.persistence_mode" in run.json["not_in_contract"]


def test_nvml_reads_the_mode_of_each_gpu(monkeypatch):
    """read_host against a stand-in pynvml (no GPU here): nvmlDeviceGetPersistenceMode's 1/0, None unsupported."""
    class NVMLError(Exception):
        pass

    def unsupported(*_):
        raise NVMLError("Not Supported")

    pci = types.SimpleNamespace(busId=b"00000000:18:00.0", pciDeviceId=0x233010DE)
    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "560.35.03", nvmlSystemGetCudaDriverVersion=lambda: 12060,
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetSerial=lambda h: "1",
        nvmlDeviceGetPciInfo=lambda h: pci, nvmlDeviceGetMigMode=unsupported, nvmlDeviceGetName=lambda h: "NVIDIA H100",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}", nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=1),
        nvmlDeviceGetPersistenceMode=lambda h: [1, 0][h] if h == 0 else unsupported())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_nvlinks", lambda *_: (None, "Not Supported"))
    monkeypatch.setattr(nvml, "_health", lambda *_: {})
    monkeypatch.setattr(nvml, "read_cuda_devices", lambda: None)
    reading = nvml.read_host()
    assert [g["persistence_mode"] for g in reading["gpus"]] == [1, None]
    assert [g.persistence_mode for g in nvml.parse_host(reading).gpus] == [1, None]
