"""What a check shows beyond its row: its detail lines (message, facts, links), the charts and tables of its
details (`timeline`, `tables`, `each`: conventions any clause may use), and each raw output, once."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Sequence

from .. import charts
from ..charts import safe_text, table
from ..evidence import Evidence, ForeignEvidence
from ..i18n import DEFAULT, tr
from ..probes import nvml
from ..units import human_bytes
from ..verdict import NOT_MEASURED_PREFIX, Check

RAW_SHOWN_BYTES = 16 * 1024  # of each raw output, shown once in the report; the evidence file keeps every byte
HOST_READING = "nvml-host.json"  # the one reading shown among the raw outputs: the others are run records


def raw_anchor(name: str) -> str:
    return "raw-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def measurement_anchor(check: Check) -> str:
    return "m-" + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{check.clause}-{check.subject}")


def crashed(check: Check) -> bool:
    return check.message.removeprefix(NOT_MEASURED_PREFIX).startswith("crashed")


def _shown_evidence(name: str) -> bool:
    return not name.endswith(".json") or name == HOST_READING


def raw_outputs(evidence: Evidence, checks: Sequence[Check], lang: str = DEFAULT) -> str:
    """Every tool output and reading the checks used, once each, in the order first used; bounded and escaped.
    Not printed (the print stylesheet hides it): the evidence folder holds every byte."""
    # A cluster node's outputs stay in its own bundle and report (nodes/<node>/): linked, not repeated here.
    names = list(dict.fromkeys(n for c in checks if c.node is None for n in c.evidence if _shown_evidence(n)))
    parts = []
    shown: dict[str, str] = {}  # SHA-256 of what is shown: the name it is shown under
    for name in names:
        head = f'<h4 id="{raw_anchor(name)}">{safe_text(name)}</h4>'
        try:
            raw = evidence.read(name) or b""
        except ForeignEvidence as exc:
            parts.append(f"{head}<p><b>{safe_text(tr(lang, 'not shown: {why}', why=str(exc)))}</b></p>")
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if digest in shown and raw.strip():
            # e.g. the error counters after the load, unchanged from before: the same bytes are shown once
            same = shown[digest]
            said = safe_text(tr(lang, "byte for byte the same as"))
            parts.append(f'{head}<p>{said} <a href="#{raw_anchor(same)}">{safe_text(same)}</a></p>')
            continue
        shown[digest] = name
        text = raw[: RAW_SHOWN_BYTES * 2].decode("utf-8", errors="replace")
        empty = f"<p>{safe_text(tr(lang, '(empty)'))}</p>"
        body = f"<pre>{safe_text(text, RAW_SHOWN_BYTES)}</pre>" if text.strip() else empty
        parts.append(head + body)
    title = safe_text(tr(lang, "Raw tool outputs ({n}, each shown once)", n=len(names)))
    return f'<div class="gpuaccept-raw"><h3>{title}</h3>{"".join(parts)}</div>' if parts else ""


def check_html(evidence: Evidence, check: Check, lang: str = DEFAULT) -> str:
    """One check's detail, as lines of text: its message, its facts, where its charts are, links to the raw
    output behind it. Clause, subject, measured, required and outcome are the row's own cells. Small on
    purpose: pytest-html keeps every row's detail in the page's JSON."""
    details = check.details
    facts = [(k, v) for k, v in sorted(details.items()) if isinstance(v, (str, int, float))]  # e.g. qps, port
    lists = [(k, v) for k, v in sorted(details.items()) if isinstance(v, list) and v and all(isinstance(s, str) for s in v)]
    lines = [safe_text(check.message, 2000)]
    if facts:
        lines.append(" · ".join(f"{safe_text(k)}: {safe_text(str(v))}" for k, v in facts))
    lines += [f"{safe_text(k.replace('_', ' '))}: {safe_text(', '.join(v), 300)}" for k, v in lists]
    if _charted(check):
        lines.append(f"{safe_text(tr(lang, 'charts and tables:'))} <a href=#{measurement_anchor(check)}>"
                     f"{safe_text(tr(lang, 'in the summary'))}</a>")
    links = []
    for name in dict.fromkeys(check.evidence):
        # Each raw output is shown once, in the report's "Raw tool outputs"; a check links to it.
        if not _shown_evidence(name):
            continue  # the run record; its executable's provenance is in "Tools run", once per executable
        if name.endswith(".stderr.txt") and evidence.captured_empty(name):
            continue  # an empty stderr says nothing; the evidence folder keeps it
        links.append(f"<a href=#{raw_anchor(name)}>{safe_text(name)}</a>")
    if links:
        lines.append(f"{safe_text(tr(lang, 'raw output:'))} {', '.join(links)}")
    return "\n".join(lines) + "\n"


def _charted(check: Check) -> bool:
    return bool(check.details.get("each") or check.details.get("tables") or "timeline" in check.details)


Samples = dict[int, nvml.GpuSeries] | str  # a samples file's series by GPU, or why it cannot be drawn


def _samples(evidence: Evidence | None, name: str) -> Samples:
    """A samples file's series, read back from its sealed bytes (never from what this process holds)."""
    try:
        raw = evidence.read(name) if evidence is not None and name else None
        if raw is None:
            return f"{name or 'the samples file'} is not in the evidence"
        return {series.index: series for series in nvml.parse_samples(json.loads(raw))}
    except (ForeignEvidence, ValueError) as exc:
        return f"{name} cannot be read: {exc}"


def _timelines(group: list[Check], evidence: Evidence | None, samples: dict[str, Samples], lang: str = DEFAULT
               ) -> tuple[list[tuple[str, dict[str, Any], nvml.GpuSeries]], list[str]]:
    """Each check's timeline with its GPU's samples (each samples file read once), and a line for each that
    could not be drawn."""
    drawn, unread = [], []
    for check in group:
        timeline = check.details["timeline"]
        name = str(timeline.get("samples") or "")
        if name not in samples:
            samples[name] = _samples(evidence, name)
        found = samples[name]
        series = found.get(timeline.get("gpu")) if isinstance(found, dict) else None
        if series is None:
            why = (found if isinstance(found, str)
                   else tr(lang, "GPU{index} is not in {name}", index=timeline.get("gpu"), name=name))
            unread.append(tr(lang, "{subject}: no timeline drawn: {why}", subject=check.subject, why=why))
            continue
        drawn.append((check.subject, timeline, series))
    return drawn, unread


def _tables(check: Check, lang: str = DEFAULT) -> list[str]:
    """A check's own tables: its per-subject results (`each`), and each table of `tables` (a sweep over message
    sizes, "size (B)" first, with its chart against the check's threshold)."""
    parts = [f"<h4 id={measurement_anchor(check)}>{safe_text(check.clause)} {safe_text(check.subject)}</h4>"]
    if check.details.get("each"):
        head = [tr(lang, "subject"), tr(lang, "outcome"), tr(lang, "measured"), tr(lang, "message")]
        parts.append(table([head, *check.details["each"]]))
    for title, rows in check.details.get("tables", []):
        sweep = bool(rows) and rows[0][:1] == ["size (B)"]
        chart = charts.busbw_chart(rows, check.threshold, lang) if sweep and check.threshold is not None else ""
        shown = ([[tr(lang, "size"), *rows[0][1:]]] + [[human_bytes(row[0]), *row[1:]] for row in rows[1:]]
                 if sweep else rows)
        parts.append(f"<h4>{safe_text(title)}</h4>{chart}" + table(shown))
    return parts


def measurements(checks: Sequence[Check], evidence: Evidence | None, lang: str = DEFAULT) -> str:
    """Charts and tables, once, printed: every timeline of a clause in one set of charts (a line per subject),
    then each check's own tables (a sweep with its chart, the per-subject results of a check)."""
    checks = [c for c in checks if c.node is None]  # a cluster node's charts are in its own report
    by_clause: dict[str, list[Check]] = {}
    for check in checks:
        if "timeline" in check.details:
            by_clause.setdefault(check.clause, []).append(check)
    parts = []
    samples: dict[str, Samples] = {}
    for clause, group in by_clause.items():
        anchors = "".join(f"<span id={measurement_anchor(c)}></span>" for c in group)
        drawn, unread = _timelines(group, evidence, samples, lang)
        title = safe_text(tr(lang, "{clause}: {n} timelines", clause=clause, n=len(group)))
        parts.append(f"<h4>{anchors}{title}</h4>" + charts.timeline_charts(drawn, lang)
                     + "".join(f"<p>{safe_text(line)}</p>" for line in unread))
    for check in checks:
        if check.details.get("each") or check.details.get("tables"):
            parts += _tables(check, lang)
    title = safe_text(tr(lang, "Charts and tables"))
    return f"<div class=gpuaccept-measurements><h3>{title}</h3>{''.join(parts)}</div>" if parts else ""
