"""The judge-level harness: a session built from recorded tool outputs and an NVML recording (and a sysfs tree), whose
clauses' measurements and judges run in this process, in milliseconds: no pytest process, no tool started.

`judge(contract, outputs, ...)` makes the session the plugin would (state.State, its runner reading the outputs
through probes.recorded's Protocol instead of starting tools), asks every clause the contract has for its subjects,
measures each clause once (its measurement's parameters resolved by name, as pytest resolves fixtures) and judges
every subject: the checks the run would make, in the plan's order. Tests whose point is a clause's judgement use it;
a whole pytest run stays where the process boundary is the point.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from conftest import ASKED_FOR, DATA, claimed_seconds, pci_tree

from pytest_gpuaccept.bundle_files import Refused
from pytest_gpuaccept.clauses import registry
from pytest_gpuaccept.clauses.cluster import listing_for
from pytest_gpuaccept.contract import TOOL_KEYS, Contract, parse_contract
from pytest_gpuaccept.probes import counters
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.probes.nccl_tests import asked_iters, parse_all_reduce
from pytest_gpuaccept.state import State
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Check, Outcome

MEASURES: dict[str, Callable[..., Any]] = {measure.__name__: measure for measure in registry.MEASUREMENTS}
PID = 4242  # the process a recorded run ran as


def option_path(flag: str) -> Path:
    """The path a `--gpuaccept-nvml=PATH` or `--gpuaccept-sysfs=DIR` option names: what conftest's and builders'
    recording and sysfs-tree helpers return for a whole run, as the harness takes it."""
    return Path(flag.split("=", 1)[1])


def workload(seconds: float = 1.5) -> dict[str, Output]:
    """The `train-job` workload, running as long as the load's duration (a fake that runs until gpuaccept stops it
    reads the same to the judges: the workload did not end before the duration)."""
    return {"train-job": Output("training\n", seconds=seconds)}


def took(argv: list[str], text: str) -> float:
    """How long a recorded run took, as the fake tools wait: the time it was asked to run for (ib_write_bw -D,
    iperf3 -t), the timed work its table reports (nccl-tests, at the iterations asked), or the work its copies
    report (conftest.claimed_seconds)."""
    tool = Path(argv[0]).name
    if tool in ASKED_FOR and ASKED_FOR[tool] in argv[:-1]:
        return float(argv[argv.index(ASKED_FOR[tool]) + 1])
    if tool == "all_reduce_perf":
        try:
            return parse_all_reduce(text).timed_seconds(asked_iters(argv))
        except ValueError:
            return 0.0
    return claimed_seconds(tool, text)


@dataclass
class Output:
    """What one tool printed, as recorded: its stdout (text, bytes or a file of tests/data), exit code, stderr, how
    long it ran (by default, as long as the work it prints takes: took()), and what it changed on the host while it
    ran (`then`: a port's counters in the session's sysfs tree, moved as the tool's bytes would move them)."""

    stdout: str | bytes | Path
    returncode: int = 0
    stderr: str = ""
    seconds: float | None = None
    then: Callable[[], None] | None = None

    def data(self) -> bytes:
        if isinstance(self.stdout, Path):
            return self.stdout.read_bytes()
        return self.stdout.encode() if isinstance(self.stdout, str) else self.stdout


@dataclass
class Recordings:
    """probes.recorded.Recorded from outputs given by the tool's name (and, where one tool runs several ways, a
    word of its argv: {"nvidia-smi": Output(...), "nvidia-smi topo": Output(...)}; the longest match wins). A run
    nobody recorded is a run not measured, as a missing tool is."""

    outputs: dict[str, Output]
    asked: list[list[str]] = field(default_factory=list)  # every argv the session asked for, in order

    @property
    def folder(self) -> Path | None:
        return None

    def identity(self) -> dict[str, Any]:
        return {"mode": "simulated"}

    def _output(self, argv: list[str]) -> Output | None:
        tool = Path(argv[0]).name if argv else ""
        found = [(name, out) for name, out in self.outputs.items()
                 if name.split()[0] == tool and all(word in argv[1:] for word in name.split()[1:])]
        return max(found, key=lambda item: len(item[0]))[1] if found else None

    def has(self, name: str) -> bool:
        """Whether a run was recorded under the key `name` names: a key that is a tool's own name (nvbandwidth's one
        run a session) where that tool's output was given; any other key when it is read (record())."""
        key = name.removesuffix(".json")
        return name.endswith(".json") and (key not in TOOL_KEYS or key in {n.split()[0] for n in self.outputs})

    def record(self, key: str, argv: list[str]) -> tuple[dict[str, Any], bytes, bytes]:
        self.asked.append(argv)
        output = self._output(argv)
        if output is None:
            raise KeyError(f"no recorded output of `{' '.join(argv)}`")
        if output.then is not None:
            output.then()
        stdout = output.data().replace(b"@PID@", str(PID).encode())  # the rank lines' PID: the run's own
        seconds = output.seconds if output.seconds is not None else took(argv, stdout.decode(errors="replace"))
        record = {"argv": argv, "returncode": output.returncode, "duration_s": round(seconds + 0.05, 3),
                  "timed_out": False, "timeout_s": 600.0, "error": None, "truncated": False, "stdout": f"{key}.txt",
                  "stderr": f"{key}.stderr.txt", "started_s": 0.0, "pid": PID}
        return record, stdout, output.stderr.encode()

    def reading(self, name: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return take()  # the NVML recording and the sysfs tree the session was given

    def chunks(self, name: str) -> Iterator[bytes]:
        raise Refused(f"{name}: no recorded stream")


class Clock:
    """The plugin's clocks (probes/counters.clocks) as the recorded runs move them: each run a counter reading is taken
    around advances them by as long as its record says it took, as a real run would (in process, nothing takes that
    long). Give a run `then=clock.runs(seconds, moves)`; a run whose clock and record disagree is how a test stages
    a tool that lied about its time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(counters, "clocks", lambda: {"monotonic_s": self.now, "boottime_s": self.now})

    def runs(self, seconds: float, then: Callable[[], None] | None = None) -> Callable[[], None]:
        """A run's `then`: the clocks move by `seconds` and the 0.05 s the harness adds to each record."""
        def ran() -> None:
            self.now += seconds + 0.05
            if then is not None:
                then()
        return ran


@dataclass
class Judged:
    """The checks a session judged, by clause, and the session (its runner's evidence, what it asked for)."""

    checks: list[Check]
    state: State
    recordings: Recordings

    def of(self, clause: str) -> list[Check]:
        return [c for c in self.checks if c.clause == clause]

    def one(self, clause: str, subject: str) -> Check:
        [check] = [c for c in self.checks if c.clause == clause and c.subject == subject]
        return check

    @property
    def verdict(self) -> str:
        return "accepted" if self.checks and all(c.outcome is Outcome.PASSED for c in self.checks) else "rejected"


def session(contract: Contract, folder: Path, recordings: Recordings, nvml: Path, sysfs: Path | None = None) -> State:
    """The session the plugin makes for a simulated run, its runner reading `recordings` instead of starting tools."""
    runner = ToolRunner(folder / "evidence", replay=recordings, shared=False)
    root = Path(pci_tree(folder / "sys", recording=nvml).split("=", 1)[1]) if sysfs is None else sysfs
    return State(contract, runner, folder / "report.html", folder / "results.json", folder / "evidence", nvml,
                 is_controller=True, sys_root=root, mode="simulated", listing=listing_for(contract))


def measured(name: str, state: State, done: dict[str, Any]) -> Any:
    """A measurement by its fixture name, its parameters resolved by name as pytest resolves fixtures; once."""
    if name not in done:
        given = {"gpuaccept_state": state, "gpuaccept_contract": state.contract, "gpuaccept_runner": state.runner}
        if name in given:
            return given[name]
        measure = MEASURES[name]
        done[name] = measure(**{p: measured(p, state, done) for p in inspect.signature(measure).parameters})
    return done[name]


def judge(contract: str, outputs: dict[str, Output], folder: Path, nvml: str | Path = "h100_sxm5_8gpu.json",
          sysfs: Path | None = None) -> Judged:
    """Every check `contract` asks for, judged in process from `outputs` and the NVML recording `nvml` (a file of
    tests/data/nvml, or a path) on its PCI functions (conftest.pci_tree) or the sysfs tree `sysfs`."""
    parsed = parse_contract(textwrap.dedent(contract), "vendor.yaml")
    recordings = Recordings(outputs)
    state = session(parsed, folder, recordings, nvml if isinstance(nvml, Path) else DATA / "nvml" / nvml, sysfs)
    done: dict[str, Any] = {}
    checks = []
    for take in registry.BEFORE_RUN:  # as the plugin does before the run's first test (plugin.pytest_runtestloop)
        take(state)
    for clause in registry.present_clauses(parsed):
        subjects = clause.subjects(parsed, state.listings) or [Subject.whole()]
        m = measured(clause.measure.__name__, state, done)
        checks += [clause.judge(clause.section.of(parsed), subject, m, parsed) for subject in subjects]
    return Judged(checks, state, recordings)
