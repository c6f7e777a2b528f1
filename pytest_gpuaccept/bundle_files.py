"""A bundle opened as data: every file it names is a regular file inside it, listed in its manifest, read no further
than the size the manifest states.

The buyer verifies, replays and compares bundles that the vendor made. Nothing in one may make the buyer's machine
read a file outside it (`../../.ssh/id_ed25519`, `/proc/self/environ`), block on a FIFO, read a device without end,
follow a link, or parse a manifest of a million entries. So, before anything in a bundle is read:
- every path it names is relative, of plain parts (no `..`, no `.`, no empty part, no control character);
- the evidence folder holds only folders and regular files: a link, FIFO, socket or device anywhere is refused;
- every file is listed in the manifest (signatures aside, which are bounded on their own), no file over
  MAX_FILE_BYTES, no more than MAX_FILES.
Each file is then opened component by component without following a link (O_NOFOLLOW), as a regular file
(a FIFO is opened without blocking and refused), read to the size the manifest states and checked against its
SHA-256. A refusal is one line naming the file (`Refused`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterator

from .untrusted import Untrusted, shown, strict_json

MANIFEST = "manifest.json"
EVIDENCE_DIR = "gpuaccept-evidence"
SIGNATURES = "signatures"  # inside the evidence folder: added after the manifest, so not listed in it
MAX_MANIFEST_BYTES = 64 << 20  # a 1,000-node cluster's manifest is about 6 MB
MAX_FILES = 250_000  # a 1,000-node cluster's bundle holds some 40,000 files
MAX_FILE_BYTES = 1 << 30  # a day's burn-in stream of 8 GPUs is some hundreds of megabytes
MAX_SIGNATURES, MAX_SIGNATURE_BYTES = 16, 64 << 10  # an ssh-keygen -Y signature is under 1 KB
MAX_DEPTH = 16  # folders inside the evidence folder (a cluster's nodes/<node>/ is 2)
MAX_PATH = 1024
_BLOCK = 1 << 20


class Refused(Exception):
    """A bundle that is not data this project writes: one line, naming the file."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A file the manifest lists: its SHA-256, and its size where the manifest states one (bundles since 0.x)."""

    sha256: str
    size: int | None


def checked_path(value: object, where: str) -> str:
    """`value` as a relative path of plain parts, or Refused naming it: no absolute path, no `..`, no `.`, no
    empty part, no backslash, no control or invisible character."""
    if not isinstance(value, str) or not value:
        raise Refused(f"{where}: a path that is not a non-empty string ({shown(value, 80)})")
    parts = value.split("/")
    if (value.startswith("/") or len(value) > MAX_PATH or "\\" in value or shown(value, MAX_PATH) != value
            or any(part in ("", ".", "..") for part in parts)):
        raise Refused(f"{where}: {shown(value)} is not a plain relative path inside the bundle: refused")
    return value


def _entries(manifest: dict[str, Any], key: str) -> dict[str, Entry]:
    listed = manifest.get(key, [])
    if not isinstance(listed, list):
        raise Refused(f"{MANIFEST}: `{key}` is not a list")
    if len(listed) > MAX_FILES:
        raise Refused(f"{MANIFEST}: `{key}` lists {len(listed):,} files, over the {MAX_FILES:,} a bundle may hold")
    found: dict[str, Entry] = {}
    for entry in listed:
        if not isinstance(entry, dict):
            raise Refused(f"{MANIFEST}: an entry of `{key}` is not an object")
        path = checked_path(entry.get("path"), f"{MANIFEST} `{key}`")
        sha, size = entry.get("sha256"), entry.get("size")
        if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise Refused(f"{MANIFEST}: {shown(path)} has no SHA-256")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise Refused(f"{MANIFEST}: {shown(path)} has a size that is not a count of bytes")
        if (size or 0) > MAX_FILE_BYTES:
            raise Refused(f"{shown(path)}: {size:,} bytes, over the {MAX_FILE_BYTES:,} a bundle's file may have: refused")
        if path in found:
            raise Refused(f"{MANIFEST}: {shown(path)} is listed twice")
        found[path] = Entry(sha, size)
    return found


def _open(folder: Path, relative: str) -> int:
    """A descriptor of the regular file `relative` under `folder`, each part opened without following a link, the
    file itself without blocking (a FIFO) and refused unless regular. FileNotFoundError where it is not there."""
    parts = relative.split("/")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        handle = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused(f"{shown(relative)}: not a regular file inside the bundle (a link? {exc.strerror}): refused") from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise Refused(f"{shown(relative)}: not a regular file (a FIFO, socket or device): refused")
    return handle


def read_file(folder: Path, relative: str, limit: int) -> bytes:
    """The regular file `relative` under `folder` (never through a link), Refused when it holds over `limit` bytes."""
    handle = _open(folder, relative)
    with os.fdopen(handle, "rb") as opened:
        size = os.fstat(opened.fileno()).st_size
        if size > limit:
            raise Refused(f"{shown(relative)}: {size:,} bytes, over the {limit:,} it may have: refused")
        data = opened.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"{shown(relative)}: over the {limit:,} bytes it may have: refused")
    return data


def walk(folder: Path) -> list[str]:
    """The regular files under `folder` as relative paths; Refused at a link, FIFO, socket or device, past
    MAX_DEPTH folders deep or past MAX_FILES files (nothing is followed or opened)."""
    found: list[str] = []

    def visit(directory: str, prefix: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Refused(f"{shown(prefix)}: folders nested over {MAX_DEPTH} deep: refused")
        with os.scandir(directory) as entries:
            for entry in entries:
                relative = prefix + entry.name
                if entry.is_symlink():
                    raise Refused(f"{shown(relative)}: a symbolic link inside the bundle: refused")
                if entry.is_dir(follow_symlinks=False):
                    visit(entry.path, relative + "/", depth + 1)
                elif entry.is_file(follow_symlinks=False):
                    found.append(relative)
                    if len(found) > MAX_FILES + MAX_SIGNATURES + 1:
                        raise Refused(f"the evidence folder holds over {MAX_FILES:,} files: refused")
                else:
                    raise Refused(f"{shown(relative)}: not a regular file (a FIFO, socket or device): refused")

    visit(os.fspath(folder), "", 0)
    found.sort(key=lambda relative: relative.split("/"))
    return found


@dataclass
class BundleFiles:
    """An opened bundle: its evidence folder, its manifest, the files the manifest lists (evidence files by their
    path in the evidence folder, the report and results by theirs in the bundle folder) and its signatures."""

    evidence: Path
    manifest: dict[str, Any]
    manifest_sha256: str
    files: dict[str, Entry]
    documents: dict[str, Entry]
    signatures: list[str] = field(default_factory=list)  # "signatures/1.sig", ...
    problems: list[str] = field(default_factory=list)  # files that are missing, changed or not listed

    @property
    def root(self) -> Path:
        return self.evidence.parent

    def has(self, name: str) -> bool:
        return name in self.files

    def read(self, name: str) -> bytes:
        """An evidence file the manifest lists, as listed (Refused otherwise)."""
        return self._read(self.evidence, name, self.files.get(name))

    def read_document(self, name: str) -> bytes:
        """The report or results beside the evidence folder, as the manifest lists it."""
        return self._read(self.root, name, self.documents.get(name))

    def read_json(self, name: str) -> Any:
        try:
            return strict_json(self.read(name), name)
        except Untrusted as exc:
            raise Refused(str(exc)) from None

    def chunks(self, name: str) -> Iterator[bytes]:
        """A large evidence file (a burn-in's stream) a megabyte at a time; Refused unless it is as listed."""
        entry = self._entry(name)
        digest, seen = hashlib.sha256(), 0
        with os.fdopen(_open(self.evidence, name), "rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK), b""):
                seen += len(block)
                if seen > (entry.size if entry.size is not None else MAX_FILE_BYTES):
                    raise Refused(f"{shown(name)}: longer than the manifest states: refused")
                digest.update(block)
                yield block
        if digest.hexdigest() != entry.sha256:
            raise Refused(f"changed: {shown(name)}")

    def _entry(self, name: str) -> Entry:
        entry = self.files.get(name)
        if entry is None:
            raise Refused(f"{shown(name)}: not a file the bundle's manifest lists: refused")
        return entry

    def _read(self, folder: Path, name: str, entry: Entry | None) -> bytes:
        if entry is None:
            raise Refused(f"{shown(name)}: not a file the bundle's manifest lists: refused")
        data = read_file(folder, name, entry.size if entry.size is not None else MAX_FILE_BYTES)
        if (entry.size is not None and len(data) != entry.size) or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise Refused(f"changed: {shown(name)}")
        return data


def evidence_folder(path: Path) -> Path:
    """The evidence folder itself, or the bundle folder holding `gpuaccept-evidence/`."""
    return path if (path / MANIFEST).is_file() and not (path / MANIFEST).is_symlink() else path / EVIDENCE_DIR


def open_bundle(path: Path, documents: bool = True) -> BundleFiles:
    """The bundle at `path` (its folder, or its evidence folder), every evidence file checked against the manifest:
    Refused (one line) for what this project never writes; `problems` lists each file missing, changed or not listed.
    `documents`: the manifest's report and results beside the evidence folder are read too (document_problems
    checks them)."""
    folder = evidence_folder(path)
    if folder.is_symlink() or not folder.is_dir():
        raise Refused(f"{shown(folder)}: no {EVIDENCE_DIR} folder (not a bundle)" if not folder.is_symlink()
                      else f"{shown(folder)}: a symbolic link, not the bundle's own folder: refused")
    try:
        raw = read_file(folder, MANIFEST, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise Refused(f"{shown(folder)}: no {MANIFEST}: not a bundle") from None
    try:
        manifest = strict_json(raw, MANIFEST)
    except Untrusted as exc:
        raise Refused(f"changed: {exc}") from None
    if not isinstance(manifest, dict):
        raise Refused(f"changed: {MANIFEST}: not an object")
    opened = BundleFiles(folder, manifest, hashlib.sha256(raw).hexdigest(), _entries(manifest, "files"),
                         _entries(manifest, "bundle") if documents else {})
    present = walk(folder)
    signatures = [name for name in present if name.startswith(SIGNATURES + "/")]
    if len(signatures) > MAX_SIGNATURES or any(not name.endswith(".sig") or name.count("/") != 1 for name in signatures):
        raise Refused(f"{SIGNATURES}/: over {MAX_SIGNATURES} files, or one that is not a .sig: refused")
    opened.signatures = signatures
    for name in signatures:
        read_file(folder, name, MAX_SIGNATURE_BYTES)  # Refused when too large
    unlisted = sorted(set(present) - set(opened.files) - {MANIFEST} - set(signatures))
    opened.problems += [f"added: {shown(name)} (not in the manifest)" for name in unlisted]
    opened.problems += _changed(folder, opened.files)
    return opened


def document_problems(opened: BundleFiles, elsewhere: Collection[str] = ()) -> list[str]:
    """`missing: X` or `changed: X` for each report and results file beside the evidence folder not as listed;
    `elsewhere` names those the buyer keeps somewhere else (verify --report), checked there."""
    return _changed(opened.root, {n: e for n, e in opened.documents.items() if n not in elsewhere})


def _changed(folder: Path, listed: dict[str, Entry]) -> list[str]:
    """`missing: X` or `changed: X` for each listed file that is not there as listed (Refused: not a regular file)."""
    problems = []
    for name, entry in sorted(listed.items()):
        try:
            handle = _open(folder, name)
        except FileNotFoundError:
            problems.append(f"missing: {shown(name)}")
            continue
        digest, seen, limit = hashlib.sha256(), 0, entry.size if entry.size is not None else MAX_FILE_BYTES
        with os.fdopen(handle, "rb") as opened:
            for block in iter(lambda: opened.read(_BLOCK), b""):
                seen += len(block)
                if seen > limit:
                    break
                digest.update(block)
        if seen > limit or (entry.size is not None and seen != entry.size) or digest.hexdigest() != entry.sha256:
            problems.append(f"changed: {shown(name)}")
    return problems
