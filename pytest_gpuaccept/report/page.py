"""The report's own page above pytest-html's table: the verdict and every check that did not pass first, then a
summary per clause, each section's own part (looked up in the registry), signatures, and what an auditor needs.
Its stylesheet makes every text readable (WCAG AA, pytest-html's greys overridden) and prints the verdict
header once per page."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from ..charts import FAIL_RED, HEAT_TEXT, TEXT, safe_text, table
from ..clauses import registry
from ..evidence import Evidence
from ..verdict import Check, Outcome
from .details import measurements, raw_outputs
from .pairs import pairs_html
from .results import Results, mode_label, root_cause, shown_message

PASS_GREEN, UNMEASURED_AMBER, LINK_BLUE, MUTED = "#1a7f37", "#9a6700", "#0969da", "#57606a"

# pytest-html's own stylesheet greys the page (#999 on white is 2.8:1) and colours results orange and red
# (2.0:1 and 4.0:1): each of its rules that sets a text colour is set again here, with the same selector, after it.
READABLE_CSS = f"""
body, #results-table, .filters button, .collapse button {{ color: {TEXT}; }}
a, .filters button:hover, .collapse button:hover {{ color: {LINK_BLUE}; }}
span.passed, .passed .col-result {{ color: {PASS_GREEN}; }}
span.skipped, span.xfailed, span.rerun, .skipped .col-result, .xfailed .col-result, .rerun .col-result {{ color: {UNMEASURED_AMBER}; }}
span.error, span.failed, span.xpassed, .error .col-result, .failed .col-result, .xpassed .col-result {{ color: {FAIL_RED}; }}
.collapsible td:not(.col-links):hover::after, #environment-header h2:hover::after,
#environment-header.collapsed h2:hover::after {{ color: {MUTED}; }}
.summary__reload__button {{ color: #ffffff; background-color: {PASS_GREEN}; }}
.summary__reload__button:hover {{ color: #ffffff; background-color: #116329; }}
.gh td {{ color: {HEAT_TEXT}; }}
.gp {{ color: {PASS_GREEN}; font-weight: bold; }} .gf {{ color: {FAIL_RED}; font-weight: bold; }}
.gn {{ color: {UNMEASURED_AMBER}; font-weight: bold; }}
"""

LAYOUT_CSS = """
#environment-header, #environment { display: none; }
.gpuaccept-first td, .gpuaccept-first th { padding: 1px 8px; text-align: left; vertical-align: top; }
.gpuaccept-fail { margin: 2px 0; }
.gt { border-collapse: collapse; } .gt td, .gt th { padding: 1px 8px; border-bottom: 1px solid #eee; text-align: left; }
.gh { border-collapse: collapse; } .gh td, .gh th { padding: 2px 6px; text-align: right; font-size: 11px; border: 1px solid #fff; }
.gc { background: #fff; border: 1px solid #ddd; margin: 4px; }
.gpuaccept-sign td { padding: 18px 12px 2px 0; border-bottom: 1px solid #999; min-width: 150px; }
"""

# The verdict header of every printed page: one page margin box, nothing in the page's flow (a fixed element
# printed it a second time on each page).
PRINT_CSS = """
@page { size: A4; margin: 16mm 12mm; @top-center { content: "%(head)s"; font-size: 9pt; } }
@media print {
  .gpuaccept-raw, .controls, .filters, .summary__reload, .logwrapper, .extras-row, .gpuaccept-env,
  .summary__spacer, #results-table-head .sortable::after { display: none !important; }
  .gc { break-inside: avoid; }
  body { font-size: 9pt; }
  #results-table td, #results-table th { padding: 1px 4px; }
}
"""

MAX_SUBJECTS_SHOWN = 60  # in one failure line: a cluster's 1,000 nodes failing one way are one readable line
MAX_FAILURE_LINES = 300


def stylesheet(head: str) -> str:
    # Inside <style> nothing is decoded or escaped: the vendor's words reach CSS only as plain characters.
    return READABLE_CSS + LAYOUT_CSS + PRINT_CSS % {"head": re.sub(r"[^A-Za-z0-9 ._:/()·+-]", "_", head)}


def _line(check: Check, subjects: list[str]) -> str:
    """One failure as a signer reads it: clause subject(s), measured vs required, the published share, why."""
    measured = "—" if check.measured is None else f"{check.measured} {check.unit or ''}".strip()
    share = check.details.get("fraction_of_published")
    published = f", {share:.0%} of published" if isinstance(share, (int, float)) else ""
    named = subjects[:MAX_SUBJECTS_SHOWN] + ([f"… {len(subjects) - MAX_SUBJECTS_SHOWN} more"]
                                             if len(subjects) > MAX_SUBJECTS_SHOWN else [])
    who = subjects[0] if len(subjects) == 1 else f"{', '.join(named)} ({len(subjects)})"
    return (f"<li class=gpuaccept-fail><b>{safe_text(check.clause)} {safe_text(who)}</b>: "
            f"{safe_text(check.outcome.value.replace('_', ' '))}, measured {safe_text(measured)}, required "
            f"{safe_text(check.required or '—')}{published} — {safe_text(shown_message(check), 300)}")


def failure_lines(not_passed: list[Check]) -> list[str]:
    """A line per failure; checks of one clause that failed for the same reason with nothing measured (e.g.
    28 pairs of a matrix the tool never printed) share one line that names every subject."""
    groups: dict[tuple[str, ...], list[Check]] = {}
    for check in not_passed:
        key = ((check.clause, check.outcome.value, check.required, check.message)
               if check.measured is None else (check.clause, check.subject))
        groups.setdefault(key, []).append(check)
    lines = [_line(group[0], [c.subject for c in group]) for group in list(groups.values())[:MAX_FAILURE_LINES]]
    if len(groups) > MAX_FAILURE_LINES:
        rest = sum(len(g) for g in list(groups.values())[MAX_FAILURE_LINES:])
        lines.append(f"<li class=gpuaccept-fail>… and {rest} more checks that did not pass: every one is in the "
                     "results file and, for a cluster's node, in that node's own report</li>")
    return lines


def per_clause_html(checks: Sequence[Check]) -> str:
    rows: dict[str, dict[Outcome, int]] = {}
    for check in checks:
        counts = rows.get(check.clause)
        if counts is None:
            counts = rows[check.clause] = dict.fromkeys(Outcome, 0)
        counts[check.outcome] += 1
    return table([["clause", "passed", "failed", "not measured"]] + [[clause, *counts.values()]
                                                                       for clause, counts in rows.items()])


def _facts(results: Results, digest: str) -> str:
    """Who and what: vendor, contract, host (or the cluster), when, the evidence digest."""
    host, contract = results.host, results.contract
    models: dict[str, int] = {}
    for gpu in host.get("gpus", []):
        models[gpu["name"]] = models.get(gpu["name"], 0) + 1
    gpus = ", ".join(f"{n}x {name}" for name, n in models.items()) or "none"
    facts = [
        ("vendor", contract["vendor"]), ("reference", contract["reference"] or "—"),
        ("host", f"{host.get('hostname', '')}: {gpus}; driver {host.get('driver') or '—'}, CUDA {host.get('cuda') or '—'}"),
        ("contract", f"{contract['path']} (SHA-256 {contract['sha256']})"),
        ("run", f"{results.started} to {results.finished}"), ("evidence digest (SHA-256)", digest),
    ]
    if results.hosts is not None:
        good = sum(h.get("verdict") == "accepted" for h in results.hosts)
        facts[2] = ("cluster", f"{len(results.hosts)} nodes, {good} accepted on their own checks; the login node: "
                               f"{host.get('hostname', '')}")
    elif host.get("error"):
        facts.append(("NVML", host["error"]))
    if results.replayed_from is not None:
        facts.append(("replayed from", results.replayed_from))
    if results.sources:
        facts.append(("sources", "; ".join(f"{k}: {v}" for k, v in results.sources.items())))
    return "".join(f"<tr><th>{k}</th><td>{safe_text(str(v))}</td></tr>" for k, v in facts)


def _notes(results: Results) -> str:
    """What qualifies the verdict: its mode, an incomplete run, a node of a cluster contract."""
    notes = "" if (results.mode or "live") == "live" else f"<p><b>{safe_text(mode_label(results))}</b></p>"
    if not results.complete:
        notes += "<p><b>INCOMPLETE RUN</b>: not every check ran (interrupted, crashed or deselected); the run is rejected.</p>"
    if results.cluster_node:
        notes += (f"<p><b>NODE {safe_text(results.cluster_node)} of a cluster contract</b>: judged on its own "
                  "sections only; the cluster's verdict is the login node's report.</p>")
    return notes


def _warnings(results: Results) -> str:
    def items(lines: list[str]) -> str:
        return "".join(f"<li>{safe_text(line)}</li>" for line in lines)

    warnings = ""
    if results.foreign_evidence:
        warnings += ("<p><b>FOREIGN FILES IN THE EVIDENCE FOLDER</b>: written by something other than this run, "
                     f"or changed after capture; never read, and the run is rejected:</p><ul>{items(results.foreign_evidence)}</ul>")
    if results.foreign_code:
        warnings += ("<p><b>FOREIGN CODE</b>: pytest-gpuaccept's own code was replaced; the run is rejected:</p>"
                     f"<ul>{items(results.foreign_code)}</ul>")
    if results.contract_warnings:
        warnings += ("<p><b>Contract warnings</b> (not failures: the contract is the buyer's word):</p>"
                     f"<ul>{items(results.contract_warnings)}</ul>")
    return warnings


def verdict_box(results: Results, digest: str) -> str:
    """The first screen: the verdict, its root cause where one source left most checks unmeasured, the counts,
    who and what, every check that did not pass (one line each), and the warnings."""
    colour = PASS_GREEN if results.verdict == "accepted" else FAIL_RED
    counts = results.counts()
    not_passed = ([c for c in results.checks if c.outcome is Outcome.FAILED]
                  + [c for c in results.checks if c.outcome is Outcome.NOT_MEASURED])
    failures = (f"<h3>Did not pass ({len(not_passed)})</h3><ul>{''.join(failure_lines(not_passed))}</ul>"
                if not_passed else "<p>Every check passed.</p>")
    cause = root_cause(results)
    cause_html = f'<p id="gpuaccept-root-cause"><b>{safe_text(cause)}</b></p>' if cause else ""
    return (f'<div id="gpuaccept-verdict" class="gpuaccept-first" data-verdict="{results.verdict}" '
            f'data-evidence-digest="{digest}" style="border:3px solid {colour};padding:8px;margin:8px 0">'
            f'<h2 style="color:{colour};margin:0">{results.verdict.upper()}</h2>{cause_html}{_notes(results)}'
            f"<p>{counts[Outcome.PASSED]} passed, {counts[Outcome.FAILED]} failed, "
            f"{counts[Outcome.NOT_MEASURED]} not measured of {len(results.checks)} checks.</p>"
            f"<table>{_facts(results, digest)}</table>"
            f'<div id="gpuaccept-failures">{failures}</div>{_warnings(results)}</div>')


def _audit(results: Results, environment: dict[str, Any]) -> tuple[str, str]:
    """The tools run (provenance), and the auditor's environment with the other plugins loaded."""
    tools = [["tool", "path", "SHA-256", "kind", "package", "verified", "look twice"]] + [
        [t.get("tool", ""), t.get("resolved", ""), t.get("sha256", "—"), t.get("kind", "—"),
         t.get("package") or t.get("package_note") or "—", {True: "yes", False: "CHANGED", None: "—"}[t.get("verified")],
         "; ".join(t.get("flags", [])) or "—"] for t in results.tools or []]
    plugins = [["plugin", "file", "SHA-256", "from"]] + [
        [p["name"], p["file"], p["sha256"], p["distribution"]] for p in results.plugins or []]
    env = [["key", "value"]] + [[k, v if isinstance(v, str) else json.dumps(v)] for k, v in environment.items()]
    tools_html = f"<h3>Tools run (provenance)</h3>{table(tools) if len(tools) > 1 else '<p>none</p>'}"
    env_html = (f'<div class="gpuaccept-env"><h3>The auditor\'s environment</h3>{table(env) if len(env) > 1 else ""}'
                f"<h4>Other plugins and conftest files loaded</h4>{table(plugins) if len(plugins) > 1 else '<p>none</p>'}</div>")
    return tools_html, env_html


def banner(results: Results, evidence: Evidence | None, digest: str, environment: dict[str, Any] | None = None) -> str:
    """The first screen is the verdict, who and what, and every check that did not pass (one line each);
    then a summary per clause, each section's part, the signatures, and tools, raw outputs, environment."""
    contract, checks = results.contract, results.checks
    head = f"{results.verdict.upper()} · {contract['vendor']} · {contract['reference'] or contract['sha256'][:12]}"
    sign = "".join(f"<tr><th>{who}</th><td>name</td><td>role</td><td>date</td><td>signature</td></tr>"
                   for who in ("Buyer", "Vendor"))
    gpu_ids = "".join(
        f"<li>GPU{g['index']}: {safe_text(g['name'])}, uuid {safe_text(g['uuid'])}, serial {safe_text(g['serial'] or 'n/a')}, "
        f"PCI {safe_text(g.get('pci_bus_id', ''))}</li>" for g in results.host.get("gpus", []))
    tools_html, env_html = _audit(results, environment or {})
    return (
        f"<style>{stylesheet(head)}</style>{verdict_box(results, digest)}"
        f"<h3>Per clause</h3>{per_clause_html(checks)}{pairs_html(checks)}"
        f"<p>Not in contract (not checked): {safe_text(', '.join(results.not_in_contract or []) or 'none')}</p>"
        + "".join(part.render(checks) + part.drawn(results.records) for part in registry.REPORT_PARTS)
        + f'<h3>Signatures</h3><table class="gpuaccept-sign">{sign}</table>'
        f"{'' if results.hosts is not None else f'<h3>GPUs</h3><ul>{gpu_ids}</ul>'}"
        f"{tools_html}{measurements(checks, evidence)}"
        f"{raw_outputs(evidence, checks) if evidence is not None else ''}{env_html}"
        f"<h3>Every check</h3><p>The table below: one row per check, failures first, but none for a pair that "
        f"passed (its clause's row in Pairs counts it; the results file lists every check); open a row for its "
        f"message, facts and links to its charts and raw output.</p>"
    )
