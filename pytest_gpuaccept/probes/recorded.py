"""Runs and readings recorded earlier, judged again instead of measured: the source a ToolRunner reads in place of
the host's tools and readings.

`Recorded` is what the runner asks of such a source; `Replayed` is a verified bundle read as data (bundle_files:
every record and output a file its manifest lists, read to the size listed). A judge-level test gives the runner
another `Recorded`: outputs as the tools printed them, without a bundle around them. What cannot be read is a run
not measured, never a run that passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from ..bundle_files import BundleFiles, Refused
from ..untrusted import shown
from .process import MAX_OUTPUT_BYTES

RECORD_LIMIT = MAX_OUTPUT_BYTES + 200  # a stream's bytes judged, as a live run keeps them (with the truncation mark)


class Recorded(Protocol):
    """Where the runs and readings of a session that measures nothing come from."""

    @property
    def folder(self) -> Path | None:
        """The folder they were recorded in, to name as the session's source; None where there is none."""

    def identity(self) -> dict[str, Any]:
        """Whose host they were recorded on, when and in which mode (the results' `recorded`)."""

    def has(self, name: str) -> bool: ...

    def record(self, key: str, argv: list[str]) -> tuple[dict[str, Any], bytes, bytes]:
        """A tool run's record (argv, exit code, duration, ...) and what it printed on stdout and stderr, for the
        run the session asks for as `argv`; Refused or KeyError where it is not there as recorded."""

    def reading(self, name: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A reading (NVML, sysfs) as recorded; Refused where it is not there as recorded. `take` takes it from what
        the session reads instead (its NVML recording, its sysfs tree): a bundle never does."""

    def chunks(self, name: str) -> Iterator[bytes]:
        """A large recorded file (a burn-in's stream) a megabyte at a time."""


class Replayed:
    """A verified bundle as the source of a replay (--gpuaccept-replay)."""

    def __init__(self, bundle: BundleFiles) -> None:
        self.bundle = bundle

    @property
    def folder(self) -> Path:
        return self.bundle.evidence

    def identity(self) -> dict[str, Any]:
        """Whose host the bundle recorded, and when (from its manifest, which verified)."""
        recorded = self.bundle.manifest.get("recorded")
        found: dict[str, Any] = dict(recorded) if isinstance(recorded, dict) else {}
        found.setdefault("mode", self.bundle.manifest.get("mode"))  # the recorded run's own, through replays of replays
        return found

    def has(self, name: str) -> bool:
        return self.bundle.has(name)

    def record(self, key: str, argv: list[str]) -> tuple[dict[str, Any], bytes, bytes]:
        """The bundle's record of the run, whatever argv the session asks with (the recorded one is judged)."""
        record = self.bundle.read_json(f"{key}.json")
        if not isinstance(record, dict):
            raise Refused(f"{key}.json: not an object")
        return record, self.bundle.read(record["stdout"]), self.bundle.read(record["stderr"])

    def reading(self, name: str, take: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The bundle's reading; never one taken now (the host is not here)."""
        data = self.bundle.read_json(name)
        if not isinstance(data, dict):
            raise Refused(f"{shown(name)} in the replayed bundle is not an object")
        return data

    def chunks(self, name: str) -> Iterator[bytes]:
        return self.bundle.chunks(name)
