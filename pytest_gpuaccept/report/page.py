"""The report's own page above pytest-html's table: the verdict and every check that did not pass first, then a
summary per clause, each section's own part (looked up in the registry), signatures, and what an auditor needs.
Its stylesheet makes every text readable (WCAG AA, pytest-html's greys overridden), wraps what is wider than the
window (a raw output of one long line), and prints the verdict and the run's mode at the top of every page. Every
word of it is said in the report's language (i18n.tr); figures, units and clause keys are fields."""

from __future__ import annotations

import html
import json
import re
from typing import Any, Sequence

from ..charts import FAIL_RED, HEAT_TEXT, TEXT, safe_text, table
from ..clauses import registry
from ..evidence import Evidence
from ..i18n import DEFAULT, tr
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
pre, .log { white-space: pre-wrap; overflow-wrap: anywhere; }
td, th, li, p { overflow-wrap: break-word; }
#gpuaccept-warnings { border: 2px solid #9a6700; padding: 4px 8px; margin: 8px 0; }
"""

# The verdict and the mode at the top of every printed page: one page margin box, nothing in the page's flow (a fixed
# element printed it a second time on each page). Chromium prints margin boxes since 131 (Debian's is 156).
PRINT_CSS = """
@page { size: A4; margin: 16mm 12mm; @top-center { content: "%(head)s"; font-size: 9pt; }
  @top-right { content: "%(mode)s"; font-size: 9pt; font-weight: bold; } }
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


def stylesheet(head: str, mode: str = "") -> str:
    # Inside <style> nothing is decoded or escaped: the vendor's words reach CSS only as letters, digits (of any script)
    # and a few plain marks; never a quote, backslash, brace or angle bracket.
    def plain(text: str) -> str:
        return "".join(c if c.isalnum() or c in " ._:/()·+-" else "_" for c in text)

    return READABLE_CSS + LAYOUT_CSS + PRINT_CSS % {"head": plain(head), "mode": plain(mode)}


def heading(lang: str, template: str) -> str:
    """A heading or label of ours (no vendor's words in it), in the language, as HTML text."""
    return html.escape(tr(lang, template), quote=False)


def verdict_word(verdict: str, lang: str) -> str:
    """ACCEPTED or REJECTED, in the report's language (the English word beside a translation)."""
    return tr(lang, "ACCEPTED") if verdict == "accepted" else tr(lang, "REJECTED")


def mode_word(results: Results, lang: str) -> str:
    """The run's mode in a word, as the top of every printed page says it."""
    mode = results.mode or "live"
    return {"simulated": tr(lang, "SIMULATED"), "replay": tr(lang, "REPLAY")}.get(mode, tr(lang, "LIVE"))


def outcome_word(outcome: Outcome, lang: str) -> str:
    return {Outcome.PASSED: tr(lang, "passed"), Outcome.FAILED: tr(lang, "failed"),
            Outcome.NOT_MEASURED: tr(lang, "not measured")}[outcome]


def required_text(check: Check, lang: str = DEFAULT) -> str:
    """What the contract asks, always with its unit: `>= 80 GB/s`, never a bare number; where no figure is known
    (no published figure to take a fraction of), says so, with the unit it would be in."""
    required, unit = check.required.strip(), (check.unit or "").strip()
    if not required or required == "—":
        return tr(lang, "not known ({unit})", unit=unit) if unit else tr(lang, "not known")
    if unit and re.search(r"\d$", required):
        return f"{required} {unit}"
    return required


def measured_text(check: Check, lang: str = DEFAULT) -> str:
    """The measured value with its unit; where there is none, why (never a bare dash beside another)."""
    if check.measured is not None:
        return f"{check.measured} {check.unit or ''}".strip()
    return tr(lang, "not measured") if check.outcome is Outcome.NOT_MEASURED else tr(lang, "none")


def _line(check: Check, subjects: list[str], lang: str = DEFAULT) -> str:
    """One failure as a signer reads it: clause subject(s), measured vs required, the published share, why."""
    measured = "—" if check.measured is None else f"{check.measured} {check.unit or ''}".strip()
    share = check.details.get("fraction_of_published")
    published = tr(lang, ", {share} of published", share=f"{share:.0%}") if isinstance(share, (int, float)) else ""
    named = subjects[:MAX_SUBJECTS_SHOWN] + ([tr(lang, "… {n} more", n=len(subjects) - MAX_SUBJECTS_SHOWN)]
                                             if len(subjects) > MAX_SUBJECTS_SHOWN else [])
    who = subjects[0] if len(subjects) == 1 else f"{', '.join(named)} ({len(subjects)})"
    fields = {"outcome": outcome_word(check.outcome, lang), "measured": measured,
              "required": required_text(check, lang), "published": published}
    said = (tr(lang, "{outcome}, required {required}{published}", **fields) if check.outcome is Outcome.NOT_MEASURED
            else tr(lang, "{outcome}, measured {measured}, required {required}{published}", **fields))
    why = safe_text(shown_message(check), 300)
    if lang != DEFAULT:  # the judge's words are evidence: kept as written, labelled (report/table.py's rows too)
        label = safe_text(tr(lang, "The check's message (original):"))
        why = f'{label}<span lang="en" class="gpuaccept-original">{why}</span>'
    return f"<li class=gpuaccept-fail><b>{safe_text(check.clause)} {safe_text(who)}</b>: {safe_text(said)} — {why}"


def failure_lines(not_passed: list[Check], lang: str = DEFAULT) -> list[str]:
    """A line per failure; checks of one clause that failed for the same reason with nothing measured (e.g.
    28 pairs of a matrix the tool never printed) share one line that names every subject."""
    groups: dict[tuple[str, ...], list[Check]] = {}
    for check in not_passed:
        key = ((check.clause, check.outcome.value, check.required, check.message)
               if check.measured is None else (check.clause, check.subject))
        groups.setdefault(key, []).append(check)
    lines = [_line(group[0], [c.subject for c in group], lang) for group in list(groups.values())[:MAX_FAILURE_LINES]]
    if len(groups) > MAX_FAILURE_LINES:
        rest = sum(len(g) for g in list(groups.values())[MAX_FAILURE_LINES:])
        more = tr(lang, "… and {rest} more checks that did not pass: every one is in the results file and, for a "
                        "cluster's node, in that node's own report", rest=rest)
        lines.append(f"<li class=gpuaccept-fail>{safe_text(more)}</li>")
    return lines


def per_clause_html(checks: Sequence[Check], lang: str = DEFAULT) -> str:
    rows: dict[str, dict[Outcome, int]] = {}
    for check in checks:
        counts = rows.get(check.clause)
        if counts is None:
            counts = rows[check.clause] = dict.fromkeys(Outcome, 0)
        counts[check.outcome] += 1
    head = [tr(lang, "clause"), tr(lang, "passed"), tr(lang, "failed"), tr(lang, "not measured")]
    return table([head] + [[clause, *counts.values()] for clause, counts in rows.items()])


def host_text(host: dict[str, Any], lang: str = DEFAULT) -> str:
    """The host as a sentence: its name, its GPUs, driver and CUDA; what NVML did not give is said, not dashed."""
    models: dict[str, int] = {}
    for gpu in host.get("gpus", []):
        models[gpu["name"]] = models.get(gpu["name"], 0) + 1
    gpus = ", ".join(f"{n}x {name}" for name, n in models.items()) or tr(lang, "no GPU read")
    driver = host.get("driver")
    cuda = host.get("cuda")
    return "; ".join((host.get("hostname") or tr(lang, "unnamed"), gpus,
                      tr(lang, "driver {version}", version=driver) if driver else tr(lang, "driver not read"),
                      tr(lang, "CUDA {version}", version=cuda) if cuda else tr(lang, "CUDA not read")))


def _facts(results: Results, digest: str, lang: str = DEFAULT) -> str:
    """Who and what: vendor, contract, host (or the cluster), when, the evidence digest."""
    host, contract = results.host, results.contract
    facts = [
        (tr(lang, "vendor"), contract["vendor"]), (tr(lang, "reference"), contract["reference"] or "—"),
        (tr(lang, "host"), host_text(host, lang)),
        (tr(lang, "contract"), tr(lang, "{path} (SHA-256 {sha256})", path=contract["path"], sha256=contract["sha256"])),
        (tr(lang, "run"), tr(lang, "{started} to {finished}", started=results.started, finished=results.finished)),
        (tr(lang, "evidence digest (SHA-256)"), digest),
    ]
    if results.hosts is not None:
        good = sum(h.get("verdict") == "accepted" for h in results.hosts)
        facts[2] = (tr(lang, "cluster"), tr(lang, "{nodes} nodes, {good} accepted on their own checks; the login node: "
                                                  "{login}", nodes=len(results.hosts), good=good,
                                            login=host.get("hostname", "")))
    elif host.get("error"):
        facts.append(("NVML", host["error"]))
    if results.replayed_from is not None:
        facts.append((tr(lang, "replayed from"), results.replayed_from))
    if results.sources:
        facts.append((tr(lang, "sources"), "; ".join(f"{k}: {v}" for k, v in results.sources.items())))
    return "".join(f"<tr><th>{safe_text(k)}</th><td>{safe_text(str(v))}</td></tr>" for k, v in facts)


def _notes(results: Results, lang: str = DEFAULT) -> str:
    """What qualifies the verdict: its mode, an incomplete run, a node of a cluster contract."""
    notes = "" if (results.mode or "live") == "live" else f"<p><b>{safe_text(mode_label(results, lang))}</b></p>"
    if not results.complete:
        notes += "<p><b>{}</b>: {}</p>".format(
            safe_text(tr(lang, "INCOMPLETE RUN")),
            safe_text(tr(lang, "not every check ran (interrupted, crashed or deselected); the run is rejected.")))
    if results.cluster_node:
        notes += "<p><b>{}</b>: {}</p>".format(
            safe_text(tr(lang, "NODE {node} of a cluster contract", node=results.cluster_node)),
            safe_text(tr(lang, "judged on its own sections only; the cluster's verdict is the login node's report.")))
    return notes


def warnings_html(results: Results, lang: str = DEFAULT) -> str:
    """What the buyer must read beside the verdict, in a box of its own below it (never inside the verdict's colour):
    foreign files or code (the run is rejected), and the contract's warnings (not failures)."""
    def items(lines: list[str]) -> str:
        return "".join(f"<li>{safe_text(line)}</li>" for line in lines)

    def said(title: str, text: str, lines: list[str]) -> str:
        return f"<p><b>{safe_text(tr(lang, title))}</b>{safe_text(tr(lang, text))}</p><ul>{items(lines)}</ul>"

    warnings = ""
    if results.foreign_evidence:
        warnings += said("FOREIGN FILES IN THE EVIDENCE FOLDER", ": written by something other than this run, or "
                         "changed after capture; never read, and the run is rejected:", results.foreign_evidence)
    if results.foreign_code:
        warnings += said("FOREIGN CODE", ": pytest-gpuaccept's own code was replaced; the run is rejected:",
                         results.foreign_code)
    if results.contract_warnings:
        warnings += said("Contract warnings", " (not failures: the contract is the buyer's word):",
                         results.contract_warnings)
    return f'<div id="gpuaccept-warnings">{warnings}</div>' if warnings else ""


def _verdict_said(results: Results, lang: str, colour: str) -> str:
    """The verdict in the report's language, in large type under the English word (which `verify` reads: the verdict
    box's heading is ACCEPTED or REJECTED in every language)."""
    if lang == DEFAULT:
        return ""
    said = tr(lang, "the run is ACCEPTED") if results.verdict == "accepted" else tr(lang, "the run is REJECTED")
    return f'<p style="color:{colour};font-size:1.5em;font-weight:bold;margin:0">{safe_text(said)}</p>'


def verdict_box(results: Results, digest: str, lang: str = DEFAULT) -> str:
    """The first screen: the verdict, its root cause where one source left most checks unmeasured, the counts,
    who and what, every check that did not pass (one line each); the warnings follow it, outside its box."""
    colour = PASS_GREEN if results.verdict == "accepted" else FAIL_RED
    counts = results.counts()
    not_passed = ([c for c in results.checks if c.outcome is Outcome.FAILED]
                  + [c for c in results.checks if c.outcome is Outcome.NOT_MEASURED])
    failures = ("<h3>{}</h3><ul>{}</ul>".format(safe_text(tr(lang, "Did not pass ({n})", n=len(not_passed))),
                                                "".join(failure_lines(not_passed, lang)))
                if not_passed else f"<p>{safe_text(tr(lang, 'Every check passed.'))}</p>")
    cause = root_cause(results)
    cause_html = f'<p id="gpuaccept-root-cause"><b>{safe_text(cause)}</b></p>' if cause else ""
    counted = tr(lang, "{passed} passed, {failed} failed, {not_measured} not measured of {total} checks.",
                 passed=counts[Outcome.PASSED], failed=counts[Outcome.FAILED],
                 not_measured=counts[Outcome.NOT_MEASURED], total=len(results.checks))
    return (f'<div id="gpuaccept-verdict" class="gpuaccept-first" data-verdict="{results.verdict}" '
            f'data-evidence-digest="{digest}" style="border:3px solid {colour};padding:8px;margin:8px 0">'
            f'<h2 style="color:{colour};margin:0">{results.verdict.upper()}</h2>{_verdict_said(results, lang, colour)}'
            f"{cause_html}{_notes(results, lang)}<p>{safe_text(counted)}</p>"
            f'<table>{_facts(results, digest, lang)}</table><div id="gpuaccept-failures">{failures}</div></div>'
            f"{warnings_html(results, lang)}")


def _audit(results: Results, environment: dict[str, Any], lang: str = DEFAULT) -> tuple[str, str]:
    """The tools run (provenance), and the auditor's environment with the other plugins loaded."""
    verified = {True: tr(lang, "yes"), False: tr(lang, "CHANGED"), None: "—"}
    tools = [[tr(lang, word) for word in ("tool", "path", "SHA-256", "kind", "package", "verified", "look twice")]] + [
        [t.get("tool", ""), t.get("resolved", ""), t.get("sha256", "—"), t.get("kind", "—"),
         t.get("package") or t.get("package_note") or "—", verified[t.get("verified")],
         "; ".join(t.get("flags", [])) or "—"] for t in results.tools or []]
    plugins = [[tr(lang, word) for word in ("plugin", "file", "SHA-256", "from")]] + [
        [p["name"], p["file"], p["sha256"], p["distribution"]] for p in results.plugins or []]
    env = [[tr(lang, "key"), tr(lang, "value")]] + [[k, v if isinstance(v, str) else json.dumps(v)]
                                                    for k, v in environment.items()]
    none = f"<p>{safe_text(tr(lang, 'none'))}</p>"
    tools_html = f"<h3>{safe_text(tr(lang, 'Tools run (provenance)'))}</h3>{table(tools) if len(tools) > 1 else none}"
    auditor = heading(lang, "The auditor's environment")
    env_html = (f'<div class="gpuaccept-env"><h3>{auditor}</h3>'
                f"{table(env) if len(env) > 1 else ''}"
                f"<h4>{safe_text(tr(lang, 'Other plugins and conftest files loaded'))}</h4>"
                f"{table(plugins) if len(plugins) > 1 else none}</div>")
    return tools_html, env_html


def page_head(results: Results, lang: str = DEFAULT) -> str:
    """The line at the top of every printed page: verdict, vendor, reference (or the contract's digest); the mode is
    beside it, at the page's top right."""
    contract = results.contract
    return " · ".join((verdict_word(results.verdict, lang), contract["vendor"],
                       contract["reference"] or contract["sha256"][:12]))


def banner(results: Results, evidence: Evidence | None, digest: str, environment: dict[str, Any] | None = None,
           lang: str = DEFAULT) -> str:
    """The first screen is the verdict, who and what, and every check that did not pass (one line each);
    then a summary per clause, each section's part, the signatures, and tools, raw outputs, environment."""
    checks = results.checks
    sign = "".join("<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
        *(safe_text(tr(lang, word)) for word in (who, "name", "role", "date", "signature")))
        for who in ("Buyer", "Vendor"))
    gpu_ids = "".join("<li>{}</li>".format(safe_text(tr(
        lang, "GPU{index}: {name}, uuid {uuid}, serial {serial}, PCI {pci}", index=g["index"], name=g["name"],
        uuid=g["uuid"], serial=g["serial"] or "n/a", pci=g.get("pci_bus_id", ""))))
        for g in results.host.get("gpus", []))
    gpus_html = f"<h3>{safe_text(tr(lang, 'GPUs'))}</h3><ul>{gpu_ids}</ul>" if gpu_ids and results.hosts is None else ""
    tools_html, env_html = _audit(results, environment or {}, lang)
    not_in = ", ".join(results.not_in_contract or []) or tr(lang, "none")
    every = tr(lang, "The table below: one row per check, failures first, but none for a pair that passed (its "
                     "clause's row in Pairs counts it; the results file lists every check); open a row for its "
                     "message, facts and links to its charts and raw output.")
    return (
        f"<style>{stylesheet(page_head(results, lang), mode_word(results, lang))}</style>"
        f"{verdict_box(results, digest, lang)}"
        f"<h3>{safe_text(tr(lang, 'Per clause'))}</h3>{per_clause_html(checks, lang)}{pairs_html(checks, lang)}"
        f"<p>{safe_text(tr(lang, 'Not in contract (not checked): {clauses}', clauses=not_in))}</p>"
        + "".join(part.render(checks, lang) + part.drawn(results.records, lang) for part in registry.REPORT_PARTS)
        + f'<h3>{safe_text(tr(lang, "Signatures"))}</h3><table class="gpuaccept-sign">{sign}</table>'
        f"{gpus_html}{tools_html}{measurements(checks, evidence, lang)}"
        f"{raw_outputs(evidence, checks, lang) if evidence is not None else ''}{env_html}"
        f"<h3>{safe_text(tr(lang, 'Every check'))}</h3><p>{safe_text(every)}</p>"
    )
