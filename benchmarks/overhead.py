"""What pytest-gpuaccept itself costs: a full 8-GPU contract with instant fake tools, against plain
pytest running the same number of trivial tests with a self-contained pytest-html report.

Not a test: run it by hand and copy its last line into README.md.
    python benchmarks/overhead.py [--repeat 5] [--instructions]

--instructions also runs each side once under valgrind's callgrind and counts the instructions of the pytest
process (not of the fake tools it starts): a figure that does not drift with the machine's load, for telling
what a change is worth (a wall-clock ratio on a shared 2-core VM moves by 0.1 within minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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
    # The real RTX 5090 log (to 128 MiB), its rank lines on the recording's GPUs with the printing shell's PID
    # ($$): the output must be this run's (nccl-tests placement and plausibility), one iteration per size.
    log = (DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt").read_text()
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
    """The recording's GPUs as PCI functions (gpus.identity reads them)."""
    for gpu in json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())["gpus"]:
        folder = root / "bus" / "pci" / "devices" / f"0000:{gpu['pci_bus_id'].split(':', 1)[1].lower()}"
        folder.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
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


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def instructions(argv: list[str], cwd: Path, env: dict[str, str]) -> int:
    """Instructions the process ran (callgrind's `I refs`), its children not followed."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="also count instructions under callgrind")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake_bin(root / "bin")
        (root / "vendor.yaml").write_text(CONTRACT)
        nvml_recording(root / "nvml.json")
        sysfs(root / "sys")
        env = {**os.environ, "PATH": f"{root / 'bin'}:{os.environ['PATH']}"}
        accept_dir, plain_dir = root / "accept", root / "plain"
        accept_dir.mkdir()
        plain_dir.mkdir()
        _, out = timed([sys.executable, "-m", "pytest", "--contract", str(root / "vendor.yaml"),
                        f"--gpuaccept-nvml={root / 'nvml.json'}", f"--gpuaccept-sysfs={root / 'sys'}", "-q",
                        "-p", "no:cacheprovider"], accept_dir, env)
        verdict = json.loads((accept_dir / "gpuaccept-results.json").read_text())
        n_checks = len(verdict["checks"])
        assert verdict["verdict"] == "accepted", out[-3000:]
        (plain_dir / "test_plain.py").write_text(
            f"import pytest\n\n@pytest.mark.parametrize('n', range({n_checks}))\ndef test_trivial(n):\n    assert n >= 0\n")
        accept = [sys.executable, "-m", "pytest", "--contract", str(root / "vendor.yaml"),
                  f"--gpuaccept-nvml={root / 'nvml.json'}", f"--gpuaccept-sysfs={root / 'sys'}", "-q", "-p", "no:cacheprovider"]
        # The baseline runs without pytest-gpuaccept (-p no:...): everything the plugin costs, its import
        # included, is overhead. (Before 2026-11-30 the baseline loaded the plugin too, so an import the
        # plugin made in every pytest run was hidden from the figure.)
        plain = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:gpuaccept",
                 "-p", "no:gpuaccept_fixtures", "--html=report.html", "--self-contained-html"]
        accept_times, plain_times = [], []
        for _ in range(args.repeat):
            accept_times.append(timed(accept, accept_dir, env)[0])
            plain_times.append(timed(plain, plain_dir, env)[0])
        a, p = statistics.median(accept_times), statistics.median(plain_times)
        workload = 0.02  # the contract's utilisation duration: measuring time, not overhead
        print(f"{n_checks} checks; median of {args.repeat}: gpuaccept {a:.2f} s (of which {workload} s is the "
              f"workload's duration), plain pytest + pytest-html {p:.2f} s; ratio {a / p:.2f}; "
              f"overhead {a - p - workload:.2f} s")
        if args.instructions:
            ai, pi = instructions(accept, accept_dir, env), instructions(plain, plain_dir, env)
            print(f"instructions of the pytest process (callgrind): gpuaccept {ai / 1e9:.3f} G, plain pytest + "
                  f"pytest-html {pi / 1e9:.3f} G; ratio {ai / pi:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
