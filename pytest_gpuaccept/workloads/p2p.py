"""GPU-to-GPU copy bandwidth with PyTorch: every ordered pair over peer access, and both ways at once.

A pair without peer access (torch.cuda.can_device_access_peer) is reported as such and never copied:
PyTorch would stage the copy through host memory, and that number is not a P2P figure. Each copy is
warmed up, then timed `--repeats` times with CUDA events on the source GPU; the reader computes the rate
from bytes and seconds. `--bidirectional` also copies i -> j and j -> i at once on two streams.

    # pytest-gpuaccept p2p: PyTorch 2.13.0, device cuda, 1073741824 bytes, 10 repeats
    {"src": 0, "dst": 1, "peer": true, "bytes": 1073741824, "seconds": [...]}
    {"pair": [0, 1], "peer": true, "bytes": 1073741824, "seconds": [...]}

`--device cpu` runs the same loop between CPU tensors (the project's tests; never a GPU figure).
Run: python -m pytest_gpuaccept.workloads.p2p --gpus 8 --bytes 1073741824 --repeats 10 --bidirectional
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from . import copy_arguments, torch_missing


def _timed(copies: list[tuple[Any, Any]], device: str, repeats: int) -> list[float]:
    """Seconds for each repeat of all `copies` (target, source) issued at once, each on its own stream."""
    import torch

    cuda = device.startswith("cuda")
    streams = [torch.cuda.Stream(device=device) for _ in copies] if cuda else []
    for target, source in copies:  # warm-up
        target.copy_(source)
    seconds = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for stream, (target, source) in zip(streams, copies):
                stream.wait_event(start)
                with torch.cuda.stream(stream):
                    target.copy_(source, non_blocking=True)
            for stream in streams:
                torch.cuda.current_stream(device).wait_stream(stream)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1000.0)
        else:
            began = time.perf_counter()
            for target, source in copies:
                target.copy_(source)
            seconds.append(time.perf_counter() - began)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = copy_arguments(__doc__, 1 << 30, 10)
    parser.add_argument("--bidirectional", action="store_true")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    missing = torch_missing(args.gpus, cuda)
    if missing:
        return missing
    import torch

    print(f"# pytest-gpuaccept p2p: PyTorch {torch.__version__}, device {args.device}, {args.bytes} bytes, "
          f"{args.repeats} repeats", flush=True)
    where = [f"cuda:{i}" if cuda else "cpu" for i in range(args.gpus)]
    buffers = [torch.ones(args.bytes, dtype=torch.uint8, device=d) for d in where]
    targets = [torch.empty(args.bytes, dtype=torch.uint8, device=d) for d in where]
    for i in range(args.gpus):
        for j in range(args.gpus):
            if i == j:
                continue
            peer = bool(torch.cuda.can_device_access_peer(i, j)) if cuda else True
            line: dict[str, Any] = {"src": i, "dst": j, "peer": peer, "bytes": args.bytes}
            if peer:
                line["seconds"] = _timed([(targets[j], buffers[i])], where[i], args.repeats)
            print(json.dumps(line), flush=True)
    if args.bidirectional:
        for i in range(args.gpus):
            for j in range(i + 1, args.gpus):
                peer = (bool(torch.cuda.can_device_access_peer(i, j) and torch.cuda.can_device_access_peer(j, i))
                        if cuda else True)
                both: dict[str, Any] = {"pair": [i, j], "peer": peer, "bytes": args.bytes}
                if peer:
                    both["seconds"] = _timed([(targets[j], buffers[i]), (targets[i], buffers[j])], where[i], args.repeats)
                print(json.dumps(both), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
