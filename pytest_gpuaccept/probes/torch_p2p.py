"""Our PyTorch P2P workload (`pytest_gpuaccept.workloads.p2p`), run as a tool: per-pair copy timings read back.

Rates are computed here from bytes and the median of the timings (one way: bytes; both ways: twice the
bytes), never taken from the program. A pair printed with `"peer": false` had no peer access.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field

from . import ParseError
from ._run import Reading, ToolRunner, parse_run

TOOL = "workloads.p2p"  # our PyTorch workload, named as ParseError shows it
MODULE = "pytest_gpuaccept.workloads.p2p"
_HEADER = re.compile(r"^# pytest-gpuaccept p2p: PyTorch (\S+), device (\w+), (\d+) bytes, (\d+) repeats")


@dataclass(frozen=True, slots=True)
class TorchP2p:
    device: str
    one_way: dict[tuple[int, int], float] = field(default_factory=dict)  # GB/s, data i -> j
    both_ways: dict[tuple[int, int], float] = field(default_factory=dict)
    no_peer: frozenset[tuple[int, int]] = frozenset()


def _rate(moved: int, seconds: list[float], line: str) -> float:
    if not seconds or min(seconds) <= 0:
        raise ParseError(TOOL, "no positive timings", line)
    return round(moved / statistics.median(seconds) / 1e9, 3)


def parse_torch_p2p(text: str) -> TorchP2p:
    lines = [line for line in text.splitlines() if line.strip()]
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise ParseError(TOOL, "not the output of pytest_gpuaccept.workloads.p2p", lines[0] if lines else "")
    result = TorchP2p(header.group(2))
    no_peer = set()
    for line in lines[1:]:
        try:
            data = json.loads(line)
            nbytes = int(data["bytes"])
            if "pair" in data:
                i, j = (int(x) for x in data["pair"])
                pairs = [(i, j), (j, i)]
            else:
                i, j = int(data["src"]), int(data["dst"])
                pairs = [(i, j)]
            peer = bool(data["peer"])
            seconds = [float(s) for s in data.get("seconds", [])]
        except (ValueError, KeyError, TypeError):
            raise ParseError(TOOL, "a line that is not a copy of the run", line) from None
        if not peer:
            no_peer.update(pairs)
        elif "pair" in data:
            result.both_ways[(min(i, j), max(i, j))] = _rate(2 * nbytes, seconds, line)
        else:
            result.one_way[(i, j)] = _rate(nbytes, seconds, line)
    return TorchP2p(result.device, result.one_way, result.both_ways, frozenset(no_peer))


def run_torch_p2p(runner: ToolRunner, gpus: int, nbytes: int, repeats: int, bidirectional: bool) -> Reading[TorchP2p]:
    args = ["-m", MODULE, "--gpus", str(gpus), "--bytes", str(nbytes), "--repeats", str(repeats)]
    return parse_run(runner.run("python", args + (["--bidirectional"] if bidirectional else []), key="p2p_torch"),
                     parse_torch_p2p)
