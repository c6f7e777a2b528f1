"""`python -m pytest_gpuaccept node-check`: the contract's per-node clauses as a scheduler's check, one line and one
exit code in the protocol of the program that calls it (Slurm Prolog/Epilog/HealthCheckProgram, Nagios, Node
Problem Detector, NVIDIA Health Validation), and a sealed bundle of what was measured.

Logic apart from glue: `select` makes the contract judged (its `node_check.quick` sections, never `cluster`),
`finding` reads a run's results into one Finding, each Profile (PROFILES, a table) renders a Finding as its line and
code, and Scontrol drains or resumes a node. `node_check` runs the judging pytest in a process of its own
(rejudge.run_isolated) and ties them together. docs/node-check.md has the examples.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from .node_sections import NodeCheckError, select
from .untrusted import escaped

PASS, FAIL, NOT_MEASURED, NOT_RUN = "pass", "fail", "not measured", "not run"
STATES = (PASS, FAIL, NOT_MEASURED, NOT_RUN)
PREFIX = "[gpuaccept]"  # the drain reason's first word: a node drained with it is ours to resume, no other
RUN_TIMEOUT_S = 600.0
SCONTROL_TIMEOUT_S = 30.0
DEFAULT_PARENT = Path("/var/tmp/gpuaccept-node-check")


# ------------------------------------------------------------------ what the run found

@dataclass(frozen=True, slots=True)
class Finding:
    """One node check's outcome: its state, the first check that did not pass (clause, subject, message), the
    counts, the bundle and its digest, and what was done in the scheduler."""

    state: str  # PASS, FAIL, NOT_MEASURED, NOT_RUN
    node: str
    clause: str = ""
    subject: str = ""
    message: str = ""
    passed: int = 0
    failed: int = 0
    not_measured: int = 0
    digest: str | None = None  # the evidence digest the report states (manifest.json)
    bundle: str | None = None
    seconds: float = 0.0
    simulated: bool = False
    not_per_node: tuple[str, ...] = ()
    scheduler: str = ""  # what --drain / --undrain-if-pass did (or why not)

    @property
    def what(self) -> str:
        """`nvlink.links GPU3`: the first check that did not pass, as the drain reason names it."""
        return " ".join(part for part in (self.clause, self.subject) if part)


def finding(node: str, results: dict[str, Any] | None, problem: str = "", **facts: Any) -> Finding:
    """The run's results read into one Finding: a failed check fails; a verdict with any check not measured (or an
    incomplete run) is NOT_MEASURED; no results at all is NOT_RUN (with `problem` saying why). Never PASS unless
    the verdict is accepted, complete, and every check passed."""
    if results is None:
        return Finding(NOT_RUN, node, "node-check", "host", problem or "the judging run wrote no results", **facts)
    checks = [c for c in results.get("checks") or [] if isinstance(c, dict)]
    counts = {o: sum(1 for c in checks if c.get("outcome") == o) for o in ("passed", "failed", "not_measured")}
    tally = {"passed": counts["passed"], "failed": counts["failed"], "not_measured": counts["not_measured"], **facts}
    simulated = results.get("mode") not in (None, "live")
    tally.setdefault("simulated", simulated)
    first = {o: next((c for c in checks if c.get("outcome") == o), None) for o in ("failed", "not_measured")}
    if problem:  # the bundle did not verify: what it says cannot be relied on
        return Finding(FAIL, node, "bundle", "host", problem, **tally)
    if first["failed"] is not None:
        return _from_check(FAIL, node, first["failed"], tally)
    if first["not_measured"] is not None:
        return _from_check(NOT_MEASURED, node, first["not_measured"], tally)
    verdict, complete = results.get("verdict"), results.get("complete") is True
    if verdict == "accepted" and complete and counts["passed"]:
        return Finding(PASS, node, **tally)
    if verdict == "rejected":  # rejected with no check failed: foreign code, planted evidence, a crash
        why = results.get("error") or "; ".join(map(str, (results.get("foreign_code") or results.get("foreign_evidence")
                                                          or [])[:2])) or "the verdict is rejected"
        return Finding(FAIL, node, "run", "host", str(why), **tally)
    return Finding(NOT_MEASURED, node, "run", "host", "the run did not complete" if not complete
                   else "no check was made", **tally)


def _from_check(state: str, node: str, check: dict[str, Any], tally: dict[str, Any]) -> Finding:
    return Finding(state, node, str(check.get("clause") or "?"), str(check.get("subject") or "?"),
                   str(check.get("message") or ""), **tally)


# ------------------------------------------------------------------ the protocols: one line, one exit code each

def _one_line(text: str) -> str:
    """Vendor-controlled text (a GPU's name, a tool's words) as one line a terminal or a log shows as it is."""
    return escaped(" ".join(text.split()))


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _digest(f: Finding, chars: int = 64) -> str:
    return f"sha256:{f.digest[:chars]}" if f.digest else "none"


def _words(f: Finding) -> str:
    """`FAIL nvlink.links GPU3: <message>` (or the pass count): the finding in a sentence."""
    if f.state == PASS:
        return f"{f.passed} checks passed on {f.node}"
    return f"{f.what}: {f.message}" if f.message else f.what


def _notes(f: Finding) -> str:
    notes = ["SIMULATED run" if f.simulated else "",
             f"{', '.join(f.not_per_node)}.* not per-node: not run here" if f.not_per_node else "", f.scheduler]
    return "".join(f"; {n}" for n in notes if n)


class Profile(Protocol):
    """A caller's protocol: the exit code of each state, and the one line it reads."""

    @property
    def name(self) -> str: ...

    @property
    def codes(self) -> dict[str, int]: ...

    def line(self, f: Finding) -> str: ...


@dataclass(frozen=True, slots=True)
class Slurm:
    """Slurm's Prolog, Epilog and HealthCheckProgram (slurm.conf(5)): exit 0 lets the job (or node) go on; any other
    code of a Prolog or Epilog drains the node with Slurm's own reason; a HealthCheckProgram's code is not read (the
    program drains the node itself: --drain). The line goes to slurmd's log."""

    name: str
    codes: dict[str, int] = field(default_factory=lambda: {PASS: 0, FAIL: 1, NOT_MEASURED: 1, NOT_RUN: 2})
    limit: int = 1000

    def line(self, f: Finding) -> str:
        word = {PASS: "PASS", FAIL: "FAIL", NOT_MEASURED: "NOT MEASURED", NOT_RUN: "NOT RUN"}[f.state]
        return _cut(_one_line(f"gpuaccept node-check {f.node}: {word} {_words(f)}; bundle {_digest(f)}"
                              f"{' ' + f.bundle if f.bundle else ''}{_notes(f)}"), self.limit)


@dataclass(frozen=True, slots=True)
class Nagios:
    """The Monitoring Plugins guidelines (monitoring-plugins.org/doc/guidelines.html): 0 OK, 2 CRITICAL, 3 UNKNOWN
    (here: not measured, or not run), and `SERVICE STATUS - text|perfdata` with perfdata `'label'=value[UOM];;;min`;
    `|` only as that separator."""

    name: str = "nagios"
    codes: dict[str, int] = field(default_factory=lambda: {PASS: 0, FAIL: 2, NOT_MEASURED: 3, NOT_RUN: 3})
    limit: int = 600

    def line(self, f: Finding) -> str:
        word = {PASS: "OK", FAIL: "CRITICAL", NOT_MEASURED: "UNKNOWN", NOT_RUN: "UNKNOWN"}[f.state]
        text = _one_line(f"{_words(f)}; bundle {_digest(f)}{_notes(f)}").replace("|", "/")
        perf = (f"passed={f.passed};;;0 failed={f.failed};;;0 not_measured={f.not_measured};;;0 "
                f"seconds={f.seconds:.1f}s;;;0")
        return f"GPUACCEPT {word} - {_cut(text, self.limit)}|{perf}"


@dataclass(frozen=True, slots=True)
class Npd:
    """Node Problem Detector's custom plugin protocol (pkg/custompluginmonitor/types: OK 0, NonOK 1, Unknown 2): stdout
    is the condition's message, cut by NPD at max_output_length (default 80 bytes, types/config.go): the line is
    ASCII and never longer."""

    name: str = "npd"
    codes: dict[str, int] = field(default_factory=lambda: {PASS: 0, FAIL: 1, NOT_MEASURED: 2, NOT_RUN: 2})
    limit: int = 80

    def line(self, f: Finding) -> str:
        word = {PASS: "OK", FAIL: "FAIL", NOT_MEASURED: "UNKNOWN", NOT_RUN: "UNKNOWN"}[f.state]
        tail = f" bundle {_digest(f, 12)}"
        head = _ascii(_one_line(f"{word} {f.passed} passed" if f.state == PASS else f"{word} {f.what}"))
        return _cut(head, self.limit - len(tail)) + tail


@dataclass(frozen=True, slots=True)
class HealthValidation:
    """NVIDIA Health Validation's exit codes (docs.nvidia.com/health-validation, FAQ): 0 the node may stay in service,
    1 remove it or its health could not be assessed (CRITICAL or UNKNOWN), 2 the check could not run to a verdict."""

    name: str = "health-validation"
    codes: dict[str, int] = field(default_factory=lambda: {PASS: 0, FAIL: 1, NOT_MEASURED: 1, NOT_RUN: 2})

    def line(self, f: Finding) -> str:
        word = {PASS: "PASS", FAIL: "CRITICAL", NOT_MEASURED: "UNKNOWN", NOT_RUN: "NOT RUN"}[f.state]
        return _cut(_one_line(f"gpuaccept {word} {f.node}: {_words(f)}; bundle {_digest(f)}{_notes(f)}"), 1000)


PROFILES: dict[str, Profile] = {p.name: p for p in (Slurm("slurm-prolog"), Slurm("slurm-epilog"),
                                                     Slurm("slurm-healthcheck"), Nagios(), Npd(), HealthValidation())}


# ------------------------------------------------------------------ the scheduler: drain, and resume only our own

Run = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL, errors="replace")


@dataclass(frozen=True, slots=True)
class Scontrol:
    """`scontrol` for one node: read its state and reason, drain it with our reason, resume it where the drain was
    ours. Every command an argv list with a timeout and its exit code checked; the note says what happened."""

    scontrol: str = "scontrol"
    run: Run = _run

    def _call(self, *args: str) -> tuple[str | None, str]:
        argv = [self.scontrol, *args]
        try:
            done = self.run(argv, SCONTROL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"`{' '.join(argv)}` did not finish in {SCONTROL_TIMEOUT_S:g} s"
        except OSError as exc:
            return None, f"`{' '.join(argv)}` could not start: {exc.strerror}"
        if done.returncode != 0:
            said = _one_line(done.stderr or done.stdout)[:200]
            return None, f"`{' '.join(argv)}` exited {done.returncode}" + (f": {said}" if said else "")
        return done.stdout, ""

    def state(self, node: str) -> tuple[tuple[str, ...], str | None] | str:
        """(state words, reason) from `scontrol show node NODE` (its own Reason= line keeps the spaces); a str: why
        it could not be read."""
        from .probes import ParseError  # noqa: PLC0415 (lazy: only with --drain or --undrain-if-pass)
        from .probes.slurm import parse_scontrol_nodes, state_flags  # noqa: PLC0415

        out, problem = self._call("show", "node", node)
        if out is None:
            return problem
        try:
            found = [n for n in parse_scontrol_nodes(out) if n.name == node]
        except ParseError as exc:
            return f"`scontrol show node {node}` could not be read: {exc}"
        if not found:
            return f"`scontrol show node {node}` lists no node {node}"
        return state_flags("+".join(found[0].states)), found[0].reason

    def drain(self, node: str, reason: str) -> str:
        """Drain with our reason, unless someone else drained the node (their reason is kept, the node untouched)."""
        read = self.state(node)
        if isinstance(read, str):
            return f"not drained: {read}"
        flags, theirs = read
        if "DRAIN" in flags and not (theirs or "").startswith(PREFIX):
            return f"not drained: already drained by someone else (reason {_one_line(theirs or 'none')!r}), left as it is"
        _out, problem = self._call("update", f"nodename={node}", "state=drain", f"reason={reason}")
        return f"not drained: {problem}" if problem else f"drained {node}: {reason}"

    def resume(self, node: str) -> str:
        """Resume a node only where it is drained (or draining) with our prefix; any other node is left as it is."""
        read = self.state(node)
        if isinstance(read, str):
            return f"not resumed: {read}"
        flags, reason = read
        if "DRAIN" not in flags:
            return f"{node} not drained: nothing to resume"
        if not (reason or "").startswith(PREFIX):
            return f"not resumed: drained by someone else (reason {_one_line(reason or 'none')!r}), left as it is"
        _out, problem = self._call("update", f"nodename={node}", "state=resume")
        return f"not resumed: {problem}" if problem else f"resumed {node} (was drained by gpuaccept)"


def drain_reason(f: Finding) -> str:
    """`[gpuaccept] nvlink.links GPU3`, one safe line of at most 120 characters (the reason Slurm shows)."""
    words = f.what if f.state == FAIL else f"{f.state}: {f.what}"
    return _cut(_ascii(_one_line(f"{PREFIX} {words}")), 120)


# ------------------------------------------------------------------ the run

@dataclass(frozen=True, slots=True)
class Request:
    contract: Path
    profile: str
    out: Path | None = None
    drain: bool = False
    undrain_if_pass: bool = False
    nvml: Path | None = None
    sysfs: Path | None = None
    node: str | None = None
    timeout: float = RUN_TIMEOUT_S


def node_name(given: str | None) -> str:
    """The node as the scheduler names it: --node, else Slurm's SLURMD_NODENAME (set for Prolog, Epilog and the
    health check), else the short host name."""
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def out_folder(given: Path | None, node: str) -> Path:
    """--out (a new or empty folder, never through a link), else a fresh folder under /var/tmp/gpuaccept-node-check
    named by node and time (the cwd of a Prolog is not the buyer's to fill)."""
    from .outputs import output_folder  # noqa: PLC0415

    if given is not None:
        return output_folder(given, (), "--out")
    DEFAULT_PARENT.mkdir(parents=True, exist_ok=True, mode=0o755)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(tempfile.mkdtemp(prefix=f"{re.sub(r'[^A-Za-z0-9._-]', '_', node)}-{stamp}-", dir=DEFAULT_PARENT))


def judge_node(request: Request, node: str, out: Path) -> Finding:
    """Select the contract's per-node clauses, judge them in a pytest of its own (isolated), verify the bundle it
    wrote in `out`, and read its results into a Finding."""
    from .bundle import verify  # noqa: PLC0415 (lazy: `node-check --help` needs none of it)
    from .contract import ContractError, parse_contract  # noqa: PLC0415
    from .rejudge import run_isolated  # noqa: PLC0415
    from .untrusted import Untrusted, strict_json  # noqa: PLC0415

    started = time.monotonic()
    path = str(request.contract)
    try:
        text = request.contract.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return finding(node, None, f"--contract {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})")
    try:
        chosen = select(text, path)
        parse_contract(chosen.text, path)
    except NodeCheckError as exc:
        return finding(node, None, str(exc))
    except ContractError as exc:
        return finding(node, None, "invalid contract: " + "; ".join(exc.problems[:3]))
    with tempfile.TemporaryDirectory(prefix="gpuaccept-node-check-") as tmp:
        judged = Path(tmp) / f"node-check-{request.contract.name}"
        judged.write_text(chosen.text)
        args = ["-q", f"--contract={judged}", f"--html={out / 'gpuaccept-report.html'}",
                f"--gpuaccept-json={out / 'gpuaccept-results.json'}"]
        args += [f"--gpuaccept-nvml={request.nvml.absolute()}"] if request.nvml else []
        args += [f"--gpuaccept-sysfs={request.sysfs.absolute()}"] if request.sysfs else []
        try:
            done = run_isolated(args, request.timeout)
        except subprocess.TimeoutExpired:
            return finding(node, None, f"the judging run did not finish in {request.timeout:g} s")
    facts: dict[str, Any] = {"bundle": str(out), "seconds": time.monotonic() - started,
                             "not_per_node": chosen.not_per_node}
    try:
        results = strict_json((out / "gpuaccept-results.json").read_bytes(), "gpuaccept-results.json")
    except (OSError, Untrusted):
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-2:])
        return finding(node, None, f"the judging run wrote no results (pytest exit {done.returncode}): {tail}", **facts)
    checked = verify(out)
    if checked.bundle is not None:
        facts["digest"] = str(checked.bundle.manifest.get("evidence_digest") or "") or None
    problem = f"the bundle does not verify: {checked.problems[0]}" if checked.problems else ""
    return finding(node, results if isinstance(results, dict) else None, problem, **facts)


def node_check(request: Request, scheduler: Scontrol | None = None) -> tuple[str, int]:
    """The profile's line and exit code for this node; with --drain a node that did not pass is drained (our reason),
    with --undrain-if-pass a passing node drained by us is resumed. Without either, the scheduler is not touched."""
    profile = PROFILES[request.profile]
    node = node_name(request.node)
    try:
        out = out_folder(request.out, node)
    except (ValueError, OSError) as exc:
        found = finding(node, None, f"--out: {exc}")
    else:
        found = judge_node(request, node, out)
    slurm = scheduler or Scontrol()
    note = ""
    if found.state != PASS and request.drain:
        note = slurm.drain(node, drain_reason(found))
    elif found.state == PASS and request.undrain_if_pass:
        note = slurm.resume(node)
    if note:
        found = replace(found, scheduler=note)
    return profile.line(found), profile.codes[found.state]
