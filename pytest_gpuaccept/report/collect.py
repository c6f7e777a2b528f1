"""The run judged as a whole: every check the contract asked for (not measured where none came), the parts a
section gathers (a cluster's nodes), the verdict, and what a signer needs to trust it (tools, plugins, foreign
files). Written once, as the results file and its sealed copy in the evidence."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Sequence

import pytest

from .. import __version__
from ..bundle import CONTRACT_COPY, RESULTS_COPY
from ..clauses import registry
from ..evidence import Evidence, ForeignEvidence
from ..foreign import Audit, audit
from ..integrity import loaded_plugins, replaced_code
from ..probes.nvml import Host
from ..probes.provenance import flags
from ..state import State, now
from ..verdict import Check, Verdict, verdict_of
from .results import Results, sources

PLUGINS_FILE = "plugins.json"


def judged(state: State, config: pytest.Config, interrupted: bool, other_failures: int) -> tuple[Results, Path]:
    """Judge what was asked and never checked, gather each section's part, write the evidence's own files; the
    results (not yet written) and the path their copy in the evidence is to be written to."""
    every, complete = _every_check(state, interrupted)
    checks: Sequence[Check] = every  # a cluster's: its own, then every node's, read one node at a time (merge.py)
    hosts = None
    evidence = state.runner.evidence
    for part in registry.REPORT_PARTS:
        if part.gather is not None:
            checks, gathered = part.gather(checks, evidence)
            hosts = gathered if gathered is not None else hosts
    # What the run writes itself goes in first (a planted file of the same name is moved aside).
    evidence.write(CONTRACT_COPY, state.contract.raw)  # the bytes that were judged, not the file now
    plugins = loaded_plugins(config.pluginmanager.list_name_plugin(), _distributions(config))
    evidence.write(PLUGINS_FILE, json.dumps(plugins, indent=1).encode())
    results_copy = evidence.claim(RESULTS_COPY)
    foreign = evidence.foreign()  # anything the runner did not write, or that changed since: never trusted
    audited = audit_code(state, config)
    foreign_code = sorted(set(state.foreign_code + replaced_code() + audited.findings))
    verdict = verdict_of(checks, complete)
    if other_failures or foreign or foreign_code:
        verdict = "rejected"
    replayed = state.runner.replay_dir
    recorded = None if state.runner.replay is None else state.runner.replay.identity()
    return Results(
        verdict=verdict, mode=state.mode, sources=sources(state.sys_root.resolve(), state.nvml_recording, replayed),
        complete=complete, started=state.started, finished=now(),
        contract=contract_facts(state), host=host_summary(state.host()), checks=checks,
        not_in_contract=registry.not_in_contract(state.contract), report=str(state.report_path),
        evidence=str(state.evidence_dir), tool_version=__version__, cluster_node=state.contract.node, hosts=hosts,
        replayed_from=None if replayed is None else str(replayed),
        recorded=recorded,
        other_failures=other_failures, foreign_evidence=foreign, foreign_code=foreign_code, plugins=plugins,
        code_audit=audited.listing,
        tools=tools_run(evidence), contract_warnings=list(state.advice),
        records={part.key: part.record(evidence) for part in registry.REPORT_PARTS if part.record is not None}), results_copy


def audit_code(state: State, config: pytest.Config) -> Audit:
    """The foreign code in this process (foreign.py), with the contract's allow-list, the -p names given and the
    rootdir its conftests and test modules are named from."""
    return audit(config.pluginmanager, state.contract.tools.allow_plugins, config.option.plugins or [],
                 str(config.rootpath))


def _every_check(state: State, interrupted: bool) -> tuple[list[Check], bool]:
    """Every check the contract asks for, in the plan's order (those that never came, not measured), then any
    other; and whether every one came."""
    expected = [(clause, str(subject)) for clause, subject in registry.expected_checks(state.contract, state.listings)]
    complete = not interrupted
    for clause, subject in expected:
        if (clause, subject) not in state.checks:
            complete = False
            reason = "interrupted before it ran" if interrupted else "did not run (deselected, or the run stopped early)"
            state.checks[(clause, subject)] = replace(Verdict(clause, subject).not_measured(reason), test="")
    order = {key: n for n, key in enumerate(expected)}
    checks = sorted(state.checks.values(), key=lambda c: order.get((c.clause, c.subject), len(order)))
    return checks, complete


def fallback(state: State, exc: Exception) -> Results:
    """Results written when judging itself crashed: never accepted."""
    return Results(verdict="rejected", complete=False, started=state.started, finished=now(),
                   contract=contract_facts(state), host={}, checks=list(state.checks.values()),
                   error=f"pytest-gpuaccept failed while judging: {type(exc).__name__}: {exc}")


def contract_facts(state: State) -> dict[str, Any]:
    contract = state.contract
    return {"path": contract.path, "sha256": contract.sha256, "vendor": contract.vendor,
            "reference": contract.reference}


def host_summary(host: Host) -> dict[str, Any]:
    """The `host` object of the results: informational, what could be read."""
    summary: dict[str, Any] = {
        "hostname": host.hostname, "driver": host.driver, "cuda": host.cuda,
        "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "serial": g.serial,
                  # A tray of a multi-node NVLink domain: the login node judges the trays' fabric from these.
                  **({"fabric": asdict(g.fabric)} if g.fabric is not None else {})} for g in host.gpus],
    }
    if host.error:
        summary["error"] = host.error
    return summary


def tools_run(evidence: Evidence) -> list[dict[str, Any]]:
    """Every executable this run started, once each, with its provenance and what a signer should look at twice."""
    seen: dict[str, dict[str, Any]] = {}
    for path in sorted(evidence.folder.glob("*.json")):
        if not path.with_suffix(".txt").is_file():
            continue  # a reading (NVML, sysfs), not a run record: a run keeps its output as <key>.txt
        try:
            raw = evidence.read(path.name)
            record = json.loads(raw) if raw else None
        except (ForeignEvidence, ValueError):
            continue
        origin = record.get("provenance") if isinstance(record, dict) else None
        if isinstance(origin, dict) and origin.get("resolved") and origin["resolved"] not in seen:
            tool = str(origin.get("tool", ""))
            seen[origin["resolved"]] = {**origin, "flags": flags(origin, expects_binary=tool != "python")}
    return list(seen.values())


def _distributions(config: pytest.Config) -> dict[int, str]:
    """name==version of each plugin's distribution, by id(plugin)."""
    return {id(plugin): name_version(dist) for plugin, dist in config.pluginmanager.list_plugin_distinfo()}


def name_version(dist: Any) -> str:
    """name==version of an importlib.metadata distribution (pluggy hands it over as a DistFacade)."""
    return f"{dist.metadata['Name']}=={dist.version}"


def environment(config: pytest.Config) -> dict[str, Any]:
    """pytest-metadata's table (Python, platform, plugins of the machine that judged): shown at the end."""
    try:
        from pytest_metadata.plugin import metadata_key  # noqa: PLC0415 - pytest-html's dependency, optional here
    except ImportError:
        return {}
    return dict(config.stash.get(metadata_key, {}))
