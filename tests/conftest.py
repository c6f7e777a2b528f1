"""Test helpers: fake tools on PATH that replay recorded real outputs and log their argv."""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The plugin imports its contract model (and PyYAML) only when a run has --contract. pytester's
# in-process runs restore sys.modules after each run, so a second run would import PyYAML afresh
# while parts of the first copy live on; importing them here, before any run, keeps one copy.
import pytest_gpuaccept.contract  # noqa: F401
import pytest_gpuaccept.report  # noqa: F401
from pytest_gpuaccept.clauses.plausible import nvbandwidth_work, p2p_latency_work, torch_work
from pytest_gpuaccept.probes.nccl_tests import parse_all_reduce
from pytest_gpuaccept.probes.nvbandwidth import parse_nvbandwidth
from pytest_gpuaccept.probes.p2p_latency import parse_p2p_latency
from pytest_gpuaccept.probes.port_errors import NET_ERRORS, NET_RECORDED
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id

DATA = Path(__file__).parent / "data"
REPO_ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def claimed_seconds(tool: str, text: str) -> float:
    """The least time a copy tool's output says its copies took (0 where it cannot be read): how long a fake
    of it waits, so that clauses/plausible.py's too_fast sees an honest run. The product's own work model, with the
    defaults of the version the output prints (nvbandwidth v0.7 on: 512 MiB x 16 copies x 2 samples per figure;
    p2pBandwidthLatencyTest: 800 MB a cell), as the fake's command line gives no -b, -i or --numElems."""
    try:
        if tool == "nvbandwidth":
            return nvbandwidth_work(parse_nvbandwidth(text), ()).seconds
        if tool == "p2pBandwidthLatencyTest":
            return p2p_latency_work(parse_p2p_latency(text)).seconds
    except ValueError:
        return 0.0
    return torch_work(text).seconds if tool == "python" else 0.0


# Tools asked to run for a time, and the option that says how long: their fakes take it unless told otherwise.
ASKED_FOR = {"ib_write_bw": "-D", "iperf3": "-t"}


@dataclass
class FakeTools:
    """Executables in a folder at the head of PATH. Each prints a recorded output chosen by its argv."""

    bin_dir: Path
    log: Path
    tools: dict[str, list[dict[str, object]]] = field(default_factory=dict)

    def add(self, name: str, stdout: Path | str | bytes = b"", *, when: str = "", rc: int = 0, stderr: str = "",
            sleep: float | str | None = None, hang: float = 0.0, then: str = "") -> None:
        """Add a response: for argv containing `when` (first match wins; "" matches all).

        `sleep` waits before printing (by default, a copy tool waits as long as the copies it prints took:
        clauses/plausible.py refuses a run shorter than its own timed work; ib_write_bw and iperf3 wait what their argv asks, -D or -t; sleep=0 is a tool that does not), `hang` after printing (a tool stuck with its output half written);
        `then` is Python run after printing (what the tool does to the host: counters it moves, files it writes).
        """
        if isinstance(stdout, Path):
            data = stdout.read_bytes()
        elif isinstance(stdout, str):
            data = stdout.encode()
        else:
            data = stdout
        if sleep is None and name in ASKED_FOR:
            sleep = ASKED_FOR[name]  # as long as its argv asks (-D 5, -t 10): clauses/network.py refuses a shorter run
        if sleep is None:
            timed = claimed_seconds(name, data.decode(errors="replace"))
            sleep = timed + 0.05 if timed else 0.0
        blob = self.bin_dir / f".{name}.{len(self.tools.get(name, []))}.out"
        blob.write_bytes(data)
        self.tools.setdefault(name, []).append(
            {"when": when, "stdout": str(blob), "rc": rc, "stderr": stderr, "sleep": sleep, "hang": hang, "then": then})
        script = self.bin_dir / name
        script.write_text(textwrap.dedent(f"""\
            #!{sys.executable}
            import json, os, signal, sys, time
            rules = {json.dumps(self.tools[name])!r}
            with open({str(self.log)!r}, "a") as log:
                log.write(json.dumps([{name!r}, *sys.argv[1:]]) + "\\n")
            started = time.time()

            def stopped(*_):
                with open({str(self.log)!r} + ".times", "a") as times:
                    times.write(json.dumps([{name!r}, started, time.time()]) + "\\n")
                sys.exit(143)

            signal.signal(signal.SIGTERM, stopped)
            argv = " ".join(sys.argv[1:])
            for rule in json.loads(rules):
                if rule["when"] in argv:
                    wait = rule["sleep"]
                    if isinstance(wait, str):  # the duration the argv asks for (-D, -t), as an honest run takes
                        wait = float(sys.argv[sys.argv.index(wait) + 1]) if wait in sys.argv[1:-1] else 0.0
                    time.sleep(wait)
                    sys.stdout.buffer.write(open(rule["stdout"], "rb").read().replace(b"@PID@", str(os.getpid()).encode()))
                    sys.stdout.flush()
                    sys.stderr.write(rule["stderr"])
                    sys.stderr.flush()
                    exec(rule["then"])
                    time.sleep(rule["hang"])
                    with open({str(self.log)!r} + ".times", "a") as times:
                        times.write(json.dumps([{name!r}, started, time.time()]) + "\\n")
                    sys.exit(rule["rc"])
            sys.stderr.write("fake {name}: no recorded output for: " + argv + "\\n")
            sys.exit(64)
            """))
        script.chmod(0o755)

    def add_nccl(self, log: bytes, iters: int = 20, **kwargs) -> None:
        """all_reduce_perf printing `log` no sooner than the work its table reports could take (iters per size)."""
        timed = parse_all_reduce(log.decode()).timed_seconds(iters)
        self.add("all_reduce_perf", log, sleep=timed + 0.05, **kwargs)

    def intervals(self) -> list[tuple[str, float, float]]:
        """(tool, start, end) of every run that finished."""
        times = self.log.with_name(self.log.name + ".times")
        if not times.exists():
            return []
        return [tuple(json.loads(line)) for line in times.read_text().splitlines()]

    def calls(self, name: str | None = None) -> list[list[str]]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [row for row in rows if name is None or row[0] == name]


def reseal(folder: Path) -> None:
    """What a vendor who makes the bundle can do after editing it: state the results' verdict in the report (its
    attribute and the word a reader sees), state the new evidence digest, and write the (unkeyed) manifest again, so
    that every digest matches."""
    from pytest_gpuaccept.bundle import evidence_digest, write_manifest  # noqa: PLC0415

    evidence = folder / "gpuaccept-evidence"
    report = folder / "gpuaccept-report.html"
    verdict = json.loads((evidence / "results.json").read_text())["verdict"]
    page = re.sub(r'data-evidence-digest="[0-9a-f]{64}"', f'data-evidence-digest="{evidence_digest(evidence)}"',
                  report.read_text())
    page = re.sub(r'data-verdict="(accepted|rejected)"', f'data-verdict="{verdict}"', page)
    report.write_text(re.sub(r">(ACCEPTED|REJECTED)</h2>", f">{verdict.upper()}</h2>", page))
    manifest = json.loads((evidence / "manifest.json").read_text())
    documents = [folder / entry["path"] for entry in manifest["bundle"]]
    extra = {k: v for k, v in manifest.items() if k not in ("files", "bundle", "evidence_digest", "checksum")}
    write_manifest(evidence, documents, extra)


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTools:
    """Fake tools first on PATH; real system tools (ethtool, iperf3) after them, nothing else."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{SYSTEM_PATH}")
    return FakeTools(bin_dir, tmp_path / "fake-tools.log")


@dataclass
class Accept:
    """One acceptance run through pytester: its pytest result and the results JSON it wrote."""

    result: pytest.RunResult
    path: Path

    @property
    def json(self) -> dict:
        return json.loads((self.path / "gpuaccept-results.json").read_text())

    def checks(self, clause: str | None = None) -> list[dict]:
        return [c for c in self.json["checks"] if clause is None or c["clause"] == clause]

    @property
    def html(self) -> str:
        """The report as a browser shows it: the page, plus the rows and extras pytest-html keeps in its JSON blob."""
        page = (self.path / "gpuaccept-report.html").read_text()
        blob = re.search(r"data-jsonblob=(?:\"([^\"]*)\"|'([^']*)')", page)
        data = json.loads(html.unescape(blob.group(1) or blob.group(2))) if blob else {}
        parts = [page]
        for results in data.get("tests", {}).values():
            for result in results:
                parts += result.get("resultsTableRow", [])
                parts += [extra.get("content", "") for extra in result.get("extras", [])]
                parts.append(result.get("log", ""))
        return "\n".join(parts)


NVSWITCH_BUS_IDS = ("0000:c0:00.0", "0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0")


def pci_tree(root: Path, device: str | None = None, recording: str | Path = "h100_sxm5_8gpu.json") -> str:
    """bus/pci/devices/<bus id>/{vendor,device,class,local_cpulist} for every GPU of an NVML recording, as the
    kernel lists them: the device ID the recording's NVML gives unless `device` says otherwise, and four
    NVSwitches (bridge class, never counted as GPUs) beside them."""
    try:  # an absolute path stays itself; a recording that is not JSON (a hostile one) has no GPUs to list
        gpus = json.loads((DATA / "nvml" / recording).read_text()).get("gpus", [])
    except ValueError:
        gpus = []
    devices = root / "bus" / "pci" / "devices"
    for gpu in gpus:
        folder = devices / sysfs_bus_id(gpu["pci_bus_id"])
        folder.mkdir(parents=True, exist_ok=True)
        local = "0-55" if gpu["index"] < len(gpus) // 2 else "56-111"
        for name, value in (("vendor", "0x10de"), ("device", device or gpu["pci_device_id"]), ("class", "0x030200"),
                            ("local_cpulist", local)):
            (folder / name).write_text(value + "\n")
        clean_aer(folder)
    for bus in NVSWITCH_BUS_IDS:
        (devices / bus).mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x22a3"), ("class", "0x068000")):
            (devices / bus / name).write_text(value + "\n")
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    return f"--gpuaccept-sysfs={root}"


# The kernel's AER statistics of a function that saw no error (its format since 5.8: one `NAME COUNT` a line)
CLEAN_AER = {"aer_dev_correctable": "RxErr BadTLP BadDLLP Rollover Timeout NonFatalErr CorrIntErr HeaderOF TOTAL_ERR_COR",
             "aer_dev_fatal": "Undefined DLP SDES TLP FCP CmpltTO CmpltAbrt UnxCmplt RxOF MalfTLP ECRC UnsupReq ACSViol "
                              "UncorrIntErr BlockedTLP AtomicOpBlocked TLPBlockedErr PoisonTLPBlocked TOTAL_ERR_FATAL"}
CLEAN_AER["aer_dev_nonfatal"] = CLEAN_AER["aer_dev_fatal"].replace("TOTAL_ERR_FATAL", "TOTAL_ERR_NONFATAL")


def clean_aer(function: Path) -> None:
    """A PCI function's aer_dev_* files, every counter 0, as the kernel keeps them for an AER-capable device."""
    for file, names in CLEAN_AER.items():
        (function / file).write_text("".join(f"{name} 0\n" for name in names.split()))


def pci_port(root: Path, kind: str, name: str, address: str, driver: str | None = "mlx5_core", vf: bool = False,
             phys_port_id: str | None = None) -> Path:
    """class/<kind>/<name> as the kernel lays out a port of a PCI device: a link into devices/pci0000:00/<address>/
    <kind>/<name>, whose `device` leads to the PCI function, bound to `driver`; an SR-IOV VF has `physfn`. The function
    is listed under bus/pci/devices (where no GPU of that address is), with its AER statistics."""
    function = root / "devices" / "pci0000:00" / address
    entry = function / kind / name
    entry.mkdir(parents=True, exist_ok=True)
    listed = root / "bus" / "pci" / "devices" / address
    if not listed.exists() and not listed.is_symlink():
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.symlink_to(function)
        clean_aer(function)
    (entry / "device").symlink_to(Path("../..")) if not (entry / "device").exists() else None
    if driver and not (function / "driver").exists():
        (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (function / "driver").symlink_to(root / "bus" / "pci" / "drivers" / driver)
    if vf and not (function / "physfn").exists():
        (function / "physfn").symlink_to(Path("../0000:ff:00.0"))
    if phys_port_id:
        (entry / "phys_port_id").write_text(phys_port_id + "\n")
    link = root / "class" / kind / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(entry)
    return entry


def virtual_net(root: Path, name: str) -> Path:
    """class/net/<name> of a software interface (veth, tap, bridge): under devices/virtual/net, no `device`."""
    entry = root / "devices" / "virtual" / "net" / name
    entry.mkdir(parents=True)
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    (root / "class" / "net" / name).symlink_to(entry)
    return entry


def routed_nic(fake_tools: FakeTools, root: Path, dev: str = "ens6f0", server: str = "10.0.0.2",
               iperf3_output: Path | None = None, counted: int = 10**11) -> str:
    """The route to `server` leaves through `dev`, a PCI port whose byte counters the fake iperf3 moves by
    `counted` bytes each run (as the kernel counts what it sends): a fake `ip` and the sysfs files."""
    entry = pci_port(root, "net", dev, "0000:9a:00.0")
    (entry / "statistics").mkdir()
    for counter in ("rx_bytes", "tx_bytes"):
        (entry / "statistics" / counter).write_text("1000\n")
    for counter in NET_ERRORS + NET_RECORDED:  # the error statistics of a port that saw none
        (entry / "statistics" / counter).write_text("0\n")
    fake_tools.add("ip", json.dumps([{"dst": server, "gateway": "10.0.0.1", "dev": dev, "prefsrc": "10.0.0.9",
                                      "flags": [], "uid": 0, "cache": []}]), when="route get")
    tx = entry / "statistics" / "tx_bytes"
    if iperf3_output is not None:
        fake_tools.add("iperf3", iperf3_output,
                       then=f"import fcntl\nwith open({str(tx)!r}, 'r+') as f:\n    fcntl.flock(f, fcntl.LOCK_EX)\n"
                            f"    v = int(f.read())\n    f.seek(0)\n    f.truncate()\n    f.write(str(v + {counted}))")
    return f"--gpuaccept-sysfs={root}"


def run_pytest(pytester: pytest.Pytester, argv: list[str], python: tuple[str, ...] = (sys.executable,)) -> pytest.RunResult:
    """`python -m pytest ARGV` in the working folder (pytester's), in a process of its own with this process's
    environment as it is (pytester's own runpytest_subprocess would add PYTHONPATH, which a judging run refuses)."""
    basetemp = pytester.path / f"basetemp-{next(_RUNS)}"
    started = time.monotonic()
    done = subprocess.run([*python, "-m", "pytest", f"--basetemp={basetemp}", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=900)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), time.monotonic() - started)


_RUNS = itertools.count()


@pytest.fixture
def accept(pytester: pytest.Pytester):
    """Run `pytest --contract=<text>` in pytester's folder, in a process of its own; returns an Accept.

    A run on an NVML recording without a sysfs of its own gets the honest one: the PCI functions the
    recording's GPUs have (pci_tree), so that its GPUs' identity is corroborated as on a real host.
    `python` is the interpreter's command line (another environment's Python, with -I). `subprocess=False`
    runs it inside this process instead, for a test that replaces a function of the package to make it
    crash: this test session's modules are then in the judging process, and the run is never accepted.
    """
    def run(contract: str, *args: str, subprocess: bool = True, python: tuple[str, ...] = (sys.executable,)) -> Accept:
        path = pytester.path / "vendor.yaml"
        path.write_text(textwrap.dedent(contract))
        recordings = [a.split("=", 1)[1] for a in args if a.startswith("--gpuaccept-nvml=")]
        if recordings and not any(a.startswith("--gpuaccept-sysfs") for a in args):
            args = (*args, pci_tree(pytester.path / "sys", recording=Path(recordings[0])))
        argv = ["--contract", str(path), "-p", "no:cacheprovider", *args]
        result = run_pytest(pytester, argv, python) if subprocess else pytester.runpytest_inprocess(*argv)
        return Accept(result, pytester.path)

    return run


@contextmanager
def ctrl_c_as_at_a_terminal() -> Iterator[None]:
    """Processes started inside find SIGINT as a terminal's Ctrl-C does. A shell without job control starts its
    background jobs (`./test.sh &`, `nohup`) with SIGINT ignored, an ignored signal stays ignored across exec, and
    Python then never raises KeyboardInterrupt: a test of what Ctrl-C does would be testing the shell that started
    the suite."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def nvml_recording(name: str) -> str:
    return f"--gpuaccept-nvml={DATA / 'nvml' / name}"


def nccl_log(source: Path | bytes, recording: str = "h100_sxm5_8gpu.json", ranks: int | None = None,
             table_ranks: int | None = None) -> bytes:
    """A real nccl-tests log as this fake host's all_reduce_perf would print it: rank r on the recording's GPU r
    (its bus ID), with the PID of the process printing it (`@PID@`, filled in by the fake tool). A log printed
    without `# Rank` lines (a table-only copy) gets `ranks` of them; a log with its own has them rewritten,
    and ranks beyond `ranks` dropped. `table_ranks`: how many ranks a table-only log ran on."""
    text = (source.read_bytes() if isinstance(source, Path) else source).decode()
    gpus = json.loads((DATA / "nvml" / recording).read_text())["gpus"]
    bus = [int(g["pci_bus_id"].split(":")[1], 16) for g in gpus]
    rank_line = re.compile(r"^(\s*#\s*Rank\s+(\d+).*?Pid\s+)\d+(.*?device\s+\d+\s+)\[[0-9a-fA-Fx:.]+\]")
    lines, had = [], 0
    for line in text.splitlines(keepends=True):
        if match := rank_line.match(line):
            had += 1
            rank = int(match.group(2))
            if ranks is not None and rank >= ranks:
                continue
            where = f"[0x{bus[rank]:02x}]"
            line = rank_line.sub(lambda m, where=where: f"{m.group(1)}@PID@{m.group(3)}{where}", line)
        lines.append(line)
    ran = had or table_ranks
    if ran and ranks is not None and ranks < ran:
        # Fewer ranks than the log ran: busbw = algbw x 2(n-1)/n (nccl-tests' all_reduce factor) recomputed for
        # `ranks` from each row's own algbw, and the header's nGpus with it, so the table adds up as a real
        # `ranks`-GPU run's would. The times and algbw stay as recorded.
        factor = 2 * (ranks - 1) / ranks
        for n, line in enumerate(lines):
            prefix = re.match(r"^(\[\d+,\d+\]<std\w+>:)?", line).group(0)  # Open MPI's --tag-output
            tokens = line[len(prefix):].split()
            if len(tokens) == 13 and tokens[0].isdigit():
                tokens[7], tokens[11] = f"{float(tokens[6]) * factor:.2f}", f"{float(tokens[10]) * factor:.2f}"
                lines[n] = prefix + "  ".join(tokens) + "\n"
            elif "nGpus" in line:
                lines[n] = re.sub(r"nGpus\s+\d+", f"nGpus {ranks}", line)
    if not had:
        name = gpus[0]["name"]
        lines[:0] = [f"#  Rank {r:2d} Group  0 Pid @PID@ on trial device {r:2d} [0x{bus[r]:02x}] {name}\n"
                     for r in range(ranks or len(gpus))]
    return "".join(lines).encode()


def staged_recording(tmp_path: Path, source: str | Path, change) -> str:
    """An NVML recording (a name in data/nvml, or a path) with something staged in it: `change` edits the JSON."""
    path = DATA / "nvml" / source
    reading = json.loads(path.read_text())
    change(reading)
    out = tmp_path / f"nvml-{path.stem}-staged.json"
    out.write_text(json.dumps(reading))
    return f"--gpuaccept-nvml={out}"


@dataclass(frozen=True)
class FreshInstall:
    """A fresh virtual environment with the project's folder pip-installed into it, as a new user makes one."""

    venv: Path
    env: dict[str, str]  # a new user's shell: the venv activated, the system's tools, none of this run's settings

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


@pytest.fixture(scope="session")
def fresh_install(tmp_path_factory) -> FreshInstall:
    """The README's install line (`python -m pip install /path/to/pytest-gpuaccept`) into a fresh venv, from a copy of
    the project's folder as it is now: one install a worker for the tests that start from it (test_readme's first
    command, the demo), which share an xdist group so that it is made once. pip's cache is the user's own."""
    root = tmp_path_factory.mktemp("fresh")
    source = root / "pytest-gpuaccept"
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(".venv*", "__pycache__", ".git", "*.egg-info",
                                                                      "gpuaccept-*", ".pytest_cache", ".mypy_cache",
                                                                      ".ruff_cache"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV", "GPUACCEPT"))}
    env.update(PATH=f"{venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", VIRTUAL_ENV=str(venv))
    installed = subprocess.run(["python", "-m", "pip", "install", "-q", str(source)], env=env, cwd=root,
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    return FreshInstall(venv, env)
