"""Checks and the one builder that makes them: outcome, measured value with unit, threshold as data.

A judge starts from its clause (`CLAUSE.verdict(subject, required, evidence)`: key and unit come from the
clause record) and then says what it found (`passed`, `failed`, `not_measured`, `at_least`); nothing else
constructs a Check. A user's own test builds its `Verdict(clause, subject, required, unit)` directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping, Sequence, Union

from .subjects import Subject

Measured = Union[float, int, str, None]


class Outcome(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_MEASURED = "not_measured"

    def __str__(self) -> str:
        return self.value


NOT_MEASURED_PREFIX = "not measured: "


@dataclass(frozen=True, slots=True)
class Check:
    """One judged clause for one subject, as the results JSON lists it."""

    clause: str
    subject: str
    outcome: Outcome
    measured: Measured
    unit: str | None
    required: str
    message: str
    evidence: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    threshold: float | None = None  # the numeric bound behind `required`, where there is one
    test: str | None = None  # the test that judged it, once the report collected it
    node: str | None = None  # a cluster's node whose check this is (its subject `<node>/<subject>`)

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    def to_dict(self) -> dict[str, Any]:
        """The check as the results JSON lists it (results.md): details, threshold, test and node only where
        there is one. Shallow: details are data, never changed after judging (so never copied)."""
        data: dict[str, Any] = {"clause": self.clause, "subject": self.subject, "outcome": self.outcome.value,
                                "measured": self.measured, "unit": self.unit, "required": self.required,
                                "message": self.message, "evidence": list(self.evidence)}
        if self.details:
            data["details"] = self.details
        if self.threshold is not None:
            data["threshold"] = self.threshold
        if self.test is not None:
            data["test"] = self.test
        if self.node is not None:
            data["node"] = self.node
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        """A check from its JSON (a test's JUnit property, a cluster node's results); KeyError without clause
        or subject. An outcome that is none of the three is not measured: never a pass."""
        details, evidence, threshold = data.get("details"), data.get("evidence"), data.get("threshold")
        test, node = data.get("test"), data.get("node")
        return cls(str(data["clause"]), str(data["subject"]), _OUTCOMES.get(data.get("outcome"), Outcome.NOT_MEASURED),
                   data.get("measured"), data.get("unit"), str(data.get("required") or ""), str(data.get("message") or ""),
                   tuple(map(str, evidence)) if isinstance(evidence, list) else (),
                   details if isinstance(details, dict) else {},
                   float(threshold) if isinstance(threshold, (int, float)) else None,
                   None if test is None else str(test), None if node is None else str(node))


_OUTCOMES: dict[Any, Outcome] = {outcome.value: outcome for outcome in Outcome}


def verdict_of(checks: Sequence[Check], complete: bool) -> str:
    """accepted only when the run is complete, at least one check ran, and every check passed."""
    return "accepted" if complete and checks and all(c.outcome is Outcome.PASSED for c in checks) else "rejected"


def fmt(value: float | int) -> str:
    """A number as messages show it: at most two decimals, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a judge knows before it looks: clause, subject, requirement, unit, evidence."""

    clause: str
    subject: Subject | str
    required: str = ""
    unit: str | None = None
    evidence: tuple[str, ...] = ()
    threshold: float | None = None

    def but(self, **changes: Any) -> Verdict:
        return replace(self, **changes)

    def _check(self, outcome: Outcome, measured: Measured, message: str, details: dict[str, Any] | None) -> Check:
        return Check(self.clause, str(self.subject), outcome, measured, self.unit, self.required, message,
                     self.evidence, details or {}, self.threshold)

    def passed(self, measured: Measured, message: str, details: dict[str, Any] | None = None) -> Check:
        return self._check(Outcome.PASSED, measured, message, details)

    def failed(self, measured: Measured, message: str, details: dict[str, Any] | None = None) -> Check:
        return self._check(Outcome.FAILED, measured, message, details)

    def judged(self, ok: bool, measured: Measured, message: str, details: dict[str, Any] | None = None) -> Check:
        return self._check(Outcome.PASSED if ok else Outcome.FAILED, measured, message, details)

    def not_measured(self, reason: str, details: dict[str, Any] | None = None) -> Check:
        return self._check(Outcome.NOT_MEASURED, None, NOT_MEASURED_PREFIX + reason, details)

    def at_least(self, measured: float, minimum: float, what: str, details: dict[str, Any] | None = None,
                 where: str = "", suffix: str = "") -> Check:
        """measured >= minimum passes: the threshold alone. Whether `measured` is a measurement at all (plausible,
        this run's, the sizes asked) is the clause's sanity, judged before (plausible.py, ReFrame's sanity apart from
        its performance).

        The message reads `{what} {measured} {unit}{where} >= {minimum} {unit}{suffix}`.
        """
        v = self.but(required=f">= {fmt(minimum)}", threshold=minimum)
        shown = round(measured, 3) if isinstance(measured, float) else measured
        ok = shown >= minimum
        return v.judged(ok, shown, f"{what} {fmt(shown)} {self.unit}{where} {'>=' if ok else '<'} {fmt(minimum)} {self.unit}{suffix}",
                        details)
