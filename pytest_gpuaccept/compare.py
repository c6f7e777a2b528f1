"""`python -m pytest_gpuaccept compare OLD NEW`: what got worse between two bundles of the same hosts.

Both bundles are verified first, as `verify` does (bundle.verify: opened as data, every digest, the verdict; then
rejudge: judged again from the raw evidence, isolated, and compared with the results and the host they name); one
that does not verify is refused with its problems. Their results are read strictly (a key given twice, NaN or
another results format is refused). The GPUs are matched by UUID and serial as each bundle's results list them (`host.gpus`, and each
node's `identity.gpus` in a cluster): a GPU at the same index with the same UUID and serial is the same card; one
whose UUID and serial both turn up at another index was renumbered and is compared there; any other is named as
swapped and its checks are not compared. Then, clause by clause and subject by subject, the measured value's change
(absolute and %). A row regressed where the value moved the worse way (by the check's own `required`: `>=` higher is
better, `<=` lower is better) by more than the bound, where the share of the published figure fell by more than the
bound, or where the outcome got worse (passed, then not); a check one bundle lacks, and a swapped GPU, are never
"nothing regressed". The bound is the command's `--max-regression` (default 0.05): contracts have no `compare`
section, as the registry's sections are those a run judges.

`compare` itself is pure (two results documents in, rows out); `load` reads a bundle, `render_*` draw the rows.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .bundle import RESULTS_COPY, verify
from .bundle_files import Refused
from .charts import FAIL_RED, PALETTE, SECOND_LINE, TEXT, safe_text, table
from .outputs import Unwritable, write_output
from .rejudge import rejudge
from .report.page import LAYOUT_CSS, READABLE_CSS
from .untrusted import finite, shown

DEFAULT_MAX_REGRESSION = 0.05
_GPU = re.compile(r"GPU(\d+)")
_PAIR = re.compile(r"GPU(\d+)(-|<->)GPU(\d+)$")
_RANK = {"passed": 2, "failed": 1, "not_measured": 0}
MAX_BARS = 64  # subjects drawn per clause; the table lists every one


@dataclass(frozen=True, slots=True)
class Loaded:
    """A bundle's results, once its manifest verified; `problems` are why it is refused."""

    path: Path
    results: dict[str, Any]
    problems: list[str]
    manifest_sha256: str = ""


@dataclass(frozen=True, slots=True)
class Row:
    clause: str
    subject: str  # as NEW names it (OLD's, where only OLD has it)
    status: str  # same, better, worse, regressed, swapped, only in OLD, only in NEW
    old: Any = None
    new: Any = None
    unit: str | None = None
    change: float | None = None
    change_pct: float | None = None
    old_outcome: str | None = None
    new_outcome: str | None = None
    old_subject: str | None = None
    note: str = ""

    @property
    def regressed(self) -> bool:
        return self.status in ("regressed", "swapped", "only in OLD")


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: list[Row]
    gpus: list[str]  # one line per GPU that moved or was swapped
    max_regression: float
    old: dict[str, Any] = field(default_factory=dict)  # verdict, host, manifest of each side
    new: dict[str, Any] = field(default_factory=dict)

    @property
    def regressed(self) -> list[Row]:
        return [row for row in self.rows if row.regressed]

    def to_dict(self) -> dict[str, Any]:
        return {"max_regression": self.max_regression, "old": self.old, "new": self.new, "gpus": self.gpus,
                "regressed": len(self.regressed), "rows": [asdict(row) for row in self.rows]}


def load(path: Path) -> Loaded:
    """The bundle at `path`, verified as `verify` does (digests, then judged again from its raw evidence); its
    results from the sealed copy the manifest lists, read strictly."""
    checked = verify(path)
    if not checked.ok or checked.bundle is None:
        return Loaded(path, {}, checked.problems, checked.manifest_sha256)
    recomputed = rejudge(checked.bundle)
    if recomputed.problems:
        return Loaded(path, {}, [f"re-judged: {line}" for line in recomputed.problems], checked.manifest_sha256)
    try:
        results = checked.bundle.read_json(RESULTS_COPY)
    except (Refused, OSError) as exc:
        return Loaded(path, {}, [f"the results cannot be read: {exc}"], checked.manifest_sha256)
    return Loaded(path, results, [], checked.manifest_sha256)


# ------------------------------------------------------------------ matching the GPUs

def _identities(results: dict[str, Any]) -> dict[str, dict[int, tuple[str, str]]]:
    """(UUID, serial) of each GPU index, per host: '' for a single host, each node's name in a cluster."""
    found: dict[str, dict[int, tuple[str, str]]] = {}
    hosts = [("", results.get("host") or {})] + [(str(h.get("name", "")), h.get("identity") or {})
                                                 for h in results.get("hosts") or [] if isinstance(h, dict)]
    for name, host in hosts:
        for gpu in host.get("gpus") or []:
            if isinstance(gpu, dict) and isinstance(gpu.get("index"), int):
                found.setdefault(name, {})[gpu["index"]] = (str(gpu.get("uuid", "")), str(gpu.get("serial", "")))
    return found


def match_gpus(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[tuple[str, int], int | None], list[str]]:
    """Each OLD GPU (host, index) -> its index in NEW, or None where the card is not there: swapped; and a line for
    each GPU that moved or was swapped."""
    before, after = _identities(old), _identities(new)
    mapping: dict[tuple[str, int], int | None] = {}
    lines = []
    for host, gpus in before.items():
        now = after.get(host, {})
        where = f"{host}/" if host else ""
        for index, (uuid, serial) in sorted(gpus.items()):
            same = [i for i, ident in now.items() if ident == (uuid, serial)]
            if index in same:
                mapping[(host, index)] = index
            elif same:
                mapping[(host, index)] = same[0]
                lines.append(f"{where}GPU{index} (UUID {uuid}, serial {serial}) is GPU{same[0]} in NEW: compared there")
            else:
                mapping[(host, index)] = None
                there = now.get(index)
                instead = f"NEW has UUID {there[0]}, serial {there[1]} there" if there else "NEW has no such GPU"
                lines.append(f"{where}GPU{index} swapped: OLD had UUID {uuid}, serial {serial}; {instead}: not compared")
    return mapping, lines


def _renamed(subject: str, node: str, mapping: dict[tuple[str, int], int | None]) -> str | None:
    """OLD's subject as NEW names it; None where it involves a swapped GPU."""
    gone = False

    def swap(found: re.Match[str]) -> str:
        nonlocal gone
        index = mapping.get((node, int(found.group(1))), int(found.group(1)))
        gone = gone or index is None
        return f"GPU{index}"

    renamed = _GPU.sub(swap, subject)
    # A pair (GPU0-GPU1) and both ways (GPU0<->GPU1) are named lower index first: so are the renumbered ones.
    pair = _PAIR.search(renamed)
    if pair and int(pair.group(1)) > int(pair.group(3)):
        renamed = renamed[:pair.start()] + f"GPU{pair.group(3)}{pair.group(2)}GPU{pair.group(1)}"
    return None if gone else renamed


# ------------------------------------------------------------------ comparing the checks

def _number(value: Any) -> float | None:
    return finite(value)


def _direction(required: str) -> int:
    """+1 where higher is better (`>= x`), -1 where lower is (`<= x`, and `== 0`: a count of errors), 0 where the check
    says neither."""
    text = (required or "").strip()
    return 1 if text.startswith((">", "≥")) else -1 if text.startswith(("<", "≤")) or text == "== 0" else 0


def _fraction(check: dict[str, Any]) -> float | None:
    details = check.get("details")
    return _number(details.get("fraction_of_published")) if isinstance(details, dict) else None


def compare_check(old: dict[str, Any], new: dict[str, Any], bound: float) -> Row:
    """One subject's check in both bundles."""
    before, after = _number(old.get("measured")), _number(new.get("measured"))
    change = pct = None
    worse_by = 0.0
    direction = _direction(str(new.get("required") or old.get("required") or ""))
    if before is not None and after is not None:
        change = after - before
        pct = change / abs(before) if before else None
        worse_by = -direction * pct if pct is not None else (1.0 if direction * change < 0 else 0.0)
    fell = [(_fraction(old) or 0.0) - (_fraction(new) or 0.0)] if _fraction(old) and _fraction(new) else []
    outcome_worse = _RANK.get(str(new.get("outcome")), 0) < _RANK.get(str(old.get("outcome")), 0)
    notes = []
    if worse_by > bound:
        notes.append(f"{worse_by:.1%} worse (bound {bound:.0%})")
    if not notes and fell and fell[0] / (_fraction(old) or 1.0) > bound:  # the figure held, its share fell
        notes.append(f"share of the published figure {_fraction(old):.1%} -> {_fraction(new):.1%}")
    if outcome_worse:
        notes.append(f"{old.get('outcome')} -> {new.get('outcome')}")
    better = worse_by < 0 or _RANK.get(str(new.get("outcome")), 0) > _RANK.get(str(old.get("outcome")), 0)
    status = "regressed" if notes else "worse" if worse_by > 0 else "better" if better else "same"
    return Row(str(new.get("clause")), str(new.get("subject")), status, old.get("measured"), new.get("measured"),
               new.get("unit") or old.get("unit"), change, pct, str(old.get("outcome")), str(new.get("outcome")),
               str(old.get("subject")), "; ".join(notes) or _fixed(old, new))


def _fixed(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A check that did not pass in OLD and passes in NEW (what a re-test is for), in words."""
    return f"fixed: {old.get('outcome')} -> passed" if old.get("outcome") != "passed" and new.get("outcome") == "passed" \
        else ""


def carried(old: dict[str, Any], new: dict[str, Any], old_digest: str) -> Row | None:
    """NEW's check carried by a re-test (--gpuaccept-rerun-failed) rather than measured: from OLD itself, a row of its
    own that is no regression (NEW did not measure it again because it passed in OLD); from another bundle, a
    regression (NEW measured nothing that OLD can be compared with). None where NEW measured it."""
    details = new.get("details")
    source = details.get("carried_from") if isinstance(details, dict) else None
    if not source:
        return None
    ours = old_digest and source == old_digest
    return Row(str(new.get("clause")), str(new.get("subject")), "carried" if ours else "regressed", old.get("measured"),
               None, new.get("unit") or old.get("unit"), None, None, str(old.get("outcome")), str(new.get("outcome")),
               str(old.get("subject")), f"carried from {'OLD' if ours else 'another bundle'} ({shown(source, 64)[:16]}): "
                                        "not measured in NEW")


def _key(check: dict[str, Any]) -> tuple[str, str]:
    return str(check.get("clause")), str(check.get("subject"))


def _node(check: dict[str, Any]) -> str:
    return str(check.get("node") or "")


def compare(old: dict[str, Any], new: dict[str, Any], max_regression: float = DEFAULT_MAX_REGRESSION,
            old_digest: str = "") -> Comparison:
    """Every check of OLD beside the same clause and subject in NEW (GPUs matched by UUID and serial); `old_digest`,
    OLD's manifest SHA-256: a check NEW carried from it is no regression (carried)."""
    mapping, lines = match_gpus(old, new)
    after = {_key(c): c for c in new.get("checks") or [] if isinstance(c, dict)}
    seen: set[tuple[str, str]] = set()
    rows = []
    for check in old.get("checks") or []:
        if not isinstance(check, dict):
            continue
        clause, subject = _key(check)
        renamed = _renamed(subject, _node(check), mapping)
        if renamed is None:
            rows.append(Row(clause, subject, "swapped", check.get("measured"), None, check.get("unit"),
                            old_outcome=str(check.get("outcome")), old_subject=subject,
                            note="a GPU of this subject is another card in NEW: not compared"))
            continue
        match = after.get((clause, renamed))
        if match is None:
            rows.append(Row(clause, subject, "only in OLD", check.get("measured"), None, check.get("unit"),
                            old_outcome=str(check.get("outcome")), old_subject=subject, note="NEW has no such check"))
            continue
        seen.add((clause, renamed))
        rows.append(carried(check, match, old_digest) or compare_check(check, match, max_regression))
    arrived = {(host, index) for host, gpus in _identities(new).items() for index in gpus} - {
        (host, index) for (host, _old), index in mapping.items() if index is not None}
    rows += [Row(k[0], k[1], "only in NEW", None, c.get("measured"), c.get("unit"), new_outcome=str(c.get("outcome")),
                 note=_arrival(c, arrived)) for k, c in after.items() if k not in seen]
    return Comparison(rows, lines, max_regression, _side(old), _side(new))


def _arrival(check: dict[str, Any], arrived: set[tuple[str, int]]) -> str:
    """Why OLD has no such check: a card that is new in NEW, or a check OLD did not make."""
    cards = sorted({int(i) for i in _GPU.findall(str(check.get("subject"))) if (_node(check), int(i)) in arrived})
    return f"GPU{cards[0]} is another card in NEW: nothing to compare it with" if cards else "OLD has no such check"


def _side(results: dict[str, Any]) -> dict[str, Any]:
    host = results.get("host") or {}
    return {"verdict": results.get("verdict"), "finished": results.get("finished"), "hostname": host.get("hostname"),
            "contract": (results.get("contract") or {}).get("sha256"), "mode": results.get("mode")}


# ------------------------------------------------------------------ the same hosts and contract

def _mode(results: dict[str, Any]) -> str:
    """How the results were measured: a replay's bundle keeps the mode of the run it replayed."""
    recorded: dict[str, Any] = results["recorded"] if isinstance(results.get("recorded"), dict) else {}
    mode = recorded.get("mode") if results.get("mode") == "replay" and recorded.get("mode") else results.get("mode")
    return str(mode or "live")


def _facts(results: dict[str, Any]) -> dict[str, str]:
    """What makes two bundles comparable, in words: the host, its GPUs, the contract and the mode."""
    host: dict[str, Any] = results["host"] if isinstance(results.get("host"), dict) else {}
    gpus = [g for g in host.get("gpus") or [] if isinstance(g, dict)]
    models = sorted({str(g.get("name")) for g in gpus})
    nodes = sorted(str(h.get("name")) for h in results.get("hosts") or [] if isinstance(h, dict))
    contract: dict[str, Any] = results["contract"] if isinstance(results.get("contract"), dict) else {}
    return {"host name": str(host.get("hostname") or "-"), "GPU count": str(len(gpus)),
            "GPU model": ", ".join(models) or "none", "cluster nodes": ", ".join(nodes) or "none",
            "contract SHA-256": str(contract.get("sha256") or "-"), "mode": _mode(results).upper()}


def different(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Each way OLD and NEW are not bundles of the same host judged against the same contract, a line each; a
    comparison of two such bundles would call every difference between two machines a regression."""
    theirs, ours = _facts(old), _facts(new)
    return [f"{name}: OLD {shown(theirs[name], 200)}, NEW {shown(ours[name], 200)}" for name in theirs
            if theirs[name] != ours[name]]


# ------------------------------------------------------------------ output

def _shown(value: Any) -> str:
    number = _number(value)
    return "-" if value is None else f"{number:.4g}" if number is not None else str(value)


def _change(row: Row) -> tuple[str, str]:
    if row.change is None:
        return "", ""
    return f"{row.change:+.4g}", f"{row.change_pct:+.1%}" if row.change_pct is not None else ""


def table_rows(rows: Iterable[Row]) -> list[list[str]]:
    head = ["clause", "subject", "unit", "OLD", "NEW", "change", "%", "outcome", "status", "note"]
    body = []
    for row in rows:
        change, pct = _change(row)
        outcome = f"{row.old_outcome or '-'} -> {row.new_outcome or '-'}"
        body.append([row.clause, row.subject, row.unit or "", _shown(row.old), _shown(row.new), change, pct, outcome,
                     row.status.upper() if row.regressed else row.status, row.note])
    return [head, *body]


def render_text(comparison: Comparison, old: Path, new: Path) -> str:
    """The terminal's table, regressions first, and the last line that says whether anything regressed."""
    rows = sorted(comparison.rows, key=lambda r: (not r.regressed, r.clause, r.subject))
    grid = table_rows(rows)
    widths = [min(max(len(line[i]) for line in grid), 60) for i in range(len(grid[0]))]
    text = [shown(f"OLD {old} ({comparison.old.get('verdict')}), NEW {new} ({comparison.new.get('verdict')})", 1000)]
    text += [f"  {shown(line, 1000)}" for line in comparison.gpus]
    text += ["  ".join(shown(cell, 60).ljust(width) for cell, width in zip(line, widths)).rstrip() for line in grid]
    count = len(comparison.regressed)
    fixed, kept = (sum(row.note.startswith(word) for row in comparison.rows) for word in ("fixed", "carried from OLD"))
    if fixed or kept:  # a re-test's bundle (docs/rerun.md): what it fixed, what it did not measure again
        text.append(f"compare: {fixed} fixed, {kept} carried from OLD (not measured in NEW)")
    text.append(f"compare: {count} regressed beyond {comparison.max_regression:.0%}" if count else
                f"compare: nothing regressed beyond {comparison.max_regression:.0%} over {len(comparison.rows)} checks")
    return "\n".join(text)


def bar_pairs(clause: str, rows: list[Row]) -> str:
    """An SVG per clause: each subject's OLD (grey) and NEW (blue, red where it regressed) value as a bar pair."""
    drawn = [r for r in rows if _number(r.old) is not None or _number(r.new) is not None][:MAX_BARS]
    if not drawn:
        return ""
    top = max(abs(_number(v) or 0.0) for r in drawn for v in (r.old, r.new)) or 1.0
    height, label, width = 22 * len(drawn) + 30, 150, 300
    parts = [f'<svg class=gc role=img xmlns="http://www.w3.org/2000/svg" width="{label + width + 120}" '
             f'height="{height}"><title>{html.escape(clause)}: OLD and NEW</title>',
             f'<text x="4" y="14" fill="{TEXT}" font-size="12">{html.escape(clause)} ({html.escape(drawn[0].unit or "")})'
             f' <tspan fill="{SECOND_LINE}">OLD</tspan> / <tspan fill="{PALETTE[0]}">NEW</tspan></text>']
    for n, row in enumerate(drawn):
        y = 24 + 22 * n
        parts.append(f'<text x="4" y="{y + 14}" fill="{TEXT}" font-size="11">{html.escape(row.subject[:24])}</text>')
        for k, (value, colour) in enumerate(((row.old, SECOND_LINE), (row.new, FAIL_RED if row.regressed else PALETTE[0]))):
            length = int(width * abs(_number(value) or 0.0) / top)
            parts.append(f'<rect x="{label}" y="{y + 10 * k}" width="{length}" height="9" fill="{colour}"/>')
            parts.append(f'<text x="{label + length + 4}" y="{y + 9 + 10 * k}" fill="{TEXT}" font-size="9">'
                         f"{html.escape(_shown(value))}</text>")
    return "".join(parts) + "</svg>"


def render_html(comparison: Comparison, old: Path, new: Path) -> str:
    """One self-contained page in the report's style: the verdict line, the GPUs, a bar pair per clause, the table."""
    count = len(comparison.regressed)
    headline = (f"{count} regressed beyond {comparison.max_regression:.0%}" if count
                else f"nothing regressed beyond {comparison.max_regression:.0%}")
    by_clause: dict[str, list[Row]] = {}
    for row in comparison.rows:
        by_clause.setdefault(row.clause, []).append(row)
    charts = "".join(bar_pairs(clause, rows) for clause, rows in by_clause.items())
    gpus = "".join(f"<li>{safe_text(line)}</li>" for line in comparison.gpus)
    ordered = sorted(comparison.rows, key=lambda r: (not r.regressed, r.clause, r.subject))
    return ("<!DOCTYPE html><html><head><meta charset=utf-8><title>gpuaccept compare</title>"
            f"<style>body {{ font-family: sans-serif; }} {READABLE_CSS}{LAYOUT_CSS}</style></head><body>"
            f'<h1 data-regressed="{count}">compare: <span class={"gf" if count else "gp"}>{safe_text(headline)}</span></h1>'
            f"<p>OLD {safe_text(str(old))} ({safe_text(str(comparison.old.get('verdict')))}, "
            f"{safe_text(str(comparison.old.get('finished')))}); NEW {safe_text(str(new))} "
            f"({safe_text(str(comparison.new.get('verdict')))}, {safe_text(str(comparison.new.get('finished')))})</p>"
            + (f"<h2>GPUs</h2><ul>{gpus}</ul>" if gpus else "")
            + f"<h2>Before and after</h2>{charts}<h2>Every check</h2>{table(table_rows(ordered))}</body></html>\n")


def run(old_path: Path, new_path: Path, json_out: Path | None, html_out: Path | None, max_regression: float,
        allow_different: bool = False) -> int:
    """The command: 0 when nothing regressed beyond the bound, 1 when something did, 2 when a bundle is refused
    (or the two are of different hosts or contracts, unless `allow_different`)."""
    if not 0 <= max_regression < 1:
        print(f"--max-regression {max_regression:g}: expected a fraction from 0 to under 1, such as 0.05 (5 %)")
        return 2
    refused = False
    loaded = []
    for label, path in (("OLD", old_path), ("NEW", new_path)):
        bundle = load(path)
        for problem in bundle.problems[:50]:
            print(f"FAIL {label} {shown(path)}: {shown(problem, 1000)}")
        if bundle.problems:
            count = f"{len(bundle.problems)} problem" + ("" if len(bundle.problems) == 1 else "s")
            print(f"{label} {shown(path)}: bundle does NOT verify ({count}): refused, not compared")
            refused = True
        loaded.append(bundle)
    if refused:
        return 2
    differs = different(loaded[0].results, loaded[1].results)
    for line in differs:
        print(f"{'NOTE' if allow_different else 'FAIL'} OLD and NEW differ: {line}")
    if differs and not allow_different:
        print(f"compare: refused: OLD and NEW are not bundles of the same host and contract ({len(differs)} "
              f"{'difference' if len(differs) == 1 else 'differences'} above); --allow-different compares them anyway")
        return 2
    comparison = compare(loaded[0].results, loaded[1].results, max_regression, loaded[0].manifest_sha256)
    comparison.old["manifest_sha256"], comparison.new["manifest_sha256"] = loaded[0].manifest_sha256, loaded[1].manifest_sha256
    print(render_text(comparison, old_path, new_path))
    try:
        if json_out is not None:
            write_output(json_out, json.dumps(comparison.to_dict(), indent=1) + "\n",
                         (old_path, new_path), "--json")
        if html_out is not None:
            write_output(html_out, render_html(comparison, old_path, new_path), (old_path, new_path), "--html")
    except Unwritable as exc:
        print(f"FAIL {exc}")
        return 2
    return 1 if comparison.regressed else 0
