"""pytest glue: options, configuration, parametrization from the contract, collection, verdict."""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from . import plan, report
from .bundle import evidence_folder, verify
from .checks import match_names
from .contract import NAME_PATTERN, ContractError, load_contract
from .probes._run import ToolRunner
from .probes.sysfs import SAFE_NAME
from .report import ITEM_PROPERTY
from .state import STATE, State

DEFAULT_REPORT = "gpuaccept-report.html"
DEFAULT_JSON = "gpuaccept-results.json"
EVIDENCE_DIR = "gpuaccept-evidence"
DEFAULT_TIMEOUT_S = 600.0

# (option, ini name, metavar, help): each option is declared once, for the command line and the ini file.
_OPTIONS = (
    ("--contract", "gpuaccept_contract", "PATH",
     "run the GPU acceptance suites against this contract YAML (see docs/contract.md)"),
    ("--gpuaccept-json", "gpuaccept_json", "PATH", f"where to write the results JSON (default {DEFAULT_JSON})"),
    ("--gpuaccept-replay", "gpuaccept_replay", "DIR",
     "judge the tool runs and NVML readings recorded in an evidence folder instead of measuring"),
    ("--gpuaccept-nvml", "gpuaccept_nvml", "FILE",
     "read NVML readings from a recording (JSON as in nvml-host.json) instead of the driver"),
    ("--gpuaccept-sysfs", "gpuaccept_sysfs", "DIR",
     "where the host's sysfs is mounted (default /sys; e.g. /host/sys in a container)"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuaccept", "GPU server acceptance (pytest-gpuaccept)")
    for flag, ini, metavar, help_text in _OPTIONS:
        group.addoption(flag, dest=ini, metavar=metavar, default=None, help=help_text)
        parser.addini(ini, help_text, default=None)


def _option(config: pytest.Config, ini: str) -> str | None:
    value = config.getoption(ini)
    if value is None:
        value = config.getini(ini) or None
    return value


def suites_dir() -> Path:
    """The shipped acceptance suites: inside the package when installed, beside it in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "suites", here.parent / "suites"):
        if (candidate / "test_gpus.py").is_file():
            return candidate
    raise pytest.UsageError(f"pytest-gpuaccept: the acceptance suites are missing from {here}; reinstall the package")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpuaccept(clause): an acceptance test judging this contract clause")
    contract_path = _option(config, "gpuaccept_contract")
    if contract_path is None:
        return  # loaded in every pytest run of the environment: do nothing unless asked
    try:
        contract = load_contract(contract_path)
    except ContractError as exc:
        raise pytest.UsageError("invalid contract:\n" + "\n".join(exc.problems)) from None

    replay = _option(config, "gpuaccept_replay")
    if replay is not None:
        replay = str(evidence_folder(Path(replay)))
        checked = verify(Path(replay), evidence_only=True)
        if not checked.ok:  # judging edited evidence would be judging the editor, not the machine
            raise pytest.UsageError(f"--gpuaccept-replay: the bundle {replay} does not verify:\n" +
                                    "\n".join(checked.problems))
    nvml_recording = _option(config, "gpuaccept_nvml")
    if nvml_recording is not None and not Path(nvml_recording).is_file():
        raise pytest.UsageError(f"--gpuaccept-nvml: file not found: {nvml_recording}")

    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if not hasattr(config.option, "htmlpath"):
        raise pytest.UsageError("pytest-gpuaccept writes its report with pytest-html: do not disable it (-p no:html)")
    if config.option.htmlpath is None:
        config.option.htmlpath = DEFAULT_REPORT
    config.option.self_contained_html = True
    report_path = Path(config.option.htmlpath).resolve()
    json_path = Path(_option(config, "gpuaccept_json") or DEFAULT_JSON).resolve()
    evidence_dir = Path(workerinput["gpuaccept_evidence"]) if workerinput else report_path.parent / EVIDENCE_DIR
    if replay is not None and Path(replay).resolve() == evidence_dir:
        raise pytest.UsageError(f"--gpuaccept-replay: {replay} is where this run writes its own evidence; "
                                "replay from elsewhere or move the report with --html=OTHER/report.html")
    if workerinput is None:
        if evidence_dir.is_dir():
            shutil.rmtree(evidence_dir)  # a new run's evidence must not mix with an old one's
        evidence_dir.mkdir(parents=True)
        config.stash[_SIGTERM] = _stop_on_sigterm()

    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # No test path named: run the shipped suites (xdist workers re-parse the command line, so they too).
        config.args = [str(suites_dir())]

    timeout = contract.tools.timeout.seconds if contract.tools.timeout else DEFAULT_TIMEOUT_S
    tool_paths = {"python": sys.executable, **contract.tools.paths}  # workloads run in this interpreter
    runner = ToolRunner(evidence_dir, timeout, tool_paths, Path(replay).resolve() if replay else None)
    config.stash[STATE] = State(contract, runner, report_path, json_path, evidence_dir,
                                Path(nvml_recording).resolve() if nvml_recording else None,
                                is_controller=workerinput is None,
                                sys_root=Path(_option(config, "gpuaccept_sysfs") or "/sys"))
    config.pluginmanager.register(report.ReportPlugin(config.stash[STATE]), "gpuaccept-report")


_SIGTERM = pytest.StashKey[Any]()


def _stop_on_sigterm() -> Any:
    """SIGTERM unwinds like Ctrl-C, so that the report and results are still written (complete: false)."""
    def handler(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None  # not the main thread: nothing installed


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(_SIGTERM, None)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


class _XdistHooks:
    """Hooks that exist only where pytest-xdist is installed and enabled: registered only then."""

    @staticmethod
    def pytest_configure_node(node: Any) -> None:
        """Workers write their evidence into the controller's folder."""
        state = node.config.stash.get(STATE, None)
        if state is not None:
            node.workerinput["gpuaccept_evidence"] = str(state.evidence_dir)


@pytest.hookimpl(trylast=True)
def pytest_plugin_registered(plugin: Any, manager: pytest.PytestPluginManager) -> None:
    if manager.hasplugin("xdist") and not manager.hasplugin("gpuaccept-xdist"):
        manager.register(_XdistHooks(), "gpuaccept-xdist")


# ------------------------------------------------------------------ parametrization and collection

def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = metafunc.config.stash.get(STATE, None)
    if state is None:
        return
    gpus = state.contract.gpus
    count = gpus.count if gpus is not None and gpus.count is not None else 0
    if "gpu_index" in metafunc.fixturenames:
        # Without gpus.count a per-GPU clause is one test over every GPU the host has (subject "GPUs").
        indices: list[int | None] = list(range(count)) or [None]
        metafunc.parametrize("gpu_index", indices, ids=[f"GPU{i}" if i is not None else "GPUs" for i in indices])
    if "gpu_pair" in metafunc.fixturenames:
        pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
        metafunc.parametrize("gpu_pair", pairs, ids=[f"GPU{i}-GPU{j}" for i, j in pairs])
    # Globbed names: one test per name the host has that matches; a pattern matching nothing is a test too.
    for fixture, section, key in (("nic", "nics", "interfaces"), ("rdma_device", "rdma", "devices")):
        clause = getattr(state.contract, section)
        if fixture in metafunc.fixturenames and clause is not None:
            interfaces, devices = state.listings()
            matches = match_names(getattr(clause, key), interfaces if section == "nics" else devices)
            metafunc.parametrize(fixture, matches, ids=[_safe_id(name or pattern) for pattern, name in matches])


def _safe_id(name: str) -> str:
    """A test id for a name from the host; pytest-html shows ids unescaped, so odd names are shown in hex."""
    return name if SAFE_NAME.match(name) or NAME_PATTERN.match(name) else "unsafe-" + name.encode().hex()[:40]


def _subject(item: pytest.Item) -> str:
    """The marker's `subject`, else the GPU, pair or name parameter (GPU3, GPU0-GPU1, ens1f0)."""
    marker = item.get_closest_marker("gpuaccept")
    if "subject" in marker.kwargs:
        return str(marker.kwargs["subject"])
    state = item.config.stash[STATE]
    if marker.args[0] == "iperf3" and state.contract.iperf3 is not None:
        return state.contract.iperf3.server
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "gpu_index" in params:
        return "GPUs" if params["gpu_index"] is None else f"GPU{params['gpu_index']}"
    if "gpu_pair" in params:
        return "GPU{}-GPU{}".format(*params["gpu_pair"])
    for name in ("nic", "rdma_device"):
        if name in params:
            pattern, match = params[name]
            return match or pattern
    return "host"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the tests of clauses the contract does not have; tag the others with clause and subject."""
    state = config.stash.get(STATE, None)
    if state is None:
        return
    present = set(plan.present_clauses(state.contract))
    keep, absent = [], []
    for item in items:
        marker = item.get_closest_marker("gpuaccept")
        if marker is not None:
            clause = marker.args[0]
            if clause not in present:
                absent.append(item)  # not in the contract: not checked, and the report says so
                continue
            test = f"suites/{item.path.name}::{item.name}"
            item.user_properties.append((ITEM_PROPERTY, {"clause": clause, "subject": _subject(item), "test": test}))
        keep.append(item)
    if absent:
        config.hook.pytest_deselected(items=absent)
    items[:] = keep
