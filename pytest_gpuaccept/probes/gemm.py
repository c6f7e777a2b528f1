"""Our PyTorch GEMM workload (`pytest_gpuaccept.workloads.gemm`), run as a tool: per-window lines read back.

TFLOPS are computed here from each window's matmul count, n and seconds (2 n^3 flops a matmul), never
taken from the program; burst is the best window, sustained the median of the windows of the second
half of the run. A GPU whose windows stop early, that never says done, or whose result is not finite
has no figure.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass

from . import ParseError

TOOL = "gemm"
MODULE = "pytest_gpuaccept.workloads.gemm"
_HEADER = re.compile(r"^# pytest-gpuaccept gemm: PyTorch (\S+), device (\w+), dtype (\w+), n (\d+), duration ([\d.]+) s")


@dataclass(frozen=True, slots=True)
class GemmRun:
    gpu: int
    windows: tuple[tuple[float, float], ...]  # (t_s at the window's end, TFLOPS in it)
    done: bool
    finite: bool

    @property
    def burst(self) -> float:
        return max(tflops for _t, tflops in self.windows)

    def sustained(self, duration_s: float) -> float:
        late = [tflops for t, tflops in self.windows if t > duration_s / 2] or [self.windows[-1][1]]
        return statistics.median(late)


@dataclass(frozen=True, slots=True)
class Gemm:
    device: str
    dtype: str
    n: int
    duration_s: float
    runs: dict[int, GemmRun]


def parse_gemm(text: str) -> Gemm:
    lines = [line for line in text.splitlines() if line.strip()]
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise ParseError(TOOL, "not the output of pytest_gpuaccept.workloads.gemm", lines[0] if lines else "")
    _version, device, dtype, n_text, duration_text = header.groups()
    windows: dict[int, list[tuple[float, float]]] = {}
    done: dict[int, bool] = {}
    for line in lines[1:]:
        try:
            data = json.loads(line)
            gpu = int(data["gpu"])
            if data.get("done"):
                done[gpu] = bool(data.get("finite"))
                continue
            n, matmuls, seconds = int(data["n"]), int(data["matmuls"]), float(data["seconds"])
            t_s = float(data["t_s"])
        except (ValueError, KeyError, TypeError):
            raise ParseError(TOOL, "a line that is not a window of the run", line) from None
        if seconds <= 0 or n != int(n_text):
            raise ParseError(TOOL, "a window without time, or of another size than the header's", line)
        windows.setdefault(gpu, []).append((t_s, 2 * n**3 * matmuls / seconds / 1e12))
    if not windows:
        raise ParseError(TOOL, "no window in the output")
    runs = {gpu: GemmRun(gpu, tuple(w), gpu in done, done.get(gpu, False)) for gpu, w in windows.items()}
    return Gemm(device, dtype, int(n_text), float(duration_text), runs)
