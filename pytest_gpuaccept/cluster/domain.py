"""The login node's half of an NVLink domain (GB200/GB300 NVL72: trays of GPUs joined by NVSwitch trays into one
NVLink domain): every tray's view of its IMEX domain, and one all_reduce over every GPU of every tray with NCCL's
INFO lines, which say per tray whether its ranks reached the other trays over NVLink (MNNVL) or the network, and
each tray's NVLink and NIC counters read before and after it, which say so beside NCCL; each tray's IMEX channel
devices beside its IMEX daemon's word.

The trays' fabric registration is not run here: each tray's own run reads it from NVML (`gpus[].fabric`), and the
login node judges it from the results that came back (clauses/nvlink_domain.py).
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ..measurements import ClusterRun, DomainAllReduce, ImexView, ImexViews
from ..probes import ParseError, imex, imex_channels, iproute, nccl_tests, nvlink_counters, strip_escapes
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
    tray, then `nvidia-imex-ctl -N` on them, then what the driver exposes beside the daemon's word (`ls -ln` of the
    IMEX channel folder, `cat /proc/devices`): each step on every tray at once, never two launchers on one tray at
    once (two Open MPI 4 orteds started together on a node can race on their session folder, open-mpi/ompi#8510)."""
    if cluster.error is not None:
        return ImexViews({}, cluster.error)
    ready = cluster.available
    # Where the login node has the tool, the trays' is at the same path (as nccl-tests'); else the trays' system PATH.
    tool = state.runner.which(imex.TOOL) or imex.TOOL
    wheres = node_addresses(state, engine, ready)
    saids = state.runner.run_together([launch(engine, engine.on_node(n, [tool, *imex.ARGS]), f"imex-{n}")
                                       for n in ready]) if ready else []
    folder, devices = channel_paths(state)
    listed = state.runner.run_together([launch(engine, engine.on_node(n, ["ls", "-ln", str(folder)]), f"imex-channels-{n}")
                                        for n in ready]) if ready else []
    majors = state.runner.run_together([launch(engine, engine.on_node(n, ["cat", str(devices)]), f"proc-devices-{n}")
                                        for n in ready]) if ready else []
    views = {n: _with_channels(_view(said, where), ls, cat)
             for n, said, where, ls, cat in zip(ready, saids, wheres, listed, majors)}
    views.update({n: ImexView(None, (), f"not run: {unavailable(o)}") for n, o in cluster.nodes.items() if n not in views})
    return ImexViews(views)


def channel_paths(state: Session) -> tuple[Path, Path]:
    """Where a tray's IMEX channel devices and /proc/devices are: under `/`, or, where the session reads a stand-in
    sysfs tree (`--gpuaccept-sysfs DIR/sys`, tests), under that tree's parent (DIR/dev/..., DIR/proc/devices)."""
    root = Path("/") if str(state.sys_root) == "/sys" else state.sys_root.parent
    return root / imex_channels.FOLDER.lstrip("/"), root / imex_channels.DEVICES.lstrip("/")


def _with_channels(view: ImexView, listed: ToolRun, devices: ToolRun) -> ImexView:
    """The view with the tray's channel devices (`ls -ln`) and their major (/proc/devices), or why not read. A
    folder `ls` cannot open is no channel: `ls` says so on stderr (the folder is created with the first channel)."""
    evidence = (*view.evidence, *listed.evidence, *devices.evidence)
    if devices.failure is not None:
        return dataclasses.replace(view, evidence=evidence, channel_problem=f"cat {imex_channels.DEVICES}: "
                                                                            f"{devices.failure}")
    try:
        major = imex_channels.parse_major(strip_escapes(devices.stdout))
    except ParseError as exc:
        return dataclasses.replace(view, evidence=evidence, channel_problem=str(exc))
    if listed.failure is not None:
        said = strip_escapes(listed.stderr).strip().splitlines()
        return dataclasses.replace(view, evidence=evidence, channel_major=major, channel_problem=None,
                                   channels=(), channel_listing=said[-1][:200] if said else listed.failure)
    return dataclasses.replace(view, evidence=evidence, channel_major=major, channel_problem=None,
                               channels=imex_channels.parse_listing(strip_escapes(listed.stdout)))


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
    before = _read_counters(state, engine, ready, "before")
    run = state.runner.run_together([launch(engine, engine.mpi_job(ready, per_node, [tool, *args], NCCL_ENV),
                                            "nvlink-domain-allreduce")])[0]
    after = _read_counters(state, engine, ready, "after")
    seen = nccl_tests.mnnvl_by_host(strip_escapes(run.stdout)) if run.failure is None else {}
    traffic = {n: _traffic(before[n], after[n]) for n in ready}
    return DomainAllReduce(cluster, tuple(ready), missing, per_node,
                           pair_result(0, run, len(ready) * per_node, human_bytes, len(ready)), seen, traffic=traffic)


def _read_counters(state: Session, engine: Engine, nodes: list[str], when: str) -> dict[str, tuple[ToolRun, ToolRun]]:
    """Each tray's NVLink data counters (`nvidia-smi nvlink -gt d`) and NIC transmit counters (sysfs, `grep -H`),
    every tray at once, one launcher a tray at a time (open-mpi/ompi#8510)."""
    smi = state.runner.which(nvlink_counters.TOOL) or nvlink_counters.TOOL
    root = shlex.quote(str(state.sys_root))
    grep = f"grep -sH . {' '.join(f'{root}/{g}' for g in nvlink_counters.NIC_GLOBS)}; exit 0"
    links = state.runner.run_together([launch(engine, engine.on_node(n, [smi, *nvlink_counters.ARGS]),
                                              f"nvlink-counters-{when}-{n}") for n in nodes])
    nics = state.runner.run_together([launch(engine, engine.on_node(n, ["sh", "-c", grep]), f"nic-counters-{when}-{n}")
                                      for n in nodes])
    return {n: (link, nic) for n, link, nic in zip(nodes, links, nics)}


def _traffic(before: tuple[ToolRun, ToolRun], after: tuple[ToolRun, ToolRun]) -> nvlink_counters.Traffic:
    evidence = tuple(e for r in (*before, *after) for e in r.evidence)
    labels = ("`nvidia-smi nvlink -gt d` before", "the NIC counters (grep -H) before",
              "`nvidia-smi nvlink -gt d` after", "the NIC counters (grep -H) after")
    for label, run in zip(labels, (*before, *after)):
        if run.failure is not None:
            return nvlink_counters.Traffic(problem=f"{label}: {run.failure}", evidence=evidence)
    try:
        traffic = nvlink_counters.Traffic(nvlink_counters.parse_throughput(strip_escapes(before[0].stdout)),
                                          nvlink_counters.parse_throughput(strip_escapes(after[0].stdout)),
                                          nvlink_counters.parse_nic_counters(strip_escapes(before[1].stdout)),
                                          nvlink_counters.parse_nic_counters(strip_escapes(after[1].stdout)),
                                          None, evidence)
    except ParseError as exc:
        return nvlink_counters.Traffic(problem=str(exc), evidence=evidence)
    if not traffic.nic_before:
        # every node has a NIC (the launcher reached it): none read is no proof the network carried nothing
        return dataclasses.replace(traffic, problem=f"no NIC counter could be read ({', '.join(nvlink_counters.NIC_GLOBS)})")
    return traffic
