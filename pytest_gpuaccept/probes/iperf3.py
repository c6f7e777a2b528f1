"""iperf3: TCP throughput to a server, from `-J` JSON; version detection for the single-threaded ones."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from . import ParseError, strip_escapes
from ._run import Command, Reading, ToolRun, ToolRunner, parse_run

TOOL = "iperf3"
MULTITHREADED_SINCE = (3, 16)  # before 3.16 one process is one thread: it cannot prove 100 Gb/s


@dataclass(frozen=True, slots=True)
class Iperf3Result:
    received_bits_per_s: float
    sent_bits_per_s: float
    version: str | None
    streams: int | None
    duration_s: float | None
    sent_bytes: int | None = None  # end.sum_sent.bytes: what the client says it moved


def parse_version(text: str) -> tuple[int, int] | None:
    """`iperf 3.12 (cJSON 1.7.15)` -> (3, 12)."""
    match = re.search(r"iperf (\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_iperf3_json(text: str) -> Iperf3Result:
    """Read one `iperf3 -c ... -J` document; its `error` field, a second document or a cut one is refused."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        error = re.search(r"iperf3: error - (.+)", text)
        raise ParseError(TOOL, f"iperf3 error: {error.group(1).strip()}" if error else "output is not iperf3 JSON (-J)")
    try:
        data, end = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError as exc:
        raise ParseError(TOOL, f"JSON cut or invalid at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if stripped[end:].strip():
        raise ParseError(TOOL, "more than one JSON document in the output")
    if data.get("error"):
        raise ParseError(TOOL, f"iperf3 error: {data['error']}")
    try:
        received = float(data["end"]["sum_received"]["bits_per_second"])
        sent = float(data["end"]["sum_sent"]["bits_per_second"])
    except (KeyError, TypeError, ValueError):
        raise ParseError(TOOL, "no end.sum_received.bits_per_second in the JSON") from None
    start = data.get("start", {})
    test = start.get("test_start", {})
    moved = data["end"]["sum_sent"].get("bytes")
    return Iperf3Result(received, sent, start.get("version"), test.get("num_streams"), test.get("duration"),
                        int(moved) if isinstance(moved, (int, float)) else None)


def run_version(runner: ToolRunner) -> ToolRun:
    return runner.run(TOOL, ["--version"], 30.0)


def asked_seconds(duration_s: float) -> int:
    """What each client is asked to run (-t): whole seconds, at least one."""
    return max(1, round(duration_s))


def client_commands(server: str, port: int, streams: int, duration_s: float,
                    version: tuple[int, int] | None) -> list[Command]:
    """One client with -P streams where iperf3 is multi-threaded; else one single-stream client per port."""
    seconds = str(asked_seconds(duration_s))
    if version is not None and version >= MULTITHREADED_SINCE:
        return [Command(TOOL, ("-c", server, "-p", str(port), "-J", "-t", seconds, "-P", str(streams)))]
    return [Command(TOOL, ("-c", server, "-p", str(port + n), "-J", "-t", seconds, "-P", "1"))
            for n in range(streams)]


@dataclass(frozen=True, slots=True)
class Iperf3Runs:
    """Every client's reading, and how iperf3 was driven (one multi-stream process, or one per port)."""

    readings: tuple[Reading[Iperf3Result], ...]
    note: str

    @property
    def seconds(self) -> float | None:
        """How long the clients ran, together, on the plugin's monotonic clock (None: none ran)."""
        times = [r.run.duration_s for r in self.readings if r.run is not None]
        return max(times) if times else None


def run_iperf3(runner: ToolRunner, server: str, port: int, streams: int, duration_s: float) -> Iperf3Runs:
    """Detect the version, then run the clients together: one per port before 3.16 (single-threaded)."""
    version_run = run_version(runner)
    version = None if version_run.failure else parse_version(strip_escapes(version_run.stdout + version_run.stderr))
    commands = client_commands(server, port, streams, duration_s, version)
    runs = runner.run_together(commands, timeout_s=duration_s + 60.0) if not version_run.failure else [version_run]
    shown = ".".join(map(str, version)) if version else "unknown"
    if len(commands) > 1:
        note = (f"iperf3 {shown} is single-threaded: {len(commands)} client processes on ports "
                f"{port}-{port + len(commands) - 1}, summed")
    else:
        note = f"iperf3 {shown}, one process, {streams} streams"
    return Iperf3Runs(tuple(parse_run(run, parse_iperf3_json) for run in runs), note)

