"""`verify` and `replay` as the buyer runs them: what was verified, said first, and every string of the bundle shown
as data.

verify's first lines say what was verified: the mode the bundle was measured in and its sources, the contract it
was judged against (the bundle's copy, with its SHA-256), the host as the raw evidence names it (re-judged, not
`results.host`) and the verdict recomputed from the raw evidence. Then every problem, a line each (at most
MAX_PROBLEMS, then how many more).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .bundle import CONTRACT_COPY, Signature, SshKeygen, check_signatures, system_ssh_keygen, verify
from .bundle_files import BundleFiles, Refused, read_file
from .outputs import Unwritable, output_folder
from .rejudge import RECOMPUTED, Rejudged, rejudge, replay_args, run_isolated
from .untrusted import escaped, shown

MAX_PROBLEMS = 50  # problem lines printed; a manifest of a million changed files is one count, not a million lines
MAX_GPUS_SHOWN = 16
MAX_CONTRACT_BYTES = 1 << 20


def _mode(results: dict[str, Any] | None, recorded: dict[str, Any] | None) -> str:
    """How the bundle was measured, as its manifest recorded it (the re-judge reads it there)."""
    mode = str((recorded or {}).get("mode") or (results or {}).get("mode") or "unknown")
    words = {"live": "LIVE (measured on the host)", "simulated": "SIMULATED (NVML readings from a recording, not a "
             "live host)", "replay": "REPLAY (judged again from an earlier bundle)"}
    sources = (results or {}).get("sources") or {}
    named = ", ".join(f"{shown(k, 40)} {shown(v, 200)}" for k, v in sources.items()) if isinstance(sources, dict) else ""
    return f"mode: {words.get(mode, shown(mode, 40).upper())}" + (f"; sources: {named}" if named else "")


def _host(results: dict[str, Any] | None) -> str:
    """The host and its GPUs (UUID, serial) as the re-judging run read them from the raw evidence."""
    if not results:
        return "host: not known (the raw evidence was not re-judged)"
    host = results.get("host") or {}
    gpus = [g for g in host.get("gpus") or [] if isinstance(g, dict)]
    listed = "; ".join(f"GPU{g.get('index')} {g.get('uuid')} serial {g.get('serial')}" for g in gpus[:MAX_GPUS_SHOWN])
    more = f"; and {len(gpus) - MAX_GPUS_SHOWN} more" if len(gpus) > MAX_GPUS_SHOWN else ""
    nodes = [h for h in results.get("hosts") or [] if isinstance(h, dict)]
    cluster = f"; a cluster of {len(nodes)} nodes" if nodes else ""
    return shown(f"host (from the raw evidence, re-judged): {host.get('hostname') or '-'}, driver {host.get('driver') or '-'}, "
                 f"{len(gpus)} GPUs: {listed or 'none'}{more}{cluster}", 2000)


def _contract(opened: BundleFiles | None, expected: Path | None) -> tuple[str, list[str]]:
    """The line naming the contract judged (the bundle's copy and its SHA-256), and the problem where the buyer's
    contract is another."""
    if opened is None:
        return "contract judged: not known (the bundle was refused)", []
    try:
        digest = hashlib.sha256(opened.read(CONTRACT_COPY)).hexdigest()
    except (Refused, OSError) as exc:
        return f"contract judged: the bundle's {CONTRACT_COPY} cannot be read ({shown(exc)})", []
    line = f"contract judged: the bundle's {CONTRACT_COPY}, SHA-256 {digest}"
    if expected is None:
        return line, []
    try:
        theirs = hashlib.sha256(read_file(expected.absolute().parent, expected.name, MAX_CONTRACT_BYTES)).hexdigest()
    except (OSError, Refused) as exc:
        return line, [f"--contract {shown(expected)} cannot be read: {shown(exc)}"]
    if theirs != digest:
        return line, [f"the bundle was judged against another contract: its {CONTRACT_COPY} has SHA-256 {digest}, "
                      f"--contract {shown(expected)} has {theirs}"]
    return line + f" (the same as --contract {shown(expected)})", []


def _verdict(recomputed: Rejudged | None) -> str:
    if recomputed is None:
        return f"{RECOMPUTED}: none (the bundle does not verify, so its evidence was not judged)"
    if recomputed.verdict is None:
        return f"{RECOMPUTED}: none (the re-judging run wrote no results)"
    agrees = "agrees with" if not recomputed.problems else "DIFFERS from"
    return (f"{RECOMPUTED}: {recomputed.verdict.upper()} over {recomputed.checks} checks, which {agrees} the "
            f"bundle's results ({shown(recomputed.recorded_verdict, 40).upper()})")


def _relative(path: Path, folder: Path) -> str:
    """A file of the bundle as the buyer named the bundle (`gpuaccept-evidence/signatures/1.sig`)."""
    try:
        return shown(path.relative_to(folder))
    except ValueError:
        return shown(path)


def run_verify(folder: Path, report: Path | None, allowed_signers: Path | None, rejudged: Path | None = None,
               contract: Path | None = None, keygen: SshKeygen | None = None) -> int:
    """Every digest and the verdict; the signatures too when `allowed_signers` says whose keys count (checked with
    the system's ssh-keygen or `keygen`, the buyer's). Without it a signature is never called valid. Then the
    verdict that counts: every clause re-judged from the raw evidence in a process of its own, isolated."""
    if rejudged is not None:
        try:
            output_folder(rejudged, (folder,), "--rejudged")
        except Unwritable as exc:
            print(f"FAIL {exc}")
            return 2
    result = verify(folder, report)
    opened = result.bundle
    problems = list(result.problems)
    checked = []
    if allowed_signers is not None and opened is not None:
        keygen = keygen or system_ssh_keygen()
        if not opened.signatures:
            problems.append("no signature in the bundle's signatures/ folder")
        checked = check_signatures(opened, allowed_signers, keygen)
        problems += [signature.problem for signature in checked if signature.problem]
    contract_line, contract_problems = _contract(opened, contract)
    problems += contract_problems
    # Judging evidence that does not verify would be judging its editor: the re-judge needs files as listed (what
    # the results and the report state is what the re-judge is compared with).
    recomputed = rejudge(opened, rejudged) if result.files_ok and opened is not None else None
    problems += [f"re-judged: {line}" for line in recomputed.problems] if recomputed else []
    recorded = recomputed.results.get("recorded") if recomputed and recomputed.results else None
    print(f"verify {shown(folder)}")
    print(_mode(recomputed.results if recomputed else None, recorded if isinstance(recorded, dict) else None))
    print(contract_line)
    print(_host(recomputed.results if recomputed else None))
    print(_verdict(recomputed))
    _problems(problems, result.manifest_sha256)
    _signatures(folder, opened, allowed_signers, [] if problems else checked, keygen)
    return 1 if problems else 0


def _problems(problems: list[str], manifest_sha256: str) -> None:
    """The digests' line, then each problem (at most MAX_PROBLEMS, then how many more)."""
    if problems:
        print(f"bundle does NOT verify ({len(problems)} problems); manifest SHA-256 {manifest_sha256 or 'none'}")
    else:
        print(f"OK: every file matches the manifest; manifest SHA-256 {manifest_sha256}")
    for problem in problems[:MAX_PROBLEMS]:
        print(f"FAIL {shown(problem, 1000)}")
    if len(problems) > MAX_PROBLEMS:
        print(f"... and {len(problems) - MAX_PROBLEMS} more problems, not shown")


def _signatures(folder: Path, opened: BundleFiles | None, allowed_signers: Path | None, good: list[Signature],
                keygen: SshKeygen | None) -> None:
    """Who signed (only over a bundle that verifies: a good signature over one that does not vouches for nothing),
    or that the signatures were not checked, and with which ssh-keygen."""
    for signature in good:
        print(f"signed by: {shown(signature.signer, 200)} with {shown(signature.key, 200) or 'a key'} in "
              f"{shown(allowed_signers)} ({_relative(signature.file, folder)} verified)")
    if allowed_signers is None and opened is not None and opened.signatures:
        names = ", ".join(_relative(opened.evidence / name, folder) for name in opened.signatures)
        print(f"signatures NOT checked: {names} (who signed is not known; to check: "
              f"python -I -m pytest_gpuaccept verify {shown(folder)} --allowed-signers FILE)")
    if allowed_signers is not None:
        print(f"signatures checked with ssh-keygen: {keygen or system_ssh_keygen()}")


def run_replay(folder: Path, contract: Path | None, out: Path) -> int:
    """The bundle's raw evidence judged again against `contract` (default: its own copy) in an isolated pytest,
    every output in `out` (new or empty, outside the bundle); pytest's output shown escaped; pytest's exit code."""
    checked = verify(folder, evidence_only=True)
    if not checked.ok or checked.bundle is None:
        for problem in checked.problems[:MAX_PROBLEMS]:
            print(f"FAIL {shown(problem, 1000)}")
        print(f"bundle does NOT verify ({len(checked.problems)} problems): not replayed")
        return 1
    try:
        output_folder(out, (folder,), "--out")
    except Unwritable as exc:
        print(f"FAIL {exc}")
        return 2
    evidence = checked.bundle.evidence.resolve()
    judged = contract.resolve() if contract is not None else evidence / CONTRACT_COPY
    done = run_isolated(replay_args(evidence, judged, out.resolve()))
    print(escaped(done.stdout, keep="\t\n"), end="")
    print(escaped(done.stderr, keep="\t\n"), end="")
    print(f"replay of {shown(folder)} against {shown(judged)}: report {shown(out / 'report.html')}, "
          f"results {shown(out / 'results.json')}")
    return done.returncode
