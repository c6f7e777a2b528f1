"""A re-test (`--gpuaccept-rerun-failed=BUNDLE`): the old bundle read as data, what it left to measure again, and
in a cluster the rounds that find the bad node or link with few jobs: the suspects of failed pairs against
known-good nodes, then halving for a whole-cluster all_reduce failure no pair explains (docs/rerun.md).

Pairs: each node the old pass's blame named bad meets known-good nodes (the blame cleared them), each bad link and
unmeasured pair runs again as it was, then every old failed pair whose nodes the new blame does not name ("confirm").

The planners are pure: a round is a list of jobs (each the nodes of one all_reduce, in the order its ring runs
through them), run at once by a `Runner` that says which passed; no node is in two jobs of one round.

Halving: round 1 runs the whole again (it may pass now: fixed). A failing set is split in two contiguous halves
(in the ring's order), both run in the next round; each half is padded with known-good nodes (nodes of a job that
passed, outside every failing set) up to the size of the smallest job the set failed in, where there are enough, so
that a fault that shows only in a large job (one node past some number of ranks) still shows in the half that holds
it. A failing half is split again; a failing half of one node names the node; a set of two whose halves pass names
the link between them. Where both halves pass and the set failed, the fault needs nodes of both halves: the next
round runs the two windows across the halves' boundary (A's second half with B's first: the ring's step from A's
last node to B's first; and B's second half with A's first: the step back), then, where both pass, the other two
ways across (A's first half with B's first, A's second with B's second): every quarter of A has then met every
quarter of B. A failing window is a set whose halves are known to pass: its own windows come next, down to two nodes,
which name their link. At most `round_limit(n)` = ceil(log2 n) + 1 rounds (5 for 16 nodes); a set still failing
then, or one whose every window passed, is named as not isolated: never passed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bundle import RESULTS_COPY, RESULTS_FORMAT, verify
from ..bundle_files import Refused
from ..untrusted import finite, shown
from .pairs import SECOND_PASS_PARTNERS, Blame, Pair, blame

Job = tuple[str, ...]  # the nodes of one all_reduce, in the order its ring runs through them
Runner = Callable[[list[Job]], list[bool]]  # a round's jobs, all at once: whether each passed


# ------------------------------------------------------------------ the old bundle


class NotRetestable(Exception):
    """The bundle --gpuaccept-rerun-failed names cannot be re-tested here: one line saying why and what differs."""


@dataclass(frozen=True, slots=True)
class Previous:
    """The bundle a re-test starts from: its digest (the SHA-256 of its manifest), its checks by (clause, subject)
    as its sealed results state them, the host they name, and whether its run was complete."""

    path: str
    digest: str
    checks: dict[tuple[str, str], dict[str, Any]]
    host: dict[str, Any]
    complete: bool = True  # every check it was to make came (an interrupted run's missing ones are measured again)

    def passed(self, clause: str, subject: str) -> bool:
        """Whether the old bundle's check passed (a check it lacks did not)."""
        check = self.checks.get((clause, subject))
        return check is not None and check.get("outcome") == "passed"

    def failed(self) -> list[tuple[str, str]]:
        """Every check of the old bundle that did not pass (failed or not measured)."""
        return [key for key in self.checks if not self.passed(*key)]

    def carried(self, clause: str, subject: str) -> str:
        """What a carried check says in the new bundle: passed in which bundle, with what, and not measured now."""
        check = self.checks.get((clause, subject)) or {}
        measured, unit = finite(check.get("measured")), check.get("unit")  # the old bundle's words: a number, escaped
        value = "" if measured is None else f" ({measured:g}{' ' + shown(unit, 20) if unit else ''})"
        return (f"carried from bundle {self.digest[:16]}: passed there{value}; not measured in this re-test "
                "(--gpuaccept-rerun-failed)")


def carried_record(record: Any) -> Previous:
    """The re-test a bundle's own record (retest.json) states, as a Previous that carries the same checks with the same
    words: what a replay or re-judge of a re-test's bundle deselects and carries (it can only leave checks not
    measured, never pass one). NotRetestable where the record is not one this project writes."""
    try:
        of = record["retest_of"]
        checks: dict[tuple[str, str], dict[str, Any]] = {
            (str(c["clause"]), str(c["subject"])): {"outcome": "passed", "measured": c.get("measured"),
                                                     "unit": c.get("unit")} for c in record["carried"]}
        checks.update({(str(c["clause"]), str(c["subject"])): {"outcome": str(c.get("before"))}
                       for c in record["remeasured"]})
        return Previous(str(of["bundle"]), str(of["digest"]), checks, {})
    except (KeyError, TypeError, AttributeError) as exc:
        raise NotRetestable(f"the bundle's retest.json is not a re-test's record: {shown(exc)}") from None


def previous(path: Path, contract_sha256: str) -> Previous:
    """The bundle at `path` opened as data (bundle_files: nothing it names is run, imported or followed), every digest
    checked, its sealed results read strictly; NotRetestable where it is not there, is not a bundle, does not verify,
    is of another results format or judged another contract."""
    name = f"the bundle {shown(str(path))}"
    if not path.exists():
        raise NotRetestable(f"{name} does not exist: name the folder of the bundle (or its gpuaccept-evidence "
                            "folder) whose failed checks to measure again")
    checked = verify(path)
    if not checked.ok or checked.bundle is None:
        raise NotRetestable(f"{name} does not verify: " + "; ".join(shown(p, 300) for p in checked.problems[:5]))
    try:
        results = checked.bundle.read_json(RESULTS_COPY)
    except (Refused, OSError) as exc:
        raise NotRetestable(f"{name}: its results cannot be read: {exc}") from None
    if not isinstance(results, dict) or results.get("gpuaccept") != RESULTS_FORMAT:
        raise NotRetestable(f"{name}: its results are not results format {RESULTS_FORMAT}")
    contract = results.get("contract")
    theirs = str(contract.get("sha256") if isinstance(contract, dict) else None)
    if theirs != contract_sha256:
        raise NotRetestable(f"{name} judged another contract (SHA-256 {shown(theirs[:16], 16)}... there, "
                            f"{contract_sha256[:16]}... here): re-test with the contract it judged")
    checks: dict[tuple[str, str], dict[str, Any]] = {}
    for check in results.get("checks") or []:
        if isinstance(check, dict):
            checks[(str(check.get("clause")), str(check.get("subject")))] = check
    host = results.get("host")
    return Previous(str(path), checked.manifest_sha256, checks, host if isinstance(host, dict) else {},
                    results.get("complete") is True)


def other_host(old: Mapping[str, Any], hostname: str, uuids: Sequence[str]) -> str | None:
    """What differs between the host the old bundle measured and this one (hostname, the GPUs' UUIDs as NVML gives
    them), in words; None where both are the same host."""
    differs = []
    theirs = str(old.get("hostname") or "")
    if theirs != hostname:
        differs.append(f"hostname {shown(theirs, 80)!r} there, {shown(hostname, 80)!r} here")
    old_uuids = sorted(str(g.get("uuid")) for g in old.get("gpus") or [] if isinstance(g, dict))
    if old_uuids != sorted(uuids):
        gone = sorted(set(old_uuids) - set(uuids))
        came = sorted(set(uuids) - set(old_uuids))
        differs.append(f"GPUs {len(old_uuids)} there, {len(uuids)} here"
                       + (f"; only there: {shown(', '.join(gone[:4]), 200)}" if gone else "")
                       + (f"; only here: {shown(', '.join(came[:4]), 200)}" if came else ""))
    return "; ".join(differs) or None


def carried(checks: Mapping[tuple[str, str], Any]) -> dict[tuple[str, str], str]:
    """The checks a re-test carried, as the session holds them from its collection on (their details name the bundle
    they passed in): (clause, subject) -> that bundle's digest. Empty in a run that is no re-test."""
    found = {}
    for key, check in checks.items():
        details = getattr(check, "details", None)
        source = details.get("carried_from") if isinstance(details, dict) else None
        if source:
            found[key] = str(source)
    return found


def old_pairs(planned: Sequence[Sequence[Pair]], passed: set[str]) -> dict[Pair, bool]:
    """The old bundle's pairs as a re-test knows them: the same plan (the same contract and nodes give the same pairs),
    each passed where its check was carried (subject `a+b`), else failed (or not measured: run again all the same)."""
    return {(a, b): f"{a}+{b}" in passed for pairing in planned for a, b in pairing}


# ------------------------------------------------------------------ the rounds


@dataclass(frozen=True, slots=True)
class Round:
    """One round of a re-test: its jobs (each the nodes of one all_reduce) run at once, and which passed."""

    number: int
    stage: str  # "suspects", "whole", "halves" or "boundary"
    jobs: tuple[Job, ...]
    passed: tuple[bool, ...]

    def record(self) -> dict[str, Any]:
        return {"round": self.number, "stage": self.stage,
                "jobs": [{"nodes": list(job), "passed": ok} for job, ok in zip(self.jobs, self.passed)]}


def _run_round(run: Runner, rounds: list[Round], stage: str, jobs: list[Job]) -> list[bool]:
    for job in jobs:
        if len(job) != len(set(job)):
            raise ValueError(f"a job names a node twice: {job}")
    busy = [node for job in jobs for node in job]
    if len(busy) != len(set(busy)):
        raise ValueError(f"a node is in two jobs of round {len(rounds) + 1}")
    passed = [bool(ok) for ok in run(jobs)]
    if len(passed) != len(jobs):
        raise ValueError(f"the runner answered {len(passed)} of {len(jobs)} jobs")
    rounds.append(Round(len(rounds) + 1, stage, tuple(jobs), tuple(passed)))
    return passed


def round_limit(nodes: int) -> int:
    """The rounds halving may take for `nodes` nodes: ceil(log2 n) + 1 (the whole, then one a halving)."""
    return math.ceil(math.log2(nodes)) + 1 if nodes > 1 else 1


def _disjoint_rounds(wanted: list[Pair]) -> list[list[Pair]]:
    """`wanted` pairs packed first-fit into rounds in which no node is twice."""
    out: list[tuple[list[Pair], set[str]]] = []
    for pair in wanted:
        for pairing, busy in out:
            if not busy & set(pair):
                pairing.append(pair)
                busy.update(pair)
                break
        else:
            out.append(([pair], set(pair)))
    return [pairing for pairing, _busy in out]


def suspect_rounds(old: Mapping[Pair, bool | None], partners: int = SECOND_PASS_PARTNERS) -> list[list[Pair]]:
    """The pairs a re-test runs for the old bundle's failed pairs, in rounds of disjoint pairs: each node its blame
    named bad with `partners` known-good nodes (nodes of the old pass that no blame named), each bad link again as it
    was, each pair that was not measured again as it was. The known-good nodes are dealt out so that the bad nodes of
    one round meet different ones. Empty where every pair passed."""
    measured = {pair: ok for pair, ok in old.items() if ok is not None}
    found = blame(measured)
    again = [pair for pair, ok in old.items() if ok is None]
    involved = set(found.bad_nodes) | {n for pair in (*found.bad_links, *again) for n in pair}
    good = [n for n in dict.fromkeys(n for pair in measured for n in pair) if n not in involved]
    wanted: list[Pair] = [*found.bad_links, *again]
    for k in range(min(partners, len(good))):
        for i, node in enumerate(found.bad_nodes):
            wanted.append((node, good[(i * partners + k) % len(good)]))
    return _disjoint_rounds(wanted)


@dataclass(frozen=True, slots=True)
class Found:
    """What a re-test's rounds found: the bad nodes and links, the failing sets it could not make smaller (never
    passed), and every round it ran."""

    rounds: tuple[Round, ...]
    bad_nodes: tuple[str, ...] = ()
    bad_links: tuple[Pair, ...] = ()
    not_isolated: tuple[Job, ...] = ()

    @property
    def fixed(self) -> bool:
        """Nothing found: every job of the last rounds passed (the old failure does not show now)."""
        return not (self.bad_nodes or self.bad_links or self.not_isolated)

    @property
    def jobs(self) -> int:
        """All_reduce jobs launched."""
        return sum(len(r.jobs) for r in self.rounds)

    @property
    def pair_runs(self) -> int:
        """2-node all_reduce jobs launched."""
        return sum(len(job) == 2 for r in self.rounds for job in r.jobs)

    def lines(self) -> list[str]:
        """What was found, one line each, naming the rounds and jobs it took."""
        said = [f"node {n} fails" for n in self.bad_nodes]
        said += [f"the link between {a} and {b} fails (the two together)" for a, b in self.bad_links]
        said += [f"{len(s)} nodes fail together ({', '.join(s[:8])}{' ...' if len(s) > 8 else ''}): not isolated "
                 f"further in {len(self.rounds)} rounds" for s in self.not_isolated]
        return [*(said or ["nothing fails now"]), f"{len(self.rounds)} rounds, {self.jobs} jobs ({self.pair_runs} of "
                                                  "2 nodes)"]

    def record(self) -> dict[str, Any]:
        """What a bundle seals of the re-test: every round (its jobs, their nodes, their results), and what it named."""
        return {"rounds": [r.record() for r in self.rounds], "bad_nodes": list(self.bad_nodes),
                "bad_links": [list(link) for link in self.bad_links],
                "not_isolated": [list(s) for s in self.not_isolated]}


def retest_pairs(old: Mapping[Pair, bool | None], run: Runner, partners: int = SECOND_PASS_PARTNERS) -> tuple[Found, Blame]:
    """The suspect rounds run (each pair a 2-node job), and the blame their results put: a node that fails with most
    of the known-good nodes it met is bad; a bad link that fails again is a bad link. Then every old failed pair not
    run yet whose nodes the blame does not name now runs again ("confirm": a repaired node's pairs are measured, so
    that its re-test can pass); only the pairs of a node still bad are left, as that node's."""
    rounds: list[Round] = []
    results: dict[Pair, bool] = {}
    for pairing in suspect_rounds(old, partners):
        results.update(zip(pairing, _run_round(run, rounds, "suspects", list(pairing))))
    found = blame(results)
    confirm = [pair for pair, ok in old.items() if ok is not True and pair not in results
               and (pair[1], pair[0]) not in results and not set(pair) & set(found.bad_nodes)]
    for pairing in _disjoint_rounds(confirm):
        results.update(zip(pairing, _run_round(run, rounds, "confirm", list(pairing))))
    found = blame(results)
    return Found(tuple(rounds), found.bad_nodes, found.bad_links), found


@dataclass(frozen=True, slots=True)
class _Open:
    """A set of nodes whose job failed and that nothing smaller explains yet, in its ring's order."""

    nodes: Job
    size: int  # the smallest job it failed in: the jobs of its parts are padded up to this
    stage: str = "halves"  # "halves": each half; "boundary": both passed, the windows across; "crossed": the others
    split: int = 0  # where its two halves meet (0: the middle)

    def halves(self) -> tuple[Job, Job]:
        middle = self.split or len(self.nodes) // 2
        return self.nodes[:middle], self.nodes[middle:]

    def windows(self) -> list[tuple[Job, int]]:
        """The two windows across its halves' boundary, each with where its own halves meet: the second half of A
        and the first half of B (holding the ring's step from A's last node to B's first), and the rest (from B's
        last to A's first). A window of one node holds no step: left out."""
        a, b = self.halves()
        qa, qb = max(1, len(a) // 2), max(1, len(b) // 2)
        found = [(a[len(a) - qa:] + b[:qb], qa), (b[qb:] + a[:len(a) - qa], len(b) - qb)]
        return [(window, split) for window, split in found if len(window) >= 2 and 0 < split < len(window)]

    def crossed(self) -> list[tuple[Job, int]]:
        """The other two ways across: A's first half with B's first half, A's second half with B's second (with the
        windows, every quarter of A has met every quarter of B)."""
        a, b = self.halves()
        qa, qb = max(1, len(a) // 2), max(1, len(b) // 2)
        found = [(a[:qa] + b[:qb], qa), (a[qa:] + b[qb:], len(a) - qa)]
        return [(window, split) for window, split in found if len(window) >= 2 and 0 < split < len(window)]


def _padded(parts: list[tuple[Job, int]], pool: list[str]) -> list[Job]:
    """Each part followed by known-good nodes from `pool` up to its size, one pad at a time to each part in turn
    (fewer where the pool runs out); what is used leaves the pool."""
    jobs = [list(part) for part, _size in parts]
    while pool and any(len(job) < size for job, (_part, size) in zip(jobs, parts)):
        for job, (_part, size) in zip(jobs, parts):
            if pool and len(job) < size:
                job.append(pool.pop(0))
    return [tuple(job) for job in jobs]


def _judged(o: _Open, failing: list[tuple[Job, int, int]], later: list[_Open], bad_nodes: list[str],
            bad_links: list[Pair], stuck: list[Job]) -> None:
    """What a round's jobs of one open set say: a failing part of one node is bad, a failing window of two their link,
    a larger failing part the next set to look into; where nothing failed, the next way to look or not isolated."""
    for part, split, size in failing:
        if len(part) == 1:
            bad_nodes.append(part[0])
        elif len(part) == 2 and o.stage != "halves":  # a window of two: the step between them
            bad_links.append((part[0], part[1]))
        else:  # a window's halves are parts of halves that passed: its own windows next
            later.append(_Open(part, size, "halves" if o.stage == "halves" else "boundary", split))
    if failing:
        return
    if o.stage == "halves" and len(o.nodes) == 2:  # failed together, each passes without the other
        bad_links.append((o.nodes[0], o.nodes[1]))
    elif o.stage == "halves":
        later.append(_Open(o.nodes, o.size, "boundary", o.split))
    elif o.stage == "boundary" and o.crossed():
        later.append(_Open(o.nodes, o.size, "crossed", o.split))
    else:
        stuck.append(o.nodes)


def halve(nodes: Sequence[str], run: Runner, max_rounds: int | None = None) -> Found:
    """Halving for a whole-cluster all_reduce failure (the module's docstring says how): the rounds it ran, and what
    they named; at most `max_rounds` rounds (default round_limit)."""
    order: Job = tuple(dict.fromkeys(nodes))
    limit = max_rounds if max_rounds is not None else round_limit(len(order))
    rounds: list[Round] = []
    if _run_round(run, rounds, "whole", [order])[0]:
        return Found(tuple(rounds))
    bad_nodes: list[str] = list(order) if len(order) == 1 else []
    bad_links: list[Pair] = []
    stuck: list[Job] = []
    passed: set[str] = set()
    opened = [_Open(order, len(order))] if len(order) > 1 else []
    while opened:
        if len(rounds) >= limit:
            stuck += [o.nodes for o in opened]
            break
        named = {*bad_nodes, *(n for link in bad_links for n in link), *(n for s in stuck for n in s)}
        pool = [n for n in order if n in passed and n not in named and not any(n in o.nodes for o in opened)]
        planned = []  # each open set, its parts (suspects only, with where each part's halves meet), their jobs
        for o in opened:
            parts = [(half, 0) for half in o.halves()] if o.stage == "halves" else \
                o.windows() if o.stage == "boundary" else o.crossed()
            planned.append((o, parts, _padded([(part, o.size) for part, _split in parts], pool)))
        stages = {o.stage for o in opened}
        outcomes = iter(_run_round(run, rounds, "+".join(sorted(stages)), [job for _o, _p, jobs in planned for job in jobs]))
        later: list[_Open] = []
        for o, parts, jobs in planned:
            oks = [next(outcomes) for _job in jobs]
            passed.update(n for job, ok in zip(jobs, oks) if ok for n in job)
            failing = [(part, split, len(job)) for (part, split), job, ok in zip(parts, jobs, oks) if not ok]
            _judged(o, failing, later, bad_nodes, bad_links, stuck)
        opened = later
    return Found(tuple(rounds), tuple(bad_nodes), tuple(bad_links), tuple(stuck))


@dataclass(frozen=True, slots=True)
class ClusterRetest:
    """A cluster's re-test: the suspects' rounds (where the old bundle had failed pairs) and the blame of their
    results, then halving (where its whole-cluster all_reduce failed and no pair explains it)."""

    pairs: Found | None
    pair_blame: Blame | None
    halving: Found | None
    rounds: tuple[Round, ...] = field(default=())

    @property
    def pair_runs(self) -> int:
        return sum(len(job) == 2 for r in self.rounds for job in r.jobs)

    def record(self, old_digest: str) -> dict[str, Any]:
        """What the new bundle seals: the old bundle's digest, and every round numbered in the order it ran."""
        return {"retest_of": old_digest, "rounds": [r.record() for r in self.rounds],
                "pairs": None if self.pairs is None else self.pairs.record(),
                "halving": None if self.halving is None else self.halving.record()}


def retest_cluster(nodes: Sequence[str], old_pairs: Mapping[Pair, bool | None], whole_failed: bool, run: Runner,
                   max_rounds: int | None = None) -> ClusterRetest:
    """The old bundle's failed pairs first (suspects against known-good nodes); then, where its whole-cluster
    all_reduce failed and the pairs' re-test names no node and no link, halving."""
    pairs, pair_blame = retest_pairs(old_pairs, run) if any(ok is not True for ok in old_pairs.values()) else (None, None)
    explained = pair_blame is not None and bool(pair_blame.bad_nodes or pair_blame.bad_links)
    halving = halve(nodes, run, max_rounds) if whole_failed and not explained else None
    done = [*(pairs.rounds if pairs else ()), *(halving.rounds if halving else ())]
    numbered = tuple(Round(n, r.stage, r.jobs, r.passed) for n, r in enumerate(done, start=1))
    return ClusterRetest(pairs, pair_blame, halving, numbered)
