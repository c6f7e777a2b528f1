"""all_reduce bus bandwidth with PyTorch distributed (NCCL), for hosts without nccl-tests.

Prints a table in nccl-tests' text format so that one parser reads both; the first line says which
tool measured. Same sizes (-b, -e, -f) and the same busbw formula: algbw * 2 * (n - 1) / n.
torch.distributed.all_reduce is in-place only, so both column groups hold the in-place measurement.
Run: python -m pytest_gpuaccept.workloads.torch_allreduce -g 8 -b 8388608 -e 8589934592 -f 2
Across nodes (the Kubernetes engine's pods, one per node): the same on every node with --nnodes N --node-rank R
--master-addr A --master-port P; rank 0 listens at A:P, each node's ranks are R*g .. R*g+g-1, and rank 0 prints
the table (every rank its own `# Rank` line, on its node).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

from . import spawn_per_gpu


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _sizes(low: int, high: int, factor: int) -> list[int]:
    sizes, size = [], low
    while size <= high:
        sizes.append(size)
        size *= factor
    return sizes


def _address(props: Any) -> str:
    """The GPU's PCI address as nccl-tests prints it: `[0001:00:00]` (domain:bus:device); `[0x18]` (the bus
    alone, which gpuaccept places only where one GPU sits on that bus) from a torch that gives no domain or
    device; `[unknown]` (no rank line, so not placed) from one that gives no bus. Never a guessed 0."""
    domain, bus, device = (getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if bus is None:
        return "[unknown]"
    if domain is None or device is None:
        return f"[0x{bus:02x}]"
    return f"[{domain:04x}:{bus:02x}:{device:02x}]"


def _worker(local: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    cuda = args.backend == "nccl"
    rank = args.node_rank * args.g + local
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(args.backend, init_method=f"tcp://{args.master_addr}:{port}", rank=rank, world_size=world)
    if rank == 0:
        print(f"# gpuaccept torch.distributed all_reduce, backend {args.backend}, torch {torch.__version__}")
        print(f"# nThread 1 nGpus {world} minBytes {args.b} maxBytes {args.e} step: {args.f}(factor) "
              f"warmup iters: {args.w} iters: {args.n} agg iters: 1 validation: 1 graph: 0")
        print("#")
        print("# Using devices")
    _say_placement(rank, world, cuda, local)
    if rank == 0:
        print("# torch.distributed.all_reduce is in-place: the out-of-place columns hold it, the in-place ones N/A")
        print("#\n#                                                              out-of-place                       in-place")
        print("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong")
        print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)", flush=True)
    for size in _sizes(args.b, args.e, args.f):
        _time_size(size, rank, world, cuda, args, local)
    dist.barrier()
    if rank == 0:
        print("# Out of bounds values : 0 OK")
    dist.destroy_process_group()


def _say_placement(rank: int, world: int, cuda: bool, local: int) -> None:
    """Each rank's `#  Rank ... Pid ... on HOST device N [ADDRESS] NAME` line, in rank order."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    for r in range(world):
        if r == rank:
            # The PID is the process gpuaccept started (each rank is its child, as nccl-tests' -g ranks are
            # threads of one process), and the bus the GPU's: gpuaccept checks both against the run and NVML.
            if cuda:
                props = torch.cuda.get_device_properties(local)
                where = f"{_address(props)} {props.name}"
            else:
                where = "cpu"
            print(f"#  Rank {rank:2d} Group  0 Pid {os.getppid():6d} on {socket.gethostname()} device {local:2d} {where}",
                  flush=True)
        dist.barrier()


def _time_size(size: int, rank: int, world: int, cuda: bool, args: argparse.Namespace, local: int) -> None:
    """One row of the table: `size` bytes all-reduced (warm-up, then timed, then validated); rank 0 prints it."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    count = size // 4
    data = torch.ones(count, dtype=torch.float32, device=device)
    for _ in range(args.w):
        dist.all_reduce(data)
    _sync(cuda)
    start = time.perf_counter()
    for _ in range(args.n):
        dist.all_reduce(data)
    _sync(cuda)
    seconds = (time.perf_counter() - start) / args.n
    # Validate: all ones reduced (w + n) times by sum over `world` ranks.
    data.fill_(1.0)
    dist.all_reduce(data)
    _sync(cuda)
    wrong = torch.tensor([int((data != world).sum().item())], device=device)
    dist.all_reduce(wrong)
    algbw = size / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    if rank == 0:
        cells = f"{seconds * 1e6:8.1f} {algbw:7.2f} {busbw:7.2f} {int(wrong.item()):7d}"
        print(f"{size:12d} {count:13d}     float     sum      -1 {cells} {'N/A':>8} {'N/A':>7} {'N/A':>7} {'N/A':>7}",
              flush=True)
    del data


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-g", type=int, required=True, help="processes (one GPU each)")
    parser.add_argument("-b", type=int, required=True, help="smallest message, bytes")
    parser.add_argument("-e", type=int, required=True, help="largest message, bytes")
    parser.add_argument("-f", type=int, default=2, help="size factor")
    parser.add_argument("-n", type=int, default=20, help="timed iterations")
    parser.add_argument("-w", type=int, default=5, help="warmup iterations")
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"), help="gloo: CPU self-test only")
    parser.add_argument("--nnodes", type=int, default=1, help="nodes taking part, each running this with -g GPUs")
    parser.add_argument("--node-rank", type=int, default=0, help="this node's place (0: the one rank 0 listens on)")
    parser.add_argument("--master-addr", default="127.0.0.1", help="the address of node rank 0")
    parser.add_argument("--master-port", type=int, default=0, help="its port (0: a free one, on one node only)")
    args = parser.parse_args(argv)
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes or (args.nnodes > 1 and not args.master_port):
        parser.error("--node-rank must be below --nnodes, and several nodes need --master-addr and --master-port")
    port = args.master_port or _free_port()
    return spawn_per_gpu(_worker, args.g, (args.nnodes * args.g, port, args), need_cuda=args.backend == "nccl")


if __name__ == "__main__":
    sys.exit(main())
