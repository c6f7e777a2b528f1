"""Run an external tool: argv list, timeout, exit code, bounded output, and an evidence record of it.

Every tool run of a session goes through one ToolRunner. A tool's stdout and stderr come through pipes into this
process's memory (bounded), and what the run parses is those bytes; they are then written, with a JSON record
(argv, exit code, duration), into the evidence folder and sealed. Nothing a run judges is read back from a file
it wrote: in a single-process run every run and reading is kept in memory. Under xdist the workers are separate
processes: a run or reading one of them took reaches the others only as sealed evidence (evidence.py), read
back only while its seal verifies. Runs are memoised by key under a host-wide file lock, so a tool runs once per
session even with several xdist workers, and two measurements never overlap. With a replay folder nothing is
executed: the recorded runs of an earlier bundle are read back instead.

Tools start in a clean environment built from an allow-list (tool_environment), from an absolute path resolved
once per session; the file's SHA-256 is taken again right before each run, and a pin (tools.sha256) is checked
against that fresh digest: a file swapped between two runs of a session is caught at the later run.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Sequence, TypeVar

from ..bundle_files import Refused
from ..evidence import LOCK, Evidence, ForeignEvidence, new_key
from ..untrusted import shown
from . import strip_escapes
from .process import (
    MAX_OUTPUT_BYTES,
    NOTHING,
    Started,
    file_sha256,
    kill_group,
    own_cwd,
    tool_environment,
    wait_or_kill,
)
from .provenance import read_provenance
from .recorded import RECORD_LIMIT, Recorded

# Where a tool is installed by a package rather than on PATH (DCGM 4 ships nvbandwidth per CUDA version).
PACKAGED: dict[str, tuple[str, ...]] = {
    "nvbandwidth": ("/usr/libexec/datacenter-gpu-manager-4/plugins/cuda*/nvbandwidth",),
}

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_.=+-]+")


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What one execution of a tool did; `failure` says in one line why it cannot be trusted."""

    key: str
    argv: tuple[str, ...]
    returncode: int | None
    duration_s: float
    stdout: str
    stderr: str
    timed_out: bool = False
    error: str | None = None
    truncated: bool = False
    evidence: tuple[str, ...] = ()
    timeout_s: float | None = None
    replayed: bool = False
    stopped_after_s: float | None = None  # a workload gpuaccept stopped itself once its duration was over
    pid: int | None = None  # the process gpuaccept started: a tool's own PID lines must name it
    provenance: dict[str, Any] | None = None  # where the executable came from (probes/provenance.py)
    # When it started, on this host's monotonic clock (every process of the session reads the same one): the
    # schedule's time line (schedule.py). A group run together shares its start.
    started_s: float | None = None

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    @property
    def failure(self) -> str | None:
        """None when the tool ran to completion with exit code 0; else the reason, in one line."""
        if self.error:
            return self.error
        if self.timed_out:
            return f"`{self.command}` timed out after {self.timeout_s:g} s and was killed"
        if self.returncode != 0 and self.stopped_after_s is None:
            tail = last_line(self.stderr) or last_line(self.stdout)
            shown = f": {tail}" if tail else ""
            return f"`{self.command}` exited with code {self.returncode}{shown}"
        return None


def last_line(text: str, limit: int = 200) -> str:
    """The last non-blank line of a tool's (or a test's) output, cut to `limit`: what a one-line reason quotes."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def slug(argv: list[str] | tuple[str, ...]) -> str:
    """A file-name-safe key for a command line: `nvidia-smi_topo_-m`."""
    words = [os.path.basename(argv[0])] + list(argv[1:])
    text = _SLUG_UNSAFE.sub("_", "_".join(words)).strip("_.") or "tool"
    return text[:100]


@dataclass(frozen=True, slots=True)
class Command:
    """One command of a group run together; `start_after_s` waits before starting it; with `own_tmpdir` it starts
    with a TMPDIR of its own, made just before and removed once it has exited (a launcher that keeps its session
    files under TMPDIR: several started at once must not share them)."""

    tool: str
    args: tuple[str, ...]
    key: str | None = None
    start_after_s: float = 0.0
    own_tmpdir: bool = False

    @classmethod
    def of(cls, argv: list[str], key: str | None = None, start_after_s: float = 0.0,
           own_tmpdir: bool = False) -> Command:
        """The command an argv list names (an engine's launcher line: the launcher, then its arguments)."""
        return cls(argv[0], tuple(argv[1:]), key, start_after_s, own_tmpdir)


def find_tool(tool: str, paths: dict[str, str]) -> str | None:
    """The executable for a tool: the contract's `tools:` path, else PATH, else where packages put it."""
    if tool in paths:
        path = paths[tool]
        return path if os.access(path, os.X_OK) else None
    found = shutil.which(tool)
    for pattern in () if found else PACKAGED.get(tool, ()):
        hits = sorted(p for p in glob.glob(pattern) if os.access(p, os.X_OK))
        if hits:
            return hits[-1]  # the newest CUDA build DCGM ships
    return found


@dataclass(eq=False)  # one per session: compared and hashed by identity
class ToolRunner:
    """Runs tools for one acceptance session and keeps the evidence of each run.

    The one owner of memoisation and replay: a run or reading is taken once per session and kept in memory,
    shared with other xdist processes of the session only through sealed evidence (`shared`), or read from the
    replayed bundle.
    """

    evidence_dir: Path
    default_timeout_s: float = 600.0
    tool_paths: dict[str, str] = field(default_factory=dict)
    replay: Recorded | None = None  # runs and readings recorded earlier, read instead of measured (recorded.py)
    pins: dict[str, str] = field(default_factory=dict)  # tools.sha256: tool -> the SHA-256 its file must have
    progress: Callable[[str], None] | None = None  # one line for the terminal when a tool starts and ends
    key: bytes = field(default_factory=new_key, repr=False)
    keep: bool = True  # False in modes that judge nothing: nothing is written
    # Whether other processes of this session (xdist workers, their controller) take runs and readings too: only
    # then is sealed evidence read back. A single-process run reads nothing back from disk (hardening.harden).
    shared: bool = True
    user: pwd.struct_passwd | None = None  # tools.user where pytest runs as root (hardening.harden); else pytest's own
    evidence: Evidence = field(init=False, repr=False)
    _runs: dict[str, ToolRun] = field(default_factory=dict, init=False, repr=False)
    _readings: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    _provenance: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    _resolved: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    _held: int = field(default=0, init=False, repr=False)  # how deep this process is inside its own exclusive()

    def __post_init__(self) -> None:
        self.evidence = Evidence(self.evidence_dir, self.key)

    @property
    def replay_dir(self) -> Path | None:
        """The folder the recorded runs were recorded in (None in a run that measures): to name it, never to read."""
        return self.replay.folder if self.replay is not None else None

    def which(self, tool: str) -> str | None:
        """The tool's absolute path, resolved once per session (the contract's path, PATH, a package's place)."""
        if tool not in self._resolved:
            found = find_tool(tool, self.tool_paths)
            self._resolved[tool] = os.path.abspath(found) if found else None
        return self._resolved[tool]

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the host-wide lock of this session: one measurement at a time, across xdist workers (a single
        process measures one thing at a time anyway, and keeps no lock file a tool could hold). A measurement run
        beside another that holds the lock (schedule.py: ib_write_bw while the GPU load runs) is inside it already."""
        if not self.keep or not self.shared or self._held:
            yield
            return
        self.evidence_dir.mkdir(parents=True, exist_ok=True)
        with open(self.evidence_dir / LOCK, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
                fcntl.flock(handle, fcntl.LOCK_UN)

    def run(self, tool: str, args: list[str], timeout_s: float | None = None, key: str | None = None) -> ToolRun:
        """Run `tool args` once per session (memoised by key) and return what it did."""
        return self.run_together([Command(tool, tuple(args), key)], timeout_s)[0]

    def run_together(self, commands: list[Command], timeout_s: float | None = None,
                     each: Callable[[int, ToolRun], ToolRun] | None = None) -> list[ToolRun]:
        """Run several commands at once (a server and its client, parallel clients) under one deadline.

        Memoised as a group: when every key was run before in this session, the recorded runs are returned.
        Nothing starts unless every executable is found. With `each`, each run is handed to `each(index, run)` as
        its tool exits, and what `each` returns is what the session keeps and this returns: a caller that took what
        it needs from a large output (a cluster node's bundle) keeps the run without it, so that the outputs of a
        thousand tools are never all held at once (the evidence holds every byte).
        """
        timeout = timeout_s if timeout_s is not None else self.default_timeout_s
        keys = [c.key or slug([c.tool, *c.args]) for c in commands]
        executables = [self.which(c.tool) if self.replay is None else c.tool for c in commands]
        argvs = [[exe or c.tool, *c.args] for exe, c in zip(executables, commands)]
        with self.exclusive():
            recorded = [self._recall(key) for key in keys]
            if all(run is not None for run in recorded):
                runs = [run for run in recorded if run is not None]
            elif self.replay is not None:
                runs = [self._replay(key, argv) for key, argv in zip(keys, argvs)]
            else:
                checked = [self._checked(c.tool, exe) if exe else (None, None) for exe, c in zip(executables, commands)]
                runs = self._refused(keys, argvs, commands, executables, checked)
                if not runs:
                    return self._execute(keys, argvs, commands, timeout,
                                         [origin for origin, _refused in checked], each)
        return runs if each is None else [self._hand_over(each, n, run) for n, run in enumerate(runs)]

    def _refused(self, keys: list[str], argvs: list[list[str]], commands: list[Command], executables: list[str | None],
                 checked: Sequence[tuple[dict[str, Any] | None, str | None]]) -> list[ToolRun]:
        """The group's runs when it must not start (a tool changed or not the pinned one, or missing), each saying
        why; [] when it may."""
        refused = [why for _origin, why in checked]
        if any(refused):
            reason = next(why for why in refused if why)
            return [self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=why or f"not started: {reason}",
                                       provenance=origin), b"", b"")
                    for key, argv, why, (origin, _why) in zip(keys, argvs, refused, checked)]
        missing = [c.tool for exe, c in zip(executables, commands) if exe is None]
        runs = []
        for key, argv, exe, c in zip(keys, argvs, executables, commands) if missing else ():
            where = f"at {self.tool_paths[c.tool]} (tools.{c.tool})" if c.tool in self.tool_paths else "on PATH"
            error = f"{c.tool} not found {where}" if exe is None else f"not started: {missing[0]} not found"
            runs.append(self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=error), b"", b""))
        return runs

    def _hand_over(self, each: Callable[[int, ToolRun], ToolRun], n: int, run: ToolRun) -> ToolRun:
        """`each` of a finished run; what it returns is the run this session keeps."""
        kept = each(n, run)
        self._runs[kept.key] = kept
        return kept

    def _origin(self, tool: str, executable: str) -> dict[str, Any]:
        """The provenance of an executable, read once per session (at its first run)."""
        if executable not in self._provenance:
            self._provenance[executable] = {"tool": tool, **read_provenance(executable)}
        return self._provenance[executable]

    def _checked(self, tool: str, executable: str) -> tuple[dict[str, Any], str | None]:
        """The executable's provenance with its SHA-256 taken right now, and why it must not run: it is not the file
        that ran under this path earlier in the session, or not the file the contract pins (tools.sha256)."""
        known = executable in self._provenance
        first = self._origin(tool, executable)  # at the first run, read (and hashed) just now
        if not known:
            return first, self._unpinned(tool, first)
        origin = {**first, "resolved": os.path.realpath(executable), "sha256": file_sha256(executable)}
        if origin["sha256"] != first.get("sha256"):
            return origin, (f"{tool} at {executable} changed during this session: SHA-256 "
                            f"{first.get('sha256') or '(unreadable)'} at its first run, {origin['sha256'] or '(unreadable)'} "
                            "now: not the file that ran before, not run")
        return origin, self._unpinned(tool, origin)

    def _unpinned(self, tool: str, origin: dict[str, Any] | None) -> str | None:
        """Why a tool pinned by tools.sha256 must not run: its file is not the pinned one."""
        pinned = self.pins.get(tool)
        if pinned is None or origin is None:
            return None
        found = origin.get("sha256")
        if found == pinned:
            return None
        return (f"{tool} at {origin.get('resolved')} has SHA-256 {found or '(unreadable)'}, the contract pins "
                f"{pinned} (tools.sha256): not the binary the contract names, not run")

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _start(self, argv: list[str], own_tmpdir: bool = False) -> tuple[Started | None, str | None]:
        """Start one tool in its own process group and clean environment, as tools.user where one is set, with a
        TMPDIR of its own where asked (only that user's); or why it could not start."""
        as_user: dict[str, Any] = {} if self.user is None else \
            {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        tmpdir = None
        try:
            if own_tmpdir:
                tmpdir = tempfile.mkdtemp(prefix="gpuaccept-tmp-")
                if self.user is not None:
                    os.chown(tmpdir, self.user.pw_uid, self.user.pw_gid)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=own_cwd(argv), env=tool_environment(argv[0], self.user, tmpdir),
                                    start_new_session=True, **as_user)
        except (OSError, subprocess.SubprocessError) as exc:
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            return None, f"`{' '.join(argv)}` could not start: {getattr(exc, 'strerror', None) or exc}"
        return Started(proc, tmpdir), None

    def _execute(self, keys: list[str], argvs: list[list[str]], commands: list[Command], timeout: float,
                 origins: list[dict[str, Any] | None],
                 each: Callable[[int, ToolRun], ToolRun] | None = None) -> list[ToolRun]:
        shown = " + ".join(" ".join(Path(a[0]).name.split()[:1] + a[1:])[:100] for a in argvs[:3]) + \
            (f" and {len(argvs) - 3} more" if len(argvs) > 3 else "")
        self._say(f"gpuaccept: running {shown} (at most {timeout:g} s)")
        started = time.monotonic()
        deadline = started + timeout
        tools: list[Started | None] = []
        errors: list[str | None] = []
        returncodes: list[int | None] = [None] * len(keys)
        timed_out = [False] * len(keys)
        try:
            for argv, command in zip(argvs, commands):
                if command.start_after_s:
                    time.sleep(command.start_after_s)  # let a server start listening before its client connects
                tool, error = self._start(argv, command.own_tmpdir)
                tools.append(tool)
                errors.append(error)
            for n, tool in enumerate(tools):
                if tool is not None and each is None:
                    returncodes[n], timed_out[n] = wait_or_kill(tool.proc, deadline)
        except BaseException:
            # Ctrl-C, SIGTERM: stop every tool's whole group, keep what they printed, then go on unwinding.
            self._interrupted(keys, argvs, tools, errors, started, timeout)
            raise
        if each is not None:
            runs = self._as_they_exit(keys, argvs, tools, errors, (started, timeout), origins, each)
            self._say(f"gpuaccept: {shown} done in {time.monotonic() - started:.1f} s")
            return runs
        self._say(f"gpuaccept: {shown} done in {time.monotonic() - started:.1f} s")
        return [self._finish(key, argv, tool.output() if tool else NOTHING, returncodes[n], started, timeout,
                             timed_out[n], errors[n], pid=tool.proc.pid if tool else None, provenance=origins[n])
                for n, (key, argv, tool) in enumerate(zip(keys, argvs, tools))]

    def _as_they_exit(self, keys: list[str], argvs: list[list[str]], tools: list[Started | None],
                      errors: list[str | None], window: tuple[float, float], origins: list[dict[str, Any] | None],
                      each: Callable[[int, ToolRun], ToolRun]) -> list[ToolRun]:
        """Each run handed to `each` as its tool exits (one that never started at once), its output let go once
        handed over; at the deadline the rest are killed, timed out. Waits that grow while nothing exits (a node's
        run takes minutes), 10 ms again after each exit."""
        started, timeout = window
        deadline = started + timeout
        runs: list[ToolRun | None] = [None] * len(keys)
        pending, pause = set(range(len(keys))), 0.01
        try:
            while pending:
                late = time.monotonic() >= deadline
                done = sorted(n for n in pending if late or (tool := tools[n]) is None or tool.proc.poll() is not None)
                for n in done:
                    tool, tools[n] = tools[n], None
                    returncode, timed_out = wait_or_kill(tool.proc, deadline) if tool else (None, False)
                    run = self._finish(keys[n], argvs[n], tool.output() if tool else NOTHING, returncode, started,
                                       timeout, timed_out, errors[n], pid=tool.proc.pid if tool else None,
                                       provenance=origins[n])
                    pending.discard(n)
                    runs[n] = self._hand_over(each, n, run)
                pause = 0.01 if done else min(pause * 2, 0.25)
                time.sleep(pause if pending else 0)
        except BaseException:
            left = sorted(pending)
            self._interrupted([keys[n] for n in left], [argvs[n] for n in left], [tools[n] for n in left],
                              [errors[n] for n in left], started, timeout)
            raise
        return [run for run in runs if run is not None]

    def _interrupted(self, keys: list[str], argvs: list[list[str]], tools: list[Started | None],
                     errors: list[str | None], started: float, timeout: float) -> None:
        """An interrupted _execute: every tool still running is stopped (its whole group), and each tool's run
        recorded as interrupted with what it printed."""
        for n, tool in enumerate(tools):
            if tool is not None and tool.proc.poll() is None:
                kill_group(tool.proc)
                errors[n] = "interrupted while the tool ran"
        for n, (key, argv) in enumerate(zip(keys, argvs)):
            error = errors[n] if n < len(errors) else "interrupted before the tool started"
            tool = tools[n] if n < len(tools) else None
            self._finish(key, argv, tool.output() if tool else NOTHING, tool.proc.returncode if tool else None,
                         started, timeout, False, error or "interrupted while the tool ran")

    def run_during(self, command: Command, duration_s: float, during: Callable[[threading.Event], object],
                   record_as: str) -> ToolRun:
        """Start a workload, call `during(stop)` while it runs (sampling), then stop it cleanly.

        `stop` is set when the workload ends by itself. What `during` returns is kept as evidence under
        `record_as` (and in memory), inside the same lock, so that every xdist worker reads the one recording.
        """
        key = command.key or slug([command.tool, *command.args])
        executable = self.which(command.tool) if self.replay is None else command.tool
        argv = [executable or command.tool, *command.args]
        with self.exclusive():
            recorded = self._recall(key)
            if recorded is not None:
                return recorded
            if self.replay is not None:  # the samples as recorded; or as `during` reads them once the load has ended
                self._remember(record_as, self._replayed_json(record_as, lambda: _as_recording(during(_ended()))))
                return self._replay(key, argv)
            if executable is None:
                run = ToolRun(key, tuple(argv), None, 0.0, "", "", error=f"{command.tool} not found on PATH")
                return self._save(run, b"", b"")
            origin, refused = self._checked(command.tool, executable)
            if refused:
                return self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=refused, provenance=origin), b"", b"")
            started = time.monotonic()
            tool, error = self._start(argv)
            if tool is None:
                return self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=error, provenance=origin), b"", b"")
            result, stopped = self._load(tool, started, during, lambda: self._finish(
                key, argv, tool.output(), tool.proc.returncode, started, duration_s, error="interrupted during the load"))
            output = tool.output()
            self._remember(record_as, _as_recording(result))
            return self._finish(key, argv, output, tool.proc.returncode, started, duration_s, stopped_after_s=stopped,
                                pid=tool.proc.pid, provenance=origin)

    @staticmethod
    def _load(tool: Started, started: float, during: Callable[[threading.Event], object],
              interrupted: Callable[[], object]) -> tuple[object, float | None]:
        """`during(stop)` while the workload runs (`stop` set when it ends by itself); then the workload stopped if
        it still runs. What `during` returned, and after how long gpuaccept stopped the workload (None: it ended)."""
        stop = threading.Event()
        proc = tool.proc

        def watch() -> None:
            proc.wait()
            stop.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            result = during(stop)
        except BaseException:
            kill_group(proc)
            interrupted()
            raise
        stopped = None
        if proc.poll() is None:
            stopped = round(time.monotonic() - started, 3)
            kill_group(proc)
        watcher.join(timeout=10)
        return result, stopped

    def _finish(self, key: str, argv: list[str], output: tuple[bytes, bytes, bool], returncode: int | None,
                started: float, timeout: float, timed_out: bool = False, error: str | None = None,
                stopped_after_s: float | None = None, pid: int | None = None,
                provenance: dict[str, Any] | None = None) -> ToolRun:
        """The tool has exited: what it printed (`output`: stdout, stderr, whether either was cut), as held in memory,
        is what the run parses and what is written and sealed; nothing is read back."""
        out, err, cut = output
        out_name, err_name = f"{key}.txt", f"{key}.stderr.txt"
        if self.keep:
            self.evidence.write(out_name, out)
            self.evidence.write(err_name, err)
        stdout, stderr = out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
        run = ToolRun(key, tuple(argv), returncode, round(time.monotonic() - started, 3), stdout, stderr,
                      timed_out, error, cut, (out_name, err_name, f"{key}.json"), timeout,
                      stopped_after_s=stopped_after_s, pid=pid, provenance=provenance, started_s=round(started, 3))
        return self._keep_run(run)

    def _save(self, run: ToolRun, stdout: bytes, stderr: bytes) -> ToolRun:
        """A run that never executed (tool missing) or was replayed: its outputs written as given."""
        if self.keep:
            self.evidence.write(f"{run.key}.txt", stdout)
            self.evidence.write(f"{run.key}.stderr.txt", stderr)
        return self._keep_run(ToolRun(**{**asdict(run), "evidence": (f"{run.key}.txt", f"{run.key}.stderr.txt",
                                                                     f"{run.key}.json")}))

    def _keep_run(self, run: ToolRun) -> ToolRun:
        self._runs[run.key] = run
        if self.keep:
            self.evidence.write(f"{run.key}.json", json.dumps(_record(run), indent=1).encode())
        return run

    def _recall(self, key: str) -> ToolRun | None:
        """This session's run of `key`: from memory, or sealed by another process of the session (xdist only);
        None if not run yet.

        A record that is not sealed is never read (the next write moves it aside as foreign). A sealed
        record whose output changed after capture is a run that cannot be trusted.
        """
        if key in self._runs or not self.shared:
            return self._runs.get(key)
        try:
            raw = self.evidence.read(f"{key}.json")
        except ForeignEvidence:
            return None
        if raw is None:
            return None
        record = json.loads(raw)
        try:
            stdout = (self.evidence.read(record["stdout"]) or b"").decode("utf-8", errors="replace")
            stderr = (self.evidence.read(record["stderr"]) or b"").decode("utf-8", errors="replace")
        except ForeignEvidence as exc:
            return ToolRun(key, tuple(record["argv"]), None, 0.0, "", "",
                           error=f"the evidence of `{' '.join(record['argv'])}` cannot be trusted: {exc}")
        run = _from_record(key, record, stdout, stderr, replayed=record.get("replayed", False))
        self._runs[key] = run
        return run

    def _replay(self, key: str, argv: list[str]) -> ToolRun:
        """A run read from the recorded source (a replayed bundle, as data: its record and the outputs it names, each
        a file the bundle's manifest lists, read to the size listed); anything else is a run not measured."""
        assert self.replay is not None
        where = f"the recorded runs {self.replay.folder}" if self.replay.folder else "the recorded runs"
        if not self.replay.has(f"{key}.json"):
            run = ToolRun(key, tuple(argv), None, 0.0, "", "", error=f"`{' '.join(argv)}` is not in {where}")
            return self._save(run, b"", b"")
        try:
            record, stdout, stderr = self.replay.record(key, argv)
            recorded = _from_record(key, record, stdout[:RECORD_LIMIT].decode("utf-8", errors="replace"),
                                    stderr[:RECORD_LIMIT].decode("utf-8", errors="replace"), replayed=True)
        except (Refused, KeyError, TypeError, ValueError) as exc:
            run = ToolRun(key, tuple(argv), None, 0.0, "", "",
                          error=f"the record of `{' '.join(argv)}` in {where} cannot be read: {shown(exc)}")
            return self._save(run, b"", b"")
        return self._save(recorded, stdout, stderr)

    def _replayed_json(self, name: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        assert self.replay is not None
        try:
            return self.replay.reading(name, take)
        except (Refused, OSError, KeyError) as exc:
            return {"error": f"not in the recorded runs {self.replay.folder or ''}: {shown(exc)}"}

    def reading(self, name: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A reading that is not a tool run (NVML, sysfs): taken once per session, or replayed; kept in memory and
        as evidence. Read back from the evidence only where another process of the session (an xdist worker) took
        it, and only as the bytes its seal vouches for."""
        with self.exclusive():
            if name in self._readings:
                return self._readings[name]
            try:
                raw = self.evidence.read(name) if self.keep and self.shared else None
            except ForeignEvidence:
                raw = None  # never read: the write below moves it aside, and the verdict names it
            if raw is not None:
                self._readings[name] = json.loads(raw)
                return self._readings[name]
            return self._remember(name, self._replayed_json(name, take) if self.replay is not None else take())

    def _remember(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        self._readings[name] = data
        self.record_json(name, data)
        return data

    def record_json(self, name: str, data: object) -> str:
        """Save a reading that came from a library, not a tool (NVML), as sealed evidence; returns its file name."""
        if self.keep:
            self.evidence.write_json(name, data)
        return name


def _ended() -> threading.Event:
    """The stop event of a load that has ended already (a recorded one)."""
    stop = threading.Event()
    stop.set()
    return stop


def _as_recording(result: object) -> dict[str, Any]:
    """What a load's `during` returned, as the reading it is kept as."""
    return result if isinstance(result, dict) else {"error": f"no recording: {result!r}"}


def _from_record(key: str, record: dict[str, Any], stdout: str, stderr: str, replayed: bool) -> ToolRun:
    return ToolRun(key, tuple(record["argv"]), record["returncode"], record["duration_s"], stdout, stderr,
                   record["timed_out"], record["error"], record["truncated"],
                   (record["stdout"], record["stderr"], f"{key}.json"), record.get("timeout_s"),
                   replayed=replayed, stopped_after_s=record.get("stopped_after_s"), pid=record.get("pid"),
                   provenance=record.get("provenance"), started_s=record.get("started_s"))


def _record(run: ToolRun) -> dict[str, object]:
    return {
        "argv": list(run.argv), "returncode": run.returncode, "duration_s": run.duration_s,
        "timed_out": run.timed_out, "timeout_s": run.timeout_s, "error": run.error, "truncated": run.truncated,
        "stdout": f"{run.key}.txt", "stderr": f"{run.key}.stderr.txt", "replayed": run.replayed,
        "stopped_after_s": run.stopped_after_s, "pid": run.pid, "provenance": run.provenance, "started_s": run.started_s,
    }


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reading(Generic[T]):
    """A tool run and what its parser made of it; `failure` is why there is no value to judge."""

    run: ToolRun | None
    value: T | None
    failure: str | None

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.run.evidence if self.run else ()


def parse_run(run: ToolRun, parser: Callable[[str], T]) -> Reading[T]:
    """Parse a run's stdout, or say why it cannot be trusted: tool failure or unparseable output."""
    if run.failure:
        return Reading(run, None, run.failure)
    if run.truncated:
        return Reading(run, None, f"output of `{run.command}` exceeded {MAX_OUTPUT_BYTES} bytes and was cut: not read")
    try:
        return Reading(run, parser(strip_escapes(run.stdout)), None)
    except ValueError as exc:  # ParseError is a ValueError
        return Reading(run, None, f"cannot read the output of `{run.command}`: {exc}")
