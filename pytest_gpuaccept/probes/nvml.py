"""NVML (nvidia-ml-py): what the driver says about the host and its GPUs.

Readings are plain dicts so that they can be saved as evidence and replayed; `parse_host` turns one
into typed data. `pynvml` is imported here only, and only when a reading is taken.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from . import ParseError


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    serial: str
    memory_total_bytes: int
    pci_bus_id: str = ""


@dataclass(frozen=True)
class Host:
    """The host as NVML saw it; `error` is set (and the rest empty) when NVML could not be read."""

    hostname: str
    driver: str | None
    cuda: str | None
    gpus: tuple[Gpu, ...]
    error: str | None = None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def read_host() -> dict[str, Any]:
    """Take a reading of the host through NVML; never raises: a failure is recorded as `error`."""
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
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        reading["cuda"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                serial = _text(pynvml.nvmlDeviceGetSerial(handle))
            except pynvml.NVMLError:
                serial = ""  # consumer cards have no serial
            reading["gpus"].append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "serial": serial,
                "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
            })
    except pynvml.NVMLError as exc:
        reading["error"] = f"NVML read failed: {type(exc).__name__}: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return reading


def parse_host(reading: dict[str, Any]) -> Host:
    """Typed view of a reading (live or recorded); a malformed recording raises ParseError."""
    try:
        gpus = tuple(
            Gpu(int(g["index"]), str(g["name"]), str(g["uuid"]), str(g.get("serial", "")),
                int(g["memory_total_bytes"]), str(g.get("pci_bus_id", "")))
            for g in reading.get("gpus", [])
        )
        return Host(str(reading.get("hostname", "")), reading.get("driver"), reading.get("cuda"), gpus,
                    reading.get("error"))
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
SAMPLE_FIELDS = ("t_s", "util_percent", "sm_clock_mhz", "power_w", "temp_c", "throttle_reasons", "pcie_gen", "pcie_width")


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _or_none(call: Any, *args: Any) -> Any:
    """An NVML reading, or None where this GPU does not support it (reported as such, never as a pass)."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def sample_gpus(count: int, interval_s: float, duration_s: float, stop: Any) -> dict[str, Any]:
    """Sample every GPU each `interval_s` for `duration_s` (or until `stop` is set); a plain-data recording."""
    import time

    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": f"NVML could not start, no NVIDIA driver here? ({type(exc).__name__}: {exc})"}
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(min(count, pynvml.nvmlDeviceGetCount()))]
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        series: list[list[list[Any]]] = [[] for _ in handles]
        lost: list[dict[str, Any] | None] = [None for _ in handles]
        start = time.monotonic()
        while not stop.is_set() and time.monotonic() - start < duration_s:
            tick = time.monotonic()
            for n, handle in enumerate(handles):
                if lost[n] is not None:
                    continue
                try:
                    util = pynvml.nvmlDeviceGetUtilizationRates(handle)
                except pynvml.NVMLError_NotSupported:
                    util = None
                except pynvml.NVMLError as exc:  # GPU is lost, fell off the bus, unknown: it stops answering
                    lost[n] = {"t_s": round(tick - start, 3), "error": f"{type(exc).__name__}: {exc}"}
                    continue
                power = _or_none(pynvml.nvmlDeviceGetPowerUsage, handle)
                series[n].append([
                    round(tick - start, 3), util.gpu if util is not None else None,
                    _or_none(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
                    round(power / 1000.0, 1) if power is not None else None,
                    _or_none(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
                    _or_none(reasons, handle),
                    _or_none(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                    _or_none(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                ])
            stop.wait(max(0.0, interval_s - (time.monotonic() - tick)))
        health = [_health(pynvml, handle) if lost[n] is None else {} for n, handle in enumerate(handles)]
        return {"interval_s": interval_s, "fields": list(SAMPLE_FIELDS),
                "gpus": [{"index": n, "samples": s, "health": h, **({"lost": lost[n]} if lost[n] else {})}
                         for n, (s, h) in enumerate(zip(series, health))]}
    except pynvml.NVMLError as exc:
        return {"error": f"NVML read failed: {type(exc).__name__}: {exc}"}
    finally:
        pynvml.nvmlShutdown()


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
    return {
        "power_limit_enforced_w": round(enforced / 1000.0, 1) if enforced is not None else None,
        "power_limit_default_w": round(default / 1000.0, 1) if default is not None else None,
        "retired_pages_double_bit": retired_double_bit,
        "ecc_volatile_uncorrected": _or_none(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                             pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "remapped_rows": list(remapped) if remapped is not None else None,  # corr, uncorr, pending, failure
        "retired_pages_pending": None if retired_pending is None else bool(retired_pending),
    }


@dataclass(frozen=True)
class Sample:
    t_s: float
    util_percent: float | None
    sm_clock_mhz: float | None
    power_w: float | None
    temp_c: float | None
    throttle_reasons: int | None
    pcie_gen: int | None
    pcie_width: int | None


@dataclass(frozen=True)
class GpuSeries:
    index: int
    samples: tuple[Sample, ...]
    health: dict[str, Any]
    lost: dict[str, Any] | None = None  # {"t_s", "error"}: the GPU stopped answering NVML during the load


def parse_samples(recording: dict[str, Any]) -> list[GpuSeries]:
    """Typed view of a sampling recording (live or replayed); a malformed one raises ValueError."""
    if recording.get("error"):
        raise ValueError(recording["error"])
    fields = recording.get("fields", list(SAMPLE_FIELDS))
    if list(fields) != list(SAMPLE_FIELDS):
        raise ParseError("nvml", f"samples have fields {fields}, expected {list(SAMPLE_FIELDS)}")
    try:
        return [GpuSeries(int(g["index"]), tuple(Sample(*row) for row in g["samples"]), dict(g.get("health", {})),
                          dict(g["lost"]) if g.get("lost") else None)
                for g in recording["gpus"]]
    except (KeyError, TypeError) as exc:
        raise ParseError("nvml", f"samples malformed: {exc!r}") from None
