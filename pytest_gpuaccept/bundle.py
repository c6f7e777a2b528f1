"""The bundle: one folder (report, results, contract copy, evidence) that verifies wherever it is copied.

`manifest.json`, in the evidence folder, lists every evidence file by its path relative to the evidence
folder (`files`), and the report and results by their paths relative to the bundle folder (`bundle`,
the report's folder). The report states the evidence digest (a digest of `files`), and `verify`
recomputes the verdict from the results and checks that the report states the same one. `sign` adds
OpenSSH signatures of the manifest (`ssh-keygen -Y sign`), which `verify --allowed-signers` checks, each with an
ssh-keygen from a fixed system path (or the one the buyer names with --ssh-keygen), never the one on PATH and
never one the bundle names: a fake ssh-keygen would approve any signature. A bundle is read as data only
(bundle_files.py).
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bundle_files import EVIDENCE_DIR as EVIDENCE_DIR  # the names a bundle's files have: bundle_files.py
from .bundle_files import MANIFEST as MANIFEST
from .bundle_files import MAX_MANIFEST_BYTES, BundleFiles, Refused, document_problems, open_bundle, read_file
from .bundle_files import SIGNATURES as SIGNATURES
from .bundle_files import evidence_folder as evidence_folder
from .evidence import files_under, sha256_path
from .probes.process import SYSTEM_PATH
from .untrusted import shown
from .verdict import Check, verdict_of

CONTRACT_COPY = "contract.yaml"
RESULTS_COPY = "results.json"
RESULTS_FORMAT = 1  # the results' `gpuaccept` key (docs/results.md): another is a format this version cannot judge
NAMESPACE = "gpuaccept-bundle"  # ssh-keygen -Y signature namespace: a signature for anything else won't verify
SYSTEM_SSH_KEYGEN = ("/usr/bin/ssh-keygen", "/bin/ssh-keygen")  # where OpenSSH's packages install it
MAX_REPORT_BYTES = 256 << 20  # a 1,000-node cluster's report is a few megabytes
_DIGEST_IN_REPORT = re.compile(r'data-evidence-digest="([0-9a-f]{64})"')
_VERDICT_IN_REPORT = re.compile(r'data-verdict="(accepted|rejected)"')


def _listed(folder: Path) -> list[dict[str, Any]]:
    """Every evidence file but the manifest and the signatures added after it."""
    return [{"path": relative, "sha256": sha256_path(folder / relative), "size": (folder / relative).stat().st_size}
            for relative in files_under(folder) if relative != MANIFEST and relative.split("/")[0] != SIGNATURES]


def _digest(entries: list[dict[str, Any]]) -> str:
    return hashlib.sha256("".join(f"{e['sha256']}  {e['path']}\n" for e in entries).encode()).hexdigest()


def evidence_digest(folder: Path) -> str:
    """The digest of every evidence file (path and SHA-256): what the report states."""
    return _digest(_listed(folder))


def _self_sum(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_manifest(folder: Path, documents: list[Path], extra: dict[str, Any]) -> str:
    """Write the manifest once the report exists; `documents` (report, results) live in the bundle folder."""
    root = folder.parent
    manifest: dict[str, Any] = {
        "files": _listed(folder),
        "bundle": [{"path": d.relative_to(root).as_posix(), "sha256": sha256_path(d), "size": d.stat().st_size}
                   for d in documents if d.is_file() and root in d.resolve().parents],
        **extra,
    }
    manifest["evidence_digest"] = _digest(manifest["files"])
    manifest["checksum"] = _self_sum(manifest)
    text = json.dumps(manifest, indent=1)
    (folder / MANIFEST).write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Verification:
    problems: list[str]
    manifest_sha256: str
    signers: list[str] = field(default_factory=list)
    bundle: BundleFiles | None = None  # the opened bundle, where it could be opened
    files_ok: bool = False  # every file as the manifest lists it (what the results and report state aside)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path: Path, report: Path | None = None, evidence_only: bool = False) -> Verification:
    """Open the bundle as data (bundle_files: a path, link, FIFO or size it does not allow is one refusal), then
    recompute every digest of the manifest; each changed, missing or added file is one problem line.

    `report` is the report where it is not beside the evidence folder (a path the buyer gives). `evidence_only`
    checks the evidence files alone (a replay judges anew, with its own report).
    """
    try:
        opened = open_bundle(path, documents=not evidence_only)
    except Refused as exc:
        return Verification([str(exc)], "")
    except OSError as exc:
        return Verification([f"{shown(path)}: cannot be read ({exc.strerror})"], "")
    manifest, problems = opened.manifest, list(opened.problems)
    if manifest.get("checksum") != _self_sum(manifest) or manifest.get("evidence_digest") != _digest(manifest["files"]):
        problems.insert(0, f"changed: {MANIFEST} (its own checksum does not match its content)")
    files_ok = not problems
    if evidence_only:
        return Verification(problems, opened.manifest_sha256, bundle=opened, files_ok=files_ok)
    pages = [name for name in opened.documents if name.endswith(".html")]
    problems += document_problems(opened, set(pages) if report is not None else set())
    if report is not None:  # the buyer's path: the listed report is checked there instead
        problems += [f"changed: {name} (at {shown(report)})" for name in pages if _report_sha(report) != opened.documents[name].sha256]
    if not pages:
        problems.append("missing: the report (the manifest lists none)")
    files_ok = not problems
    problems += _verdict_problems(opened, pages, report)
    return Verification(problems, opened.manifest_sha256, bundle=opened, files_ok=files_ok)


def _report_sha(report: Path) -> str:
    try:
        return hashlib.sha256(read_file(report.parent, report.name, MAX_REPORT_BYTES)).hexdigest()
    except (OSError, Refused):
        return ""


def _verdict_problems(opened: BundleFiles, pages: list[str], report: Path | None) -> list[str]:
    """The verdict recomputed from the results, against the results' own and the report's statement (its
    data-verdict attribute and the words a reader sees in its verdict box)."""
    problems = []
    try:
        results = opened.read_json(RESULTS_COPY)
        if not isinstance(results, dict):
            raise TypeError("not an object")
        if results.get("gpuaccept") != RESULTS_FORMAT:
            return [f"{RESULTS_COPY}: results format {shown(results.get('gpuaccept'), 40)}, this version reads "
                    f"format {RESULTS_FORMAT}: refused"]
        checks, complete = [Check.from_dict(c) for c in results["checks"]], bool(results["complete"])
    except (Refused, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"the results cannot be read to recompute the verdict: {shown(exc)}"]
    spoiled = results.get("other_failures") or results.get("foreign_evidence") or results.get("foreign_code")
    recomputed = "rejected" if spoiled else verdict_of(checks, complete)
    if results.get("verdict") != recomputed:
        problems.append(f"the results state {shown(results.get('verdict'), 40)!r}, their checks give {recomputed!r}")
    for name in pages:
        try:
            page = read_file(report.parent if report is not None else opened.root, report.name if report is not None
                             else name, MAX_REPORT_BYTES).decode("utf-8", errors="replace")
        except (OSError, Refused):
            continue  # named above as missing or changed
        problems += [f"the report {shown(name)} {line}" for line in report_problems(page, recomputed,
                                                                                     opened.manifest.get("evidence_digest"))]
    return problems


_VISIBLE_VERDICT = re.compile(r'<div id="gpuaccept-verdict"[^>]*>\s*<h2[^>]*>([^<]*)</h2>')


def report_problems(page: str, verdict: str, digest: object) -> list[str]:
    """What the report states against the verdict and digest recomputed: its data-verdict attribute, the word its
    verdict box shows a reader, and its evidence digest. One verdict box, no other verdict word in large type."""
    problems = []
    stated = _VERDICT_IN_REPORT.findall(page)
    if stated != [verdict]:
        problems.append(f"states {' and '.join(stated) or 'no'} verdict, the results give {verdict!r}")
    shown_words = [html.unescape(word).strip() for word in _VISIBLE_VERDICT.findall(page)]
    if shown_words != [verdict.upper()]:
        problems.append(f"shows {' and '.join(map(repr, map(shown, shown_words))) or 'no verdict'} in its verdict box, "
                        f"the results give {verdict.upper()}")
    other = "ACCEPTED" if verdict == "rejected" else "REJECTED"
    if re.search(rf"<h[1-3][^>]*>[^<]*\b{other}\b", page):
        problems.append(f"shows {other} in a heading, the results give {verdict.upper()}")
    found = _DIGEST_IN_REPORT.findall(page)
    if found != [digest]:
        problems.append(f"states another evidence digest than its {MANIFEST} ({', '.join(found) or 'none'})")
    return problems


# ------------------------------------------------------------------ signatures (OpenSSH, no new dependency)

@dataclass(frozen=True, slots=True)
class SshKeygen:
    """The ssh-keygen that signs and verifies, and why that one: what `sign` and `verify` say they used."""

    path: str
    source: str

    def __str__(self) -> str:
        return f"{self.path} ({self.source})"


def system_ssh_keygen() -> SshKeygen:
    """The system's ssh-keygen: the first of SYSTEM_SSH_KEYGEN there is; never a search of PATH, never one a
    bundle names."""
    found = next((p for p in SYSTEM_SSH_KEYGEN if os.access(p, os.X_OK)), None)
    if found is None:
        return SshKeygen(SYSTEM_SSH_KEYGEN[0], "the system's, not installed: install OpenSSH's client or name one "
                                              "with --ssh-keygen")
    return SshKeygen(found, "the system's")


def _ssh_keygen(keygen: SshKeygen, args: list[str], data: bytes | None = None,
                agent: bool = False) -> subprocess.CompletedProcess[bytes]:
    """ssh-keygen in a clean environment (no LD_PRELOAD or other variable of the caller's reaches it); the
    ssh-agent's socket only where the buyer signs with their own key (`agent`), never to check a bundle."""
    env = {"PATH": ":".join(SYSTEM_PATH), "LC_ALL": "C", "HOME": os.environ.get("HOME", "/"),
           **{k: os.environ[k] for k in ("SSH_AUTH_SOCK",) if agent and k in os.environ}}
    try:
        return subprocess.run([keygen.path, *args], input=data, capture_output=True, timeout=60, check=False, env=env,
                              stdin=None if data is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([keygen.path, *args], 124, b"", f"{keygen} did not finish in 60 s".encode())
    except OSError as exc:
        return subprocess.CompletedProcess([keygen.path, *args], 127, b"", f"{keygen} could not start: {exc}".encode())


def sign(path: Path, key: Path, keygen: SshKeygen | None = None) -> Path:
    """Sign the bundle's manifest with an SSH key (with `keygen`, by default the system's ssh-keygen); the
    signature is kept beside it. Raises on failure (ValueError; Refused for a bundle that is not data)."""
    opened = open_bundle(path, documents=False)
    manifest = read_file(opened.evidence, MANIFEST, MAX_MANIFEST_BYTES)
    done = _ssh_keygen(keygen or system_ssh_keygen(), ["-Y", "sign", "-f", str(key), "-n", NAMESPACE, "-q"],
                       manifest, agent=True)
    if done.returncode != 0 or b"BEGIN SSH SIGNATURE" not in done.stdout:
        raise ValueError(f"ssh-keygen -Y sign failed (exit {done.returncode}): "
                         f"{shown(done.stderr.decode(errors='replace').strip(), 300)}")
    signatures = opened.evidence / SIGNATURES
    signatures.mkdir(exist_ok=True)
    target = signatures / f"{len(opened.signatures) + 1}.sig"
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "wb") as out:
        out.write(done.stdout)
    return target


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature file, checked against an allowed-signers file: by whom, with which key, or what is wrong."""

    file: Path
    signer: str  # the principal ssh-keygen's "Good ... signature for PRINCIPAL" line names; "" when none
    key: str  # as ssh-keygen names it, "ED25519 key SHA256:..."; "" unless the signature verified
    problem: str  # "" when the signature verifies


# OpenSSH's sshsig.c prints exactly this line on a good signature (to stdout since 8.2).
_GOOD = re.compile(r'^Good "(?P<namespace>[^"]*)" signature for (?P<signer>.+) with (?P<key>\S+ key \S+)$', re.MULTILINE)


def check_signatures(opened: BundleFiles, allowed_signers: Path, keygen: SshKeygen | None = None) -> list[Signature]:
    """Every signature file against the manifest as it is now, with `keygen` (by default the system's ssh-keygen,
    never one the bundle names, and without the buyer's agent): a signer is the principal ssh-keygen -Y verify
    names on its "Good" line for this namespace, nothing else."""
    keygen = keygen or system_ssh_keygen()
    manifest = read_file(opened.evidence, MANIFEST, MAX_MANIFEST_BYTES)
    checked = []
    for relative in opened.signatures:
        sig, name = opened.evidence / relative, Path(relative).name
        found = _ssh_keygen(keygen, ["-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)])
        principals = found.stdout.decode(errors="replace").splitlines()[:1] if found.returncode == 0 else []
        if not principals:
            checked.append(Signature(sig, "", "", f"signature {name}: signed by a key not in {allowed_signers}"))
            continue
        principal = principals[0].strip()
        done = _ssh_keygen(keygen, ["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", NAMESPACE,
                            "-s", str(sig)], manifest)
        good = _GOOD.search(done.stdout.decode(errors="replace"))
        if done.returncode != 0 or good is None or good["namespace"] != NAMESPACE or good["signer"] != principal:
            why = shown(done.stderr.decode(errors="replace").strip(), 200) or "no Good signature line"
            checked.append(Signature(sig, "", "", f"signature {name} of {shown(principal, 80)}: does not match the "
                                                  f"manifest ({why})"))
            continue
        checked.append(Signature(sig, good["signer"], good["key"], ""))
    return checked
