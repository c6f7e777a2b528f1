"""A node's side of cluster.links.rdma, started on the node by the engine (`python -m pytest_gpuaccept.cluster.rdma_side`):
`info` reads the node's RDMA devices in its own sysfs (link layer, LID, rate, the GID of the port's IPv4 and its
index), so that a peer's address is what the peer itself says; `run` reads the devices' port counters, starts this
node's ib_write_bw servers and, a head start later, its clients, all at once, reads the counters again, and prints
one JSON object: every tool's output, exit code and time on this node's monotonic clock, and the counters with the
clocks they were read at (probes/counters.py). One launcher a node a step: an engine that runs one step a node at a
time (srun --exclusive) still runs every rail of the node at once.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..probes.counters import SAMPLE_S, read_port_counters
from ..probes.sysfs import read_ib_device

MODULE = "pytest_gpuaccept.cluster.rdma_side"


def device_info(sys_root: Path, device: str) -> dict[str, Any]:
    """Port 1 of `device`: state, rate, link layer, LID, and the RoCE v2 GID of its IPv4 (index, text)."""
    reading = read_ib_device(sys_root, device)
    port = reading["ports"].get("1")
    if port is None:
        return {"device": device, "error": f"{sys_root}/class/infiniband/{device}/ports/1: no such port"}
    folder = sys_root / "class" / "infiniband" / device / "ports" / "1"
    index = port.get("roce_v2_gid_index")
    gid = _read(folder / "gids" / str(index)) if index is not None else None
    ndev = _read(folder / "gid_attrs" / "ndevs" / str(index)) if index is not None else None
    return {"device": device, **{k: port.get(k) for k in ("state", "phys_state", "rate", "link_layer")},
            "lid": _read(folder / "lid"), "gid_index": index, "gid": gid, "ndev": ndev}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def run_tools(sys_root: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Every tool of `spec` at once (servers first, clients `head_start_s` later), the devices' counters before and
    after them and every SAMPLE_S while they run (the busiest stretch is what a rate is held to: counters.busiest)."""
    devices = sorted({t["device"] for t in spec["tools"]})
    before = {d: read_port_counters(sys_root, d, 1) for d in devices}
    samples: dict[str, list[dict[str, Any]]] = {d: [before[d]] for d in devices}
    started: list[tuple[dict[str, Any], subprocess.Popen[bytes] | None, float, str | None]] = []
    with tempfile.TemporaryDirectory(prefix="gpuaccept-rdma-") as folder:  # files, not pipes: a full pipe stalls a tool
        origin = time.monotonic()
        for n, tool in enumerate(sorted(spec["tools"], key=lambda t: t["role"] != "server")):
            if tool["role"] == "client":
                time.sleep(max(0.0, origin + float(spec.get("head_start_s", 1.0)) - time.monotonic()))
            try:
                with open(Path(folder, f"{n}.out"), "wb") as out, open(Path(folder, f"{n}.err"), "wb") as err:
                    process = subprocess.Popen(tool["argv"], stdout=out, stderr=err)
                started.append((tool, process, time.monotonic(), None))
            except OSError as exc:
                started.append((tool, None, time.monotonic(), f"{tool['argv'][0]}: {exc.strerror or exc}"))
        deadline = origin + float(spec.get("timeout_s", 60.0))
        running = [p for _t, p, _b, _e in started if p is not None]
        ended: dict[int, float] = {}
        while running and time.monotonic() < deadline:
            time.sleep(SAMPLE_S)
            for d in devices:
                reading = read_port_counters(sys_root, d, 1)
                samples[d].append({k: v for k, v in reading.items() if k not in ("device", "port")})
            for process in running:
                if process.poll() is not None:
                    ended.setdefault(process.pid, time.monotonic())
            running = [p for p in running if p.poll() is None]
        reports = [_finished(tool, process, began, error, ended, Path(folder), n)
                   for n, (tool, process, began, error) in enumerate(started)]
    after = {d: read_port_counters(sys_root, d, 1) for d in devices}
    return {"before": before, "after": after, "samples": {d: samples[d] + [after[d]] for d in devices}, "tools": reports}


def _finished(tool: dict[str, Any], process: subprocess.Popen[bytes] | None, began: float, error: str | None,
              ended: dict[int, float], folder: Path, n: int) -> dict[str, Any]:
    """One tool's output, exit code and time (killed where it outlived the deadline)."""
    entry = {"name": tool["name"], "role": tool["role"], "device": tool["device"], "argv": tool["argv"]}
    if process is None:
        return {**entry, "returncode": None, "stdout": "", "stderr": "", "seconds": 0.0, "error": error}
    timed_out = process.poll() is None
    if timed_out:
        process.kill()
    process.wait()
    stop = ended.get(process.pid, time.monotonic())
    stdout = Path(folder, f"{n}.out").read_bytes()[-200_000:].decode(errors="replace")
    stderr = Path(folder, f"{n}.err").read_bytes()[-2000:].decode(errors="replace")
    return {**entry, "returncode": process.returncode, "stdout": stdout, "stderr": stderr,
            "seconds": round(stop - began, 4), "timed_out": timed_out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE)
    parser.add_argument("what", choices=("info", "run"))
    parser.add_argument("--sysfs", default="/sys")
    parser.add_argument("--devices", default="")
    parser.add_argument("--spec", default="")
    args = parser.parse_args(argv)
    root = Path(args.sysfs)
    if args.what == "info":
        result: dict[str, Any] = {d: device_info(root, d) for d in args.devices.split(",") if d}
    else:
        result = run_tools(root, json.loads(base64.b64decode(args.spec)))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
