"""The report: results JSON, evidence manifest, and the pytest-html banner, table columns and extras."""

from __future__ import annotations

import functools
import hashlib
import html
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from . import __version__, charts
from .bundle import CONTRACT_COPY, MANIFEST, RESULTS_COPY, evidence_digest, write_manifest
from .clauses import cluster, p2p, registry
from .evidence import Evidence, ForeignEvidence
from .integrity import loaded_plugins, replaced_code
from .probes._run import last_line
from .probes.nvml import Host
from .state import State, now
from .units import human_bytes
from .verdict import NOT_MEASURED_PREFIX, Outcome, Verdict, verdict_of

# Checks travel as plain dicts (JSON, xdist, JUnit): their outcome is the Outcome's value.
PASSED, FAILED, NOT_MEASURED = Outcome.PASSED.value, Outcome.FAILED.value, Outcome.NOT_MEASURED.value

PLUGINS_FILE = "plugins.json"
CHECK_PROPERTY = "gpuaccept_check"
ITEM_PROPERTY = "gpuaccept_item"
RAW_SHOWN_BYTES = 16 * 1024  # of each raw output, shown once in the report; the evidence file keeps every byte
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def safe_text(text: str, limit: int | None = None) -> str:
    """Escape for HTML, make control bytes (ANSI escapes, NUL) visible, and bound the length."""
    cut = ""
    if limit is not None and len(text) > limit:
        cut = f"\n[... {len(text) - limit} more characters in the evidence file]"
        text = text[:limit]
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return html.escape(text + cut)


def _props(report: pytest.TestReport, name: str) -> dict[str, Any] | None:
    """A property gpuaccept set on a test: stored as JSON text, so that the JUnit file carries it readable."""
    for key, value in getattr(report, "user_properties", ()):
        if key == name:
            return dict(_decoded(value)) if isinstance(value, str) else dict(value)
    return None


@functools.lru_cache(maxsize=256)
def _decoded(text: str) -> dict[str, Any]:
    """A property's JSON, decoded once: each test's three reports are read by four hooks. Callers copy it."""
    return dict(json.loads(text))


def junit_properties(check: dict[str, Any]) -> list[tuple[str, str]]:
    """The check as JUnit testcase properties: one JSON document, and each fact on its own (no Python repr)."""
    measured = check.get("measured")
    return [(CHECK_PROPERTY, json.dumps(check, sort_keys=True, default=str))] + [
        (f"gpuaccept_{key}", "" if value is None else str(value)) for key, value in (
            ("clause", check["clause"]), ("subject", check["subject"]), ("outcome", check["outcome"]),
            ("measured", measured), ("unit", check.get("unit")), ("required", check.get("required")),
            ("threshold", check.get("threshold")))]


_ENCODER = json.JSONEncoder(default=str)  # one encoder for every line: a cluster's results have 100,000


def json_lines(document: dict[str, Any]) -> str:
    """The results as JSON a person can grep: a key per line, and a list of objects (checks, tools) an object
    per line. json.dumps with indent runs Python's own encoder, 0.1 s for an 8-GPU run; this is the C one."""
    encode = _ENCODER.encode
    parts = []
    for key, value in document.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            inner = ",\n  ".join(map(encode, value))
            parts.append(f"{encode(key)}: [\n  {inner}\n ]")
        else:
            parts.append(f"{encode(key)}: {encode(value)}")
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def host_summary(host: Host) -> dict[str, Any]:
    """The `host` object of the results: informational, what could be read."""
    summary: dict[str, Any] = {
        "hostname": host.hostname, "driver": host.driver, "cuda": host.cuda,
        "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "serial": g.serial} for g in host.gpus],
    }
    if host.error:
        summary["error"] = host.error
    return summary


class ReportPlugin:
    """Collects the checks (on the xdist controller or the only process) and writes the results."""

    def __init__(self, state: State, config: pytest.Config) -> None:
        self.state = state
        self.config = config
        self.results: dict[str, Any] | None = None
        self.manifest_digest = ""
        self.other_failures = 0

    # -------------------------------------------------------------- collecting checks

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.state.is_controller or (report.passed and report.when != "call"):
            return  # a passed setup or teardown judges nothing
        item = _props(report, ITEM_PROPERTY)
        if item is None:
            if report.failed:
                self.other_failures += 1  # a user's own test: its failure rejects the run too
            return
        key = (item["clause"], item["subject"])
        check = _props(report, CHECK_PROPERTY)
        if check is not None and report.when == "call":
            check = dict(check)
            if report.failed and check["outcome"] == PASSED:
                check["outcome"] = FAILED
                check["message"] += f" (but the test failed: {last_line(report.longreprtext, 300)})"
        elif report.when == "call" and report.passed and key not in self.state.checks:
            check = Verdict(item["clause"], item["subject"]).not_measured(
                "the test passed without judging a measurement (gpuaccept_judge was never called)").to_dict()
        elif report.failed and key not in self.state.checks:
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
            reason = last_line(crash, 300) or last_line(report.longreprtext, 300) or f"the test failed in {report.when}"
            check = Verdict(item["clause"], item["subject"]).not_measured(f"crashed in {report.when}: {reason}").to_dict()
        else:
            return
        check["test"] = item["test"]
        self.state.checks[(check["clause"], check["subject"])] = check

    # -------------------------------------------------------------- pytest-html

    # A row is one check: result, test, clause, subject, measured, required. Duration and links say nothing
    # about a check (the run records keep durations); 253 rows of them were a fifth of a report's bytes.
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        del cells[2:]
        cells += ['<th class="sortable" data-column-type="clause">Clause</th>', "<th>Subject</th>",
                  "<th>Measured</th>", "<th>Required</th>"]

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        if report.passed and report.when != "call":
            return  # pytest-html shows a passed setup or teardown nowhere
        item = _props(report, ITEM_PROPERTY) or {}
        check = self.state.checks.get((item.get("clause", ""), item.get("subject", ""))) or {}
        measured = check.get("measured")
        shown = "—" if measured is None else f"{measured} {check.get('unit') or ''}".strip()
        del cells[2:]
        cells += [f'<td class="col-clause">{safe_text(str(item.get("clause", "")))}</td>',
                  f"<td>{safe_text(str(item.get('subject', '')))}</td>", f"<td>{safe_text(shown)}</td>",
                  f"<td>{safe_text(str(check.get('required', '')))}</td>"]

    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        """A check's detail (what opens under its row) is its message, facts and links; pytest's own log is
        kept below it only where the test crashed."""
        if report.when != "call" and report.passed:
            return  # pytest-html shows a passed setup or teardown nowhere
        item = _props(report, ITEM_PROPERTY)
        check = self.state.checks.get((item["clause"], item["subject"])) if item else None
        if check is not None:
            crashed = check["message"].removeprefix(NOT_MEASURED_PREFIX).startswith("crashed")
            data[:] = [check_html(self.state.runner.evidence, check), *(data if crashed else [])]

    def pytest_html_report_title(self, report: Any) -> None:
        report.title = f"GPU acceptance: {self.state.contract.vendor}"

    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str],
                                    session: pytest.Session) -> None:
        if self.results is not None:
            prefix.append(banner(self.results, self.state.runner.evidence, self.manifest_digest,
                                 _environment(session.config)))

    # -------------------------------------------------------------- the verdict

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.state.is_controller or session.config.option.collectonly:
            return  # collecting measures nothing, so it judges nothing
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
        try:
            self.results = self.finish(interrupted)
        except Exception as exc:  # the verdict must survive a bug of ours: rejected, incomplete, and why
            self.results = self.fallback(exc)
        self._junit(session.config, self.results)
        if self.results["verdict"] != "accepted" and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.results["verdict"] == "accepted" and session.exitstatus != pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def finish(self, interrupted: bool) -> dict[str, Any]:
        """Judge what was asked and never checked, write results and manifest; return the results."""
        state = self.state
        expected = [(clause, str(subject)) for clause, subject in registry.expected_checks(state.contract, state.listings)]
        complete = not interrupted
        for clause, subject in expected:
            if (clause, subject) not in state.checks:
                complete = False
                reason = "interrupted before it ran" if interrupted else "did not run (deselected, or the run stopped early)"
                state.checks[(clause, subject)] = {**Verdict(clause, subject).not_measured(reason).to_dict(), "test": ""}
        order = {key: n for n, key in enumerate(expected)}
        checks = sorted(state.checks.values(), key=lambda c: order.get((c["clause"], c["subject"]), len(order)))
        hosts = None
        if cluster.SECTION.get(state.contract) is not None and state.contract.node is None:
            from .cluster.summary import merge_cluster

            checks, hosts = merge_cluster(checks, self._node_results(checks))
        for check in checks:
            if not check.get("details"):
                check.pop("details", None)
        evidence = state.runner.evidence
        # What the run writes itself goes in first (a planted file of the same name is moved aside).
        evidence.write(CONTRACT_COPY, state.contract.raw)  # the bytes that were judged, not the file now
        plugins = loaded_plugins(self.config.pluginmanager.list_name_plugin(), _distributions(self.config))
        evidence.write(PLUGINS_FILE, json.dumps(plugins, indent=1).encode())
        results_copy = evidence.claim(RESULTS_COPY)
        foreign = evidence.foreign()  # anything the runner did not write, or that changed since: never trusted
        foreign_code = sorted(set(state.foreign_code + replaced_code()))
        verdict = verdict_of(checks, complete)
        if self.other_failures or foreign or foreign_code:
            verdict = "rejected"
        contract = state.contract
        results = {
            "gpuaccept": 1,
            "verdict": verdict,
            "mode": state.mode,
            "complete": complete,
            "started": state.started,
            "finished": now(),
            "contract": {"path": contract.path, "sha256": contract.sha256, "vendor": contract.vendor,
                         "reference": contract.reference},
            "host": host_summary(state.host()),
            "checks": checks,
            "not_in_contract": registry.not_in_contract(contract),
            "report": str(state.report_path),
            "evidence": str(state.evidence_dir),
            "tool_version": __version__,
        }
        if contract.node is not None:
            # One node of a cluster contract, judged on its own sections: never the cluster's verdict.
            results["cluster_node"] = contract.node
        if hosts is not None:
            results["hosts"] = hosts
        if state.runner.replay_dir is not None:
            results["replayed_from"] = str(state.runner.replay_dir)
            results["recorded"] = recorded_identity(state.runner.replay_dir)
        if self.other_failures:
            results["other_failures"] = self.other_failures
        if foreign:
            results["foreign_evidence"] = foreign
        if foreign_code:
            results["foreign_code"] = foreign_code
        results["plugins"] = plugins
        results["tools"] = tools_run(evidence)
        if state.advice:
            results["contract_warnings"] = state.advice
        self._publish(json_lines(results), results_copy)
        return results

    def _node_results(self, checks: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
        """Each node of a cluster run: its results, read from its sealed bundle (None where none came back)."""
        from .cluster import merge
        from .cluster.run import RESULTS

        found: dict[str, dict[str, Any] | None] = {}
        for check in checks:
            if check["clause"] != merge.NODES_CLAUSE or check["subject"] == "cluster":
                continue
            details = check.get("details") or {}
            results = None
            if details.get("evidence_folder") and "node_verdict" in details:
                try:
                    raw = self.state.runner.evidence.read(f"{details['evidence_folder']}/{RESULTS}")
                    results = json.loads(raw) if raw else None
                except (ForeignEvidence, ValueError):
                    results = None
            found[str(check["subject"])] = results
        return found

    def fallback(self, exc: Exception) -> dict[str, Any]:
        """Results written when judging itself crashed: never accepted."""
        contract = self.state.contract
        results = {
            "gpuaccept": 1, "verdict": "rejected", "complete": False, "started": self.state.started,
            "finished": now(), "contract": {"path": contract.path, "sha256": contract.sha256,
                                            "vendor": contract.vendor, "reference": contract.reference},
            "host": {}, "checks": list(self.state.checks.values()),
            "error": f"pytest-gpuaccept failed while judging: {type(exc).__name__}: {exc}",
        }
        self._publish(json_lines(results), self.state.runner.evidence.claim(RESULTS_COPY))
        return results

    def _publish(self, text: str, results_copy: Path) -> None:
        """Write the results and their copy in the evidence (its path claimed before), close the seals, digest."""
        write_atomic(self.state.json_path, text)
        self.state.runner.evidence.close()
        results_copy.write_text(text)
        self.manifest_digest = evidence_digest(self.state.evidence_dir)

    def _junit(self, config: pytest.Config, results: dict[str, Any]) -> None:
        """The JUnit file carries the verdict, mode and contract digest as testsuite properties."""
        from _pytest.junitxml import xml_key

        xml = config.stash.get(xml_key, None)
        if xml is not None:
            for name, value in (("gpuaccept_verdict", results["verdict"]), ("gpuaccept_mode", results.get("mode", "live")),
                                ("gpuaccept_complete", str(results["complete"]).lower()),
                                ("gpuaccept_contract_sha256", self.state.contract.sha256)):
                xml.add_global_property(name, value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.results is None:
            return
        counts = {o: sum(c["outcome"] == o for c in self.results["checks"]) for o in (PASSED, FAILED, NOT_MEASURED)}
        word = self.results["verdict"].upper()
        incomplete = "" if self.results["complete"] else ", INCOMPLETE"
        terminalreporter.write_sep(
            "=", f"gpuaccept: {word}{incomplete}: {counts[PASSED]} passed, {counts[FAILED]} failed, "
                 f"{counts[NOT_MEASURED]} not measured", green=word == "ACCEPTED", red=word != "ACCEPTED", bold=True)
        terminalreporter.write_line(f"results: {self.state.json_path}")
        terminalreporter.write_line(f"evidence: {self.state.evidence_dir} (evidence digest {self.manifest_digest})")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After pytest-html wrote the report: seal the bundle, and make the verdict the terminal's last line."""
        if self.results is None:
            return
        state = self.state
        compact_report(state.report_path)
        write_manifest(state.evidence_dir, [state.report_path, state.json_path, Path(state.contract.path).resolve()], {
            "verdict": self.results["verdict"], "mode": state.mode, "gpuaccept": __version__,
            "recorded": {"host": self.results.get("host", {}).get("hostname", ""), "started": state.started,
                         "finished": self.results.get("finished")}})
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(verdict_line(self.results), bold=True,
                                green=self.results["verdict"] == "accepted", red=self.results["verdict"] != "accepted")


_BLOB = re.compile(r'data-jsonblob="([^"]*)"')


def compact_report(path: Path) -> None:
    """pytest-html writes its rows as JSON in a double-quoted attribute, so every quote of the JSON costs five
    bytes (&#34;), and every < and > four: the escaped blob was 1.7 times the JSON. In a single-quoted
    attribute only & and ' need escaping; < is escaped too, so that no tag, not even an inert one, is in
    the page's bytes. The blob is decoded by undoing markupsafe's five escapes (pytest-html's template's),
    and used only where escaping the decoded text again gives back exactly what pytest-html wrote (so the
    browser decodes both to the same JSON); anything unexpected leaves the report as pytest-html wrote it.
    (str.replace, not html.unescape: that calls back into Python for each of the blob's tens of thousands
    of entities.)"""
    try:
        page = path.read_text()
    except (OSError, UnicodeDecodeError):
        return
    found = list(_BLOB.finditer(page))
    if len(found) != 1:
        return
    written = found[0].group(1)
    blob = (written.replace("&#34;", '"').replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">")
            .replace("&amp;", "&"))
    if _escaped(blob) != written:
        return
    compact = blob.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;")
    match = found[0]
    write_atomic(path, f"{page[:match.start()]}data-jsonblob='{compact}'{page[match.end():]}")


def _escaped(text: str) -> str:
    """markupsafe.escape's five escapes (what pytest-html's template applies to the blob)."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")
            .replace("'", "&#39;"))


def verdict_line(results: dict[str, Any]) -> str:
    """The one line a script or a person reads last: verdict, completeness and mode when not live."""
    word = results["verdict"].upper() + ("" if results.get("complete") else " (INCOMPLETE)")
    node = (f" [NODE {results['cluster_node']} of a cluster contract: its own sections only, not the cluster's "
            "verdict]" if results.get("cluster_node") else "")
    return (f"gpuaccept verdict: {word}" + (f" [{mode_label(results)}]" if results.get("mode", "live") != "live" else "")
            + node)


def mode_label(results: dict[str, Any]) -> str:
    """How a run that was not measured live says so, next to its verdict."""
    mode = results.get("mode", "live")
    if mode == "replay":
        recorded = results.get("recorded") or {}
        return (f"REPLAY of host {recorded.get('host') or 'unnamed'} recorded {recorded.get('started') or 'at an unknown time'}:"
                " judged from a bundle, not measured now")
    if mode == "simulated":
        return "SIMULATED: NVML readings from a recording, not from this host's driver"
    return "LIVE"


def recorded_identity(replay_dir: Path) -> dict[str, Any]:
    """Whose host a replayed bundle recorded, and when (from its manifest, which verified)."""
    try:
        recorded: dict[str, Any] = json.loads((replay_dir / MANIFEST).read_text()).get("recorded", {})
        return recorded
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------ HTML

def tools_run(evidence: Evidence) -> list[dict[str, Any]]:
    """Every executable this run started, once each, with its provenance and what a signer should look at twice."""
    from .probes.provenance import flags

    seen: dict[str, dict[str, Any]] = {}
    for path in sorted(evidence.folder.glob("*.json")):
        if not path.with_suffix(".txt").is_file():
            continue  # a reading (NVML, sysfs), not a run record: a run keeps its output as <key>.txt
        try:
            raw = evidence.read(path.name)
            record = json.loads(raw) if raw else None
        except (ForeignEvidence, ValueError):
            continue
        origin = record.get("provenance") if isinstance(record, dict) else None
        if isinstance(origin, dict) and origin.get("resolved") and origin["resolved"] not in seen:
            tool = str(origin.get("tool", ""))
            seen[origin["resolved"]] = {**origin, "flags": flags(origin, expects_binary=tool != "python")}
    return list(seen.values())


def _distributions(config: pytest.Config) -> dict[int, str]:
    """name==version of each plugin's distribution, by id(plugin)."""
    return {id(plugin): _name_version(dist) for plugin, dist in config.pluginmanager.list_plugin_distinfo()}


def _name_version(dist: Any) -> str:
    """name==version of an importlib.metadata distribution (pluggy hands it over as a DistFacade)."""
    return f"{dist.metadata['Name']}=={dist.version}"


def _environment(config: pytest.Config) -> dict[str, Any]:
    """pytest-metadata's table (Python, platform, plugins of the machine that judged): moved to the end."""
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return {}
    return dict(config.stash.get(metadata_key, {}))


def raw_anchor(name: str) -> str:
    return "raw-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def raw_outputs(evidence: Evidence, checks: list[dict[str, Any]]) -> str:
    """Every tool output and reading the checks used, once each, in the order first used; bounded and escaped.
    Not printed (the print stylesheet hides it): the evidence folder holds every byte."""
    # A cluster node's outputs stay in its own bundle and report (nodes/<node>/): linked, not repeated here.
    names = list(dict.fromkeys(n for c in checks if "node" not in c for n in c.get("evidence", [])
                               if not n.endswith(".json") or n == "nvml-host.json"))
    parts = []
    shown: dict[str, str] = {}  # SHA-256 of what is shown: the name it is shown under
    for name in names:
        try:
            raw = evidence.read(name)
        except ForeignEvidence as exc:
            parts.append(f'<h4 id="{raw_anchor(name)}">{safe_text(name)}</h4><p><b>not shown: {safe_text(str(exc))}</b></p>')
            continue
        digest = hashlib.sha256(raw or b"").hexdigest()
        if digest in shown and (raw or b"").strip():
            # e.g. the error counters after the load, unchanged from before: the same bytes are shown once
            same = shown[digest]
            parts.append(f'<h4 id="{raw_anchor(name)}">{safe_text(name)}</h4><p>byte for byte the same as '
                         f'<a href="#{raw_anchor(same)}">{safe_text(same)}</a></p>')
            continue
        shown[digest] = name
        text = (raw or b"")[: RAW_SHOWN_BYTES * 2].decode("utf-8", errors="replace")
        body = f"<pre>{safe_text(text, RAW_SHOWN_BYTES)}</pre>" if text.strip() else "<p>(empty)</p>"
        parts.append(f'<h4 id="{raw_anchor(name)}">{safe_text(name)}</h4>{body}')
    return (f'<div class="gpuaccept-raw"><h3>Raw tool outputs ({len(names)}, each shown once)</h3>{"".join(parts)}</div>'
            if parts else "")


def check_html(evidence: Evidence, check: dict[str, Any]) -> str:
    """One check's detail, as lines of text: its message, its facts, where its charts are, links to the raw
    output behind it. Clause, subject, measured, required and outcome are the row's own cells. Small on
    purpose: pytest-html keeps every row's detail in the page's JSON."""
    details = check.get("details", {})
    facts = [(k, v) for k, v in sorted(details.items()) if isinstance(v, (str, int, float))]  # e.g. qps, port
    lines = [safe_text(check["message"], 2000)]
    if facts:
        lines.append(" · ".join(f"{safe_text(k)}: {safe_text(str(v))}" for k, v in facts))
    if details.get("throttle_reasons_seen"):
        lines.append(f"clock event reasons seen: {safe_text(', '.join(details['throttle_reasons_seen']))}")
    if _measured_in_detail(check):
        lines.append(f"charts and tables: <a href=#{measurement_anchor(check)}>in the summary</a>")
    links = []
    for name in dict.fromkeys(check.get("evidence", [])):
        # Each raw output is shown once, in the report's "Raw tool outputs"; a check links to it.
        if name.endswith(".json") and name != "nvml-host.json":
            continue  # the run record; its executable's provenance is in "Tools run", once per executable
        if name.endswith(".stderr.txt") and evidence.captured_empty(name):
            continue  # an empty stderr says nothing; the evidence folder keeps it
        links.append(f"<a href=#{raw_anchor(name)}>{safe_text(name)}</a>")
    if links:
        lines.append(f"raw output: {', '.join(links)}")
    return "\n".join(lines) + "\n"


def _measured_in_detail(check: dict[str, Any]) -> bool:
    details = check.get("details") or {}
    return bool(details.get("each") or details.get("tables") or "timeline" in details)


def measurement_anchor(check: dict[str, Any]) -> str:
    return "m-" + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{check['clause']}-{check['subject']}")


def _timelines(group: list[dict[str, Any]], evidence: Evidence | None, samples: dict[str, dict[int, Any] | str]
               ) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Each check's timeline with its rows, read from the sealed samples file it names (each file read once), and
    a line for each that could not be drawn."""
    from .clauses.utilisation import timeline_rows
    from .probes import nvml

    drawn, unread = [], []
    for check in group:
        timeline = check["details"]["timeline"]
        name = str(timeline.get("samples") or "")
        if name not in samples:
            try:
                recording = evidence.read_json(name) if evidence is not None and name else None
                samples[name] = {s.index: s for s in nvml.parse_samples(recording)} if recording is not None else \
                    f"{name or 'the samples file'} is not in the evidence"
            except (ForeignEvidence, ValueError) as exc:
                samples[name] = f"{name} cannot be read: {exc}"
        found = samples[name]
        series = found.get(timeline.get("gpu")) if isinstance(found, dict) else None
        if series is None:
            unread.append(f"{check['subject']}: no timeline drawn: "
                          + (found if isinstance(found, str) else f"GPU{timeline.get('gpu')} is not in {name}"))
            continue
        drawn.append((str(check["subject"]), {**timeline, "rows": timeline_rows(series)}))
    return drawn, unread


def measurements(checks: list[dict[str, Any]], evidence: Evidence | None) -> str:
    """Charts and tables, once, printed: every timeline of a clause in one set of charts (a line per subject),
    then each check's own tables (the all_reduce sweep with its chart, the per-subject results of a check)."""
    parts = []
    by_clause: dict[str, list[dict[str, Any]]] = {}
    checks = [c for c in checks if "node" not in c]  # a cluster node's charts are in its own report
    for check in checks:
        if "timeline" in (check.get("details") or {}):
            by_clause.setdefault(check["clause"], []).append(check)
    samples: dict[str, dict[int, Any] | str] = {}
    for clause, group in by_clause.items():
        anchors = "".join(f"<span id={measurement_anchor(c)}></span>" for c in group)
        drawn, unread = _timelines(group, evidence, samples)
        parts.append(f"<h4>{anchors}{safe_text(clause)}: {len(group)} timelines</h4>" + charts.timeline_charts(drawn)
                     + "".join(f"<p>{safe_text(line)}</p>" for line in unread))
    for check in checks:
        details = check.get("details") or {}
        if not (details.get("each") or details.get("tables")):
            continue
        parts.append(f"<h4 id={measurement_anchor(check)}>{safe_text(check['clause'])} {safe_text(str(check['subject']))}</h4>")
        if details.get("each"):
            parts.append(_table([["subject", "outcome", "measured", "message"], *details["each"]]))
        for title, table in details.get("tables", []):
            threshold = check.get("threshold")
            chart = charts.busbw_chart(table, threshold) if threshold is not None else ""
            shown = table if not table or table[0][:1] != ["size (B)"] else \
                [["size", *table[0][1:]]] + [[human_bytes(row[0]), *row[1:]] for row in table[1:]]
            parts.append(f"<h4>{safe_text(title)}</h4>{chart}" + _table(shown))
    return f"<div class=gpuaccept-measurements><h3>Charts and tables</h3>{''.join(parts)}</div>" if parts else ""


_OUTCOME_CLASS = {PASSED: "gp", FAILED: "gf", NOT_MEASURED: "gn"}


def _cell(value: Any) -> str:
    css = _OUTCOME_CLASS.get(value) if isinstance(value, str) else None
    return (f"<td class={css}>" if css else "<td>") + safe_text(str(value))


def _table(rows: list[list[Any]]) -> str:
    """A plain table (its look in the report's stylesheet, class gt): cells close themselves (HTML5)."""
    head, *body = rows
    cells = "".join(f"<th>{safe_text(str(c))}" for c in head)
    lines = "".join("<tr>" + "".join(_cell(c) for c in row) for row in body)
    return f"<table class=gt><tr>{cells}{lines}</table>"


_ORDERED = re.compile(r"^GPU(\d+)->GPU(\d+)$")


MAP_NODES = 32  # a pair heat map up to this many nodes; above, the failing pairs are in the failure lines
LINK_ROWS = 200  # links listed in the links table; above, only those that did not pass


def cluster_maps(checks: list[dict[str, Any]]) -> str:
    """A cluster's pairs as a node x node heat map (each pair in both cells) and its links as a table."""
    from .clauses.cluster import LINKS, PAIRS

    pairs = [c for c in checks if c["clause"] == PAIRS.key and "+" in str(c["subject"])]
    links = [c for c in checks if c["clause"] == LINKS.key and "->" in str(c["subject"])]
    parts = []
    nodes = list(dict.fromkeys(n for c in pairs for n in str(c["subject"]).split("+")))
    if pairs and len(nodes) <= MAP_NODES:
        index = {n: i for i, n in enumerate(nodes)}
        cells: dict[tuple[int, int], tuple[float | None, str]] = {}
        for check in pairs:
            a, b = str(check["subject"]).split("+")
            value = check.get("measured")
            cell = (float(value) if isinstance(value, (int, float)) else None, str(check["outcome"]))
            cells[(index[a], index[b])] = cells[(index[b], index[a])] = cell
        parts.append(charts.heat_map("2-node all_reduce busbw between the nodes", cells, "GB/s", nodes,
                                     "each pair in both cells"))
    if links:
        shown = links if len(links) <= LINK_ROWS else [c for c in links if c["outcome"] != PASSED]
        rows = [["link", "outcome", "measured (Gb/s)", "required", "message"]] + [
            [c["subject"], c["outcome"], "—" if c.get("measured") is None else c["measured"], c.get("required") or "—",
             c["message"]] for c in shown]
        more = "" if shown is links else f" (the {len(shown)} of {len(links)} that did not pass)"
        parts.append(f"<h4>Links{more}</h4>{_table(rows)}")
    return "".join(parts)


def _p2p_map(checks: list[dict[str, Any]]) -> str:
    """The p2p checks as a GPU x GPU heat map: where a slow link or GPU sits shows at a glance."""
    cells: dict[tuple[int, int], tuple[float | None, str]] = {}
    for check in checks:
        match = _ORDERED.match(str(check.get("subject", ""))) if check.get("clause") == p2p.ONE_WAY.key else None
        if match:
            measured = check.get("measured")
            cells[(int(match.group(1)), int(match.group(2)))] = (
                float(measured) if isinstance(measured, (int, float)) else None, str(check["outcome"]))
    return charts.heat_map("GPU-to-GPU copy bandwidth", cells, "GB/s")


PRINT_CSS = """
#environment-header, #environment { display: none; }
.gpuaccept-first td, .gpuaccept-first th { padding: 1px 8px; text-align: left; vertical-align: top; }
.gpuaccept-fail { margin: 2px 0; }
.gt { border-collapse: collapse; } .gt td, .gt th { padding: 1px 8px; border-bottom: 1px solid #eee; text-align: left; }
.gh { border-collapse: collapse; } .gh td, .gh th { padding: 2px 6px; text-align: right; font-size: 11px; border: 1px solid #fff; }
.gc { background: #fff; border: 1px solid #ddd; margin: 4px; }
.gp { color: #1a7f37; font-weight: bold; } .gf { color: #cf222e; font-weight: bold; } .gn { color: #9a6700; font-weight: bold; }
.gpuaccept-sign td { padding: 18px 12px 2px 0; border-bottom: 1px solid #999; min-width: 150px; }
@page { size: A4; margin: 16mm 12mm; @top-center { content: "%(head)s"; font-size: 9pt; } }
@media print {
  .gpuaccept-raw, .controls, .filters, .summary__reload, .logwrapper, .extras-row, .gpuaccept-env,
  .summary__spacer, #results-table-head .sortable::after { display: none !important; }
  .gpuaccept-page-head { display: block !important; position: fixed; top: 0; right: 0; font-size: 8pt; }
  .gc { break-inside: avoid; }
  body { font-size: 9pt; }
  #results-table td, #results-table th { padding: 1px 4px; }
}
.gpuaccept-page-head { display: none; }
"""


MAX_SUBJECTS_SHOWN = 60  # in one failure line: a cluster's 1,000 nodes failing one way are one readable line
MAX_FAILURE_LINES = 300


def _line(check: dict[str, Any], subjects: list[str]) -> str:
    """One failure as a signer reads it: clause subject(s), measured vs required, the published share, why."""
    measured = "—" if check.get("measured") is None else f"{check['measured']} {check.get('unit') or ''}".strip()
    share = (check.get("details") or {}).get("fraction_of_published")
    published = f", {share:.0%} of published" if isinstance(share, (int, float)) else ""
    named = subjects[:MAX_SUBJECTS_SHOWN] + ([f"… {len(subjects) - MAX_SUBJECTS_SHOWN} more"]
                                             if len(subjects) > MAX_SUBJECTS_SHOWN else [])
    who = subjects[0] if len(subjects) == 1 else f"{', '.join(named)} ({len(subjects)})"
    return (f"<li class=gpuaccept-fail><b>{safe_text(check['clause'])} {safe_text(who)}</b>: "
            f"{safe_text(check['outcome'].replace('_', ' '))}, measured {safe_text(measured)}, required "
            f"{safe_text(str(check.get('required') or '—'))}{published} — "
            f"{safe_text(check['message'].removeprefix(NOT_MEASURED_PREFIX), 300)}")


def failure_lines(not_passed: list[dict[str, Any]]) -> list[str]:
    """A line per failure; checks of one clause that failed for the same reason with nothing measured (e.g.
    28 pairs of a matrix the tool never printed) share one line that names every subject."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for check in not_passed:
        key = ((check["clause"], check["outcome"], str(check.get("required")), check["message"])
               if check.get("measured") is None else (check["clause"], str(check["subject"])))
        groups.setdefault(key, []).append(check)
    lines = [_line(group[0], [str(c["subject"]) for c in group]) for group in list(groups.values())[:MAX_FAILURE_LINES]]
    if len(groups) > MAX_FAILURE_LINES:
        rest = sum(len(g) for g in list(groups.values())[MAX_FAILURE_LINES:])
        lines.append(f"<li class=gpuaccept-fail>… and {rest} more checks that did not pass: every one is in the "
                     "results file and, for a cluster's node, in that node's own report</li>")
    return lines


GRID_OPEN_ROWS = 50  # nodes shown in the open grid; the rest (all passing) fold into one line


def node_grid_html(checks: list[dict[str, Any]]) -> str:
    """A cluster run's node x clause grid: each cell passed/total, red where any check failed. Nodes with
    failures first; past GRID_OPEN_ROWS the all-passing nodes fold into a closed list of names."""
    from .cluster.merge import node_grid

    grid = node_grid(checks)
    if not grid:
        return ""
    clauses = list(dict.fromkeys(clause for row in grid.values() for clause in row))
    troubled = [n for n, row in grid.items() if any(c[1] or c[2] for c in row.values())]
    fine = [n for n in grid if n not in troubled]
    shown, folded = (troubled + fine[:max(0, GRID_OPEN_ROWS - len(troubled))],
                     fine[max(0, GRID_OPEN_ROWS - len(troubled)):])

    def cell(counts: list[int] | None) -> str:
        if counts is None:
            return "<td>—"
        css = "gp" if not (counts[1] or counts[2]) else "gf" if counts[1] else "gn"
        return f"<td class={css}>{counts[0]}/{sum(counts)}"

    head = "".join(f"<th>{safe_text(c)}" for c in clauses)
    def name(node: str) -> str:  # each node's own report (its checks, charts and raw outputs) is in the bundle
        return f'<a href="gpuaccept-evidence/nodes/{html.escape(node)}/gpuaccept-report.html">{safe_text(node)}</a>'

    rows = "".join(f"<tr><th>{name(n)}" + "".join(cell(grid[n].get(c)) for c in clauses) for n in shown)
    more = (f"<details><summary>{len(folded)} more nodes, every check passed</summary><p>"
            f"{safe_text(', '.join(folded))}</p></details>" if folded else "")
    return (f"<h3>Nodes ({len(grid)}: {len(troubled)} with checks that did not pass)</h3>"
            f"<table class=gt><tr><th>node{head}{rows}</table>{more}")


def per_clause_html(checks: list[dict[str, Any]]) -> str:
    rows: dict[str, list[int]] = {}
    for check in checks:
        counts = rows.setdefault(check["clause"], [0, 0, 0])
        counts[(PASSED, FAILED, NOT_MEASURED).index(check["outcome"])] += 1
    table = [["clause", "passed", "failed", "not measured"]] + [[clause, *counts] for clause, counts in rows.items()]
    return _table(table)


def banner(results: dict[str, Any], evidence: Evidence | None, digest: str,
           environment: dict[str, Any] | None = None) -> str:
    """The first screen is the verdict, who and what, and every check that did not pass (one line each);
    then a summary per clause, the signatures, and what an auditor needs: tools, raw outputs, environment."""
    verdict = results["verdict"].upper()
    color = "#1a7f37" if verdict == "ACCEPTED" else "#cf222e"
    host = results["host"]
    contract = results["contract"]
    models: dict[str, int] = {}
    for gpu in host.get("gpus", []):
        models[gpu["name"]] = models.get(gpu["name"], 0) + 1
    gpus = ", ".join(f"{n}x {name}" for name, n in models.items()) or "none"
    facts = [
        ("vendor", contract["vendor"]), ("reference", contract["reference"] or "—"),
        ("host", f"{host.get('hostname', '')}: {gpus}; driver {host.get('driver') or '—'}, CUDA {host.get('cuda') or '—'}"),
        ("contract", f"{contract['path']} (SHA-256 {contract['sha256']})"),
        ("run", f"{results['started']} to {results['finished']}"), ("evidence digest (SHA-256)", digest),
    ]
    if results.get("hosts") is not None:
        nodes = results["hosts"]
        good = sum(h.get("verdict") == "accepted" for h in nodes)
        facts[2] = ("cluster", f"{len(nodes)} nodes, {good} accepted on their own checks; the login node: "
                               f"{host.get('hostname', '')}")
    elif host.get("error"):
        facts.append(("NVML", host["error"]))
    if "replayed_from" in results:
        facts.append(("replayed from", results["replayed_from"]))
    rows = "".join(f"<tr><th>{k}</th><td>{safe_text(str(v))}</td></tr>" for k, v in facts)
    checks = results["checks"]
    counts = {o: sum(c["outcome"] == o for c in checks) for o in (PASSED, FAILED, NOT_MEASURED)}
    not_passed = [c for c in checks if c["outcome"] == FAILED] + [c for c in checks if c["outcome"] == NOT_MEASURED]
    failures = (f"<h3>Did not pass ({len(not_passed)})</h3><ul>{''.join(failure_lines(not_passed))}</ul>"
                if not_passed else "<p>Every check passed.</p>")
    incomplete = "" if results["complete"] else (
        "<p><b>INCOMPLETE RUN</b>: not every check ran (interrupted, crashed or deselected); the run is rejected.</p>")
    mode = "" if results.get("mode", "live") == "live" else f"<p><b>{safe_text(mode_label(results))}</b></p>"
    if results.get("cluster_node"):
        mode += (f"<p><b>NODE {safe_text(str(results['cluster_node']))} of a cluster contract</b>: judged on its own "
                 "sections only; the cluster's verdict is the login node's report.</p>")
    warnings = ""
    foreign = "".join(f"<li>{safe_text(line)}</li>" for line in results.get("foreign_evidence", []))
    if foreign:
        warnings += ("<p><b>FOREIGN FILES IN THE EVIDENCE FOLDER</b>: written by something other than this run, "
                     f"or changed after capture; never read, and the run is rejected:</p><ul>{foreign}</ul>")
    code = "".join(f"<li>{safe_text(line)}</li>" for line in results.get("foreign_code", []))
    if code:
        warnings += f"<p><b>FOREIGN CODE</b>: pytest-gpuaccept's own code was replaced; the run is rejected:</p><ul>{code}</ul>"
    advice = "".join(f"<li>{safe_text(line)}</li>" for line in results.get("contract_warnings", []))
    if advice:
        warnings += f"<p><b>Contract warnings</b> (not failures: the contract is the buyer's word):</p><ul>{advice}</ul>"
    tools = [["tool", "path", "SHA-256", "kind", "package", "verified", "look twice"]] + [
        [t.get("tool", ""), t.get("resolved", ""), t.get("sha256", "—"), t.get("kind", "—"),
         t.get("package") or t.get("package_note") or "—", {True: "yes", False: "CHANGED", None: "—"}[t.get("verified")],
         "; ".join(t.get("flags", [])) or "—"] for t in results.get("tools", [])]
    plugins = [["plugin", "file", "SHA-256", "from"]] + [
        [p["name"], p["file"], p["sha256"], p["distribution"]] for p in results.get("plugins", [])]
    env = [["key", "value"]] + [[k, json.dumps(v) if not isinstance(v, str) else v] for k, v in (environment or {}).items()]
    sign = "".join(f"<tr><th>{who}</th><td>name</td><td>role</td><td>date</td><td>signature</td></tr>"
                   for who in ("Buyer", "Vendor"))
    head = f"{verdict} · {contract['vendor']} · {contract['reference'] or contract['sha256'][:12]}"
    # Inside <style> nothing is decoded or escaped: the vendor's words reach CSS only as plain characters.
    css = PRINT_CSS % {"head": re.sub(r"[^A-Za-z0-9 ._:/()·+-]", "_", head)}
    gpu_ids = "".join(
        f"<li>GPU{g['index']}: {safe_text(g['name'])}, uuid {safe_text(g['uuid'])}, serial {safe_text(g['serial'] or 'n/a')}, "
        f"PCI {safe_text(g.get('pci_bus_id', ''))}</li>" for g in host.get("gpus", []))
    return (
        f"<style>{css}</style><div class=\"gpuaccept-page-head\">{safe_text(head)}</div>"
        f'<div id="gpuaccept-verdict" class="gpuaccept-first" data-verdict="{results["verdict"]}" '
        f'data-evidence-digest="{digest}" style="border:3px solid {color};padding:8px;margin:8px 0">'
        f'<h2 style="color:{color};margin:0">{verdict}</h2>{mode}{incomplete}'
        f"<p>{counts[PASSED]} passed, {counts[FAILED]} failed, {counts[NOT_MEASURED]} not measured "
        f"of {len(checks)} checks.</p><table>{rows}</table>"
        f'<div id="gpuaccept-failures">{failures}</div>{warnings}</div>'
        f"{node_grid_html(checks)}"
        f"<h3>Per clause</h3>{per_clause_html(checks)}"
        f"<p>Not in contract (not checked): {safe_text(', '.join(results.get('not_in_contract', [])) or 'none')}</p>"
        f"{_p2p_map(checks)}{cluster_maps(checks)}"
        f'<h3>Signatures</h3><table class="gpuaccept-sign">{sign}</table>'
        f"{'' if results.get('hosts') is not None else f'<h3>GPUs</h3><ul>{gpu_ids}</ul>'}"
        f"<h3>Tools run (provenance)</h3>{_table(tools) if len(tools) > 1 else '<p>none</p>'}"
        f"{measurements(checks, evidence)}"
        f"{raw_outputs(evidence, checks) if evidence is not None else ''}"
        f'<div class="gpuaccept-env"><h3>The auditor\'s environment</h3>{_table(env) if len(env) > 1 else ""}'
        f"<h4>Other plugins and conftest files loaded</h4>{_table(plugins) if len(plugins) > 1 else '<p>none</p>'}</div>"
        f"<h3>Every check</h3><p>The table below: one row per check, failures first; open a row for its "
        f"message, facts and links to its charts and raw output.</p>"
    )
