"""The state of one acceptance session, kept in `config.stash` (never in globals)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from .measurements import GpuModels
from .models import by_device_id
from .models.pciids import with_pci_ids
from .probes import nvml, sysfs
from .session import NAMES_FILE, NVML_HOST_FILE, PCI_FILE
from .verdict import Check

if TYPE_CHECKING:  # the contract model imports the clause modules, which read the State
    from .contract import Contract
    from .probes._run import ToolRunner

__all__ = ["NAMES_FILE", "NVML_HOST_FILE", "STATE", "State", "now"]



STATE = pytest.StashKey["State"]()  # the session's State in config.stash, set only when a contract is given


@dataclass(eq=False)  # one per session: compared and hashed by identity
class State:
    """The session that runs: what a measurement may ask (session.Session), and what the plugin keeps of the run."""

    contract: Contract
    runner: ToolRunner
    report_path: Path
    json_path: Path
    evidence_dir: Path
    nvml_recording: Path | None
    is_controller: bool
    sys_root: Path = Path("/sys")
    started: str = field(default_factory=lambda: now())
    mode: str = "live"  # "simulated" with an NVML recording, "replay" from a bundle (results.md)
    foreign_code: list[str] = field(default_factory=list)  # shipped code or fixtures replaced at run time
    advice: list[str] = field(default_factory=list)  # warnings about the contract, shown, never failures
    # Judged checks by (clause, subject), each with the test that judged it (the report collects them).
    checks: dict[tuple[str, str], Check] = field(default_factory=dict)
    # What this session lists where a clause lists something other than this host's interfaces: a cluster's login
    # node lists its nodes (clauses/cluster.py gives that listing, plugin.py hands it here). None: this host's.
    listing: Callable[[State], dict[str, list[str]]] | None = None
    _parsed_host: tuple[dict[str, Any], nvml.Host] | None = field(default=None, repr=False, compare=False)
    _recorded_samples: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def host_reading(self) -> dict[str, Any]:
        """The NVML reading of this session (or the recording given with --gpuaccept-nvml)."""
        return self.runner.reading(NVML_HOST_FILE, self._take_nvml)

    def host(self) -> nvml.Host:
        """The NVML reading as typed data; an unreadable recording is a Host whose `error` says why."""
        reading = self.host_reading()
        if self._parsed_host is not None and self._parsed_host[0] is reading:
            return self._parsed_host[1]  # the same reading, parsed once (five fixtures ask)
        try:
            host = nvml.parse_host(reading)
        except ValueError as exc:
            host = nvml.Host(str(reading.get("hostname", "")), None, None, (), str(exc))
        self._parsed_host = (reading, host)
        return host

    def _recording(self) -> tuple[dict[str, Any] | None, str]:
        """The --gpuaccept-nvml file as a JSON object, or None and why it is not one."""
        assert self.nvml_recording is not None
        try:
            data = json.loads(self.nvml_recording.read_text())
        except (OSError, ValueError) as exc:
            return None, f"recorded NVML readings {self.nvml_recording} unreadable: {exc}"
        if not isinstance(data, dict):
            return None, f"recorded NVML readings {self.nvml_recording} unreadable: not a JSON object"
        return data, ""

    def _take_nvml(self) -> dict[str, Any]:
        if self.nvml_recording is None:
            return nvml.read_host()
        data, problem = self._recording()
        reading = data if data is not None else {"hostname": "", "driver": None, "cuda": None, "gpus": [],
                                                 "error": problem}
        reading["recorded"] = str(self.nvml_recording)
        # The sample series are not the host's identity: kept for the load (recorded_samples), and as evidence
        # in the samples file that load writes, not a second time in the host reading.
        self._recorded_samples = reading.pop(nvml.RECORDED_SAMPLES, None)
        return reading

    def recorded_samples(self) -> dict[str, Any]:
        """The NVML recording's utilisation samples (--gpuaccept-nvml): those read with the host reading, or
        read now where this process took its host reading from the evidence (an xdist worker)."""
        samples = self._recorded_samples
        if samples is None:
            data, problem = self._recording()
            if data is None:
                return {"error": problem}
            samples = data.get(nvml.RECORDED_SAMPLES)
        if samples is None:
            return {"error": "the NVML recording has no utilisation samples"}
        return samples if isinstance(samples, dict) else {"error": "the NVML recording's utilisation is not an object"}

    def _pci(self) -> dict[str, Any]:
        host = self.host()
        return self.runner.reading(PCI_FILE, lambda: with_pci_ids(sysfs.read_pci_devices(
            self.sys_root, {g.index: g.pci_bus_id for g in host.gpus if g.pci_bus_id})))

    def local_cpus(self) -> dict[int, str]:
        """The CPUs local to each GPU (its PCI function's local_cpulist in sysfs), by GPU index."""
        devices = self._pci().get("devices", {})
        return {int(i): str(d.get("local_cpulist") or "") for i, d in devices.items()}

    def gpu_models(self) -> GpuModels:
        """Each NVML GPU's PCI device ID from sysfs (vendor 0x10de, display class) and its model, and every
        NVIDIA GPU function sysfs lists."""
        host = self.host()
        reading = self._pci()
        ids: dict[int, str | None] = {}
        for gpu in host.gpus:
            entry = reading.get("devices", {}).get(str(gpu.index)) or {}
            nvidia = sysfs.is_nvidia_gpu(entry.get("vendor"), entry.get("class"))
            ids[gpu.index] = str(entry["device"]).lower().removeprefix("0x") if nvidia and entry.get("device") else None
        listed = reading.get("nvidia_gpus")
        return GpuModels(ids, {i: by_device_id(d) if d else None for i, d in ids.items()}, (PCI_FILE,),
                         None if listed is None else tuple(str(b) for b in listed), reading.get("pci_ids"))

    def listings(self) -> dict[str, list[str]]:
        """What the host lists ({"net": interfaces, "infiniband": RDMA devices}), once (or replayed), kept as
        evidence; where the session was given another `listing` (a cluster's login node: its nodes), that one."""
        if self.listing is not None:
            return self.listing(self)
        names = self.runner.reading(NAMES_FILE, lambda: sysfs.list_names(self.sys_root))
        return {kind: list(names.get(kind, [])) for kind in ("net", "infiniband")}

    def function(self, kind: str, name: str) -> tuple[sysfs.Function, str]:
        """What stands behind an interface ("net") or RDMA device ("infiniband"), a bond's members too; evidence file."""
        file = f"sysfs-{kind}-{name}-function.json"
        reading = self.runner.reading(file, lambda: sysfs.read_function(self.sys_root, kind, name))
        members = {m: self.function(kind, m)[0] for m in reading.get("members") or () if sysfs.SAFE_NAME.match(m)}
        return sysfs.parse_function(reading, members), file

    def ib_device(self, device: str) -> tuple[dict[str, Any], str]:
        """The sysfs reading of one RDMA device's ports, and its evidence file name."""
        name = f"sysfs-infiniband-{device}.json"
        return self.runner.reading(name, lambda: sysfs.read_ib_device(self.sys_root, device)), name




def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
