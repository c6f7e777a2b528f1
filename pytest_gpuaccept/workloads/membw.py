"""Device-local memory bandwidth with PyTorch: a copy of a large tensor within one GPU, timed.

Each byte is read once and written once, so the rate is 2 x bytes / time (what STREAM's Copy and
nvbandwidth's device_local_copy call memory bandwidth). Warmed up, then the median of `--repeats`
copies timed with CUDA events (perf_counter on the CPU, where the tests run it for real). GPUs are
measured one after the other: the figure is each card's own memory, not the box's.

Prints a first line naming the tool, then one JSON line per device:
    {"gpu": 0, "device": "cuda:0", "bytes": 4294967296, "seconds": [...], "gbyte_s": 2790.4}
Run: python -m pytest_gpuaccept.workloads.membw --gpus 8 --bytes 4294967296 --repeats 20
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from . import copy_arguments, torch_missing


def measure(device: str, nbytes: int, repeats: int) -> list[float]:
    """Seconds for each of `repeats` copies of `nbytes` within `device` (after one warm-up copy)."""
    import torch

    source = torch.ones(nbytes, dtype=torch.uint8, device=device)  # non-zero: no page can be skipped
    target = torch.empty_like(source)
    target.copy_(source)
    cuda = device.startswith("cuda")
    seconds = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            target.copy_(source)
            end.record()
            torch.cuda.synchronize(device)
            seconds.append(start.elapsed_time(end) / 1000.0)
        else:
            began = time.perf_counter()
            target.copy_(source)
            seconds.append(time.perf_counter() - began)
    if not bool(torch.equal(target[:4096], source[:4096])):
        raise RuntimeError(f"{device}: the copy does not match its source")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = copy_arguments(__doc__, 4 << 30, 20)
    args = parser.parse_args(argv)
    missing = torch_missing(args.gpus, args.device == "cuda")
    if missing:
        return missing
    import torch

    print(f"# pytest-gpuaccept membw: PyTorch {torch.__version__}, device {args.device}, {args.bytes} bytes, "
          f"{args.repeats} repeats", flush=True)
    for gpu in range(args.gpus):
        device = f"cuda:{gpu}" if args.device == "cuda" else "cpu"
        seconds = measure(device, args.bytes, args.repeats)
        line: dict[str, Any] = {"gpu": gpu, "device": device, "bytes": args.bytes, "seconds": seconds,
                                "gbyte_s": round(2 * args.bytes / statistics.median(seconds) / 1e9, 3)}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
