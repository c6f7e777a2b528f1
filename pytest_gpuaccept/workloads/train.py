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

Across nodes (cluster.utilisation): ONE data-parallel job (DistributedDataParallel: NCCL on GPUs, gloo on the CPU),
the same command on every node with --nnodes N --node-rank R --master-addr A --master-port P; rank 0 listens at A:P,
each node's ranks are R*gpus .. R*gpus+gpus-1 (the PyTorch all_reduce's rendezvous). The ranks stop together (each
step all-reduces whether any rank's time is up). With --nvml, this node's GPUs are sampled through NVML while it
trains (`live`, or a recording's samples replayed from the file named) and the samples are printed last, one line:

    gpuaccept-nvml-samples {"fields": [...], "gpus": [...]}
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from . import spawn_per_gpu

VOCAB = 32000
FIRST_STEPS = 3  # steps of the one-layer model, at a quarter of the batch, before the full model takes over
SAMPLES_LINE = "gpuaccept-nvml-samples "  # the last line of a node's output with --nvml: its NVML samples
SAMPLE_INTERVAL_S = 0.15  # as the single-host load samples (clauses/utilisation.py)


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


def _worker(local: int, args: argparse.Namespace) -> None:
    import torch

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cuda = args.device == "cuda"
    rank = args.node_rank * args.gpus + local  # this node's ranks follow the nodes before it
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local)
        torch.backends.cuda.matmul.allow_tf32 = True
    start = last = time.monotonic()
    generator = torch.Generator(device=device).manual_seed(rank)
    with device:  # every parameter is made where it is trained: no model on the CPU, no copy
        _first_step(torch, rank, args, device, generator)
        model = _model(torch, args.width, args.layers)
    distributed = args.nnodes > 1
    if distributed:
        model = _data_parallel(torch, model, rank, local, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    steps = 0
    # At least one step of the full model (in one job: one all_reduce of its gradients across the nodes), however
    # long the start-up took; every rank of a job counts the same steps, so all ask _time_up together.
    while steps == 0 or not _time_up(torch, time.monotonic() - start >= args.duration, distributed, device):
        tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), device=device, generator=generator)
        loss = _step(torch, model, optimizer, tokens, device)
        steps += 1
        if time.monotonic() - last >= 10.0:
            if cuda:
                torch.cuda.synchronize(device)
            now = time.monotonic()
            print(f"rank {rank}: {steps} steps, {steps / (now - start):.2f} steps/s, loss {loss.item():.3f}", flush=True)
            last = now
    # The weights' sum: one value on every rank of a data-parallel job (its gradients were all-reduced each step).
    weights = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    print(f"rank {rank}: done, {steps} steps in {time.monotonic() - start:.1f} s, weights sum {weights:.6e}", flush=True)
    if distributed:
        torch.distributed.destroy_process_group()


def _data_parallel(torch: Any, model: Any, rank: int, local: int, args: argparse.Namespace) -> Any:
    """The model in one DistributedDataParallel job over every rank of every node: each step's gradients all-reduced
    across the nodes (NCCL on GPUs, gloo on the CPU), the job's ranks meeting at --master-addr:--master-port."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=rank, world_size=args.nnodes * args.gpus)
    print(f"rank {rank}: joined the job of {args.nnodes * args.gpus} ranks on {args.nnodes} nodes", flush=True)
    return DistributedDataParallel(model, device_ids=[local] if cuda else None)


def _time_up(torch: Any, mine: bool, distributed: bool, device: Any) -> bool:
    """Whether to stop: in one job, when any rank's time is up (all-reduced), so that every rank stops at the same
    step and none waits in an all_reduce the others left."""
    if not distributed:
        return mine
    flag = torch.tensor([1.0 if mine else 0.0], device=device)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return bool(flag.item() > 0)


def _samples(source: str, gpus: int, stop: threading.Event, cap_s: float) -> dict[str, Any]:
    """This node's NVML samples until `stop` (at most cap_s): `live` from the driver, else a recording's samples
    (the file --gpuaccept-nvml names, docs/nvml-recording.md) replayed once the load is done."""
    from ..probes import nvml

    if source == "live":
        return nvml.sample_gpus(gpus, SAMPLE_INTERVAL_S, cap_s, stop)
    stop.wait(cap_s)
    try:
        with open(source) as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        return {"error": f"recorded NVML readings {source} unreadable: {exc}"}
    samples = data.get(nvml.RECORDED_SAMPLES) if isinstance(data, dict) else None
    return samples if isinstance(samples, dict) else {"error": f"the NVML recording {source} has no utilisation samples"}


def _sampled(args: argparse.Namespace, train: Any) -> int:
    """Train while this node's GPUs are sampled (--nvml), then print the samples as the last line."""
    stop, taken = threading.Event(), {}
    sampler = threading.Thread(target=lambda: taken.update(_samples(args.nvml, args.gpus, stop, args.duration + 600)),
                               name="gpuaccept-sampler", daemon=True)
    sampler.start()
    try:
        code: int = train()
    finally:
        stop.set()
        sampler.join(timeout=30)
        print(SAMPLES_LINE + json.dumps(taken or {"error": "the NVML sampler did not finish"}), flush=True)
    return code


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
    parser.add_argument("--nnodes", type=int, default=1, help="nodes taking part, each running this with --gpus")
    parser.add_argument("--node-rank", type=int, default=0, help="this node's place (0: the one rank 0 listens on)")
    parser.add_argument("--master-addr", default="127.0.0.1", help="the address of node rank 0")
    parser.add_argument("--master-port", type=int, default=0, help="its port")
    parser.add_argument("--nvml", help="sample this node's GPUs while training: `live`, or an NVML recording's path")
    args = parser.parse_args(argv)
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes or (args.nnodes > 1 and not args.master_port):
        parser.error("--node-rank must be below --nnodes, and several nodes need --master-addr and --master-port")
    args.launched = launched

    def train() -> int:
        return spawn_per_gpu(_worker, args.gpus, (args,), need_cuda=args.device == "cuda")

    return _sampled(args, train) if args.nvml else train()


if __name__ == "__main__":
    sys.exit(main())
