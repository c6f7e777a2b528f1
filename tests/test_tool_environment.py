"""The trust boundary between the judging process and the tools it runs (issue 27): a tool gets a clean
environment (no LD_PRELOAD), cannot read the judging process's memory, runs only as the file that ran before
(or the pinned one), and cannot steer what the run reads by planting files; `verify` and `sign` never take
ssh-keygen from PATH."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import DATA, nvml_recording

from pytest_gpuaccept import bundle
from pytest_gpuaccept.bundle_files import open_bundle
from pytest_gpuaccept.evidence import Evidence, sha256_bytes
from pytest_gpuaccept.probes._run import Command, ToolRunner
from pytest_gpuaccept.probes.process import SYSTEM_PATH

TOPO = DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"
NVLINK = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink:\n  every_pair: true\n"
ROOT = os.geteuid() == 0
ROOT_WARNING = "pytest runs as root and the contract names no tools.user: the tools ran as root"

# A tool of the vendor's, in sh (any user can run it): it tries to read the memory of the process that started it
# (its first readable mapping, as /proc/<pid>/maps lists it), says how that went on stderr, then does its job.
READER = """\
#!/bin/sh
pid=$PPID
{
if maps=$(cat /proc/$pid/maps 2>&1); then echo "maps: read"; else echo "maps: denied: $maps"; fi
addr=$(printf '%s\\n' "$maps" | awk '$2 ~ /^r/ {split($1, a, "-"); print a[1]; exit}')
if err=$(dd if=/proc/$pid/mem of=/dev/null bs=32 count=1 skip=$(( 0x${addr:-0} / 32 )) 2>&1); then echo "mem: read"
else echo "mem: denied: $err"; fi
} >&2
"""


@pytest.fixture
def open_folder():
    """A folder every user can read and search (pytest's own temporary folders are its user's alone): where a tool
    run as another user is kept."""
    folder = Path(tempfile.mkdtemp(prefix="gpuaccept-tools-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _reader_tool(folder: Path, then: str = "") -> Path:
    tool = folder / "nvidia-smi"
    tool.write_text(READER + then)
    tool.chmod(0o755)
    return tool


# ------------------------------------------------------------------ the environment a tool gets

def test_ld_preload_and_the_rest_of_the_run_s_environment_never_reach_a_tool(accept, fake_tools, monkeypatch):
    """LD_PRELOAD with a genuine binary turned 290 GB/s into 478: the pytest process's environment stays with it."""
    for name, value in {"LD_PRELOAD": "libc.so.6", "LD_LIBRARY_PATH": "/opt/vendor/lib", "CUDA_VISIBLE_DEVICES": "0",
                        "NCCL_DEBUG": "INFO", "TERM": "xterm-256color", "PYTHONDONTWRITEBYTECODE": "1",
                        "VENDOR_SECRET": "x", "SLURM_CONF": "/etc/slurm/slurm.conf"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    fake_tools.add("nvidia-smi", TOPO, then="sys.stderr.write(json.dumps(dict(os.environ)))")
    run = accept(NVLINK, nvml_recording("h100_sxm5_8gpu.json"), subprocess=True)
    seen = json.loads((run.path / "gpuaccept-evidence" / "nvidia-smi_topo_-m.stderr.txt").read_text())
    me = pwd.getpwuid(os.getuid()).pw_name
    assert seen == {"PATH": ":".join([str(fake_tools.bin_dir), *SYSTEM_PATH]), "HOME": os.environ["HOME"],
                    "USER": me, "LOGNAME": me, "LANG": "C", "LC_ALL": "C",
                    "SLURM_CONF": "/etc/slurm/slurm.conf"}  # a cluster launcher's own setting, passed on by name
    assert {c["outcome"] for c in run.checks("nvlink")} == {"passed"}


def test_a_command_that_asks_for_a_tmpdir_of_its_own_gets_a_new_one_of_its_user_removed_after(open_folder):
    """Command.own_tmpdir (each mpirun of the mpirun engine): the tool's TMPDIR is a new folder, its user's alone
    (tools.user, nobody, where the test runs as root), gone once the tool has exited; two at once get two; a
    command that does not ask gets none."""
    tool = open_folder / "probe"
    tool.write_text('#!/bin/sh\necho "${TMPDIR-unset}"\n'
                    'if [ -n "$TMPDIR" ]; then stat -c "%U %a" "$TMPDIR" && touch "$TMPDIR/mine" && echo written; fi\n')
    tool.chmod(0o755)
    user = pwd.getpwnam("nobody") if ROOT else pwd.getpwuid(os.getuid())
    runner = ToolRunner(open_folder / "evidence", tool_paths={"probe": str(tool)}, shared=False,
                        user=user if ROOT else None)
    runs = runner.run_together([Command("probe", (), "a", own_tmpdir=True), Command("probe", (), "b", own_tmpdir=True),
                                Command("probe", (), "c")])
    assert [r.failure for r in runs] == [None, None, None]
    (a, *a_rest), (b, *b_rest), c = (r.stdout.splitlines() for r in runs)
    assert a != b and a_rest == b_rest == [f"{user.pw_name} 700", "written"]
    assert all(Path(f).name.startswith("gpuaccept-tmp-") and not Path(f).exists() for f in (a, b))
    assert c == ["unset"]


# ------------------------------------------------------------------ the judging process's memory

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/mem and PR_SET_DUMPABLE are Linux's")
@pytest.mark.parametrize("closed", [False, True])
def test_a_same_user_tool_cannot_read_the_memory_of_a_process_made_undumpable(tmp_path, closed):
    """hardening.undumpable() in a process, then a tool of the same user reads its maps and memory: denied; without
    it (the control), read. Root reads any process's memory with CAP_SYS_PTRACE, so where the test runs as root
    both run without that capability (setpriv), as two processes of an ordinary user would."""
    reader = _reader_tool(tmp_path)
    child = ("import subprocess, sys\nfrom pytest_gpuaccept.hardening import undumpable\n"
             "if sys.argv[1] == 'closed':\n    assert undumpable() is None\n"
             "sys.stdout.write(subprocess.run([sys.argv[2]], capture_output=True, text=True).stderr)\n")
    without_ptrace = ["setpriv", "--bounding-set", "-sys_ptrace", "--"] if ROOT else []
    if ROOT and shutil.which("setpriv") is None:
        pytest.fail("util-linux's setpriv is needed to run this test as root", pytrace=False)
    done = subprocess.run([*without_ptrace, sys.executable, "-c", child, "closed" if closed else "open", str(reader)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if closed:
        # The memory itself cannot even be opened (where the key and the readings are; the map of where things lie
        # stays readable to a capability-less root).
        assert "mem: denied: dd: failed to open" in done.stdout and "Permission denied" in done.stdout
    else:
        assert done.stdout == "maps: read\nmem: read\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/mem is Linux's")
def test_a_tool_the_run_starts_cannot_read_the_pytest_process_s_memory(accept, open_folder, monkeypatch):
    """The tool tries /proc/$PPID/mem, its parent being the judging pytest: denied, and the run goes on. Where the
    test runs as root the tools run as tools.user (nobody), root itself being able to read any memory."""
    (open_folder / "topo.txt").write_bytes(TOPO.read_bytes())
    _reader_tool(open_folder, f'cat "{open_folder}/topo.txt"\n')
    monkeypatch.setenv("PATH", f"{open_folder}:{':'.join(SYSTEM_PATH)}")
    user = "tools:\n  user: nobody\n" if ROOT else ""
    run = accept(NVLINK + user, nvml_recording("h100_sxm5_8gpu.json"), subprocess=True)
    said = (run.path / "gpuaccept-evidence" / "nvidia-smi_topo_-m.stderr.txt").read_text()
    assert "mem: denied: dd: failed to open" in said and "Permission denied" in said, said
    assert run.json["verdict"] == "accepted"
    assert not any(line.startswith(ROOT_WARNING) for line in run.json.get("contract_warnings") or [])


@pytest.mark.skipif(not ROOT, reason="a run as root")
def test_a_run_as_root_without_tools_user_says_the_tools_ran_as_root(accept, fake_tools):
    fake_tools.add("nvidia-smi", TOPO)
    run = accept(NVLINK, nvml_recording("h100_sxm5_8gpu.json"), subprocess=True)
    assert run.json["verdict"] == "accepted"  # said, not failed
    assert any(line.startswith(ROOT_WARNING) for line in run.json["contract_warnings"])
    run.result.stdout.fnmatch_lines([f"gpuaccept warning: {ROOT_WARNING}*"])


@pytest.mark.skipif(not ROOT, reason="only root may start tools as another user")
def test_a_tools_user_this_host_does_not_have_is_a_usage_error(accept, fake_tools):
    fake_tools.add("nvidia-smi", TOPO)
    run = accept(NVLINK + "tools:\n  user: no-such-user-here\n", nvml_recording("h100_sxm5_8gpu.json"), subprocess=True)
    assert run.result.ret == 4
    run.result.stderr.fnmatch_lines(["*tools.user: this host has no user 'no-such-user-here' to run the tools as*"])
    assert fake_tools.calls() == []


# ------------------------------------------------------------------ the file that runs

def _tool(folder: Path, text: str) -> Path:
    tool = folder / "all_reduce_perf"
    tool.write_text(f"#!/bin/sh\necho {text}\n")
    tool.chmod(0o755)
    return tool


def test_a_pinned_binary_swapped_between_two_runs_in_one_session_is_caught(tmp_path):
    """The pin is checked against the file's SHA-256 taken right before each run, not the one of its first run."""
    tool = _tool(tmp_path, "genuine")
    genuine = hashlib.sha256(tool.read_bytes()).hexdigest()
    runner = ToolRunner(tmp_path / "evidence", tool_paths={"all_reduce_perf": str(tool)}, pins={"all_reduce_perf": genuine},
                        shared=False)
    first = runner.run("all_reduce_perf", ["-b", "8"])
    assert first.failure is None and first.stdout == "genuine\n" and first.provenance["sha256"] == genuine
    _tool(tmp_path, "swapped")
    swapped = hashlib.sha256(tool.read_bytes()).hexdigest()
    second = runner.run("all_reduce_perf", ["-b", "16"])
    assert second.stdout == "" and second.provenance["sha256"] == swapped
    assert second.failure == (f"all_reduce_perf at {tool} changed during this session: SHA-256 {genuine} at its first "
                              f"run, {swapped} now: not the file that ran before, not run")


def test_a_binary_swapped_between_two_runs_is_a_failure_of_the_later_run_even_without_a_pin(tmp_path):
    tool = _tool(tmp_path, "genuine")
    runner = ToolRunner(tmp_path / "evidence", tool_paths={"all_reduce_perf": str(tool)}, shared=False)
    assert runner.run("all_reduce_perf", ["-b", "8"]).failure is None
    _tool(tmp_path, "swapped")
    second = runner.run("all_reduce_perf", ["-b", "16"])
    assert second.failure is not None and second.failure.startswith(f"all_reduce_perf at {tool} changed during this session")
    _tool(tmp_path, "genuine")  # put back as it was: the same file as at its first run, so it runs
    assert runner.run("all_reduce_perf", ["-b", "32"]).stdout == "genuine\n"


def test_the_tool_s_path_is_resolved_once_per_session(tmp_path, monkeypatch):
    """A tool put earlier on PATH after the first run is not the one the session runs."""
    first, later = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    later.mkdir()
    _tool(first, "first")
    monkeypatch.setenv("PATH", f"{first}:{':'.join(SYSTEM_PATH)}")
    runner = ToolRunner(tmp_path / "evidence", shared=False)
    assert runner.run("all_reduce_perf", ["-b", "8"]).stdout == "first\n"
    _tool(later, "planted")
    monkeypatch.setenv("PATH", f"{later}:{first}:{':'.join(SYSTEM_PATH)}")
    assert runner.run("all_reduce_perf", ["-b", "16"]).stdout == "first\n"


# ------------------------------------------------------------------ what the run reads

def test_a_sealed_looking_file_planted_before_or_after_a_reading_changes_nothing(tmp_path):
    """Even with the run's own key (read from its memory where that was possible), a planted reading or run record is
    never read in a single-process run: the reading is taken, the run is run, and what is in memory is kept."""
    key = bytes(32)
    runner = ToolRunner(tmp_path / "evidence", key=key, shared=False)
    vendor = Evidence(tmp_path / "evidence", key)  # the same folder and key: a forger who has both
    vendor.write_json("nvml-host.json", {"gpus": ["H100"] * 8})
    taken = runner.reading("nvml-host.json", lambda: {"gpus": ["A100"] * 8})
    assert taken == {"gpus": ["A100"] * 8}
    vendor.write_json("nvml-host.json", {"gpus": ["H100"] * 8})  # after: overwritten with a seal of its own
    assert runner.reading("nvml-host.json", lambda: {"gpus": []}) == {"gpus": ["A100"] * 8}
    # A run record with its output, sealed, for a tool that has not run yet: the tool runs all the same.
    tool = _tool(tmp_path, "measured 290")
    vendor.write("fast.txt", b"measured 478\n")
    vendor.write("fast.stderr.txt", b"")
    vendor.write_json("fast.json", {"argv": [str(tool)], "returncode": 0, "duration_s": 1.0, "timed_out": False,
                                    "timeout_s": 60, "error": None, "truncated": False, "stdout": "fast.txt",
                                    "stderr": "fast.stderr.txt", "replayed": False, "stopped_after_s": None})
    runner.tool_paths["all_reduce_perf"] = str(tool)
    assert runner.run("all_reduce_perf", [], key="fast").stdout == "measured 290\n"


def test_under_xdist_another_process_s_sealed_reading_is_shared_and_an_unsealed_one_is_not(tmp_path):
    """Where workers share the session (shared), a reading another worker sealed is read back; a planted one is not."""
    key = bytes(32)
    worker = ToolRunner(tmp_path / "evidence", key=key)
    other = ToolRunner(tmp_path / "evidence", key=key)
    worker.reading("nvml-host.json", lambda: {"gpus": ["A100"] * 8})
    assert other.reading("nvml-host.json", lambda: {"gpus": []}) == {"gpus": ["A100"] * 8}
    (tmp_path / "evidence" / "sysfs-pci-gpus.json").write_text('{"devices": {"0": {"device": "0x2330"}}}')
    assert other.reading("sysfs-pci-gpus.json", lambda: {"devices": {}}) == {"devices": {}}


def test_what_a_tool_prints_after_it_ended_reaches_neither_the_run_nor_the_evidence(tmp_path):
    """A process the tool started in a session of its own (out of reach of the group kill) holds the pipe open and
    prints later: the run ends all the same, with what the tool printed."""
    tool = tmp_path / "escape"
    tool.write_text("#!/bin/sh\necho measured 450\nsetsid sh -c 'sleep 3; echo measured 9999' &\n")
    tool.chmod(0o755)
    runner = ToolRunner(tmp_path / "evidence", tool_paths={"escape": str(tool)}, shared=False)
    run = runner.run("escape", [])
    assert run.stdout == "measured 450\n"  # had the run waited for the pipe to close, it would hold 9999 too
    time.sleep(3.2)  # the escaped process prints now: into a pipe nobody reads
    assert (tmp_path / "evidence" / "escape.txt").read_bytes() == b"measured 450\n"
    assert runner.evidence.sealed_files()["escape.txt"] == frozenset({sha256_bytes(b"measured 450\n")})
    assert runner.evidence.foreign() == []


# ------------------------------------------------------------------ ssh-keygen for sign and verify

APPROVES_ALL = """#!/bin/sh
case "$*" in
  *find-principals*) echo "buyer@example.com" ;;
  *verify*) echo 'Good "gpuaccept-bundle" signature for buyer@example.com with ED25519 key SHA256:fake' ;;
  *) echo "-----BEGIN SSH SIGNATURE-----" ;;
esac
exit 0
"""


def _bundle(tmp_path: Path, contract: str = NVLINK) -> Path:
    """A bundle folder with a manifest, a contract copy and a garbage signature."""
    evidence = tmp_path / "bundle" / bundle.EVIDENCE_DIR
    (evidence / bundle.SIGNATURES).mkdir(parents=True)
    (evidence / bundle.CONTRACT_COPY).write_text(contract)
    bundle.write_manifest(evidence, [], {})
    (evidence / bundle.SIGNATURES / "1.sig").write_text("-----BEGIN SSH SIGNATURE-----\ngarbage\n-----END SSH SIGNATURE-----\n")
    return tmp_path / "bundle"


@pytest.mark.skipif(bundle.system_ssh_keygen().source != "the system's", reason="OpenSSH's ssh-keygen is needed")
def test_a_fake_ssh_keygen_first_on_path_is_not_the_one_verify_uses(tmp_path, fake_tools):
    (fake_tools.bin_dir / "ssh-keygen").write_text(APPROVES_ALL)
    (fake_tools.bin_dir / "ssh-keygen").chmod(0o755)
    folder = _bundle(tmp_path)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("buyer@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    keygen = bundle.system_ssh_keygen()
    assert keygen == bundle.SshKeygen(next(p for p in bundle.SYSTEM_SSH_KEYGEN if os.access(p, os.X_OK)), "the system's")
    checked = bundle.check_signatures(open_bundle(folder, documents=False), allowed, keygen)
    assert [s.problem for s in checked] == [f"signature 1.sig: signed by a key not in {allowed}"]
