"""NVML (nvidia-ml-py): what the driver says about the host and its GPUs.

Readings are plain dicts so that they can be saved as evidence and replayed; `parse_host` turns one
into typed data. `pynvml` is imported here only, and only when a reading is taken.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any


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
    """Typed view of a reading (live or recorded); a malformed recording raises ValueError."""
    try:
        gpus = tuple(
            Gpu(int(g["index"]), str(g["name"]), str(g["uuid"]), str(g.get("serial", "")),
                int(g["memory_total_bytes"]), str(g.get("pci_bus_id", "")))
            for g in reading.get("gpus", [])
        )
        return Host(str(reading.get("hostname", "")), reading.get("driver"), reading.get("cuda"), gpus,
                    reading.get("error"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"NVML reading malformed: {exc!r}") from None
