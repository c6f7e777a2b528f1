"""Run an external tool: argv list, timeout, exit code, bounded output, and an evidence record of it.

Every tool run of a session goes through one ToolRunner. It writes, per run, the tool's stdout and
stderr as printed and a JSON record (argv, exit code, duration) into the evidence folder. Runs are
memoised by key under a host-wide file lock, so a tool runs once per session even with several
xdist workers, and two measurements never overlap. With a replay folder nothing is executed: the
recorded runs of an earlier bundle are read back instead.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

from ..evidence import LOCK, Evidence, ForeignEvidence, new_key
from . import strip_escapes
from .provenance import read_provenance

# Where a tool is installed by a package rather than on PATH (DCGM 4 ships nvbandwidth per CUDA version).
PACKAGED: dict[str, tuple[str, ...]] = {
    "nvbandwidth": ("/usr/libexec/datacenter-gpu-manager-4/plugins/cuda*/nvbandwidth",),
}

# The most of a tool's output kept, per stream. Beyond it the file is cut and the cut is marked.
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
TRUNCATION_MARK = "\n[gpuaccept: output truncated at {limit} bytes of {size}]\n"
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
    """One command of a group run together; `start_after_s` waits before starting it."""

    tool: str
    args: tuple[str, ...]
    key: str | None = None
    start_after_s: float = 0.0


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

    The one owner of memoisation and replay: a run or reading is taken once per session (kept in
    memory, shared with xdist workers only through sealed evidence), or read from the replayed bundle.
    """

    evidence_dir: Path
    default_timeout_s: float = 600.0
    tool_paths: dict[str, str] = field(default_factory=dict)
    replay_dir: Path | None = None
    pins: dict[str, str] = field(default_factory=dict)  # tools.sha256: tool -> the SHA-256 its file must have
    progress: Callable[[str], None] | None = None  # one line for the terminal when a tool starts and ends
    key: bytes = field(default_factory=new_key, repr=False)
    keep: bool = True  # False in modes that judge nothing: nothing is written
    evidence: Evidence = field(init=False, repr=False)
    _runs: dict[str, ToolRun] = field(default_factory=dict, init=False, repr=False)
    _readings: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    _provenance: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.evidence = Evidence(self.evidence_dir, self.key)

    def which(self, tool: str) -> str | None:
        return find_tool(tool, self.tool_paths)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the host-wide lock of this session: one measurement at a time, across xdist workers."""
        if not self.keep:
            yield
            return
        self.evidence_dir.mkdir(parents=True, exist_ok=True)
        with open(self.evidence_dir / LOCK, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def run(self, tool: str, args: list[str], timeout_s: float | None = None, key: str | None = None) -> ToolRun:
        """Run `tool args` once per session (memoised by key) and return what it did."""
        return self.run_together([Command(tool, tuple(args), key)], timeout_s)[0]

    def run_together(self, commands: list[Command], timeout_s: float | None = None) -> list[ToolRun]:
        """Run several commands at once (a server and its client, parallel clients) under one deadline.

        Memoised as a group: when every key was run before in this session, the recorded runs are returned.
        Nothing starts unless every executable is found.
        """
        timeout = timeout_s if timeout_s is not None else self.default_timeout_s
        keys = [c.key or slug([c.tool, *c.args]) for c in commands]
        executables = [self.which(c.tool) if self.replay_dir is None else c.tool for c in commands]
        argvs = [[exe or c.tool, *c.args] for exe, c in zip(executables, commands)]
        with self.exclusive():
            recorded = [self._recall(key) for key in keys]
            if all(run is not None for run in recorded):
                return [run for run in recorded if run is not None]
            if self.replay_dir is not None:
                return [self._replay(key, argv) for key, argv in zip(keys, argvs)]
            origins = [self._origin(c.tool, exe) if exe else None for exe, c in zip(executables, commands)]
            unpinned = [self._unpinned(c.tool, o) for c, o in zip(commands, origins)]
            if any(unpinned):
                reason = next(u for u in unpinned if u)
                return [self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=u or f"not started: {reason}",
                                           provenance=o), b"", b"")
                        for key, argv, u, o in zip(keys, argvs, unpinned, origins)]
            missing = [c.tool for exe, c in zip(executables, commands) if exe is None]
            if missing:
                runs = []
                for key, argv, exe, c in zip(keys, argvs, executables, commands):
                    where = f"at {self.tool_paths[c.tool]} (tools.{c.tool})" if c.tool in self.tool_paths else "on PATH"
                    error = f"{c.tool} not found {where}" if exe is None else f"not started: {missing[0]} not found"
                    runs.append(self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=error), b"", b""))
                return runs
            return self._execute(keys, argvs, [c.start_after_s for c in commands], timeout, origins)

    def _origin(self, tool: str, executable: str) -> dict[str, Any]:
        """The provenance of an executable, read once per session."""
        if executable not in self._provenance:
            self._provenance[executable] = {"tool": tool, **read_provenance(executable)}
        return self._provenance[executable]

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

    def _execute(self, keys: list[str], argvs: list[list[str]], delays: list[float], timeout: float,
                 origins: list[dict[str, Any] | None]) -> list[ToolRun]:
        shown = " + ".join(" ".join(Path(a[0]).name.split()[:1] + a[1:])[:100] for a in argvs)
        self._say(f"gpuaccept: running {shown} (at most {timeout:g} s)")
        started = time.monotonic()
        deadline = started + timeout
        files = []
        procs: list[subprocess.Popen[bytes] | None] = []
        errors: list[str | None] = []
        returncodes: list[int | None] = [None] * len(keys)
        timed_out = [False] * len(keys)
        try:
            for key, argv, delay in zip(keys, argvs, delays):
                out = open(self.evidence.claim(f"{key}.txt"), "wb")
                err = open(self.evidence.claim(f"{key}.stderr.txt"), "wb")
                files += [out, err]
                if delay:
                    time.sleep(delay)  # let a server start listening before its client connects
                try:
                    procs.append(subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=own_cwd(argv),
                                                  start_new_session=True))
                    errors.append(None)
                except OSError as exc:
                    procs.append(None)
                    errors.append(f"`{' '.join(argv)}` could not start: {exc.strerror or exc}")
            for n, proc in enumerate(procs):
                if proc is None:
                    continue
                try:
                    returncodes[n] = wait_until(proc, deadline)
                except subprocess.TimeoutExpired:
                    timed_out[n] = True
                    kill_group(proc)
                    returncodes[n] = proc.returncode
        except BaseException:
            # Ctrl-C, SIGTERM: stop every tool's whole group, keep what they printed, then go on unwinding.
            self._interrupted(keys, argvs, procs, errors, started, timeout, files)
            raise
        for handle in files:
            handle.close()
        self._say(f"gpuaccept: {shown} done in {time.monotonic() - started:.1f} s")
        return [self._finish(key, argv, returncodes[n], started, timeout, timed_out[n], errors[n],
                             pid=procs[n].pid if n < len(procs) and procs[n] is not None else None,  # type: ignore[union-attr]
                             provenance=origins[n])
                for n, (key, argv) in enumerate(zip(keys, argvs))]

    def _interrupted(self, keys: list[str], argvs: list[list[str]], procs: list[subprocess.Popen[bytes] | None],
                     errors: list[str | None], started: float, timeout: float, files: list[Any]) -> None:
        """An interrupted _execute: every tool still running is stopped (its whole group), its output `files`
        closed, and each tool's run recorded as interrupted with what it printed."""
        for n, proc in enumerate(procs):
            if proc is not None and proc.poll() is None:
                kill_group(proc)
                errors[n] = "interrupted while the tool ran"
        for handle in files:
            handle.close()
        for n, (key, argv) in enumerate(zip(keys, argvs)):
            error = errors[n] if n < len(errors) else "interrupted before the tool started"
            proc_n = procs[n] if n < len(procs) else None
            self._finish(key, argv, proc_n.returncode if proc_n is not None else None,
                         started, timeout, False, error or "interrupted while the tool ran")

    def run_during(self, command: Command, duration_s: float, during: Callable[[threading.Event], object],
                   record_as: str) -> ToolRun:
        """Start a workload, call `during(stop)` while it runs (sampling), then stop it cleanly.

        `stop` is set when the workload ends by itself. What `during` returns is kept as evidence under
        `record_as` (and in memory), inside the same lock, so that every xdist worker reads the one recording.
        """
        key = command.key or slug([command.tool, *command.args])
        executable = self.which(command.tool) if self.replay_dir is None else command.tool
        argv = [executable or command.tool, *command.args]
        with self.exclusive():
            recorded = self._recall(key)
            if recorded is not None:
                return recorded
            if self.replay_dir is not None:
                self._remember(record_as, self._replayed_json(record_as))
                return self._replay(key, argv)
            if executable is None:
                run = ToolRun(key, tuple(argv), None, 0.0, "", "", error=f"{command.tool} not found on PATH")
                return self._save(run, b"", b"")
            origin = self._origin(command.tool, executable)
            refused = self._unpinned(command.tool, origin)
            if refused:
                return self._save(ToolRun(key, tuple(argv), None, 0.0, "", "", error=refused, provenance=origin), b"", b"")
            started = time.monotonic()
            stop = threading.Event()
            with open(self.evidence.claim(f"{key}.txt"), "wb") as out, \
                    open(self.evidence.claim(f"{key}.stderr.txt"), "wb") as err:
                try:
                    proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=own_cwd(argv),
                                            start_new_session=True)
                except OSError as exc:
                    run = ToolRun(key, tuple(argv), None, 0.0, "", "",
                                  error=f"`{' '.join(argv)}` could not start: {exc.strerror or exc}")
                    return self._save(run, b"", b"")

                def watch() -> None:
                    proc.wait()
                    stop.set()

                watcher = threading.Thread(target=watch, daemon=True)
                watcher.start()
                try:
                    result = during(stop)
                except BaseException:
                    kill_group(proc)
                    self._finish(key, argv, proc.returncode, started, duration_s, error="interrupted during the load")
                    raise
                stopped = None
                if proc.poll() is None:
                    stopped = round(time.monotonic() - started, 3)
                    kill_group(proc)
                watcher.join(timeout=10)
            self._remember(record_as, result if isinstance(result, dict) else {"error": f"no recording: {result!r}"})
            return self._finish(key, argv, proc.returncode, started, duration_s, stopped_after_s=stopped,
                                pid=proc.pid, provenance=origin)

    def _finish(self, key: str, argv: list[str], returncode: int | None, started: float, timeout: float,
                timed_out: bool = False, error: str | None = None, stopped_after_s: float | None = None,
                pid: int | None = None, provenance: dict[str, Any] | None = None) -> ToolRun:
        """The tool has exited: bound its output, seal it as captured, and keep the run."""
        out_name, err_name = f"{key}.txt", f"{key}.stderr.txt"
        for name in (out_name, err_name):
            if self.keep and not (self.evidence_dir / name).exists():
                self.evidence.claim(name).write_bytes(b"")  # interrupted before the tool started
        out, cut_out = bound_file(self.evidence_dir / out_name)
        err, cut_err = bound_file(self.evidence_dir / err_name)
        if self.keep:  # the bytes read once: what is parsed is what is sealed (a later append is a change)
            self.evidence.seal(out_name, out)
            self.evidence.seal(err_name, err)
        stdout, stderr = out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
        run = ToolRun(key, tuple(argv), returncode, round(time.monotonic() - started, 3), stdout, stderr,
                      timed_out, error, cut_out or cut_err, (out_name, err_name, f"{key}.json"), timeout,
                      stopped_after_s=stopped_after_s, pid=pid, provenance=provenance)
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
        """This session's run of `key`: from memory, or sealed by another worker; None if not run yet.

        A record that is not sealed is never read (the next write moves it aside as foreign). A sealed
        record whose output changed after capture is a run that cannot be trusted.
        """
        if key in self._runs:
            return self._runs[key]
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
        """A run read from the replayed bundle (verified against its manifest before the session began)."""
        assert self.replay_dir is not None
        meta = self.replay_dir / f"{key}.json"
        if not meta.is_file():
            run = ToolRun(key, tuple(argv), None, 0.0, "", "",
                          error=f"`{' '.join(argv)}` is not in the replayed bundle {self.replay_dir}")
            return self._save(run, b"", b"")
        record = json.loads(meta.read_text())
        stdout = read_bounded(self.replay_dir / record["stdout"])
        stderr = read_bounded(self.replay_dir / record["stderr"])
        recorded = _from_record(key, record, stdout, stderr, replayed=True)
        return self._save(recorded, (self.replay_dir / record["stdout"]).read_bytes(),
                          (self.replay_dir / record["stderr"]).read_bytes())

    def _replayed_json(self, name: str) -> dict[str, Any]:
        assert self.replay_dir is not None
        try:
            data: dict[str, Any] = json.loads((self.replay_dir / name).read_text())
            return data
        except (OSError, ValueError) as exc:
            return {"error": f"not in the replayed bundle {self.replay_dir}: {exc}"}

    def reading(self, name: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A reading that is not a tool run (NVML, sysfs): taken once per session, or replayed; kept as evidence."""
        with self.exclusive():
            if name in self._readings:
                return self._readings[name]
            try:
                raw = self.evidence.read(name) if self.keep else None
            except ForeignEvidence:
                raw = None  # never read: the write below moves it aside, and the verdict names it
            if raw is not None:
                self._readings[name] = json.loads(raw)
                return self._readings[name]
            return self._remember(name, self._replayed_json(name) if self.replay_dir is not None else take())

    def _remember(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        self._readings[name] = data
        self.record_json(name, data)
        return data

    def record_json(self, name: str, data: object) -> str:
        """Save a reading that came from a library, not a tool (NVML), as sealed evidence; returns its file name."""
        if self.keep:
            self.evidence.write_json(name, data)
        return name


def _from_record(key: str, record: dict[str, Any], stdout: str, stderr: str, replayed: bool) -> ToolRun:
    return ToolRun(key, tuple(record["argv"]), record["returncode"], record["duration_s"], stdout, stderr,
                   record["timed_out"], record["error"], record["truncated"],
                   (record["stdout"], record["stderr"], f"{key}.json"), record.get("timeout_s"),
                   replayed=replayed, stopped_after_s=record.get("stopped_after_s"), pid=record.get("pid"),
                   provenance=record.get("provenance"))


def _record(run: ToolRun) -> dict[str, object]:
    return {
        "argv": list(run.argv), "returncode": run.returncode, "duration_s": run.duration_s,
        "timed_out": run.timed_out, "timeout_s": run.timeout_s, "error": run.error, "truncated": run.truncated,
        "stdout": f"{run.key}.txt", "stderr": f"{run.key}.stderr.txt", "replayed": run.replayed,
        "stopped_after_s": run.stopped_after_s, "pid": run.pid, "provenance": run.provenance,
    }


OWN_PACKAGE = Path(__file__).resolve().parent.parent  # pytest_gpuaccept/


def own_cwd(argv: list[str]) -> str | None:
    """Where one of our own workloads (`python -m pytest_gpuaccept.workloads.X`) starts: beside the package this
    run imported. `python -m` puts its working directory first on sys.path, so started from the run's folder
    a `pytest_gpuaccept/` planted there would run instead of ours. Every other tool starts where pytest runs."""
    if len(argv) > 2 and argv[1] == "-m" and argv[2].startswith(OWN_PACKAGE.name + "."):
        return str(OWN_PACKAGE.parent)
    return None


def wait_until(proc: subprocess.Popen[bytes], deadline: float) -> int:
    """The tool's exit status, or subprocess.TimeoutExpired at the deadline (time.monotonic()).

    Popen.wait(timeout) polls with sleeps that double up to 50 ms, so a tool that takes 8 ms is seen to end
    at 15 ms; where Linux gives a pidfd (5.3+), the wait sleeps in poll() until the exit itself. The status
    and the timeout are still Popen.wait's: the pidfd only says when to ask."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None  # an older kernel, or the tool is already gone: Popen.wait alone
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
        finally:
            os.close(pidfd)
    return proc.wait(timeout=max(0.0, deadline - time.monotonic()))


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a tool and every process it started: SIGTERM to the group, SIGKILL after 2 s."""
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            # The leader is gone; make sure no child of the group survives it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def bound_file(path: Path, limit: int = MAX_OUTPUT_BYTES) -> tuple[bytes, bool]:
    """Cut a captured output file to `limit` bytes, marking the cut; return what it then holds (at most the limit
    and the mark: read once, the run's text and its seal are of the same bytes) and whether it was cut."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return b"", False
    if size > limit:
        with open(path, "r+b") as handle:
            handle.truncate(limit)
            handle.seek(limit)
            handle.write(TRUNCATION_MARK.format(limit=limit, size=size).encode())
    return _head(path, limit), size > limit


def read_bounded(path: Path, limit: int = MAX_OUTPUT_BYTES) -> str:
    """Read at most `limit` bytes (plus the mark) as text; bytes that are not UTF-8 become U+FFFD."""
    if not path.exists():
        return ""
    return _head(path, limit).decode("utf-8", errors="replace")


def _head(path: Path, limit: int) -> bytes:
    """A bounded output's bytes: at most `limit` and the truncation mark after them."""
    with open(path, "rb") as handle:
        return handle.read(limit + 200)


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
