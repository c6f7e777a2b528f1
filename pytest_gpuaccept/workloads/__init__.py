"""Programs the suites start as tools of their own (run as `python -m ...`, never imported by the plugin)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable


def torch_missing(gpus: int, need_cuda: bool) -> int:
    """0 where PyTorch is there and sees `gpus` GPUs; else the exit code (3: no PyTorch, 2: too few GPUs), said."""
    try:
        import torch
    except ImportError:
        print("gpuaccept: PyTorch is not installed in this Python (python -m pytest_gpuaccept doctor says how to get it)",
              file=sys.stderr)
        return 3
    if need_cuda and torch.cuda.device_count() < gpus:
        print(f"gpuaccept: {gpus} GPUs asked, torch sees {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    return 0


def copy_arguments(description: str | None, default_bytes: int, default_repeats: int) -> argparse.ArgumentParser:
    """The options every copy benchmark takes: GPUs, bytes per copy, timed repeats, and the device kind."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--bytes", type=int, default=default_bytes)
    parser.add_argument("--repeats", type=int, default=default_repeats)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the same timing logic on the CPU (the project's tests), never a GPU figure")
    return parser


def spawn_per_gpu(worker: Callable[..., None], gpus: int, args: tuple[Any, ...], need_cuda: bool) -> int:
    """Start `worker(rank, *args)` in one process per GPU; exit codes 3 (no PyTorch) and 2 (too few GPUs)."""
    missing = torch_missing(gpus, need_cuda)
    if missing:
        return missing
    import torch.multiprocessing as mp

    mp.spawn(worker, args=args, nprocs=gpus, join=True)
    return 0
