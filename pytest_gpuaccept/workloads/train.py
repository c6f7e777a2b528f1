"""The builtin workload: a small transformer trained on synthetic tokens, one process per GPU.

bf16 autocast and AdamW, sized to keep a datacentre GPU busy; nothing is downloaded. It runs until
`--duration` is over or gpuaccept stops it (SIGTERM), printing its step rate as it goes.
Run: python -m pytest_gpuaccept.workloads.train --gpus 8 --duration 90
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from . import spawn_per_gpu


def _worker(rank: int, args: argparse.Namespace) -> None:
    import torch
    from torch import nn

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(rank)
        torch.backends.cuda.matmul.allow_tf32 = True
    width, layers, seq, batch = (args.width, args.layers, args.seq, args.batch)
    vocab = 32000
    model = nn.Sequential(
        nn.Embedding(vocab, width),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(width, width // 64, 4 * width, batch_first=True,
                                                         norm_first=True, dropout=0.0), layers),
        nn.Linear(width, vocab),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator(device=device).manual_seed(rank)
    start = last = time.monotonic()
    steps = 0
    while time.monotonic() - start < args.duration:
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=device, generator=generator)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = loss_fn(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
        if time.monotonic() - last >= 10.0:
            if cuda:
                torch.cuda.synchronize(device)
            now = time.monotonic()
            print(f"rank {rank}: {steps} steps, {steps / (now - start):.2f} steps/s, loss {loss.item():.3f}", flush=True)
            last = now
    print(f"rank {rank}: done, {steps} steps in {time.monotonic() - start:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: self-test only")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    return spawn_per_gpu(_worker, args.gpus, (args,), need_cuda=args.device == "cuda")


if __name__ == "__main__":
    sys.exit(main())
