"""Host <-> GPU copy bandwidth with PyTorch: pinned host memory on each GPU's own NUMA node, each direction.

For GPU i the process first moves onto the CPUs local to the GPU (`--cpus i=LIST`, from sysfs
`bus/pci/devices/<bus id>/local_cpulist`), so that the pinned buffer is allocated on that NUMA node;
then copies host -> GPU and GPU -> host, warmed up, each timed `--repeats` times with CUDA events. The
reader computes the rates from bytes and timings.

    # pytest-gpuaccept hostbw: PyTorch 2.13.0, device cuda, 1073741824 bytes, 10 repeats
    {"gpu": 0, "direction": "h2d", "cpus": "0-55", "bytes": 1073741824, "seconds": [...]}

`--device cpu` runs the same loop between CPU tensors (the project's tests; never a GPU figure).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from . import copy_arguments, torch_missing


def cpu_list(text: str) -> set[int]:
    """`0-3,8,10-11` -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _copies(gpu: int, device: str, nbytes: int, repeats: int) -> dict[str, list[float]]:
    import torch

    cuda = device.startswith("cuda")
    host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=cuda)  # allocated and touched on the local node
    on_gpu = torch.empty(nbytes, dtype=torch.uint8, device=device)
    timings: dict[str, list[float]] = {}
    for direction, (target, source) in (("h2d", (on_gpu, host)), ("d2h", (host, on_gpu))):
        target.copy_(source)  # warm-up
        seconds = []
        for _ in range(repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                target.copy_(source, non_blocking=True)
                end.record()
                end.synchronize()
                seconds.append(start.elapsed_time(end) / 1000.0)
            else:
                began = time.perf_counter()
                target.copy_(source)
                seconds.append(time.perf_counter() - began)
        timings[direction] = seconds
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = copy_arguments(__doc__, 1 << 30, 10)
    parser.add_argument("--cpus", action="append", default=[], help="GPU=CPULIST: the CPUs local to that GPU")
    args = parser.parse_args(argv)
    missing = torch_missing(args.gpus, args.device == "cuda")
    if missing:
        return missing
    import torch

    local = dict(item.split("=", 1) for item in args.cpus)
    everywhere = os.sched_getaffinity(0)
    print(f"# pytest-gpuaccept hostbw: PyTorch {torch.__version__}, device {args.device}, {args.bytes} bytes, "
          f"{args.repeats} repeats", flush=True)
    for gpu in range(args.gpus):
        cpus = local.get(str(gpu), "")
        os.sched_setaffinity(0, (cpu_list(cpus) & everywhere) or everywhere)
        timings = _copies(gpu, f"cuda:{gpu}" if args.device == "cuda" else "cpu", args.bytes, args.repeats)
        for direction, seconds in timings.items():
            line: dict[str, Any] = {"gpu": gpu, "direction": direction, "cpus": cpus or "any", "bytes": args.bytes,
                                    "seconds": seconds}
            print(json.dumps(line), flush=True)
    os.sched_setaffinity(0, everywhere)
    return 0


if __name__ == "__main__":
    sys.exit(main())
