"""`cluster.nvlink_domain`: the cluster's nodes are the trays of one multi-node NVLink domain (GB200/GB300 NVL72:
18 trays of 4 GPUs joined through NVSwitch trays), judged from the login node.

- `cluster.nvlink_domain.fabric`, per tray: every GPU of the tray registered with the NVLink fabric (NVML's fabric
  state COMPLETED, status success), in the domain's cluster UUID and clique (the one most trays are in), with no
  health flag raised (bandwidth degraded, routes unhealthy or recovering, a configuration the fabric manager
  refused). From each tray's own NVML reading (`gpus[].fabric`, docs/nvml-recording.md), as its results carry it.
- `cluster.nvlink_domain.imex`, per tray: `nvidia-imex-ctl -N` on the tray answers, and in every tray's view of the
  IMEX domain this tray is READY and connected to every other node. A tray blamed by others' views alone fails
  too: a daemon that answers for itself but that no peer reaches shares no memory. Beside the daemons' word, the
  driver's: a channel<N> character device in /dev/nvidia-caps-imex-channels of the major /proc/devices gives
  `nvidia-caps-imex-channels` (no channel, no memory imported through IMEX).
- `cluster.nvlink_domain.min_busbw`, the domain: one all_reduce over every GPU of every tray (NCCL_DEBUG=INFO).
  Its busbw counts only if NCCL's own lines say every tray's ranks reached the others over NVLink (`MNNVL 1` on
  each communicator, no channel `via NET/...`), in the clique NVML gave the tray; a tray that fell back to the
  network, or logged nothing that proves MNNVL, fails the check by name. Beside NCCL's word, each tray's counters
  read before and after it: every GPU's NVLink Data Tx (`nvidia-smi nvlink -gt d`) grew by at least max_bytes, and
  the tray's NICs (sysfs port_xmit_data, tx_bytes) sent less than its GPUs' max_bytes together.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ..cluster.domain import run_domain_allreduce, run_imex
from ..cluster.engine import engine_for
from ..models import TABLE_FILE, Model, all_models, answers_to
from ..probes.imex_channels import DEVICES, DRIVER_NAME, FOLDER
from ..probes.nvml import FABRIC_COMPLETED, FABRIC_STATES, fabric_health_problems
from ..subjects import Subject
from ..units import human_bytes
from ..verdict import Check
from . import cluster
from .base import Clause, HostWide
from .plausible import MARGIN, Cap, over_ceiling
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..measurements import ClusterRun, DomainAllReduce, ImexView, ImexViews, NodeOutcome
    from ..session import Session
    from .cluster import ClusterSection, NvlinkDomain

SECTION = cluster.SECTION


def _keys(section: ClusterSection) -> NvlinkDomain:
    assert section.nvlink_domain is not None
    return section.nvlink_domain


# ------------------------------------------------------------------ fabric


def _gpus(outcome: NodeOutcome | None) -> list[dict[str, Any]]:
    results = outcome.results if outcome is not None else None
    gpus = ((results or {}).get("host") or {}).get("gpus") or []
    return [g for g in gpus if isinstance(g, dict)]


def _clique(gpu: dict[str, Any]) -> tuple[str, int] | None:
    fabric = gpu.get("fabric")
    if not isinstance(fabric, dict):
        return None
    return str(fabric.get("cluster_uuid")), int(fabric.get("clique_id", -1))


def domain_clique(run: ClusterRun) -> tuple[tuple[str, int] | None, int]:
    """The (cluster UUID, clique ID) most trays' GPUs are all in, and how many trays are; (None, 0) where no clique
    has more trays than any other (a split domain blames no tray over another)."""
    counts = Counter(cliques.pop() for outcome in run.nodes.values()
                     if len(cliques := {_clique(g) for g in _gpus(outcome)} - {None}) == 1)
    ranked = counts.most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None, 0
    return ranked[0]


def _gpu_problems(gpu: dict[str, Any], domain: tuple[str, int] | None) -> list[str]:
    name = f"GPU{gpu.get('index')}"
    fabric = gpu.get("fabric")
    if not isinstance(fabric, dict):
        return [f"{name}: NVML gives no fabric (not in a multi-node NVLink domain, or a driver without "
                f"nvmlDeviceGetGpuFabricInfoV)"]
    problems = []
    state = int(fabric.get("state", -1))
    if state != FABRIC_COMPLETED:
        problems.append(f"{name}: fabric state {FABRIC_STATES.get(state, state)}, not completed")
    elif int(fabric.get("status", -1)) != 0:
        problems.append(f"{name}: fabric registration failed (NVML status {fabric.get('status')})")
    problems += [f"{name}: {why}" for why in fabric_health_problems(int(fabric.get("health_mask", 0)))]
    if state == FABRIC_COMPLETED and domain is not None and _clique(gpu) != domain:
        problems.append(f"{name}: clique {fabric.get('clique_id')} of cluster {fabric.get('cluster_uuid')}, not the "
                        f"domain's clique {domain[1]} of cluster {domain[0]}")
    return problems


def judge_fabric(section: ClusterSection, subject: Subject, run: ClusterRun, contract: Contract) -> Check:
    v = FABRIC.verdict(subject)
    if run.error is not None:
        return v.not_measured(run.error)
    outcome = run.nodes.get(subject.local)
    if outcome is None or outcome.results is None:
        why = "not among the cluster's nodes" if outcome is None else (outcome.problem or "no results")
        return v.not_measured(f"{subject.local}: its own run returned no NVML reading: {why}")
    gpus = _gpus(outcome)
    if not gpus:
        return v.not_measured(f"{subject.local}: its NVML reading lists no GPU")
    domain, trays = domain_clique(run)
    details: dict[str, Any] = {"fabric": {f"GPU{g.get('index')}": g.get("fabric") for g in gpus},
                               "domain_clique": None if domain is None else {"cluster_uuid": domain[0],
                                                                             "clique_id": domain[1], "trays": trays}}
    problems = [p for g in gpus for p in _gpu_problems(g, domain)]
    if domain is None:
        problems.append("the trays are split between cliques with as many trays each: no domain to belong to")
    states = {FABRIC_STATES.get(int((g.get("fabric") or {}).get("state", -1)), "none") for g in gpus}
    measured = "/".join(sorted(states))
    if problems:
        return v.failed(measured, f"{subject.local}: {'; '.join(problems[:6])}", details)
    assert domain is not None
    return with_sources(v.passed(measured, f"{subject.local}: {len(gpus)} GPUs in the fabric, completed, healthy, clique "
                                           f"{domain[1]} of cluster {domain[0]} (as {trays} of {len(run.nodes)} trays)",
                                 details), "NVML (the tray's own run)",
                        unconfirmed="the tray's NVML's word; NCCL reads the same clique in the domain's all_reduce "
                                    "(cluster.nvlink_domain.min_busbw), where the contract asks for it")


# ------------------------------------------------------------------ IMEX


def _blame(views: ImexViews, tray: str) -> list[str]:
    """What every view says of `tray`: not listed, not READY, a connection from or to it that is not connected
    (where the other end is READY in that view: a down peer's connections are its own fault)."""
    addresses = set(views.views[tray].addresses)
    said = []
    for viewer, view in sorted(views.views.items()):
        if view.domain is None:
            continue
        mine = [n for n in view.domain.nodes if n.address in addresses]
        if not mine:
            said.append(f"{viewer}'s IMEX domain does not list it ({len(view.domain.nodes)} nodes)")
            continue
        node = mine[0]
        if node.status != "READY":
            said.append(f"{viewer} sees it {node.status}")
            continue
        status = {n.index: n.status for n in view.domain.nodes}
        cells = [c for c in view.domain.bad_cells(node.index)
                 if status.get(c[1] if c[0] == node.index else c[0]) == "READY"]
        if cells:
            shown = ", ".join(f"{a}->{b} {c}" for a, b, c in cells[:4])
            said.append(f"{viewer} sees its connections {shown}")
    return said


def channel_problem(view: ImexView) -> str | None:
    """Why the tray has no IMEX channel a process could import memory through, or None: the driver registered no
    `nvidia-caps-imex-channels` major (/proc/devices), or no `channel<N>` in the folder is a character device of it."""
    if view.channel_major is None:
        return f"{DEVICES} has no {DRIVER_NAME} line: the driver exposes no IMEX channel"
    if any(c.kind == "c" and c.major == view.channel_major for c in view.channels):
        return None
    if view.channel_listing is not None:
        found = f"`ls -ln {FOLDER}` said: {view.channel_listing}"
    elif view.channels:
        found = "it lists " + ", ".join(f"{c.name} ({'character device' if c.kind == 'c' else f'type {c.kind}'} "
                                        f"{c.major}:{c.minor})" for c in view.channels[:4])
    else:
        found = "it lists no channel"
    return (f"{FOLDER} has no channel device of major {view.channel_major} ({DEVICES}'s {DRIVER_NAME}): {found}")


def judge_imex(section: ClusterSection, subject: Subject, views: ImexViews, contract: Contract) -> Check:
    v = IMEX.verdict(subject)
    if views.error is not None:
        return v.not_measured(views.error)
    view = views.views.get(subject.local)
    if view is None:
        return v.not_measured(f"{subject.local} is not among the cluster's nodes")
    details: dict[str, Any] = {"evidence": list(view.evidence), "addresses": list(view.addresses)}
    if view.domain is None:
        return v.failed("no answer", f"{subject.local}: IMEX did not answer: {view.problem}", details)
    details["domain_state"] = view.domain.state
    details["nodes"] = [f"#{n.index} {n.address} {n.status}" for n in view.domain.nodes]
    if not view.addresses:
        return v.not_measured(f"{subject.local}: its IPv4 addresses could not be read (`ip -j -4 addr show`): which "
                              f"IMEX node it is is unknown", details)
    blamed = _blame(views, subject.local)
    if blamed:
        return v.failed("not ready", f"{subject.local}: {'; '.join(blamed[:4])}", details)
    details["channels"] = [f"{c.name} {c.kind} {c.major}:{c.minor}" for c in view.channels]
    details["channel_major"] = view.channel_major
    if view.channel_problem is not None:
        return v.not_measured(f"{subject.local}: IMEX READY per nvidia-imex-ctl, but its IMEX channel devices were not "
                              f"read: {view.channel_problem}", details)
    no_channel = channel_problem(view)
    if no_channel is not None:
        return v.failed("no channel", f"{subject.local}: IMEX READY per nvidia-imex-ctl, but {no_channel}", details)
    unlisted = [n for n, o in views.views.items() if o.addresses and not any(view.domain.by_address(a) for a in o.addresses)]
    state = view.domain.state
    if state != "UP" and not any(_blame(views, n) for n in views.views if n != subject.local):
        return v.failed(state, f"{subject.local}: IMEX domain state {state}, and no tray is to blame", details)
    seen_by = [n for n, o in views.views.items() if n != subject.local and o.domain is not None]
    check = v.passed("READY", f"{subject.local}: IMEX READY and connected to all {len(view.domain.nodes) - 1} other nodes "
                              f"in every tray's view (its own: domain {state})"
                              + (f"; its view lists no {', '.join(unlisted[:3])}" if unlisted else ""), details)
    return with_sources(check, "its own nvidia-imex-ctl",
                        f"{len(seen_by)} other trays' nvidia-imex-ctl" if seen_by else "",
                        f"the driver's IMEX channel devices ({FOLDER}, {DEVICES})",
                        unconfirmed="no other tray's IMEX view to compare with")


# ------------------------------------------------------------------ the whole domain's all_reduce


def _tray_hosts(run: ClusterRun) -> dict[str, str]:
    """Each tray's hostname as its own run read it (NCCL's lines name hosts, the scheduler names nodes)."""
    return {node: str(((o.results or {}).get("host") or {}).get("hostname") or node) for node, o in run.nodes.items()}


def _not_mnnvl(run: DomainAllReduce) -> list[str]:
    """The trays whose ranks did not all reach the others over NVLink, each with what NCCL said (or did not)."""
    hosts = _tray_hosts(run.cluster)
    found = []
    for tray in run.nodes:
        seen = run.mnnvl.get(hosts.get(tray, tray)) or run.mnnvl.get(tray)
        cliques = {c for g in _gpus(run.cluster.nodes.get(tray)) if (c := _clique(g)) is not None}
        if seen is None or not seen.comm_flags:
            found.append(f"{tray}: NCCL logged no communicator line with its MNNVL flag (MNNVL not proven)")
        elif 0 in seen.comm_flags or seen.net:
            via = f", channels via {', '.join(seen.net)}" if seen.net else ""
            found.append(f"{tray}: fell back to the network (MNNVL {min(seen.comm_flags)}{via})")
        elif cliques and {c for c, _state in seen.cliques} - {c for _u, c in cliques}:
            found.append(f"{tray}: NCCL read clique {sorted({c for c, _s in seen.cliques})}, NVML "
                         f"{sorted(c for _u, c in cliques)}")
    return found


def traffic_problems(run: DomainAllReduce, floor_bytes: int) -> list[str]:
    """The trays whose own counters deny that the all_reduce crossed NVLink: a GPU whose NVLink Data Tx grew by less
    than `floor_bytes` (one pass of the largest size: a ring or NVSwitch all_reduce sends at least its whole buffer
    over NVLink, and nccl-tests runs it 25 times and more), or NICs that sent as much as the tray's GPUs' floor
    together (the network carried it); counters not read fail too."""
    found = []
    for tray in run.nodes:
        traffic = run.traffic.get(tray)
        if traffic is None or traffic.problem is not None:
            found.append(f"{tray}: its NVLink and NIC counters were not read"
                         + (f" ({traffic.problem})" if traffic is not None else ""))
            continue
        if len(traffic.nvlink_after) < run.ranks_per_node:
            found.append(f"{tray}: nvidia-smi nvlink -gt d lists {len(traffic.nvlink_after)} GPUs with NVLink counters, "
                         f"{run.ranks_per_node} ranks ran there")
        for gpu, grew in traffic.nvlink_tx().items():
            if grew is None:
                found.append(f"{tray}: GPU{gpu}'s NVLink Data Tx counters (nvidia-smi nvlink -gt d) went down or "
                             f"changed links during the all_reduce: reset, not counted")
            elif grew < floor_bytes:
                found.append(f"{tray}: GPU{gpu}'s NVLink Data Tx (nvidia-smi nvlink -gt d) grew {grew} bytes during "
                             f"the all_reduce, under the {human_bytes(floor_bytes)} ({floor_bytes} bytes) one pass of "
                             f"the largest size sends")
        nics = traffic.nic_tx()
        sent = sum(n for n in nics.values() if n is not None)
        limit = floor_bytes * run.ranks_per_node
        if sent >= limit:
            top = max(nics, key=lambda p: nics[p] or 0)
            found.append(f"{tray}: its NICs sent {sent} bytes during the all_reduce (>= {human_bytes(limit)}; most "
                         f"{top} +{nics[top]} bytes): the network carried it")
    return found


def _model(cluster_run: ClusterRun) -> Model | None:
    names = {str(g.get("name")) for o in cluster_run.nodes.values() for g in _gpus(o)}
    found = {m.device_id: m for name in names for m in all_models() if answers_to(m, name)}
    return next(iter(found.values())) if len(found) == 1 else None


def domain_cap(cluster_run: ClusterRun, ranks: int) -> Cap:
    """Each GPU's NVLink one way (half the model's both-ways figure), x 2(n-1)/n for reduction in the NVSwitch trays."""
    model = _model(cluster_run)
    if model is None or model.nvlink_gbyte_s is None or ranks < 2:
        return Cap(None, "the trays' GPU model (or its NVLink figure) is not known")
    factor = 2 * (ranks - 1) / ranks
    return Cap(model.nvlink_gbyte_s / 2 * factor, f"each {model.name}'s NVLink {model.nvlink_gbyte_s / 2:g} GB/s one way, "
                                                  f"x {factor:.3g} for reduction in the NVSwitch", f"the model table ({TABLE_FILE})")


def judge_busbw(section: ClusterSection, subject: Subject, run: DomainAllReduce, contract: Contract) -> Check:
    keys = _keys(section)
    assert keys.min_busbw is not None
    v = BUSBW.verdict(subject)
    result = run.result
    details: dict[str, Any] = {"trays": list(run.nodes), "evidence": list(result.evidence) if result else [],
                               "mnnvl": {h: {"comm": list(s.comm_flags), "cliques": sorted({c for c, _ in s.cliques}),
                                             "net": list(s.net)} for h, s in run.mnnvl.items()}}
    if run.error is not None or result is None:
        return v.not_measured(run.error or "not run", details)
    if run.missing:
        return v.but(required=f">= {keys.min_busbw.gbyte_s:g}", threshold=keys.min_busbw.gbyte_s).failed(
            result.busbw, f"not the whole domain: {', '.join(run.missing)} not available", details)
    if result.problem is not None:
        return v.not_measured(result.problem, details)
    assert result.busbw is not None
    details["traffic"] = {t: {"problem": c.problem, "nvlink_tx_bytes": {f"GPU{g}": b for g, b in c.nvlink_tx().items()},
                              "nic_tx_bytes": c.nic_tx()} for t, c in run.traffic.items()}
    off = _not_mnnvl(run) + traffic_problems(run, keys.max_bytes.nbytes)
    if off:
        return v.but(required=f">= {keys.min_busbw.gbyte_s:g} over NVLink", threshold=keys.min_busbw.gbyte_s).failed(
            result.busbw, f"not over the NVLink domain: {'; '.join(off[:6])}" + (f" and {len(off) - 6} more trays"
                                                                                 if len(off) > 6 else ""), details)
    cap = domain_cap(run.cluster, len(run.nodes) * run.ranks_per_node)
    found, where = {**details, **cap.details}, f" at {result.size}"
    suffix = f" over {len(run.nodes)} trays x {run.ranks_per_node} GPUs, MNNVL on every tray"
    check = over_ceiling(v, result.busbw, keys.min_busbw.gbyte_s, cap.gbyte_s * (1 + MARGIN) if cap.gbyte_s else None,
                         f"physically impossible: {cap.path}", "all_reduce busbw", found, where, suffix) \
        or v.at_least(result.busbw, keys.min_busbw.gbyte_s, "all_reduce busbw", found, where=where, suffix=suffix)
    return with_sources(check,
                        "all_reduce_perf's table", "NCCL's MNNVL lines", "NVML's cliques (the trays' own runs)",
                        "each tray's NVLink and NIC counters (nvidia-smi nvlink -gt d, sysfs)",
                        "the model table (the cap)" if cap.gbyte_s else "")


# ------------------------------------------------------------------ measurements and clauses


def gpuaccept_nvlink_imex(gpuaccept_state: Session, gpuaccept_contract: Contract,
                          gpuaccept_cluster: ClusterRun) -> ImexViews:
    """cluster.nvlink_domain.imex: every tray's view of its IMEX domain."""
    section = SECTION.of(gpuaccept_contract)
    return run_imex(gpuaccept_state, engine_for(section), gpuaccept_cluster)


def gpuaccept_nvlink_allreduce(gpuaccept_state: Session, gpuaccept_contract: Contract,
                               gpuaccept_cluster: ClusterRun) -> DomainAllReduce:
    """cluster.nvlink_domain.min_busbw: one all_reduce over every GPU of every tray."""
    section = SECTION.of(gpuaccept_contract)
    return run_domain_allreduce(gpuaccept_state, engine_for(section), _keys(section), gpuaccept_cluster)


FABRIC = Clause("cluster.nvlink_domain.fabric", SECTION, "test_nvlink_domain_fabric", cluster.PerNode(),
                cluster.gpuaccept_cluster, judge_fabric,
                "every GPU of the tray in the NVLink fabric (NVML: state completed, status success, no health flag) and "
                "in the domain's cluster UUID and clique (the one most trays are in)", None,
                lambda s: s.nvlink_domain is not None and s.nvlink_domain.fabric)
IMEX = Clause("cluster.nvlink_domain.imex", SECTION, "test_nvlink_domain_imex", cluster.PerNode(), gpuaccept_nvlink_imex,
              judge_imex, "`nvidia-imex-ctl -N` answers on the tray, and every tray's view of the IMEX domain lists it "
                          "READY and connected to every other node; the driver exposes an IMEX channel device on it",
              None,
              lambda s: s.nvlink_domain is not None and s.nvlink_domain.imex)
BUSBW = Clause("cluster.nvlink_domain.min_busbw", SECTION, "test_nvlink_domain_allreduce", HostWide("domain", "`domain`"),
               gpuaccept_nvlink_allreduce, judge_busbw,
               "one all_reduce (nccl-tests, MPI, one rank per GPU, NCCL_DEBUG=INFO) over every GPU of every tray, counted "
               "only where NCCL says each tray's ranks used MNNVL (no fall-back to the network) and each tray's NVLink "
               "counters moved while its NICs' did not", "GB/s",
               lambda s: s.nvlink_domain is not None and s.nvlink_domain.min_busbw is not None)
CLAUSES = (FABRIC, IMEX, BUSBW)
MEASUREMENTS = (gpuaccept_nvlink_imex, gpuaccept_nvlink_allreduce)
