"""`cluster.utilisation`: the builtin training load as one data-parallel job over every node, judged per GPU of every
node from each node's own NVML samples. The judgement in process from per-node recordings (a node whose GPUs idle
fails, named); the shipped load for real across two nodes (PyTorch's CPU build, gloo, the real rendezvous), each
node a process of its own reading its own recording."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from builders import UTILISATION_FIELDS, series
from conftest import DATA
from judging import Output, Recordings, session
from kubectl_standin import StandIn, gpu_node
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.clauses import cluster, cluster_utilisation
from pytest_gpuaccept.clauses.cluster_utilisation import SAMPLES_LINE, ClusterLoad, judge_gpu, run_training
from pytest_gpuaccept.cluster.base import NodeState
from pytest_gpuaccept.cluster.engine import Mpirun
from pytest_gpuaccept.cluster.kubernetes import Kubernetes
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.measurements import ClusterRun, NodeOutcome
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.state import State
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Outcome, Verdict

CONTRACT = """\
gpuaccept: 1
vendor: V
cluster:
  engine: mpirun
  nodes: ["h[1-3]"]
  utilisation: {min_percent: 80, duration: "12 s", warmup: "1 s"}
gpus: {count: 4}
"""


def node_recordings(folder: Path, nodes: list[str], gpus: int, idle: dict[str, float] | None = None) -> Path:
    """The login node's recording and beside it each node's own (`h100.<node>.json`: its own UUIDs), with NVML samples
    (builders.series: idle until 0.6 s, then 99 % busy); a node in `idle` sits at that utilisation after 0.6 s, at an
    idle GPU's power and clock. Constructed from the real 4-GPU H100 recording."""
    base = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("", *nodes):
        own = json.loads(json.dumps(base))
        for gpu in own["gpus"]:
            gpu["uuid"] = gpu["uuid"].replace("GPU-h100-", f"GPU-{name or 'login'}-")
        low = (idle or {}).get(name)
        samples = series() if low is None else series(util=lambda t, low=low: 0 if t < 0.6 else low)
        own["utilisation"] = {"interval_s": 0.2, "fields": UTILISATION_FIELDS,
                              "gpus": [{"index": i, "samples": samples, "health": {}} for i in range(gpus)]}
        (folder / (f"h100.{name}.json" if name else "h100.json")).write_text(json.dumps(own))
    return folder / "h100.json"


def cluster_run(nodes: list[str], address: str | None = None) -> ClusterRun:
    """Every node schedulable with its own run back (its results as the login node keeps them)."""
    facts = (("internal_ip", address),) if address else ()
    return ClusterRun("mpirun", {n: NodeOutcome(NodeState(n, True, True, "listed", None, facts=facts), f"nodes/{n}",
                                                {"verdict": "accepted", "complete": True, "checks": []}, None)
                                 for n in nodes}, ())


def trained(recording: Path, node: str, first_rank: int, gpus: int) -> str:
    """What workloads/train.py prints on a node of a simulated run: its ranks' lines, then the node's recorded samples."""
    ranks = "".join(f"rank {r}: joined the job of 12 ranks on 3 nodes\nrank {r}: done, 40 steps in 12.1 s, weights sum "
                    f"1.234567e+03\n" for r in range(first_rank, first_rank + gpus))
    samples = json.loads(recording.with_name(f"h100.{node}.json").read_text())["utilisation"]
    return ranks + SAMPLES_LINE + json.dumps(samples) + "\n"


def judged_load(tmp_path: Path, idle: dict[str, float] | None = None, outputs: dict[str, Output] | None = None):
    contract = parse_contract(CONTRACT)
    recording = node_recordings(tmp_path / "nvml", ["h1", "h2", "h3"], 4, idle)
    outputs = outputs or {f"mpirun {n}:1": Output(trained(recording, n, 4 * k, 4), seconds=12.0)
                          for k, n in enumerate(["h1", "h2", "h3"])}
    recordings = Recordings(outputs)
    state = session(contract, tmp_path, recordings, recording)
    section = cluster.SECTION.of(contract)
    load = run_training(state, Mpirun(), section, cluster_run(["h1", "h2", "h3"]))
    checks = {f"{n}:GPU{i}": judge_gpu(section, Subject.whole(f"{n}:GPU{i}"), load, contract)
              for n in ("h1", "h2", "h3") for i in range(4)}
    return load, checks, recordings


def test_every_gpu_of_every_node_busy_in_one_job_is_accepted(tmp_path):
    load, checks, recordings = judged_load(tmp_path)
    assert {c.outcome for c in checks.values()} == {Outcome.PASSED} and len(checks) == 12
    assert checks["h2:GPU3"].message == ("h2 GPU3 lowest 99 % >= 80 %; mean 99.0 % over 55 samples after the 1 s warmup, "
                                         "in one job over 3 nodes x 4 GPUs")
    # One job: every node's command names its place in it and the first node's name to meet at, and its own recording.
    for rank, (node, argv) in enumerate(zip(["h1", "h2", "h3"], recordings.asked)):
        job = argv[argv.index("--") + 1:]
        assert job[1:3] == ["-m", "pytest_gpuaccept.workloads.train"] and argv[argv.index("--host") + 1] == f"{node}:1"
        assert job[job.index("--nnodes") + 1:job.index("--nnodes") + 8] == [
            "3", "--node-rank", str(rank), "--master-addr", "h1", "--master-port", "29500"]
        assert job[job.index("--nvml") + 1] == str(tmp_path / "nvml" / f"h100.{node}.json")
    assert load.waited == {}


def test_a_node_whose_gpus_idle_fails_and_is_named_beside_the_busy_ones(tmp_path):
    load, checks, _ = judged_load(tmp_path, idle={"h2": 35.0})
    failed = {s for s, c in checks.items() if c.outcome is Outcome.FAILED}
    assert failed == {f"h2:GPU{i}" for i in range(4)}, {s: c.message for s, c in checks.items()}
    assert checks["h2:GPU0"].message == ("h2 GPU0 dropped to 35 % at t=1.0 s (below 80 %); mean 35.0 % over 55 samples "
                                         "after the 1 s warmup, in one job over 3 nodes x 4 GPUs; the nodes whose GPUs "
                                         "waited: h2 (35 %)")
    assert checks["h2:GPU0"].measured == 35.0 and load.waited == {"h2": 35.0}
    assert checks["h1:GPU0"].outcome is Outcome.PASSED


def test_the_links_judged_slow_earlier_in_the_run_are_named_beside_the_nodes_that_waited(tmp_path):
    contract = parse_contract(CONTRACT)
    recording = node_recordings(tmp_path / "nvml", ["h1", "h2", "h3"], 4, {"h2": 35.0})
    outputs = {f"mpirun {n}:1": Output(trained(recording, n, 4 * k, 4), seconds=12.0)
               for k, n in enumerate(["h1", "h2", "h3"])}
    state = session(contract, tmp_path, Recordings(outputs), recording)
    slow = Verdict(cluster.LINKS.key, "h2:eth0->h3:eth0").failed(12.5, "iperf3 12.5 Gb/s < 90 Gb/s")
    state.checks[(slow.clause, slow.subject)] = slow
    state.checks[(cluster.LINKS.key, "h1:eth0->h3:eth0")] = Verdict(cluster.LINKS.key, "h1:eth0->h3:eth0").passed(
        95.1, "iperf3 95.1 Gb/s >= 90 Gb/s")
    load = cluster_utilisation.gpuaccept_cluster_utilisation(state, contract, cluster_run(["h1", "h2", "h3"]))
    check = judge_gpu(cluster.SECTION.of(contract), Subject.whole("h2:GPU1"), load, contract)
    assert check.message.endswith("; the nodes whose GPUs waited: h2 (35 %); the links that were slow: h2:eth0->h3:eth0")


def test_a_node_whose_training_crashed_fails_and_one_that_printed_no_samples_is_not_measured(tmp_path):
    recording = node_recordings(tmp_path / "nvml", ["h1", "h2", "h3"], 4)
    outputs = {"mpirun h1:1": Output(trained(recording, "h1", 0, 4), seconds=12.0),
               "mpirun h2:1": Output("rank 4: joined the job of 12 ranks on 3 nodes\n", returncode=1, seconds=3.0,
                                     stderr="torch.distributed.DistBackendError: NCCL error: remote process exited\n"),
               "mpirun h3:1": Output("".join(f"rank {r}: done, 40 steps in 12.1 s, weights sum 1.2e+03\n"
                                             for r in range(8, 12)), seconds=12.0)}
    _load, checks, _ = judged_load(tmp_path / "run", outputs=outputs)
    assert checks["h2:GPU1"].outcome is Outcome.FAILED
    assert checks["h2:GPU1"].message.startswith("the training on h2 failed: ")
    assert checks["h2:GPU1"].message.endswith("its last output: torch.distributed.DistBackendError: NCCL error: remote "
                                              "process exited")
    assert checks["h3:GPU0"].outcome is Outcome.NOT_MEASURED
    assert checks["h3:GPU0"].message.endswith("h3 printed no NVML samples (`gpuaccept-nvml-samples`)")
    assert checks["h1:GPU0"].outcome is Outcome.PASSED


def test_a_node_not_available_fails_its_gpus_and_one_node_is_no_job_across_nodes(tmp_path):
    contract = parse_contract(CONTRACT)
    section = cluster.SECTION.of(contract)
    run = cluster_run(["h1", "h2", "h3"])
    run.nodes["h3"] = NodeOutcome(NodeState("h3", True, False, "DOWN", None), "nodes/h3", None, None)
    state = session(contract, tmp_path, Recordings({}), node_recordings(tmp_path / "nvml", ["h1", "h2", "h3"], 4))
    load = run_training(state, Mpirun(), section, cluster_run(["h1"]))
    assert load.error == "fewer than two nodes available (1): no job across nodes"
    assert judge_gpu(section, Subject.whole("h1:GPU0"), load, contract).outcome is Outcome.NOT_MEASURED
    missing = ClusterLoad({}, {"h3": "DOWN"})
    check = judge_gpu(section, Subject.whole("h3:GPU0"), missing, contract)
    assert (check.outcome, check.message) == (Outcome.FAILED, "h3 did not take part in the job: DOWN")


@pytest.mark.parametrize("change, problem", [
    (('warmup: "1 s"', 'warmup: "12 s"'), "cluster.utilisation.warmup: expected less than duration (12 s), got 12 s"),
    (("gpus: {count: 4}\n", ""), "cluster.utilisation: needs gpus.count: the GPUs of each node the job trains on, "
                                 "each judged"),
    (("min_percent: 80,", "min_percent: 80, workload: [train-job],"), "cluster.utilisation.workload (line 6): "
                                                                       "expected one of 'builtin'"),
    (('duration: "12 s"', 'duration: "2 h"'), "cluster.utilisation.duration (line 6): expected at most 30 min, got 2 h: "
                                             "each node's NVML samples come back through the engine's output"),
])
def test_a_contract_mistake_in_cluster_utilisation_is_named(change, problem):
    with pytest.raises(ContractError) as caught:
        parse_contract(CONTRACT.replace(*change))
    assert any(problem in line for line in caught.value.problems), caught.value.problems


# ------------------------------------------------------------------ the shipped load, for real


class LocalNodes:
    """Each node a process of this machine (one engine line a node, as srun or a pod runs it); the shipped load sized
    for a CPU (argparse takes the last of a flag given twice): PyTorch's CPU build trains it over gloo."""

    name = "local"
    own_tmpdir = False

    def on_node(self, node: str, argv: list[str]) -> list[str]:
        return [*argv, "--device", "cpu", "--width", "32", "--layers", "1", "--seq", "8", "--batch", "2"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="PyTorch is not installed here: test.sh installs its CPU build only where a wheel for this "
                           "interpreter is on disk (Python 3.11 in CI)")
def test_the_shipped_load_trains_one_job_across_two_nodes_for_real_and_each_node_samples_its_own_gpus(tmp_path):
    contract = parse_contract(CONTRACT.replace('["h[1-3]"]', '["h[1-2]"]').replace("count: 4", "count: 1").replace(
        "12 s", "2 s"))
    recording = node_recordings(tmp_path / "nvml", ["h1", "h2"], 1, idle={"h2": 30.0})
    runner = ToolRunner(tmp_path / "evidence", shared=False)
    state = State(contract, runner, tmp_path / "report.html", tmp_path / "results.json", tmp_path / "evidence",
                  recording, is_controller=True, mode="simulated")
    section = cluster.SECTION.of(contract)
    load = run_training(state, LocalNodes(), section, cluster_run(["h1", "h2"], "127.0.0.1"))  # type: ignore[arg-type]
    assert load.error is None and set(load.nodes) == {"h1", "h2"}
    for node, part in load.nodes.items():
        assert part.problem is None and part.run is not None, (node, part.problem)
    # One job: both ranks joined the same world of two, and ended on the same weights (their gradients all-reduced).
    said = [line for part in load.nodes.values() for line in part.run.stdout.splitlines() if ": done, " in line]
    assert sorted(line.split(":")[0] for line in said) == ["rank 0", "rank 1"]
    assert len({line.rsplit("weights sum ", 1)[1] for line in said}) == 1, said
    assert all("joined the job of 2 ranks on 2 nodes" in part.run.stdout for part in load.nodes.values())
    # Each node's samples are its own recording's: h2's GPU waited.
    checks = {n: judge_gpu(section, Subject.whole(f"{n}:GPU0"), load, contract) for n in ("h1", "h2")}
    assert checks["h1"].outcome is Outcome.PASSED, checks["h1"].message
    assert checks["h2"].outcome is Outcome.FAILED and checks["h2"].message.endswith("the nodes whose GPUs waited: h2 (30 %)")
    assert cluster_utilisation.TRAIN in load.nodes["h1"].run.command and sys.executable in load.nodes["h1"].run.command


def cpu_image(folder: Path) -> Path:
    """The stand-in image's bin folder: its python3 is this interpreter, which runs the shipped load sized for a CPU
    (PyTorch's CPU build, gloo on the pod's eth0: the node's own network)."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python3"
    shim.write_text("#!/bin/sh\n"
                    'if [ "$1" = -m ] && [ "$2" = pytest_gpuaccept.workloads.train ]; then\n'
                    f'  GLOO_SOCKET_IFNAME=eth0 exec {sys.executable} "$@" {" ".join(CPU_SIZE)}\nfi\n'
                    f'exec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    return folder


CPU_SIZE = ("--device", "cpu", "--width", "32", "--layers", "1", "--seq", "8", "--batch", "2")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="PyTorch is not installed here: test.sh installs its CPU build only where a wheel for this "
                           "interpreter is on disk (Python 3.11 in CI)")
def test_the_shipped_load_trains_one_job_across_two_kubernetes_pods_on_their_nodes_networks(tmp_path, monkeypatch):
    """Through the stand-in kubectl (kubectl_standin.py): a pod per node in its network namespace (netns_cluster.py),
    meeting at the first node's InternalIP and cluster.kubernetes.port, each reading its node's own recording."""
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"this test runs pods in network namespaces: it needs root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    network = Cluster(tmp_path / "net", 3, f"gu{os.getpid() % 10000}", 100 + (os.getpid() + 71) % 100)
    image = "registry.example/gpuaccept:0.1"
    try:
        network.network()
        api = StandIn(tmp_path / "api")
        api.set_nodes([gpu_node(f"h{i}", network.address(i), gpus=1) for i in (1, 2)])
        api.set_runtime({f"h{i}": {"netns": f"/run/netns/{network.ns(i)}", "hostname": f"h{i}",
                                   "address": network.address(i)} for i in (1, 2)},
                        {image: {"bin": str(cpu_image(tmp_path / "image-bin")), "image_id": "registry.example/x@sha256:0"}})
        monkeypatch.setenv("PATH", f"{api.bin}:{os.environ['PATH']}")
        monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig))
        contract = parse_contract(CONTRACT.replace("engine: mpirun", "engine: kubernetes").replace(
            '["h[1-3]"]', f'["h[1-2]"]\n  kubernetes: {{context: trial, namespace: gpuaccept, image: "{image}", '
                          'port: 29533}').replace("count: 4", "count: 1").replace("12 s", "2 s"))
        recording = node_recordings(tmp_path / "nvml", ["h1", "h2"], 1)
        state = State(contract, ToolRunner(tmp_path / "evidence", shared=False), tmp_path / "report.html",
                      tmp_path / "results.json", tmp_path / "evidence", recording, is_controller=True, mode="simulated")
        section = cluster.SECTION.of(contract)
        ready = ClusterRun("kubernetes", {f"h{i}": NodeOutcome(
            NodeState(f"h{i}", True, True, "Ready", 1, facts=(("internal_ip", network.address(i)),)), f"nodes/h{i}",
            {"verdict": "accepted", "complete": True, "checks": []}, None) for i in (1, 2)}, ())
        load = run_training(state, Kubernetes.of(section), section, ready)
    finally:
        network.down()
    assert load.error is None and all(p.problem is None for p in load.nodes.values()), \
        {n: (p.problem, p.run.stderr[-2000:] if p.run else "") for n, p in load.nodes.items()}
    said = [line for part in load.nodes.values() if part.run for line in part.run.stdout.splitlines() if ": done, " in line]
    assert sorted(line.split(":")[0] for line in said) == ["rank 0", "rank 1"]
    assert len({line.rsplit("weights sum ", 1)[1] for line in said}) == 1, said  # one job: the same weights
    pods = sorted(api.applied(), key=lambda p: p["spec"]["nodeName"])  # applied at once: in no fixed order
    assert [p["spec"]["nodeName"] for p in pods] == ["h1", "h2"] and all(p["spec"]["hostNetwork"] for p in pods)
    job = pods[1]["spec"]["containers"][0]["args"]
    assert job[job.index("--master-addr") + 1:job.index("--master-addr") + 4] == [network.address(1), "--master-port",
                                                                                    "29533"]
    checks = [judge_gpu(section, Subject.whole(f"h{i}:GPU0"), load, contract) for i in (1, 2)]
    assert [c.outcome for c in checks] == [Outcome.PASSED, Outcome.PASSED], [c.message for c in checks]
