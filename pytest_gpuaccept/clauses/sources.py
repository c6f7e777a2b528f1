"""Which sources confirmed each check's figure, and the report's box of the clauses taken on one source's word.

A judge names, in its check's details, every source that confirmed the figure (`sources`: "NVML", "sysfs",
"the model table", a tool, its run's wall time ...). A measured figure with one source, or none, is taken on
the vendor's word: the check says so (`unconfirmed`: what could not be compared with what, in a sentence) and
the report lists it in a box, "What we could not confirm". The box reads the details of any check, whichever
section wrote them: it names no clause. Its own words are said in the report's language (i18n.tr); the sources and
reasons are the judges' words, shown as they wrote them (in another language, labelled as the original).
"""

from __future__ import annotations

import html
from dataclasses import replace
from typing import Sequence

from ..i18n import DEFAULT, tr
from ..verdict import Check, Outcome
from .base import ReportPart

SOURCES, UNCONFIRMED = "sources", "unconfirmed"


def with_sources(check: Check, *sources: str, unconfirmed: str = "") -> Check:
    """The check with the sources that confirmed its figure (empty ones left out, each once) in its details; with
    one source or none, `unconfirmed` says what could not be confirmed. A check not measured carries none."""
    if check.outcome is Outcome.NOT_MEASURED:
        return check
    named = list(dict.fromkeys(s for s in sources if s))
    details = {**check.details, SOURCES: named}
    if len(named) < 2:
        details[UNCONFIRMED] = unconfirmed or f"taken on {named[0] if named else 'one source'}'s word alone"
    return replace(check, details=details)


def single_sourced(check: Check) -> bool:
    """A measured check whose details name fewer than two sources (a check that names none is not tracked)."""
    named = check.details.get(SOURCES)
    return check.outcome is not Outcome.NOT_MEASURED and isinstance(named, list) and len(named) < 2


def unconfirmed(checks: Sequence[Check]) -> dict[str, list[Check]]:
    """The single-sourced checks by clause, in the order the run judged them."""
    found: dict[str, list[Check]] = {}
    for check in checks:
        if single_sourced(check):
            found.setdefault(check.clause, []).append(check)
    return found


def _subjects(checks: list[Check], lang: str = DEFAULT) -> str:
    names = [c.subject for c in checks]
    return ", ".join(names[:8]) + (tr(lang, " and {n} more", n=len(names) - 8) if len(names) > 8 else "")


def _said(checks: list[Check]) -> str:
    """The judges' own words of a clause's line: the one source, and why no second one was had."""
    named = checks[0].details.get(SOURCES) or []
    source = named[0] if named else "one source"
    reasons = list(dict.fromkeys(str(c.details.get(UNCONFIRMED, "")) for c in checks if c.details.get(UNCONFIRMED)))
    why = f": {reasons[0]}" + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else "") if reasons else ""
    return f"taken on {source}'s word{why}."


def sentence(clause: str, checks: list[Check]) -> str:
    """One clause's line of the box: the subjects, the one source, and why no second one was had."""
    return f"{clause} ({_subjects(checks)}): {_said(checks)}"


def item(clause: str, checks: list[Check], lang: str = DEFAULT) -> str:
    """The clause's line as HTML; in another language than English, the judges' words follow, labelled as the
    original (lang="en")."""
    if lang == DEFAULT:
        return html.escape(sentence(clause, checks))
    said = tr(lang, "{clause} ({subjects}): taken on one source's word; as the check says it (original): ",
              clause=clause, subjects=_subjects(checks, lang))
    return f'{html.escape(said)}<span lang="en" class="gpuaccept-original">{html.escape(_said(checks))}</span>'


def box(checks: Sequence[Check], lang: str = DEFAULT) -> str:
    """The report's part: "What we could not confirm", one sentence per clause; "" when every figure had a
    second source (or no check says which sources it had)."""
    found = unconfirmed(checks)
    if not found:
        return ""
    items = "".join(f"<li>{item(clause, group, lang)}</li>" for clause, group in found.items())
    said = tr(lang, "These figures had no second source on this host: each was taken on the vendor's word (one tool, "
                    "NVML or one file the vendor controls), not compared with a second one.")
    return (f'<div class="gpuaccept-unconfirmed"><h3>{html.escape(tr(lang, "What we could not confirm"))}</h3>'
            f"<p>{html.escape(said, quote=False)}</p><ul>{items}</ul></div>")


REPORT = ReportPart(box)
