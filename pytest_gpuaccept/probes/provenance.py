"""Where a tool came from: its resolved path, SHA-256, whether it is an ELF binary or a script, and the
package that owns it with the package manager's own verification of its files (dpkg or rpm).

Read before the tool runs, once per executable per session. A script where a binary is expected, or a
file its package manager says was changed, is flagged in the report; a `tools.sha256` pin that does
not match stops the tool from running at all.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

PACKAGE_TIMEOUT_S = 30.0
# Where no Debian or RPM package installs a file (FHS: users' homes, temporary and mount points, run time
# state): a file there is owned by no package, and asking the package database (about 0.1 s a query, the
# largest cost of a run with fast tools) would only say so. /usr/local and /opt are asked: NVIDIA's CUDA
# packages install to /usr/local/cuda-*.
NO_PACKAGE_PREFIXES = ("/home/", "/root/", "/tmp/", "/var/tmp/", "/dev/shm/", "/run/", "/mnt/", "/media/", "/srv/")


def _kind(head: bytes) -> str:
    if head.startswith(b"\x7fELF"):
        return "ELF"
    if head.startswith(b"#!"):
        return "script (" + head[2:].split(b"\n", 1)[0].decode(errors="replace").strip()[:80] + ")"
    return "other (neither ELF nor a #! script)"


def _query(argv: list[str]) -> tuple[int | None, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PACKAGE_TIMEOUT_S, check=False,
                              env={**os.environ, "LC_ALL": "C"})
        return done.returncode, (done.stdout + done.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)


def _aliases(*paths: str) -> list[str]:
    """A file's names as a package database may know them: with merged /usr, /usr/sbin/x was shipped as /sbin/x."""
    names: list[str] = []
    for path in paths:
        for name in (path, path.removeprefix("/usr") if path.startswith("/usr/") else "/usr" + path):
            if name not in names:
                names.append(name)
    return names


def _changed(output: str, names: list[str]) -> list[str]:
    """`dpkg --verify` / `rpm -V` lines whose digest column (the third) says this file differs."""
    return [line for line in output.splitlines() if line.split()[-1:] and line.split()[-1] in names
            and len(line) > 2 and line[2] == "5"]


def _package(path: str, requested: str) -> dict[str, Any]:
    """The owning package and whether its manager finds the file as shipped (dpkg first, then rpm)."""
    names = _aliases(path, requested)
    outside = [prefix for name in (path, os.path.abspath(requested)) for prefix in NO_PACKAGE_PREFIXES
               if name.startswith(prefix)]
    if len(outside) == 2:
        return {"package_manager": None, "package": None, "verified": None,
                "package_note": f"no package owns this file (under {outside[0]}, where packages do not install)"}
    if shutil.which("dpkg-query") and shutil.which("dpkg"):
        _rc, out = _query(["dpkg-query", "-S", *names])  # every name at once: one query per executable
        owners = [line.split(": ", 1)[0] for line in out.splitlines()
                  if ": " in line and line.split(": ", 1)[1].strip() in names and not line.startswith("dpkg-query")]
        if not owners:
            return {"package_manager": "dpkg", "package": None, "verified": None,
                    "package_note": "no package owns this file"}
        package = owners[0].split(",")[0].strip()
        rc, out = _query(["dpkg", "--verify", package])
        changed = _changed(out, names)
        return {"package_manager": "dpkg", "package": package, "verified": rc == 0 and not changed if rc is not None else None,
                "package_note": "; ".join(changed)[:300] or (out[:300] if rc else "")}
    if shutil.which("rpm"):
        rc, out = _query(["rpm", "-qf", path])
        if rc != 0:
            return {"package_manager": "rpm", "package": None, "verified": None, "package_note": "no package owns this file"}
        package = out.splitlines()[0].strip()
        rc, out = _query(["rpm", "-V", package])
        changed = _changed(out, names)
        return {"package_manager": "rpm", "package": package, "verified": not changed,
                "package_note": "; ".join(changed)[:300]}
    return {"package_manager": None, "package": None, "verified": None, "package_note": "no dpkg or rpm on this host"}


def read_provenance(executable: str) -> dict[str, Any]:
    """Everything this host can say about the file that will run; never raises."""
    real = os.path.realpath(executable)
    record: dict[str, Any] = {"path": executable, "resolved": real}
    try:
        data = Path(real).read_bytes()
    except OSError as exc:
        return {**record, "error": f"unreadable: {exc.strerror or exc}"}
    record.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data), kind=_kind(data[:256]))
    record.update(_package(real, executable))
    return record


def flags(record: dict[str, Any], expects_binary: bool) -> list[str]:
    """What a signer should look at twice: a script where a binary is expected, a changed package file."""
    found = []
    if record.get("error"):
        found.append(record["error"])
    kind = str(record.get("kind", ""))
    if expects_binary and kind and kind != "ELF":
        found.append(f"a {kind.split(' (')[0]} where a compiled binary is expected")
    if record.get("verified") is False:
        found.append(f"{record.get('package_manager')} says this file of {record.get('package')} was changed "
                     "since it was installed")
    return found
