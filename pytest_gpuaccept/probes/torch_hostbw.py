"""Our PyTorch host-bandwidth workload (`pytest_gpuaccept.workloads.hostbw`): per GPU and direction, read back.

Rates are computed here from bytes and the median timing, never taken from the program.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass

from . import ParseError
from ._run import Reading, ToolRunner, parse_run

TOOL = "workloads.hostbw"
MODULE = "pytest_gpuaccept.workloads.hostbw"
_HEADER = re.compile(r"^# pytest-gpuaccept hostbw: PyTorch (\S+), device (\w+), (\d+) bytes, (\d+) repeats")


@dataclass(frozen=True, slots=True)
class HostBw:
    device: str
    figures: dict[tuple[int, str], float]  # (gpu, "h2d" | "d2h") -> GB/s
    cpus: dict[int, str]  # the CPUs each GPU's buffer was allocated from


def parse_torch_hostbw(text: str) -> HostBw:
    lines = [line for line in text.splitlines() if line.strip()]
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise ParseError(TOOL, "not the output of pytest_gpuaccept.workloads.hostbw", lines[0] if lines else "")
    figures: dict[tuple[int, str], float] = {}
    cpus: dict[int, str] = {}
    for line in lines[1:]:
        try:
            data = json.loads(line)
            gpu, direction, nbytes = int(data["gpu"]), str(data["direction"]), int(data["bytes"])
            seconds = [float(s) for s in data["seconds"]]
        except (ValueError, KeyError, TypeError):
            raise ParseError(TOOL, "a line that is not a copy of the run", line) from None
        if direction not in ("h2d", "d2h") or not seconds or min(seconds) <= 0:
            raise ParseError(TOOL, "an unknown direction, or no positive timings", line)
        figures[(gpu, direction)] = round(nbytes / statistics.median(seconds) / 1e9, 3)
        cpus[gpu] = str(data.get("cpus", ""))
    if not figures:
        raise ParseError(TOOL, "no copy in the output")
    return HostBw(header.group(2), figures, cpus)


def run_torch_hostbw(runner: ToolRunner, gpus: int, nbytes: int, repeats: int, cpus: dict[int, str]) -> Reading[HostBw]:
    args = ["-m", MODULE, "--gpus", str(gpus), "--bytes", str(nbytes), "--repeats", str(repeats)]
    args += [f"--cpus={gpu}={cpu_list}" for gpu, cpu_list in sorted(cpus.items()) if cpu_list]
    return parse_run(runner.run("python", args, key="hostbw_torch"), parse_torch_hostbw)
