"""Our PyTorch memory-bandwidth workload (`pytest_gpuaccept.workloads.membw`), run as a tool and read back.

    # pytest-gpuaccept membw: PyTorch 2.13.0+cpu, device cpu, 268435456 bytes, 5 repeats
    {"gpu": 0, "device": "cpu", "bytes": 268435456, "seconds": [...], "gbyte_s": 15.866}

A line whose rate disagrees with its own bytes and seconds is refused: the figure is recomputed, never
taken on the output's word.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from . import ParseError
from ._run import Reading, ToolRunner, parse_run

TOOL = "membw"
MODULE = "pytest_gpuaccept.workloads.membw"


@dataclass(frozen=True, slots=True)
class MemCopy:
    gpu: int
    device: str
    nbytes: int
    seconds: tuple[float, ...]
    gbyte_s: float  # 2 x bytes / median seconds: each byte read once and written once


def parse_membw(text: str) -> dict[int, MemCopy]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# pytest-gpuaccept membw"):
        raise ParseError(TOOL, "not the output of pytest_gpuaccept.workloads.membw", lines[0] if lines else "")
    copies: dict[int, MemCopy] = {}
    for line in lines[1:]:
        try:
            data = json.loads(line)
            gpu, device, nbytes = int(data["gpu"]), str(data["device"]), int(data["bytes"])
            seconds = tuple(float(s) for s in data["seconds"])
            printed = float(data["gbyte_s"])
        except (ValueError, KeyError, TypeError):
            raise ParseError(TOOL, "a line that is not a measurement", line) from None
        if not seconds or min(seconds) <= 0 or nbytes <= 0:
            raise ParseError(TOOL, "no positive timings", line)
        rate = 2 * nbytes / statistics.median(seconds) / 1e9
        if abs(rate - printed) > 0.001 * rate + 0.01:
            raise ParseError(TOOL, f"the printed {printed} GB/s is not 2 x bytes / median seconds ({rate:.3f})", line)
        copies[gpu] = MemCopy(gpu, device, nbytes, seconds, round(rate, 3))
    if not copies:
        raise ParseError(TOOL, "no measurement in the output")
    return copies


def run_membw(runner: ToolRunner, gpus: int, nbytes: int, repeats: int) -> Reading[dict[int, MemCopy]]:
    args = ["-m", MODULE, "--gpus", str(gpus), "--bytes", str(nbytes), "--repeats", str(repeats)]
    return parse_run(runner.run("python", args, key="membw_torch"), parse_membw)
