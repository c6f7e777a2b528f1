"""The bundle: one folder (report, results, contract copy, evidence) that verifies wherever it is copied.

`manifest.json`, in the evidence folder, lists every evidence file by its path relative to the evidence
folder (`files`), and the report and results by their paths relative to the bundle folder (`bundle`,
the report's folder). The report states the evidence digest (a digest of `files`), and `verify`
recomputes the verdict from the results and checks that the report states the same one. `sign` adds
OpenSSH signatures of the manifest (`ssh-keygen -Y sign`), which `verify --allowed-signers` checks, each with an
ssh-keygen from a fixed system path (or the one the contract names), never the one on PATH: a fake ssh-keygen
first on PATH would approve any signature.
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

from .evidence import files_under, sha256_path
from .probes._run import SYSTEM_PATH
from .verdict import Check, verdict_of

MANIFEST = "manifest.json"
EVIDENCE_DIR = "gpuaccept-evidence"
SIGNATURES = "signatures"  # inside the evidence folder: added after the manifest, so not listed in it
CONTRACT_COPY = "contract.yaml"
RESULTS_COPY = "results.json"
NAMESPACE = "gpuaccept-bundle"  # ssh-keygen -Y signature namespace: a signature for anything else won't verify
SYSTEM_SSH_KEYGEN = ("/usr/bin/ssh-keygen", "/bin/ssh-keygen")  # where OpenSSH's packages install it
_DIGEST_IN_REPORT = re.compile(r'data-evidence-digest="([0-9a-f]{64})"')
_VERDICT_IN_REPORT = re.compile(r'data-verdict="(accepted|rejected)"')


def _listed(folder: Path) -> list[dict[str, str]]:
    """Every evidence file but the manifest and the signatures added after it."""
    return [{"path": relative, "sha256": sha256_path(folder / relative)} for relative in files_under(folder)
            if relative != MANIFEST and relative.split("/")[0] != SIGNATURES]


def _digest(entries: list[dict[str, str]]) -> str:
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
        "bundle": [{"path": d.relative_to(root).as_posix(), "sha256": sha256_path(d)}
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

    @property
    def ok(self) -> bool:
        return not self.problems


def evidence_folder(path: Path) -> Path:
    """The evidence folder itself, or the bundle folder holding `gpuaccept-evidence/`."""
    return path if (path / MANIFEST).is_file() else path / EVIDENCE_DIR


def verify(path: Path, report: Path | None = None, evidence_only: bool = False) -> Verification:
    """Recompute every digest of the manifest; each changed, missing or added file is one problem line.

    `evidence_only` checks the evidence files alone (a replay judges anew, with its own report).
    """
    folder = evidence_folder(path)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return Verification([f"{folder}: no {MANIFEST}: not an evidence folder"], "")
    raw = manifest_path.read_bytes()
    manifest_sha = hashlib.sha256(raw).hexdigest()
    try:
        manifest = json.loads(raw)
        listed = {entry["path"]: entry["sha256"] for entry in manifest["files"]}
        documents = {entry["path"]: entry["sha256"] for entry in manifest.get("bundle", [])}
    except (ValueError, KeyError, TypeError) as exc:
        return Verification([f"changed: {MANIFEST} (unreadable: {exc})"], manifest_sha)
    problems = []
    if manifest.get("checksum") != _self_sum(manifest) or manifest.get("evidence_digest") != _digest(manifest["files"]):
        problems.append(f"changed: {MANIFEST} (its own checksum does not match its content)")
    problems += _changed({relative: (folder / relative, sha) for relative, sha in listed.items()})
    present = set(files_under(folder))
    for extra in sorted(present - set(listed) - {MANIFEST}):
        if not extra.startswith(SIGNATURES + "/"):
            problems.append(f"added: {extra} (not in the manifest)")
    if evidence_only:
        return Verification(problems, manifest_sha)
    root = folder.parent
    problems += _changed({relative: (report if report is not None and relative.endswith(".html") else root / relative, sha)
                          for relative, sha in documents.items()})
    if not any(p.endswith(".html") for p in documents):
        problems.append("missing: the report (the manifest lists none)")
    problems += _verdict_problems(folder, root, documents, manifest)
    return Verification(problems, manifest_sha)


def _changed(listed: dict[str, tuple[Path, str]]) -> list[str]:
    """`missing: X` or `changed: X` for each file the manifest lists (X -> the file, its SHA-256) not as listed."""
    problems = []
    for relative, (file, expected) in sorted(listed.items()):
        if not file.is_file():
            problems.append(f"missing: {relative}")
        elif sha256_path(file) != expected:
            problems.append(f"changed: {relative}")
    return problems


def _verdict_problems(folder: Path, root: Path, documents: dict[str, str], manifest: dict[str, Any]) -> list[str]:
    """The verdict recomputed from the results, against the results' own and the report's statement."""
    problems = []
    try:
        results = json.loads((folder / RESULTS_COPY).read_text())
        checks, complete = [Check.from_dict(c) for c in results["checks"]], bool(results["complete"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"the results cannot be read to recompute the verdict: {exc}"]
    spoiled = results.get("other_failures") or results.get("foreign_evidence") or results.get("foreign_code")
    recomputed = "rejected" if spoiled else verdict_of(checks, complete)
    if results.get("verdict") != recomputed:
        problems.append(f"the results state {results.get('verdict')!r}, their checks give {recomputed!r}")
    for relative in (p for p in documents if p.endswith(".html")):
        page = root / relative
        if not page.is_file():
            continue
        text = html.unescape(page.read_text(errors="replace"))
        stated = _VERDICT_IN_REPORT.search(text)
        if stated is None or stated.group(1) != recomputed:
            problems.append(f"the report {relative} states {stated.group(1) if stated else 'no'} verdict, "
                            f"the results give {recomputed!r}")
        digest = _DIGEST_IN_REPORT.search(text)
        if digest is None or digest.group(1) != manifest.get("evidence_digest"):
            problems.append(f"changed: {MANIFEST} (its evidence digest differs from the one in {relative})")
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
    """The system's ssh-keygen: the first of SYSTEM_SSH_KEYGEN there is; never a search of PATH."""
    found = next((p for p in SYSTEM_SSH_KEYGEN if os.access(p, os.X_OK)), None)
    if found is None:
        return SshKeygen(SYSTEM_SSH_KEYGEN[0], "the system's, not installed: install OpenSSH's client or name one "
                                              "in tools.ssh_keygen")
    return SshKeygen(found, "the system's")


def _ssh_keygen(keygen: SshKeygen, args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """ssh-keygen in a clean environment (no LD_PRELOAD or other variable of the caller's reaches it)."""
    env = {"PATH": ":".join(SYSTEM_PATH), "LC_ALL": "C", "HOME": os.environ.get("HOME", "/"),
           **{k: os.environ[k] for k in ("SSH_AUTH_SOCK",) if k in os.environ}}
    try:
        return subprocess.run([keygen.path, *args], input=data, capture_output=True, timeout=60, check=False, env=env)
    except OSError as exc:
        return subprocess.CompletedProcess([keygen.path, *args], 127, b"", f"{keygen} could not start: {exc}".encode())


def sign(path: Path, key: Path, keygen: SshKeygen | None = None) -> Path:
    """Sign the bundle's manifest with an SSH key (with `keygen`, by default the system's ssh-keygen); the
    signature is kept beside it. Raises on failure."""
    folder = evidence_folder(path)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise ValueError(f"{folder}: no {MANIFEST}: not a bundle")
    done = _ssh_keygen(keygen or system_ssh_keygen(), ["-Y", "sign", "-f", str(key), "-n", NAMESPACE, "-q"],
                       manifest.read_bytes())
    if done.returncode != 0 or b"BEGIN SSH SIGNATURE" not in done.stdout:
        raise ValueError(f"ssh-keygen -Y sign failed (exit {done.returncode}): "
                         f"{done.stderr.decode(errors='replace').strip()[:300]}")
    signatures = folder / SIGNATURES
    signatures.mkdir(exist_ok=True)
    target = signatures / f"{len(list(signatures.glob('*.sig'))) + 1}.sig"
    target.write_bytes(done.stdout)
    return target


def signature_files(path: Path) -> list[Path]:
    """The bundle's signature files (`signatures/*.sig` in its evidence folder), in order."""
    signatures = evidence_folder(path) / SIGNATURES
    return sorted(signatures.glob("*.sig")) if signatures.is_dir() else []


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature file, checked against an allowed-signers file: by whom, with which key, or what is wrong."""

    file: Path
    signer: str  # the principal the allowed-signers file names for the signing key; "" when none does
    key: str  # as ssh-keygen names it, "ED25519 key SHA256:..."; "" unless the signature verified
    problem: str  # "" when the signature verifies


_GOOD = re.compile(r'^Good "[^"]*" signature for .* with (\S+ key \S+)', re.MULTILINE)


def check_signatures(path: Path, allowed_signers: Path, keygen: SshKeygen | None = None) -> list[Signature]:
    """Every signature file against the manifest as it is now: each must be by a key in `allowed_signers`
    (checked with `keygen`, by default the system's ssh-keygen)."""
    keygen = keygen or system_ssh_keygen()
    folder = evidence_folder(path)
    manifest = (folder / MANIFEST).read_bytes() if (folder / MANIFEST).is_file() else b""
    checked = []
    for sig in signature_files(path):
        found = _ssh_keygen(keygen, ["-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)])
        principals = found.stdout.decode(errors="replace").split() if found.returncode == 0 else []
        if not principals:
            checked.append(Signature(sig, "", "", f"signature {sig.name}: signed by a key not in {allowed_signers}"))
            continue
        done = _ssh_keygen(keygen, ["-Y", "verify", "-f", str(allowed_signers), "-I", principals[0], "-n", NAMESPACE,
                            "-s", str(sig)], manifest)
        if done.returncode != 0:
            checked.append(Signature(sig, principals[0], "", f"signature {sig.name} of {principals[0]}: does not match "
                                     f"the manifest ({done.stderr.decode(errors='replace').strip()[:200] or 'bad signature'})"))
            continue
        good = _GOOD.search(done.stdout.decode(errors="replace"))
        checked.append(Signature(sig, principals[0], good.group(1) if good else "", ""))
    return checked
