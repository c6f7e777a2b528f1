"""pytest glue: options, configuration, parametrization from the registry, collection, verdict.

Loaded in every pytest run of the environment: without --contract it registers options and a marker
and imports nothing of its own package (the contract, schema, probes and YAML are imported only when
asked; the fixtures are the other plugin pytest loads, fixtures.py).
"""

from __future__ import annotations

import functools
import json
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .bundle_files import BundleFiles
    from .cluster.rerun import Previous
    from .contract import Contract
    from .probes._run import ToolRunner
    from .state import State

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
    ("--gpuaccept-node", "gpuaccept_node", "NAME",
     "judge this host as node NAME of the contract's cluster (set by a cluster run on each node)"),
    ("--gpuaccept-lang", "gpuaccept_lang", "LANG",
     "the language of the report and the terminal's verdict lines: en (default) or zh-CN (Simplified Chinese)"),
    ("--gpuaccept-rerun-failed", "gpuaccept_rerun_failed", "BUNDLE",
     "re-test: measure again only the checks that did not pass in this earlier bundle of the same contract and host; "
     "the others are carried from it, never counted as passed (docs/rerun.md)"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuaccept", "GPU server acceptance (pytest-gpuaccept)")
    for flag, ini, metavar, help_text in _OPTIONS:
        group.addoption(flag, dest=ini, metavar=metavar, default=None, help=help_text)
        parser.addini(ini, help_text, default=None)


def _option(config: pytest.Config, ini: str) -> str | None:
    """Whether (and which) --contract was given, asked by every hook before anything else: the rest of the options
    are read once, into the run's settings.Settings."""
    value = config.getoption(ini)
    if value is None:
        value = config.getini(ini) or None
    return None if value is None else str(value)


@functools.cache  # looked up for every path pytest collects (33 in the benchmark's run): found once
def suites_dir() -> Path:
    """The shipped acceptance suites: inside the package when installed, beside it in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "suites", here.parent / "suites"):
        if (candidate / "test_gpus.py").is_file():
            return candidate
    raise pytest.UsageError(f"pytest-gpuaccept: the acceptance suites are missing from {here}; reinstall the package")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """The shipped suites judge alone: with --contract and no test path, no conftest.py is loaded at all.

    A conftest.py in the working directory (or any parent) belongs to whoever controls the host; it
    could override a fixture or a judge. A user who names their own test paths gets conftests, and the
    report lists each one with its SHA-256.
    """
    namespace = early_config.known_args_namespace
    contract = getattr(namespace, "gpuaccept_contract", None)
    if contract is None:
        try:
            contract = early_config.getini("gpuaccept_contract")
        except ValueError:
            contract = None
    if contract and not getattr(namespace, "file_or_dir", None):
        namespace.noconftest = True
    replay = getattr(namespace, "gpuaccept_replay", None)
    if replay:  # before any conftest or `pythonpath` of an ini file is loaded
        from .bundle_files import evidence_folder

        _not_configured_by(early_config, evidence_folder(Path(replay)).parent)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpuaccept(clause): an acceptance test judging this contract clause")
    contract_path = _option(config, "gpuaccept_contract")
    if contract_path is None:
        return  # loaded in every pytest run of the environment: do nothing unless asked
    from . import report
    from .clauses.advice import advise
    from .clauses.cluster import listing_for
    from .hardening import harden
    from .i18n import LANGS
    from .settings import settings
    from .state import STATE, State
    from .suite import measurement_fixtures

    found = settings(config, _OPTIONS)
    contract = _contract(config, contract_path, found.node.value)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    misplaced = found.misplaced() if workerinput is None else None  # xdist workers re-parse the command line
    if misplaced is not None:
        raise pytest.UsageError(misplaced)
    if found.lang.value is not None and found.lang.value not in LANGS:
        raise pytest.UsageError(f"--gpuaccept-lang {found.lang.value}: expected one of {', '.join(LANGS)}")
    judging = not any(getattr(config.option, name, False) for name in _NOT_JUDGING)
    replay, nvml_recording = _replay(found.replay.value), found.nvml.value
    previous = _previous(config, found.rerun_failed.value, contract, replay is not None, found.json.value) \
        or _replayed_retest(replay)
    if nvml_recording is not None and not Path(nvml_recording).is_file():
        raise pytest.UsageError(f"--gpuaccept-nvml: file not found: {nvml_recording}")
    report_path, json_path, evidence_dir = _outputs(config, judging, workerinput, replay, found.json.value)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # No test path named: run the shipped suites (xdist workers re-parse the command line, so they too).
        config.args = [str(suites_dir())]
    runner = _runner(contract, evidence_dir, replay, workerinput, judging)
    runner.progress = _progress(config) if workerinput is None and judging else None
    mode = "replay" if replay is not None else "simulated" if nvml_recording is not None else "live"
    config.stash[STATE] = State(contract, runner, report_path, json_path, evidence_dir,
                                Path(nvml_recording).resolve() if nvml_recording else None,
                                is_controller=workerinput is None,
                                sys_root=Path(found.sysfs.value or "/sys"), mode=mode,
                                advice=advise(contract), listing=listing_for(contract))
    harden(config)  # before any tool runs: memory closed (PR_SET_DUMPABLE), the tools' user (hardening.py)
    config.pluginmanager.register(measurement_fixtures(), "gpuaccept-measurements")
    if previous is not None:
        from .retest import Retest

        config.pluginmanager.register(Retest(config.stash[STATE], previous), "gpuaccept-retest")
    if judging:
        config.pluginmanager.register(report.ReportPlugin(config.stash[STATE], config), "gpuaccept-report")
    else:
        config.pluginmanager.register(_NothingJudged(), "gpuaccept-nothing-judged")


def _contract(config: pytest.Config, contract_path: str, node: str | None) -> Contract:
    """The contract --contract names (a file or a preset), for this node where --gpuaccept-node says one."""
    from .clauses import cluster
    from .contract import ContractError, load_contract, not_a_contract
    from .presets import resolve, unknown

    mistyped = unknown(contract_path) if contract_path.strip() else None  # a bare name that is no preset
    if mistyped is not None:
        raise pytest.UsageError(mistyped)
    contract_path = resolve(contract_path)
    nothing = not_a_contract(contract_path)  # not a contract that is invalid: no contract at all (no line to name)
    if nothing is not None:
        raise pytest.UsageError(nothing)
    try:
        contract = load_contract(contract_path)
    except ContractError as exc:
        raise pytest.UsageError("invalid contract:\n" + "\n".join(exc.problems)) from None
    if node is not None:
        if cluster.SECTION.get(contract) is None:
            raise pytest.UsageError("--gpuaccept-node: the contract has no cluster section")
        return replace(contract, node=node)
    if cluster.SECTION.get(contract) is not None and (getattr(config, "workerinput", None) is not None
                                                      or getattr(config.option, "numprocesses", None)):
        raise pytest.UsageError("a cluster run spreads its work over the cluster's nodes itself: run it without -n")
    return contract


def _replay(replay: str | None) -> BundleFiles | None:
    """The bundle --gpuaccept-replay names, opened as data once it verifies (bundle_files: every file listed,
    regular, inside it): judging edited evidence would be judging the editor, not the machine."""
    from .bundle import verify
    from .untrusted import shown

    if replay is None:
        return None
    checked = verify(Path(replay), evidence_only=True)
    if not checked.ok or checked.bundle is None:
        raise pytest.UsageError(f"--gpuaccept-replay: the bundle {shown(replay)} does not verify:\n"
                                + "\n".join(shown(problem, 1000) for problem in checked.problems[:50]))
    return checked.bundle


def _not_configured_by(config: pytest.Config, bundle: Path) -> None:
    """A replay whose ini file lies inside the bundle it reads obeys the bundle (its addopts, its `pythonpath`):
    refused before any conftest or path of it is loaded. (A conftest.py is never loaded with --contract and no test
    path.) `python -I -m pytest_gpuaccept replay` runs a replay isolated from the bundle and the working folder."""
    root, ini = bundle.resolve(), config.inipath
    if ini is not None and (ini.resolve() == root or root in ini.resolve().parents):
        raise pytest.UsageError(f"--gpuaccept-replay: the ini file {ini} is inside the bundle {bundle} that this run "
                                "reads, whose settings would configure it; replay from outside it, isolated: "
                                "python -I -m pytest_gpuaccept replay BUNDLE --out DIR")


def _outputs(config: pytest.Config, judging: bool, workerinput: dict[str, Any] | None,
             replay: BundleFiles | None, json_option: str | None) -> tuple[Path, Path, Path]:
    """Where the report, the results and the evidence go; a real run starts clean, so an earlier verdict is never
    read after a run that ended early."""
    if not hasattr(config.option, "htmlpath"):
        raise pytest.UsageError("pytest-gpuaccept writes its report with pytest-html: do not disable it (-p no:html)")
    report_path = Path(config.option.htmlpath or DEFAULT_REPORT).resolve()
    # A mode that judges nothing writes no report (pytest-html is told so before it configures itself).
    config.option.htmlpath = str(report_path) if judging else None
    config.option.self_contained_html = True
    # A replay writes its results beside its report (a re-judge names one folder for everything it writes).
    default_json = report_path.parent / DEFAULT_JSON if replay is not None else Path(DEFAULT_JSON)
    json_path = Path(json_option or default_json).resolve()
    evidence_dir = Path(workerinput["gpuaccept_evidence"]) if workerinput else report_path.parent / EVIDENCE_DIR
    if replay is not None:
        _outside_the_bundle(replay.evidence.resolve(), {"the report (--html)": report_path, "the evidence": evidence_dir,
                                                     "the results (--gpuaccept-json)": json_path})
    if workerinput is None and judging:
        if evidence_dir.is_dir():
            shutil.rmtree(evidence_dir)
        for stale in (json_path, report_path):
            stale.unlink(missing_ok=True)
        evidence_dir.mkdir(parents=True)
        config.stash[_SIGTERM] = _stop_on_sigterm()
    return report_path, json_path, evidence_dir


def _outside_the_bundle(evidence: Path, outputs: dict[str, Path]) -> None:
    """A re-judging run never writes inside the bundle it reads (the evidence folder's parent, the report's
    folder): its results, report or evidence there would change the bundle, and `verify` would fail."""
    bundle = evidence.parent
    for what, path in outputs.items():
        if path == bundle or bundle in path.parents:
            raise pytest.UsageError(f"--gpuaccept-replay: {what} would be written to {path}, inside the bundle "
                                    f"{bundle} that this run reads; write elsewhere, e.g. --html=OTHER/report.html "
                                    "(the results go beside it)")


def _runner(contract: Contract, evidence_dir: Path, replay: BundleFiles | None, workerinput: dict[str, Any] | None,
            judging: bool) -> ToolRunner:
    """The runner of every tool: the contract's paths, pins and timeout, this interpreter for the workloads."""
    from .evidence import new_key
    from .probes._run import ToolRunner
    from .probes.recorded import Replayed

    timeout = contract.tools.timeout.seconds if contract.tools.timeout else DEFAULT_TIMEOUT_S
    tool_paths = {"python": sys.executable, **contract.tools.paths}  # workloads run in this interpreter
    # The key that seals this run's evidence lives in memory only; xdist workers get it through execnet.
    key = bytes.fromhex(workerinput["gpuaccept_key"]) if workerinput else new_key()
    return ToolRunner(evidence_dir, timeout, tool_paths, Replayed(replay) if replay is not None else None,
                      pins=contract.tools.sha256, key=key, keep=judging)


# Options of pytest's that show or collect without running: with them nothing is measured or judged.
_NOT_JUDGING = ("collectonly", "showfixtures", "show_fixtures_per_test", "markers", "help", "version")


def _replayed_retest(replay: BundleFiles | None) -> Previous | None:
    """A replay (or re-judge) of a re-test's bundle deselects and carries the checks the re-test carried, as its
    retest.json states them: judged anew, it would pass a carried check from readings the re-test took for another."""
    from .cluster.rerun import NotRetestable, carried_record
    from .retest import RETEST_FILE

    if replay is None or not replay.has(RETEST_FILE):
        return None
    try:
        return carried_record(replay.read_json(RETEST_FILE))
    except NotRetestable as exc:
        raise pytest.UsageError(f"--gpuaccept-replay: {exc}") from None


def _previous(config: pytest.Config, bundle: str | None, contract: Contract, replay: bool,
              json_option: str | None) -> Previous | None:
    """The bundle --gpuaccept-rerun-failed names, opened as data and verified before this run writes anything (its
    report, results and evidence must not land inside it): None where the option was not given."""
    from .cluster.rerun import NotRetestable, previous

    if bundle is None:
        return None  # (a replay of a re-test's bundle carries what it carried: _replayed_retest)
    if replay:
        raise pytest.UsageError("--gpuaccept-rerun-failed measures this host again: it cannot be given with "
                                "--gpuaccept-replay, which measures nothing")
    try:
        found = previous(Path(bundle), contract.sha256)
    except NotRetestable as exc:
        raise pytest.UsageError(f"--gpuaccept-rerun-failed: {exc}") from None
    if found.complete and not found.failed():
        raise pytest.UsageError(f"--gpuaccept-rerun-failed: every check of the bundle {bundle} passed: nothing to "
                                "measure again (without the option, a run measures everything anew)")
    report = Path(config.option.htmlpath or DEFAULT_REPORT).resolve()
    root = Path(bundle).resolve()
    root = root.parent if root.name == EVIDENCE_DIR else root
    for what, path in (("the report (--html)", report), ("the evidence", report.parent / EVIDENCE_DIR),
                       ("the results (--gpuaccept-json)", Path(json_option or DEFAULT_JSON).resolve())):
        if path == root or root in path.parents:
            raise pytest.UsageError(f"--gpuaccept-rerun-failed: {what} would be written to {path}, inside the bundle "
                                    f"{root} that this re-test starts from; write elsewhere, e.g. --html=OTHER/report.html")
    return found


def _progress(config: pytest.Config) -> Any:
    """Lines on the terminal while long work runs (a tool's start and end, the load's elapsed time and lowest
    GPU): written past output capture, never under xdist workers (their controller shows the dots)."""

    def say(line: str) -> None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if terminal is None or config.get_verbosity() < 0:  # -q: quiet means the dots and the verdict
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                terminal.write_line(line)
        else:
            terminal.write_line(line)

    return say


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The contract's warnings, and what the host lacks for it, before anything runs (the warnings are in
    the report and the results too; a missing tool makes its clauses not measured, as always)."""
    state = _state(config)
    if state is None:
        return []
    lines = [f"gpuaccept warning: {line}" for line in state.advice]
    if state.mode != "replay":
        from .doctor import summary
        from .i18n import language

        missing = summary(state.contract, state.nvml_recording, language(config))
        lines += [missing] if missing else []
    return lines


class _NothingJudged:
    """--collect-only (and friends) with a contract: no report, no results, no verdict, and never exit 0."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if session.config.option.collectonly and session.exitstatus == pytest.ExitCode.OK:
            # Exit 0 with --contract means accepted; a script that only reads the code must not be fooled.
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


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
        state = _state(node.config)
        if state is not None:
            node.workerinput["gpuaccept_evidence"] = str(state.evidence_dir)
            node.workerinput["gpuaccept_key"] = state.runner.key.hex()


@pytest.hookimpl(trylast=True)
def pytest_plugin_registered(plugin: Any, manager: pytest.PytestPluginManager) -> None:
    if manager.hasplugin("xdist") and not manager.hasplugin("gpuaccept-xdist"):
        manager.register(_XdistHooks(), "gpuaccept-xdist")


# ------------------------------------------------------------------ parametrization and collection

def _state(config: pytest.Config) -> State | None:
    """This run's State; None without --contract: nothing of ours to do, and nothing imported for it."""
    if _option(config, "gpuaccept_contract") is None:
        return None
    from .state import STATE  # this module is loaded in every pytest run of the environment

    return config.stash.get(STATE, None)


def _foreign_fixtures(item: pytest.Item) -> list[str]:
    """A shipped test whose gpuaccept_* fixture is defined outside this package: someone else would measure."""
    from .integrity import is_ours

    function = getattr(item, "function", None)
    info = getattr(item, "_fixtureinfo", None)
    if function is None or info is None or not is_ours(function):
        return []  # a user's own acceptance test: its code is listed with the plugins, not judged here
    problems = []
    for name in getattr(item, "fixturenames", ()):
        definitions = info.name2fixturedefs.get(name, ())
        func = definitions[-1].func if definitions else None
        if name.startswith("gpuaccept_") and func is not None and not is_ours(func) \
                and not getattr(func, "__module__", "").startswith("_pytest."):  # parametrize's own
            problems.append(f"fixture {name} of {item.name} is defined by {definitions[-1].baseid or 'a plugin'}")
    return problems


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each acceptance test is parametrized with its clause's subjects, as the registry enumerates them."""
    state = _state(metafunc.config)
    marker = metafunc.definition.get_closest_marker("gpuaccept")
    if state is None or marker is None or "gpuaccept_subject" not in metafunc.fixturenames:
        return
    from .clauses.registry import BY_KEY

    clause = BY_KEY[marker.args[0]]
    subjects = clause.subjects(state.contract, state.listings) if clause.asked_by(state.contract) else []
    metafunc.parametrize("gpuaccept_subject", subjects, ids=[s.id for s in subjects])


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A shipped suite none of whose clauses the contract asks for is not collected at all (its tests would be
    made, parametrized and deselected: six of the ten suites for the benchmark's contract). What the
    contract asks for is judged from the contract at the end, so a suite skipped here by mistake would
    leave its checks not measured, never passed."""
    state = _state(config)
    if state is None or collection_path.parent != suites_dir():
        return None
    if collection_path.name == "__pycache__":
        return True  # pytest would look at each compiled file in it (not in its default norecursedirs)
    if collection_path.suffix != ".py":
        return None
    from .clauses.registry import CLAUSES, present_clauses
    from .suite import clauses_module

    module = clauses_module(collection_path)
    if any(c.judge.__module__ == module for c in CLAUSES) and \
            not any(c.judge.__module__ == module for c in present_clauses(state.contract)):
        return True
    return None


def _subject(item: pytest.Item) -> str:
    """The subject a test judges: its parameter (GPU3, GPU0-GPU1, ens1f0, host); one str() everywhere.

    A user's own acceptance test without the parameter may name it: @pytest.mark.gpuaccept(clause, subject=...).
    """
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "gpuaccept_subject" in params:
        return str(params["gpuaccept_subject"])
    marker = item.get_closest_marker("gpuaccept")
    return str(marker.kwargs.get("subject", "host")) if marker is not None else "host"


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> list[pytest.Item] | None:
    """The test of a clause the contract does not have is never made: "deselected" in pytest's count is the
    user's own word (-k, -m), never ours; the report lists the clauses the contract left out."""
    state = _state(collector.config)
    if state is None or not callable(obj):
        return None
    marks = getattr(obj, "pytestmark", None)
    clause = next((m.args[0] for m in marks if getattr(m, "name", None) == "gpuaccept" and m.args), None) \
        if isinstance(marks, list) else None
    if clause is None:
        return None
    from .clauses.registry import present_clauses

    return None if clause in {c.key for c in present_clauses(state.contract)} else []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the tests of clauses the contract does not have; tag the others with clause and subject."""
    state = _state(config)
    if state is None:
        return
    from .clauses.registry import present_clauses
    from .report import ITEM_PROPERTY

    present = {clause.key for clause in present_clauses(state.contract)}
    keep = []
    looked: set[int] = set()  # the items of one test function share its fixture info: looked at once
    for item in items:
        marker = item.get_closest_marker("gpuaccept")
        if marker is not None:
            clause = marker.args[0]
            if clause not in present:
                continue  # a user's test of a clause the contract lacks (its class marked): not made, as above
            info = id(getattr(item, "_fixtureinfo", item))
            if info not in looked:
                looked.add(info)
                state.foreign_code += _foreign_fixtures(item)
            test = f"suites/{item.path.name}::{item.name}"
            item.user_properties.append((ITEM_PROPERTY, json.dumps({"clause": clause, "subject": _subject(item), "test": test})))
        keep.append(item)
    # The clauses judged on readings taken after the run's last measurement run last (clauses/errors.py)
    from .clauses.registry import AFTER_RUN

    late = [getattr(item.get_closest_marker("gpuaccept"), "args", ("",))[0] in AFTER_RUN for item in keep]
    items[:] = [item for item, after in zip(keep, late) if not after] + [item for item, after in zip(keep, late) if after]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Before the first test, and so before any measurement: the readings the run is judged against at its end
    (the error counters, clauses/errors.py). In the controller only: xdist's workers read them from the evidence."""
    state = _state(session.config)
    if state is None or not state.is_controller or session.config.option.collectonly:
        return
    from .clauses.registry import BEFORE_RUN

    for take in BEFORE_RUN:
        take(state)
