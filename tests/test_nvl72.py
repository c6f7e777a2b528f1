"""An NVL72 rack (18 trays of 4 GB200s in one NVLink domain) as a cluster contract: `cluster.nvlink_domain`.

The parsers read real outputs (tests/data/nvl72, SOURCES.md): `nvidia-imex-ctl -N` of an 18-node GB200 domain and
of an older 2-node one, NCCL's INFO lines of a GB200 tray (`MNNVL busId ... cliqueId 0x7ffe state 3 healthMask
0xaa`) and of an H100 job that did not use MNNVL (`... MNNVL 0`), and a 72-rank GB200 NVL72 nccl-tests table
(834.57 GB/s busbw at 8 GiB).

The rack: a real Slurm cluster in network namespaces (tests/netns_cluster.py), h0 the login node and h1..h18 the
trays, each tray's own per-node run reading its own NVML recording with its fabric info. What the trays' tools
print is assembled from those real outputs by this file (marked constructed below): each tray's IMEX view is the
real 18-node output with the trays' addresses, and the all_reduce is the real 72-rank table behind rank lines and
NCCL INFO lines in the real lines' formats, one per rank on its tray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, pci_tree
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.clauses import registry
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.imex import parse_domain
from pytest_gpuaccept.probes.nccl_tests import mnnvl_by_host, parse_all_reduce
from pytest_gpuaccept.probes.nvml import fabric_health_problems

NVL72 = DATA / "nvl72"
IMEX_18 = NVL72 / "imex_ctl_N_18node_all_connected_aws_pcluster_doc.txt"
IMEX_2 = NVL72 / "imex_ctl_N_2node_gh200_imex570_no_version_fiberrepro.txt"
NCCL_TABLE = NVL72 / "nccltests_gb200_nvl72_72rank_table_coreweave_pr43.txt"
MNNVL_LINES = NVL72 / "nccl_info_mnnvl_fabric_gb200_1tray_fragment_nccl_issue1769.txt"
MNNVL_OFF = NVL72 / "nccl_info_mnnvl0_h100_3node_24rank_fragment_nccl_issue1453.txt"
FABRIC_SMI = NVL72 / "nvidia_smi_q_fabric_unhealthy_grepC3_dradriver_issue626.txt"
FABRIC_REFUSED = NVL72 / "nvidia_smi_q_fabric_insufficient_resources_azhpc_pr506.txt"
NVML_H = NVL72 / "nvml_h_fabric_defs_go-nvml_2f9e261.h.txt"
TRAYS = 18
UUID = "dc6e40c4-d722-4357-9ba6-5291dd461278"  # the real ClusterUUID of FABRIC_SMI
CLIQUE = 0x7FFE  # the real cliqueId of MNNVL_LINES


# ------------------------------------------------------------------ the parsers, on real outputs


def test_the_imex_view_of_a_real_18_node_gb200_domain_and_of_an_older_2_node_one():
    domain = parse_domain(IMEX_18.read_text())
    assert len(domain.nodes) == 18 and domain.state == "UP"
    assert domain.nodes[0].address == "172.31.48.81" and domain.nodes[17].version == "570.172"
    assert {n.status for n in domain.nodes} == {"READY"} and set(domain.grid.values()) == {"C"}
    assert domain.bad_cells(5) == []
    older = parse_domain(IMEX_2.read_text())
    assert [(n.address, n.version) for n in older.nodes] == [("10.136.206.47", None), ("10.136.206.48", None)]
    assert len(older.grid) == 4 and older.state == "UP"


def test_an_imex_view_cut_short_is_an_error_not_a_domain():
    text = IMEX_18.read_text()
    with pytest.raises(ParseError, match="Domain State"):
        parse_domain(text.split("Domain State")[0])
    with pytest.raises(ParseError, match="grid"):
        parse_domain("\n".join(line for line in text.splitlines() if not line.strip().startswith("17 ")))
    with pytest.raises(ParseError, match="Node"):
        parse_domain("nvidia-imex-ctl: could not connect to the IMEX daemon\n")


def test_nccls_mnnvl_lines_real_gb200_fabric_and_a_real_job_without_mnnvl():
    tray = mnnvl_by_host(MNNVL_LINES.read_text())["gb200a-04"]
    assert tray.cliques == ((CLIQUE, 3),) * 4 and tray.comm_flags == ()
    off = mnnvl_by_host(MNNVL_OFF.read_text())["h100clust-worker-1"]
    assert off.comm_flags == (0,) and off.nodes == (3,)
    table = parse_all_reduce(NCCL_TABLE.read_text())
    assert table.largest is not None and table.largest.size_bytes == 8 * 2**30
    assert table.largest.oop_busbw_gbyte_s == 834.57


def test_the_fabric_health_mask_real_values():
    # 0xaa, as real GB200 trays report it (NCCL's line): every 2-bit field "false", nothing unhealthy.
    assert fabric_health_problems(0xAA) == []
    assert fabric_health_problems(0) == []  # every field "not supported" (an H200: DeepEP#143)
    # The bit layout as nvml.h gives it (tests/data/nvl72, go-nvml's copy).
    header = NVML_H.read_text()
    assert "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW" in header and "NVML_GPU_FABRIC_STATE_COMPLETED" in header
    assert fabric_health_problems(0xA9) == ["bandwidth degraded"]
    assert fabric_health_problems(0xA6 | (5 << 8)) == ["route recovery in progress",
                                                        "incorrect configuration: too few NVLinks"]
    # nvidia-smi's view of the same fields (real): a tray completed with a ClusterUUID, and one refused for
    # insufficient resources with an all-zero UUID (what gpus[].fabric then records: status not 0).
    assert f"ClusterUUID                       : {UUID}" in FABRIC_SMI.read_text()
    assert "Insufficient Resources" in FABRIC_REFUSED.read_text()


# ------------------------------------------------------------------ the contract


@pytest.mark.parametrize("domain, problem", [
    ("{fabric: false, imex: false}", "cluster.nvlink_domain: asks for nothing"),
    ('{min_busbw: "800 GB/s", min_bytes: "16 GiB"}', "cluster.nvlink_domain.min_bytes: expected at most max_bytes"),
    ("{fabric: yes-ish}", "cluster.nvlink_domain.fabric (line 10)"),
    ("{imex: true, nvswitch: true}", "cluster.nvlink_domain.nvswitch (line 10): unknown key"),
])
def test_a_mistake_in_the_nvlink_domain_keys_is_named_before_anything_runs(domain, problem):
    with pytest.raises(ContractError) as caught:
        parse_contract(CONTRACT.replace('{fabric: true, imex: true, min_busbw: "800 GB/s"}', domain))
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def test_the_nvlink_domain_through_kubernetes_is_refused_not_skipped():
    text = CONTRACT.replace("engine: slurm", "engine: kubernetes").replace('nodes: ["h[1-18]"]',
                                                                          'nodes: {selector: "rack=r1"}')
    with pytest.raises(ContractError) as caught:
        parse_contract(text.replace("  node_timeout: 10 min\n", "  node_timeout: 10 min\n  kubernetes: {image: i}\n"))
    assert any("cluster.nvlink_domain: not measured through engine: kubernetes" in line
               for line in caught.value.problems), caught.value.problems


def test_the_defaults_ask_for_fabric_and_imex_and_the_busbw_only_when_given():
    contract = parse_contract(CONTRACT.replace('{fabric: true, imex: true, min_busbw: "800 GB/s"}', "{}"))
    asked = {c.key for c in registry.CLAUSES if c.in_contract(contract)}
    assert {"cluster.nvlink_domain.fabric", "cluster.nvlink_domain.imex"} <= asked
    assert "cluster.nvlink_domain.min_busbw" not in asked


# ------------------------------------------------------------------ the rack, in namespaces

PER_TRAY = """gpuaccept: 1
vendor: "Trial NVL72 rack"
gpus:
  count: 4
  model: "GB200"
"""
CONTRACT = PER_TRAY + f"""cluster:
  engine: slurm
  nodes: ["h[1-{TRAYS}]"]
  node_timeout: 10 min
  nvlink_domain: {{fabric: true, imex: true, min_busbw: "800 GB/s"}}
"""


def tray_recording(tray: str, fabric: dict | None = None) -> dict:
    """One tray's NVML recording (constructed): the 4-GPU H100 recording made a GB200 tray (NVML's name, device ID
    0x2941, 186 GB), UUIDs of its own, and each GPU in the fabric: completed, success, the real cluster UUID and
    clique, health 0xaa; `fabric` changes what this tray's GPUs read."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    reading["hostname"] = tray
    for gpu in reading["gpus"]:
        gpu.update(name="NVIDIA GB200", pci_device_id="0x2941", memory_total_bytes=189_471 * 2**20,
                   uuid=gpu["uuid"].replace("GPU-h100-", f"GPU-{tray}-"),
                   fabric={"state": 3, "status": 0, "cluster_uuid": UUID, "clique_id": CLIQUE, "health_mask": 0xAA,
                           **(fabric or {})})
        gpu.pop("nvlinks", None)
    return reading


def imex_view(cluster: Cluster, down: str | None) -> str:
    """A tray's `nvidia-imex-ctl -N` (constructed from the real 18-node output): node #k is h<k+1> at its address;
    with `down`, that node is UNAVAILABLE and its connections disconnected (D) in this view."""
    text = IMEX_18.read_text()
    real = [n.address for n in parse_domain(text).nodes]
    lines = []
    for line in text.splitlines():
        for k, address in enumerate(real):
            if f" {address} " in line:
                line = line.replace(f" {address} ", f" {cluster.address(k + 1):<15} ", 1)
                if down == f"h{k + 1}":
                    line = line.replace("READY      ", "UNAVAILABLE")
        tokens = line.split()
        if down is not None and tokens and tokens[0].isdigit() and len(tokens) == TRAYS + 1:
            bad = int(down[1:]) - 1
            cells = ["D" if (int(tokens[0]) == bad or i == bad) and int(tokens[0]) != i else c
                     for i, c in enumerate(tokens[1:])]
            line = f"      {tokens[0]:<9} " + "   ".join(cells)
        lines.append(line)
    return "\n".join(lines) + "\n"


def nccl_log(fallback: str | None) -> str:
    """The 72-rank job as srun would show it (constructed): for each tray, its four ranks' NCCL INFO lines in the
    real lines' formats (MNNVL busId ... from NVIDIA/nccl#1769, `comm ... MNNVL n` from #1453), the real table's
    rank line format for every rank, then the real GB200 NVL72 table. `fallback`: that tray's communicators say
    MNNVL 0 and its channels go via NET/IB."""
    out = ["# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
           "agg iters: 1 validation: 1 graph: 0", "#"]
    info = []
    for t in range(1, TRAYS + 1):
        host = f"h{t}"
        for local in range(4):
            rank = 4 * (t - 1) + local
            prefix = f"{host}:{2101742 + local}:{2101799 + local} [{local}] NCCL INFO"
            info.append(f"{prefix} MNNVL busId 0x{0x801000 + 0x100000 * local:x} fabric UUID 3143b15bc2cd192b."
                        f"28cc9b5473fb5b93 cliqueId 0x{CLIQUE:x} state 3 healthMask 0xaa")
            flag = 0 if host == fallback else 1
            info.append(f"{prefix} comm 0x5639e9f0e8c0 rank {rank} nRanks 72 nNodes 18 localRanks 4 localRank {local} "
                        f"MNNVL {flag}")
            if host == fallback:
                info.append(f"{prefix} Channel 00/0 : {rank}[{local}] -> {(rank + 4) % 72}[{local}] [send] via "
                            f"NET/IB/{local}")
            out.append(f"#  Rank {rank:2d} Group  0 Pid  {14840 + rank} on {host} device  {local} [0x01] NVIDIA "
                       f"Graphics Device")
    table = NCCL_TABLE.read_text().splitlines()[1:]  # the real table, behind its (real) last rank line
    return "\n".join(info + out + table) + "\n"


TOOLS = r'''#!/bin/sh
# nvidia-imex-ctl -N on a tray (its own view), or its daemon's refusal where the tray's IMEX is down.
host=$(hostname)
if [ -e "@DIR@/imex-down/$host" ]; then
  echo "Connection to the IMEX daemon failed: connection refused" >&2   # constructed: no real refusal was found
  exit 1
fi
exec cat "@DIR@/imex/$host.txt"
'''
ALL_REDUCE = r'''#!/bin/sh
# one rank of the 72: rank 0 prints the job's output, the others are the GPUs these trays do not have
[ "${SLURM_PROCID:-0}" = 0 ] || exit 0
exec cat "@DIR@/nccl.txt"
'''


def stage(cluster: Cluster, folder: Path, *, fabric: dict[str, dict] | None = None, imex_down: str | None = None,
          fallback: str | None = None) -> tuple[Path, Path, Path]:
    """The trays' recordings, sysfs, IMEX views and all_reduce output for one run: (tools, recording, sysfs)."""
    tools, nvml, sysfs = folder / "bin", folder / "nvml", folder / "sys"
    for path in (tools, nvml, folder / "imex", folder / "imex-down"):
        path.mkdir(parents=True, exist_ok=True)
    base = tray_recording("h0")
    (nvml / "gb200.json").write_text(json.dumps(base))
    for t in range(1, TRAYS + 1):
        name = f"h{t}"
        (nvml / f"gb200.{name}.json").write_text(json.dumps(tray_recording(name, (fabric or {}).get(name))))
        (folder / "imex" / f"{name}.txt").write_text(imex_view(cluster, imex_down))
    if imex_down:
        (folder / "imex-down" / imex_down).touch()
    (folder / "nccl.txt").write_text(nccl_log(fallback))
    for name, body in (("nvidia-imex-ctl", TOOLS), ("all_reduce_perf", ALL_REDUCE)):
        (tools / name).write_text(body.replace("@DIR@", str(folder)))
        (tools / name).chmod(0o755)
    staged = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    for gpu in staged["gpus"]:
        gpu["pci_device_id"] = "0x2941"
    (folder / "sysfs-source.json").write_text(json.dumps(staged))
    pci_tree(sysfs, recording=folder / "sysfs-source.json")
    return tools, nvml / "gb200.json", sysfs


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the NVL72 tests run a real Slurm cluster in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    net = 100 + (os.getpid() + 37) % 100
    cluster = Cluster(tmp_path_factory.mktemp("nvl72"), TRAYS + 1, f"gn{os.getpid() % 10000}", net, gpus=4)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


def login_run(cluster: Cluster, folder: Path, **staged) -> tuple[int, dict, str]:
    tools, recording, sysfs = stage(cluster, folder, **staged)
    (folder / "rack.yaml").write_text(CONTRACT)
    argv = cluster.inside(0, [sys.executable, "-m", "pytest", "--contract=rack.yaml", "-p", "no:cacheprovider", "-q",
                              f"--gpuaccept-nvml={recording}", f"--gpuaccept-sysfs={sysfs}"])
    env = {**cluster.env(), "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env, timeout=600)
    assert (folder / "gpuaccept-results.json").is_file(), (done.stdout + done.stderr)[-4000:]
    results = json.loads((folder / "gpuaccept-results.json").read_text())
    return done.returncode, results, done.stdout + done.stderr


def domain_checks(results: dict) -> dict[str, dict[str, dict]]:
    found: dict[str, dict[str, dict]] = {}
    for check in results["checks"]:
        if check["clause"].startswith("cluster.nvlink_domain."):
            found.setdefault(check["clause"].rsplit(".", 1)[1], {})[check["subject"]] = check
    return found


def failing(checks: dict[str, dict]) -> dict[str, str]:
    return {subject: c["message"] for subject, c in checks.items() if c["outcome"] != "passed"}


def test_an_honest_18_tray_rack_is_accepted(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path)
    assert code == 0, out[-4000:]
    assert results["verdict"] == "accepted"
    checks = domain_checks(results)
    assert set(checks["fabric"]) == set(checks["imex"]) == {f"h{t}" for t in range(1, TRAYS + 1)}
    assert all(c["outcome"] == "passed" for kind in checks.values() for c in kind.values())
    busbw = checks["min_busbw"]["domain"]
    assert busbw["measured"] == 834.57 and busbw["unit"] == "GB/s" and busbw["details"]["physical_cap"] > 834.57
    assert "MNNVL on every tray" in busbw["message"]
    assert {"all_reduce_perf's table", "NCCL's MNNVL lines"} <= set(busbw["details"]["sources"])
    # a tray's IMEX state is confirmed by the 17 other trays' views; its fabric is its NVML's word, said so
    assert checks["imex"]["h2"]["details"]["sources"] == ["its own nvidia-imex-ctl", "17 other trays' nvidia-imex-ctl"]
    assert "NVML's word" in checks["fabric"]["h2"]["details"]["unconfirmed"]
    assert "clique 32766" in checks["fabric"]["h7"]["message"]
    # every tray's fabric reading is in the results, as its own run read it
    assert results["hosts"] and len(results["hosts"]) == TRAYS


def test_a_tray_whose_fabric_registration_did_not_complete_is_rejected_by_name(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path, fabric={"h7": {"state": 2}})
    assert code != 0 and results["verdict"] == "rejected"
    bad = failing(domain_checks(results)["fabric"])
    assert list(bad) == ["h7"] and "fabric state in progress, not completed" in bad["h7"]


def test_a_tray_in_another_clique_is_rejected_by_name(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path, fabric={"h11": {"clique_id": 0x7FFD}})
    assert code != 0 and results["verdict"] == "rejected"
    bad = failing(domain_checks(results)["fabric"])
    assert list(bad) == ["h11"] and "clique 32765" in bad["h11"] and "domain's clique 32766" in bad["h11"]


def test_imex_down_on_one_tray_is_rejected_naming_that_tray(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path, imex_down="h3")
    assert code != 0 and results["verdict"] == "rejected"
    bad = failing(domain_checks(results)["imex"])
    assert list(bad) == ["h3"], bad
    assert "IMEX did not answer" in bad["h3"] and "connection refused" in bad["h3"]


def test_an_all_reduce_that_fell_back_to_the_network_is_rejected_naming_the_tray(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path, fallback="h5")
    assert code != 0 and results["verdict"] == "rejected"
    busbw = domain_checks(results)["min_busbw"]["domain"]
    assert busbw["outcome"] == "failed" and busbw["measured"] == 834.57
    assert "h5: fell back to the network (MNNVL 0, channels via NET/IB)" in busbw["message"]
    assert "h4" not in busbw["message"] and "h6" not in busbw["message"]
