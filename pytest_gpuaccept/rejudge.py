"""The verdict that counts: the bundle re-judged from its raw evidence, on the verifying machine.

The host's run is a capture: tool outputs, NVML and sysfs readings, the contract's bytes. Whoever verifies a
bundle judges that capture again in a process of its own (`python -I -m pytest --contract=<the bundle's contract
copy> --gpuaccept-replay=<the bundle>`, into a folder outside the bundle) and compares, check by check, what it
finds with what the bundle's results say. A vendor's plugin that rewrote a verdict at capture time, or a results
file edited afterwards, then shows as a difference, named by its check.

Compared per check (clause, subject): the outcome, the measured value, its unit, the requirement and the
threshold. Not compared: messages, evidence lists and test ids, which may word the same judgement differently
between versions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bundle import CONTRACT_COPY, MANIFEST, RESULTS_COPY

COMPARED = ("outcome", "measured", "unit", "required", "threshold")
TIMEOUT_S = 900.0  # a replay runs no tool; a 1,000-node cluster bundle's judging is the longest one
RECOMPUTED = "verdict recomputed from the raw evidence on the verifying machine"  # the words a signer reads


@dataclass(frozen=True, slots=True)
class Rejudged:
    """What the verifying machine made of the bundle: its verdict, and each way it differs from the bundle's."""

    verdict: str | None  # None: the re-judging run wrote no results (its problem says why)
    recorded_verdict: str | None
    problems: tuple[str, ...]
    checks: int = 0


def _key(check: dict[str, Any]) -> tuple[str, str]:
    return str(check.get("clause")), str(check.get("subject"))


def differences(recorded: dict[str, Any], recomputed: dict[str, Any]) -> list[str]:
    """Every way the bundle's results differ from the re-judged ones, a line each, naming the check."""
    problems = []
    if recorded.get("verdict") != recomputed.get("verdict"):
        problems.append(f"verdict: the bundle says {recorded.get('verdict')!r}, re-judged from its evidence "
                        f"{recomputed.get('verdict')!r}")
    theirs = {_key(c): c for c in recorded.get("checks", []) if isinstance(c, dict)}
    ours = {_key(c): c for c in recomputed.get("checks", []) if isinstance(c, dict)}
    for key in sorted(theirs.keys() - ours.keys()):
        problems.append(f"check {key[0]} {key[1]}: in the bundle's results, not made when re-judged")
    for key in sorted(ours.keys() - theirs.keys()):
        problems.append(f"check {key[0]} {key[1]}: made when re-judged ({ours[key].get('outcome')}), "
                        "missing from the bundle's results")
    for key in sorted(theirs.keys() & ours.keys()):
        changed = [f"{name} {theirs[key].get(name)!r} in the bundle, {ours[key].get(name)!r} re-judged"
                   for name in COMPARED if theirs[key].get(name) != ours[key].get(name)]
        if changed:
            problems.append(f"check {key[0]} {key[1]}: " + "; ".join(changed))
    return problems


def replay_argv(evidence: Path, out: Path) -> list[str]:
    """The re-judging run: isolated from the environment (-I: no PYTHONPATH, no user site, no working-folder
    imports), the bundle's own contract bytes, every output in `out`."""
    return [sys.executable, "-I", "-m", "pytest", "-p", "no:cacheprovider", "-q",
            f"--contract={evidence / CONTRACT_COPY}", f"--gpuaccept-replay={evidence}",
            f"--html={out / 'report.html'}", f"--gpuaccept-json={out / 'results.json'}"]


def recorded_results(evidence: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every results file the bundle holds, each with its name: the copy in the evidence folder and the results
    the manifest lists beside the report (a vendor who rewrote one and not the other is caught either way)."""
    names = [RESULTS_COPY]
    try:
        manifest = json.loads((evidence / MANIFEST).read_text())
        names += [f"../{entry['path']}" for entry in manifest.get("bundle", []) if str(entry.get("path")).endswith(".json")]
    except (OSError, ValueError, TypeError, AttributeError):
        pass  # verify names an unreadable manifest; the copy is still compared
    found = []
    for name in names:
        try:
            found.append((name.removeprefix("../"), json.loads((evidence / name).read_text())))
        except (OSError, ValueError) as exc:
            found.append((name.removeprefix("../"), {"verdict": None, "checks": [], "error": f"unreadable: {exc}"}))
    return found


def rejudge(evidence: Path, keep: Path | None = None) -> Rejudged:
    """Judge the bundle whose evidence folder is `evidence` again, in a process of its own, and compare with every
    results file the bundle holds.

    `keep` names a folder (outside the bundle) for the re-judging run's own report and results; by default they
    go to a temporary folder that is removed.
    """
    recorded = recorded_results(evidence)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        return _run(evidence, keep, recorded)
    with tempfile.TemporaryDirectory(prefix="gpuaccept-verify-") as tmp:
        return _run(evidence, Path(tmp), recorded)


def _run(evidence: Path, out: Path, recorded: list[tuple[str, dict[str, Any]]]) -> Rejudged:
    argv = replay_argv(evidence.resolve(), out.resolve())
    verdict = recorded[0][1].get("verdict")
    try:
        done = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Rejudged(None, verdict, (f"the replay did not finish in {TIMEOUT_S:g} s",))
    try:
        recomputed = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Rejudged(None, verdict, (f"the replay wrote no results (exit {done.returncode}): "
                                        + " | ".join(line[:200] for line in tail),))
    problems = [f"{name}: {line}" for name, results in recorded for line in differences(results, recomputed)]
    if recomputed.get("foreign_code"):  # the verifying machine's own environment, not the bundle
        problems.insert(0, "the re-judging run found code it did not come with on THIS verifying machine (its verdict "
                           "is then rejected whatever the bundle holds): " + "; ".join(map(str, recomputed["foreign_code"]))[:600]
                        + "; re-judge in a clean environment (python -I -m pytest_gpuaccept verify ...)")
    if not recomputed.get("complete", False):
        problems.append("the replay of the bundle did not complete")
    return Rejudged(recomputed.get("verdict"), verdict, tuple(problems), len(recomputed.get("checks", [])))
