"""Public fixtures of pytest-gpuaccept: the contract, the measurements, and the judge.

They are what the shipped suites use, and a user's own acceptance tests may use them too
(`pytest --fixtures` lists them). Each measurement runs once per session, whatever asks for it.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from .checks import PASSED, Check
from .contract import Contract
from .probes import nccl_tests, nvidia_smi, nvml, sysfs
from .probes._run import Command, Reading, ToolRun, ToolRunner, parse_run
from .probes.nvml import GpuSeries, Host
from .probes.sysfs import IbPort
from .report import CHECK_PROPERTY
from .state import NVML_HOST_FILE, STATE, State

TORCH_ALLREDUCE = "pytest_gpuaccept.workloads.torch_allreduce"
TRAIN = "pytest_gpuaccept.workloads.train"


def _state(request: pytest.FixtureRequest) -> State:
    state = request.config.stash.get(STATE, None)
    if state is None:
        pytest.fail("pytest-gpuaccept fixtures need --contract=PATH", pytrace=False)
    return state


@pytest.fixture(scope="session")
def gpuaccept_contract(request: pytest.FixtureRequest) -> Contract:
    """The validated contract of this run (frozen dataclasses, see docs/contract.md)."""
    return _state(request).contract


@pytest.fixture(scope="session")
def gpuaccept_runner(request: pytest.FixtureRequest) -> ToolRunner:
    """The tool runner: argv lists, timeouts, exit codes, and evidence files for every run."""
    return _state(request).runner


@pytest.fixture(scope="session")
def gpuaccept_host(request: pytest.FixtureRequest) -> tuple[Host, tuple[str, ...]]:
    """(Host, evidence): the NVML reading of the host (driver, CUDA, GPUs), taken once per run."""
    return _state(request).host(), (NVML_HOST_FILE,)


@pytest.fixture(scope="session")
def gpuaccept_topology(request: pytest.FixtureRequest) -> Reading:
    """`nvidia-smi topo -m`, run once per run and parsed into a Topology (or the reason it could not be)."""
    state = _state(request)
    return parse_run(nvidia_smi.run_topo(state.runner, timeout_s=min(state.runner.default_timeout_s, 120.0)),
                     nvidia_smi.parse_topo)


@pytest.fixture
def gpuaccept_judge(request: pytest.FixtureRequest) -> Callable[[Check], None]:
    """Record a Check for the report and results, and fail the test unless it passed (one line, no traceback)."""
    def judge(check: Check) -> None:
        request.node.user_properties.append((CHECK_PROPERTY, check.to_dict()))
        if check.outcome != PASSED:
            verdict = "" if check.message.startswith("not measured") else "failed: "
            pytest.fail(f"{check.clause} {check.subject}: {verdict}{check.message}", pytrace=False)

    return judge


@pytest.fixture(scope="session")
def gpuaccept_allreduce(request: pytest.FixtureRequest, gpuaccept_contract: Contract) -> tuple[list[Reading], str]:
    """(readings, tool): every all_reduce run the contract asks for (`repeats`), parsed; tool names what measured.

    nccl-tests' all_reduce_perf by default; PyTorch distributed only where the contract says `tool: torch`.
    """
    state = _state(request)
    clause = gpuaccept_contract.allreduce
    if gpuaccept_contract.nvlink is not None and gpuaccept_contract.nvlink.errors_stable:
        nvidia_smi.run_nvlink_errors(state.runner, "before")  # the counters before the load starts
    args = nccl_tests.all_reduce_args(gpuaccept_contract.gpus.count, clause.min_bytes.nbytes,
                                      clause.max_bytes.nbytes, clause.args)
    readings = []
    for repeat in range(1, clause.repeats + 1):
        if clause.tool == "torch":
            run = state.runner.run("python", ["-m", TORCH_ALLREDUCE, *args[:6], "-f", "2"],
                                   key=f"torch_all_reduce.run{repeat}")
        else:
            run = nccl_tests.run_all_reduce(state.runner, args, repeat)
        readings.append(parse_run(run, nccl_tests.parse_all_reduce))
    tool = "PyTorch distributed (NCCL backend), not nccl-tests" if clause.tool == "torch" else "nccl-tests"
    return readings, tool


@pytest.fixture(scope="session")
def gpuaccept_nvlink_status(request: pytest.FixtureRequest) -> Reading:
    """`nvidia-smi nvlink -s`: the state and speed of every NVLink of every GPU, once per run."""
    return parse_run(nvidia_smi.run_nvlink_status(_state(request).runner), nvidia_smi.parse_nvlink_status)


@pytest.fixture(scope="session")
def gpuaccept_nvlink_errors(request: pytest.FixtureRequest) -> tuple[Reading, Reading]:
    """(before, after): NVLink error counters read around the all_reduce load (which runs once per run)."""
    runner = _state(request).runner
    request.getfixturevalue("gpuaccept_allreduce")  # reads `before`, then loads the links
    before = parse_run(nvidia_smi.run_nvlink_errors(runner, "before"), nvidia_smi.parse_nvlink_errors)
    after = parse_run(nvidia_smi.run_nvlink_errors(runner, "after"), nvidia_smi.parse_nvlink_errors)
    return before, after


@pytest.fixture(scope="session")
def gpuaccept_host_names(request: pytest.FixtureRequest) -> tuple[list[str], list[str]]:
    """(interfaces, RDMA devices) the host lists in sysfs: what the contract's names and globs match against."""
    return _state(request).listings()


@pytest.fixture(scope="session")
def gpuaccept_ib_ports(request: pytest.FixtureRequest) -> Callable[[str], tuple[list[IbPort], str]]:
    """device -> (its ports from sysfs: state, rate, link layer, RoCE v2 GID index; the evidence file)."""
    state = _state(request)

    def ports(device: str) -> tuple[list[IbPort], str]:
        reading, evidence = state.ib_device(device)
        return sysfs.parse_ib_device(reading), evidence

    return ports


@dataclass(frozen=True)
class LoadRun:
    """The utilisation load: the workload's run, every GPU's NVML series, and why either cannot be trusted."""

    run: ToolRun | None
    series: dict[int, GpuSeries]
    failure: str | None  # nothing could be sampled (no driver, no PyTorch, workload missing)
    workload_failure: str | None  # the workload crashed or ended early: not a load to judge
    evidence: tuple[str, ...]


SAMPLES_FILE = "nvml-samples.json"
SAMPLE_INTERVAL_S = 0.15  # NVML utilisation is a rolling fraction; 100-200 ms sampling resolves dips


@pytest.fixture(scope="session")
def gpuaccept_load(request: pytest.FixtureRequest, gpuaccept_contract: Contract) -> LoadRun:
    """Run the contract's workload on every GPU while NVML samples them (once per run, exclusive)."""
    state = _state(request)
    clause = gpuaccept_contract.utilisation
    count = gpuaccept_contract.gpus.count
    host = state.host()
    if host.error and state.runner.replay_dir is None:
        return LoadRun(None, {}, host.error, None, (NVML_HOST_FILE,))
    if clause.workload == "builtin":
        if state.runner.replay_dir is None and importlib.util.find_spec("torch") is None:
            return LoadRun(None, {}, "PyTorch is not installed for the builtin workload: "
                           "pip install 'pytest-gpuaccept[torch]'", None, ())
        command = Command("python", ("-m", TRAIN, "--gpus", str(count), "--duration", f"{clause.duration.seconds + 60:g}"),
                          key="workload_builtin")
    else:
        command = Command(clause.workload[0], tuple(clause.workload[1:]), key="workload")

    def sample(stop: threading.Event) -> dict[str, Any]:
        if state.nvml_recording is not None:  # recorded series replayed through the NVML adapter
            stop.wait(clause.duration.seconds)
            recording = json.loads(state.nvml_recording.read_text())
            return recording.get("utilisation", {"error": "the NVML recording has no utilisation samples"})
        return nvml.sample_gpus(count, SAMPLE_INTERVAL_S, clause.duration.seconds, stop)

    run = state.runner.run_during(command, clause.duration.seconds, sample, SAMPLES_FILE)
    evidence = (*run.evidence, SAMPLES_FILE)
    if run.error:
        return LoadRun(run, {}, run.error, None, run.evidence)
    recording = state.reading(SAMPLES_FILE, lambda: {"error": "no NVML samples were recorded"})
    try:
        series = {s.index: s for s in nvml.parse_samples(recording)}
    except ValueError as exc:
        return LoadRun(run, {}, str(exc), None, evidence)
    workload_failure = run.failure
    if workload_failure is None and run.stopped_after_s is None and run.duration_s < clause.duration.seconds:
        workload_failure = f"`{run.command}` ended after {run.duration_s:g} s, before the {clause.duration} duration"
    if workload_failure:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        workload_failure += f"; its last output: {tail}" if tail else ""
    return LoadRun(run, series, None, workload_failure, evidence)
