"""A stand-in for nccl-tests' MPI all_reduce_perf on the namespace cluster, where there are no GPUs: it
prints the real 2-node H100 log (tests/data/fleet/nccltests309_...), but with every bandwidth scaled by
what the network between its nodes really carries now, measured with the real iperf3 (both directions
at once) against the iperf3 server of each other node. So `tc` on a node's interface slows exactly the
pairs that node is in, as a slow NIC would. Built here, not recorded: a test fixture.

Rank 0 of each node writes its address to a rendezvous folder named after the MPI job (PMIx namespace);
rank 0 of the job waits for every node, measures, and prints; the other ranks exit at once.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from conftest import pci_tree

from pytest_gpuaccept.bundle import EVIDENCE_DIR, MANIFEST
from pytest_gpuaccept.cluster.bundles import decode, encode, members

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from overhead import fake_bin, nvml_recording  # noqa: E402

DATA = Path(__file__).parent / "data" / "fleet"
LOG = DATA / "nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt"

BODY = r'''
import json, os, socket, subprocess, sys, time
from pathlib import Path

NOMINAL = float(os.environ.get("FAKE_NOMINAL_BPS", "200e6"))
env = os.environ
rank = int(env.get("PMIX_RANK") or env.get("SLURM_PROCID") or env.get("OMPI_COMM_WORLD_RANK") or 0)
size = int(env.get("SLURM_NTASKS") or env.get("OMPI_COMM_WORLD_SIZE") or 1)
local_size = int(env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] or env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1)
nodes = max(1, size // local_size)
# The job's name, the same on every rank and never reused: Open MPI's jobid can recur across mpirun runs, so
# its HNP URI (which holds mpirun's own pid and address) is part of it; Slurm's job and step ids are unique.
import hashlib
job = hashlib.sha256("|".join(env.get(k, "") for k in ("PMIX_NAMESPACE", "OMPI_MCA_orte_hnp_uri", "SLURM_JOB_ID",
                                                         "SLURM_STEP_ID")).encode()).hexdigest()[:16]
rdv = Path(RDV) / job
rdv.mkdir(parents=True, exist_ok=True)
words = subprocess.run(["ip", "-4", "-o", "addr", "show", "eth0"], capture_output=True, text=True).stdout.split()
address = words[3].split("/")[0] if len(words) > 3 else "127.0.0.1"
part = rdv / f".{rank}.part"  # written whole, then renamed: rank 0 never reads a file half written
part.write_text(f"{socket.gethostname()} {address}")
os.replace(part, rdv / str(rank))
if rank != 0:
    sys.exit(0)
deadline = time.time() + 30
def written():
    return sorted((p for p in rdv.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
while len(written()) < nodes and time.time() < deadline:
    time.sleep(0.05)
peers = [p.read_text().split() for p in written()]
factor = 1.0
for host, peer in peers:
    if peer == address:
        continue
    done = subprocess.run(["iperf3", "-c", peer, "-t", "1", "--bidir", "-J"], capture_output=True, text=True, timeout=60)
    end = json.loads(done.stdout)["end"]
    rates = [end[k]["bits_per_second"] for k in ("sum_sent", "sum_received", "sum_sent_bidir_reverse",
                                                 "sum_received_bidir_reverse") if k in end]
    factor = min(factor, min(rates) / NOMINAL)
hosts = [h for h, _a in peers]
out = []
template = None
for line in Path(LOG).read_text().splitlines():
    tokens = line.split()
    if line.startswith("#  Rank"):
        # One rank line per rank started, on its node (the recorded job had 16 ranks on 2 nodes).
        if template is None:
            template = line
            for r in range(size):
                out.append(template.replace(f"Rank  0 ", f"Rank {r:2d} ").replace(
                    f" on {tokens[8]} ", f" on {hosts[min(len(hosts) - 1, r // local_size)]} ").replace(
                    f"device  0 ", f"device {r % local_size:2d} "))
        continue
    elif len(tokens) == 13 and tokens[0].isdigit():
        t = tokens
        t[5], t[9] = f"{float(t[5]) / factor:.1f}", f"{float(t[9]) / factor:.1f}"
        for k in (6, 7, 10, 11):
            t[k] = f"{float(t[k]) * factor:.2f}"
        line = "  " + "  ".join(f"{x:>10}" for x in t)
    out.append(line)
print("\n".join(out))
'''


def write_fleet_bin(folder: Path) -> Path:
    """all_reduce_perf (the MPI build's name: nccl-tests installs it as all_reduce_perf too) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rdv").mkdir(exist_ok=True)
    body = folder / "all_reduce_fake.py"
    body.write_text(f"RDV = {str(folder / 'rdv')!r}\nLOG = {str(LOG)!r}\n" + BODY)
    tool = folder / "all_reduce_perf"
    tool.write_text("#!/bin/sh\n"
                    "# only the first rank of each node works: the others are the GPUs this host does not have\n"
                    'local=${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}\n'
                    '[ "$local" = 0 ] || exit 0\n'
                    f'exec {sys.executable} {body} "$@"\n')
    tool.chmod(0o755)
    return folder


# The mpirun engine's launcher stand-in, for clusters of hundreds or thousands of simulated nodes on one machine:
# `mpirun` is a shell script that reads the engine's own argv (--host, -x, --), and
# - for a node's per-node run (`... node-run --node X ...`) prints X's bundle, made beforehand from one real
#   node-run (node_bundles: every node its own, with its own name and GPU UUIDs, its manifest made anew);
# - for anything else runs the command with FAKE_NODE (the first host) and FAKE_HOSTS (the --host list) set:
#   `ip` prints the node's address, `iperf3` serves and connects through a FIFO per address and port (a client
#   whose server has not started is refused, printing iperf3 3.12's own refusal with exit code 0), and the MPI
#   `all_reduce_perf` prints the recorded 2-node H100 log with a rank line per rank on the job's own hosts, its
#   bandwidths at a tenth where a node of the job (or the pair) is listed in `slow/`.
# Shell and awk, not Python: a round of 500 pairs starts 1,000 of them at once on a 2-core machine.

MPIRUN = r'''#!/bin/sh
hosts=""; exports=""
while [ $# -gt 0 ]; do
  case "$1" in
    --host) hosts=$2; shift 2;;
    -np|--map-by) shift 2;;
    -x) case "$2" in *=*) exports="$exports $2";; esac; shift 2;;
    --) shift; break;;
    *) shift;;
  esac
done
node=${hosts%%:*}
[ -e "@DIR@/hang/$node" ] && exec sleep 3600
case " $* " in *" node-run "*) exec cat "@DIR@/bundles/$node.txt";; esac
export FAKE_NODE="$node" FAKE_HOSTS="$hosts" $exports
exec "$@"
'''

IP = '#!/bin/sh\nexec cat "@DIR@/addresses/$FAKE_NODE.json"\n'

IPERF3 = r'''#!/bin/sh
mode=""; bind=""; port=""; target=""; secs=1
while [ $# -gt 0 ]; do
  case "$1" in
    -s) mode=server;; -c) mode=client; target=$2; shift;; -B) bind=$2; shift;; -p) port=$2; shift;;
    -t) secs=$2; shift;;
  esac
  shift
done
if [ "$mode" = server ]; then
  fifo="@DIR@/rdv/$bind:$port"
  mkfifo "$fifo" && read done < "$fifo"
  rm -f "$fifo"
  exit 0
fi
fifo="@DIR@/rdv/$target:$port"
[ -p "$fifo" ] || exec cat "@DIR@/refused.json"
sleep "$secs"
cat "@DIR@/received.json"
echo done > "$fifo"
'''

ALL_REDUCE = r'''#!/bin/sh
exec awk -v hosts="$FAKE_HOSTS" -v slowdir="@DIR@/slow" -f "@DIR@/all_reduce.awk" "@DIR@/nccl.txt"
'''

# The rank lines of the recorded log, one per rank of this job on its own hosts; its table's bandwidths at a tenth
# where a node of the job, or the job's pair, has a file in slow/.
ALL_REDUCE_AWK = r'''
BEGIN {
  n = split(hosts, parts, ",")
  for (i = 1; i <= n; i++) { split(parts[i], hp, ":"); host[i] = hp[1]; ranks[i] = hp[2] + 0 }
  factor = 1
  for (i = 1; i <= n; i++) if ((getline line < (slowdir "/" host[i])) >= 0) factor = 0.1
  if (n == 2 && (getline line < (slowdir "/" host[1] "+" host[2])) >= 0) factor = 0.1
}
/^#  Rank/ {
  if (done) next
  done = 1; r = 0
  for (i = 1; i <= n; i++) for (d = 0; d < ranks[i]; d++) {
    printf "#  Rank %2d Group  0 Pid  %d on %s device %2d [0000:19:00] NVIDIA H100 80GB HBM3\n", r, 1000 + r, host[i], d
    r++
  }
  next
}
NF == 13 && $1 ~ /^[0-9]+$/ {
  $7 = sprintf("%.2f", $7 * factor); $8 = sprintf("%.2f", $8 * factor)
  $11 = sprintf("%.2f", $11 * factor); $12 = sprintf("%.2f", $12 * factor)
}
{ print }
'''


def write_launcher(folder: Path, addresses: dict[str, str]) -> Path:
    """The stand-in's bin folder (mpirun, ip, iperf3, all_reduce_perf) under `folder`, with each node's address;
    node_bundles fills `folder/bundles`, a file `folder/slow/<node>` (or `<a>+<b>`) slows that node's jobs, and
    `folder/hang/<node>` makes anything launched on it hang."""
    for sub in ("bin", "bundles", "addresses", "rdv", "slow", "hang"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for name, address in addresses.items():
        (folder / "addresses" / f"{name}.json").write_text(json.dumps(
            [{"ifindex": 2, "ifname": "eth0", "addr_info": [{"family": "inet", "local": address, "prefixlen": 16}]}]))
    (folder / "refused.json").write_bytes((DATA / "iperf3_3.12_json_connection_refused_rc0.json").read_bytes())
    (folder / "received.json").write_bytes((DATA / "iperf3_3.12_json_netns_h2_to_h1.json").read_bytes())
    (folder / "nccl.txt").write_bytes(LOG.read_bytes())
    (folder / "all_reduce.awk").write_text(ALL_REDUCE_AWK)
    for name, body in (("mpirun", MPIRUN), ("ip", IP), ("iperf3", IPERF3), ("all_reduce_perf", ALL_REDUCE)):
        (folder / "bin" / name).write_text(body.replace("@DIR@", str(folder)))
        (folder / "bin" / name).chmod(0o755)
    return folder / "bin"


def node_bundles(template: str, names: list[str], folder: Path) -> None:
    """Each node's bundle lines in folder/bundles/<node>.txt, from one real node-run's output for node TEMPLATE:
    its name and its GPUs' UUIDs (`GPU-h100-` becomes `GPU-<node>-`) in every file, the report's evidence
    digest and the manifest made anew as the node's own run would have written them."""
    files = members(decode("TEMPLATE", template))
    for name in names:
        own = {path: data.replace(b"TEMPLATE", name.encode()).replace(b"GPU-h100-", f"GPU-{name}-".encode())
               for path, data in files.items()}
        _remanifest(own)
        with (folder / "bundles" / f"{name}.txt").open("w") as out:
            out.write("\n".join(encode(name, _tar(own))) + "\n")


def _remanifest(files: dict[str, bytes]) -> None:
    """The manifest's digests of changed files, the evidence digest the report states, and its checksum."""
    evidence = f"{EVIDENCE_DIR}/"
    manifest = json.loads(files[evidence + MANIFEST])
    listed = [{"path": e["path"], "sha256": hashlib.sha256(files[evidence + e["path"]]).hexdigest()}
              for e in manifest["files"]]
    digest = hashlib.sha256("".join(f"{e['sha256']}  {e['path']}\n" for e in listed).encode()).hexdigest()
    for path in [p for p in files if p.endswith(".html")]:
        files[path] = files[path].replace(manifest["evidence_digest"].encode(), digest.encode())
    manifest.update(files=listed, evidence_digest=digest,
                    bundle=[{"path": e["path"], "sha256": hashlib.sha256(files[e["path"]]).hexdigest()}
                            for e in manifest["bundle"] if e["path"] in files])
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    manifest["checksum"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    files[evidence + MANIFEST] = json.dumps(manifest, indent=1).encode()


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def node_template(folder: Path, contract: str) -> str:
    """One real per-node run (`python -m pytest_gpuaccept node-run --node TEMPLATE`) of `contract` on the cost
    benchmark's fake 8-GPU host (benchmarks/overhead.py: instant tools replaying recorded outputs, an NVML
    recording with utilisation samples; NVSwitches in its sysfs tree): its output, the bundle lines."""
    folder.mkdir(parents=True, exist_ok=True)
    fake_bin(folder / "node-bin")
    nvml_recording(folder / "h100.json")
    pci_tree(folder / "sys")
    env = {**os.environ, "PATH": f"{folder / 'node-bin'}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "node-run", "--node", "TEMPLATE", "--contract-b64",
                           base64.b64encode(contract.encode()).decode(), "--", f"--gpuaccept-nvml={folder / 'h100.json'}",
                           f"--gpuaccept-sysfs={folder / 'sys'}"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    return done.stdout


def node_names(count: int) -> list[str]:
    return [f"n{i:04d}" for i in range(1, count + 1)]


def stand_in_cluster(folder: Path, count: int, per_node: str, cluster: str) -> str:
    """A cluster of `count` simulated nodes n0001... reached through the stand-in (folder/launcher/bin first on
    PATH): its contract (the per-node sections, then `cluster` with engine mpirun and the nodes, then the `cluster`
    keys given), one real node-run of it for the template, and every node's own bundle. Returns the contract."""
    names = node_names(count)
    contract = f'{per_node}cluster:\n  engine: mpirun\n  nodes: ["n[0001-{count:04d}]"]\n{cluster}'
    template = node_template(folder / "node", contract)
    write_launcher(folder / "launcher", {name: f"10.{n // 250}.{n % 250 + 1}.1" for n, name in enumerate(names)})
    node_bundles(template, names, folder / "launcher")
    return contract


def login_run(folder: Path, contract: str, timeout: float = 1800) -> tuple[int, dict, str, float]:
    """`pytest --contract=cluster.yaml` on the login node (this machine) in folder/run, the stand-in first on PATH:
    exit code, results, output, and the login node's peak resident memory in MB (its own, from wait4)."""
    run = folder / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "cluster.yaml").write_text(contract)
    env = {**os.environ, "PATH": f"{folder / 'launcher' / 'bin'}:{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "pytest", "--contract=cluster.yaml", "-p", "no:cacheprovider", "-q",
            f"--gpuaccept-nvml={folder / 'node' / 'h100.json'}", f"--gpuaccept-sysfs={folder / 'node' / 'sys'}"]
    with subprocess.Popen(argv, cwd=run, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        _pid, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    results = json.loads((run / "gpuaccept-results.json").read_text())
    return proc.returncode, results, out, usage.ru_maxrss / 1024
