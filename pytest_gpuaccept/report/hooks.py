"""The report's pytest plugin: collects each test's Check (on the xdist controller or the only process), judges
the run at the session's end, writes the results, and seals the bundle once pytest-html wrote the page."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import xml_key

from .. import __version__
from ..bundle import RESULTS_COPY, evidence_digest, write_manifest
from ..i18n import DEFAULT, language, tr
from ..probes._run import last_line
from ..state import State
from ..verdict import Check, Outcome, Verdict
from .collect import audit_code, environment, fallback, judged
from .page import banner
from .results import Results, json_chunks, root_cause, shown_message, verdict_line, write_chunks
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
                                 environment(session.config), language(self.config)))

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
        pytest's short summary of the shipped tests folded to one line per clause (`-r f` and `-r E` are given back
        for the user's own tests only); where the run's files are. The verdict is the terminal's end
        (pytest_unconfigure)."""
        cause = root_cause(self.results) if self.results is not None else ""
        if cause:
            terminalreporter.write_line(tr(language(self.config), TOP_CAUSE, cause=cause), red=True, bold=True)
        asked = terminalreporter.reportchars
        if self.results is not None:
            terminalreporter.reportchars = asked.replace("f", "").replace("E", "")
        try:
            return (yield)
        finally:
            terminalreporter.reportchars = asked
            if self.results is not None:
                self._summary(terminalreporter, self.results, asked)

    def _summary(self, terminalreporter: Any, results: Results, asked: str) -> None:
        lang = language(self.config)
        summary = not getattr(self.config.option, "no_summary", False) and ("f" in asked or "E" in asked)
        lines = folded(results.checks, lang) if summary else []
        for char, stat, word in (("f", "failed", "FAILED"), ("E", "error", "ERROR")):  # the user's own tests'
            if summary and char in asked:
                lines += [f"{word} {report.nodeid}{_crash(report)}" for report in terminalreporter.stats.get(stat, [])
                          if item_of(report) is None]
        if lines:
            terminalreporter.write_sep("=", tr(lang, SUMMARY_TITLE), red=True, bold=True)
            for line in lines:
                terminalreporter.write_line(line)
        terminalreporter.write_line(f"results: {self.state.json_path}")
        terminalreporter.write_line(f"evidence: {self.state.evidence_dir} (evidence digest {self.manifest_digest})")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After pytest-html wrote the report: seal the bundle, and make the verdict the terminal's last line."""
        if self.results is None:
            return
        state, results = self.state, self.results
        compact_report(state.report_path, language(config))
        write_manifest(state.evidence_dir, [state.report_path, state.json_path, Path(state.contract.path).resolve()], {
            "verdict": results.verdict, "mode": state.mode, "gpuaccept": __version__,
            "recorded": _recorded(results, state.started)})
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            accepted = results.verdict == "accepted"
            for line in ending(results, state.report_path, language(config)):
                terminal.write_line(line, bold=True, green=accepted, red=not accepted)
            terminal.write_line(verdict_line(results, language(config)), bold=True, green=accepted, red=not accepted)


MESSAGE_CHARS = 160  # of a clause's first failure, on its folded line

# The English templates of the terminal's verdict lines, each given to i18n.tr (its catalogs are checked against
# TEMPLATES): the folded summary's title and lines, the counts, the one cause, the report's path, and their words.
SUMMARY_TITLE = "gpuaccept: what failed, one line per clause"
FOLDED = ("{word} {clause}: {bad} of {total} subject (first: {subject}: {message})",
          "{word} {clause}: {bad} of {total} subjects (first: {subject}: {message})")
COUNTS = "gpuaccept: {verdict}{incomplete}: {passed} passed, {failed} failed, {not_measured} not measured"
ROOT_CAUSE = "gpuaccept root cause: {cause}"
TOP_CAUSE = "gpuaccept: {cause}"  # the same cause, above pytest's failures
FIRST = {Outcome.FAILED: "gpuaccept first failure: {clause} {subject}: {message}",
         Outcome.NOT_MEASURED: "gpuaccept first not measured: {clause} {subject}: {message}"}
REPORT = "gpuaccept report: {path}"
WORDS = ("FAILED", "NOT MEASURED", "ACCEPTED", "REJECTED", ", INCOMPLETE")
TEMPLATES = (SUMMARY_TITLE, *FOLDED, COUNTS, ROOT_CAUSE, TOP_CAUSE, *FIRST.values(), REPORT, *WORDS)


def folded(checks: Iterable[Check], lang: str = DEFAULT) -> list[str]:
    """pytest's FAILED lines of the shipped tests, one line per clause in the order judged: how many of its subjects
    failed or were not measured, and the first of them (`FAILED gpus.model: 8 of 8 subjects (first: GPU0: ...)`)."""
    clauses: dict[str, list[Any]] = {}  # clause: [subjects, not passed, the first not passed, any failed]; checks
    for check in checks:                 # are counted as they stream past (a cluster's are never all held)
        seen = clauses.setdefault(check.clause, [0, 0, None, False])
        seen[0] += 1
        if check.outcome is not Outcome.PASSED:
            seen[1] += 1
            seen[2] = seen[2] or check
            seen[3] = seen[3] or check.outcome is Outcome.FAILED
    lines = []
    for clause, (total, bad, first, failed) in clauses.items():
        if not bad:
            continue
        message = shown_message(first)
        message = message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS - 3] + "..."
        lines.append(tr(lang, FOLDED[total != 1], word=tr(lang, "FAILED" if failed else "NOT MEASURED"), clause=clause, bad=bad,
                        total=total, subject=first.subject, message=message))
    return lines


def _crash(report: pytest.TestReport) -> str:
    """` - ` and the first line of why a user's own test failed, as pytest's short summary gives it."""
    message = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
    return f" - {message.splitlines()[0][:MESSAGE_CHARS]}" if message else ""


def ending(results: Results, report: Path, lang: str = DEFAULT) -> list[str]:
    """The terminal's last lines above the verdict line: the counts, the one cause (the source every check needed,
    where one was missing; else the first failure), and the report's path."""
    counts = results.counts()
    lines = [tr(lang, COUNTS, verdict=tr(lang, results.verdict.upper()), incomplete="" if results.complete else tr(lang, ", INCOMPLETE"),
                passed=counts[Outcome.PASSED], failed=counts[Outcome.FAILED],
                not_measured=counts[Outcome.NOT_MEASURED])]
    cause = root_cause(results)
    if cause:
        lines.append(tr(lang, ROOT_CAUSE, cause=cause))
    else:
        first = next((c for c in results.checks if c.outcome is Outcome.FAILED), None) or \
            next((c for c in results.checks if c.outcome is Outcome.NOT_MEASURED), None)
        if first is not None:
            lines.append(tr(lang, FIRST[first.outcome], clause=first.clause, subject=first.subject,
                            message=last_line(shown_message(first), 300)))
    lines.append(tr(lang, REPORT, path=report))
    return lines


def _recorded(results: Results, started: str) -> dict[str, Any]:
    """Whose run the bundle is, and its mode: a replay's bundle keeps the mode of the run it replayed (a replay
    of a simulated run stays simulated)."""
    if results.mode == "replay" and results.recorded:
        return dict(results.recorded)
    return {"host": results.host.get("hostname", ""), "started": started, "finished": results.finished,
            "mode": results.mode}
