"""The login node's half of an NVLink domain (GB200/GB300 NVL72: trays of GPUs joined by NVSwitch trays into one
NVLink domain): every tray's view of its IMEX domain, and one all_reduce over every GPU of every tray with NCCL's
INFO lines, which say per tray whether its ranks reached the other trays over NVLink (MNNVL) or the network.

The trays' fabric registration is not run here: each tray's own run reads it from NVML (`gpus[].fabric`), and the
login node judges it from the results that came back (clauses/nvlink_domain.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..measurements import ClusterRun, DomainAllReduce, ImexView, ImexViews
from ..probes import ParseError, imex, iproute, nccl_tests, strip_escapes
from ..probes._run import ToolRun
from ..subjects import gpu_count
from ..units import human_bytes
from .engine import Engine, launch
from .run import node_addresses, pair_result, unavailable

if TYPE_CHECKING:
    from ..clauses.cluster import NvlinkDomain
    from ..session import Session

# NCCL's INFO lines (the communicator's MNNVL flag, each rank's fabric, each channel's transport) are the proof that
# the job ran over NVLink between the trays: asked for, never left to the host's own NCCL configuration.
NCCL_ENV = {"NCCL_DEBUG": "INFO"}


def run_imex(state: Session, engine: Engine, cluster: ClusterRun) -> ImexViews:
    """Each available tray's IPv4 addresses (`ip -j -4 addr show`), which say which entry of every view is that
    tray, then `nvidia-imex-ctl -N` on them: each step on every tray at once, never two launchers on one tray at
    once (two Open MPI 4 orteds started together on a node can race on their session folder, open-mpi/ompi#8510)."""
    if cluster.error is not None:
        return ImexViews({}, cluster.error)
    ready = cluster.available
    # Where the login node has the tool, the trays' is at the same path (as nccl-tests'); else the trays' system PATH.
    tool = state.runner.which(imex.TOOL) or imex.TOOL
    wheres = node_addresses(state, engine, ready)
    saids = state.runner.run_together([launch(engine, engine.on_node(n, [tool, *imex.ARGS]), f"imex-{n}")
                                       for n in ready]) if ready else []
    views = {n: _view(said, where) for n, said, where in zip(ready, saids, wheres)}
    views.update({n: ImexView(None, (), f"not run: {unavailable(o)}") for n, o in cluster.nodes.items() if n not in views})
    return ImexViews(views)


def _view(said: ToolRun, where: ToolRun) -> ImexView:
    evidence = (*said.evidence, *where.evidence)
    try:
        addresses = tuple(iproute.parse_addresses(strip_escapes(where.stdout))) if where.failure is None else ()
    except ParseError:
        addresses = ()
    if said.failure is not None:
        # The tool's own words, not only the launcher's last line (srun: "task 0: Exited with exit code 1").
        own = [line.strip() for line in strip_escapes(said.stderr).splitlines()
               if line.strip() and not line.startswith(("srun:", "mpirun", "-----"))]
        words = f"; it said: {own[0][:200]}" if own else ""
        return ImexView(None, addresses, f"{imex.TOOL} -N: {said.failure}{words}", evidence)
    try:
        return ImexView(imex.parse_domain(strip_escapes(said.stdout)), addresses, None, evidence)
    except ParseError as exc:
        return ImexView(None, addresses, str(exc), evidence)


def run_domain_allreduce(state: Session, engine: Engine, keys: NvlinkDomain, cluster: ClusterRun) -> DomainAllReduce:
    """One all_reduce (nccl-tests, MPI, one rank per GPU) over every GPU of every available tray, NCCL_DEBUG=INFO."""
    per_node = gpu_count(state.contract) or 1
    if cluster.error is not None:
        return DomainAllReduce(cluster, (), (), per_node, None, error=cluster.error)
    ready = cluster.available
    missing = tuple(f"{n} ({unavailable(o)})" for n, o in cluster.nodes.items() if n not in ready)
    if len(ready) < 2:
        return DomainAllReduce(cluster, tuple(ready), missing, per_node, None, error="fewer than two trays available")
    args = nccl_tests.all_reduce_args(1, keys.min_bytes.nbytes, keys.max_bytes.nbytes, ())
    tool = state.runner.which(nccl_tests.TOOL) or nccl_tests.TOOL
    run = state.runner.run_together([launch(engine, engine.mpi_job(ready, per_node, [tool, *args], NCCL_ENV),
                                            "nvlink-domain-allreduce")])[0]
    seen = nccl_tests.mnnvl_by_host(strip_escapes(run.stdout)) if run.failure is None else {}
    return DomainAllReduce(cluster, tuple(ready), missing, per_node,
                           pair_result(0, run, len(ready) * per_node, human_bytes, len(ready)), seen)

