"""The report's pytest plugin: collects each test's Check (on the xdist controller or the only process), judges
the run at the session's end, writes the results, and seals the bundle once pytest-html wrote the page."""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import xml_key

from .. import __version__
from ..bundle import RESULTS_COPY, evidence_digest, write_manifest
from ..probes._run import last_line
from ..state import State
from ..verdict import Outcome, Verdict
from .collect import audit_code, environment, fallback, judged
from .page import banner
from .results import Results, json_chunks, root_cause, verdict_line, write_chunks
from .table import TableHooks, check_of, compact_report, item_of


class ReportPlugin(TableHooks):
    def __init__(self, state: State, config: pytest.Config) -> None:
        self.state = state
        self.config = config
        self.results: Results | None = None
        self.manifest_digest = ""
        self.other_failures = 0

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Foreign code is looked for before anything is measured (and again when the run is judged): what it finds
        rejects the run."""
        if self.state.is_controller:
            self.state.foreign_code += audit_code(self.state, self.config).findings

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.state.is_controller or (report.passed and report.when != "call"):
            return  # a passed setup or teardown judges nothing
        item = item_of(report)
        if item is None:
            self.other_failures += report.failed  # a user's own test: its failure rejects the run too
            return
        key, verdict = (item["clause"], item["subject"]), Verdict(item["clause"], item["subject"])
        check = check_of(report) if report.when == "call" else None
        if check is not None:
            if report.failed and check.outcome is Outcome.PASSED:
                check = replace(check, outcome=Outcome.FAILED, message=check.message
                                + f" (but the test failed: {last_line(report.longreprtext, 300)})")
        elif report.when == "call" and report.passed and key not in self.state.checks:
            check = verdict.not_measured("the test passed without judging a measurement (gpuaccept_judge was never called)")
        elif report.failed and key not in self.state.checks:
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
            reason = last_line(crash, 300) or last_line(report.longreprtext, 300) or f"the test failed in {report.when}"
            check = verdict.not_measured(f"crashed in {report.when}: {reason}")
        else:
            return
        self.state.checks[(check.clause, check.subject)] = replace(check, test=item["test"])

    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str],
                                    session: pytest.Session) -> None:
        if self.results is not None:
            prefix.append(banner(self.results, self.state.runner.evidence, self.manifest_digest,
                                 environment(session.config)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.state.is_controller or session.config.option.collectonly:
            return  # collecting measures nothing, so it judges nothing
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
        try:
            results, copy = judged(self.state, self.config, interrupted, self.other_failures)
        except Exception as exc:  # the verdict must survive a bug of ours: rejected, incomplete, and why
            results, copy = fallback(self.state, exc), self.state.runner.evidence.claim(RESULTS_COPY)
        self._publish(results, copy)
        self._junit(session.config, results)
        if (results.verdict == "accepted") != (session.exitstatus == pytest.ExitCode.OK):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _publish(self, results: Results, copy: Path) -> None:
        """Write the results and their copy in the evidence (its path claimed before), close the seals, digest."""
        self.results = results
        # Written in pieces, to both files in one pass: a cluster's checks are read one node at a time, never held.
        path = self.state.json_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as out, open(copy, "w") as sealed:
            write_chunks(json_chunks(results.document()), out, sealed)
        os.replace(tmp, path)
        self.state.runner.evidence.close()
        self.manifest_digest = evidence_digest(self.state.evidence_dir)

    def _junit(self, config: pytest.Config, results: Results) -> None:
        """The JUnit file carries the verdict, mode and contract digest as testsuite properties."""
        xml = config.stash.get(xml_key, None)
        if xml is not None:
            for name, value in (("gpuaccept_verdict", results.verdict), ("gpuaccept_mode", results.mode or "live"),
                                ("gpuaccept_complete", str(results.complete).lower()),
                                ("gpuaccept_contract_sha256", self.state.contract.sha256),
                                *((f"gpuaccept_source_{key}", value) for key, value in (results.sources or {}).items()),
                                *((("gpuaccept_recorded_mode", str(results.recorded.get("mode"))),)
                                  if results.recorded else ())):
                xml.add_global_property(name, value)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None]:
        """The root cause first, above pytest's failures (one line, where one source left the checks unmeasured);
        the verdict with its counts last, above pytest's own count."""
        cause = root_cause(self.results) if self.results is not None else ""
        if cause:
            terminalreporter.write_line(f"gpuaccept: {cause}", red=True, bold=True)
        try:
            return (yield)
        finally:
            if self.results is not None:
                self._summary(terminalreporter, self.results)

    def _summary(self, terminalreporter: Any, results: Results) -> None:
        counts = results.counts()
        word = results.verdict.upper()
        incomplete = "" if results.complete else ", INCOMPLETE"
        terminalreporter.write_sep(
            "=", f"gpuaccept: {word}{incomplete}: {counts[Outcome.PASSED]} passed, {counts[Outcome.FAILED]} failed, "
                 f"{counts[Outcome.NOT_MEASURED]} not measured", green=word == "ACCEPTED", red=word != "ACCEPTED", bold=True)
        terminalreporter.write_line(f"results: {self.state.json_path}")
        terminalreporter.write_line(f"evidence: {self.state.evidence_dir} (evidence digest {self.manifest_digest})")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After pytest-html wrote the report: seal the bundle, and make the verdict the terminal's last line."""
        if self.results is None:
            return
        state, results = self.state, self.results
        compact_report(state.report_path)
        write_manifest(state.evidence_dir, [state.report_path, state.json_path, Path(state.contract.path).resolve()], {
            "verdict": results.verdict, "mode": state.mode, "gpuaccept": __version__,
            "recorded": _recorded(results, state.started)})
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(verdict_line(results), bold=True,
                                green=results.verdict == "accepted", red=results.verdict != "accepted")


def _recorded(results: Results, started: str) -> dict[str, Any]:
    """Whose run the bundle is, and its mode: a replay's bundle keeps the mode of the run it replayed (a replay
    of a simulated run stays simulated)."""
    if results.mode == "replay" and results.recorded:
        return dict(results.recorded)
    return {"host": results.host.get("hostname", ""), "started": started, "finished": results.finished,
            "mode": results.mode}
