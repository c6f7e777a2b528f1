"""Public fixtures of pytest-gpuaccept: the contract, the measurements, and the judge.

They are what the shipped suites use, and a user's own acceptance tests may use them too
(`pytest --fixtures` lists them). Each measurement runs once per session, whatever asks for it; each
returns a named, typed value (`pytest_gpuaccept.measurements`). This module is loaded in every pytest
run of the environment, so it imports the probes only inside the fixtures.
"""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any, Callable

import pytest

if TYPE_CHECKING:
    from .clauses.compute import GemmLoad
    from .clauses.host_bandwidth import HostCopies
    from .clauses.memory_bandwidth import MemoryCopies
    from .clauses.p2p import P2pView
    from .contract import Contract
    from .measurements import (
        AllReduceRuns,
        ClusterAllReduce,
        ClusterRun,
        GpuModels,
        HostReading,
        Iperf3Path,
        LinkRuns,
        LoadRun,
        NicLinks,
        NvlinkErrorReadings,
        PairRuns,
        RdmaDevices,
        WithModels,
    )
    from .probes._run import Command, Reading, ToolRunner
    from .probes.nvidia_smi import LinkStatus, Topology
    from .state import State
    from .verdict import Check

TORCH_ALLREDUCE = "pytest_gpuaccept.workloads.torch_allreduce"
TRAIN = "pytest_gpuaccept.workloads.train"
RDMA_BASE_PORT = 18515  # perftest's default; each device gets its own port
SAMPLES_FILE = "nvml-samples.json"
SAMPLE_INTERVAL_S = 0.15  # NVML utilisation is a rolling fraction; 100-200 ms sampling resolves dips


NO_CONTRACT = "pytest-gpuaccept fixtures need --contract=PATH"


def _state(config: pytest.Config) -> State:
    from .state import STATE

    state = config.stash.get(STATE, None)
    if state is None:
        pytest.fail(NO_CONTRACT, pytrace=False)
    return state


def run_fixtures(state: State | None) -> types.ModuleType:
    """The fixtures of one run, a plugin registered by pytest_configure: gpuaccept_state, from which the other
    session fixtures start (without --contract, a clear failure). It takes no argument, neither `request` nor
    `pytestconfig` (which takes `request`): pytest makes a new `request` fixture definition, with an
    inspect.signature, each time a test's closure reaches one (925 in the 8-GPU benchmark run, 0.06 s of its
    profile). A module, as pytest reads fixtures from a plugin's type (a method of an instance would be a
    deprecated instance fixture)."""
    plugin = types.ModuleType(f"{__name__}.run")

    @pytest.fixture(scope="session", name="gpuaccept_state")
    def run_state() -> State:
        """This run's state: the contract, the tool runner, the evidence folder, the checks judged so far."""
        if state is None:
            pytest.fail(NO_CONTRACT, pytrace=False)
        return state

    plugin.gpuaccept_state = run_state  # type: ignore[attr-defined]
    return plugin


@pytest.fixture(scope="session")
def gpuaccept_contract(gpuaccept_state: State) -> Contract:
    """The validated contract of this run (frozen dataclasses, see docs/contract.md)."""
    return gpuaccept_state.contract


@pytest.fixture(scope="session")
def gpuaccept_runner(gpuaccept_state: State) -> ToolRunner:
    """The tool runner: argv lists, timeouts, exit codes, and evidence files for every run."""
    return gpuaccept_state.runner


CLAUSE_TEST_ARGUMENTS = "gpuaccept_arguments"  # on a shipped clause test: the fixtures it is called with


def judge_check(node: pytest.Item, check: Check) -> None:
    """Record a Check on its test for the report and results, and fail the test unless it passed (one line,
    no traceback). The shipped suites' tests through plugin.pytest_pyfunc_call; user tests, through gpuaccept_judge."""
    from .report import junit_properties
    from .verdict import NOT_MEASURED_PREFIX, Outcome

    node.user_properties.extend(junit_properties(check.to_dict()))
    if check.outcome is not Outcome.PASSED:
        verdict = "" if check.message.startswith(NOT_MEASURED_PREFIX.rstrip(": ")) else "failed: "
        pytest.fail(f"{check.clause} {check.subject}: {verdict}{check.message}", pytrace=False)


@pytest.fixture
def gpuaccept_judge(request: pytest.FixtureRequest) -> Callable[[Check], None]:
    """Record a Check for the report and results, and fail the test unless it passed (one line, no traceback)."""
    return functools.partial(judge_check, request.node)


@pytest.fixture(scope="session")
def gpuaccept_cluster(gpuaccept_state: State, gpuaccept_contract: Contract) -> ClusterRun:
    """Every node of the cluster: inventory through the engine, then the per-node suite on each schedulable
    node at once, each node's bundle brought back into the evidence (nodes/<node>/) and verified."""
    from .cluster.engine import engine_for
    from .cluster.run import run_cluster

    section = gpuaccept_contract.cluster
    return run_cluster(gpuaccept_state, engine_for(section), section)


@pytest.fixture(scope="session")
def gpuaccept_cluster_pairs(gpuaccept_state: State, gpuaccept_contract: Contract,
                            gpuaccept_cluster: ClusterRun) -> PairRuns:
    """cluster.pairs: a 2-node all_reduce between every pair of nodes, in rounds of disjoint pairs at once."""
    from .cluster.engine import engine_for
    from .cluster.run import run_pairs

    section = gpuaccept_contract.cluster
    return run_pairs(gpuaccept_state, engine_for(section), section, gpuaccept_cluster)


@pytest.fixture(scope="session")
def gpuaccept_cluster_allreduce(gpuaccept_state: State, gpuaccept_contract: Contract,
                                gpuaccept_cluster: ClusterRun) -> ClusterAllReduce:
    """cluster.allreduce: one all_reduce over every GPU of every available node."""
    from .cluster.engine import engine_for
    from .cluster.run import run_allreduce

    section = gpuaccept_contract.cluster
    return run_allreduce(gpuaccept_state, engine_for(section), section, gpuaccept_cluster)


@pytest.fixture(scope="session")
def gpuaccept_cluster_links(gpuaccept_state: State, gpuaccept_contract: Contract,
                            gpuaccept_cluster: ClusterRun) -> LinkRuns:
    """cluster.links: node to node per interface, both directions at once, in the pairs' rounds."""
    from .cluster.engine import engine_for
    from .cluster.run import run_links

    section = gpuaccept_contract.cluster
    return run_links(gpuaccept_state, engine_for(section), section, gpuaccept_cluster)


@pytest.fixture(scope="session")
def gpuaccept_host(gpuaccept_state: State) -> HostReading:
    """The NVML reading of the host (driver, CUDA, GPUs), taken once per run, and its evidence file."""
    from .measurements import HostReading
    from .state import NVML_HOST_FILE

    return HostReading(gpuaccept_state.host(), (NVML_HOST_FILE,))


@pytest.fixture(scope="session")
def gpuaccept_topology(gpuaccept_state: State) -> Reading[Topology]:
    """`nvidia-smi topo -m`, run once per run and parsed into a Topology (or the reason it could not be)."""
    from .probes import nvidia_smi

    runner = gpuaccept_state.runner
    return nvidia_smi.read_topo(runner, timeout_s=min(runner.default_timeout_s, 120.0))


@pytest.fixture(scope="session")
def gpuaccept_allreduce(gpuaccept_state: State, gpuaccept_contract: Contract,
                        gpuaccept_host: HostReading, gpuaccept_models: GpuModels) -> AllReduceRuns:
    """Every all_reduce run the contract asks for (`repeats`), parsed; `tool` names what measured.

    nccl-tests' all_reduce_perf by default; PyTorch distributed only where the contract says `tool: torch`.
    """
    from .measurements import AllReduceRuns
    from .probes import nccl_tests, nvidia_smi
    from .probes._run import parse_run

    state = gpuaccept_state
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
    return AllReduceRuns(tuple(readings), tool, tuple(gpu.name for gpu in gpuaccept_host.host.gpus), gpuaccept_models,
                         gpuaccept_host.host)


@pytest.fixture(scope="session")
def gpuaccept_p2p(gpuaccept_state: State, gpuaccept_contract: Contract, gpuaccept_models: GpuModels,
                  gpuaccept_topology: Reading[Topology]) -> P2pView:
    """GPU-to-GPU copy bandwidth, once per run, with the contract's tool (nvbandwidth by default), and what each
    pair's path can carry (`topo -m`, NVML's links, sysfs's PCIe links: clauses/plausible.py)."""
    from .clauses import p2p, plausible
    from .probes import nvbandwidth, p2p_latency

    runner = gpuaccept_state.runner
    section = p2p.SECTION.of(gpuaccept_contract)
    both = section.min_bidirectional is not None
    paths = plausible.read_paths(gpuaccept_state, gpuaccept_models, gpuaccept_topology)
    if section.tool == "torch":
        from .probes import torch_p2p

        reading = torch_p2p.run_torch_p2p(runner, gpuaccept_contract.gpus.count, section.size.nbytes, section.repeats, both)
        return p2p.with_models(p2p.from_torch(reading, gpuaccept_contract.gpus.count), gpuaccept_models, paths)
    if section.tool == "p2pBandwidthLatencyTest":
        return p2p.with_models(p2p.from_p2p_latency(p2p_latency.run_p2p_latency(runner), both), gpuaccept_models, paths)
    cases = (p2p.WRITE_CE, p2p.READ_CE) + ((p2p.BIDIR_CE,) if both else ())
    return p2p.with_models(p2p.from_nvbandwidth(nvbandwidth.run_nvbandwidth(runner, cases), both), gpuaccept_models, paths)


@pytest.fixture(scope="session")
def gpuaccept_models(gpuaccept_state: State) -> GpuModels:
    """Each GPU's PCI device ID from sysfs and its model in the published-figures table (None: unknown)."""
    return gpuaccept_state.gpu_models()


@pytest.fixture(scope="session")
def gpuaccept_host_identity(gpuaccept_host: HostReading, gpuaccept_models: GpuModels) -> HostReading:
    """The NVML reading with each GPU's PCI device ID and model from sysfs: two sources for who a GPU is."""
    from .measurements import HostReading

    return HostReading(gpuaccept_host.host, gpuaccept_host.evidence, gpuaccept_models)


@pytest.fixture(scope="session")
def gpuaccept_host_copies(gpuaccept_state: State, gpuaccept_contract: Contract,
                          gpuaccept_models: GpuModels) -> HostCopies:
    """Host <-> GPU copy bandwidth per GPU and direction: one nvbandwidth run, or our PyTorch workload with each
    GPU's pinned buffer allocated on its own NUMA node (its local_cpulist in sysfs)."""
    from .clauses import host_bandwidth, plausible
    from .probes import nvbandwidth, torch_hostbw

    state = gpuaccept_state
    section = host_bandwidth.SECTION.of(gpuaccept_contract)
    paths = plausible.read_paths(state, gpuaccept_models)  # each GPU's PCIe link: the most a host copy carries
    if section.tool == "torch":
        count = gpuaccept_contract.gpus.count
        cpus = {gpu: local for gpu, local in state.local_cpus().items() if gpu < count}
        reading = torch_hostbw.run_torch_hostbw(state.runner, count, section.size.nbytes, section.repeats, cpus)
        return host_bandwidth.from_torch(reading, gpuaccept_models, count, paths)
    nvb = nvbandwidth.run_nvbandwidth(state.runner, tuple(host_bandwidth.TESTCASES.values()), key="nvbandwidth_host")
    return host_bandwidth.from_nvbandwidth(nvb, gpuaccept_models, paths)


@pytest.fixture(scope="session")
def gpuaccept_memory_copies(gpuaccept_state: State, gpuaccept_contract: Contract,
                            gpuaccept_models: GpuModels) -> MemoryCopies:
    """Each GPU's device-local copy bandwidth, once per run, with the GPUs' models: nvbandwidth's device_local_copy
    (`tool: nvbandwidth`, or no tool named and nvbandwidth found), else our PyTorch workload."""
    from .clauses import memory_bandwidth
    from .probes import membw, nvbandwidth

    runner = gpuaccept_state.runner
    section = memory_bandwidth.SECTION.of(gpuaccept_contract)
    if section.tool == "nvbandwidth" or (section.tool is None and runner.which(nvbandwidth.TOOL)):
        nvb = nvbandwidth.run_nvbandwidth(runner, (memory_bandwidth.LOCAL_COPY,), key="nvbandwidth_local")
        return memory_bandwidth.from_nvbandwidth(nvb, gpuaccept_models)
    reading = membw.run_membw(runner, gpuaccept_contract.gpus.count, section.size.nbytes, section.repeats)
    return memory_bandwidth.from_torch(reading, gpuaccept_models)


@pytest.fixture(scope="session")
def gpuaccept_nvlink_status(gpuaccept_state: State) -> Reading[LinkStatus]:
    """`nvidia-smi nvlink -s`: the state and speed of every NVLink of every GPU, once per run."""
    from .probes import nvidia_smi

    return nvidia_smi.read_nvlink_status(gpuaccept_state.runner)


@pytest.fixture(scope="session")
def gpuaccept_nvlink_topology(gpuaccept_topology: Reading[Topology], gpuaccept_models: GpuModels,
                              gpuaccept_host: HostReading) -> WithModels[Topology]:
    """`topo -m`, with the GPUs' models and NVML's per-link state: each pair's NVLinks from two sources."""
    from .measurements import WithModels

    return WithModels(gpuaccept_topology, gpuaccept_models, gpuaccept_host.host)


@pytest.fixture(scope="session")
def gpuaccept_nvlink_links(gpuaccept_nvlink_status: Reading[LinkStatus], gpuaccept_models: GpuModels,
                           gpuaccept_host: HostReading) -> WithModels[LinkStatus]:
    """`nvlink -s`, with the GPUs' models and NVML's per-link state: each link's speed beside the published one."""
    from .measurements import WithModels

    return WithModels(gpuaccept_nvlink_status, gpuaccept_models, gpuaccept_host.host)


@pytest.fixture(scope="session")
def gpuaccept_nvlink_errors(request: pytest.FixtureRequest) -> NvlinkErrorReadings:
    """NVLink error counters read before and after the all_reduce load (which runs once per run)."""
    from .measurements import NvlinkErrorReadings
    from .probes import nvidia_smi

    runner = _state(request.config).runner
    request.getfixturevalue("gpuaccept_allreduce")  # reads `before`, then loads the links
    return NvlinkErrorReadings(nvidia_smi.read_nvlink_errors(runner, "before"),
                               nvidia_smi.read_nvlink_errors(runner, "after"))


@pytest.fixture(scope="session")
def gpuaccept_host_names(gpuaccept_state: State) -> dict[str, list[str]]:
    """What the host lists in sysfs ({"net": interfaces, "infiniband": RDMA devices}): what names and globs match."""
    return dict(gpuaccept_state.listings())


@pytest.fixture(scope="session")
def gpuaccept_nic_links(gpuaccept_state: State, gpuaccept_host_names: dict[str, list[str]]) -> NicLinks:
    """The interfaces the host lists, and `ethtool IFACE` for any of them (each run once per run)."""
    from .measurements import NicLinks
    from .probes import ethtool

    state = gpuaccept_state
    return NicLinks(tuple(gpuaccept_host_names.get("net", [])), lambda name: ethtool.read_ethtool(state.runner, name),
                    lambda name: state.function("net", name))


@pytest.fixture(scope="session")
def gpuaccept_rdma_devices(gpuaccept_state: State, gpuaccept_contract: Contract,
                           gpuaccept_host_names: dict[str, list[str]]) -> RdmaDevices:
    """The RDMA devices the host lists, their ports from sysfs, and ib_write_bw through a port (once each)."""
    from .measurements import RdmaDevices
    from .probes import ib_write_bw, sysfs

    state = gpuaccept_state
    clause = gpuaccept_contract.rdma
    devices = sorted(gpuaccept_host_names.get("infiniband", []))

    def ports(device: str) -> tuple[list[sysfs.IbPort], str]:
        reading, evidence = state.ib_device(device)
        return sysfs.parse_ib_device(reading), evidence

    def write_bw(device: str, port: sysfs.IbPort) -> Reading[ib_write_bw.WriteBw]:
        gid = port.roce_v2_gid_index if port.link_layer == "Ethernet" else None
        offset = devices.index(device) if device in devices else 0
        return ib_write_bw.run_ib_write_bw(state.runner, device, clause.message_size.nbytes, RDMA_BASE_PORT + offset,
                                           clause.peer, gid, port.port, clause.qps or 1)

    return RdmaDevices(tuple(gpuaccept_host_names.get("infiniband", [])), ports, write_bw,
                       lambda name: state.function("infiniband", name))


@pytest.fixture(scope="session")
def gpuaccept_iperf3(gpuaccept_state: State, gpuaccept_contract: Contract) -> Iperf3Path:
    """iperf3 clients against the contract's server (one per port before iperf3 3.16), run once, with the route
    to the server and its interface's byte counters read before and after."""
    from .measurements import Iperf3Path
    from .probes import iperf3, iproute, sysfs

    state = gpuaccept_state
    clause = gpuaccept_contract.iperf3
    route = iproute.read_route(state.runner, clause.server)
    dev = route.value.dev if route.value is not None and sysfs.SAFE_NAME.match(route.value.dev) else None

    def counters(when: str) -> tuple[dict[str, Any] | None, str | None]:
        if dev is None:
            return None, None
        name = f"sysfs-net-{dev}-counters-{when}.json"
        return state.runner.reading(name, lambda: sysfs.read_counters(state.sys_root, dev)), name

    before, before_file = counters("before")
    runs = iperf3.run_iperf3(state.runner, clause.server, clause.port, clause.streams, clause.duration.seconds)
    after, after_file = counters("after")
    files = tuple(f for f in (before_file, after_file) if f)
    return Iperf3Path(runs, route, before, after, route.evidence + files)


def _under_load(state: State, command: Command, duration_s: float, count: int, samples_file: str,
                expected_s: float, models: GpuModels | None = None) -> LoadRun:
    """Run a workload while NVML samples every GPU (or the recording replays its samples); once per run."""
    import threading
    import time

    from .measurements import LoadRun
    from .probes import nvml

    def sample(stop: threading.Event) -> dict[str, Any]:
        if state.nvml_recording is not None:  # recorded series replayed through the NVML adapter
            ends = time.monotonic() + duration_s
            samples = state.recorded_samples()
            state.runner.keep_during(samples_file, samples)  # while the window runs: it would wait idle
            stop.wait(max(0.0, ends - time.monotonic()))
            return samples
        def told(elapsed: float, lowest: float | None) -> None:
            if state.runner.progress is not None:
                busy = f", lowest GPU {lowest:g} %" if lowest is not None else ""
                state.runner.progress(f"gpuaccept: {command.key or command.tool} {elapsed:.0f}/{expected_s:g} s{busy}")

        return nvml.sample_gpus(count, SAMPLE_INTERVAL_S, duration_s, stop, told)

    from .probes import kernel_log
    from .probes._run import Reading

    started = kernel_log.uptime()
    run = state.runner.run_during(command, duration_s, sample, samples_file)
    ended = kernel_log.uptime()
    evidence = (*run.evidence, samples_file)
    if run.error:
        return LoadRun(run, {}, run.error, None, run.evidence, samples_file=samples_file)
    # The kernel log is this machine's: beside a live load (or its replay), never beside an NVML recording.
    kernel, window = None, None
    if state.nvml_recording is None:
        times = state.runner.reading("load-window.json", lambda: {"started_uptime_s": started, "ended_uptime_s": ended})
        if times.get("started_uptime_s") is not None and times.get("ended_uptime_s") is not None:
            window = (float(times["started_uptime_s"]), float(times["ended_uptime_s"]))
            kernel, tried = kernel_log.read_xids(state.runner)
            evidence = (*evidence, "load-window.json", *tried)
        else:  # no boot clock to place the kernel's lines on: the kernel log cannot be judged, never "no Xid"
            kernel = Reading(None, None, "the load's window on the boot clock (/proc/uptime) could not be read")
            evidence = (*evidence, "load-window.json")
    buses = {g.index: g.pci_bus_id for g in state.host().gpus}

    def load(series: dict[int, nvml.GpuSeries], failure: str | None, workload_failure: str | None) -> LoadRun:
        return LoadRun(run, series, failure, workload_failure, evidence, kernel, window, buses, models,
                       samples_file)
    recording = state.runner.reading(samples_file, lambda: {"error": "no NVML samples were recorded"})
    try:
        series = {s.index: s for s in nvml.parse_samples(recording)}
    except ValueError as exc:
        return load({}, str(exc), None)
    workload_failure = run.failure
    if workload_failure is None and run.stopped_after_s is None and run.duration_s < expected_s:
        workload_failure = f"`{run.command}` ended after {run.duration_s:g} s, before the {expected_s:g} s duration"
    if workload_failure:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        workload_failure += f"; its last output: {tail}" if tail else ""
    return load(series, None, workload_failure)


@pytest.fixture(scope="session")
def gpuaccept_load(gpuaccept_state: State, gpuaccept_contract: Contract, gpuaccept_models: GpuModels) -> LoadRun:
    """Run the contract's workload on every GPU while NVML samples them (once per run, exclusive)."""
    import importlib.util

    from .measurements import LoadRun
    from .probes._run import Command
    from .state import NVML_HOST_FILE

    state = gpuaccept_state
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
    return _under_load(state, command, clause.duration.seconds, count, SAMPLES_FILE, clause.duration.seconds,
                       gpuaccept_models)


@pytest.fixture(scope="session")
def gpuaccept_gemm(gpuaccept_state: State, gpuaccept_contract: Contract, gpuaccept_models: GpuModels) -> GemmLoad:
    """Dense GEMM on every GPU at once for the contract's duration, NVML sampling beside it (once per run)."""
    from .clauses import compute
    from .probes import gemm
    from .probes._run import Command, parse_run

    state = gpuaccept_state
    section = compute.SECTION.of(gpuaccept_contract)
    count = gpuaccept_contract.gpus.count
    seconds = section.duration.seconds
    command = Command("python", ("-m", gemm.MODULE, "--gpus", str(count), "--dtype", section.dtype, "--n", str(section.n),
                                 "--duration", f"{seconds:g}"), key="gemm_torch")
    # The program ends by itself after `duration`; sampling stops with it (or 120 s later, past any start-up).
    load = _under_load(state, command, seconds + 120.0, count, "nvml-samples-gemm.json", seconds)
    reading = parse_run(load.run, gemm.parse_gemm) if load.run is not None else None
    if reading is None:
        from .probes._run import Reading

        reading = Reading(None, None, load.failure or "the GEMM did not run")
    return compute.GemmLoad(reading, load, gpuaccept_models)
