"""Programs the suites start as tools of their own (run as `python -m ...`, never imported by the plugin)."""

from __future__ import annotations

import sys
from typing import Any, Callable


def spawn_per_gpu(worker: Callable[..., None], gpus: int, args: tuple[Any, ...], need_cuda: bool) -> int:
    """Start `worker(rank, *args)` in one process per GPU; exit codes 3 (no PyTorch) and 2 (too few GPUs)."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("gpuaccept: PyTorch is not installed: pip install 'pytest-gpuaccept[torch]'", file=sys.stderr)
        return 3
    if need_cuda and torch.cuda.device_count() < gpus:
        print(f"gpuaccept: {gpus} GPUs asked, torch sees {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    mp.spawn(worker, args=args, nprocs=gpus, join=True)
    return 0
