"""A re-test's pytest glue (`--gpuaccept-rerun-failed=BUNDLE`, docs/rerun.md): the tests whose checks passed in the
old bundle are deselected (so their clause's measurement runs only where one of its checks is measured again), the
host is the old bundle's, each carried check is written into the new bundle as not measured naming the old bundle's
digest, and the terminal says what was re-measured and carried: RE-TEST PASSED or FAILED, never an acceptance."""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import pytest

from .clauses import cluster, registry
from .cluster.rerun import Previous, other_host
from .report import ITEM_PROPERTY
from .state import State
from .verdict import Check, Outcome, Verdict

RETEST_FILE = "retest.json"  # in the evidence: the old bundle's digest, what was re-measured and what carried


class Retest:
    """Registered by plugin.pytest_configure where --gpuaccept-rerun-failed names a bundle that verified."""

    def __init__(self, state: State, previous: Previous) -> None:
        self.state, self.previous = state, previous
        self.carried: list[tuple[str, str]] = []

    def _line(self, config: pytest.Config, line: str) -> None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(line)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The old bundle is of this host (hostname and GPU UUIDs as NVML gives them), read before anything is
        measured; a cluster's login node is pinned by the contract's SHA-256 (its nodes are the contract's)."""
        if not self.state.is_controller or self.state.mode == "replay" or cluster.SECTION.get(self.state.contract):
            return
        host = self.state.host()
        if host.error:  # no reading to compare: the run measures and fails what it cannot read; carried stay unmeasured
            self._line(session.config, f"gpuaccept re-test: this host's NVML could not be read ({host.error}): it is not "
                                       "compared with the old bundle's host")
            return
        differs = other_host(self.previous.host, host.hostname, [g.uuid for g in host.gpus])
        if differs is not None:
            raise pytest.UsageError(f"--gpuaccept-rerun-failed: the bundle {self.previous.path} measured another host "
                                    f"({differs}): re-test the host it measured")

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """After the plugin's own (which tags each test with its clause and subject): a test whose check passed in the
        old bundle is deselected, with a line saying how many."""
        keep, carried = [], []
        for item in items:
            tagged = [json.loads(str(value)) for name, value in item.user_properties if name == ITEM_PROPERTY]
            if tagged and self.previous.passed(tagged[0]["clause"], tagged[0]["subject"]):
                carried.append(item)
            else:
                keep.append(item)
        if carried:
            config.hook.pytest_deselected(items=carried)
        for item in carried:  # known now: the cluster's measurements read them (cluster/run.py, which pairs passed)
            tagged = json.loads(str(dict(item.user_properties)[ITEM_PROPERTY]))
            self._carry(tagged["clause"], tagged["subject"])
        items[:] = keep
        self._line(config, f"gpuaccept re-test of {self.previous.digest[:16]}: {_checks(len(keep))} re-measured, "
                           f"{len(carried)} carried from the old bundle (deselected: they passed there)")

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None]:
        """Before the run is judged: each expected check this run did not judge that passed in the old bundle is a
        carried check (not measured, naming the old bundle); the re-test's own record sealed in the evidence."""
        if self.state.is_controller and not session.config.option.collectonly:
            names = registry.expected_checks(self.state.contract, self.state.listings)
            for clause, subject in ((c, str(s)) for c, s in names):
                if (clause, subject) not in self.state.checks and self.previous.passed(clause, subject):
                    self._carry(clause, subject)  # (under xdist the controller collects nothing: carried here)
            self.state.runner.evidence.write_json(RETEST_FILE, self.record())
        return (yield)

    def _carry(self, clause: str, subject: str) -> None:
        """A check that passed in the old bundle, not measured in this one: its words name that bundle."""
        check = Verdict(clause, subject).not_measured(self.previous.carried(clause, subject),
                                                      {"carried_from": self.previous.digest})
        self.state.checks[(clause, subject)] = replace(check, test="")
        self.carried.append((clause, subject))

    def remeasured(self) -> list[Check]:
        """The checks this run judged itself (every check but the carried)."""
        carried = set(self.carried)
        return [c for key, c in self.state.checks.items() if key not in carried]

    def record(self) -> dict[str, Any]:
        """retest.json: the old bundle, the re-test's verdict, each re-measured check (before and now), each carried."""
        remeasured = self.remeasured()
        return {"retest_of": {"digest": self.previous.digest, "bundle": self.previous.path},
                "verdict": self.verdict(remeasured),
                "remeasured": [{"clause": c.clause, "subject": c.subject, "outcome": c.outcome.value,
                                "before": str(self.previous.checks.get((c.clause, c.subject), {}).get("outcome"))}
                               for c in remeasured],
                "carried": [{"clause": clause, "subject": subject,
                             **{k: self.previous.checks.get((clause, subject), {}).get(k) for k in ("measured", "unit")}}
                            for clause, subject in self.carried]}

    def verdict(self, remeasured: list[Check]) -> str:
        """RE-TEST PASSED where every re-measured check passed (at least one), else RE-TEST FAILED."""
        return "passed" if remeasured and all(c.outcome is Outcome.PASSED for c in remeasured) else "failed"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.state.is_controller:
            return
        remeasured = self.remeasured()
        counts = {o: sum(c.outcome is o for c in remeasured) for o in Outcome}
        word = self.verdict(remeasured).upper()
        terminalreporter.write_line(
            f"gpuaccept re-test of {self.previous.digest[:16]}: {_checks(len(remeasured))} re-measured "
            f"({counts[Outcome.PASSED]} passed, {counts[Outcome.FAILED]} failed, {counts[Outcome.NOT_MEASURED]} not "
            f"measured), {len(self.carried)} carried from the old bundle: RE-TEST {word}"
            + (" (not an acceptance: the carried checks were not measured in this run)" if self.carried else ""),
            bold=True, green=word == "PASSED", red=word != "PASSED")


def _checks(count: int) -> str:
    return f"{count} check" + ("" if count == 1 else "s")
