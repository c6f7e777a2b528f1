"""The evidence folder of one run: what the runner wrote is sealed when captured; nothing else is ever read.

A run keeps what it judges in memory: tool outputs come through pipes and readings (NVML, sysfs) are held
where they were taken (probes/_run.py), then written here to be kept. In a single-process run nothing is read
back from this folder, so a file planted in it changes no reading. The seal keeps two jobs: at the end, telling
the files this run wrote from files planted or changed in the folder (each named, and the run rejected); and,
under xdist, carrying runs and readings between the session's processes, which read another worker's file only
while its seal verifies. Every file is hashed as it is written and sealed with a key that lives only in the
memory of this run's processes (never on disk, never in a tool's environment; that memory closed to the tools
by hardening.py). An unsealed file where the run is about to write is moved aside as `<name>.foreign` and kept
as evidence of the attempt; at the end every unsealed or changed file is named, and the run is rejected.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

LEDGER = ".ledger"  # the seals: a file of lines for each Evidence that sealed (each process); removed once judged
SEALS = ".seals"
LOCK = ".lock"
FOREIGN_SUFFIX = ".foreign"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class ForeignEvidence(Exception):
    """A file in the evidence folder that this run did not write, or that changed after it was captured."""


def new_key() -> bytes:
    return secrets.token_bytes(32)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_path(path: Path) -> str:
    """A file's SHA-256, read a megabyte at a time (a burn-in's stream of a day is hundreds of megabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_under(folder: Path) -> list[str]:
    """The files under `folder` as relative POSIX paths, in the order sorted(folder.rglob("*")) lists them (by
    their parts), each one that Path.is_file() is true of: a link to a file counts, a link to a folder is not
    entered. os.scandir, not pathlib: the three walks of a run's end (foreign, digest, manifest) took 3 ms each."""
    found: list[str] = []

    def walk(directory: str, prefix: str) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows a link, as Path.is_dir does
            except OSError:
                is_dir = False
            if is_dir:
                if not entry.is_symlink():
                    walk(entry.path, prefix + entry.name + "/")
                continue
            try:
                if entry.is_file():  # follows a link too: what Path.is_file() says
                    found.append(prefix + entry.name)
            except OSError:
                continue

    walk(os.fspath(folder), "")
    found.sort(key=lambda relative: relative.split("/"))
    return found


class Evidence:
    def __init__(self, folder: Path, key: bytes) -> None:
        self.folder = folder
        self._key = key
        self._sealed: dict[str, str] = {}  # name -> sha256, what this process sealed
        # This Evidence's seals are lines appended to one file of the ledger (xdist workers each have theirs): a
        # file created for each seal cost 0.3 ms, some thirty a run, where appending a line costs 0.03.
        self._ledger_file = folder / LEDGER / (secrets.token_hex(8) + SEALS)
        # Other processes' ledger files as last parsed, with the size and mtime they had then: an xdist worker
        # asks for the seals of a file another process wrote some twenty times a run (10 ms parsing them anew)
        self._parsed: dict[Path, tuple[tuple[int, int], dict[str, str]]] = {}

    def _mac(self, name: str, sha: str) -> str:
        return hmac.new(self._key, f"{name}\0{sha}".encode(), hashlib.sha256).hexdigest()

    def path(self, name: str) -> Path:
        return self.folder / name

    def claim(self, name: str) -> Path:
        """The path to write `name` to; an unsealed file already there is moved aside as foreign. A name may
        have folders (a cluster run keeps each node's bundle under nodes/<node>/)."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        seals = self._seals_of(name) if path.exists() else frozenset()
        if path.exists() and (not seals or sha256_bytes(path.read_bytes()) not in seals):
            aside, n = self.folder / (name + FOREIGN_SUFFIX), 1
            while aside.exists():
                aside, n = self.folder / f"{name}{FOREIGN_SUFFIX}{n}", n + 1
            path.rename(aside)
        return path

    def seal(self, name: str, data: bytes | None = None) -> str:
        """Seal a file as it is now, or as `data`, the bytes it was written with; returns its SHA-256."""
        return self._seal_digest(name, sha256_bytes((self.folder / name).read_bytes() if data is None else data))

    def _seal_digest(self, name: str, sha: str) -> str:
        # A line of its own even after a torn one (a write cut short, or anyone's bytes): a newline before it too.
        line = "\n" + json.dumps({"name": name, "sha256": sha, "mac": self._mac(name, sha)}) + "\n"
        try:
            ledger = open(self._ledger_file, "a", encoding="utf-8")
        except FileNotFoundError:  # the first seal (or the ledger was removed): make its folder
            self._ledger_file.parent.mkdir(parents=True, exist_ok=True)
            ledger = open(self._ledger_file, "a", encoding="utf-8")
        with ledger:  # one write of the whole line: another process reads whole lines
            ledger.write(line)
        self._sealed[name] = sha
        return sha

    def write(self, name: str, data: bytes) -> None:
        """Write and seal what this run means to keep: the digest of `data` itself, not of the file read back
        (a change made between the write and a read would otherwise be sealed as this run's)."""
        self.claim(name).write_bytes(data)
        self._seal_digest(name, sha256_bytes(data))

    def seal_digest(self, name: str, sha: str) -> str:
        """Seal a file written in pieces as it was written (a burn-in's stream): `sha` is the SHA-256 of the bytes
        the run wrote, taken as it wrote them, never of the file read back."""
        return self._seal_digest(name, sha)

    def write_json(self, name: str, data: Any) -> None:
        """Write `data` as compact JSON and seal it; it is read back only as those sealed bytes (`read`)."""
        self.write(name, json.dumps(data, sort_keys=True, separators=(",", ":")).encode())

    def captured_empty(self, name: str) -> bool:
        """Whether `name` was empty when captured: from this process's seal where it has one (no file system
        call: the report asks for each stderr of each check), else from the file as it is now."""
        sha = self._sealed.get(name)
        if sha is not None:
            return sha == EMPTY_SHA256
        try:
            return (self.folder / name).stat().st_size == 0
        except OSError:
            return False

    def _seals_of(self, name: str) -> frozenset[str]:
        """The SHA-256 `name` may have: this process's last seal of it; or, for a file another process of the
        run sealed, each one's last verified seal of it (a line whose MAC does not verify is no seal)."""
        if name in self._sealed:
            return frozenset({self._sealed[name]})
        return frozenset(seals[name] for seals in self._ledger() if name in seals)

    def _ledger(self) -> list[dict[str, str]]:
        """The verified seals of each other ledger file (name -> its last sealed SHA-256 there). A file is parsed
        again whenever its size or mtime changed (a seal appended, a line cut); one that is gone counts no more."""
        files = []
        for path in sorted(p for p in (self.folder / LEDGER).glob("*" + SEALS) if p != self._ledger_file):
            try:
                stat = path.stat()
                seen = (stat.st_size, stat.st_mtime_ns)
                if path not in self._parsed or self._parsed[path][0] != seen:
                    self._parsed[path] = (seen, self._verified(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
            files.append(self._parsed[path][1])
        return files

    def _verified(self, text: str) -> dict[str, str]:
        """The seals of one ledger file whose MAC verifies (name -> its last such seal); other lines are none."""
        seals: dict[str, str] = {}
        for line in filter(None, text.splitlines()):
            try:
                entry = json.loads(line)
                name, sha = str(entry["name"]), str(entry["sha256"])
                if hmac.compare_digest(str(entry["mac"]), self._mac(name, sha)):
                    seals[name] = sha
            except (ValueError, KeyError, TypeError):
                continue
        return seals

    def read(self, name: str) -> bytes | None:
        """The bytes of a sealed file; None if there is none; ForeignEvidence if it is unsealed or changed."""
        path = self.folder / name
        if not path.exists():
            return None
        seals = self._seals_of(name)
        if not seals:
            raise ForeignEvidence(f"{name} was not written by this run")
        data = path.read_bytes()
        if sha256_bytes(data) not in seals:
            raise ForeignEvidence(f"{name} changed after it was captured")
        return data

    def sealed_files(self) -> dict[str, frozenset[str]]:
        """Every file with a verified seal (any process of this run): name -> the SHA-256 it may have."""
        sealed: dict[str, set[str]] = {}
        for seals in self._ledger():
            for name, sha in seals.items():
                sealed.setdefault(name, set()).add(sha)
        return {**{name: frozenset(shas) for name, shas in sealed.items()},
                **{name: frozenset({sha}) for name, sha in self._sealed.items()}}

    def foreign(self) -> list[str]:
        """Files in the folder that no seal vouches for, or that changed after capture: one line each."""
        sealed = self.sealed_files()
        problems = []
        for relative in files_under(self.folder):
            if relative == LOCK or relative.startswith(LEDGER + "/"):
                continue
            if relative not in sealed:
                problems.append(f"{relative}: not written by this run")
            elif sha256_path(self.folder / relative) not in sealed[relative]:
                problems.append(f"{relative}: changed after it was captured")
        problems += [f"{name}: removed after it was captured" for name in sorted(sealed)
                     if not (self.folder / name).is_file()]
        return problems

    def close(self) -> None:
        """The run is judged: the seals have served; the manifest protects the bundle from here on."""
        shutil.rmtree(self.folder / LEDGER, ignore_errors=True)
        (self.folder / LOCK).unlink(missing_ok=True)
