"""NVML (nvidia-ml-py): what the driver says about the host and its GPUs.

Readings are plain dicts so that they can be saved as evidence and replayed; `parse_host` turns one
into typed data. `pynvml` is imported here only, and only when a reading is taken.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from . import ParseError
from .sysfs import sysfs_bus_id


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    uuid: str
    serial: str
    memory_total_bytes: int
    pci_bus_id: str = ""
    pci_device_id: str | None = None  # NVML's own claim ("2330"); sysfs is the second source
    mig_mode: int | None = None  # current MIG mode: 0 off, 1 on, None not supported (no MIG on this model)
    nvlinks: tuple[NvLink, ...] | None = None  # None: not read (an older recording)
    nvlink_error: str | None = None  # why NVML gave no per-link state (NotSupported on a PCIe card)
    persistence_mode: int | None = None  # 1 on, 0 off; None: not read (an older recording) or not supported
    fabric: Fabric | None = None  # the GPU's place in a multi-node NVLink domain; None: not read, or no fabric
    mig_devices: tuple[MigDevice, ...] | None = None  # the MIG devices of a GPU in MIG mode; None: not read, MIG off


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device (a compute instance in its GPU instance) as NVML gives it: its name ends with its profile
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), its UUID begins MIG-, its memory is the GPU instance's."""

    index: int  # the MIG device's index on its GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    name: str
    uuid: str
    memory_total_bytes: int
    gpu_instance_id: int | None


@dataclass(frozen=True, slots=True)
class Fabric:
    """nvmlDeviceGetGpuFabricInfoV: the GPU's registration with the NVLink fabric of a multi-node NVLink domain
    (GB200/GB300 NVL72), as NVML gives it: `state` and `status` are NVML's numbers (FABRIC_STATES, 0 = success)."""

    state: int  # NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed
    status: int  # an nvmlReturn_t: 0 (NVML_SUCCESS) where the registration succeeded
    cluster_uuid: str  # the fabric's cluster UUID, the same on every GPU of one NVLink domain
    clique_id: int  # the clique (the GPUs that reach each other over NVLink) within that domain
    health_mask: int  # NVML_GPU_FABRIC_HEALTH_MASK_*: 2-bit fields (degraded bandwidth, route recovery, ...)


FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
FABRIC_COMPLETED = 3


@dataclass(frozen=True, slots=True)
class NvLink:
    link: int
    active: bool
    remote_bus_id: str | None  # the PCI function at the other end (a GPU, or an NVSwitch)


@dataclass(frozen=True, slots=True)
class CudaDevices:
    """What CUDA itself (the driver library, in a child process with this run's environment) can see."""

    count: int | None
    bus_ids: tuple[str, ...]  # sysfs form, lower case
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES as the run had it, shown, never parsed
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Host:
    """The host as NVML saw it; `error` is set (and the rest empty) when NVML could not be read."""

    hostname: str
    driver: str | None
    cuda: str | None
    gpus: tuple[Gpu, ...]
    error: str | None = None
    cuda_devices: CudaDevices | None = None  # None: not read (an older recording)
    recorded: str | None = field(default=None, compare=False)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# CUDA's own view, through the driver library (libcuda), run in a child process so that a hung driver is a
# timeout and the plugin's process never holds a CUDA context. Bus IDs as cuDeviceGetPCIBusId gives them.
_CUDA_DEVICES = r"""
import ctypes, json
out = {"count": None, "bus_ids": [], "error": None}
try:
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    if rc:
        out["error"] = "cuInit returned CUDA error %d" % rc
    else:
        n = ctypes.c_int(0)
        rc = cuda.cuDeviceGetCount(ctypes.byref(n))
        if rc:
            out["error"] = "cuDeviceGetCount returned CUDA error %d" % rc
        else:
            out["count"] = n.value
            for i in range(n.value):
                dev = ctypes.c_int(0)
                buf = ctypes.create_string_buffer(64)
                if cuda.cuDeviceGet(ctypes.byref(dev), i) == 0 and cuda.cuDeviceGetPCIBusId(buf, 64, dev) == 0:
                    out["bus_ids"].append(buf.value.decode())
except OSError as exc:
    out["error"] = "the CUDA driver library libcuda.so.1 could not be loaded: %s" % exc
print(json.dumps(out))
"""


def read_cuda_devices(timeout_s: float = 60.0) -> dict[str, Any]:
    """CUDA's device count and bus IDs as this run's processes see them (CUDA_VISIBLE_DEVICES applies)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _CUDA_DEVICES], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else \
            {"count": None, "bus_ids": [], "error": f"no answer (exit {done.returncode}): {done.stderr[-300:]}"}
    except subprocess.TimeoutExpired:
        result = {"count": None, "bus_ids": [], "error": f"CUDA did not answer within {timeout_s:g} s"}
    except ValueError as exc:
        result = {"count": None, "bus_ids": [], "error": f"unreadable answer: {exc}"}
    result["visible_devices"] = visible
    return result


PROGRESS_EVERY_S = 10.0  # a progress line this often; every LONG_PROGRESS_S for a load longer than LONG_LOAD_S
LONG_LOAD_S = 600.0
LONG_PROGRESS_S = 60.0
RECORDED_SAMPLES = "utilisation"  # the key of the sample series in a recording (docs/nvml-recording.md)
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def _nvlinks(pynvml: Any, handle: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Each NVLink's state and remote PCI function, as NVML gives them; (links, why none) on a card without."""
    links: list[dict[str, Any]] = []
    for link in range(NVLINK_MAX_LINKS):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError as exc:
            if link == 0:
                return [], f"{type(exc).__name__}: {exc}"
            break  # past the last link this GPU has
        remote = None
        if active:
            try:
                remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except (pynvml.NVMLError, AttributeError):
                remote = None
        links.append({"link": link, "active": active, "remote_bus_id": remote})
    return links, None


def _fabric(pynvml: Any, handle: Any) -> dict[str, Any] | None:
    """The GPU's fabric registration (nvmlDeviceGetGpuFabricInfoV, version 2: with the health mask), or None where
    the driver or the GPU has no fabric (NotSupported, or state NOT_SUPPORTED: not part of a multi-node domain)."""
    try:
        info = pynvml.c_nvmlGpuFabricInfoV_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, info)
    except (pynvml.NVMLError, AttributeError):
        return None
    if int(info.state) == 0:
        return None
    raw = bytes(info.clusterUuid).hex()
    return {"state": int(info.state), "status": int(info.status),
            "cluster_uuid": f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}",
            "clique_id": int(info.cliqueId), "health_mask": int(info.healthMask)}


# The health mask's fields (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*): (shift, width, what each bad value means). A 2-bit
# field reads 0 not supported, 1 true, 2 false; incorrect configuration 0 not supported, 1 none, 2.. the cause.
FABRIC_HEALTH = (
    (0, 0x3, {1: "bandwidth degraded"}),
    (2, 0x3, {1: "route recovery in progress"}),
    (4, 0x3, {1: "route unhealthy"}),
    (6, 0x3, {1: "access timeout recovery in progress"}),
    (8, 0xF, {2: "incorrect configuration: wrong system GUID", 3: "incorrect configuration: wrong chassis serial",
              4: "incorrect configuration: no partition", 5: "incorrect configuration: too few NVLinks",
              6: "incorrect configuration: incompatible GPU firmware", 7: "incorrect configuration: invalid location",
              8: "incorrect configuration: GPU state invalid"}),
)


def fabric_health_problems(mask: int) -> list[str]:
    """What the health mask flags as unhealthy ([] where nothing is): bandwidth degraded, routes recovering or
    unhealthy, a configuration the fabric manager refused."""
    return [bad[value] for shift, width, bad in FABRIC_HEALTH if (value := (mask >> shift) & width) in bad]


def parse_fabric(value: Any) -> Fabric | None:
    """A recording's `gpus[].fabric` (docs/nvml-recording.md), typed; None where it is absent or null."""
    if value is None:
        return None
    return Fabric(int(value["state"]), int(value["status"]), str(value["cluster_uuid"]), int(value["clique_id"]),
                  int(value["health_mask"]))


def cuda_version(number: int) -> str:
    """A CUDA driver version as nvmlSystemGetCudaDriverVersion and cuDriverGetVersion give it (12080) as NVML's
    reading shows it: `12.8`."""
    return f"{number // 1000}.{(number % 1000) // 10}"


def read_host() -> dict[str, Any]:
    """Take a reading of the host through NVML; never raises: a failure is recorded as `error`.

    The format is the one `--gpuaccept-nvml` reads (docs/nvml-recording.md).
    """
    reading: dict[str, Any] = {"hostname": socket.gethostname(), "driver": None, "cuda": None, "gpus": [], "error": None}
    try:
        import pynvml
    except ImportError:
        reading["error"] = "the NVML bindings are not installed (pip install nvidia-ml-py)"
        return reading
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        reading["error"] = f"NVML could not start, no NVIDIA driver here? ({type(exc).__name__}: {exc})"
        return reading
    try:
        reading["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        reading["cuda"] = cuda_version(pynvml.nvmlSystemGetCudaDriverVersion())
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                serial = _text(pynvml.nvmlDeviceGetSerial(handle))
            except pynvml.NVMLError:
                serial = ""  # consumer cards have no serial
            pci = pynvml.nvmlDeviceGetPciInfo(handle)
            mig = _or_none(pynvml.nvmlDeviceGetMigMode, handle)
            persistence = _or_none(pynvml.nvmlDeviceGetPersistenceMode, handle)
            links, link_error = _nvlinks(pynvml, handle)
            reading["gpus"].append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "serial": serial,
                "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                "pci_bus_id": _text(pci.busId),
                "pci_device_id": f"0x{(int(pci.pciDeviceId) >> 16) & 0xFFFF:04x}",
                "mig_mode": None if mig is None else int(mig[0]),
                "nvlinks": links,
                "nvlink_error": link_error,
                "persistence_mode": None if persistence is None else int(persistence),
                "fabric": _fabric(pynvml, handle),
                "mig_devices": _mig_devices(pynvml, handle) if mig is not None and int(mig[0]) == 1 else None,
                **_health(pynvml, handle),
            })
    except pynvml.NVMLError as exc:
        reading["error"] = f"NVML read failed: {type(exc).__name__}: {exc}"
    finally:
        pynvml.nvmlShutdown()
    reading["cuda_devices"] = read_cuda_devices()
    return reading


def _mig_devices(pynvml: Any, handle: Any) -> list[dict[str, Any]]:
    """The MIG devices NVML lists on a GPU in MIG mode: each index up to the GPU's maximum that has one."""
    devices = []
    for index in range(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:
            continue  # no MIG device at this index
        devices.append({"index": index, "name": _text(pynvml.nvmlDeviceGetName(mig)),
                        "uuid": _text(pynvml.nvmlDeviceGetUUID(mig)),
                        "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(mig).total),
                        "gpu_instance_id": _or_none(pynvml.nvmlDeviceGetGpuInstanceId, mig)})
    return devices


def parse_mig_devices(value: Any) -> tuple[MigDevice, ...] | None:
    """A recording's `gpus[].mig_devices` (docs/nvml-recording.md), typed; None where absent or null."""
    if value is None:
        return None
    return tuple(MigDevice(int(d["index"]), str(d["name"]), str(d["uuid"]), int(d["memory_total_bytes"]),
                           None if d.get("gpu_instance_id") is None else int(d["gpu_instance_id"])) for d in value)


def parse_host(reading: dict[str, Any]) -> Host:
    """Typed view of a reading (live or recorded); a malformed recording raises ParseError."""
    try:
        gpus = tuple(
            Gpu(int(g["index"]), str(g["name"]), str(g["uuid"]), str(g.get("serial", "")),
                int(g["memory_total_bytes"]), str(g.get("pci_bus_id", "")),
                str(g["pci_device_id"]).lower().removeprefix("0x") if g.get("pci_device_id") else None,
                None if g.get("mig_mode") is None else int(g["mig_mode"]),
                None if g.get("nvlinks") is None else tuple(
                    NvLink(int(n["link"]), bool(n["active"]), n.get("remote_bus_id")) for n in g["nvlinks"]),
                g.get("nvlink_error"),
                None if g.get("persistence_mode") is None else int(g["persistence_mode"]),
                parse_fabric(g.get("fabric")), parse_mig_devices(g.get("mig_devices")))
            for g in reading.get("gpus", [])
        )
        cuda = reading.get("cuda_devices")
        devices = None if cuda is None else CudaDevices(
            None if cuda.get("count") is None else int(cuda["count"]),
            tuple(sysfs_bus_id(str(b)) for b in cuda.get("bus_ids", [])), cuda.get("visible_devices"), cuda.get("error"))
        return Host(str(reading.get("hostname", "")), reading.get("driver"), reading.get("cuda"), gpus,
                    reading.get("error"), devices, reading.get("recorded"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError("nvml", f"reading malformed: {exc!r}") from None


# ------------------------------------------------------------------ sampling under load, and health

# Clock event (throttle) reasons, NVML's bit values; HW_* and SW thermal mean the GPU was held back.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
BAD_THROTTLE = 0x8 | 0x20 | 0x40 | 0x80
SAMPLE_FIELDS = ("t_s", "util_percent", "sm_clock_mhz", "power_w", "temp_c", "throttle_reasons", "pcie_gen", "pcie_width",
                 "power_limit_w")
OLD_SAMPLE_FIELDS = SAMPLE_FIELDS[:-1]  # recordings made before the enforced power limit was read at every sample
APPLICATION_CLOCKS = 0x2  # the clock event reason an application-clock setting sets


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _or_none(call: Any, *args: Any) -> Any:
    """An NVML reading, or None where this GPU does not support it (reported as such, never as a pass)."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def sample_gpus(count: int, interval_s: float, duration_s: float, stop: Any,
                progress: Callable[[float, float | None], None] | None = None) -> dict[str, Any]:
    """Sample every GPU each `interval_s` for `duration_s` (or until `stop` is set); a plain-data recording.
    `progress(elapsed_s, lowest utilisation in the last sample)` is told every 10 s (every minute for a load of
    more than ten minutes)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": f"NVML could not start, no NVIDIA driver here? ({type(exc).__name__}: {exc})"}
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(min(count, pynvml.nvmlDeviceGetCount()))]
        reasons = _reasons_call(pynvml)
        series: list[list[list[Any]]] = [[] for _ in handles]
        lost: list[dict[str, Any] | None] = [None for _ in handles]
        events, xid = _xid_listener(pynvml, handles)
        start = told = time.monotonic()
        while not stop.is_set() and time.monotonic() - start < duration_s:
            tick = time.monotonic()
            _drain_xid(pynvml, events, xid, round(tick - start, 3))
            for n, handle in enumerate(handles):
                if lost[n] is not None:
                    continue
                try:
                    series[n].append(_sample_row(pynvml, handle, reasons, round(tick - start, 3)))
                except pynvml.NVMLError as exc:  # GPU is lost, fell off the bus, unknown: it stops answering
                    lost[n] = {"t_s": round(tick - start, 3), "error": f"{type(exc).__name__}: {exc}"}
            if progress is not None and tick - told >= progress_every_s(duration_s):
                told = tick
                latest = [row[-1][1] for row in series if row and row[-1][1] is not None]
                progress(tick - start, min(latest) if latest else None)
            stop.wait(max(0.0, interval_s - (time.monotonic() - tick)))
        _drain_xid(pynvml, events, xid, round(time.monotonic() - start, 3))
        if events is not None:
            _or_none(pynvml.nvmlEventSetFree, events)
        health = [_health(pynvml, handle) if lost[n] is None else {} for n, handle in enumerate(handles)]
        return {"interval_s": interval_s, "fields": list(SAMPLE_FIELDS),
                "gpus": [{"index": n, "samples": s, "health": h, "xid": xid[n],
                          **({"lost": lost[n]} if lost[n] else {})}
                         for n, (s, h) in enumerate(zip(series, health))]}
    except pynvml.NVMLError as exc:
        return {"error": f"NVML read failed: {type(exc).__name__}: {exc}"}
    finally:
        pynvml.nvmlShutdown()


# The burn-in's stream (docs/nvml-recording.md): a header, then each sample, counter reading, Xid event and lost GPU as
# it is taken, handed on at once and never kept here; the last record says the sampling ended.
STREAM_FORMAT = "gpuaccept-burnin"
COUNTERS_EVERY_S = 10.0  # ECC, row remapping and NVLink error counters read this often
NVLINK_ERRORS = ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")  # NVML_NVLINK_ERROR_DL_*, 0 to 4
Emit = Callable[[Any], None]


def stream_gpus(count: int, interval_s: float, duration_s: float, stop: Any, emit: Emit) -> None:
    """Sample every GPU each `interval_s` for `duration_s` (or until `stop` is set), handing each record to `emit`
    as it is taken: the header (each GPU's slowdown temperature and active NVLinks), `[gpu, *SAMPLE_FIELDS]` rows,
    the error counters every COUNTERS_EVERY_S, Xid events, a GPU that stopped answering, and `{"end": true}`.
    Nothing is kept here, so the memory it takes does not grow with the duration."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        emit({"error": f"NVML could not start, no NVIDIA driver here? ({type(exc).__name__}: {exc})"})
        return
    events = None
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(min(count, pynvml.nvmlDeviceGetCount()))]
        events, xid = _xid_listener(pynvml, handles)
        links = [[link["link"] for link in _nvlinks(pynvml, handle)[0] if link["active"]] for handle in handles]
        emit({"stream": STREAM_FORMAT, "interval_s": interval_s, "fields": list(SAMPLE_FIELDS),
              "counters_every_s": COUNTERS_EVERY_S, "nvlink_error_kinds": list(NVLINK_ERRORS),
              "gpus": [{"index": n, "slowdown_temp_c": _or_none(pynvml.nvmlDeviceGetTemperatureThreshold, handle,
                                                                 pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                        "nvlinks": links[n], **({"xid_error": xid[n]["error"]} if "error" in xid[n] else {})}
                       for n, handle in enumerate(handles)]})
        ended = _stream_loop(pynvml, handles, links, events, interval_s, duration_s, stop, emit)
        emit({"end": True, "t_s": ended})
    except pynvml.NVMLError as exc:
        emit({"error": f"NVML read failed: {type(exc).__name__}: {exc}"})
    finally:
        if events is not None:
            _or_none(pynvml.nvmlEventSetFree, events)
        pynvml.nvmlShutdown()


def _stream_loop(pynvml: Any, handles: list[Any], links: list[list[int]], events: Any, interval_s: float,
                 duration_s: float, stop: Any, emit: Emit) -> float:
    """stream_gpus' sampling, until the duration is over or `stop` is set; the time it ended at (s)."""
    reasons = _reasons_call(pynvml)
    lost = [False] * len(handles)
    start = time.monotonic()
    counted = start - COUNTERS_EVERY_S
    while not stop.is_set() and time.monotonic() - start < duration_s:
        tick = time.monotonic()
        t_s = round(tick - start, 3)
        for event in _waiting_xids(pynvml, events, t_s):
            emit({"t_s": t_s, "gpu": event["gpu_index"], "xid": event["xid"]})
        if tick - counted >= COUNTERS_EVERY_S:
            counted = tick
            for n, handle in enumerate(handles):
                if not lost[n]:
                    emit({"t_s": t_s, "gpu": n, **_counters(pynvml, handle, links[n])})
        for n, handle in enumerate(handles):
            if lost[n]:
                continue
            try:
                emit([n, *_sample_row(pynvml, handle, reasons, t_s)])
            except pynvml.NVMLError as exc:  # GPU is lost, fell off the bus, unknown: it stops answering
                lost[n] = True
                emit({"t_s": t_s, "gpu": n, "lost": f"{type(exc).__name__}: {exc}"})
        stop.wait(max(0.0, interval_s - (time.monotonic() - tick)))
    t_s = round(time.monotonic() - start, 3)
    for event in _waiting_xids(pynvml, events, t_s):
        emit({"t_s": t_s, "gpu": event["gpu_index"], "xid": event["xid"]})
    for n, handle in enumerate(handles):
        if not lost[n]:
            emit({"t_s": t_s, "gpu": n, **_counters(pynvml, handle, links[n])})
    return t_s


def _counters(pynvml: Any, handle: Any, links: list[int]) -> dict[str, Any]:
    """The error counters a burn-in watches grow: volatile ECC errors (corrected, uncorrected), remapped rows
    (correctable, uncorrectable, pending, failure) and each NVLink error counter summed over the active links; a
    counter the GPU does not support is null."""
    ecc = [_or_none(pynvml.nvmlDeviceGetTotalEccErrors, handle, kind, pynvml.NVML_VOLATILE_ECC)
           for kind in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)]
    remapped = _or_none(pynvml.nvmlDeviceGetRemappedRows, handle)
    nvlink: list[int | None] | None = None
    if links:
        nvlink = []
        for kind in range(len(NVLINK_ERRORS)):
            values = [_or_none(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, kind) for link in links]
            read = [int(v) for v in values if v is not None]
            nvlink.append(sum(read) if read else None)
    return {"ecc": None if ecc == [None, None] else ecc,
            "remapped_rows": None if remapped is None else [int(v) for v in remapped], "nvlink_errors": nvlink}


def progress_every_s(duration_s: float) -> float:
    """How often a load of `duration_s` says how it goes: every 10 s, every minute for a load over ten minutes."""
    return LONG_PROGRESS_S if duration_s > LONG_LOAD_S else PROGRESS_EVERY_S


def _reasons_call(pynvml: Any) -> Any:
    """NVML's clock event reasons call (its older name on older bindings)."""
    return getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons


def _sample_row(pynvml: Any, handle: Any, reasons: Any, t_s: float) -> list[Any]:
    """One row of SAMPLE_FIELDS; any NVML error reading the utilisation but NotSupported is raised: the GPU stopped
    answering (lost, fell off the bus)."""
    try:
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    except pynvml.NVMLError_NotSupported:
        util = None
    power = _or_none(pynvml.nvmlDeviceGetPowerUsage, handle)
    return [
        t_s, util.gpu if util is not None else None,
        _or_none(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        round(power / 1000.0, 1) if power is not None else None,
        _or_none(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        _or_none(reasons, handle),
        _or_none(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        _or_none(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        _watts(_or_none(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
    ]


def _watts(milliwatts: int | None) -> float | None:
    return round(milliwatts / 1000.0, 1) if milliwatts is not None else None


def _xid_listener(pynvml: Any, handles: list[Any]) -> tuple[Any, list[dict[str, Any]]]:
    """An NVML event set listening for Xid critical errors on every GPU; per GPU {"events": [...]} or
    {"error": why not} (a GPU or driver that cannot deliver them: then nothing is known, not "none")."""
    xid: list[dict[str, Any]] = [{"events": []} for _ in handles]
    try:
        events = pynvml.nvmlEventSetCreate()
    except pynvml.NVMLError as exc:
        return None, [{"error": f"nvmlEventSetCreate: {type(exc).__name__}: {exc}"} for _ in handles]
    for n, handle in enumerate(handles):
        try:
            pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
        except pynvml.NVMLError as exc:
            xid[n] = {"error": f"nvmlDeviceRegisterEvents: {type(exc).__name__}: {exc}"}
    return events, xid


def _drain_xid(pynvml: Any, events: Any, xid: list[dict[str, Any]], t_s: float) -> None:
    """Every Xid event waiting in the set, without waiting for more, added to its GPU's (GPU0's where NVML gives
    no index)."""
    for event in _waiting_xids(pynvml, events, t_s):
        index = event["gpu_index"]
        target = xid[index] if isinstance(index, int) and 0 <= index < len(xid) else xid[0]
        target.setdefault("events", []).append(event)


def _waiting_xids(pynvml: Any, events: Any, t_s: float) -> list[dict[str, Any]]:
    """The Xid events waiting in the set (at most 1000 at a time), without waiting for more."""
    found: list[dict[str, Any]] = []
    if events is None:
        return found
    for _ in range(1000):
        try:
            event = pynvml.nvmlEventSetWait_v2(events, 0)
        except pynvml.NVMLError:  # Timeout: nothing waiting
            break
        found.append({"t_s": t_s, "xid": int(event.eventData), "gpu_index": _or_none(pynvml.nvmlDeviceGetIndex, event.device)})
    return found


def _health(pynvml: Any, handle: Any) -> dict[str, Any]:
    """ECC, row remapping (or retired pages where the GPU has those instead) and power limits, read as the
    load ends (the workload still runs: the enforced limit is the one under load)."""
    remapped = _or_none(pynvml.nvmlDeviceGetRemappedRows, handle)
    retired_pending = retired_double_bit = None
    if remapped is None:
        retired_pending = _or_none(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        pages = _or_none(pynvml.nvmlDeviceGetRetiredPages, handle,
                         pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        retired_double_bit = len(pages) if pages is not None else None
    enforced = _or_none(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    default = _or_none(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
    limits = _or_none(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, handle)  # [min, max] in mW
    ecc = _or_none(pynvml.nvmlDeviceGetEccMode, handle)  # [current, pending]: 1 enabled, 0 disabled
    return {
        "power_limit_enforced_w": round(enforced / 1000.0, 1) if enforced is not None else None,
        "power_limit_default_w": round(default / 1000.0, 1) if default is not None else None,
        "power_limit_min_w": round(limits[0] / 1000.0, 1) if limits is not None else None,
        "power_limit_max_w": round(limits[1] / 1000.0, 1) if limits is not None else None,
        "ecc_mode_current": int(ecc[0]) if ecc is not None else None,
        "ecc_mode_pending": int(ecc[1]) if ecc is not None else None,
        "retired_pages_double_bit": retired_double_bit,
        "ecc_volatile_uncorrected": _or_none(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                             pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "remapped_rows": list(remapped) if remapped is not None else None,  # corr, uncorr, pending, failure
        "retired_pages_pending": None if retired_pending is None else bool(retired_pending),
    }


class Sample(NamedTuple):
    """One row of a GPU's series (SAMPLE_FIELDS): a tuple, since a minute's load is 400 rows a GPU and a frozen
    dataclass's __init__ (a setattr a field) made parsing eight GPUs' series 10 ms of the run."""

    t_s: float
    util_percent: float | None
    sm_clock_mhz: float | None
    power_w: float | None
    temp_c: float | None
    throttle_reasons: int | None
    pcie_gen: int | None
    pcie_width: int | None
    power_limit_w: float | None = None  # the enforced limit at this sample; None: not read (an older recording)


@dataclass(frozen=True, slots=True)
class GpuSeries:
    index: int
    samples: tuple[Sample, ...]
    health: dict[str, Any]
    lost: dict[str, Any] | None = None  # {"t_s", "error"}: the GPU stopped answering NVML during the load
    xid: dict[str, Any] | None = None  # {"events": [{"t_s", "xid"}]} or {"error"}; None: not read (older recording)
    pcie_sysfs: dict[str, Any] | None = None  # the GPU's PCIe link files in sysfs, read as the sampling ends (under load)


def parse_samples(recording: dict[str, Any]) -> list[GpuSeries]:
    """Typed view of a sampling recording (live or replayed); a malformed one raises ValueError."""
    if recording.get("error"):
        raise ValueError(recording["error"])
    fields = recording.get("fields", list(SAMPLE_FIELDS))
    if list(fields) not in (list(SAMPLE_FIELDS), list(OLD_SAMPLE_FIELDS)):
        raise ParseError("nvml", f"samples have fields {fields}, expected {list(SAMPLE_FIELDS)}")
    # Sample._make: a row of the wrong length is a TypeError as Sample(*row) is, at 2/3 of its cost (6,400 rows a run:
    # the load's and the report's); an older recording's rows get no power limit
    make = Sample._make if len(fields) == len(SAMPLE_FIELDS) else (lambda row: Sample._make((*row, None)))
    try:
        return [GpuSeries(int(g["index"]), tuple(map(make, g["samples"])), dict(g.get("health", {})),
                          dict(g["lost"]) if g.get("lost") else None, dict(g["xid"]) if g.get("xid") is not None else None,
                          dict(g["pcie_sysfs"]) if isinstance(g.get("pcie_sysfs"), dict) else None)
                for g in recording["gpus"]]
    except (KeyError, TypeError) as exc:
        raise ParseError("nvml", f"samples malformed: {exc!r}") from None
