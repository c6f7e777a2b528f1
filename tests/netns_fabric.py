"""A rail-optimised RDMA fabric in network namespaces, for cluster.links.rdma and cluster.fabric: nodes h1..hN, each
its own namespace with R rail interfaces (`r0`..`r<R-1>`, 10.<net>.<rail>.<i>/24), each rail a namespace of its own
holding two leaf bridges (the first half of the nodes on `leafa`, the second on `leafb`) joined by one spine link (a
veth pair, `spa`-`spb`), so that every pair that crosses the halves crosses that rail's spine. Each node's rail egress
is shaped to the line rate (tc tbf); a node's rail, one link (an htb class and a u32 filter) or a spine can be shaped
slower, and the same fabric reshaped between cases.

Each node has its own sysfs tree beside the login node's (`<root>.<node>`, what cluster/run.py's node_sysfs reads):
`class/infiniband/mlx5_<r>/ports/1` with state, rate, link layer Ethernet, the rail's IPv4-mapped RoCE v2 GID at
index 1 (ndev `r<r>`) and the port counters the stand-in ib_write_bw (tests/fabric_standin.py) moves. The stand-in
(`bin()`) is a shell script that hands each run to its node's agent, one Python process a node started in its
namespace (a step of 8 nodes x 4 rails starts 128 runs at once: one interpreter each took seconds on two shared cores,
and the plugin counts a client's start-up in its time). `Namespaces` is an engine (cluster/engine.py's Protocol) that
runs a command in a node's namespace under the node's hostname: the runner's code is the one every engine drives.
Root, iproute2 and tc. A test fixture, not a product feature.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fabric_standin import SHELL

from pytest_gpuaccept.cluster.engine import NodeState

NEEDED = ("ip", "tc", "nsenter", "unshare")
STANDIN = Path(__file__).resolve().parent / "fabric_standin.py"


def missing_tools() -> list[str]:
    return [tool for tool in NEEDED if shutil.which(tool) is None]


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


@dataclass
class Fabric:
    base: Path
    size: int  # nodes h1..h<size>
    rails: int
    prefix: str
    net: int
    line_rate: str  # tc's words, e.g. "50mbit"
    started: list[str] = field(default_factory=list)
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return [f"h{i}" for i in range(1, self.size + 1)]

    @property
    def sysfs(self) -> Path:
        """The login node's tree (--gpuaccept-sysfs): each node reads `<this>.<node>` beside it."""
        return self.base / "sys"

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def rail_ns(self, rail: int) -> str:
        return f"{self.prefix}-r{rail}"

    def address(self, node: str, rail: int) -> str:
        return f"10.{self.net}.{rail}.{int(node[1:])}"

    @property
    def agents_folder(self) -> Path:
        return self.base / "agents"

    def up(self) -> None:
        self.sysfs.mkdir(parents=True, exist_ok=True)
        self.agents_folder.mkdir(exist_ok=True)
        for rail in range(self.rails):
            ns = self.rail_ns(rail)
            _run(["ip", "netns", "add", ns])
            self.started.append(ns)
            for leaf in ("leafa", "leafb"):
                _run(["ip", "-n", ns, "link", "add", leaf, "type", "bridge"])
                _run(["ip", "-n", ns, "link", "set", leaf, "up"])
            _run(["ip", "-n", ns, "link", "add", "spa", "type", "veth", "peer", "name", "spb"])
            for end, leaf in (("spa", "leafa"), ("spb", "leafb")):
                _run(["ip", "-n", ns, "link", "set", end, "master", leaf])
                _run(["ip", "-n", ns, "link", "set", end, "up"])
        for i, node in enumerate(self.nodes):
            ns = self.ns(node)
            _run(["ip", "netns", "add", ns])
            self.started.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            for rail in range(self.rails):
                here, there = f"{self.prefix}{node}r{rail}", f"p{node}"
                _run(["ip", "link", "add", here, "type", "veth", "peer", "name", f"{self.prefix}x"])
                _run(["ip", "link", "set", here, "netns", ns])
                _run(["ip", "link", "set", f"{self.prefix}x", "netns", self.rail_ns(rail)])
                _run(["ip", "-n", self.rail_ns(rail), "link", "set", f"{self.prefix}x", "name", there])
                leaf = "leafa" if i < self.size // 2 else "leafb"
                _run(["ip", "-n", self.rail_ns(rail), "link", "set", there, "master", leaf])
                _run(["ip", "-n", self.rail_ns(rail), "link", "set", there, "up"])
                _run(["ip", "-n", ns, "link", "set", here, "name", f"r{rail}"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(node, rail)}/24", "dev", f"r{rail}"])
                _run(["ip", "-n", ns, "link", "set", f"r{rail}", "up"])
            self.tree(node)
            self.agents.append(subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-S", "-I", str(STANDIN), "agent", node,
                 str(self.base / f"sys.{node}"), str(self.agents_folder / f"{node}.fifo")]))
        self.reshape()

    def tree(self, node: str) -> None:
        """The node's sysfs: every rail's RDMA port, its RoCE v2 GID (the rail's IPv4) and counters at 0."""
        for rail in range(self.rails):
            port = self.base / f"sys.{node}" / "class" / "infiniband" / f"mlx5_{rail}" / "ports" / "1"
            for folder in ("gids", "gid_attrs/types", "gid_attrs/ndevs", "counters"):
                (port / folder).mkdir(parents=True, exist_ok=True)
            for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "10 Gb/sec (1X QDR)"),
                                ("link_layer", "Ethernet"), ("lid", "0x0")):
                (port / name).write_text(value + "\n")
            octets = [int(o) for o in self.address(node, rail).split(".")]
            gid = "0000:0000:0000:0000:0000:ffff:" + f"{octets[0]:02x}{octets[1]:02x}:{octets[2]:02x}{octets[3]:02x}"
            (port / "gids" / "0").write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
            (port / "gids" / "1").write_text(gid + "\n")
            (port / "gid_attrs" / "types" / "0").write_text("IB/RoCE v1\n")
            (port / "gid_attrs" / "types" / "1").write_text("RoCE v2\n")
            (port / "gid_attrs" / "ndevs" / "1").write_text(f"r{rail}\n")
            for counter in ("port_xmit_data", "port_rcv_data"):
                (port / "counters" / counter).write_text("0\n")

    def _tc(self, ns: str, *args: str) -> None:
        _run(["ip", "netns", "exec", ns, "tc", *args])

    def _tbf(self, ns: str, dev: str, rate: str) -> None:
        self._tc(ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kb", "latency", "50ms")

    def reshape(self) -> None:
        """Every node's rail egress at the line rate, both ways of every rail port, every spine unshaped."""
        for node in self.nodes:
            for rail in range(self.rails):
                self._tbf(self.ns(node), f"r{rail}", self.line_rate)
                self._tbf(self.rail_ns(rail), f"p{node}", self.line_rate)
        for rail in range(self.rails):
            for end in ("spa", "spb"):
                subprocess.run(["ip", "netns", "exec", self.rail_ns(rail), "tc", "qdisc", "del", "dev", end, "root"],
                               capture_output=True)

    def slow_port(self, node: str, rail: int, rate: str) -> None:
        """One node's rail at `rate`, both ways: its NIC, cable or switch port."""
        self._tbf(self.ns(node), f"r{rail}", rate)
        self._tbf(self.rail_ns(rail), f"p{node}", rate)

    def slow_link(self, sender: str, receiver: str, rail: int, rate: str) -> None:
        """What `sender` sends to `receiver` on `rail` at `rate`; the rest of its egress at the line rate. Packets under
        128 bytes (the acknowledgements of what `receiver` sends back) go at the line rate: a slow TCP direction
        would otherwise starve the other's acknowledgements, which an RDMA link's do not."""
        ns, dev = self.ns(sender), f"r{rail}"
        self._tc(ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        self._tc(ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", self.line_rate)
        self._tc(ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate)
        self._tc(ns, "filter", "add", "dev", dev, "protocol", "ip", "parent", "1:", "prio", "1", "u32", "match", "u16",
                 "0x0000", "0xff80", "at", "2", "flowid", "1:10")
        self._tc(ns, "filter", "add", "dev", dev, "protocol", "ip", "parent", "1:", "prio", "2", "u32", "match", "ip",
                 "dst", f"{self.address(receiver, rail)}/32", "flowid", "1:20")

    def oversubscribe(self, rate: str) -> None:
        """Every rail's spine at `rate` each way (half of what the nodes of a half send: 2:1)."""
        for rail in range(self.rails):
            for end in ("spa", "spb"):
                self._tbf(self.rail_ns(rail), end, rate)

    def down(self) -> None:
        for agent in self.agents:
            agent.kill()
            agent.wait()
        self.agents.clear()
        for ns in reversed(self.started):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.started.clear()

    def bin(self, folder: Path) -> Path:
        """The stand-in as `ib_write_bw`: a shell script handing each run to its node's agent."""
        folder.mkdir(parents=True, exist_ok=True)
        tool = folder / "ib_write_bw"
        tool.write_text(SHELL)
        tool.chmod(0o755)
        return tool


@dataclass(frozen=True)
class Namespaces:
    """An engine that runs a command in a node's namespace, as the node (its hostname), with the stand-in's sysfs root
    in its environment: what Slurm's srun or mpirun do for a real cluster, without a scheduler."""

    fabric: Fabric
    name: str = "namespaces"
    own_tmpdir: bool = False

    def expand_argv(self, expressions: tuple[str, ...]) -> list[str] | None:
        return None

    def expand(self, expressions: tuple[str, ...], output: str | None) -> list[str]:
        return self.fabric.nodes

    def inventory_argv(self, nodes: list[str]) -> list[str] | None:
        return None

    def inventory(self, nodes: list[str], output: str | None) -> dict[str, NodeState]:
        return {n: NodeState(n, True, True, "listed", None) for n in nodes}

    def on_node(self, node: str, argv: list[str]) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.fabric.ns(node)}", "unshare", "--uts", "sh", "-c",
                f'hostname {node} && FABRIC_NODE={node} FABRIC_AGENTS={self.fabric.agents_folder} exec "$@"', "sh", *argv]

    def mpi_job(self, nodes: list[str], ranks_per_node: int, argv: list[str], env: dict[str, str]) -> list[str]:
        raise NotImplementedError("the fabric runs no MPI job")

    def launched(self, stderr: str) -> tuple[tuple[str, str], ...]:
        return ()
