"""A stand-in for nccl-tests' MPI all_reduce_perf on the namespace cluster, where there are no GPUs: it
prints the real 2-node H100 log (tests/data/fleet/nccltests309_...), but with every bandwidth scaled by
what the network between its nodes really carries now, measured with the real iperf3 (both directions
at once) against the iperf3 server of each other node. So `tc` on a node's interface slows exactly the
pairs that node is in, as a slow NIC would. Built here, not recorded: a test fixture.

Rank 0 of each node writes its address to a rendezvous folder named after the MPI job (PMIx namespace);
rank 0 of the job waits for every node, measures, and prints; the other ranks exit at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

LOG = Path(__file__).parent / "data" / "fleet" / "nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt"

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
