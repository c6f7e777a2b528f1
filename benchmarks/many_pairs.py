"""Many pairs, one page (issue 29): the report of a 16-GPU host and of a 64-node cluster, its size and the time
Chromium takes to open it (its load event).

    python benchmarks/many_pairs.py [--gpus 16] [--nodes 64] [--keep DIR]   # 0 GPUs or 0 nodes: that one not run

The 16-GPU host is the shipped H100 contract's pair clauses over 16 GPUs (nvlink every pair: 120 pairs; p2p one way:
240 ordered pairs; p2p both ways: 120 pairs) with gpus.count, model and memory: the tests' 8-GPU H100 NVML recording
made 16 GPUs (each GPU again on its own bus and UUID), `nvidia-smi topo -m` NV18 between every two, and nvbandwidth's
three matrices at 16 x 16 (the realistic benchmark's constructed blocks, benchmarks/realistic.py). The cluster is
64 nodes through the mpirun engine's launcher stand-in (tests/fleet_fakes.py) with cluster.pairs (every pair: 2,016, its
`budget` 63 rounds) and cluster.links (4,032 one-way links). tests/test_many_pairs.py runs both; benchmarks/README.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
DATA = TESTS / "data"
sys.path.insert(0, str(TESTS))

from builders import h100_status  # noqa: E402
from conftest import pci_tree  # noqa: E402
from fleet_fakes import login_run, stand_in_cluster  # noqa: E402

CONTRACT = """\
gpuaccept: 1
vendor: "Many pairs"
gpus: {{count: {gpus}, model: "H100 80GB HBM3", memory: "80 GB"}}
nvlink: {{every_pair: true, min_links: 18}}
p2p: {{min_bandwidth: "350 GB/s", min_bidirectional: "700 GB/s"}}
"""
NODE_CONTRACT = 'gpuaccept: 1\nvendor: "Many pairs cluster"\ngpus: {count: 8, model: "H100"}\n'
CLUSTER = ('  pairs: {min_busbw: "400 GB/s", max_bytes: "16 GiB", budget: 63}\n'
           '  links: {iperf3: {min_throughput: "10 Gb/s", interfaces: [eth0], duration: "1 s"}}\n')
# v0.6: 64 MiB buffers (from v0.7, 512 MiB: 16 GPUs' 720 figures would take 32 s of copies, not this test's point)
NVB_HEAD = "nvbandwidth Version: v0.6.0\nBuilt from Git version: v0.6.0\n\nDriver Version: 560.35.03\n\n"
LOAD_JS = """<script>window.addEventListener("load", () => {
  document.body.setAttribute("data-loaded", String(Math.round(performance.now())));
  document.body.setAttribute("data-rows", String(document.querySelectorAll("tbody.results-table-row").length));
});</script>"""


def recording(gpus: int) -> dict:
    """The 8-GPU H100 recording with `gpus` GPUs: each one again, on a bus and with a UUID and serial of its own, each
    8 on a baseboard of their own: GPUs 8-15 link into a second board's four NVSwitches (c4-c7)."""
    base = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    made = []
    for n in range(gpus):
        gpu = json.loads(json.dumps(base["gpus"][n % len(base["gpus"])]))
        bus = 0x18 + 0x08 * n
        gpu.update(index=n, uuid=f"GPU-many-{n:04d}-0000-0000-0000-000000000000", serial=f"16523220{n:05d}",
                   pci_bus_id=f"00000000:{bus:02X}:00.0")
        board = n // len(base["gpus"])
        for link in gpu.get("nvlinks") or []:
            switch = int(link["remote_bus_id"].split(":")[1], 16) + 4 * board
            link["remote_bus_id"] = f"00000000:{switch:02X}:00.0"
        made.append(gpu)
    base["gpus"] = made
    base["cuda_devices"].update(count=gpus, bus_ids=[g["pci_bus_id"][4:].lower() for g in made])
    return base


def topo(gpus: int) -> str:
    """`nvidia-smi topo -m` of `gpus` GPUs on NVSwitch: NV18 between every two."""
    head = "\t" + "\t".join(f"GPU{j}" for j in range(gpus)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = "".join(f"GPU{i}\t" + "\t".join(" X " if i == j else "NV18" for j in range(gpus))
                   + f"\t{'0-51' if i < gpus // 2 else '52-103'}\t{int(i >= gpus // 2)}\n" for i in range(gpus))
    return head + rows


def _matrix(title: str, value: float, key: str, gpus: int) -> str:
    header = "  " + "".join(str(c).rjust(10) for c in range(gpus)) + "\n"
    body = "".join(f" {r}" + "".join(("N/A" if r == c else f"{value:.2f}").rjust(10) for c in range(gpus)) + "\n"
                   for r in range(gpus))
    return f"{title}\n{header}{body}\nSUM {key} {value * gpus * (gpus - 1):.2f}\n"


def nvbandwidth(gpus: int) -> str:
    """nvbandwidth's three peer testcases over `gpus` GPUs, every pair at a healthy H100's figure."""
    out = NVB_HEAD
    for case, title, value in (("device_to_device_memcpy_write_ce", "memcpy CE GPU(row) <- GPU(column)", 389.5),
                               ("device_to_device_memcpy_read_ce", "memcpy CE GPU(row) -> GPU(column)", 390.5)):
        out += (f"Running {case}.\n" + _matrix(f"{title} bandwidth (GB/s)", value, case, gpus)
                + f"COEFFICIENT_OF_VARIATION {case} 0.00\n\n")
    case = "device_to_device_bidirectional_memcpy_read_ce"
    out += f"Running {case}.\n"
    for part, value in (("Read1", 392.0), ("Read2", 391.5), ("Total", 783.5)):
        out += _matrix(f"memcpy CE GPU(row) <-> GPU(column) {part} bandwidth (GB/s)", value,
                       f"{case}_{part.lower()}", gpus) + "\n"
    return out + f"COEFFICIENT_OF_VARIATION {case}_total 0.00\n\n"


def host(root: Path, gpus: int) -> list[str]:
    """The fake host in root (bin/, sys/, nvml.json, vendor.yaml, run/): the pytest command line that accepts it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "nvml.json").write_text(json.dumps(recording(gpus)))
    pci_tree(root / "sys", None, root / "nvml.json")
    for board in range(1, (gpus + 7) // 8):  # the other boards' NVSwitches, beside the first board's pci_tree lists
        for n in range(4):
            switch = root / "sys" / "bus" / "pci" / "devices" / f"0000:{0xc0 + 4 * board + n:02x}:00.0"
            switch.mkdir(parents=True, exist_ok=True)
            for name, value in (("vendor", "0x10de"), ("device", "0x22a3"), ("class", "0x068000")):
                (switch / name).write_text(value + "\n")
    tools = root / "bin"
    tools.mkdir(exist_ok=True)
    (tools / "topo.txt").write_text(topo(gpus))
    (tools / "status.txt").write_text(h100_status(gpus))
    (tools / "nvbandwidth.txt").write_text(nvbandwidth(gpus))
    scripts = {"nvidia-smi": f'case "$1 $2" in "topo -m") cat {tools}/topo.txt;; *) cat {tools}/status.txt;; esac',
               "nvbandwidth": f"sleep 4.2; cat {tools}/nvbandwidth.txt"}  # its copies take 3.96 s
    for name, body in scripts.items():
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    (root / "vendor.yaml").write_text(CONTRACT.format(gpus=gpus))
    (root / "run").mkdir(exist_ok=True)
    return [sys.executable, "-m", "pytest", "--contract", str(root / "vendor.yaml"), "-p", "no:cacheprovider", "-q",
            f"--gpuaccept-nvml={root / 'nvml.json'}", f"--gpuaccept-sysfs={root / 'sys'}"]


def host_run(root: Path, gpus: int) -> tuple[int, Path, str]:
    """The 16-GPU host's run: exit code, its run folder (report and results), its output."""
    argv = host(root, gpus)
    env = {**os.environ, "PATH": f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin"}
    done = subprocess.run(argv, cwd=root / "run", env=env, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, root / "run", done.stdout + done.stderr


def cluster_run(root: Path, nodes: int, cluster: str = CLUSTER) -> tuple[int, Path, str]:
    """The cluster's login-node run through the launcher stand-in: exit code, its run folder, its output."""
    contract = stand_in_cluster(root, nodes, NODE_CONTRACT, cluster)
    code, _results, out, _peak = login_run(root, contract, timeout=900)
    return code, root / "run", out


def browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@dataclass(frozen=True)
class Opened:
    """A report opened in headless Chromium: its load event (ms after navigation starts, the page's own clock), the
    table's rows pytest-html drew, and the wall time of the whole browser run (its start included)."""

    load_ms: int
    rows: int
    wall_s: float


def open_in_chromium(report: Path, scratch: Path, chromium: str) -> Opened:
    """The report as it is, with a script at its end that notes the load event's time and the rows drawn."""
    measured = scratch / f"measured-{report.parent.name}.html"
    measured.write_text(report.read_text() + LOAD_JS)
    started = time.monotonic()
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=30000",
                          "--window-size=1280,1000", "--dump-dom", measured.as_uri()],
                         capture_output=True, text=True, timeout=300, check=False).stdout
    wall = time.monotonic() - started
    loaded, rows = re.search(r'data-loaded="(\d+)"', dom), re.search(r'data-rows="(\d+)"', dom)
    if loaded is None or rows is None:
        raise RuntimeError(f"Chromium did not load {report}: {dom[-500:]}")
    return Opened(int(loaded.group(1)), int(rows.group(1)), wall)


def figures(name: str, run: Path, chromium: str | None, scratch: Path) -> dict:
    report, results = run / "gpuaccept-report.html", json.loads((run / "gpuaccept-results.json").read_text())
    row = {"report": name, "verdict": results["verdict"], "checks": len(results["checks"]),
           "bytes": report.stat().st_size}
    if chromium is not None:
        opened = open_in_chromium(report, scratch, chromium)
        row.update(load_s=opened.load_ms / 1000, rows=opened.rows, chromium_wall_s=round(opened.wall_s, 2))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="many-pairs-"))
    chromium = browser()
    rows = []
    runs = [(f"{args.gpus}-GPU host", lambda: host_run(root / "host", args.gpus))] if args.gpus else []
    runs += [(f"{args.nodes}-node cluster", lambda: cluster_run(root / "cluster", args.nodes))] if args.nodes else []
    for name, make in runs:
        started = time.monotonic()
        code, run, out = make()
        if not (run / "gpuaccept-report.html").exists():
            print(out[-3000:], file=sys.stderr)
            return 1
        rows.append({**figures(name, run, chromium, root), "exit": code, "run_s": round(time.monotonic() - started, 1)})
        print(json.dumps(rows[-1]), flush=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
