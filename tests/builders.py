"""What more than one test file builds: contracts, tool outputs constructed from real ones, recordings, sysfs trees.

Each is used by the test file named in its section and by others (some by benchmarks/ too): here, so that no test
file imports another. Fake tools on PATH, sysfs PCI trees and the recorded NVML readings are in conftest.py; the
cluster's stand-ins in fleet_fakes.py, netns_cluster.py and kubectl_standin.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import DATA, SYSTEM_PATH, nccl_log, nvml_recording, pci_port, pci_tree

from pytest_gpuaccept.probes import nvml
from pytest_gpuaccept.probes.imex_channels import parse_listing, parse_major
from pytest_gpuaccept.probes.nvlink_counters import GpuLinks, Traffic, parse_throughput
from pytest_gpuaccept.probes.port_errors import IB_ERRORS
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id

# ------------------------------------------------------------------ the evidence bundle (test_bundle.py)

BUNDLE_CONTRACT = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
gpus:
  count: 8
  model: "H100"
  memory: "80 GB"
nvlink:
  every_pair: true
  min_links: 18
allreduce:
  min_busbw: "450 GB/s"
  max_bytes: "16 GiB"
  args: ["-n", "1"]               # one timed iteration per size: the replayed log takes 0.3 s, not 5
"""


def measured_run(folder: Path, contract: str, *extra: str) -> Path:
    """An acceptance run as the vendor's host makes it, in `folder`: the H100 recording, its PCI functions and the real
    `topo -m` of an HGX H100 (a stand-in nvidia-smi that prints it). Built once a module, copied per test
    (bundle_copy): a verify test needs a bundle, not a run of its own."""
    folder.mkdir(parents=True)
    tools = folder / "fakebin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(f"#!/bin/sh\nexec cat {DATA / 'topo' / 'h100_8gpu_nv18_no_legend_mlengineering.txt'}\n")
    (tools / "nvidia-smi").chmod(0o755)
    (folder / "vendor.yaml").write_text(contract)
    done = subprocess.run([sys.executable, "-m", "pytest", "--contract=vendor.yaml", "-p", "no:cacheprovider",
                           nvml_recording("h100_sxm5_8gpu.json"), pci_tree(folder / "sys"), *extra], cwd=folder,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": f"{tools}:{SYSTEM_PATH}"})
    assert (folder / "gpuaccept-results.json").is_file(), done.stdout[-3000:]
    return folder


def bundle_copy(run: Path, to: Path) -> Path:
    """Only what a bundle holds (the files its manifest lists: report, results, contract, evidence), copied elsewhere
    as a buyer receives it."""
    to.mkdir(parents=True)
    for entry in json.loads((run / "gpuaccept-evidence" / "manifest.json").read_text())["bundle"]:
        shutil.copy2(run / entry["path"], to / entry["path"])
    shutil.copytree(run / "gpuaccept-evidence", to / "gpuaccept-evidence")
    return to


def p5_log() -> bytes:
    """The real P5 table, printed table-only: its 8 rank lines added on the H100 recording's GPUs (nccl_log)."""
    return nccl_log(DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt")


# ------------------------------------------------------------------ NVLink health (test_nvlink_health.py)

STATUS_H100 = (DATA / "nvlink" / "h100_status_i0_18links.txt").read_text()
ERRORS_H100 = (DATA / "nvlink" / "h100_errorcounters_e_elided_masked_uuid.txt").read_text()


def h100_status(gpus: int, inactive: set[tuple[int, int]] = frozenset(), slow: set[tuple[int, int]] = frozenset()) -> str:
    """The real GPU0 block of `nvlink -s`, repeated for each GPU (a live 8-GPU run prints one block per GPU)."""
    head, *links = STATUS_H100.splitlines()
    out = []
    for gpu in range(gpus):
        out.append(head.replace("GPU 0:", f"GPU {gpu}:"))
        for n, line in enumerate(links):
            if (gpu, n) in inactive:
                line = re.sub(r"[\d.]+ GB/s", "<inactive>", line)
            elif (gpu, n) in slow:
                line = line.replace("26.562", "13.281")
            out.append(line)
    return "\n".join(out) + "\n"


def h100_errors(gpus: int, crc: dict[tuple[int, int], int] | None = None) -> str:
    """The real counter lines of `nvlink -e` with the author's "[...]" expanded to all 18 links."""
    head = ERRORS_H100.splitlines()[0]
    out = []
    for gpu in range(gpus):
        out.append(head.replace("GPU 0:", f"GPU {gpu}:"))
        for n in range(18):
            out += [f"         Link {n}: Replay Errors: 0", f"         Link {n}: Recovery Errors: 0",
                    f"         Link {n}: CRC Errors: {(crc or {}).get((gpu, n), 0)}", ""]
    return "\n".join(out)


NVLINK_HEALTH_CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 8
nvlink:
  every_pair: true
  min_links: 18
  links_per_gpu: 18
  link_speed: "26.5 GB/s"
  errors_stable: true
allreduce:
  min_busbw: "1 GB/s"
"""


# ------------------------------------------------------------------ burn-in streams (test_burnin.py)

BURNIN_HEADER = {"stream": "gpuaccept-burnin", "counters_every_s": 10.0, "fields": list(nvml.SAMPLE_FIELDS),
                 "nvlink_error_kinds": list(nvml.NVLINK_ERRORS)}
HW_SLOWDOWN, SW_POWER_CAP = 0x8, 0x4


def stream_lines(minutes: float, interval: float = 1.0, gpus: int = 8, throttle=(), xids=(), ecc=(), end: bool = True,
                 lost=(), hot=()):
    """The records of a burn-in of `minutes`, one JSON line each: every GPU 99 % busy at 1980 MHz and 71 C from
    t=2 s (idle before: the start-up), with `throttle` spans (gpu, start, end), `xids` (gpu, t, xid), `ecc`
    errors (gpu, t: the volatile uncorrected count becomes 1 then), GPUs `lost` (gpu, t: no answer from then) and
    `hot` ones (gpu, t: 88 C from then)."""
    yield json.dumps({**BURNIN_HEADER, "interval_s": interval,
                      "gpus": [{"index": i, "slowdown_temp_c": 87, "nvlinks": list(range(18))} for i in range(gpus)]})
    steps = int(minutes * 60 / interval)
    for n in range(steps):
        t = round(n * interval, 3)
        for gpu, at, xid in xids:
            if at <= t < at + interval:
                yield json.dumps({"t_s": t, "gpu": gpu, "xid": xid})
        if n % max(1, int(10 / interval)) == 0:
            for i in range(gpus):
                uncorrected = int(any(g == i and t >= at for g, at in ecc))
                yield json.dumps({"t_s": t, "gpu": i, "ecc": [0, uncorrected], "remapped_rows": [0, 0, 0, 0],
                                  "nvlink_errors": [0, 0, 0, 0, 0]})
        for i in range(gpus):
            gone = [at for g, at in lost if g == i and t >= at]
            if gone and t == gone[0]:
                yield json.dumps({"t_s": t, "gpu": i, "lost": "NVMLError_GpuIsLost: GPU is lost"})
            if gone:
                continue
            busy = t >= 2.0
            bad = HW_SLOWDOWN if any(g == i and start <= t < stop for g, start, stop in throttle) else 0
            temp = 88 if any(g == i and t >= at for g, at in hot) else 71 if busy else 35
            yield json.dumps([i, t, 99 if busy else 0, 1980 if busy else 345, 690.5 if busy else 70.0, temp,
                              (SW_POWER_CAP if busy else 0x1) | bad, 5, 16, 700.0])
    if end:
        yield json.dumps({"end": True, "t_s": round(steps * interval, 3)})


# ------------------------------------------------------------------ utilisation and health under load (test_utilisation.py)

UTILISATION_FIELDS = ["t_s", "util_percent", "sm_clock_mhz", "power_w", "temp_c", "throttle_reasons", "pcie_gen", "pcie_width"]


def series(seconds: float = 12.0, util=lambda t: 0 if t < 0.6 else 99, reasons=lambda t: 0x4 if t >= 0.6 else 0x1,
           pcie=lambda t: (5, 16) if t >= 0.6 else (1, 16)) -> list[list]:
    """One GPU's NVML samples, a row per 200 ms in UTILISATION_FIELDS' order: idle until 0.6 s, then 99 % busy."""
    rows = []
    for n in range(int(seconds / 0.2)):
        t = round(n * 0.2, 3)
        busy = util(t) > 50
        rows.append([t, util(t), 1980 if busy else 345, 690.5 if busy else 72.0, 71 if busy else 34, reasons(t), *pcie(t)])
    return rows


def recording(tmp_path, gpus: int = 4, overrides: dict | None = None, health: dict | None = None,
              xid: dict | None = None) -> str:
    """The 4-GPU recording with samples as record-nvml writes them: series, health, and Xid events (none)."""
    base = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    overrides = overrides or {}
    base["utilisation"] = {"interval_s": 0.2, "fields": UTILISATION_FIELDS, "gpus": [
        {"index": i, "samples": overrides.get(i, series()),
         "health": (health or {}).get(i, {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0],
                                          "retired_pages_pending": None}),
         "xid": (xid or {}).get(i, {"events": []})}
        for i in range(gpus)]}
    path = tmp_path / "nvml-recording.json"
    path.write_text(json.dumps(base))
    return f"--gpuaccept-nvml={path}"


LOAD_CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 4
utilisation:
  min_percent: 80
  duration: "1.5 s"
  warmup: "1 s"
  workload: ["train-job", "--config", "small.yaml"]
health:
  ecc: true
  row_remapping: true
  throttle: true
  pcie_gen: 5
  pcie_width: 16
"""


# ------------------------------------------------------------------ RDMA ports (test_network_acceptance.py)

def sysfs_tree(root, devices: dict[str, dict[str, str]], errors: bool = False) -> str:
    """A sysfs tree with the files the kernel provides for each RDMA port (state, phys_state, rate, link_layer),
    each device a function of its own PCI device (0000:1N:00.0, mlx5_core) as on a real host; with `errors`, each port's
    error counters (counters/symbol_error, ...) at 0."""
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    for n, (device, files) in enumerate(devices.items()):
        port = pci_port(root, "infiniband", device, f"0000:{0x18 + 16 * n:02x}:00.0") / "ports" / "1"
        port.mkdir(parents=True)
        for name, value in files.items():
            (port / name).write_text(value + "\n")
        if errors:  # the error counters of a port that saw none (rdma.errors)
            (port / "counters").mkdir()
            for name in IB_ERRORS:
                (port / "counters" / name).write_text("0\n")
    return f"--gpuaccept-sysfs={root}"


IB_UP = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)", "link_layer": "InfiniBand"}
RDMA_CONTRACT = "gpuaccept: 1\nvendor: V\nrdma:\n  devices: {devices}\n  min_fraction_of_line_rate: 0.9\n{extra}"


def counting_port(root, device: str, words: int = 1000):
    """ports/1/counters of `device` (port_xmit_data, port_rcv_data: 4-byte words) under a sysfs_tree."""
    folder = root / "class" / "infiniband" / device / "ports" / "1" / "counters"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("port_xmit_data", "port_rcv_data"):
        (folder / name).write_text(f"{words}\n")
    return folder


# ------------------------------------------------------------------ every clause at once (test_every_clause.py)

# The clauses a contract with every other clause cannot have: nics and rdma with `count` (the same sections without),
# and gpus.mig (MIG slices refuse the sections that judge whole GPUs: test_mig_and_declared_boards.py); allreduce.algo
# (NVLS needs NVSwitches, which the every-clause host, four H100s with NV6 to each other, has not: test_allreduce_nvls.py)
APART_CLAUSES = {"nics.count", "rdma.count", "gpus.mig", "allreduce.algo"}
# The cluster section's clauses are judged on a cluster's login node, and there only (test_cluster_slurm.py).
CLUSTER_CLAUSES = {"cluster.nodes", "cluster.allreduce", "cluster.pairs", "cluster.links", "cluster.links.rdma",
                   "cluster.fabric", "cluster.utilisation", "cluster.nvlink_domain.fabric",
                   "cluster.nvlink_domain.imex", "cluster.nvlink_domain.min_busbw"}
EVERY_CLAUSE_CONTRACT = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
reference: "SLA-1"
gpus: {count: 4, model: "H100", memory: "80 GB", driver: ">=550", cuda: ">=12.4", form_factor: sxm,
       persistence_mode: true}
nvlink: {every_pair: true, min_links: 6, links_per_gpu: 18, link_speed: "26.5 GB/s", errors_stable: true}
tools: {python: "/usr/bin/python3"}
p2p: {min_bandwidth: "120 GB/s", min_bidirectional: "240 GB/s"}
memory_bandwidth: {min_bandwidth: "10 GB/s", tool: torch}
compute: {dtype: fp32, min_tflops: 0.0001, duration: "3 s", n: 256}
host_bandwidth: {min_bandwidth: "50 GB/s"}
allreduce: {min_busbw: "35 GB/s", min_bytes: "8 B", max_bytes: "128 MiB"}
sdc: {iterations: 1}
nics: {interfaces: ["ens*"], errors: true, min_speed: "25 Gb/s"}
rdma: {devices: ["mlx5_*"], errors: true, min_fraction_of_line_rate: 0.9}
iperf3: {server: 10.0.0.2, min_throughput: "1.5 Gb/s", streams: 1, duration: "1 s"}
utilisation: {min_percent: 80, duration: "1.5 s", warmup: "1 s", workload: ["train-job"]}
health: {ecc: true, row_remapping: true, throttle: true, pcie_gen: 5, pcie_width: 16, power_limit: default,
         max_remapped_rows: 0, xid: true, clocks: true, pcie_aer: {max_correctable_per_hour: 100}}
burnin: {duration: "2 min", workload: ["burn-job"], min_percent: 90}
dcgm: {level: 1}
"""


# ------------------------------------------------------------------ compute (test_compute.py)

GEMM_CPU_RUN = (DATA / "torch" / "gemm_cpu_2proc_fp32_n256.txt").read_text()  # a real CPU run, 2 processes, 3 s


def as_gpus(text: str, dtype: str = "fp32") -> str:
    """The recorded run relabelled as if it had run on GPUs (built here: the recording says device cpu)."""
    return text.replace("device cpu", "device cuda", 1).replace("dtype fp32", f"dtype {dtype}", 1)


COMPUTE_CONTRACT = """\
gpuaccept: 1
vendor: V
tools: {{python: "{python}"}}
gpus: {{count: 2}}
compute: {{dtype: {dtype}, {threshold}, duration: "3 s", n: 256}}
"""


def compute_run(accept, fake_tools, tmp_path, output, dtype="fp32", threshold="min_tflops: 0.001", device="0x2330"):
    """A compute run of 2 GPUs (the 4-GPU recording's first two, PCI device `device`) whose fake python prints
    `output` as our GEMM workload's."""
    fake_tools.add("python", output)
    return accept(COMPUTE_CONTRACT.format(python=fake_tools.bin_dir / "python", dtype=dtype, threshold=threshold),
                  recording(tmp_path, gpus=2), pci_tree(tmp_path / "sys", device, "h100_sxm5_4gpu.json"))


# ------------------------------------------------------------------ DCGM (test_dcgm.py)

def dcgm4_document(serials: list[str], status: str = "Pass", warnings: str = "", driver: str = "560.35.03") -> str:
    """Constructed, not recorded: a DCGM 4 level-1 document in the shape of the real GB10 one (same keys, DCGM 4.2.3),
    for as many GPUs as `serials`, each with DCGM's serial of it and the H100 SXM5's device ID."""
    results = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": status,
                **({"warnings": json.loads(warnings)} if warnings else {})} for i in range(len(serials))]
    return json.dumps({
        "DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
            {"name": "software", "results": results, "test_summary": {"status": status}}]}]},
        "entity_groups": [{"entities": [{"device_id": "2330", "entity_id": i, "serial_num": s} for i, s in enumerate(serials)],
                           "entity_group": "GPU", "entity_group_id": 1}],
        "metadata": {"Driver Version Detected": driver, "version": "4.2.3"}}, indent="\t")


def t4_recording(tmp_path: Path) -> Path:
    """Constructed: the NVML reading of the one Tesla T4 the real DCGM 3.x T4 documents ran on (tests/data/dcgm), made
    from the H100 recording's GPU0: name, PCI device ID 0x1eb8, no NVLink, and 15109 MiB, the T4's total with ECC on
    (DCGM's memory test runs only with ECC on)."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    reading["gpus"] = [{**reading["gpus"][0], "name": "Tesla T4", "memory_total_bytes": 15109 * 2**20,
                        "pci_device_id": "0x1eb8", "nvlinks": [], "nvlink_error": "NVMLError_NotSupported: Not Supported"}]
    path = tmp_path / "nvml-t4.json"
    path.write_text(json.dumps(reading))
    return path


# ------------------------------------------------------------------ PCIe links (test_plausibility.py)

def pcie_links(root, speed="32.0 GT/s PCIe", width="16", recording="h100_sxm5_8gpu.json"):
    """Constructed: the link files of every GPU function pci_tree wrote (the kernel's own wording)."""
    for gpu in json.loads((DATA / "nvml" / recording).read_text())["gpus"]:
        folder = root / "bus" / "pci" / "devices" / sysfs_bus_id(gpu["pci_bus_id"])
        for name, value in (("current_link_speed", speed), ("max_link_speed", speed), ("current_link_width", width),
                            ("max_link_width", width)):
            (folder / name).write_text(value + "\n")


# ------------------------------------------------------------------ signing keys (test_integrity.py)

def keypair(folder: Path, who: str) -> tuple[Path, str]:
    """An ed25519 key of `who` made by ssh-keygen in `folder`: its path, and its allowed_signers line."""
    key = folder / who
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(key)], check=True, timeout=30)
    kind, blob, _comment = (folder / f"{who}.pub").read_text().split()
    return key, f"{who}@example.com {kind} {blob}\n"


# ------------------------------------------------------------------ a cluster's recordings (test_cluster_engines.py)

def node_recordings(folder: Path, names: list[str], same: dict[str, str] | None = None) -> Path:
    """The H100 recording for the login node, and beside it one per node (`h100.<node>.json`, which the login node
    hands that node) with GPU UUIDs of its own: UUIDs are unique across a cluster, in a simulated run too.
    `same`: a node that gets another node's recording (two nodes with one set of GPUs)."""
    source = DATA / "nvml" / "h100_sxm5_8gpu.json"
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "h100.json"
    shutil.copy(source, base)
    data = json.loads(source.read_text())
    for name in names:
        own = copy.deepcopy(data)
        for gpu in own["gpus"]:
            gpu["uuid"] = gpu["uuid"].replace("GPU-h100-", f"GPU-{(same or {}).get(name, name)}-")
        (folder / f"h100.{name}.json").write_text(json.dumps(own))
    return base


# ------------------------------------------------------------------ an NVL72 tray's second sources (test_nvl72.py)

NVL72_DATA = DATA / "nvl72"
CHANNELS_LS = NVL72_DATA / "ls_la_imex_channels_nvidia_container_toolkit_pr375.txt"
# Constructed: the real listing's major (508) in /proc/devices' real line format; the real ones come from two machines.
HONEST_DEVICES = "Character devices:\n195 nvidia\n508 nvidia-caps-imex-channels\n511 nvidia-caps\n"
SMI_IDLE = NVL72_DATA / "nvidia_smi_nvlink_gt_d_h800_idle_llm-action.txt"
SMI_TRAINING = NVL72_DATA / "nvidia_smi_nvlink_gt_d_h800_training_llm-action.txt"
IB_PORT = "/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
ETH = "/sys/class/net/eth0/statistics/tx_bytes"


def honest_channels() -> dict:
    """An honest tray's IMEX channel devices as an ImexView carries them: the real listing, its major in /proc/devices."""
    return {"channels": parse_listing(CHANNELS_LS.read_text()), "channel_major": parse_major(HONEST_DEVICES),
            "channel_problem": None}


def four_gpus(text: str) -> dict[int, GpuLinks]:
    """A 4-GPU tray's reading (constructed): the real one-GPU reading as GPUs 0-3."""
    one = parse_throughput(text)[0]
    return {g: one for g in range(4)}


def honest_traffic() -> Traffic:
    """An honest tray's counters around the domain's all_reduce: the real idle and training NVLink readings, its NICs
    all but quiet (constructed values)."""
    return Traffic(four_gpus(SMI_IDLE.read_text()), four_gpus(SMI_TRAINING.read_text()),
                   {IB_PORT: 2_200_305_029, ETH: 81_920_004}, {IB_PORT: 2_200_305_529, ETH: 81_931_204})


# ------------------------------------------------------------------ the Korean acceptance sheet's host copies

def host_copy_runs(text: str) -> str:
    """The Korean sheet's own runs of the two host copy testcases (its last two nvbandwidth runs, one `-t` each),
    verbatim but for the spreadsheet's closing quote: what nvbandwidth asked for host_to_device_memcpy_ce and
    device_to_host_memcpy_ce prints, and no more (the sheet's other runs are copies it was not asked for, and the
    fake would wait the 4.86 s they take besides the 4.97 s of these)."""
    start = text.rindex("#" * 53, 0, text.index("Running device_to_host_memcpy_ce."))  # its separator line
    return text[start:].rstrip().removesuffix('"') + "\n"


def moves(folder: Path, gbit_s: float, seconds: float):
    """What a client does to the port's counters: `gbit_s` for the `seconds` it ran."""
    def moved() -> None:
        for name in ("port_xmit_data", "port_rcv_data"):
            path = folder / name
            path.write_text(str(int(path.read_text()) + int(gbit_s * 1e9 * seconds / 8 / 4)))
    return moved


# ------------------------------------------------------------------ a node for node-check (test_node_check*.py)

NODE_CHECK_CONTRACT = """\
gpuaccept: 1
vendor: "Trial cluster"
tools: {{nvidia-smi: "{smi}", timeout: "30 s"}}
node_check: {{quick: [gpus, nvlink]}}
gpus:
  count: 8
  model: "H100"
nvlink:
  every_pair: true
  min_links: 17
  links_per_gpu: 18
allreduce:
  min_busbw: "450 GB/s"
"""


def node_check_node(folder: Path, down: set[tuple[int, int]] = frozenset()) -> Path:
    """A simulated H100 node in `folder`: its NVML recording (nvml.json) and sysfs tree (sys/), and the files a fake
    `nvidia-smi` prints for it (topo.txt: a real 8-GPU NV18 matrix; nvlink-s.txt: the real H100 block per GPU).
    `down`: (GPU, link) NVLinks down, as NVML and `nvlink -s` both see them. Call again to swap the fault in or out."""
    folder.mkdir(parents=True, exist_ok=True)
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    for gpu in reading["gpus"]:
        gpu["uuid"] = gpu["uuid"].replace("GPU-h100-", f"GPU-{folder.name}-")
        for link in gpu["nvlinks"]:
            link["active"] = (gpu["index"], link["link"]) not in down
    (folder / "nvml.json").write_text(json.dumps(reading))
    if not (folder / "sys").is_dir():
        pci_tree(folder / "sys")
    shutil.copy(DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt", folder / "topo.txt")
    (folder / "nvlink-s.txt").write_text(h100_status(8, inactive=set(down)))
    return folder


def node_check_smi(path: Path, nodes: str) -> Path:
    """A fake `nvidia-smi` that prints the files of the node it runs on: `nodes`/$(hostname)/ (a node of the namespace
    cluster has its own host name), `topo -m` and `nvlink -s` as recorded there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""#!/bin/sh
d="{nodes}/$(hostname)"
case "$*" in
  "topo -m") exec cat "$d/topo.txt" ;;
  "nvlink -s") exec cat "$d/nvlink-s.txt" ;;
esac
echo "fake nvidia-smi: $*: not recorded" >&2
exit 9
""")
    path.chmod(0o755)
    return path


# The report a signer reads (tests/test_report_first_hour.py, tests/test_lang_zh.py): the full H100 preset on an 8-GPU
# fake host, every tool replaying a real output, in a process of its own, in the language asked.
SIGNER_SHEET = "h100_sxm5_8gpu_acceptance_sheet.json"


def signer_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`pytest --contract=<the H100 preset, shortened> --gpuaccept-nvml=<8 GPUs>` in `folder` with fake tools first on
    PATH (NVLink, nvbandwidth, all_reduce from real outputs; no PyTorch, no RDMA: rejected); returns the run."""
    from conftest import FakeTools  # noqa: PLC0415 (the fake tools of conftest, as tests/test_report_for_signers.py)

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fakebin").mkdir()
    tools = FakeTools(folder / "fakebin", folder / "fake-tools.log")
    tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt", when="topo")
    tools.add("nvidia-smi", h100_status(8), when="nvlink -s")
    tools.add("nvidia-smi", h100_errors(8), when="nvlink -e")
    tools.add("nvbandwidth", DATA / "nvbandwidth" / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt")
    tools.add_nccl(nccl_log(DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt", SIGNER_SHEET), iters=1)
    tools.add("train-job", "training\n", hang=120)
    reading = json.loads((DATA / "nvml" / SIGNER_SHEET).read_text())
    reading["utilisation"] = {"interval_s": 0.2, "fields": UTILISATION_FIELDS, "gpus": [
        {"index": i, "samples": series(seconds=3.0), "xid": {"events": []},
         "health": {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": None,
                    "power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0}} for i in range(8)]}
    recording = folder / "nvml.json"
    recording.write_text(json.dumps(reading))
    full = (Path(__file__).resolve().parent.parent / "contracts" / "h100_sxm5_8gpu.yaml").read_text()
    contract = (full.replace('duration: "60 s"', 'duration: "2 s"').replace('warmup: "10 s"', 'warmup: "1 s"')
                .replace("workload: builtin", "workload: [train-job]").replace('duration: "30 s"', 'duration: "1 s"')
                .replace("repeats: 2", "repeats: 1\n  args: ['-n', '1']")
                .replace('max_bytes: "8 GiB"', 'max_bytes: "16 GiB"'))  # the P5 log's sweep ends at 16 GiB
    (folder / "vendor.yaml").write_text(contract)
    argv = [sys.executable, "-m", "pytest", "--contract", str(folder / "vendor.yaml"), "-p", "no:cacheprovider",
            f"--basetemp={folder / 'basetemp'}", f"--gpuaccept-nvml={recording}",
            pci_tree(folder / "sys", recording=SIGNER_SHEET), *args]
    env = {**os.environ, "PATH": f"{folder / 'fakebin'}:{SYSTEM_PATH}"}
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=900, check=False)
