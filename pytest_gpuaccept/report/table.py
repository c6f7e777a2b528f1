"""pytest-html's table, a row per check (result, test, clause, subject, measured, required) with the check's
detail under it, but none for a passing pair (its clause's row in "Pairs" counts it: pairs.py), and the page made
smaller once pytest-html wrote it."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ..charts import safe_text
from ..state import State
from ..verdict import Check
from .details import check_html, crashed
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

    def _check(self, report: pytest.TestReport) -> Check | None:
        item = item_of(report)
        return self.state.checks.get((item["clause"], item["subject"])) if item else None

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        del cells[2:]
        cells += ['<th class="sortable" data-column-type="clause">Clause</th>', "<th>Subject</th>",
                  "<th>Measured</th>", "<th>Required</th>"]

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        if report.passed and report.when != "call":
            return  # pytest-html shows a passed setup or teardown nowhere
        item = item_of(report) or {}
        check = self._check(report)
        if check is not None and report.when == "call" and grouped(check):
            del cells[:]  # a passing pair: its clause's row in "Pairs" counts it (pairs.py), the results list it
            return
        measured = None if check is None else check.measured
        shown = "—" if measured is None or check is None else f"{measured} {check.unit or ''}".strip()
        del cells[2:]
        cells += [f'<td class="col-clause">{safe_text(str(item.get("clause", "")))}</td>',
                  f"<td>{safe_text(str(item.get('subject', '')))}</td>", f"<td>{safe_text(shown)}</td>",
                  f"<td>{safe_text('' if check is None else check.required)}</td>"]

    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        """A check's detail (what opens under its row) is its message, facts and links; pytest's own log is
        kept below it only where the test crashed."""
        if report.when != "call" and report.passed:
            return  # pytest-html shows a passed setup or teardown nowhere
        check = self._check(report)
        if check is not None:
            data[:] = [check_html(self.state.runner.evidence, check), *(data if crashed(check) else [])]

    def pytest_html_report_title(self, report: Any) -> None:
        report.title = f"GPU acceptance: {self.state.contract.vendor}"


_BLOB = re.compile(r'data-jsonblob="([^"]*)"')


def compact_report(path: Path) -> None:
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
