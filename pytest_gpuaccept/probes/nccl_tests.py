"""nccl-tests (`all_reduce_perf`): the busbw-over-size table, and every sign that a run went wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from . import ParseError, option_value
from ._run import ToolRun, ToolRunner, slug
from .process import file_sha256
from .sysfs import pci_address

TOOL = "all_reduce_perf"
# Launcher prefixes: Open MPI `--tag-output` "[1,0]<stdout>:", srun `-l` " 0: ".
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\b")
# `#` optional: a log pasted into a web page often loses it, the rest of the line is distinctive enough.
_RANK_LINE = re.compile(r"^#?\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                        r"\[([0-9a-fA-Fx:.]+)\]\s*(.*)$")
_OLD_BUS = re.compile(r"0x([0-9a-fA-F]{1,2})")
_ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
DEFAULT_ITERS = 20  # nccl-tests' -n
_PARAMS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_ERROR_LINE = re.compile(r"NCCL WARN|NCCL failure|NCCL error|Test failure|Out of bounds values\s*:\s*\d+\s+FAILED"
                         r"|Cuda failure|CUDA failure|unhandled .* error", re.IGNORECASE)
_CHECK_COLUMNS = ("#wrong", "error", "res")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_NCCL_VERSION = re.compile(r"^#?\s*NCCL version\s+(\S+)")
_COMPILED_WITH = re.compile(r"^#\s*NCCL Tests compiled with NCCL\s+(\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
# NCCL_DEBUG=INFO: `host:pid:tid [dev] NCCL INFO cudaDriverVersion 12020` (cuDriverGetVersion, per rank)
_CUDA_DRIVER = re.compile(r"NCCL INFO cudaDriverVersion (\d+)\s*$")


@dataclass(frozen=True, slots=True)
class Row:
    size_bytes: int
    oop_busbw_gbyte_s: float
    ip_busbw_gbyte_s: float | None
    oop_time_us: float
    oop_algbw_gbyte_s: float
    oop_wrong: int | None  # None where the column is N/A (validation off) or an old float `error`
    ip_wrong: int | None
    ip_time_us: float = 0.0


@dataclass(frozen=True, slots=True)
class RankLine:
    """`#  Rank  0 Group  0 Pid 291005 on node005 device  0 [0x18] NVIDIA H100 80GB HBM3`: where a rank ran.

    nccl-tests before 2.14.1 prints the GPU's PCI bus alone (`[0x18]`, `[0x00]`); since then its domain, bus and
    device (`[0000:18:00]`, `[0001:00:00]` on Azure, where every GPU sits on bus 00 of a PCI domain of its own).
    """

    rank: int
    pid: int
    host: str
    device: int  # CUDA's ordinal, which need not be NVML's index
    bus: int  # the PCI bus number of the GPU ([0x18], or [0000:18:00] in newer versions)
    name: str
    slot: int | None = None  # the PCI device number where the line gives it ([0000:00:06]): VMs put GPUs on one bus
    domain: int | None = None  # the PCI domain where the line gives it ([0001:00:00]); None: the bus alone

    @property
    def address(self) -> tuple[int, int, int] | None:
        """(domain, bus, device) where the line names them all; None for the old bus-only form."""
        return None if self.domain is None or self.slot is None else (self.domain, self.bus, self.slot)

    @property
    def shown(self) -> str:
        """The address as the kernel writes it (`0001:00:00`), or `bus 0x18` where the line gives the bus alone."""
        return f"bus 0x{self.bus:02x}" if self.address is None else \
            f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}"


@dataclass(frozen=True, slots=True)
class NcclResult:
    """One nccl-tests run as printed; `busbw_at_largest` is what a contract is judged on."""

    rows: tuple[Row, ...]
    ranks: int | None
    n_gpus: int | None
    max_bytes_asked: int | None
    nccl_tests_version: str | None
    nccl_version: str | None
    collective: str | None
    avg_bus_bandwidth: float | None
    check_column: str | None
    error_lines: tuple[str, ...]
    validation_off: bool
    rank_lines: tuple[RankLine, ...] = ()
    iters: int | None = None  # as the header says (`warmup iters: 5 iters: 20`)
    warmup_iters: int | None = None
    cuda_driver_versions: tuple[int, ...] = ()  # NCCL INFO `cudaDriverVersion N` lines, where NCCL_DEBUG=INFO

    def timed_seconds(self, iters: int) -> float:
        """The least wall time the table implies: every size's out-of-place and in-place time x iterations."""
        return sum((r.oop_time_us + r.ip_time_us) * iters for r in self.rows) / 1e6

    @property
    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.size_bytes) if self.rows else None

    @property
    def wrong_nonzero(self) -> bool | None:
        if self.check_column != "#wrong":
            return None
        return bool(self.wrong_rows)

    @property
    def wrong_rows(self) -> list[Row]:
        """The sizes whose checked results were wrong (#wrong above 0, out-of-place or in-place)."""
        return [r for r in self.rows if (r.oop_wrong or 0) > 0 or (r.ip_wrong or 0) > 0]

    def wrong_sizes(self, human: Callable[[float], str], shown: int = 5) -> str:
        """The first wrong sizes with their counts, as a message names them: `1 MiB (96 out-of-place, 32 in-place)`."""
        return ", ".join(f"{human(r.size_bytes)} ({r.oop_wrong or 0} out-of-place, {r.ip_wrong or 0} in-place)"
                         for r in self.wrong_rows[:shown])


def _number(token: str) -> float | None:
    if token == "N/A":
        return None
    try:
        return float(token)
    except ValueError:
        raise ParseError(TOOL, f"expected a number or N/A, got {token!r}") from None


def parse_all_reduce(text: str) -> NcclResult:
    """Read an nccl-tests text log (any collective; all_reduce_perf is what the suite runs).

    Accepts the `#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong` table
    and its older forms (no redop/root, an `error` column of floats, NCCL 1 `bytes N type op ... res`),
    launcher prefixes, NCCL INFO/WARN lines and other noise between rows, and the 2.17+ version and
    start/end lines. A row that does not fit the header's columns is refused, quoting it.
    """
    text = text.replace("\r\n", "\n")
    # A line can only match where the whole text does (the pattern has no anchor): most logs are looked at once.
    log = _Log(may_have_errors=_ERROR_LINE.search(text) is not None)
    for raw in text.split("\n"):
        log.read(raw)
    if log.header is None and not log.errors:
        raise ParseError(TOOL, "no result table (no '# size ... busbw' header) in the output")
    return log.result()


@dataclass
class _Log:
    """What parse_all_reduce has read so far of one log, a line at a time."""

    may_have_errors: bool
    header: list[str] | None = None
    rows: list[Row] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    rank_lines: list[RankLine] = field(default_factory=list)
    iters: tuple[int, int] | None = None
    errors: list[str] = field(default_factory=list)
    n_gpus: int | None = None
    max_bytes: int | None = None
    tests_version: str | None = None
    nccl_version: str | None = None
    collective: str | None = None
    avg: float | None = None
    validation_off: bool = False
    cuda_drivers: set[int] = field(default_factory=set)

    def read(self, raw: str) -> None:
        """One line: an error, a rank's placement, a fact of the run, the table's header, a row, or noise."""
        stripped = _PREFIX.sub("", raw, count=1).strip()
        if not stripped:
            return
        if "cudaDriverVersion" in stripped and (driver := _CUDA_DRIVER.search(stripped)):
            self.cuda_drivers.add(int(driver.group(1)))
            return
        if self.may_have_errors and _ERROR_LINE.search(stripped):
            self.errors.append(stripped)
        elif match := _RANK.match(stripped):
            self.ranks.add(int(match.group(1)))
            if (placed := parse_rank_line(stripped)) is not None:
                self.rank_lines.append(placed)
        elif self._fact(stripped):
            pass
        elif stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if tokens and tokens[0] in ("size", "bytes") and "busbw" in tokens:
                self.header = tokens
        else:
            self._row(stripped.split(), raw)

    def _fact(self, stripped: str) -> bool:
        """A line that says how the run was made (parameters, versions, the collective, the average): kept."""
        if "nThread" in stripped and (match := _PARAMS.search(stripped)):
            self.n_gpus, self.max_bytes = int(match.group(2)), int(match.group(4))
            self.validation_off = "validation: 0" in stripped
            if counted := _ITERS.search(stripped):
                self.iters = (int(counted.group(1)), int(counted.group(2)))
        elif match := _TESTS_VERSION.match(stripped):
            self.tests_version = match.group(1)
        elif match := _NCCL_VERSION.match(stripped) or _COMPILED_WITH.match(stripped):
            self.nccl_version = match.group(1)
        elif match := _STARTING.match(stripped):
            self.collective = re.sub(r"_perf(_mpi)?$", "", match.group(1))
        elif match := _AVERAGE.match(stripped):
            self.avg = float(match.group(1))
        else:
            return False
        return True

    def _row(self, tokens: list[str], raw: str) -> None:
        if self.header is None or not tokens[0].isdigit():
            return  # launcher and library noise before or between rows
        if len(tokens) != len(self.header):
            raise ParseError(TOOL, f"a row of {len(tokens)} columns under a header of {len(self.header)}", raw)
        self.rows.append(_row(self.header, tokens, raw))

    def result(self) -> NcclResult:
        check = next((c for c in _CHECK_COLUMNS if c in (self.header or [])), None)
        iters = self.iters
        return NcclResult(tuple(self.rows), max(self.ranks) + 1 if self.ranks else None, self.n_gpus, self.max_bytes,
                          self.tests_version, self.nccl_version, self.collective, self.avg, check, tuple(self.errors),
                          self.validation_off, tuple(self.rank_lines), iters[1] if iters else None,
                          iters[0] if iters else None, tuple(sorted(self.cuda_drivers)))


def parse_rank_line(line: str) -> RankLine | None:
    """One `# Rank ... Pid ... on HOST device N [ADDRESS] NAME` line (None for any other line). ADDRESS is the
    old `0x18` (the bus alone) or `0000:18:00` (domain:bus:device); any other form is refused, quoting it."""
    placed = _RANK_LINE.match(line.strip())
    if placed is None:
        return None
    where = placed.group(5)
    full = pci_address(where)
    old = _OLD_BUS.fullmatch(where)
    if full is None and old is None:
        raise ParseError(TOOL, f"a rank line's GPU address [{where}] is neither [0xBB] (bus) nor [DDDD:BB:DD]", line)
    rank, pid, host, device, name = (int(placed.group(1)), int(placed.group(2)), placed.group(3),
                                     int(placed.group(4)), placed.group(6).strip())
    if full is None:
        return RankLine(rank, pid, host, device, int(where, 16), name)
    return RankLine(rank, pid, host, device, full[1], name, full[2], full[0])


def _row(header: list[str], tokens: list[str], raw: str) -> Row:
    busbw = [i for i, name in enumerate(header) if name == "busbw"]
    times = [i for i, name in enumerate(header) if name == "time"]
    algbw = [i for i, name in enumerate(header) if name == "algbw"]
    checks = [i for i, name in enumerate(header) if name in _CHECK_COLUMNS]
    try:
        size = int(tokens[0])
        oop = _number(tokens[busbw[0]])
        if oop is None:
            raise ParseError(TOOL, "busbw is N/A", raw)
        ip = _number(tokens[busbw[1]]) if len(busbw) > 1 else None
        wrong = [_wrong(header[i], tokens[i]) for i in checks]
        return Row(size, oop, ip, _number(tokens[times[0]]) or 0.0, _number(tokens[algbw[0]]) or 0.0,
                   wrong[0] if wrong else None, wrong[1] if len(wrong) > 1 else None,
                   (_number(tokens[times[1]]) or 0.0) if len(times) > 1 else 0.0)
    except ParseError as exc:
        raise ParseError(TOOL, exc.message, raw) from None


def _wrong(column: str, token: str) -> int | None:
    if column != "#wrong" or token == "N/A":
        return None  # old `error` / `res` columns hold a max error, not a count
    if not token.isdigit():
        raise ParseError(TOOL, f"#wrong is not a count: {token!r}")
    return int(token)


def asked_iters(argv: tuple[str, ...] | list[str]) -> int:
    """The iterations a run was asked for (`-n N` / `--iters N`), else nccl-tests' default."""
    for flag, value in zip(argv, argv[1:]):
        if flag in ("-n", "--iters") and value.isdigit():
            return int(value)
    return DEFAULT_ITERS


def all_reduce_args(gpus: int, min_bytes: int, max_bytes: int, extra: tuple[str, ...], checked: int = 1) -> list[str]:
    """One process driving every GPU of the host, validation on, sizes doubling up to the contract's; with `checked`
    above 1 (a contract's `sdc` iterations), that many timed iterations, each one checked (`-n N -c N`)."""
    iterations = ["-n", str(checked)] if checked > 1 else []
    return ["-g", str(gpus), "-b", str(min_bytes), "-e", str(max_bytes), "-f", "2", *iterations, "-c", str(checked),
            *extra]


def check_args(gpus: int, size: int, iterations: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The checked sweep of the `sdc` clause: sizes doubling up to `size` from the smallest power-of-two fraction of it
    of at least 8 bytes (so that the sweep lands on `size`), `iterations` timed iterations and as many checked ones
    (`-c N`: "perform N iterations, checking correctness of results on each iteration", nccl-tests' README)."""
    start = size
    while start % 2 == 0 and start // 2 >= 8:
        start //= 2
    return ["-g", str(gpus), "-b", str(start), "-e", str(size), "-f", "2", "-n", str(iterations),
            "-c", str(iterations), *extra]


def asked_checks(argv: tuple[str, ...] | list[str]) -> int:
    """The checked iterations a run was asked for (`-c N` / `--check N`; nccl-tests' default is 1, and 0 is none)."""
    value = option_value(argv, "-c", "--check")
    return int(value) if value is not None and value.isdigit() else 1


def run_all_reduce(runner: ToolRunner, args: list[str], repeat: int, timeout_s: float | None = None,
                   env: dict[str, str] | None = None, key: str | None = None) -> ToolRun:
    """Run all_reduce_perf; each repeat is its own run with its own evidence. With `env` (NCCL_DEBUG=INFO), through
    `env NAME=VALUE... /path/to/all_reduce_perf`: tools start in a clean environment (probes/process.py), so a
    setting a clause needs is on the command line it builds; `env` execs the tool, whose PID is the run's."""
    key = key or f"{slug([TOOL, *args])}.run{repeat}"
    tool = runner.which(TOOL) if runner.replay is None else TOOL
    pinned = runner.pins.get(TOOL)
    if not env or tool is None or (pinned is not None and file_sha256(tool) != pinned):
        # Missing, or not the file tools.sha256 pins: the runner's own run refuses it, saying so (env would not).
        return runner.run(TOOL, args, timeout_s, key=key)
    return runner.run("env", [*(f"{name}={value}" for name, value in env.items()), tool, *args], timeout_s, key=key)


# NCCL_DEBUG=INFO lines that say whether a communicator set up NVLink SHARP (NVLS): each rank's multicast support,
# its channel counts (`16 coll channels, 16 nvls channels, ...`; 2.2x adds `N collnet channels,` between), the NVLS
# connection, and the settings that turn it off (NCCL_ALGO, NCCL_NVLS_ENABLE, from the environment or nccl.conf).
_NVLS_SUPPORT = re.compile(r"NCCL INFO NVLS multicast support is (not )?available on dev (\d+)")
_CHANNELS = re.compile(r"NCCL INFO (\d+) coll channels, (?:\d+ collnet channels, )?(\d+) nvls channels")
_CONNECTED_NVLS = re.compile(r"NCCL INFO Connected NVLS")
_CONNECTED_OTHER = re.compile(r"NCCL INFO Connected all (rings|trees)")
_ALGO_ENV = re.compile(r"NCCL INFO NCCL_ALGO set by environment to (\S+)")
_NVLS_ENV = re.compile(r"NCCL INFO NCCL_NVLS_ENABLE set by environment to (-?\d+)")


@dataclass(frozen=True, slots=True)
class NvlsSeen:
    """What NCCL's INFO lines of one run say of NVLS: each `multicast support is (not) available on dev N` line's
    device, the `nvls channels` count of each `N coll channels, M nvls channels` line (one per rank), the `Connected
    NVLS` lines, the rings and trees connected, and the NCCL_ALGO / NCCL_NVLS_ENABLE settings NCCL read."""

    info_lines: int = 0
    available: tuple[int, ...] = ()
    unavailable: tuple[int, ...] = ()
    coll_channels: tuple[int, ...] = ()
    nvls_channels: tuple[int, ...] = ()
    connected_nvls: int = 0
    others: tuple[str, ...] = ()  # "rings", "trees"
    algo_env: tuple[str, ...] = ()
    nvls_enable_env: tuple[str, ...] = ()

    def off_by_setting(self) -> str | None:
        """The setting NCCL read that keeps NVLS from all_reduce, quoted; None where none does."""
        for value in self.nvls_enable_env:
            if value == "0":
                return "NCCL_NVLS_ENABLE set by environment to 0"
        for value in self.algo_env:
            if not algo_allows_nvls(value):
                return f"NCCL_ALGO set by environment to {value}"
        return None


def algo_allows_nvls(value: str) -> bool:
    """Whether an NCCL_ALGO value lets all_reduce use NVLS: `Ring,Tree` does not, `^NVLS` does not, `NVLS,Ring`,
    `^Ring` and `allreduce:nvls,ring;broadcast:ring` (NCCL 2.24's per-collective form) do."""
    text = value.lower()
    if ":" in text:
        parts = dict(part.split(":", 1) for part in text.split(";") if ":" in part)
        if "allreduce" not in parts:
            return True
        text = parts["allreduce"]
    excluded = text.startswith("^")
    names = {name.strip() for name in text.lstrip("^").split(",") if name.strip()}
    named = bool(names & {"nvls", "nvlstree"})
    return not named if excluded else named


def parse_nvls(text: str) -> NvlsSeen:
    """Read NCCL's INFO lines (any prefix: launcher tags, `host:pid:tid [dev]`) for what they say of NVLS."""
    available: list[int] = []
    unavailable: list[int] = []
    coll: list[int] = []
    nvls: list[int] = []
    others: set[str] = set()
    algo: list[str] = []
    enable: list[str] = []
    info = connected = 0
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        info += 1
        if support := _NVLS_SUPPORT.search(line):
            (unavailable if support.group(1) else available).append(int(support.group(2)))
        elif channels := _CHANNELS.search(line):
            coll.append(int(channels.group(1)))
            nvls.append(int(channels.group(2)))
        elif _CONNECTED_NVLS.search(line):
            connected += 1
        elif other := _CONNECTED_OTHER.search(line):
            others.add(other.group(1))
        elif setting := _ALGO_ENV.search(line):
            algo.append(setting.group(1))
        elif setting := _NVLS_ENV.search(line):
            enable.append(setting.group(1))
    return NvlsSeen(info, tuple(sorted(set(available))), tuple(sorted(set(unavailable))), tuple(coll), tuple(nvls),
                    connected, tuple(sorted(others)), tuple(dict.fromkeys(algo)), tuple(dict.fromkeys(enable)))


_NET_USING = re.compile(r"NCCL INFO (NET/\w+) : Using")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_VIA = re.compile(r"via (NET/\w+)")


def network_transport(text: str) -> dict[str, set[str]]:
    """What NCCL's own log (NCCL_DEBUG=INFO) says carried the traffic between nodes, per host: `NET/IB`
    (with `IBext...` for a plugin), or `NET/Socket` — a multi-node all_reduce over sockets is not one over
    RDMA, whatever its busbw. Hosts are the `host:pid:tid` prefix of NCCL's lines."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        stripped = _PREFIX.sub("", line, count=1).strip()
        host = stripped.split(":", 1)[0] if ":" in stripped else ""
        for pattern in (_NET_USING, _NETWORK, _VIA):
            match = pattern.search(stripped)
            if match:
                name = match.group(1)
                found.setdefault(host, set()).add("NET/IB" if name.startswith("IB") else
                                                  "NET/Socket" if name == "Socket" else name)
    return found


# NCCL_DEBUG=INFO lines of a multi-node NVLink (MNNVL) job, each `host:pid:tid [dev] NCCL INFO ...`, possibly behind a
# launcher's `[rank] ` tag: the communicator's own word on whether it spans the nodes over NVLink, and what each rank
# read of its GPU's fabric (NCCL 2.19 and later).
_INFO = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+ \[\d+\] NCCL INFO (.*)$")
_COMM = re.compile(r"^comm 0x[0-9a-fA-F]+ rank (\d+) nRanks (\d+) nNodes (\d+)\b.*\bMNNVL (\d+)")
_MNNVL_FABRIC = re.compile(r"^MNNVL busId (0x[0-9a-fA-F]+) fabric UUID (\S+) cliqueId (0x[0-9a-fA-F]+) state (\d+) "
                           r"healthMask (0x[0-9a-fA-F]+)")


@dataclass(frozen=True, slots=True)
class MnnvlSeen:
    """What one host's ranks logged: each communicator's MNNVL flag (1: its ranks reach the other nodes over
    NVLink), the fabric each rank's GPU is in (clique ID and state as NVML gave them to NCCL), and the network
    transports any channel went over (`via NET/IB`)."""

    comm_flags: tuple[int, ...] = ()
    cliques: tuple[tuple[int, int], ...] = ()  # (clique ID, fabric state) per MNNVL line
    nodes: tuple[int, ...] = ()  # nNodes of each communicator line
    net: tuple[str, ...] = ()


def mnnvl_by_host(text: str) -> dict[str, MnnvlSeen]:
    """Per host, what NCCL's INFO lines say of MNNVL (a host that logged none of them is absent)."""
    found: dict[str, dict[str, list[Any]]] = {}
    for line in text.splitlines():
        info = _INFO.search(line)
        if info is None:
            continue
        host, said = info.group(1), info.group(2).strip()
        seen = found.setdefault(host, {"comm": [], "cliques": [], "nodes": [], "net": []})
        if (comm := _COMM.match(said)) is not None:
            seen["comm"].append(int(comm.group(4)))
            seen["nodes"].append(int(comm.group(3)))
        elif (fabric := _MNNVL_FABRIC.match(said)) is not None:
            seen["cliques"].append((int(fabric.group(3), 16), int(fabric.group(4))))
        elif (via := _VIA.search(said)) is not None:
            seen["net"].append(via.group(1))
    return {host: MnnvlSeen(tuple(s["comm"]), tuple(s["cliques"]), tuple(s["nodes"]), tuple(sorted(set(s["net"]))))
            for host, s in found.items() if s["comm"] or s["cliques"] or s["net"]}
