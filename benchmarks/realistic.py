"""The realistic-times benchmark (issue 29): the shipped 8-GPU H100 contract on a fake host whose tools take what the
real ones take, end to end, ACCEPTED. How long the whole run takes, and (the results' `schedule`) what ran when.

The contract is contracts/h100_sxm5_8gpu.yaml as shipped (260 checks), with one line added: `tools.python`, the fake
interpreter that runs the GEMM and the training load. The host is the tests' honest HGX H100 (tests/conftest.py: the
NVML recording of an 8-GPU H100 box, its PCI functions and NVSwitches in sysfs, Gen5 x16 links), with eight RDMA
devices and a tool for each clause on PATH. Each fake tool sleeps what the real one takes (DURATIONS, with where each
figure comes from) and prints a real output (or one constructed from real ones, CONSTRUCTED says how); a copy tool
never sleeps less than the copies it prints took (clauses/plausible.py would refuse it), ib_write_bw never less than
its -D.

    python benchmarks/realistic.py [--scale 1.0] [--keep DIR]

`--scale` multiplies every tool's time and the contract's load durations (tests/test_schedule.py runs it at 0.02 to
check the schedule's arithmetic in seconds, not minutes; ib_write_bw still takes its 5 s -D). It prints the wall
time, the tools' own time added up, and the schedule: a line per tool run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
DATA = TESTS / "data"
sys.path.insert(0, str(TESTS))

from builders import h100_errors, h100_status, pcie_links, sysfs_tree  # noqa: E402
from conftest import nccl_log, pci_tree  # noqa: E402

from pytest_gpuaccept import schedule  # noqa: E402
from pytest_gpuaccept.clauses.plausible import nvbandwidth_work  # noqa: E402
from pytest_gpuaccept.probes.nccl_tests import parse_all_reduce  # noqa: E402
from pytest_gpuaccept.probes.nvbandwidth import parse_nvbandwidth  # noqa: E402

CONTRACT = REPO / "contracts" / "h100_sxm5_8gpu.yaml"
RDMA_DEVICES = 8
# What each real tool takes on an 8-GPU H100 host, in seconds. The run's own loads (the GEMM's 30 s, the training
# load's 60 s) are the contract's; ib_write_bw's -D 5 the plugin's.
DURATIONS = {
    "nvidia-smi": 0.5,  # topo -m, nvlink -s and each nvlink -e: NVML's start on 8 GPUs (0.3-1 s on R535-R580 hosts)
    "nvbandwidth start": 3.0,  # CUDA's start and a context on each of 8 GPUs, every process
    # Each testcase over 8 GPUs: 56 ordered pairs (or 8 GPUs) of 512 MiB buffers, with nvbandwidth's own
    # allocations, warm-ups and samples around the timed copies (which alone are 1.2 s a p2p testcase here)
    "device_to_device_memcpy_write_ce": 25.0,
    "device_to_device_memcpy_read_ce": 25.0,
    "device_to_device_bidirectional_memcpy_read_ce": 30.0,
    "device_local_copy": 4.0,
    "host_to_device_memcpy_ce": 3.0,
    "device_to_host_memcpy_ce": 3.0,
    # NCCL's communicator over 8 GPUs; a run takes this or the log's own timed work (3.2 s), whichever is longer
    "all_reduce_perf start": 3.0,
    "ib_write_bw": 7.0,  # the client: -D 5 and perftest's start and end around it; its server starts 1 s earlier
    "gemm start": 10.0,  # PyTorch's import, CUDA on 8 GPUs, the matrices: the "GEMM 40 s" for a 30 s run
}
CONSTRUCTED = ("nvbandwidth: the real 8-GPU H100 v0.10.0 output's read, write and host blocks "
               "(tests/data/nvbandwidth/h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt); a bidirectional "
               "block of 392 + 391.5 GB/s per pair and a device_local_copy of 1400 GB/s per GPU (84 % of 3350 GB/s read "
               "+ written), constructed; all_reduce_perf: the real AWS p5 (8x H100) log, 8 MiB to 8 GiB, with rank lines "
               "on the recording's GPUs; ib_write_bw: the real 100 Gb/s EDR run (90.5 Gb/s), so the ports are EDR; the "
               "GEMM: a window a second of 718 bf16 8192^3 matmuls (784 TFLOPS, 79 % of 989.5)")


# ------------------------------------------------------------------ the fake tools' outputs

NVB_H100 = DATA / "nvbandwidth" / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt"
NVB_HEAD = "nvbandwidth Version: v0.10.0\nBuilt from Git version: v0.10.0\n\nDriver Version: 560.35.03\n\n"


def _real_blocks() -> dict[str, str]:
    """Each testcase's block of the real H100 output, from `Running X.` to its COEFFICIENT_OF_VARIATION line."""
    blocks, current, lines = {}, None, []
    for line in NVB_H100.read_text().splitlines():
        if match := re.match(r"^Running (\w+)\.", line):
            current, lines = match.group(1), []
        if current is not None:
            lines.append(line)
            if line.startswith("COEFFICIENT_OF_VARIATION"):
                blocks[current] = "\n".join(lines) + "\n\n"
                current = None
    return blocks


HEADER = "  " + "".join(str(c).rjust(10) for c in range(8)) + "\n"  # nvbandwidth's column numbers


def _matrix(title: str, value: float, key: str) -> str:
    """A constructed 8-GPU matrix as nvbandwidth prints it: `value` off the diagonal, N/A on it, its SUM line."""
    body = "".join(f" {r}" + "".join(("N/A" if r == c else f"{value:.2f}").rjust(10) for c in range(8)) + "\n"
                   for r in range(8))
    return f"{title}\n{HEADER}{body}\nSUM {key} {value * 56:.2f}\n"


def nvbandwidth_blocks() -> dict[str, str]:
    blocks = _real_blocks()
    case = "device_to_device_bidirectional_memcpy_read_ce"
    blocks[case] = (f"Running {case}.\n" + _matrix("memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)", 392.0,
                                                   f"{case}_read1") + "\n"
                    + _matrix("memcpy CE GPU(row) <-> GPU(column) Read2 bandwidth (GB/s)", 391.5, f"{case}_read2") + "\n"
                    + _matrix("memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)", 783.5, f"{case}_total")
                    + f"COEFFICIENT_OF_VARIATION {case}_total 0.00\n\n")
    local = "device_local_copy"
    row = "".join("1400.00".rjust(10) for _ in range(8))
    blocks[local] = (f"Running {local}.\nmemcpy local GPU(column) bandwidth (GB/s)\n{HEADER} 0{row}\n\n"
                     f"SUM {local} {1400.0 * 8:.2f}\n\n")
    return blocks


def nccl_output() -> bytes:
    """The real p5 log, 8 MiB to 8 GiB (the contract's sweep), with rank lines (conftest.nccl_log)."""
    lines = (DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt").read_text().splitlines(keepends=True)
    kept = [line for line in lines if not re.match(r"^\S*\s+\d+\s", line)
            or 8 * 2**20 <= int(line.split(":", 1)[-1].split()[0]) <= 8 * 2**30]
    return nccl_log("".join(kept).encode(), table_ranks=8)


# ------------------------------------------------------------------ the fake host


@dataclass(frozen=True)
class Host:
    """The fake host in a folder: bin/ (the tools), sys/ (sysfs), nvml.json (the recording), vendor.yaml."""

    root: Path
    scale: float

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", "pytest", "--contract", str(self.root / "vendor.yaml"), "-p", "no:cacheprovider",
                f"--gpuaccept-nvml={self.root / 'nvml.json'}", f"--gpuaccept-sysfs={self.root / 'sys'}", "-q"]

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PATH"] = f"{self.root / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        return env


def build(root: Path, scale: float = 1.0) -> Host:
    """The fake host at `root`, every tool's time multiplied by `scale`."""
    root.mkdir(parents=True, exist_ok=True)
    host = Host(root, scale)
    sysfs = root / "sys"
    pci_tree(sysfs, "0x2330")
    pcie_links(sysfs)
    ib = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)", "link_layer": "InfiniBand"}
    sysfs_tree(sysfs, {f"mlx5_{n}": ib for n in range(RDMA_DEVICES)})
    for n in range(RDMA_DEVICES):
        folder = sysfs / "class" / "infiniband" / f"mlx5_{n}" / "ports" / "1" / "counters"
        folder.mkdir()
        for name in ("port_xmit_data", "port_rcv_data"):
            (folder / name).write_text("1000\n")
    _recording(root / "nvml.json", scale)
    _tools(root / "bin", sysfs, scale)
    (root / "run").mkdir()
    (root / "run" / "torch").mkdir()
    (root / "run" / "torch" / "__init__.py").write_text("")  # the host has PyTorch (the builtin load asks); never imported
    (root / "vendor.yaml").write_text(contract_text(root / "bin" / "python", scale))
    return host


def contract_text(python: Path, scale: float) -> str:
    """The shipped contract, its tools.python the fake one, its loads' durations scaled."""
    text = CONTRACT.read_text().replace('  timeout: "20 min"', f'  timeout: "20 min"\n  python: "{python}"')

    def scaled(match: re.Match[str]) -> str:
        return f'{match.group(1)}"{float(match.group(2)) * scale:g} s"'

    return re.sub(r'^(\s+(?:duration|warmup): )"([\d.]+) s"', scaled, text, flags=re.MULTILINE)


def _recording(path: Path, scale: float) -> None:
    """The H100 recording with a load's samples: every GPU 99 % busy at 690 of its 700 W, 1980 MHz, Gen5 x16, over
    the contract's 60 s (scaled); no ECC error, no remapped row, default power limits, no Xid."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    interval = round(0.15 * scale, 6)
    rows = [[round(n * interval, 6), 99, 1980, 690.0, 70, 4, 5, 16, 700.0] for n in range(401)]
    health = {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": None,
              "ecc_mode_current": 1, "power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0}
    fields = ["t_s", "util_percent", "sm_clock_mhz", "power_w", "temp_c", "throttle_reasons", "pcie_gen", "pcie_width",
              "power_limit_w"]
    reading["utilisation"] = {"interval_s": interval, "fields": fields,
                              "gpus": [{"index": i, "samples": rows, "health": health, "xid": {"events": []}}
                                       for i in range(8)]}
    path.write_text(json.dumps(reading))


FAKE = """\
#!{python}
import fcntl, json, os, sys, time
SCALE, D = {scale!r}, {durations!r}
argv = sys.argv[1:]
started = time.monotonic()


def sleep(seconds, floor=0.0):
    time.sleep(max(seconds * SCALE, floor))


"""

TOOLS = {
    "nvidia-smi": """\
sleep(D["nvidia-smi"])
kind = " ".join(argv[:2])
name = {{"topo -m": "topo.txt", "nvlink -s": "status.txt"}}.get(kind, "errors.txt")
sys.stdout.write(open(os.path.join({here!r}, name)).read())
""",
    "nvbandwidth": """\
blocks = json.load(open(os.path.join({here!r}, "nvbandwidth.json")))
cases = [argv[n + 1] for n, a in enumerate(argv) if a == "-t"]
floor = sum(blocks[c]["claimed_s"] for c in cases) + 0.05
sleep(D["nvbandwidth start"] + sum(D[c] for c in cases), floor)
sys.stdout.write(blocks["head"] + "".join(blocks[c]["text"] for c in cases))
""",
    "all_reduce_perf": """\
sleep(D["all_reduce_perf start"], {timed!r} + 0.05)
sys.stdout.write(open(os.path.join({here!r}, "allreduce.txt")).read().replace("@PID@", str(os.getpid())))
""",
    "ib_write_bw": """\
client = argv[-1] == "localhost"
asked = float(argv[argv.index("-D") + 1])
sleep(D["ib_write_bw"] + (0.0 if client else 1.0), asked + (0.2 if client else 1.3))
if client:
    device, port = argv[argv.index("-d") + 1], argv[argv.index("-i") + 1]
    counter = os.path.join({sysfs!r}, "class", "infiniband", device, "ports", port, "counters", "port_xmit_data")
    moved = int(95e9 / 8 * (time.monotonic() - started + 1.5) / 4)  # 4-byte words: a little above the figure's rate
    with open(counter, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        value = int(handle.read())
        handle.seek(0)
        handle.truncate()
        handle.write(str(value + moved))
sys.stdout.write(open(os.path.join({here!r}, "ib_write_bw.txt")).read())
""",
    "python": """\
module = argv[1] if len(argv) > 1 and argv[0] == "-m" else ""
if module.endswith(".train"):
    time.sleep(24 * 3600)  # a training load runs until the plugin stops it
elif module.endswith(".gemm"):
    option = lambda name: argv[argv.index(name) + 1]
    duration, gpus, n = float(option("--duration")), int(option("--gpus")), int(option("--n"))
    sleep(D["gemm start"])
    time.sleep(duration)
    lines = [f"# pytest-gpuaccept gemm: PyTorch 2.5.1, device cuda, dtype {{option('--dtype')}}, n {{n}}, "
             f"duration {{duration:g}} s"]
    windows = max(1, int(duration))
    for w in range(1, windows + 1):
        for gpu in range(gpus):
            t = round(duration * w / windows, 3)
            lines.append(json.dumps({{"gpu": gpu, "t_s": t, "matmuls": round(718 * duration / windows),
                                     "seconds": round(duration / windows, 6), "n": n}}))
    lines += [json.dumps({{"gpu": gpu, "done": True, "finite": True}}) for gpu in range(gpus)]
    print("\\n".join(lines))
else:
    sys.exit("fake python: not a workload: " + " ".join(argv))
""",
}


def _tools(folder: Path, sysfs: Path, scale: float) -> None:
    folder.mkdir()
    here = str(folder)
    (folder / "topo.txt").write_text((DATA / "topo" / "h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt").read_text())
    (folder / "status.txt").write_text(h100_status(8))
    (folder / "errors.txt").write_text(h100_errors(8))
    blocks, (claimed, timed) = nvbandwidth_blocks(), floors()
    (folder / "nvbandwidth.json").write_text(json.dumps(
        {"head": NVB_HEAD, **{case: {"text": text, "claimed_s": claimed[case]} for case, text in blocks.items()}}))
    (folder / "allreduce.txt").write_bytes(nccl_output())
    (folder / "ib_write_bw.txt").write_text(
        (DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt").read_text())
    head = FAKE.format(python=sys.executable, scale=scale, durations=DURATIONS)
    for name, body in TOOLS.items():
        script = folder / name
        script.write_text(head + textwrap.dedent(body).format(here=here, sysfs=str(sysfs), timed=timed))
        script.chmod(0o755)


def floors() -> tuple[dict[str, float], float]:
    """The least a fake may take: each nvbandwidth testcase's copies as its output prints them (plausible.py), and the
    all_reduce's timed work at 20 iterations a size (nccl-tests' default)."""
    claimed = {case: nvbandwidth_work(parse_nvbandwidth(NVB_HEAD + text, (case,)), ()).seconds
               for case, text in nvbandwidth_blocks().items()}
    return claimed, parse_all_reduce(nccl_output().decode()).timed_seconds(20)


P2P = ("device_to_device_memcpy_write_ce", "device_to_device_memcpy_read_ce", "device_to_device_bidirectional_memcpy_read_ce")
LOCAL, HOST = ("device_local_copy",), ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce")


def seconds(scale: float) -> dict[str, Any]:
    """What each fake run takes at `scale`, as its script sleeps it (the floors where they are more): a nvidia-smi
    run, an all_reduce_perf run, the ib_write_bw server and client of one device together, the GEMM of a load of
    `duration` seconds, and nvbandwidth for a set of testcases."""
    claimed, timed = floors()

    def nvbandwidth(cases: tuple[str, ...]) -> float:
        return max((DURATIONS["nvbandwidth start"] + sum(DURATIONS[c] for c in cases)) * scale,
                   sum(claimed[c] for c in cases) + 0.05)

    client = max(DURATIONS["ib_write_bw"] * scale, 5.2)
    return {"nvidia-smi": DURATIONS["nvidia-smi"] * scale,
            "all_reduce_perf": max(DURATIONS["all_reduce_perf start"] * scale, timed + 0.05),
            "ib_write_bw": max((DURATIONS["ib_write_bw"] + 1.0) * scale, 6.3, 1.0 + client),
            "gemm": lambda duration: (DURATIONS["gemm start"] + duration) * scale, "nvbandwidth": nvbandwidth}


def planned(scale: float) -> float:
    """The run's tools as this version schedules them: nvlink -e around the two all_reduce runs, the one GPU load
    (the GEMM for utilisation's 60 s) with the eight ib_write_bw groups at once beside it (schedule.plan: they hold
    ports, it the GPUs), one nvbandwidth for every testcase, topo -m and nvlink -s."""
    t = seconds(scale)
    load = schedule.Job("GPU load", frozenset({schedule.GPUS}), t["gemm"](60.0))
    ports = [schedule.Job(f"mlx5_{n}", frozenset({schedule.port(f"mlx5_{n}/1")}), t["ib_write_bw"])
             for n in range(RDMA_DEVICES)]
    return (4 * t["nvidia-smi"] + 2 * t["all_reduce_perf"] + schedule.planned_seconds(schedule.plan([load, *ports]))
            + t["nvbandwidth"](P2P + LOCAL + HOST))


def series(scale: float) -> float:
    """The same run's tools one after another, as before issue 29: the GEMM's 30 s and the training load's 60 s
    apart, eight ib_write_bw groups in turn, nvbandwidth three times."""
    t = seconds(scale)
    return (4 * t["nvidia-smi"] + 2 * t["all_reduce_perf"] + t["gemm"](30.0) + 60.0 * scale
            + RDMA_DEVICES * t["ib_write_bw"] + sum(t["nvbandwidth"](cases) for cases in (P2P, LOCAL, HOST)))


# ------------------------------------------------------------------ the run


@dataclass(frozen=True)
class Result:
    """One timed run: its wall time, its verdict and checks, and the results' schedule."""

    wall_s: float
    verdict: str
    checks: int
    schedule: dict[str, Any]
    output: str
    folder: Path  # where it ran: its results, report and evidence


def run(host: Host) -> Result:
    folder = host.root / "run"
    start = time.perf_counter()
    done = subprocess.run(host.argv, cwd=folder, env=host.env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    written = folder / "gpuaccept-results.json"
    results = json.loads(written.read_text()) if written.exists() else {"verdict": "not written", "checks": []}
    return Result(wall, results["verdict"], len(results["checks"]), results.get("schedule") or {},
                  done.stdout[-4000:] + done.stderr[-4000:], folder)


def schedule_lines(schedule: dict[str, Any]) -> list[str]:
    """The schedule as text, a line per run: its start and seconds, and a bar on an 80-column time line."""
    wall = max(float(schedule.get("wall_s") or 0.0), 1e-9)
    lines = []
    for entry in schedule.get("runs", []):
        start, seconds = float(entry["start_s"]), float(entry["seconds"])
        left = int(60 * start / wall)
        bar = " " * left + "#" * max(1, int(60 * seconds / wall))
        lines.append(f"{entry['key'][:34]:34} {start:7.1f} {seconds:7.1f} |{bar[:60]:60}|")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, default=None, help="build the host here and keep it")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpuaccept-realistic-"))
    result = run(build(root, args.scale))
    schedule = result.schedule
    print(f"{result.checks} checks, {result.verdict}; wall {result.wall_s:.1f} s; tools {schedule.get('busy_s', 0):.1f} s "
          f"busy of {schedule.get('wall_s', 0):.1f} s, {schedule.get('tools_s', 0):.1f} s one after another (scale {args.scale:g})")
    print("\n".join(schedule_lines(schedule)))
    if result.verdict != "accepted":
        print(result.output)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
