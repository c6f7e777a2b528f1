"""pytest-html's table, a row per check (result, test, clause, subject, measured, required) with the check's
detail under it, but none for a passing pair (its clause's row in "Pairs" counts it: pairs.py), and the page made
smaller once pytest-html wrote it. In another language than English a row says its outcome and what its clause
checks (the registry's `doc`) in that language, and keeps the judge's message and facts as they were written, labelled
as the original (lang="en"): they are evidence, quoting the tools."""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ..charts import safe_text
from ..clauses import registry
from ..i18n import DEFAULT, language, tr
from ..state import State
from ..verdict import Check, Outcome
from .details import check_html, crashed
from .page import measured_text, outcome_word, required_text
from .pairs import grouped
from .results import CHECK_PROPERTY, ITEM_PROPERTY, write_atomic


def item_of(report: pytest.TestReport) -> dict[str, Any] | None:
    """The clause, subject and test gpuaccept tagged a shipped test with (None on a user's own test)."""
    text = _property(report, ITEM_PROPERTY)
    return None if text is None else dict(_decoded(text))


def check_of(report: pytest.TestReport) -> Check | None:
    """The Check a test judged, as its JUnit property carries it (from an xdist worker too)."""
    text = _property(report, CHECK_PROPERTY)
    return None if text is None else Check.from_dict(_decoded(text))


def _property(report: pytest.TestReport, name: str) -> str | None:
    for key, value in getattr(report, "user_properties", ()):
        if key == name:
            return value if isinstance(value, str) else json.dumps(value)
    return None


@functools.lru_cache(maxsize=256)
def _decoded(text: str) -> dict[str, Any]:
    """A property's JSON, decoded once: each test's three reports are read by four hooks. Callers copy it."""
    return dict(json.loads(text))


class TableHooks:
    """pytest-html's table: a row is one check. Duration and links say nothing about a check (the run records
    keep durations); 253 rows of them were a fifth of a report's bytes."""

    state: State
    config: pytest.Config

    def _lang(self) -> str:
        return language(self.config)

    def _check(self, report: pytest.TestReport) -> Check | None:
        item = item_of(report)
        return self.state.checks.get((item["clause"], item["subject"])) if item else None

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        del cells[2:]
        lang = self._lang()
        if lang != DEFAULT:  # pytest-html's own two headings
            cells[:] = [cells[0].replace(">Result<", f">{safe_text(tr(lang, 'Result'))}<", 1),
                        cells[1].replace(">Test<", f">{safe_text(tr(lang, 'Test'))}<", 1)]
        cells += [f'<th class="sortable" data-column-type="clause">{safe_text(tr(lang, "Clause"))}</th>',
                  *(f"<th>{safe_text(tr(lang, word))}</th>" for word in ("Subject", "Measured", "Required"))]

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        if report.passed and report.when != "call":
            return  # pytest-html shows a passed setup or teardown nowhere
        item = item_of(report) or {}
        check = self._check(report)
        if check is not None and report.when == "call" and grouped(check):
            del cells[:]  # a passing pair: its clause's row in "Pairs" counts it (pairs.py), the results list it
            return
        lang = self._lang()
        shown = "—" if check is None else measured_text(check, lang)  # with its unit, or why there is none
        del cells[2:]
        if lang != DEFAULT and check is not None:  # pytest-html reads its word (filters, colours): said in compact_report
            cells[0] = cells[0].replace('<td class="col-result">',
                                        f'<td class="col-result" {OUTCOME_ATTRIBUTE}="{check.outcome.value}">', 1)
        cells += [f'<td class="col-clause">{safe_text(str(item.get("clause", "")))}</td>',
                  f"<td>{safe_text(str(item.get('subject', '')))}</td>", f"<td>{safe_text(shown)}</td>",
                  f"<td>{safe_text('' if check is None else required_text(check, lang))}</td>"]

    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        """A check's detail (what opens under its row) is its message, facts and links; pytest's own log is
        kept below it only where the test crashed."""
        if report.when != "call" and report.passed:
            return  # pytest-html shows a passed setup or teardown nowhere
        check = self._check(report)
        if check is not None:
            detail = labelled(check_html(self.state.runner.evidence, check, self._lang()), check, self._lang())
            data[:] = [detail, *(data if crashed(check) else [])]

    def pytest_html_report_title(self, report: Any) -> None:
        report.title = tr(self._lang(), "GPU acceptance: {vendor}", vendor=self.state.contract.vendor)


def labelled(detail: str, check: Check, lang: str) -> str:
    """A check's detail in the report's language: what its clause checks, then the judge's message and facts as
    written (the original, in English), then our lines (its charts, its raw output: those that link)."""
    if lang == DEFAULT:
        return detail
    lines = detail.rstrip("\n").split("\n")
    ours, original = [line for line in lines if "<a href=#" in line], [line for line in lines if "<a href=#" not in line]
    clause = registry.BY_KEY.get(check.clause)
    said = [f"<b>{safe_text(tr(lang, CLAUSE_CHECKS))}</b> {safe_text(tr(lang, clause.doc))}"] if clause else []
    kept = "\n".join(original)
    said.append(f'<b>{safe_text(tr(lang, ORIGINAL))}</b> <span lang="en" class="gpuaccept-original">{kept}</span>')
    return "\n".join(said + ours) + "\n"


CLAUSE_CHECKS, ORIGINAL = "What the clause checks:", "The check's message (original):"


_BLOB = re.compile(r'data-jsonblob="([^"]*)"')


# pytest-html's own words, as its template (resources/index.jinja2, report_data.py 4.2) writes them into the page: the
# page is rewritten once written (compact_report), these in the report's language (its hooks offer only the title).
OUTCOME_ATTRIBUTE = "data-gpuaccept-outcome"
_RESULT_CELL = re.compile(r'(<td class=\\"col-result\\" ' + OUTCOME_ATTRIBUTE + r'=\\"(\w+)\\">)\w+(</td>)')
_RUN_COUNT = re.compile(r'<p class="run-count">(\d+) tests? took ([^<]*)\.</p>')
_GENERATED = re.compile(r"<p>Report generated on ([^<]*) at ([^<]*) by <a ")
_FILTER = re.compile(r'(<span class="(?:failed|passed|skipped|xfailed|xpassed|error|rerun|retried)">\d+ )'
                     r"(Failed|Passed|Skipped|Expected failures|Unexpected passes|Errors|Reruns|Retried)(,?</span>)")


def pytest_html_words(page: str, lang: str) -> str:
    """pytest-html's fixed words of the page in the language (its summary, filters, buttons, environment heading)."""
    if lang == DEFAULT:
        return page
    for before, word, after in (("<h2>", "Summary", "</h2>"), ("<h2>", "Environment", "</h2>"),
                                ('">', "No results found. Check the filters.", "</td>"),
                                ('">', "(Un)check the boxes to filter the results.", "</p>"),
                                ("<div>", "There are still tests running.", " <br />"),
                                ("<br />", "Reload this page to get the latest results!", "</div>"),
                                ('details">', "Show all details", "</button>"), ('details">', "Hide all details", "</button>")):
        page = page.replace(before + word + after, before + safe_text(tr(lang, word)) + after, 1)
    page = _RUN_COUNT.sub(lambda m: '<p class="run-count">{}</p>'.format(safe_text(tr(
        lang, "{n} tests took {duration}.", n=m.group(1), duration=m.group(2)))), page, count=1)
    page = _GENERATED.sub(lambda m: "<p>{}<a ".format(safe_text(tr(
        lang, "Report generated on {date} at {time} by ", date=_iso_date(m.group(1)), time=m.group(2)))), page, count=1)
    said = {label: safe_text(tr(lang, label)) for label in ("Failed", "Passed", "Skipped", "Expected failures",
                                                              "Unexpected passes", "Errors", "Reruns", "Retried")}
    return _FILTER.sub(lambda m: m.group(1) + said[m.group(2)] + m.group(3), page)


def _iso_date(day: str) -> str:
    """pytest-html's date (07-Dec-2026: an English month) as ISO 8601, which reads the same in every language."""
    try:
        return datetime.strptime(day, "%d-%b-%Y").date().isoformat()
    except ValueError:
        return day


def compact_report(path: Path, lang: str = DEFAULT) -> None:
    """pytest-html writes its rows as JSON in a double-quoted attribute, so every quote of the JSON costs five
    bytes (&#34;), and every < and > four: the escaped blob was 1.7 times the JSON. In a single-quoted
    attribute only & and ' need escaping; < is escaped too, so that no tag, not even an inert one, is in
    the page's bytes. The blob is decoded by undoing markupsafe's five escapes (pytest-html's template's),
    and used only where escaping the decoded text again gives back exactly what pytest-html wrote (so the
    browser decodes both to the same JSON); anything unexpected leaves the report as pytest-html wrote it."""
    try:
        page = path.read_text()
    except (OSError, UnicodeDecodeError):
        return
    written_page, page = page, pytest_html_words(page, lang)
    found = list(_BLOB.finditer(page))
    if len(found) != 1:
        if page != written_page:
            write_atomic(path, page)
        return
    written = found[0].group(1)
    blob = (written.replace("&#34;", '"').replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">")
            .replace("&amp;", "&"))
    if _escaped(blob) != written:
        if page != written_page:
            write_atomic(path, page)
        return
    if lang != DEFAULT:  # each row's result cell says the check's outcome; its `result` stays pytest-html's word
        said = {outcome.value: safe_text(outcome_word(outcome, lang)) for outcome in Outcome}
        blob = _RESULT_CELL.sub(lambda m: m.group(1) + said[m.group(2)] + m.group(3) if m.group(2) in said else m.group(0),
                               blob)
    compact = blob.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;")
    match = found[0]
    write_atomic(path, f"{page[:match.start()]}data-jsonblob='{compact}'{page[match.end():]}")


def _escaped(text: str) -> str:
    """markupsafe.escape's five escapes (what pytest-html's template applies to the blob)."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")
            .replace("'", "&#39;"))
