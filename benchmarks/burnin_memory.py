"""What a long burn-in costs the pytest process: its peak memory (RSS) for a load of N hours of 8 GPUs.

The fake host is the benchmark's 8-GPU H100 (benchmarks/overhead.py: its NVML recording and sysfs tree) with a
`burnin` section and a stand-in workload (`sleep`). The recording's burn-in stream is a named pipe that a thread
of this process feeds as fast as the run reads it: every GPU sampled every 0.15 s (the live sampler's interval)
and its error counters every 10 s, for N hours of load, made as they are written and never held anywhere, so that
what is measured is the run's own memory. The run's peak RSS is the kernel's (wait4's ru_maxrss of the pytest
process: the fake workload and dmesg are far smaller).

    python benchmarks/burnin_memory.py --hours 8 [--hours 24] [--interval 0.15]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from overhead import DATA, sysfs

FIELDS = ["t_s", "util_percent", "sm_clock_mhz", "power_w", "temp_c", "throttle_reasons", "pcie_gen", "pcie_width",
          "power_limit_w"]


def stream(hours: float, gpus: int = 8, interval: float = 0.15) -> Iterator[str]:
    """The lines of a steady burn-in (busy from t=2 s, utilisation 97-100 %, the clock and power moving a little),
    made one at a time."""
    yield json.dumps({"stream": "gpuaccept-burnin", "interval_s": interval, "fields": FIELDS, "counters_every_s": 10.0,
                      "nvlink_error_kinds": ["replay", "recovery", "crc_flit", "crc_data", "ecc_data"],
                      "gpus": [{"index": i, "slowdown_temp_c": 87, "nvlinks": list(range(18))} for i in range(gpus)]})
    every = max(1, round(10 / interval))
    steps = int(hours * 3600 / interval)
    for n in range(steps):
        t = round(n * interval, 3)
        if n % every == 0:
            for i in range(gpus):
                yield (f'{{"t_s":{t},"gpu":{i},"ecc":[0,0],"remapped_rows":[0,0,0,0],'
                       f'"nvlink_errors":[0,0,0,0,0]}}')
        busy = t >= 2.0
        for i in range(gpus):
            wobble = (n + i) % 4
            yield (f"[{i},{t},{97 + wobble if busy else 0},{1950 + 10 * wobble if busy else 345},"
                   f"{680.0 + wobble if busy else 70.0},{70 + wobble if busy else 35},{4 if busy else 1},5,16,700.0]")
    yield json.dumps({"end": True, "t_s": round(steps * interval, 3)})


CONTRACT = """\
gpuaccept: 1
vendor: "Benchmark"
gpus: {{count: 8}}
burnin: {{duration: "{hours:g} h", workload: ["burn-job"], max_throttle_s: 5, min_percent: 90}}
"""


@dataclass(frozen=True)
class Result:
    hours: float
    rows: int
    wall_s: float
    peak_rss_mb: float
    stream_mb: float
    verdict: str


def _host(root: Path, hours: float, fifo: Path) -> None:
    (root / "bin").mkdir()
    (root / "bin" / "burn-job").write_text("#!/bin/sh\nsleep 100000\n")
    (root / "bin" / "burn-job").chmod(0o755)
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    reading["burnin"] = {"stream": str(fifo)}
    (root / "nvml.json").write_text(json.dumps(reading))
    (root / "vendor.yaml").write_text(CONTRACT.format(hours=hours))
    sysfs(root / "sys")


def run(hours: float, root: Path, interval: float = 0.15, gpus: int = 8) -> Result:
    """One run of `hours` of burn-in on the fake host in `root`; its wall time and the pytest process's peak RSS."""
    fifo = root / "burnin-stream.jsonl"
    _host(root, hours, fifo)
    os.mkfifo(fifo)
    rows = int(hours * 3600 / interval) * gpus
    env = {**os.environ, "PATH": f"{root / 'bin'}:{os.environ.get('PATH', '')}"}
    work = root / "run"
    work.mkdir()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--contract={root / 'vendor.yaml'}",
                             f"--gpuaccept-nvml={root / 'nvml.json'}", f"--gpuaccept-sysfs={root / 'sys'}"],
                            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def feed() -> None:
        with open(fifo, "w") as pipe:
            for line in stream(hours, gpus, interval):
                pipe.write(line + "\n")

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, for its rusage: Popen is told
    wall = time.monotonic() - started
    results = json.loads((work / "gpuaccept-results.json").read_text())
    kept = work / "gpuaccept-evidence" / "burnin-stream.jsonl"
    return Result(hours, rows, round(wall, 1), round(usage.ru_maxrss / 1024, 1),
                  round(kept.stat().st_size / 1e6, 1) if kept.exists() else 0.0, results["verdict"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, action="append", help="hours of load (repeatable; default 8)")
    parser.add_argument("--interval", type=float, default=0.15)
    args = parser.parse_args()
    for hours in args.hours or [8.0]:
        with tempfile.TemporaryDirectory() as folder:
            r = run(hours, Path(folder), args.interval)
        print(f"{r.hours:g} h of 8 GPUs every {args.interval:g} s: {r.rows:,} samples, peak RSS {r.peak_rss_mb} MB, "
              f"wall {r.wall_s} s, stream kept {r.stream_mb} MB, {r.verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
