"""The engines a cluster run goes through: a Protocol and a table of implementations (Slurm, mpirun, Kubernetes), as
pytest-xdist does with its schedulers. An engine only turns intentions into argv lists (expand these
names, read their state, run this on that node, run this MPI job over those nodes); the tool runner
executes them, with timeouts and evidence, like every other tool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from ..probes import ParseError
from ..probes._run import Command
from ..probes.slurm import parse_scontrol_nodes
from .base import NODE_NAME, ClusterError, NodeState, own_expansion
from .kubernetes import Kubernetes

if TYPE_CHECKING:
    from ..clauses.cluster import ClusterSection

__all__ = ["ENGINES", "ClusterError", "Engine", "Mpirun", "NodeState", "Slurm", "engine_for", "launch", "own_expansion"]


class Engine(Protocol):
    """How a cluster run reaches its nodes."""

    @property
    def name(self) -> str: ...

    @property
    def own_tmpdir(self) -> bool:
        """Whether each launcher line runs with a TMPDIR of its own (Command.own_tmpdir): Open MPI 4's mpirun keeps
        its session under $TMPDIR/ompi.<host>.<uid>, and of several started at once on the login node one exiting
        removes that folder while another is making it ("orte_session_dir failed", open-mpi/ompi#8510)."""
        ...

    def expand_argv(self, expressions: tuple[str, ...]) -> list[str] | None:
        """The command that expands node expressions, or None where the engine expands them itself."""
        ...

    def expand(self, expressions: tuple[str, ...], output: str | None) -> list[str]:
        """The node names, from the expansion command's output (or without one)."""
        ...

    def inventory_argv(self, nodes: list[str]) -> list[str] | None:
        """The command that reads the nodes' states, or None where there is no scheduler to ask."""
        ...

    def inventory(self, nodes: list[str], output: str | None) -> dict[str, NodeState]:
        ...

    def on_node(self, node: str, argv: list[str]) -> list[str]:
        """The argv that runs `argv` once on `node` (exclusively, where the engine can)."""
        ...

    def mpi_job(self, nodes: list[str], ranks_per_node: int, argv: list[str], env: dict[str, str]) -> list[str]:
        """The argv of one MPI job: `ranks_per_node` ranks on each node, `env` set for every rank."""
        ...

    def launched(self, stderr: str) -> tuple[tuple[str, str], ...]:
        """What the launcher said of how it ran a node's run (Kubernetes: the pod, its node, the image's digest),
        from its own stream (stderr, never the node's output), for the node's check; () where it says nothing."""
        ...


@dataclass(frozen=True, slots=True)
class Slurm:
    """Slurm: names and states from scontrol, one exclusive step per node, MPI through PMIx."""

    partition: str | None = None
    name: str = "slurm"
    own_tmpdir: bool = False  # srun exports its environment to the job: a login node's folder would be named there

    def expand_argv(self, expressions: tuple[str, ...]) -> list[str] | None:
        return ["scontrol", "show", "hostnames", ",".join(expressions)]

    def expand(self, expressions: tuple[str, ...], output: str | None) -> list[str]:
        names = [line.strip() for line in (output or "").splitlines() if line.strip()]
        bad = [n for n in names if not NODE_NAME.match(n)]
        if not names or bad:
            raise ClusterError(f"scontrol show hostnames printed no node names for {','.join(expressions)!r}"
                             + (f" (odd names: {', '.join(bad[:3])})" if bad else ""))
        return list(dict.fromkeys(names))

    def inventory_argv(self, nodes: list[str]) -> list[str] | None:
        return ["scontrol", "show", "node", ",".join(nodes)]

    def inventory(self, nodes: list[str], output: str | None) -> dict[str, NodeState]:
        try:
            records = {n.name: n for n in parse_scontrol_nodes(output or "")} if output and "NodeName=" in output else {}
        except ParseError as exc:
            raise ClusterError(str(exc)) from None
        found = {}
        for name in nodes:
            record = records.get(name)
            if record is None:
                found[name] = NodeState(name, False, False, "not known to the scheduler", None)
            else:
                why = "; ".join(r for r in (record.reason, record.why_unschedulable) if r) or None
                found[name] = NodeState(name, True, record.schedulable, "+".join(record.states), record.gpus, why)
        return found

    def _where(self) -> list[str]:
        return ["-p", self.partition] if self.partition else []

    def on_node(self, node: str, argv: list[str]) -> list[str]:
        return ["srun", "-N", "1", "-n", "1", "-w", node, "--exclusive", *self._where(), "--", *argv]

    def mpi_job(self, nodes: list[str], ranks_per_node: int, argv: list[str], env: dict[str, str]) -> list[str]:
        exported = ",".join(["ALL", *(f"{k}={v}" for k, v in sorted(env.items()))])
        return ["srun", "--mpi=pmix", "-N", str(len(nodes)), "-w", ",".join(nodes),
                f"--ntasks-per-node={ranks_per_node}", "--exclusive", f"--export={exported}", *self._where(),
                "--", *argv]

    def launched(self, stderr: str) -> tuple[tuple[str, str], ...]:
        return ()


@dataclass(frozen=True, slots=True)
class Mpirun:
    """Plain Open MPI over ssh: names expanded here, no scheduler to ask, one rank per node with mpirun."""

    name: str = "mpirun"
    launcher: tuple[str, ...] = ("mpirun",)
    own_tmpdir: bool = True  # read by mpirun on the login node only: the ranks get what -x names

    def expand_argv(self, expressions: tuple[str, ...]) -> list[str] | None:
        return None

    def expand(self, expressions: tuple[str, ...], output: str | None) -> list[str]:
        return own_expansion(expressions)

    def inventory_argv(self, nodes: list[str]) -> list[str] | None:
        return None

    def inventory(self, nodes: list[str], output: str | None) -> dict[str, NodeState]:
        return {n: NodeState(n, True, True, "listed (no scheduler: reached over ssh)", None) for n in nodes}

    def on_node(self, node: str, argv: list[str]) -> list[str]:
        # PATH travels with the job (-x), as srun's --export=ALL does: the tools are found as on the login node.
        return [*self.launcher, "--host", f"{node}:1", "-np", "1", "-x", "PATH", "--", *argv]

    def mpi_job(self, nodes: list[str], ranks_per_node: int, argv: list[str], env: dict[str, str]) -> list[str]:
        exports = ["-x", "PATH", *(arg for k, v in sorted(env.items()) for arg in ("-x", f"{k}={v}"))]
        hosts = ",".join(f"{n}:{ranks_per_node}" for n in nodes)
        return [*self.launcher, "--host", hosts, "-np", str(len(nodes) * ranks_per_node),
                "--map-by", "ppr:%d:node" % ranks_per_node, *exports, "--", *argv]

    def launched(self, stderr: str) -> tuple[tuple[str, str], ...]:
        return ()


def launch(engine: Engine, argv: list[str], key: str, start_after_s: float = 0.0) -> Command:
    """An engine's launcher line (on_node, mpi_job) as a command for the tool runner."""
    return Command.of(argv, key, start_after_s, engine.own_tmpdir)


# The engines by contract name (cluster.engine), each made from the section.
ENGINES: dict[str, Callable[[ClusterSection], Engine]] = {"slurm": lambda section: Slurm(section.partition),
                                                          "mpirun": lambda _section: Mpirun(),
                                                          "kubernetes": Kubernetes.of}


def engine_for(section: ClusterSection) -> Engine:
    return ENGINES[section.engine](section)
