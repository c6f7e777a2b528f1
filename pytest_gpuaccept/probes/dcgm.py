"""`dcgmi diag -r LEVEL -j`: DCGM's own diagnostics, read per test and per GPU from its JSON.

Two shapes are read, as DCGM wrote them (tests/data/dcgm holds real ones):
- DCGM 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids" | "gpu_id", "status", "info", "warnings"}]}]}], "version"}}`. The deployment checks are one test
  each ("Denylist", "Persistence Mode", ...) with one result for every GPU (no GPU id, or a CSV of ids); the others
  name their GPU. From 3.1.7 dcgmi writes `"version"` and `"Driver Version Detected"`, and from 3.3 `"GPU Device
  Serials"` ({"0": "..."} by GPU id, blank ones left out), beside the diagnostic at the document's root
  (dcgmi/Diag.cpp HelperJsonBuildOutput, DCGM 3.1.7 to 3.3.7); they are read there or in it.
- DCGM 4.x: `{"DCGM Diagnostic": {"test_categories": [... "tests": [{"name", "results": [{"entity_group",
  "entity_id", "status", "info", "warnings"}], "test_summary": {"status"}}]]}, "entity_groups": [{"entity_group":
  "GPU", "entities": [{"entity_id", "serial_num", "device_id"}]}], "metadata": {"version", "Driver Version
  Detected"}}` (DCGM's schema: testing/python3/dcgm_diag_schema.json in NVIDIA/DCGM). DCGM 4.6's dcgmi
  (dcgmi/Diag.cpp HelperJsonAddEntities) writes `entity_id`, `serial_num` (left out where blank) and `device_id`
  per entity; a `uuid` or `pci_bus_id` beside them is read where a document gives one.

What DCGM's own lines say of each GPU's memory is read too (`memory_figures`): the memory test's "Allocated N bytes
(P%)" (P of the total CUDA gives, nvvs/plugin_src/memory/memory.cpp) and the diagnostic's "... from N bytes
available.", where a document gives them.

Test names are made canonical (DCGM 4's plugin names: "GPU Memory" -> memory, "EUD Test" -> eud) and every 3.x
deployment check is part of `software`, as DCGM 4 reports them. Statuses are lower-cased as they are; this module
judges nothing. Text before the document (dcgmi's "Successfully ran diagnostic for group.", a warning line) is
skipped; a document cut short, or a fragment of one, is refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from . import ParseError
from ._run import parse_run

if TYPE_CHECKING:
    from ._run import Reading, ToolRun, ToolRunner

TOOL = "dcgmi"
SHAPE_3, SHAPE_4 = "DCGM GPU Diagnostic", "DCGM Diagnostic"
SOFTWARE = "software"
# DCGM 3.x's display names of its tests, as their DCGM 4 plugin names (nvvs/include/PluginStrings.h).
_RENAMED = {"gpu_memory": "memory", "eud_test": "eud", "memory_stress": "memtest", "pcie": "pcie",
            "diagnostic": "diagnostic", "sm_stress": "sm_stress", "context_create": "context_create"}
NOT_SUPPORTED = "<<<NOT_SUPPORTED>>>"  # DCGM's word for a serial the GPU does not give
EXIT_ERRORS = {226: "DCGM_ST_NVVS_ERROR (-30): the diagnostic ran and reported an error",
               205: "DCGM_ST_NVVS_ISOLATE_ERROR (-51): the diagnostic ran and reported an error that calls for "
                    "isolating the GPU"}


@dataclass(frozen=True, slots=True)
class Finding:
    """One of DCGM's warnings: its message and its error id, category and severity (dcgm_errors.h)."""

    message: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None

    def __str__(self) -> str:
        return f"{self.message} (DCGM error {self.error_id})" if self.error_id is not None else self.message


@dataclass(frozen=True, slots=True)
class Result:
    """A test's result for some GPUs (`gpus` None: every GPU, as a 3.x deployment check gives it)."""

    status: str  # lower case, as DCGM wrote it: pass, fail, warn, skip, not run, ...
    gpus: tuple[int, ...] | None
    info: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    check: str = ""  # the 3.x deployment check this result is of ("Persistence Mode"), "" otherwise
    entity_group: str = "GPU"


@dataclass(frozen=True, slots=True)
class Test:
    name: str  # canonical: software, pcie, memory, diagnostic, targeted_stress, ...
    shown: str  # as DCGM named it
    results: tuple[Result, ...]
    summary: str | None = None  # 4.x test_summary.status, lower case
    summary_info: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Diag:
    shape: str  # SHAPE_3 or SHAPE_4
    version: str | None
    driver: str | None
    tests: tuple[Test, ...]
    serials: dict[int, str]  # DCGM's GPU id -> serial, as DCGM read it (NOT_SUPPORTED kept)
    device_ids: dict[int, str]  # 4.x: DCGM's GPU id -> PCI device ID, 4 hex digits
    runtime_error: str | None = None
    uuids: dict[int, str] = field(default_factory=dict)  # where an entity gives one (stock DCGM 4.6 does not)
    bus_ids: dict[int, str] = field(default_factory=dict)  # likewise: the PCI address, as the document writes it
    entities: tuple[int, ...] | None = None  # the GPU ids 4.x's entity_groups list; None: the document has none

    @property
    def carries_identity(self) -> bool:
        """Whether the document names its GPUs by anything a card has of its own (a serial, even DCGM's "not
        supported", a UUID, a PCI address): DCGM 4's entity_groups, 3.3's serials; older 3.x documents do not."""
        return bool(self.serials or self.uuids or self.bus_ids or self.entities)

    def named(self, name: str) -> list[Test]:
        return [test for test in self.tests if test.name == name]

    def for_gpu(self, name: str, gpu: int) -> list[Result]:
        """Every result of test `name` that covers GPU `gpu` (a result for every GPU included)."""
        return [r for test in self.named(name) for r in test.results
                if r.entity_group == "GPU" and (r.gpus is None or gpu in r.gpus)]


def canonical(name: str, category: str) -> str:
    """DCGM 4's plugin name for a test as either version names it; 3.x's deployment checks are `software`."""
    if category.strip().lower() == "deployment":
        return SOFTWARE
    slug = re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")
    return _RENAMED.get(slug, slug)


def _document(text: str) -> dict[str, Any]:
    """The JSON document dcgmi printed, after whatever it printed before it."""
    start = text.find("{")
    if start < 0:
        raise ParseError(TOOL, "no JSON document in the output", text.strip().splitlines()[0] if text.strip() else "")
    try:
        document, _end = json.JSONDecoder().raw_decode(text, start)
    except ValueError as exc:
        raise ParseError(TOOL, f"the JSON document is not whole ({exc.args[0]})") from None
    if not isinstance(document, dict):
        raise ParseError(TOOL, "the JSON is not a document", text[start:start + 80])
    return document


def _gpus(result: dict[str, Any]) -> tuple[int, ...] | None:
    """The GPUs a result is for: 4.x entity_id, 3.x gpu_ids ("0,1,2" or 0) or gpu_id; None where none is named."""
    for key in ("entity_id", "gpu_ids", "gpu_id"):
        if key in result:
            value = result[key]
            words = [value] if isinstance(value, int) else str(value).split(",")
            try:
                return tuple(int(str(w).strip()) for w in words if str(w).strip())
            except ValueError:
                raise ParseError(TOOL, f"a result whose {key} is not a GPU id", str(value)) from None
    return None


def _strings(value: Any) -> tuple[str, ...]:
    """`info` as a list of lines or one line (3.x wrote both)."""
    if value is None:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _findings(value: Any) -> tuple[Finding, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    return tuple(Finding(str(w.get("warning", "")), _number(w.get("error_id")), _number(w.get("error_category")),
                         _number(w.get("error_severity"))) if isinstance(w, dict) else Finding(str(w)) for w in items)


def _result(data: Any, check: str) -> Result:
    if not isinstance(data, dict) or "status" not in data:
        raise ParseError(TOOL, "a result without a status", json.dumps(data)[:200])
    return Result(str(data["status"]).strip().lower(), _gpus(data), _strings(data.get("info")),
                  _findings(data.get("warnings")), check, str(data.get("entity_group", "GPU")))


def _test(data: dict[str, Any], category: str) -> Test:
    shown = str(data.get("name", ""))
    results = data.get("results")
    if not shown or not isinstance(results, list):
        raise ParseError(TOOL, "a test without a name or results", json.dumps(data)[:200])
    name = canonical(shown, category)
    check = shown if name == SOFTWARE and shown.lower() != SOFTWARE else ""
    summary = data.get("test_summary")
    status = str(summary["status"]).strip().lower() if isinstance(summary, dict) and "status" in summary else None
    info = _strings(summary.get("info")) if isinstance(summary, dict) else ()
    return Test(name, shown, tuple(_result(r, check) for r in results if r is not None), status, info)


def _tests(body: dict[str, Any]) -> tuple[Test, ...]:
    categories = body.get("test_categories")
    if categories is None:
        return ()
    if not isinstance(categories, list):
        raise ParseError(TOOL, "test_categories is not a list")
    tests = []
    for category in categories:
        if not isinstance(category, dict) or not isinstance(category.get("tests"), list):
            raise ParseError(TOOL, "a category without tests", json.dumps(category)[:200])
        tests += [_test(t, str(category.get("category", ""))) for t in category["tests"] if t is not None]
    return tuple(tests)


def _either(document: dict[str, Any], body: dict[str, Any], key: str) -> Any:
    """A 3.x key at the document's root (3.1.7 and later) or in the diagnostic's object (3.1.0)."""
    return document[key] if key in document else body.get(key)


@dataclass(frozen=True, slots=True)
class Identity:
    """What a document says each GPU is, by DCGM's GPU id; `entities` the GPU ids 4.x's entity_groups list."""

    serials: dict[int, str]
    devices: dict[int, str]
    uuids: dict[int, str]
    bus_ids: dict[int, str]
    entities: tuple[int, ...] | None


def _entities(document: dict[str, Any], body: dict[str, Any]) -> Identity:
    """Serials, device IDs, UUIDs and PCI addresses: 4.x entity_groups, or 3.x "GPU Device Serials" ({"0": "..."}).
    3.x's "GPU Device IDs" is not read: dcgmi lists it packed, up to the first blank, not by GPU id."""
    serials: dict[int, str] = {}
    devices: dict[int, str] = {}
    uuids: dict[int, str] = {}
    bus_ids: dict[int, str] = {}
    listed: list[int] = []
    groups = document.get("entity_groups")
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            for entity in group.get("entities") or []:
                if isinstance(entity, dict) and isinstance(entity.get("entity_id"), int):
                    gpu = entity["entity_id"]
                    listed.append(gpu)
                    for key, into in (("serial_num", serials), ("uuid", uuids), ("pci_bus_id", bus_ids)):
                        if key in entity:
                            into[gpu] = str(entity[key]).strip()
                    if "device_id" in entity:
                        devices[gpu] = str(entity["device_id"]).lower().removeprefix("0x")
    old = _either(document, body, "GPU Device Serials")
    if isinstance(old, dict):
        serials.update({int(k): str(v).strip() for k, v in old.items() if str(k).isdigit()})
    return Identity(serials, devices, uuids, bus_ids, tuple(listed) if isinstance(groups, list) else None)


ALLOCATED = re.compile(r"Allocated (\d+) bytes \((\d+(?:\.\d+)?)%\)")
AVAILABLE = re.compile(r"from (\d+) bytes available")


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """DCGM's own words on a GPU's memory: each (bytes, percent of CUDA's total) the memory test allocated, and
    each free figure the diagnostic started from, in bytes."""

    allocated: tuple[tuple[int, float], ...]
    available: tuple[int, ...]


def memory_figures(diag: Diag, gpu: int) -> MemoryFigures:
    """The memory test's "Allocated 15206918958 bytes (97.3%)" and the diagnostic's "Allocated space for 408 output
    matricies from 13826359296 bytes available." of GPU `gpu` (3.x writes them inside one comma-joined line)."""
    def lines(test: str) -> list[str]:
        return [line for r in diag.for_gpu(test, gpu) if r.gpus is not None for line in r.info]
    allocated = [(int(n), float(p)) for line in lines("memory") for n, p in ALLOCATED.findall(line) if float(p) > 0]
    available = [int(n) for line in lines("diagnostic") for n in AVAILABLE.findall(line)]
    return MemoryFigures(tuple(allocated), tuple(available))


def parse_diag(text: str) -> Diag:
    """`dcgmi diag -j` of DCGM 3.x or 4.x, as the module docstring shows it; ParseError for anything else."""
    document = _document(text)
    shape = SHAPE_4 if SHAPE_4 in document else SHAPE_3 if SHAPE_3 in document else None
    if shape is None:
        raise ParseError(TOOL, f"neither {SHAPE_3!r} (DCGM 3) nor {SHAPE_4!r} (DCGM 4) in the document",
                         ", ".join(map(str, document))[:200])
    body = document[shape]
    if not isinstance(body, dict):
        raise ParseError(TOOL, f"{shape!r} is not an object: not a diagnostic's output", json.dumps(body)[:200])
    found = document.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    version = metadata.get("version", _either(document, body, "version"))
    driver = metadata.get("Driver Version Detected", _either(document, body, "Driver Version Detected"))
    ids = _entities(document, body)
    error = body.get("runtime_error") or document.get("runtime_error")
    return Diag(shape, None if version is None else str(version), None if driver is None else str(driver),
                _tests(body), ids.serials, ids.devices, None if not error else str(error), ids.uuids, ids.bus_ids,
                ids.entities)


def run_diag(runner: ToolRunner, run: str, timeout_s: float) -> tuple[ToolRun, Reading[Diag]]:
    """`dcgmi diag -r RUN -j` once: the run, and its output read whatever the exit code DCGM gives a failed test
    (EXIT_ERRORS; the judge compares the code with what the JSON says). Any other failure is the run's."""
    done = runner.run(TOOL, ["diag", "-r", run, "-j"], timeout_s, key=f"dcgmi_diag_-r_{run}_-j")
    judged_apart = done.returncode in EXIT_ERRORS and not done.timed_out and not done.error
    return done, parse_run(replace(done, returncode=0) if judged_apart else done, parse_diag)
