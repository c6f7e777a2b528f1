"""The builtin workload: a small transformer trained on synthetic tokens, one process per GPU.

bf16 autocast and AdamW, sized to keep a datacentre GPU busy; nothing is downloaded. It runs until
`--duration` is over or gpuaccept stops it (SIGTERM), printing its step rate as it goes.

It loads the GPU as soon as it can: the model is built on the GPU itself (never on the CPU and then copied:
on a real H200 that made the first step come 18.9 s after launch), and the first steps train a model of one
layer at a small batch while the full model is built, then it grows to full size. Each rank says when its
first step was done, in seconds since the workload's process started (the kernel's start time of the
process gpuaccept launched), which the results keep as the load's start-up time:

    rank 0: first step 2.31 s after launch

Run: python -m pytest_gpuaccept.workloads.train --gpus 8 --duration 90
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

from . import spawn_per_gpu

VOCAB = 32000
FIRST_STEPS = 3  # steps of the one-layer model, at a quarter of the batch, before the full model takes over


def since_boot() -> float | None:
    """Seconds since boot (/proc/uptime), the clock of a process's start time; None where it cannot be read."""
    try:
        with open("/proc/uptime") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def process_start() -> float | None:
    """When this process started, in seconds since boot (/proc/self/stat's starttime over the clock tick)."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _model(torch: Any, width: int, layers: int) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Embedding(VOCAB, width),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(width, max(1, width // 64), 4 * width, batch_first=True,
                                                         norm_first=True, dropout=0.0), layers, enable_nested_tensor=False),
        nn.Linear(width, VOCAB),
    )


def _step(torch: Any, model: Any, optimizer: Any, tokens: Any, device: Any) -> Any:
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def _first_step(torch: Any, rank: int, args: argparse.Namespace, device: Any, generator: Any) -> None:
    """A few steps of a one-layer model at a quarter of the batch, built on the device: the GPU works within a
    second of CUDA's start; then say when the first step was done."""
    small = _model(torch, args.width, 1)
    optimizer = torch.optim.AdamW(small.parameters(), lr=1e-4)
    batch = max(1, args.batch // 4)
    for n in range(FIRST_STEPS):
        tokens = torch.randint(0, VOCAB, (batch, args.seq + 1), device=device, generator=generator)
        _step(torch, small, optimizer, tokens, device)
        if n == 0:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            now = since_boot()
            if now is not None and args.launched is not None:
                print(f"rank {rank}: first step {now - args.launched:.2f} s after launch", flush=True)


def _worker(rank: int, args: argparse.Namespace) -> None:
    import torch

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(rank)
        torch.backends.cuda.matmul.allow_tf32 = True
    start = last = time.monotonic()
    generator = torch.Generator(device=device).manual_seed(rank)
    with device:  # every parameter is made where it is trained: no model on the CPU, no copy
        _first_step(torch, rank, args, device, generator)
        model = _model(torch, args.width, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    steps = 0
    while time.monotonic() - start < args.duration:
        tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), device=device, generator=generator)
        loss = _step(torch, model, optimizer, tokens, device)
        steps += 1
        if time.monotonic() - last >= 10.0:
            if cuda:
                torch.cuda.synchronize(device)
            now = time.monotonic()
            print(f"rank {rank}: {steps} steps, {steps / (now - start):.2f} steps/s, loss {loss.item():.3f}", flush=True)
            last = now
    print(f"rank {rank}: done, {steps} steps in {time.monotonic() - start:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    launched = process_start()  # before anything else: the start-up counts from the process gpuaccept started
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: self-test only")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    args.launched = launched
    return spawn_per_gpu(_worker, args.gpus, (args,), need_cuda=args.device == "cuda")


if __name__ == "__main__":
    sys.exit(main())
