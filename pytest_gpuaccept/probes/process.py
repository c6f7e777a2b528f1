"""A tool's process: the environment it starts with, its output read from its pipes into memory (bounded), and its
end, with every process it left in its group. probes/_run.py's ToolRunner starts tools through this; nothing here
knows a session, the evidence or a replay.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

# The most of a tool's output kept, per stream. Beyond it the output is cut and the cut is marked.
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
TRUNCATION_MARK = "\n[gpuaccept: output truncated at {limit} bytes of {size}]\n"
# How long a tool's pipes are still read once its process group was stopped: only a process that left the group
# (setsid) can hold one open that long, and what it prints later is not the tool's output.
LINGER_S = 2.0
# The system's own folders of executables: with the tool's own folder, the whole PATH a tool gets.
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# The cluster launchers' own settings, passed on by name where the run has them (a login node's slurm.conf kept
# elsewhere, how mpirun reaches the nodes, an ssh agent, kubectl's kubeconfig files): nothing else of the run's
# environment reaches a tool.
PASSED_ON = ("SLURM_CONF", "OMPI_MCA_plm_rsh_agent", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
             "SSH_AUTH_SOCK", "KUBECONFIG")
def tool_environment(executable: str, user: pwd.struct_passwd | None = None,
                     tmpdir: str | None = None) -> dict[str, str]:
    """The whole environment a tool starts with, built from an allow-list: PATH of the tool's own folder and the
    system's (SYSTEM_PATH), HOME, USER and LOGNAME of the user it runs as, the C locale (the decimal points and
    English messages the parsers read), the cluster launchers' settings named in PASSED_ON, and TMPDIR where the
    command asked for a folder of its own (Command.own_tmpdir). Nothing else of this process's environment: no
    LD_* (LD_PRELOAD runs anyone's code inside a pinned binary), no PYTHON*, no CUDA_* or NCCL_* (no contract key
    sets one: a clause that needs one puts it on the command line it builds), no TERM (no colour codes in what is
    parsed)."""
    if user is not None:
        home, name = user.pw_dir, user.pw_name
    else:
        try:
            entry = pwd.getpwuid(os.getuid())
            home, name = os.environ.get("HOME") or entry.pw_dir, entry.pw_name
        except KeyError:  # a user id the password database does not list (a container's)
            home, name = os.environ.get("HOME") or "/", str(os.getuid())
    folder = os.path.dirname(executable)
    env = {"PATH": ":".join(dict.fromkeys([*([folder] if folder else []), *SYSTEM_PATH])),
           "HOME": home, "USER": name, "LOGNAME": name, "LANG": "C", "LC_ALL": "C"}
    env.update({key: os.environ[key] for key in PASSED_ON if key in os.environ})
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    return env


def file_sha256(path: str) -> str | None:
    """The SHA-256 of the file a path names now (through any links); None if it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


class Stream:
    """One output pipe of a tool, read into memory by a thread of its own: the first `limit` bytes kept, the rest
    read and counted (a tool blocked on a full pipe would never end)."""

    def __init__(self, pipe: IO[bytes], limit: int = MAX_OUTPUT_BYTES) -> None:
        self._pipe, self._limit = pipe, limit
        self._kept = bytearray()
        self._size = 0
        self._taken: tuple[bytes, bool] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="gpuaccept-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._pipe.fileno(), 1 << 16):
                with self._lock:
                    if self._taken is None:
                        self._kept += chunk[:max(0, self._limit - len(self._kept))]
                        self._size += len(chunk)
        except OSError:
            pass
        finally:
            self._pipe.close()

    def take(self, deadline: float) -> tuple[bytes, bool]:
        """What came through the pipe by its end, or by `deadline` (time.monotonic()) at the latest, the cut marked,
        and whether it was cut; what comes later is not kept."""
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            if self._taken is None:
                data, size = bytes(self._kept), self._size
                cut = size > self._limit
                self._taken = (data + TRUNCATION_MARK.format(limit=self._limit, size=size).encode() if cut else data, cut)
            return self._taken


class Started:
    """A tool that started: its process, its stdout and stderr each read into memory as it prints, and the TMPDIR
    of its own where it was given one."""

    def __init__(self, proc: subprocess.Popen[bytes], tmpdir: str | None = None) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.tmpdir = tmpdir
        self._out, self._err = Stream(proc.stdout), Stream(proc.stderr)

    def output(self) -> tuple[bytes, bytes, bool]:
        """Once the tool has exited: what it printed on each stream and whether either was cut. A process it left
        running in its group (which could go on printing into the pipes) is stopped first; its TMPDIR is removed."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass  # the group is gone with its leader: the usual case
        deadline = time.monotonic() + LINGER_S
        out, cut_out = self._out.take(deadline)
        err, cut_err = self._err.take(deadline)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        return out, err, cut_out or cut_err


NOTHING = (b"", b"", False)  # the output of a tool that never started


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


def wait_or_kill(proc: subprocess.Popen[bytes], deadline: float) -> tuple[int | None, bool]:
    """The tool's exit status and False; or, at the deadline, its whole group killed: its status then, and True."""
    try:
        return wait_until(proc, deadline), False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return proc.returncode, True


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
