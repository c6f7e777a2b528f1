#!/usr/bin/env python3
"""A stand-in `ib_write_bw` for the namespace fabric (tests/netns_fabric.py): perftest's command line and its output
format, client and server (tests/data/ibwritebw holds real ones of both sides), moving real bytes over the rail's veth.

Server: `ib_write_bw -d DEV [-i 1] [-s SIZE] [-p PORT] [--report_gbits] [-F] [-D SECONDS] [-q QPS] [-x GID]`;
client: the same and the server's address last. The device's address is the IPv4 of its RoCE v2 GID (`-x`) in the
node's own sysfs tree (`$FABRIC_SYSFS.<hostname>`, the tree the plugin reads on that node); the client binds to it and
sends over TCP for -D seconds at whatever rate the path gives; each side moves its port's counter in that tree with
the bytes it moved as they move (port_xmit_data on the client's device, port_rcv_data on the server's, in 4-byte words,
written every 50 ms: the plugin reads them while the tools run). Where
perftest's client gives up at once when no server listens, this one tries again for a few seconds: the namespaces'
two shared cores start some sixty processes a step. A test tool, not the product's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

DASHES = "-" * 87
CONNECT_TRIES_S = 5.0


def sysfs_port(tree: Path, device: str) -> Path:
    return tree / "class" / "infiniband" / device / "ports" / "1"


def address(tree: Path, device: str, gid_index: int) -> tuple[str, str]:
    """(IPv4, perftest's GID text) of the device's GID `gid_index`."""
    gid = (sysfs_port(tree, device) / "gids" / str(gid_index)).read_text().strip()
    octets = [b for part in gid.split(":") for b in int(part, 16).to_bytes(2, "big")]
    return ".".join(str(o) for o in octets[12:]), ":".join(f"{o:02d}" for o in octets)


def count(tree: Path, device: str, name: str, moved: int) -> None:
    """The port's counter moves by the bytes moved, in 4-byte words (under a lock: both sides of a node write)."""
    path = sysfs_port(tree, device) / "counters" / name
    with open(path, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        words = int(handle.read().strip() or 0) + moved // 4
        handle.seek(0)
        handle.write(f"{words}\n")
        handle.truncate()


class Moving:
    """A port counter that moves while the bytes flow, as a NIC's does: what moved is written every FLUSH_S (a
    reader sampling the counter during the run sees it rise, not jump at the end)."""

    FLUSH_S = 0.05

    def __init__(self, tree: Path, device: str, name: str) -> None:
        self.tree, self.device, self.name = tree, device, name
        self.pending, self.last = 0, time.monotonic()

    def moved(self, size: int) -> None:
        self.pending += size
        if time.monotonic() - self.last >= self.FLUSH_S:
            self.flush()

    def flush(self) -> None:
        words = self.pending - self.pending % 4
        if words:
            count(self.tree, self.device, self.name, words)
            self.pending -= words
        self.last = time.monotonic()


def banner(args: argparse.Namespace, local: tuple[int, str], remote: tuple[int, str]) -> str:
    lines = [DASHES, "                    RDMA_Write BW Test",
             f" Dual-port       : OFF\t\tDevice         : {args.d}",
             f" Number of qps   : {args.q}\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF", " PCIe relax order: ON", " ibv_wr* API     : ON",
             " TX depth        : 128", " CQ Moderation   : 100", " Mtu             : 1024[B]",
             " Link type       : Ethernet", f" GID index       : {args.x}", " Max inline data : 0[B]",
             " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", DASHES,
             f" local address: LID 0000 QPN 0x{local[0]:04x} PSN 0x3c5d65 RKey 0x00370e VAddr 0x007ff44bf1d000",
             f" GID: {local[1]}",
             f" remote address: LID 0000 QPN 0x{remote[0]:04x} PSN 0x475031 RKey 0x002c23 VAddr 0x007fd3d83cb000",
             f" GID: {remote[1]}", DASHES,
             " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"]
    return "\n".join(lines)


def row(size: int, moved: int, seconds: float) -> str:
    """perftest's row (perftest_parameters.c print_report_bw): with -D the peak is 0; below 0.1 Gb/s (`inc_accuracy`)
    REPORT_FMT_EXT, six decimals, else REPORT_FMT."""
    gbit = moved * 8 / seconds / 1e9 if seconds > 0 else 0.0
    iterations = moved // size
    rate = iterations / seconds / 1e6 if seconds > 0 else 0.0
    if gbit < 0.1:
        line = f" {size:<7d}    {iterations}           {0.0:<7.6f}            {gbit:<7.6f}            {rate:<7.6f}"
    else:
        line = f" {size:<7d}    {iterations:<10d}       {0.0:<7.2f}            {gbit:<7.2f}\t\t   {rate:<7.6f}"
    return f"{line}\n{DASHES}"


def serve(args: argparse.Namespace, tree: Path, out: list[str], err: list[str]) -> int:
    _ip, gid = address(tree, args.d, args.x)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", args.p))
    listener.listen(1)
    listener.settimeout(30)
    out.append("\n************************************\n* Waiting for client to connect... *\n"
               "************************************")
    try:
        conn, _ = listener.accept()
    except OSError:
        err.append(f"Couldn't connect to client on port {args.p}")
        return 1
    finally:
        listener.close()
    stream = conn.makefile("rb")
    hello = json.loads(stream.readline())
    conn.sendall((json.dumps({"gid": gid, "qpn": args.p}) + "\n").encode())
    received, started = 0, time.monotonic()
    counter = Moving(tree, args.d, "port_rcv_data")
    while chunk := stream.read1(1 << 16):
        received += len(chunk)
        counter.moved(len(chunk))
    seconds = time.monotonic() - started
    conn.sendall(f"{received}\n".encode())
    conn.close()
    counter.flush()
    out.append(banner(args, (args.p, gid), (hello["qpn"], hello["gid"])))
    out.append(row(args.s, received, seconds))
    return 0


def connect(host: str, port: int, source: str) -> socket.socket:
    deadline = time.monotonic() + CONNECT_TRIES_S
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 15)
        sock.bind((source, 0))
        try:
            sock.connect((host, port))
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def client(args: argparse.Namespace, tree: Path, out: list[str], err: list[str]) -> int:
    ip, gid = address(tree, args.d, args.x)
    try:
        sock = connect(args.host, args.p, ip)
    except OSError as exc:
        err.append(f"Couldn't connect to {args.host}:{args.p}")
        err.append(f" Unable to open file descriptor for socket connection Unable to init the socket connection ({exc})")
        return 1
    sock.sendall((json.dumps({"gid": gid, "qpn": args.p + 1}) + "\n").encode())
    stream = sock.makefile("rb")
    peer = json.loads(stream.readline())
    chunk = b"\0" * min(args.s, 1 << 16)
    sent, started = 0, time.monotonic()
    counter = Moving(tree, args.d, "port_xmit_data")
    while time.monotonic() - started < args.D:
        sock.sendall(chunk)
        sent += len(chunk)
        counter.moved(len(chunk))
    counter.flush()
    sock.shutdown(socket.SHUT_WR)
    received = int(stream.readline() or 0)
    seconds = time.monotonic() - started
    sock.close()
    out.append(banner(args, (args.p + 1, gid), (peer["qpn"], peer["gid"])))
    out.append(row(args.s, min(sent, received), seconds))
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ib_write_bw", exit_on_error=False)
    parser.add_argument("-d", required=True)
    parser.add_argument("-i", type=int, default=1)
    parser.add_argument("-s", type=int, default=65536)
    parser.add_argument("-p", type=int, default=18515)
    parser.add_argument("-D", type=float, default=5.0)
    parser.add_argument("-q", type=int, default=1)
    parser.add_argument("-x", type=int, default=0)
    parser.add_argument("-F", action="store_true")
    parser.add_argument("--report_gbits", action="store_true")
    parser.add_argument("host", nargs="?")
    return parser


def one_run(argv: list[str], tree: Path) -> tuple[int, str, str]:
    """One ib_write_bw run: (exit code, stdout, stderr)."""
    out: list[str] = []
    err: list[str] = []
    try:
        args = parser().parse_args(argv)
        code = (client if args.host else serve)(args, tree, out, err)
    except (argparse.ArgumentError, SystemExit) as exc:
        err.append(f"ib_write_bw: {exc}")
        code = 1
    except Exception as exc:  # the stand-in's own failure, said as a tool's
        err.append(f"ib_write_bw: Failed: {exc!r}")
        code = 1
    return code, "\n".join(out) + "\n", "\n".join(err) + ("\n" if err else "")


def agent(node: str, tree: Path, fifo: Path) -> int:
    """A node's agent, in the node's namespace: each request (a line `REPLY<TAB>ARGS`, from the `ib_write_bw` shell
    script) run in a thread of its own; its exit code, then its stdout, written to the REPLY fifo, its stderr to
    REPLY.err. One Python per node, not one per run: a step of 8 nodes x 4 rails starts 128 runs at once."""
    if not fifo.exists():
        os.mkfifo(fifo)

    def answer(reply: str, argv: list[str]) -> None:
        code, stdout, stderr = one_run(argv, tree)
        with open(reply, "w") as handle:  # opened once the script reads it: the name can go
            os.unlink(reply)
            handle.write(f"{code}\n{stdout}{STDERR}\n{stderr}")

    # Opened for reading and writing: a FIFO that this process also holds for writing never reads as ended, so no
    # request's writer meets a reader that is closing (SIGPIPE) and no request is left unread.
    with os.fdopen(os.open(fifo, os.O_RDWR), "r") as requests:
        for line in requests:
            reply, _, args = line.rstrip("\n").partition("\t")
            threading.Thread(target=answer, args=(reply, args.split()), daemon=True).start()
    return 0


STDERR = "\x1e stderr"  # the line between a reply's stdout and its stderr
# The script runs no program but mkfifo (shell builtins read the reply): each run of a step starts in milliseconds.
SHELL = """#!/bin/sh
# ib_write_bw for the namespace fabric: the node's agent (tests/fabric_standin.py) runs it
r="$FABRIC_AGENTS/reply.$FABRIC_NODE.$$"
mkfifo "$r" || exit 1
printf '%s\\t%s\\n' "$r" "$*" > "$FABRIC_AGENTS/$FABRIC_NODE.fifo"
exec 3<"$r"
IFS= read -r code <&3
out=1
mark="$(printf '\\036') stderr"
while IFS= read -r line <&3; do
  if [ "$line" = "$mark" ]; then out=2; continue; fi
  if [ "$out" = 1 ]; then printf '%s\\n' "$line"; else printf '%s\\n' "$line" >&2; fi
done
exit "$code"
"""


def main() -> int:
    if sys.argv[1:2] == ["agent"]:
        return agent(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    tree = Path(f"{os.environ['FABRIC_SYSFS']}.{socket.gethostname()}")
    code, stdout, stderr = one_run(sys.argv[1:], tree)
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
