"""The builtin training load's own output (pytest_gpuaccept.workloads.train): when each rank's first step was done.

    rank 0: first step 2.31 s after launch

is printed by each rank once its first training step has finished on its GPU, in seconds since the process
gpuaccept launched started (the kernel's start time of that process). It is the load's word about its start-up;
NVML's first busy sample is the second source beside it.
"""

from __future__ import annotations

import re

_FIRST_STEP = re.compile(r"^rank (\d+): first step (\d+(?:\.\d+)?) s after launch\s*$", re.MULTILINE)


def parse_first_steps(text: str) -> dict[int, float]:
    """Each rank's launch-to-first-step time (s), from the lines above; {} where the output has none (another workload,
    or one that never finished a step)."""
    return {int(rank): float(seconds) for rank, seconds in _FIRST_STEP.findall(text)}
