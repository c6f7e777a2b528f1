"""The evidence bundle: verify that no evidence file, results file or contract changed since the run."""

from __future__ import annotations

import hashlib
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
_DIGEST_IN_REPORT = re.compile(r"evidence manifest SHA-256</th><td>([0-9a-f]{64})<")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Verification:
    problems: list[str]
    manifest_sha256: str

    @property
    def ok(self) -> bool:
        return not self.problems


def evidence_folder(path: Path) -> Path:
    """The evidence folder itself, or the folder holding `gpuaccept-evidence/` (where the report is)."""
    return path if (path / MANIFEST).is_file() else path / "gpuaccept-evidence"


def verify(path: Path, report: Path | None = None, evidence_only: bool = False) -> Verification:
    """Recompute every digest of the manifest; each changed, missing or added file is one problem line.

    `evidence_only` leaves out the results file and the contract (a replay judges anew with its own).
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
    except (ValueError, KeyError, TypeError) as exc:
        return Verification([f"{manifest_path}: unreadable manifest: {exc}"], manifest_sha)
    problems = []
    for relative, expected in sorted(listed.items()):
        file = folder / relative
        if not file.is_file():
            problems.append(f"missing: {relative}")
        elif sha256_file(file) != expected:
            problems.append(f"changed: {relative}")
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    for extra in sorted(present - set(listed) - {MANIFEST, ".lock"}):
        problems.append(f"added: {extra} (not in the manifest)")
    for role in () if evidence_only else ("results", "contract"):
        entry = manifest.get(role) or {}
        recorded = Path(entry.get("path", ""))
        target = folder.parent / recorded.name  # a copy that moved with the bundle first, then where it was
        if not target.is_file():
            target = recorded
        if not target.is_file():
            problems.append(f"missing: the {role} file {entry.get('path')}")
        elif sha256_file(target) != entry.get("sha256"):
            problems.append(f"changed: the {role} file {target}")
    report = report or folder.parent / "gpuaccept-report.html"
    if report.is_file():
        stated = _DIGEST_IN_REPORT.search(html.unescape(report.read_text(errors="replace")))
        if stated is None:
            problems.append(f"the report {report} states no manifest digest")
        elif stated.group(1) != manifest_sha:
            problems.append(f"changed: {MANIFEST} (its digest differs from the one in {report.name})")
    return Verification(problems, manifest_sha)
