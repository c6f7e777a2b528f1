"""What pytest-gpuaccept itself costs: a full 8-GPU contract run with instant fake tools, its wall time
less the time its tools took (the run's own records of each tool: `duration_s` in gpuaccept-evidence/*.json,
the load window included). That difference is the plugin's own time, held to a budget (benchmarks/README.md,
tests/test_budget.py). For context it also times plain pytest running as many trivial tests with a
self-contained pytest-html report, without the plugin.

    python benchmarks/overhead.py [--repeat 5] [--split]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
CONTRACT = """\
gpuaccept: 1
vendor: "Benchmark"
gpus: {count: 8, model: "H100", memory: "80 GB", driver: ">=550", cuda: ">=12.4"}
nvlink: {every_pair: true, min_links: 18, links_per_gpu: 18, link_speed: "26.5 GB/s", errors_stable: true}
allreduce: {min_busbw: "30 GB/s", min_bytes: "8 B", max_bytes: "128 MiB", repeats: 2, args: ["-n", "1"]}
utilisation: {min_percent: 80, duration: "0.02 s", warmup: "0.01 s", workload: ["train-job"]}
health: {ecc: true, row_remapping: true, throttle: true, pcie_gen: 5, pcie_width: 16}
"""


def fake_bin(folder: Path) -> None:
    """Instant tools: shell scripts that print a recorded output."""
    folder.mkdir()
    status = "\n".join(
        line for gpu in range(8) for line in
        [f"GPU {gpu}: NVIDIA H100 80GB HBM3 (UUID: GPU-{gpu})"] + [f"\t Link {n}: 26.562 GB/s" for n in range(18)])
    errors = "\n".join(
        line for gpu in range(8) for line in
        [f"GPU {gpu}: NVIDIA H100 80GB HBM3 (UUID: GPU-{gpu})"] + [f"\t Link {n}: CRC Errors: 0" for n in range(18)])
    (folder / "status.txt").write_text(status + "\n")
    (folder / "errors.txt").write_text(errors + "\n")
    # The real RTX 5090 log (to 128 MiB), its rank lines on the recording's GPUs, named as NVML names them, with the
    # printing shell's PID ($$): the output must be this run's (nccl-tests placement, names and plausibility), one
    # iteration per size. Constructed from the real log: a benchmark of the plugin's cost, not of a host.
    log = (DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt").read_text()
    log = log.replace("NVIDIA GeForce RTX 5090", "NVIDIA H100 80GB HBM3")
    log = re.sub(r"Pid\s+\d+(.*?device\s+(\d+)\s+)\[[^\]]+\]",
                 lambda m: f"Pid @PID@{m.group(1)}[0x{0x18 + 0x10 * int(m.group(2)):02x}]", log)
    (folder / "allreduce.txt").write_text(log.replace("iters: 20", "iters: 1"))
    topo = DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"
    scripts = {
        "nvidia-smi": f'case "$1 $2" in "topo -m") cat {topo};; "nvlink -s") cat {folder}/status.txt;; '
                      f'*) cat {folder}/errors.txt;; esac',
        "all_reduce_perf": f"sed s/@PID@/$$/ {folder}/allreduce.txt",
        "train-job": "sleep 30",
    }
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)


def sysfs(root: Path) -> None:
    """The recording's GPUs as PCI functions (gpus.identity reads them), and the four NVSwitches (0x22a3) an HGX
    H100 board has (nvlink: the switches NVML's links lead into must exist)."""
    functions = [(f"0000:{gpu['pci_bus_id'].split(':', 1)[1].lower()}", "0x2330", "0x030200")
                 for gpu in json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())["gpus"]]
    functions += [(f"0000:{bus:02x}:00.0", "0x22a3", "0x068000") for bus in (0xc0, 0xc1, 0xc2, 0xc3)]  # as NVML says
    for address, device, klass in functions:
        folder = root / "bus" / "pci" / "devices" / address
        folder.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", device), ("class", klass)):
            (folder / name).write_text(value + "\n")


def nvml_recording(path: Path) -> None:
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    rows = [[round(n * 0.15, 2), 99, 1980, 690.0, 70, 4, 5, 16] for n in range(400)]
    health = {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": None}
    reading["utilisation"] = {"interval_s": 0.15, "fields": ["t_s", "util_percent", "sm_clock_mhz", "power_w",
                                                             "temp_c", "throttle_reasons", "pcie_gen", "pcie_width"],
                              "gpus": [{"index": i, "samples": rows, "health": health, "xid": {"events": []}}
                                       for i in range(8)]}
    path.write_text(json.dumps(reading))


ACCEPT_ARGS = ["-q", "-p", "no:cacheprovider"]
# The baseline runs without pytest-gpuaccept (-p no:...): it is what pytest and pytest-html cost on their own.
PLAIN = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:gpuaccept", "-p", "no:gpuaccept_fixtures",
         "--html=report.html", "--self-contained-html"]


@dataclass(frozen=True)
class Run:
    """One timed run: its wall time, the time its tools took, and what is left, the plugin's own time. Also
    the CPU time the run used, its tools' included (on a busy machine the wall clock also counts the time
    spent waiting for a CPU; the CPU time does not)."""

    wall_s: float
    tools_s: float
    cpu_s: float
    checks: int

    @property
    def own_s(self) -> float:
        return self.wall_s - self.tools_s


class Bench:
    """The benchmark's fake host in a folder: instant tools on PATH, an NVML recording, a sysfs tree."""

    def __init__(self, root: Path, contract: str = CONTRACT) -> None:
        self.root = root
        root.mkdir(exist_ok=True)
        fake_bin(root / "bin")
        (root / "vendor.yaml").write_text(contract)
        nvml_recording(root / "nvml.json")
        sysfs(root / "sys")
        # Bytecode written and reused, as in a user's install (pip compiles it): a run that compiles the package
        # each time (PYTHONDONTWRITEBYTECODE) measures the compiler, not the plugin.
        self.env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        self.env["PATH"] = f"{root / 'bin'}:{os.environ['PATH']}"
        self.argv = [sys.executable, "-m", "pytest", "--contract", str(root / "vendor.yaml"),
                     f"--gpuaccept-nvml={root / 'nvml.json'}", f"--gpuaccept-sysfs={root / 'sys'}", *ACCEPT_ARGS]

    def run(self) -> Run:
        """One run of the contract in a fresh folder; it must be ACCEPTED (every check measured and passed)."""
        folder = Path(tempfile.mkdtemp(dir=self.root, prefix="run-"))
        cpu, start = _children_cpu(), time.perf_counter()
        done = subprocess.run(self.argv, cwd=folder, env=self.env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
        written = folder / "gpuaccept-results.json"
        results = json.loads(written.read_text()) if written.exists() else {"verdict": "not written"}
        if results["verdict"] != "accepted":
            raise RuntimeError(f"the benchmark's run was {results['verdict']}: {done.stdout[-3000:]}{done.stderr[-3000:]}")
        return Run(wall, tools_time(folder / "gpuaccept-evidence"), cpu, len(results["checks"]))

    def plain(self, checks: int) -> float:
        """Plain pytest with pytest-html, as many trivial tests as the contract has checks: its wall time."""
        folder = self.root / "plain"
        folder.mkdir(exist_ok=True)
        (folder / "test_plain.py").write_text(
            f"import pytest\n\n@pytest.mark.parametrize('n', range({checks}))\ndef test_trivial(n):\n    assert n >= 0\n")
        start = time.perf_counter()
        subprocess.run([sys.executable, *PLAIN], cwd=folder, env=self.env, capture_output=True, check=True)
        return time.perf_counter() - start


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tools_time(evidence: Path) -> float:
    """The seconds the run's tools took, from its evidence: every tool run's record has its argv and duration."""
    total = 0.0
    for path in evidence.glob("*.json"):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and "argv" in record and "duration_s" in record:
            total += record["duration_s"]
    return total


SMALL = """\
gpuaccept: 1
vendor: "Benchmark"
gpus: {count: 8}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--split", action="store_true",
                        help="also run a one-clause contract (gpus.count: 9 checks) and plain pytest with as many tests, "
                             "interleaved, to split the plugin's time over plain pytest into a part every run pays and "
                             "a part each check adds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        small = Bench(Path(tmp) / "small", SMALL) if args.split else None
        for warm in (bench, small):  # the first run compiles the package's bytecode
            if warm is not None:
                warm.run()
        runs, plain, small_runs, small_plain = [], [], [], []
        for _ in range(args.repeat):  # interleaved: a VM's speed moves by tens of percent within minutes
            runs.append(bench.run())
            plain.append(bench.plain(runs[-1].checks))
            if small is not None:
                small_runs.append(small.run())
                small_plain.append(small.plain(small_runs[-1].checks))
    wall, tools = statistics.median(r.wall_s for r in runs), statistics.median(r.tools_s for r in runs)
    own, cpu = statistics.median(r.own_s for r in runs), statistics.median(r.cpu_s for r in runs)
    print(f"{runs[0].checks} checks; median of {args.repeat}: wall {wall:.2f} s, tools {tools:.2f} s, plugin's own time "
          f"{own:.2f} s (budget 1.5 s), CPU {cpu:.2f} s; fastest own time {min(r.own_s for r in runs):.2f} s")
    print(f"plain pytest + pytest-html with as many trivial tests {statistics.median(plain):.2f} s; the run over it, "
          f"each beside its own plain run: {', '.join(f'{r.own_s - p:.2f}' for r, p in zip(runs, plain))} s")
    if small_runs:
        over = statistics.median(r.own_s - p for r, p in zip(runs, plain))
        fixed = statistics.median(r.own_s - p for r, p in zip(small_runs, small_plain))
        added = runs[0].checks - small_runs[0].checks
        print(f"{small_runs[0].checks} checks (gpus.count only): over plain pytest {fixed:.2f} s (median); so of the "
              f"{over:.2f} s over plain pytest, about {fixed:.2f} s is paid by every run and {over - fixed:.2f} s by the "
              f"{added} more checks ({1000 * (over - fixed) / added:.1f} ms each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
