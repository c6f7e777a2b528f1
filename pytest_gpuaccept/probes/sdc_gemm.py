"""Our seeded GEMM (`pytest_gpuaccept.workloads.sdc_gemm`), run as a tool: each GPU's digests, sample and comparisons.

The program prints what each GPU computed (a SHA-256 per repeat, a sample of elements), the CPU's float64 values of
the same elements, and where two GPUs' results (or one GPU's repeats) differ, how many elements differ and the first;
deciding which GPU is wrong is the judge's (clauses/sdc.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import ParseError

TOOL = "sdc_gemm"
MODULE = "pytest_gpuaccept.workloads.sdc_gemm"
Element = tuple[int, int, float, float]  # row, col, the value, the value it is set beside


@dataclass(frozen=True, slots=True)
class GpuResult:
    gpu: int
    name: str
    bus_id: str
    digests: tuple[str, ...]
    sample: tuple[tuple[int, int, float], ...]


@dataclass(frozen=True, slots=True)
class Difference:
    """`count` elements of one result differ bitwise from another's; `first` is the first of them."""

    count: int
    first: Element | None


@dataclass(frozen=True, slots=True)
class SdcGemm:
    torch: str
    device: str
    n: int
    seed: int
    repeats: int
    gpus: dict[int, GpuResult]
    reference: dict[tuple[int, int], float]  # the CPU's float64 value of each sampled element
    compared: dict[tuple[int, int], Difference]  # (gpu, the GPU it was set beside)
    repeat_mismatches: dict[int, list[tuple[int, Difference]]]  # gpu: (repeat, difference from its first result)
    done: bool


def _element(value: object, line: str) -> Element | None:
    if value in (None, []):
        return None
    if not isinstance(value, list) or len(value) != 4:
        raise ParseError(TOOL, "a differing element is not [row, col, value, other value]", line)
    row, col, x, y = value
    return int(row), int(col), float(x), float(y)


def parse_sdc_gemm(text: str) -> SdcGemm:
    """Read the program's JSON lines (header first, `{"done": true}` last); any other line is refused, quoting it."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        header = json.loads(lines[0]) if lines else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("sdc_gemm") != 1:
        raise ParseError(TOOL, "not the output of pytest_gpuaccept.workloads.sdc_gemm", lines[0] if lines else "")
    gpus: dict[int, GpuResult] = {}
    reference: dict[tuple[int, int], float] = {}
    compared: dict[tuple[int, int], Difference] = {}
    mismatches: dict[int, list[tuple[int, Difference]]] = {}
    done = False
    for line in lines[1:]:
        try:
            data = json.loads(line)
            if "gpu" in data:
                gpu = int(data["gpu"])
                gpus[gpu] = GpuResult(gpu, str(data["name"]), str(data.get("bus_id") or ""),
                                      tuple(str(d) for d in data["digests"]),
                                      tuple((int(r), int(c), float(v)) for r, c, v in data["sample"]))
            elif "cpu_reference" in data:
                reference = {(int(r), int(c)): float(v) for r, c, v in data["cpu_reference"]}
            elif "compare" in data:
                one, other = (int(x) for x in data["compare"])
                compared[(one, other)] = Difference(int(data["differ"]), _element(data.get("first"), line))
            elif "repeat_mismatch" in data:
                mismatches.setdefault(int(data["repeat_mismatch"]), []).append(
                    (int(data["repeat"]), Difference(int(data["differ"]), _element(data.get("first"), line))))
            elif data.get("done") is True:
                done = True
            else:
                raise KeyError("unknown line")
        except (ValueError, KeyError, TypeError):
            raise ParseError(TOOL, "a line that is not one of the program's", line) from None
    return SdcGemm(str(header.get("torch")), str(header.get("device")), int(header.get("n") or 0),
                   int(header.get("seed") or 0), int(header.get("repeats") or 0), gpus, reference, compared,
                   mismatches, done)
