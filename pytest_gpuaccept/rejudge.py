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

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bundle_files import BundleFiles, Refused
from .untrusted import Untrusted, shown, strict_json

CONTRACT_COPY, RESULTS_COPY = "contract.yaml", "results.json"  # as bundle.py names them

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
    results: dict[str, Any] | None = None  # the re-judging run's own results


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


ISOLATED_INI = "[pytest]\n"  # the re-judge's own ini: no pytest.ini, pyproject.toml or tox.ini is looked for


def isolated_pytest(args: list[str], work: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a pytest that nothing of a bundle or the current folder configures:
    `python -I` (no PYTHONPATH, no user site, no working folder on sys.path), an empty ini file of its own in
    `work` (`-c`, so no ini is discovered from the bundle or any folder above) with `work` as its rootdir (no
    conftest.py of anyone's), and no PYTEST_* variable (PYTEST_ADDOPTS, PYTEST_PLUGINS) of the caller's."""
    ini = work / "pytest.ini"
    ini.write_text(ISOLATED_INI)
    argv = [sys.executable, "-I", "-m", "pytest", "-c", str(ini), f"--rootdir={work}", "-p", "no:cacheprovider",
            *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "SSH_AUTH_SOCK"}
    return argv, env


def replay_args(evidence: Path, contract: Path, out: Path) -> list[str]:
    """A replay's own options: the contract (the bundle's copy, or the buyer's), the bundle, every output in `out`."""
    return ["-q", f"--contract={contract}", f"--gpuaccept-replay={evidence}", f"--html={out / 'report.html'}",
            f"--gpuaccept-json={out / 'results.json'}"]


def run_isolated(args: list[str], timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run pytest isolated (isolated_pytest) in a working folder of its own, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="gpuaccept-isolated-") as tmp:
        argv, env = isolated_pytest(args, Path(tmp))
        return subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, errors="replace")


def recorded_results(opened: BundleFiles) -> list[tuple[str, dict[str, Any]]]:
    """Every results file the bundle holds, each with its name: the copy in the evidence folder and the results
    the manifest lists beside the report (a vendor who rewrote one and not the other is caught either way)."""
    found: list[tuple[str, dict[str, Any]]] = []
    names = [(RESULTS_COPY, opened.read)] + [(name, opened.read_document) for name in opened.documents
                                              if name.endswith(".json")]
    for name, read in names:
        try:
            results = strict_json(read(name), name)
            found.append((name, results if isinstance(results, dict) else {"verdict": None, "checks": []}))
        except (Refused, Untrusted, OSError) as exc:
            found.append((name, {"verdict": None, "checks": [], "error": f"unreadable: {exc}"}))
    return found


def rejudge(opened: BundleFiles, keep: Path | None = None) -> Rejudged:
    """Judge the bundle `opened` (verified) again, in a process of its own (isolated_pytest) against the bundle's
    own contract copy, and compare with every results file the bundle holds and with the host it names.

    `keep` names a new or empty folder (outside the bundle: outputs.output_folder) for the re-judging run's own
    report and results; by default they go to a temporary folder that is removed.
    """
    recorded = recorded_results(opened)
    if keep is not None:
        return _run(opened, keep, recorded)
    with tempfile.TemporaryDirectory(prefix="gpuaccept-verify-") as tmp:
        return _run(opened, Path(tmp), recorded)


def _run(opened: BundleFiles, out: Path, recorded: list[tuple[str, dict[str, Any]]]) -> Rejudged:
    evidence = opened.evidence.resolve()
    verdict = recorded[0][1].get("verdict")
    try:
        done = run_isolated(replay_args(evidence, evidence / CONTRACT_COPY, out.resolve()))
    except subprocess.TimeoutExpired:
        return Rejudged(None, verdict, (f"the replay did not finish in {TIMEOUT_S:g} s",))
    try:
        recomputed = strict_json((out / "results.json").read_bytes(), "results.json")
    except (OSError, Untrusted):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Rejudged(None, verdict, (f"the replay wrote no results (exit {done.returncode}): "
                                        + " | ".join(shown(line, 200) for line in tail),))
    problems = [shown(f"{name}: {line}", 600) for name, results in recorded
                for line in differences(results, recomputed) + host_differences(results, recomputed)]
    if recomputed.get("foreign_code"):  # the verifying machine's own environment, not the bundle
        problems.insert(0, "the re-judging run found code it did not come with on THIS verifying machine (its verdict "
                           "is then rejected whatever the bundle holds): " + shown("; ".join(map(str, recomputed["foreign_code"])), 600)
                        + "; re-judge in a clean environment (python -I -m pytest_gpuaccept verify ...)")
    if not recomputed.get("complete", False):
        problems.append("the replay of the bundle did not complete")
    return Rejudged(recomputed.get("verdict"), verdict, tuple(problems), len(recomputed.get("checks", [])), recomputed)


IDENTITY = ("hostname", "driver", "cuda")
GPU_IDENTITY = ("index", "name", "uuid", "serial")


def identity(results: dict[str, Any]) -> dict[str, Any]:
    """Who the results say was measured: the host (its name, driver, CUDA and each GPU's index, name, UUID and
    serial) and, in a cluster, each node's."""
    def of(host: Any) -> dict[str, Any]:
        host = host if isinstance(host, dict) else {}
        gpus = [g for g in host.get("gpus") or [] if isinstance(g, dict)]
        return {**{k: host.get(k) for k in IDENTITY},
                "gpus": [{k: gpu.get(k) for k in GPU_IDENTITY} for gpu in gpus]}

    nodes = {str(h.get("name")): of(h.get("identity")) for h in results.get("hosts") or [] if isinstance(h, dict)}
    return {"host": of(results.get("host")), "nodes": nodes}


def host_differences(recorded: dict[str, Any], recomputed: dict[str, Any]) -> list[str]:
    """Every way the host the bundle's results name differs from the one its raw evidence gives (a GPU swap hidden
    by editing `results.host` shows here, named by the GPU)."""
    theirs, ours = identity(recorded), identity(recomputed)
    problems = []
    for where, said, read in [("host", theirs["host"], ours["host"])] + [
            (f"node {shown(n, 80)}", theirs["nodes"].get(n), ours["nodes"].get(n))
            for n in sorted(set(theirs["nodes"]) | set(ours["nodes"]))]:
        if said == read:
            continue
        if said is None or read is None:
            problems.append(f"{where}: {'not in the bundle' if said is None else 'not in the raw evidence'}")
            continue
        for key in IDENTITY:
            if said.get(key) != read.get(key):
                problems.append(f"{where} {key}: the results say {shown(said.get(key), 80)!r}, the raw evidence "
                                f"{shown(read.get(key), 80)!r}")
        problems += _gpu_differences(where, said["gpus"], read["gpus"])
    return problems


def _gpu_differences(where: str, said: list[dict[str, Any]], read: list[dict[str, Any]]) -> list[str]:
    """A line for each GPU whose index, name, UUID or serial the results state otherwise than the raw evidence."""
    if len(said) != len(read):
        return [f"{where} GPUs: the results list {len(said)} ({_gpus(said)}), the raw evidence {len(read)} "
                f"({_gpus(read)})"]
    return [f"{where} GPU{shown(theirs.get('index'), 20)}: the results say {_gpus([theirs])}, the raw evidence "
            f"{_gpus([ours])}" for theirs, ours in zip(said, read) if theirs != ours]


def _gpus(gpus: list[dict[str, Any]]) -> str:
    return shown("; ".join(f"GPU{g.get('index')} {g.get('name')} {g.get('uuid')} serial {g.get('serial')}"
                           for g in gpus) or "none", 600)
