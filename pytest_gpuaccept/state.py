"""The state of one acceptance session, kept in `config.stash` (never in globals)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from .checks import Check
from .contract import Contract
from .probes import nvml
from .probes._run import ToolRunner

NVML_HOST_FILE = "nvml-host.json"
NAMES_FILE = "host-names.json"
# Where the host lists the names the contract's globs are matched against.
NAME_SOURCES = {"net": Path("/sys/class/net"), "infiniband": Path("/sys/class/infiniband")}


@dataclass
class State:
    contract: Contract
    runner: ToolRunner
    report_path: Path
    json_path: Path
    evidence_dir: Path
    nvml_recording: Path | None
    is_controller: bool
    started: str = field(default_factory=lambda: now())
    # Judged checks by (clause, subject), as plain dicts: they arrive from xdist workers that way.
    checks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def host_reading(self) -> dict[str, Any]:
        """The NVML reading of this session: taken once (or replayed) and kept as evidence."""
        with self.runner.exclusive():
            saved = self.evidence_dir / NVML_HOST_FILE
            if saved.is_file():
                return json.loads(saved.read_text())
            source = self.nvml_recording
            if source is None and self.runner.replay_dir is not None:
                source = self.runner.replay_dir / NVML_HOST_FILE
            if source is not None:
                try:
                    reading = json.loads(source.read_text())
                except (OSError, ValueError) as exc:
                    reading = {"hostname": "", "driver": None, "cuda": None, "gpus": [],
                               "error": f"recorded NVML readings {source} unreadable: {exc}"}
                reading["recorded"] = str(source)
            else:
                reading = nvml.read_host()
            self.runner.record_json(NVML_HOST_FILE, reading)
            return reading


    def listings(self) -> tuple[list[str], list[str]]:
        """(network interfaces, RDMA devices) of the host, listed once (or replayed) and kept as evidence."""
        with self.runner.exclusive():
            saved = self.evidence_dir / NAMES_FILE
            if saved.is_file():
                names = json.loads(saved.read_text())
            elif self.runner.replay_dir is not None and (self.runner.replay_dir / NAMES_FILE).is_file():
                names = json.loads((self.runner.replay_dir / NAMES_FILE).read_text())
                self.runner.record_json(NAMES_FILE, names)
            else:
                names = {key: sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
                         for key, folder in NAME_SOURCES.items()}
                self.runner.record_json(NAMES_FILE, names)
        return list(names.get("net", [])), list(names.get("infiniband", []))


STATE = pytest.StashKey[State]()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
