"""The results of a run as one typed record, its JSON (../docs and results.md: format 1), and the lines of text
that say it: the verdict line, the mode, and the root cause that left checks not measured."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from ..i18n import DEFAULT, tr
from ..rejudge import RECOMPUTED
from ..verdict import NOT_MEASURED_PREFIX, Check, Outcome

CHECK_PROPERTY = "gpuaccept_check"
ITEM_PROPERTY = "gpuaccept_item"


@dataclass
class Results:
    """What the results file says. The checks stay Checks until `to_json` writes them; a field that is None
    (or empty, for the lists that only warn) is not in the file."""

    verdict: str
    complete: bool
    started: str
    finished: str
    contract: dict[str, Any]
    host: dict[str, Any]
    checks: Sequence[Check]
    mode: str | None = None  # None only in the results of a run whose judging crashed (`error`)
    sources: dict[str, str] | None = None  # where the readings came from: sysfs, nvml, replay (sources())
    not_in_contract: list[str] | None = None
    report: str | None = None
    evidence: str | None = None
    tool_version: str | None = None
    cluster_node: str | None = None
    hosts: list[dict[str, Any]] | None = None
    replayed_from: str | None = None
    recorded: dict[str, Any] | None = None
    other_failures: int = 0
    foreign_evidence: list[str] = field(default_factory=list)
    foreign_code: list[str] = field(default_factory=list)
    plugins: list[dict[str, str]] | None = None
    code_audit: dict[str, Any] | None = None  # what the foreign-code audit allowed (foreign.py)
    tools: list[dict[str, Any]] | None = None
    records: dict[str, Any] = field(default_factory=dict)  # what a report part recorded of the run (`schedule`)
    contract_warnings: list[str] = field(default_factory=list)
    error: str | None = None

    def counts(self) -> dict[Outcome, int]:
        found = Counter(check.outcome for check in self.checks)
        return {outcome: found[outcome] for outcome in Outcome}

    def document(self) -> dict[str, Any]:
        """The results file's object, keys in the order results.md shows them; its checks are still Checks, each
        written as its JSON by json_lines (the only place a Check becomes a dict)."""
        document: dict[str, Any] = {"gpuaccept": 1, "verdict": self.verdict}
        if self.mode is not None:
            document["mode"] = self.mode
        if self.sources is not None:
            document["sources"] = self.sources
        document.update(complete=self.complete, started=self.started, finished=self.finished,
                        contract=self.contract, host=self.host, checks=self.checks)
        optional = (("not_in_contract", self.not_in_contract), ("report", self.report), ("evidence", self.evidence),
                    ("tool_version", self.tool_version), ("cluster_node", self.cluster_node), ("hosts", self.hosts),
                    ("replayed_from", self.replayed_from), ("recorded", self.recorded),
                    ("other_failures", self.other_failures or None),
                    ("foreign_evidence", self.foreign_evidence or None), ("foreign_code", self.foreign_code or None),
                    ("plugins", self.plugins), ("code_audit", self.code_audit), ("tools", self.tools),
                    ("contract_warnings", self.contract_warnings or None), ("error", self.error))
        document.update((key, value) for key, value in optional if value is not None)
        document.update((key, value) for key, value in self.records.items() if value is not None)
        return document


_ENCODER = json.JSONEncoder(default=str)  # one encoder for every line: a cluster's results have 100,000


def json_lines(document: dict[str, Any]) -> str:
    """The results as JSON a person can grep: a key per line, and a list of objects (checks, tools) an object
    per line. A Check is written as its JSON here, one at a time (a cluster's 100,000 never all held as dicts)."""
    return "".join(json_chunks(document))


def json_chunks(document: dict[str, Any]) -> Iterator[str]:
    """json_lines' text in pieces, a check at a time: what writes a cluster's results without holding them whole."""
    encode = _ENCODER.encode
    yield "{\n "
    for n, (key, value) in enumerate(document.items()):
        yield ",\n " if n else ""
        if _objects(value):
            yield f"{encode(key)}: [\n  "
            for m, v in enumerate(value):
                yield ("" if m == 0 else ",\n  ") + encode(v.to_dict() if isinstance(v, Check) else v)
            yield "\n ]"
        else:
            yield f"{encode(key)}: {encode(value)}"
    yield "\n}\n"


def _objects(value: Any) -> bool:
    """A list of objects (dicts, checks), written an object per line. The checks of a cluster are a Sequence of
    checks only (cluster/merge.py), read one node at a time: its first says what it holds."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, (dict, Check)) for v in value)
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) > 0 \
        and isinstance(value[0], Check)


def write_chunks(chunks: Iterator[str], *outputs: IO[str]) -> None:
    """Each piece to every output: one pass over a cluster's checks writes the results and their sealed copy."""
    for chunk in chunks:
        for out in outputs:
            out.write(chunk)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def junit_properties(check: Check) -> list[tuple[str, str]]:
    """The check as JUnit testcase properties: one JSON document, and each fact on its own (no Python repr)."""
    facts = (("clause", check.clause), ("subject", check.subject), ("outcome", check.outcome.value),
             ("measured", check.measured), ("unit", check.unit), ("required", check.required),
             ("threshold", check.threshold))
    return [(CHECK_PROPERTY, json.dumps(check.to_dict(), sort_keys=True, default=str))] + [
        (f"gpuaccept_{key}", "" if value is None else str(value)) for key, value in facts]


def verdict_line(results: Results, lang: str = DEFAULT) -> str:
    """The one line a script or a person reads last: verdict, completeness and mode when not live. In another
    language the verdict keeps its English word beside the translation (`通过 (ACCEPTED)`), which scripts read."""
    word = tr(lang, "ACCEPTED") if results.verdict == "accepted" else tr(lang, "REJECTED")
    word += "" if results.complete else tr(lang, " (INCOMPLETE)")
    node = (tr(lang, " [NODE {node} of a cluster contract: its own sections only, not the cluster's verdict]",
               node=results.cluster_node) if results.cluster_node else "")
    mode = f" [{mode_label(results, lang)}]" if (results.mode or "live") != "live" else ""
    return tr(lang, "gpuaccept verdict: {word}{mode}{node}", word=word, mode=mode, node=node)


def mode_label(results: Results, lang: str = DEFAULT) -> str:
    """How a run that was not measured live says so, next to its verdict (the terminal, the report's banner)."""
    if results.mode == "replay":
        recorded = results.recorded or {}
        simulated = (tr(lang, " (a SIMULATED run: NVML readings from a recording)")
                     if recorded.get("mode") == "simulated" else "")
        return tr(lang, "REPLAY of host {host} recorded {started}{simulated}: judged from a bundle, not measured now; "
                        "{recomputed}", host=recorded.get("host") or tr(lang, "unnamed"),
                  started=recorded.get("started") or tr(lang, "at an unknown time"), simulated=simulated,
                  recomputed=tr(lang, RECOMPUTED))
    if results.mode == "simulated":
        return tr(lang, "SIMULATED: NVML readings from a recording, not from this host's driver")
    return tr(lang, "LIVE")


def sources(sys_root: Path, nvml_recording: Path | None, replay: Path | None) -> dict[str, str]:
    """Where this run's readings came from, each source option named (results, banner, JUnit)."""
    named = {"sysfs": str(sys_root), "nvml": str(nvml_recording) if nvml_recording else "driver"}
    if replay is not None:
        named = {"replay": str(replay), "sysfs": "the replayed bundle's readings", "nvml": "the replayed bundle's readings"}
    return named


def root_cause(results: Results) -> str:
    """One line for the source every clause needs, when it is missing (NVML could not start): the cause once,
    and how many checks were left not measured by it; "" when NVML answered or no check names it."""
    cause = str(results.host.get("error") or "")
    if not cause:
        return ""
    left = [c for c in results.checks if c.outcome is Outcome.NOT_MEASURED and cause in c.message]
    if not left:
        return ""
    others = results.counts()[Outcome.NOT_MEASURED] - len(left)
    more = f" (and {others} more for other reasons, listed below)" if others else ""
    return f"{cause}: {len(left)} checks not measured{more}"


def shown_message(check: Check) -> str:
    """A check's message as a failure line shows it: the outcome says "not measured" already."""
    return check.message.removeprefix(NOT_MEASURED_PREFIX)
