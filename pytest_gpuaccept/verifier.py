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
from .bundle_files import EVIDENCE_DIR, MANIFEST, BundleFiles, Refused, evidence_folder, read_file
from .i18n import DEFAULT, tr
from .outputs import Unwritable, output_folder
from .rejudge import RECOMPUTED, Rejudged, rejudge, replay_args, run_isolated
from .untrusted import escaped, shown

MAX_PROBLEMS = 50  # problem lines printed; a manifest of a million changed files is one count, not a million lines
MAX_GPUS_SHOWN = 16
MAX_CONTRACT_BYTES = 1 << 20


def _mode(results: dict[str, Any] | None, recorded: dict[str, Any] | None, lang: str = DEFAULT) -> str:
    """How the bundle was measured, as its manifest recorded it (the re-judge reads it there)."""
    mode = str((recorded or {}).get("mode") or (results or {}).get("mode") or "unknown")
    words = {"live": tr(lang, "LIVE (measured on the host)"),
             "simulated": tr(lang, "SIMULATED (NVML readings from a recording, not a live host)"),
             "replay": tr(lang, "REPLAY (judged again from an earlier bundle)")}
    sources = (results or {}).get("sources") or {}
    named = ", ".join(f"{shown(k, 40)} {shown(v, 200)}" for k, v in sources.items()) if isinstance(sources, dict) else ""
    return (tr(lang, "mode: {mode}", mode=words.get(mode, shown(mode, 40).upper()))
            + (tr(lang, "; sources: {sources}", sources=named) if named else ""))


def _host(results: dict[str, Any] | None, lang: str = DEFAULT) -> str:
    """The host and its GPUs (UUID, serial) as the re-judging run read them from the raw evidence."""
    if not results:
        return tr(lang, "host: not known (the raw evidence was not re-judged)")
    host = results.get("host") or {}
    gpus = [g for g in host.get("gpus") or [] if isinstance(g, dict)]
    listed = "; ".join(tr(lang, "GPU{index} {uuid} serial {serial}", index=g.get("index"), uuid=g.get("uuid"),
                          serial=g.get("serial")) for g in gpus[:MAX_GPUS_SHOWN])
    more = tr(lang, "; and {n} more", n=len(gpus) - MAX_GPUS_SHOWN) if len(gpus) > MAX_GPUS_SHOWN else ""
    nodes = [h for h in results.get("hosts") or [] if isinstance(h, dict)]
    cluster = tr(lang, "; a cluster of {n} nodes", n=len(nodes)) if nodes else ""
    return shown(tr(lang, "host (from the raw evidence, re-judged): {hostname}, driver {driver}, {n} GPUs: {listed}",
                    hostname=host.get("hostname") or "-", driver=host.get("driver") or "-", n=len(gpus),
                    listed=listed or tr(lang, "none")) + more + cluster, 2000)


def _contract(opened: BundleFiles | None, expected: Path | None, lang: str = DEFAULT) -> tuple[str, list[str]]:
    """The line naming the contract judged (the bundle's copy and its SHA-256), and the problem where the buyer's
    contract is another."""
    if opened is None:
        return tr(lang, "contract judged: not known (the bundle was refused)"), []
    try:
        digest = hashlib.sha256(opened.read(CONTRACT_COPY)).hexdigest()
    except (Refused, OSError) as exc:
        return tr(lang, "contract judged: the bundle's {file} cannot be read ({why})", file=CONTRACT_COPY,
                  why=shown(exc)), []
    line = tr(lang, "contract judged: the bundle's {file}, SHA-256 {digest}", file=CONTRACT_COPY, digest=digest)
    if expected is None:
        return line, []
    try:
        theirs = hashlib.sha256(read_file(expected.absolute().parent, expected.name, MAX_CONTRACT_BYTES)).hexdigest()
    except (OSError, Refused) as exc:
        return line, [tr(lang, "--contract {path} cannot be read: {why}", path=shown(expected), why=shown(exc))]
    if theirs != digest:
        return line, [tr(lang, "the bundle was judged against another contract: its {file} has SHA-256 {digest}, "
                               "--contract {path} has {theirs}", file=CONTRACT_COPY, digest=digest,
                         path=shown(expected), theirs=theirs)]
    return line + tr(lang, " (the same as --contract {path})", path=shown(expected)), []


def _verdict(recomputed: Rejudged | None, lang: str = DEFAULT) -> str:
    said = tr(lang, RECOMPUTED)
    if recomputed is None:
        return tr(lang, "{recomputed}: none (the bundle does not verify, so its evidence was not judged)",
                  recomputed=said)
    if recomputed.verdict is None:
        return tr(lang, "{recomputed}: none (the re-judging run wrote no results)", recomputed=said)
    template = ("{recomputed}: {verdict} over {checks} checks, which agrees with the bundle's results ({recorded})"
                if not recomputed.problems else
                "{recomputed}: {verdict} over {checks} checks, which DIFFERS from the bundle's results ({recorded})")
    return tr(lang, template, recomputed=said, verdict=tr(lang, recomputed.verdict.upper()), checks=recomputed.checks,
              recorded=tr(lang, shown(recomputed.recorded_verdict, 40).upper()))


def _relative(path: Path, folder: Path) -> str:
    """A file of the bundle as the buyer named the bundle (`gpuaccept-evidence/signatures/1.sig`)."""
    try:
        return shown(path.relative_to(folder))
    except ValueError:
        return shown(path)


def run_verify(folder: Path, report: Path | None, allowed_signers: Path | None, rejudged: Path | None = None,
               contract: Path | None = None, keygen: SshKeygen | None = None, lang: str = DEFAULT) -> int:
    """Every digest and the verdict; the signatures too when `allowed_signers` says whose keys count (checked with
    the system's ssh-keygen or `keygen`, the buyer's). Without it a signature is never called valid. Then the
    verdict that counts: every clause re-judged from the raw evidence in a process of its own, isolated."""
    nothing = not_a_bundle(folder, lang)
    if nothing is not None:
        print(tr(lang, "verify {folder}: NOT a bundle: {why}", folder=shown(folder), why=nothing))
        return 1
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
            problems.append(tr(lang, "no signature in the bundle's signatures/ folder"))
        checked = check_signatures(opened, allowed_signers, keygen)
        problems += [signature.problem for signature in checked if signature.problem]
    contract_line, contract_problems = _contract(opened, contract, lang)
    problems += contract_problems
    # Judging evidence that does not verify would be judging its editor: the re-judge needs files as listed (what
    # the results and the report state is what the re-judge is compared with).
    recomputed = rejudge(opened, rejudged) if result.files_ok and opened is not None else None
    problems += [tr(lang, "re-judged: {problem}", problem=line) for line in recomputed.problems] if recomputed else []
    recorded = recomputed.results.get("recorded") if recomputed and recomputed.results else None
    print(tr(lang, "verify {folder}", folder=shown(folder)))
    print(_mode(recomputed.results if recomputed else None, recorded if isinstance(recorded, dict) else None, lang))
    print(contract_line)
    print(_host(recomputed.results if recomputed else None, lang))
    print(_verdict(recomputed, lang))
    _problems(problems, result.manifest_sha256, lang)
    _signatures(folder, opened, allowed_signers, [] if problems else checked, keygen, lang)
    return 1 if problems else 0


def counted(n: int, noun: str) -> str:
    """`1 problem`, `2 problems`."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def not_a_bundle(folder: Path, lang: str = DEFAULT) -> str | None:
    """Why `folder` is no bundle at all (nothing of one there: no digest to show, no problem to count), in words;
    None where it holds one (whether it verifies is verify's to say)."""
    where = tr(lang, "a bundle is the report's folder (gpuaccept-report.html beside gpuaccept-evidence/) or its evidence "
                     "folder")
    if not folder.exists() and not folder.is_symlink():
        return tr(lang, "no such file or folder; {where}", where=where)
    evidence = evidence_folder(folder)
    if evidence.is_symlink() or (evidence / MANIFEST).is_symlink():
        return None  # a link where the bundle's own files should be: verify refuses it, naming it
    if not evidence.is_dir():
        return tr(lang, "it holds no {folder} folder; {where}", folder=EVIDENCE_DIR, where=where)
    if not (evidence / MANIFEST).exists():
        return tr(lang, "{path} holds no {file}; {where}", path=shown(evidence), file=MANIFEST, where=where)
    return None


def _problems(problems: list[str], manifest_sha256: str, lang: str = DEFAULT) -> None:
    """The digests' line, then each problem (at most MAX_PROBLEMS, then how many more)."""
    if problems:
        n = len(problems)
        print(tr(lang, "bundle does NOT verify ({problems}); manifest SHA-256 {digest}",
                 problems=tr(lang, "{n} problem" if n == 1 else "{n} problems", n=n),
                 digest=manifest_sha256 or tr(lang, "none")))
    else:
        print(tr(lang, "OK: every file matches the manifest; manifest SHA-256 {digest}", digest=manifest_sha256))
    for problem in problems[:MAX_PROBLEMS]:
        print(tr(lang, "FAIL {problem}", problem=shown(problem, 1000)))
    if len(problems) > MAX_PROBLEMS:
        print(tr(lang, "... and {n} more problems, not shown", n=len(problems) - MAX_PROBLEMS))


def _signatures(folder: Path, opened: BundleFiles | None, allowed_signers: Path | None, good: list[Signature],
                keygen: SshKeygen | None, lang: str = DEFAULT) -> None:
    """Who signed (only over a bundle that verifies: a good signature over one that does not vouches for nothing),
    or that the signatures were not checked, and with which ssh-keygen."""
    for signature in good:
        print(tr(lang, "signed by: {signer} with {key} in {file} ({signature} verified)",
                 signer=shown(signature.signer, 200), key=shown(signature.key, 200) or tr(lang, "a key"),
                 file=shown(allowed_signers), signature=_relative(signature.file, folder)))
    if allowed_signers is None and opened is not None and opened.signatures:
        names = ", ".join(_relative(opened.evidence / name, folder) for name in opened.signatures)
        print(tr(lang, "signatures NOT checked: {names} (who signed is not known; to check: "
                       "python -I -m pytest_gpuaccept verify {folder} --allowed-signers FILE)",
                 names=names, folder=shown(folder)))
    if allowed_signers is not None:
        print(tr(lang, "signatures checked with ssh-keygen: {keygen}", keygen=keygen or system_ssh_keygen()))


def run_replay(folder: Path, contract: Path | None, out: Path) -> int:
    """The bundle's raw evidence judged again against `contract` (default: its own copy) in an isolated pytest,
    every output in `out` (new or empty, outside the bundle); pytest's output shown escaped; pytest's exit code."""
    checked = verify(folder, evidence_only=True)
    if not checked.ok or checked.bundle is None:
        for problem in checked.problems[:MAX_PROBLEMS]:
            print(f"FAIL {shown(problem, 1000)}")
        print(f"bundle does NOT verify ({counted(len(checked.problems), 'problem')}): not replayed")
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
