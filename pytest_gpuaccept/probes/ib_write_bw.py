"""perftest `ib_write_bw`: RDMA write bandwidth between two ports (or a port and itself)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..units import mib_s_to_gbit
from . import ParseError
from ._run import Command, Reading, ToolRun, ToolRunner, parse_run

TOOL = "ib_write_bw"
_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(MB|Gb)/sec\]\s+BW average\[(MB|Gb)/sec\]")
_ADDRESS = re.compile(r"(local|remote) address:\s*LID\s+(\S+)")
_GID = re.compile(r"GID:\s*(\S+)")
_FAILURE = re.compile(r"Couldn't|Unable to|Failed to|failed to|ERROR|Error|refused|No such", re.IGNORECASE)
DURATION_S = 5  # -D: perftest sends for this long (its margins, D/4 each, are not in the figure it prints)
CLIENT_AFTER_S = 1.0  # on one host, the client starts this long after its server (listening by then)


@dataclass(frozen=True, slots=True)
class WriteBw:
    """The table of one perftest run; bandwidths in Gb/s (MB/sec is MiB/s and converted)."""

    test: str | None
    device: str | None
    link_type: str | None
    rows: tuple[tuple[int, float, float], ...]  # (bytes, peak Gb/s, average Gb/s)
    unit: str
    # The first queue pair's ` local address:` / ` remote address:` lines: (LID, GID or None); the GID as its
    # colon-separated decimal bytes (RoCE prints one ` GID:` line after each address; IB none).
    local: tuple[str, str | None] | None = None
    remote: tuple[str, str | None] | None = None
    waited: bool = False  # the server's `* Waiting for client to connect... *` banner: it ran as the server

    @property
    def last(self) -> tuple[int, float, float]:
        return self.rows[-1]


def parse_ib_write_bw(text: str, rows_needed: bool = True) -> WriteBw:  # noqa: C901 - one pass over the lines
    """Read `ib_write_bw` output: the banner (` Device : mlx5_0`, ` Link type : IB`), the addresses
    (` local address: LID 0000 QPN 0x0137 ...`, ` remote address: LID 0x01 ...`, each with a ` GID: 00:...:255:255:192:168:111:02`
    line on RoCE), then ` #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]` and its rows (a rate below
    0.1 Gb/s printed with six decimals, `0.080755`, perftest's REPORT_FMT_EXT; above, two); other lines (CPU frequency
    warnings, `Connected:`) are skipped. No table is a refusal naming the tool's own error line; `rows_needed=False`
    reads a server's output, whose table is empty where the client alone measures (a unidirectional run).
    """
    test = device = link_type = unit = None
    rows: list[tuple[int, float, float]] = []
    failures = []
    addresses: dict[str, tuple[str, str | None]] = {}
    last_address: str | None = None
    waited = False
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if "Waiting for client to connect" in line:
            waited = True
            continue
        if match := _ADDRESS.match(line):
            last_address = match.group(1)
            addresses.setdefault(last_address, (match.group(2), None))
            continue
        if (match := _GID.match(line)) and last_address is not None:
            lid, gid = addresses[last_address]
            addresses[last_address] = (lid, gid or match.group(1))
            last_address = None
            continue
        if match := _HEADER.search(line):
            unit = match.group(2)
            continue
        if match := re.search(r"Device\s*:\s*(\S+)", line):
            device = match.group(1)
        if match := re.match(r"Link type\s*:\s*(\S+)", line):
            link_type = match.group(1)
        if re.search(r"BW Test$", line):
            test = line
        tokens = line.split()
        if unit and len(tokens) == 5 and tokens[0].isdigit() and tokens[1].isdigit():
            try:
                peak, avg = float(tokens[2]), float(tokens[3])
            except ValueError:
                raise ParseError(TOOL, "unreadable bandwidth", raw) from None
            if unit == "MB":
                peak, avg = mib_s_to_gbit(peak), mib_s_to_gbit(avg)
            rows.append((int(tokens[0]), peak, avg))
        elif _FAILURE.search(line) and "CPU Frequency" not in line:
            failures.append(line)
    if not rows and (rows_needed or unit is None or "remote" not in addresses):
        reason = f": {failures[0]!r}" if failures else ""
        raise ParseError(TOOL, f"no bandwidth table in the output{reason}")
    return WriteBw(test, device, link_type, tuple(rows), f"{unit}/sec", addresses.get("local"), addresses.get("remote"),
                   waited)


def gid_ipv4(gid: str | None) -> str | None:
    """The IPv4 address of an IPv4-mapped GID as perftest prints it (`00:...:00:255:255:192:168:07:189`, decimal bytes)
    or as sysfs gives it (`0000:0000:0000:0000:0000:ffff:c0a8:07bd`); None for any other GID."""
    if gid is None:
        return None
    parts = gid.split(":")
    if len(parts) == 16 and all(p.isdigit() for p in parts):
        octets = [int(p) for p in parts]
    elif len(parts) == 8 and all(len(p) == 4 for p in parts):
        try:
            octets = [b for p in parts for b in int(p, 16).to_bytes(2, "big")]
        except ValueError:
            return None
    else:
        return None
    if octets[:12] != [0] * 10 + [255, 255]:
        return None
    return ".".join(str(o) for o in octets[12:])


def perftest_args(device: str, message_size: int, port: int, gid_index: int | None, ib_port: int = 1,
                  qps: int = 1) -> list[str]:
    """Flags that make the number comparable to line rate: Gb/s, fixed size, long run, no CPU-freq abort.

    `-i` is the device's port to measure through (its active one: a dual-port card may be cabled on 2);
    `-q` the queue pairs (a bonded RoCE port needs several to reach its line rate).
    """
    args = ["-d", device, "-i", str(ib_port), "-s", str(message_size), "-p", str(port), "--report_gbits", "-F", "-D",
            str(DURATION_S)]
    if qps != 1:
        args += ["-q", str(qps)]
    if gid_index is not None:
        args += ["-x", str(gid_index)]  # RoCE v2 needs the GID index of the port's IPv4-mapped RoCE v2 GID
    return args


def commands(device: str, message_size: int, port: int, peer: str | None, gid_index: int | None,
             ib_port: int = 1, qps: int = 1) -> list[Command]:
    """Without a peer: a server and a client on this host (loopback through the HCA); with one: the client only."""
    args = perftest_args(device, message_size, port, gid_index, ib_port, qps)
    if peer is not None:
        return [Command(TOOL, (*args, peer), key=f"ib_write_bw_{device}_client")]
    return [Command(TOOL, tuple(args), key=f"ib_write_bw_{device}_server"),
            Command(TOOL, (*args, "localhost"), key=f"ib_write_bw_{device}_client", start_after_s=CLIENT_AFTER_S)]


def client_seconds(run: ToolRun, peer: str | None) -> float:
    """The longest the client can have run: the group's time on the plugin's monotonic clock, less the wait
    before the client started where its server ran here too (a server that outlives its client adds to it)."""
    return max(0.0, run.duration_s - (0.0 if peer is not None else CLIENT_AFTER_S))


def run_ib_write_bw(runner: ToolRunner, device: str, message_size: int, port: int, peer: str | None,
                    gid_index: int | None, ib_port: int = 1, qps: int = 1, timeout_s: float = 120.0) -> Reading[WriteBw]:
    """Drive ib_write_bw for one device (server and client, or the client against a peer) and read the client.

    Where the server failed and the client did not say why, the server's failure is the reading's.
    """
    runs = runner.run_together(commands(device, message_size, port, peer, gid_index, ib_port, qps),
                               timeout_s=min(runner.default_timeout_s, timeout_s))
    client = parse_run(runs[-1], parse_ib_write_bw)
    if len(runs) > 1 and runs[0].failure and not client.failure:
        client = parse_run(runs[0], parse_ib_write_bw)  # the server failed: say so
    return client
