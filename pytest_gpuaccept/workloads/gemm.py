"""Dense GEMM throughput with PyTorch, every GPU at once for a duration: burst and sustained TFLOPS.

One process per GPU multiplies two random, non-zero n x n matrices in the contract's dtype (fp8 through
torch._scaled_mm) again and again for `--duration` seconds, all GPUs together, so that the power and
cooling of the whole box are part of the measurement. Every `--window` seconds each GPU prints what it
did in that window; the reader takes burst (the best early window) and sustained (the median of the
rest) from these lines, never from a figure the program computes for itself:

    # pytest-gpuaccept gemm: PyTorch 2.13.0, device cuda, dtype bf16, n 8192, duration 30 s
    {"gpu": 0, "t_s": 1.003, "matmuls": 812, "seconds": 1.003, "n": 8192}
    ...
    {"gpu": 0, "done": true, "finite": true}

`--device cpu` runs the same loop on the CPU (the project's tests run it for real there; never a GPU figure).
Run: python -m pytest_gpuaccept.workloads.gemm --gpus 8 --dtype bf16 --n 8192 --duration 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from . import spawn_per_gpu, torch_missing

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp64", "fp8")


def _matrices(n: int, dtype: str, device: str) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(1234)
    # rand + 0.5: every entry non-zero, so no sparsity or zero-skipping can flatter the figure.
    a = torch.rand(n, n, device=device) + 0.5
    b = torch.rand(n, n, device=device) + 0.5
    kinds = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32,
             "fp64": torch.float64, "fp8": getattr(torch, "float8_e4m3fn", torch.float32)}
    if dtype in ("tf32", "fp32") and device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    if dtype == "fp8":
        return a.to(kinds["fp8"]), b.t().contiguous().t().to(kinds["fp8"])  # _scaled_mm wants b column-major
    return a.to(kinds[dtype]), b.to(kinds[dtype])


def _multiply(a: Any, b: Any, dtype: str) -> Any:
    import torch

    if dtype == "fp8":
        one = torch.ones((), device=a.device)
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return a @ b


def _worker(rank: int, args: argparse.Namespace) -> None:
    import torch

    device = f"cuda:{rank}" if args.device == "cuda" else "cpu"
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(rank)
    a, b = _matrices(args.n, args.dtype, device)
    c = _multiply(a, b, args.dtype)  # warm-up: kernels chosen, clocks up
    if cuda:
        torch.cuda.synchronize(device)
    batch = 8 if cuda else 1
    start = window_start = time.perf_counter()
    count = 0
    while True:
        for _ in range(batch):
            c = _multiply(a, b, args.dtype)
        if cuda:
            torch.cuda.synchronize(device)
        count += batch
        now = time.perf_counter()
        if now - window_start >= args.window or now - start >= args.duration:
            print(json.dumps({"gpu": rank, "t_s": round(now - start, 3), "matmuls": count,
                              "seconds": round(now - window_start, 6), "n": args.n}), flush=True)
            window_start, count = now, 0
        if now - start >= args.duration:
            break
    finite = bool(torch.isfinite(c.float()).all()) and float(c[0, 0]) > 0
    print(json.dumps({"gpu": rank, "done": True, "finite": finite}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    missing = torch_missing(args.gpus, args.device == "cuda")
    if missing:
        return missing
    import torch

    print(f"# pytest-gpuaccept gemm: PyTorch {torch.__version__}, device {args.device}, dtype {args.dtype}, "
          f"n {args.n}, duration {args.duration:g} s", flush=True)
    return spawn_per_gpu(_worker, args.gpus, (args,), need_cuda=args.device == "cuda")


if __name__ == "__main__":
    sys.exit(main())
