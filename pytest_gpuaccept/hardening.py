"""The judging process's own defences: its memory closed to the tools, and the user they run as.

A tool runs code of the vendor's choosing. Started as pytest's own user, it could read this process's memory
through /proc/<pid>/mem: the key that seals the evidence, and every reading kept there. On Linux the process
therefore makes itself non-dumpable (PR_SET_DUMPABLE 0), which closes its memory to every process of the same
user; root still reads it (CAP_SYS_PTRACE), so where pytest runs as root the tools run as `tools.user`, and
without one the results say that they ran as root. Each shortfall is a warning in the results, never silence.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import sys
from pathlib import Path

import pytest

from .state import STATE

PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def undumpable() -> str | None:
    """Make this process non-dumpable (Linux), so that no process of its user can read its memory or trace it;
    None when done or where there is nothing to do (not Linux), else why it could not be done."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library this interpreter runs on (prctl is glibc's and musl's)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0:
            return None
        reason = os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        reason = str(exc)
    return (f"this process could not make itself non-dumpable (prctl PR_SET_DUMPABLE: {reason}): a tool running as "
            "the same user can read its memory, the evidence's sealing key included")


def tools_user(name: str | None) -> tuple[pwd.struct_passwd | None, list[str]]:
    """The user the tools run as (None: this process's own) and what a signer should be told about it; a
    tools.user this host does not have is a usage error, before any tool runs."""
    if os.geteuid() != 0:
        me = _name(os.geteuid())
        if name is None or name == me:
            return None, []
        return None, [f"tools.user {name} is not used: pytest runs as {me}, not as root, and cannot start tools as "
                      f"another user; the tools ran as {me}, this process's memory closed to them (PR_SET_DUMPABLE)"]
    if name is None:
        return None, ["pytest runs as root and the contract names no tools.user: the tools ran as root, which can read "
                      "this process's memory (the evidence's sealing key, every reading); name an unprivileged user "
                      "in tools.user"]
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise pytest.UsageError(f"tools.user: this host has no user {name!r} to run the tools as: create it "
                                f"(useradd --system {name}) or name another") from None
    if entry.pw_uid == 0:
        raise pytest.UsageError(f"tools.user: {name} has user id 0: it is root by another name")
    return entry, []


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user id {uid}"


def harden(config: pytest.Config) -> None:
    """Called once the session's State exists, before any tool runs: this process's memory closed, the user the
    tools run as, whether evidence is shared with other processes of the session (xdist), and the evidence
    folder closed to the tools' user. Warnings go to the results (contract_warnings)."""
    state = config.stash[STATE]
    runner = state.runner
    problem = undumpable()
    state.advice += [problem] if problem else []
    # Only under xdist do other processes take runs and readings that this one reads back (sealed).
    runner.shared = getattr(config, "workerinput", None) is not None or \
        bool(getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None))
    if state.mode == "replay" or not runner.keep:
        return  # no tool runs
    runner.user, said = tools_user(state.contract.tools.user)
    state.advice += said
    if runner.user is not None and state.is_controller:
        _closed(state.evidence_dir)


def _closed(folder: Path) -> None:
    """The evidence folder writable by this process's user alone: the tools' output comes through pipes, and
    another user has nothing to write there."""
    mode = folder.stat().st_mode
    if mode & 0o022:
        folder.chmod(mode & ~0o022 & 0o7777)
