"""A real Slurm cluster on this machine, for the cluster tests: a head node h0 (slurmctld, and the login
node the acceptance run starts on) and nodes h1..h<n-1>, each its own network and UTS namespace with its
own hostname, address (10.<net>.0.<i+1>/24 on a bridge that lives in a namespace of its own) and slurmd,
8 GPUs per node as Gres (or `gpus`). Debian's slurm-wlm, munge and openmpi-bin (test.sh installs them); root.

The project's own version of ../shared/fleet/recipes/netns_cluster.sh (pitfalls learnt there: slurmd is
started with `nsenter --net` and `unshare --uts`, not `ip netns exec`, which remounts /sys; TmpFS and
the spool are per node, %n). A test fixture, not a product feature.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NEEDED = ("slurmctld", "slurmd", "srun", "scontrol", "munged", "ip", "nsenter", "unshare", "tc")


def missing_tools() -> list[str]:
    return [tool for tool in NEEDED if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[call-overload]


@dataclass
class Cluster:
    base: Path
    size: int  # h0 (head) + size-1 nodes
    prefix: str
    net: int
    gpus: int = 8  # Gres gpu per node (an NVL72 tray has 4)
    started: list[str] = field(default_factory=list)  # namespaces made

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def nodes(self) -> list[str]:
        return [f"h{i}" for i in range(1, self.size)]

    def ns(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def address(self, i: int) -> str:
        return f"10.{self.net}.0.{i + 1}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def inside(self, i: int, argv: list[str]) -> list[str]:
        """argv run as host h<i>: its network namespace and its own hostname."""
        return ["nsenter", f"--net=/run/netns/{self.ns(i)}", "unshare", "--uts", "sh", "-c",
                f'hostname h{i} && exec "$@"', "sh", *argv]

    def up(self) -> None:
        self.network()
        self.slurm()

    def network(self) -> None:
        """The namespaces, the bridge and each node's address and hostname: the cluster without Slurm (the Kubernetes
        tests' stand-in runs its pods in these namespaces)."""
        for folder in ("etc", "state", "log", "run", "spool", "tmp"):
            (self.base / folder).mkdir(parents=True, exist_ok=True)
        switch = f"{self.prefix}-sw"
        _run(["ip", "netns", "add", switch])
        self.started.append(switch)
        _run(["ip", "-n", switch, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", switch, "link", "set", "br0", "up"])
        for i in range(self.size):
            _run(["ip", "netns", "add", self.ns(i)])
            self.started.append(self.ns(i))
            host, port = f"{self.prefix}h{i}", f"{self.prefix}p{i}"
            _run(["ip", "link", "add", host, "type", "veth", "peer", "name", port])
            _run(["ip", "link", "set", host, "netns", self.ns(i)])
            _run(["ip", "link", "set", port, "netns", switch])
            _run(["ip", "-n", switch, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", switch, "link", "set", port, "up"])
            _run(["ip", "-n", self.ns(i), "link", "set", "lo", "up"])
            _run(["ip", "-n", self.ns(i), "link", "set", host, "name", "eth0"])
            _run(["ip", "-n", self.ns(i), "addr", "add", f"{self.address(i)}/24", "dev", "eth0"])
            _run(["ip", "-n", self.ns(i), "link", "set", "eth0", "up"])
            (self.base / "spool" / f"h{i}").mkdir(exist_ok=True)
            (self.base / "tmp" / f"h{i}").mkdir(exist_ok=True)

    def slurm(self) -> None:
        """slurmctld on h0 and a slurmd on every other node, with munge: until every node is idle."""
        last = self.size - 1
        nodes = "\n".join(f"NodeName=h{i} NodeHostname=h{i} NodeAddr={self.address(i)} CPUs=16 RealMemory=1000 "
                          f"Gres=gpu:{self.gpus} State=UNKNOWN" for i in range(1, self.size))
        b = self.base
        self.conf.write_text(f"""ClusterName=ga{self.net}
SlurmctldHost=h0({self.address(0)})
SlurmctldPort={6817 + 10 * (self.net % 50)}
SlurmdPort={6818 + 10 * (self.net % 50)}
GresTypes=gpu
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
TmpFS={b}/tmp/%n
SlurmctldPidFile={b}/run/slurmctld.pid
SlurmdPidFile={b}/run/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdTimeout=30
MinJobAge=30
KillWait=5
# 16 CPUs a node as configured, whatever this machine has: one MPI rank per (fake) GPU needs 8 a node.
SlurmdParameters=config_overrides
{nodes}
PartitionName=gpu Nodes=h[1-{last}] Default=YES MaxTime=INFINITE State=UP
""")
        # Slurm 22.05 drops GPUs without a File=: harmless character devices stand in (task/none: no cgroup).
        (self.base / "etc" / "gres.conf").write_text(f"NodeName=h[1-{last}] Name=gpu File=/dev/tty[0-{self.gpus - 1}]\n")
        # Ask munge itself, not pgrep: a munged of another root (the host of a chroot) is no daemon of ours.
        if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
        _run(self.inside(0, ["slurmctld", "-f", str(self.conf)]), env=self.env())
        for i in range(1, self.size):
            self.start_slurmd(i)
        self.wait_idle()

    def start_slurmd(self, i: int) -> None:
        _run(self.inside(i, ["slurmd", "-f", str(self.conf), "-N", f"h{i}"]), env=self.env())

    def stop_slurmd(self, i: int) -> None:
        pid = (self.base / "run" / f"slurmd-h{i}.pid").read_text().strip()
        os.kill(int(pid), signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def shape(self, i: int, rate: str) -> None:
        """h<i>'s egress at `rate` (tc tbf on its eth0): a slow node, or, on every node, a known line rate."""
        _run(["ip", "netns", "exec", self.ns(i), "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
              "burst", "64kb", "latency", "100ms"])

    def shape_link(self, i: int, j: int, rate: str, line_rate: str) -> None:
        """A one-way fault: what h<i> sends to h<j> at `rate`, the rest of h<i>'s egress at `line_rate`."""
        ns = ["ip", "netns", "exec", self.ns(i), "tc"]
        _run([*ns, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"])
        _run([*ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", line_rate])
        _run([*ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", rate])
        _run([*ns, "filter", "add", "dev", "eth0", "protocol", "ip", "parent", "1:", "prio", "1", "u32", "match", "ip",
              "dst", f"{self.address(j)}/32", "flowid", "1:20"])

    def start_iperf3_servers(self) -> None:
        for i in range(1, self.size):
            _run(self.inside(i, ["iperf3", "-s", "-D", "-B", self.address(i), "--pidfile",
                                 str(self.base / "run" / f"iperf3-h{i}.pid")]))

    def start_sshd(self) -> Path:
        """An sshd in every node's namespace (for `engine: mpirun`, which reaches nodes over ssh); returns the
        ssh_config a client uses (key, no host key checks, root). A session gets the node's own TMPDIR, as a real
        node has its own /tmp: the clusters of two test workers share this machine's /tmp and their host names
        (h1 ...), and Open MPI 4's orted keeps its session under $TMPDIR/ompi.<host>.<uid>, where two started at
        once race (open-mpi/ompi#8510)."""
        keys = self.base / "ssh"
        keys.mkdir(exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)
        for name in ("hostkey", "id"):
            if not (keys / name).exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)])
        shutil.copy(keys / "id.pub", keys / "authorized_keys")
        config = keys / "ssh_config"
        config.write_text(f"Host *\n  IdentityFile {keys / 'id'}\n  StrictHostKeyChecking no\n"
                          "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  User root\n")
        for i in range(1, self.size):
            tmp = self.base / "tmp" / f"h{i}"
            tmp.mkdir(parents=True, exist_ok=True)
            conf = keys / f"sshd_h{i}.conf"
            conf.write_text(f"ListenAddress {self.address(i)}\nHostKey {keys / 'hostkey'}\nSetEnv TMPDIR={tmp}\n"
                            f"PidFile {self.base / 'run' / f'sshd-h{i}.pid'}\nAuthorizedKeysFile {keys / 'authorized_keys'}\n"
                            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"
                            "AcceptEnv *\n")
            _run(self.inside(i, ["/usr/sbin/sshd", "-f", str(conf)]))
        return config

    def scontrol(self, *args: str) -> str:
        return _run(self.inside(0, ["scontrol", *args]), env=self.env()).stdout

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until every node is idle (a node that was drained or restarted comes back)."""
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run(self.inside(0, ["sinfo", "-h", "-N", "-o", "%N %T"]), capture_output=True,
                                 text=True, env=self.env(), timeout=30).stdout
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            if len(states) == self.size - 1 and all(s == "idle" for s in states.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test cluster did not come up: {out!r}; "
                                   f"{(self.base / 'log' / 'slurmctld.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def down(self) -> None:
        for pid_file in sorted((self.base / "run").glob("*.pid")):
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.5)
        for ns in reversed(self.started):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.started.clear()
