"""--gpuaccept-rerun-failed=BUNDLE (issue 42): a re-test measures again only what did not pass in an earlier bundle.

In a cluster, the rounds are planned in process (cluster/rerun.py) and run by a fake all_reduce engine that counts
the jobs it launches: a 16-node cluster with one bad node is named again with fewer 2-node all_reduce jobs than the
first pass took; a fault that shows only in a large all_reduce is found by halving in at most ceil(log2 16) + 1 = 5
rounds. cluster/run.py's pairs and all_reduce take those rounds in a re-test, their jobs as the Slurm engine launches
them (in process, the launcher never started). On a host, the old bundle chooses the clauses measured again (the one
whole run: fake tools that log their argv); its refusals are tested in process. The old bundles are constructed here
(results, report, manifest), said so in old_bundle.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import GEMM_CPU_RUN, as_gpus
from conftest import DATA, nvml_recording, pci_tree

from pytest_gpuaccept.bundle import evidence_digest, verify, write_manifest
from pytest_gpuaccept.clauses.cluster import ClusterSection, Pairs
from pytest_gpuaccept.clauses.registry import expected_checks
from pytest_gpuaccept.cluster.engine import Slurm
from pytest_gpuaccept.cluster.pairs import blame, plan
from pytest_gpuaccept.cluster.rerun import (
    Found,
    NotRetestable,
    halve,
    other_host,
    previous,
    retest_cluster,
    round_limit,
    suspect_rounds,
)
from pytest_gpuaccept.cluster.run import RETEST_ALLREDUCE, RETEST_PAIRS, job_runner, run_allreduce, run_pairs
from pytest_gpuaccept.compare import compare, render_text
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.plugin import _previous
from pytest_gpuaccept.probes._run import ToolRun
from pytest_gpuaccept.rejudge import rejudge
from pytest_gpuaccept.retest import Retest
from pytest_gpuaccept.settings import COMMAND_LINE, Setting, Settings
from pytest_gpuaccept.units import parse_bandwidth, parse_duration, parse_size
from pytest_gpuaccept.verdict import Verdict

NODES = [f"n{i:02d}" for i in range(1, 17)]
SEED = "c" * 64  # the contract's SHA-256 seeds the first pass's plan


class FakeAllReduce:
    """An all_reduce engine of 16 nodes, `gpus` GPUs each: a job (its nodes in ring order) fails where `fault` says;
    every job launched is counted."""

    def __init__(self, fault, gpus: int = 8) -> None:
        self.fault, self.gpus, self.launched = fault, gpus, []

    def __call__(self, jobs):
        self.launched += jobs
        return [not self.fault(job, len(job) * self.gpus) for job in jobs]

    @property
    def pair_runs(self) -> int:
        return sum(len(job) == 2 for job in self.launched)


def first_pass(engine: FakeAllReduce) -> dict[tuple[str, str], bool]:
    """The first acceptance run's cluster.pairs: every pair of the 16 nodes (15 rounds of 8), as run.run_pairs plans."""
    results = {}
    for pairing in plan(NODES, SEED):
        results.update(zip(pairing, engine(list(pairing))))
    return results


def slow_node(node: str):
    return lambda job, ranks: node in job


def test_a_bad_node_of_16_is_named_again_with_fewer_pair_runs_than_the_first_pass_took():
    """The first pass ran 120 pairs to name n07; the re-test runs n07 against three nodes the first pass cleared, each
    pair a 2-node all_reduce: 3 jobs, and the same node named. The whole all_reduce is explained: no halving."""
    first = FakeAllReduce(slow_node("n07"))
    old = first_pass(first)
    assert first.pair_runs == 120 and blame(old).bad_nodes == ("n07",)
    again = FakeAllReduce(slow_node("n07"))
    found = retest_cluster(NODES, old, whole_failed=True, run=again)
    assert found.pair_blame is not None and found.pair_blame.bad_nodes == ("n07",)
    assert found.halving is None  # the pairs explain the whole's failure
    assert again.pair_runs == found.pair_runs == 3 < first.pair_runs
    partners = [a if b == "n07" else b for a, b in again.launched]
    assert len(set(partners)) == 3 and "n07" not in partners
    assert [r.stage for r in found.rounds] == ["suspects"] * 3  # one pair a round: n07 is in each
    sealed = found.record("d" * 64)
    assert sealed["retest_of"] == "d" * 64 and len(sealed["rounds"]) == 3
    assert sealed["rounds"][0]["jobs"][0] == {"nodes": ["n07", partners[0]], "passed": False}


def test_the_bad_node_repaired_its_15_old_failures_are_measured_again_so_that_the_re_test_can_pass():
    """n07 passes with the three known-good nodes now: its 12 other old failures run too (every failed check measured
    again), 15 pair runs of the first pass's 120, and nothing is named."""
    old = first_pass(FakeAllReduce(slow_node("n07")))
    repaired = FakeAllReduce(lambda job, ranks: False)
    found = retest_cluster(NODES, old, whole_failed=False, run=repaired)
    assert found.pairs is not None and found.pairs.fixed and repaired.pair_runs == 15
    assert {frozenset(job) for job in repaired.launched} == {frozenset(p) for p, ok in old.items() if not ok}
    assert [r.stage for r in found.rounds] == ["suspects"] * 3 + ["confirm"] * (len(found.rounds) - 3)


def test_a_bad_link_is_run_again_as_it_was_one_pair_run():
    link = ("n03", "n11")
    old = first_pass(FakeAllReduce(lambda job, ranks: set(job) == set(link)))
    assert blame(old).bad_links == (link,)
    assert suspect_rounds(old) == [[link]]
    again = FakeAllReduce(lambda job, ranks: set(job) == set(link))
    found = retest_cluster(NODES, old, whole_failed=False, run=again)
    assert found.pair_blame is not None and found.pair_blame.bad_links == (link,) and again.pair_runs == 1


def test_pairs_that_were_not_measured_are_run_again_and_two_bad_nodes_meet_different_good_nodes():
    old: dict[tuple[str, str], bool | None] = {p: "n02" not in p and "n09" not in p for r in plan(NODES, SEED) for p in r}
    old[("n04", "n05")] = None  # n05 was down: not measured
    planned = suspect_rounds(old)
    assert all(len({n for pair in r for n in pair}) == 2 * len(r) for r in planned)  # disjoint rounds
    pairs = [p for r in planned for p in r]
    assert ("n04", "n05") in pairs and len(pairs) == 1 + 2 * 3
    met = {bad: {a if b == bad else b for a, b in pairs if bad in (a, b)} for bad in ("n02", "n09")}
    assert not met["n02"] & met["n09"] and not (met["n02"] | met["n09"]) & {"n02", "n09", "n04", "n05"}


# ------------------------------------------------------------------ halving: faults only the whole all_reduce shows


def big_jobs_only(node: str, over_ranks: int):
    """`node` fails an all_reduce of more than `over_ranks` ranks (e.g. a NIC that fails only under the whole
    cluster's traffic): every pair passes."""
    return lambda job, ranks: node in job and ranks > over_ranks


def neighbours(x: str, y: str):
    """Two nodes fail where the ring runs from one straight to the other in a job of three nodes or more (a cable
    between their NICs that only NCCL's ring over the cluster uses): every pair passes."""
    def fault(job, ranks):
        return len(job) > 2 and any({a, b} == {x, y} for a, b in zip(job, job[1:] + job[:1]))
    return fault


@pytest.mark.parametrize("bad", NODES)
def test_a_node_that_fails_only_past_8_ranks_is_found_by_halving_in_at_most_5_rounds(bad):
    """2 GPUs a node: a pair is 4 ranks and passes, so the first pass blames no one; the whole fails. Halving pads each
    half with nodes known to be good up to the failing job's 8 nodes (16 ranks), so the fault shows where it is."""
    engine = FakeAllReduce(big_jobs_only(bad, 8), gpus=2)
    old = first_pass(engine)
    assert all(old.values()) and engine.pair_runs == 120
    again = FakeAllReduce(big_jobs_only(bad, 8), gpus=2)
    found = retest_cluster(NODES, old, whole_failed=True, run=again)
    assert found.pairs is None and found.halving is not None  # no pair failed: straight to halving
    assert found.halving.bad_nodes == (bad,) and not found.halving.bad_links and not found.halving.not_isolated
    assert len(found.rounds) <= round_limit(16) == 5
    assert again.pair_runs == 0 and len(again.launched) == 9  # the whole, then two jobs a round
    for r in found.rounds:
        assert len({n for job in r.jobs for n in job}) == sum(map(len, r.jobs))  # a node in one job a round


@pytest.mark.parametrize(("x", "y"), [(NODES[i], NODES[(i + 1) % 16]) for i in range(16)])
def test_two_nodes_that_fail_only_as_ring_neighbours_are_named_in_at_most_5_rounds(x, y):
    """Both halves pass where the two are split across them (n08 and n09, n16 and n01): the windows across the halves'
    boundary hold the ring's step between them, and the windows of a failing window narrow it to the link."""
    engine = FakeAllReduce(neighbours(x, y))
    assert all(first_pass(engine).values())
    found = halve(NODES, FakeAllReduce(neighbours(x, y)))
    assert {frozenset(link) for link in found.bad_links} == {frozenset((x, y))}
    assert not found.bad_nodes and not found.not_isolated and len(found.rounds) <= 5


def test_across_the_boundary_the_windows_run_first_then_the_other_ways_across():
    """n08 and n09 straddle the halves: round 3 runs the windows (n05-n12 holds the ring's step n08 -> n09)."""
    found = halve(NODES, FakeAllReduce(neighbours("n08", "n09")))
    assert [r.stage for r in found.rounds] == ["whole", "halves", "boundary", "boundary", "boundary"]
    assert found.rounds[1].jobs == (tuple(NODES[:8]), tuple(NODES[8:])) and found.rounds[1].passed == (True, True)
    assert found.rounds[2].jobs == (tuple(NODES[4:12]), (*NODES[12:], *NODES[:4]))
    assert found.rounds[2].passed == (False, True)
    assert found.lines() == ["the link between n08 and n09 fails (the two together)", "5 rounds, 9 jobs (0 of 2 nodes)"]


def test_what_halving_cannot_isolate_in_5_rounds_is_named_never_passed():
    """A fault of two nodes together anywhere in a job (not as ring neighbours) is narrowed to a set of nodes, named
    as not isolated; a node that fails only past half the cluster (1 GPU a node, over 8 ranks) leaves the whole."""
    apart = halve(NODES, FakeAllReduce(lambda job, ranks: {"n06", "n13"} <= set(job) and len(job) > 2))
    assert not apart.fixed and apart.not_isolated == (("n05", "n06", "n07", "n08", "n13", "n14", "n15", "n16"),)
    assert apart.lines()[0] == ("8 nodes fail together (n05, n06, n07, n08, n13, n14, n15, n16): not isolated further "
                                "in 5 rounds")
    past_half = halve(NODES, FakeAllReduce(big_jobs_only("n06", 8), gpus=1))
    assert past_half.not_isolated == (tuple(NODES),) and not past_half.fixed


def test_two_faults_at_once_and_a_fault_that_is_gone():
    two = halve(NODES, FakeAllReduce(lambda job, ranks: "n03" in job or "n10" in job))
    assert two.bad_nodes == ("n03", "n10") and len(two.rounds) == 5
    gone = halve(NODES, FakeAllReduce(lambda job, ranks: False))
    assert gone.fixed and len(gone.rounds) == 1 and gone.lines() == ["nothing fails now", "1 rounds, 1 jobs (0 of 2 nodes)"]
    assert isinstance(gone, Found) and round_limit(1000) == 11


def test_two_nodes_anywhere_in_one_job_are_named_or_narrowed_to_at_most_8_nodes_holding_both():
    """Of the 120 pairs of nodes that fail together in any job of 3 or more, the windows and the other ways across (every
    quarter of one half meets every quarter of the other) name the link of 32 within 5 rounds, and narrow each other
    to a set of 4 or 8 nodes that holds both, named as not isolated (docs/rerun.md's table)."""
    named_links = 0
    for x, y in itertools.combinations(NODES, 2):
        found = halve(NODES, FakeAllReduce(lambda job, ranks, x=x, y=y: {x, y} <= set(job) and len(job) > 2))
        named = {n for link in found.bad_links for n in link} | {n for s in found.not_isolated for n in s}
        assert {x, y} <= named and len(named) <= 8 and len(found.rounds) <= 5, (x, y, found.lines())
        named_links += found.bad_links == ((x, y),) or found.bad_links == ((y, x),)
    assert named_links == 32


# ------------------------------------------------------------------ a host: the old bundle chooses what is measured

MEMBW_RUN = (DATA / "torch" / "membw_cpu_2dev.txt").read_text()  # a real CPU run, relabelled as two GPUs below
MEMBW_AS_GPUS = MEMBW_RUN.replace('"device": "cpu"', '"device": "cuda:0"', 1).replace('"device": "cpu"', '"device": "cuda:1"', 1)
HOST_CONTRACT = """\
gpuaccept: 1
vendor: V
tools: {{python: "{python}"}}
gpus: {{count: 2}}
memory_bandwidth: {{min_bandwidth: "10 GB/s", size: "256 MiB", repeats: 5}}
compute: {{dtype: fp32, min_tflops: 0.001, duration: "3 s", n: 256}}
"""
RECORDED_HOST = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())


def sha256_of(contract: str) -> str:
    """The contract's SHA-256 as a run reads it: of the file's bytes (accept writes the text as it is)."""
    return hashlib.sha256(contract.encode()).hexdigest()


def old_bundle(folder: Path, contract: str, failing: set[tuple[str, str]], host: dict | None = None,
               complete: bool = True) -> Path:
    """A bundle as a first run of `contract` on the recorded 8-GPU host writes it, constructed here (results, report,
    manifest; no raw evidence): every check the contract asks for passed, but those in `failing`."""
    parsed = parse_contract(contract)
    checks = [{"clause": clause, "subject": str(subject), "outcome": "failed" if (clause, str(subject)) in failing
               else "passed", "measured": 15.866 if clause == "memory_bandwidth" else None, "unit": None,
               "required": "", "message": ""}
              for clause, subject in expected_checks(parsed, lambda: {"net": [], "infiniband": []})]
    evidence = folder / "gpuaccept-evidence"
    evidence.mkdir(parents=True)
    host = host or {"hostname": RECORDED_HOST["hostname"],
                    "gpus": [{"index": g["index"], "uuid": g["uuid"]} for g in RECORDED_HOST["gpus"]]}
    results = {"gpuaccept": 1, "verdict": "rejected" if failing or not complete else "accepted", "mode": "simulated",
               "complete": complete,
               "started": "2026-12-01T00:00:00+00:00", "finished": "2026-12-01T00:10:00+00:00",
               "contract": {"sha256": sha256_of(contract)}, "host": host, "checks": checks}
    (evidence / "results.json").write_text(json.dumps(results))
    word = results["verdict"]
    (folder / "gpuaccept-report.html").write_text(
        f'<html><body data-verdict="{word}" data-evidence-digest="{evidence_digest(evidence)}">'
        f'<div id="gpuaccept-verdict"><h2>{word.upper()}</h2></div></body></html>')
    write_manifest(evidence, [folder / "gpuaccept-report.html"], {"verdict": word})
    return folder


def host_contract(fake_tools) -> str:
    return HOST_CONTRACT.format(python=fake_tools.bin_dir / "python")


def test_a_bundle_that_is_missing_not_a_bundle_edited_or_of_another_contract_is_refused(tmp_path):
    contract = HOST_CONTRACT.format(python="/usr/bin/python3")
    sha = sha256_of(contract)
    with pytest.raises(NotRetestable) as missing:
        previous(tmp_path / "nowhere", sha)
    assert str(missing.value) == (f"the bundle {tmp_path / 'nowhere'} does not exist: name the folder of the bundle (or "
                                  "its gpuaccept-evidence folder) whose failed checks to measure again")
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotRetestable) as plain:
        previous(tmp_path / "plain", sha)
    assert str(plain.value) == (f"the bundle {tmp_path / 'plain'} does not verify: {tmp_path / 'plain' / 'gpuaccept-evidence'}: "
                                "no gpuaccept-evidence folder (not a bundle)")
    bundle = old_bundle(tmp_path / "old", contract, {("memory_bandwidth", "GPU0")})
    found = previous(bundle, sha)
    assert found.failed() == [("memory_bandwidth", "GPU0")] and found.passed("memory_bandwidth", "GPU1")
    assert found.digest == hashlib.sha256((bundle / "gpuaccept-evidence" / "manifest.json").read_bytes()).hexdigest()
    with pytest.raises(NotRetestable) as other:
        previous(bundle, "f" * 64)
    assert str(other.value) == (f"the bundle {bundle} judged another contract (SHA-256 {sha[:16]}... there, "
                                "ffffffffffffffff... here): re-test with the contract it judged")
    edited = tmp_path / "edited"
    shutil.copytree(bundle, edited)
    results = edited / "gpuaccept-evidence" / "results.json"
    results.write_text(results.read_text().replace('"failed"', '"passed"'))  # the vendor marks the failure passed
    with pytest.raises(NotRetestable) as changed:
        previous(edited, sha)
    assert str(changed.value).startswith(f"the bundle {edited} does not verify: changed: results.json")


def test_a_bundle_of_another_host_says_what_differs():
    old = {"hostname": "trial-h100-", "gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}]}
    assert other_host(old, "trial-h100-", ["GPU-b", "GPU-a"]) is None
    assert other_host(old, "spare-7", ["GPU-a", "GPU-c"]) == (
        "hostname 'trial-h100-' there, 'spare-7' here; GPUs 2 there, 2 here; only there: GPU-b; only here: GPU-c")


def test_a_host_re_test_measures_the_failed_clause_again_and_carries_the_rest(accept, fake_tools, tmp_path):
    """The old bundle: memory_bandwidth failed on GPU0, compute and every gpus check passed. The re-test runs the
    memory workload once (its measurement gives both GPUs; GPU1 is carried all the same) and never the GEMM: RE-TEST
    PASSED, the verdict REJECTED (carried checks are not measured), each carried check naming the old bundle."""
    contract = host_contract(fake_tools)
    bundle = old_bundle(tmp_path / "old", contract, {("memory_bandwidth", "GPU0")})
    digest = previous(bundle, sha256_of(contract)).digest
    fake_tools.add("python", MEMBW_AS_GPUS, when="membw")
    fake_tools.add("python", as_gpus(GEMM_CPU_RUN), when="gemm")
    run = accept(contract, nvml_recording("h100_sxm5_8gpu.json"), pci_tree(tmp_path / "sys", "0x2330"),
                 f"--gpuaccept-rerun-failed={bundle}")
    assert run.result.ret == 1
    assert [call[1:3] for call in fake_tools.calls("python")] == [["-m", "pytest_gpuaccept.workloads.membw"]]
    out = run.result.outlines
    checks = {(c["clause"], c["subject"]): c for c in run.checks()}
    carried = [key for key, c in checks.items() if c.get("details", {}).get("carried_from") == digest]
    assert checks[("memory_bandwidth", "GPU0")]["outcome"] == "passed"
    assert len(carried) == len(checks) - 1 and ("compute", "GPU0") in carried and ("memory_bandwidth", "GPU1") in carried
    assert all(checks[key]["outcome"] == "not_measured" for key in carried)
    assert checks[("compute", "GPU0")]["message"] == (f"not measured: carried from bundle {digest[:16]}: passed there; not measured "
                                                      "in this re-test (--gpuaccept-rerun-failed)")
    assert f"gpuaccept re-test of {digest[:16]}: 1 check re-measured, {len(carried)} carried from the old bundle " \
           "(deselected: they passed there)" in out
    assert (f"gpuaccept re-test of {digest[:16]}: 1 check re-measured (1 passed, 0 failed, 0 not measured), "
            f"{len(carried)} carried from the old bundle: RE-TEST PASSED (not an acceptance: the carried checks were "
            "not measured in this run)") in out
    assert run.json["verdict"] == "rejected"
    sealed = json.loads((run.path / "gpuaccept-evidence" / "retest.json").read_text())
    assert sealed["retest_of"] == {"digest": digest, "bundle": str(bundle)} and sealed["verdict"] == "passed"
    assert sealed["remeasured"] == [{"clause": "memory_bandwidth", "subject": "GPU0", "outcome": "passed",
                                     "before": "failed"}]
    # verify and compare re-judge the new bundle from its raw evidence: the replay carries what the re-test carried
    # (judged anew, gpus.count would pass from the NVML reading the re-test took for memory_bandwidth)
    checked = verify(run.path)
    assert checked.ok and checked.bundle is not None, checked.problems
    assert not rejudge(checked.bundle).problems


def test_compare_old_new_shows_what_the_re_test_fixed_and_what_it_carried():
    """compare OLD NEW on a re-test's results (the whole run above gives them; here as documents): the failed check
    that passes now is fixed, a check carried from OLD is no regression, one carried from another bundle is."""
    def check(subject, outcome, measured=None, **more):
        return {"clause": "memory_bandwidth", "subject": subject, "outcome": outcome, "measured": measured,
                "unit": "GB/s", "required": ">= 10", **more}

    old = {"checks": [check("GPU0", "failed", 8.2), check("GPU1", "passed", 15.866), check("GPU2", "passed", 15.9)]}
    new = {"checks": [check("GPU0", "passed", 15.866),
                      check("GPU1", "not_measured", details={"carried_from": "a" * 64}),
                      check("GPU2", "not_measured", details={"carried_from": "b" * 64})]}
    rows = {row.subject: row for row in compare(old, new, old_digest="a" * 64).rows}
    assert (rows["GPU0"].status, rows["GPU0"].note) == ("better", "fixed: failed -> passed")
    assert (rows["GPU1"].status, rows["GPU1"].note) == ("carried", "carried from OLD (aaaaaaaaaaaaaaaa): not measured in NEW")
    assert not rows["GPU1"].regressed
    assert (rows["GPU2"].status, rows["GPU2"].note) == ("regressed", "carried from another bundle (bbbbbbbbbbbbbbbb): "
                                                                     "not measured in NEW")
    text = render_text(compare(old, new, old_digest="a" * 64), Path("old"), Path("new")).splitlines()
    assert text[-2:] == ["compare: 1 fixed, 1 carried from OLD (not measured in NEW)", "compare: 1 regressed beyond 5%"]


# ------------------------------------------------------------------ the engine's jobs: what a re-test round launches

RING_2NODE = (DATA / "fleet" / "nccltests309_h100_2node_16rank_ring_mincta24_392GBs.txt").read_text()  # real, 392.69


class LaunchedJobs:
    """The tool runner of a login node whose launcher (srun) is never started: each job's argv is kept, and the
    recorded real 2-node Ring log (16 ranks, 392.69 GB/s at 8 GiB) comes back, or a failure for a job with `bad`."""

    def __init__(self, bad: str) -> None:
        self.bad, self.argv = bad, []

    def which(self, tool):
        return None

    def run_together(self, commands, timeout_s=None, each=None):
        runs = []
        for command in commands:
            argv = (command.tool, *command.args)
            self.argv.append(argv)
            nodes = argv[argv.index("-w") + 1].split(",")
            failed = self.bad in nodes
            runs.append(ToolRun(command.key or "", argv, 1 if failed else 0, 1.0, "" if failed else RING_2NODE,
                                "NCCL WARN NET/IB : Got completion with error 12" if failed else ""))
        return runs


def test_a_re_test_round_launches_one_srun_all_reduce_a_job_with_its_nodes_in_ring_order():
    """The suspects' rounds through the Slurm engine's job line (cluster/run.job_runner): n07 against three known-good
    nodes, three srun jobs of 2 nodes x 8 ranks, NCCL_ALGO=Ring; each judged as cluster.pairs judges a pair."""
    contract = parse_contract("gpuaccept: 1\nvendor: V\ngpus: {count: 8}\n")  # 8 ranks a node
    keys = Pairs(min_busbw=parse_bandwidth("360 GB/s"), min_bytes=parse_size("8 GiB"), max_bytes=parse_size("8 GiB"),
                 repeats=20, args=())  # as cluster.pairs reads them
    runner = LaunchedJobs("n07")
    kept: list = []
    run = job_runner(SimpleNamespace(contract=contract, runner=runner), Slurm(), keys, SimpleNamespace(available=NODES),
                     kept)
    old = first_pass(FakeAllReduce(slow_node("n07")))
    found = retest_cluster(NODES, old, whole_failed=False, run=run)
    assert found.pair_blame is not None and found.pair_blame.bad_nodes == ("n07",) and len(runner.argv) == 3
    assert all(argv[:2] == ("srun", "--mpi=pmix") and "--ntasks-per-node=8" in argv and
               any(a.startswith("--export=ALL,NCCL_ALGO=Ring") for a in argv) for argv in runner.argv)
    assert all(result.busbw is None and "exited with code 1: NCCL WARN NET/IB : Got completion with error 12"
               in (result.problem or "") for _job, result in kept)
    down = job_runner(SimpleNamespace(contract=contract, runner=runner), Slurm(), keys,
                      SimpleNamespace(available=[n for n in NODES if n != "n03"]), kept)
    assert down([("n01", "n02"), ("n03", "n04")]) == [True, False]
    assert kept[-1][1].problem == "not run: n03 not available" and kept[-2][1].busbw == 392.69


# ------------------------------------------------------------------ the option's plumbing, in process


def test_the_option_is_a_usage_error_for_what_it_cannot_re_test(tmp_path, monkeypatch):
    """plugin._previous is what pytest_configure calls: each refusal a pytest.UsageError (exit code 4), named."""
    contract_text = HOST_CONTRACT.format(python="/usr/bin/python3")
    contract = SimpleNamespace(sha256=sha256_of(contract_text))
    config = SimpleNamespace(option=SimpleNamespace(htmlpath=str(tmp_path / "new" / "gpuaccept-report.html")))
    bundle = old_bundle(tmp_path / "old", contract_text, {("memory_bandwidth", "GPU0")})
    assert _previous(config, None, contract, False, None) is None
    assert _previous(config, str(bundle), contract, False, None).failed() == [("memory_bandwidth", "GPU0")]
    with pytest.raises(pytest.UsageError, match=r"^--gpuaccept-rerun-failed: the bundle .*/nowhere does not exist: "):
        _previous(config, str(tmp_path / "nowhere"), contract, False, None)
    with pytest.raises(pytest.UsageError) as replayed:
        _previous(config, str(bundle), contract, True, None)
    assert str(replayed.value) == ("--gpuaccept-rerun-failed measures this host again: it cannot be given with "
                                   "--gpuaccept-replay, which measures nothing")
    passed = old_bundle(tmp_path / "passed", contract_text, set())
    with pytest.raises(pytest.UsageError) as nothing:
        _previous(config, str(passed), contract, False, None)
    assert str(nothing.value) == (f"--gpuaccept-rerun-failed: every check of the bundle {passed} passed: nothing to "
                                  "measure again (without the option, a run measures everything anew)")
    incomplete = old_bundle(tmp_path / "interrupted", contract_text, set(), complete=False)
    assert _previous(config, str(incomplete), contract, False, None).complete is False  # its missing checks: again
    inside = SimpleNamespace(option=SimpleNamespace(htmlpath=None))  # the report in the working folder: the bundle
    monkeypatch.chdir(bundle)
    with pytest.raises(pytest.UsageError) as written:
        _previous(inside, str(bundle), contract, False, None)
    assert str(written.value) == (f"--gpuaccept-rerun-failed: the report (--html) would be written to "
                                  f"{bundle / 'gpuaccept-report.html'}, inside the bundle {bundle} that this re-test "
                                  "starts from; write elsewhere, e.g. --html=OTHER/report.html")


def test_the_option_is_taken_from_the_command_line_only():
    unset = Setting("", "", None, ())
    given = Setting("--gpuaccept-rerun-failed", "gpuaccept_rerun_failed", "old",
                    (COMMAND_LINE, "the ini option gpuaccept_rerun_failed"))
    found = replace(Settings(**{f.name: unset for f in fields(Settings)}), rerun_failed=given)
    assert found.misplaced() == ("--gpuaccept-rerun-failed may only be given on the command line, not in the ini option "
                                 "gpuaccept_rerun_failed: an earlier bundle chooses what is measured again and what is not")
    assert replace(found, rerun_failed=replace(given, places=(COMMAND_LINE,))).misplaced() is None


# ------------------------------------------------------------------ the cluster's measurements in a re-test

SLOW_ROW = ("41015  209.43  392.69", "82030  104.72  196.35")  # the 8 GiB row at half speed: a slow NIC (constructed)


def log_for(nodes: list[str]) -> str:
    """The recorded 2-node Ring log (8 ranks a node) as `nodes` would print it: its first node's rank lines once for
    each node, renumbered and renamed (constructed from the real log, as tests/fleet_fakes.py does)."""
    lines = RING_2NODE.splitlines()
    ranks = [line for line in lines if line.startswith("#  Rank")][:8]
    made = [line.replace(f"Rank {k:2d} ", f"Rank {8 * i + k:2d} ").replace("0666a154", node)
            for i, node in enumerate(nodes) for k, line in enumerate(ranks)]
    first = next(i for i, line in enumerate(lines) if line.startswith("#  Rank"))
    return "\n".join(lines[:first] + made + [line for line in lines[first:] if not line.startswith("#  Rank")]) + "\n"


class ClusterJobs(LaunchedJobs):
    """srun all_reduce jobs of the 16-node cluster: each prints its nodes' log, at half speed where `slow` says."""

    def __init__(self, slow) -> None:
        super().__init__("")
        self.slow, self.written, self.keys = slow, {}, []
        self.evidence = SimpleNamespace(write_json=self.written.__setitem__)

    def run_together(self, commands, timeout_s=None, each=None):
        runs = []
        for command in commands:
            argv = (command.tool, *command.args)
            self.argv.append(argv)
            self.keys.append(command.key)
            nodes = argv[argv.index("-w") + 1].split(",")
            text = log_for(nodes)
            runs.append(ToolRun(command.key or "", argv, 0, 1.0, text.replace(*SLOW_ROW) if self.slow(nodes) else text, ""))
        return runs


def cluster_session(slow, carried_checks: dict) -> tuple[SimpleNamespace, ClusterJobs]:
    runner = ClusterJobs(slow)
    contract = parse_contract("gpuaccept: 1\nvendor: V\ngpus: {count: 8}\n")
    return SimpleNamespace(contract=contract, runner=runner, checks=carried_checks), runner


def carried_checks(keys, digest: str = "d" * 64) -> dict:
    return {key: replace(Verdict(*key).not_measured("carried", {"carried_from": digest}), test="") for key in keys}


def section(pairs: bool = True) -> ClusterSection:
    keys = Pairs(min_busbw=parse_bandwidth("360 GB/s"), min_bytes=parse_size("8 GiB"), max_bytes=parse_size("8 GiB"),
                 repeats=20, args=())
    return ClusterSection(engine="slurm", nodes=tuple(NODES), partition=None, node_timeout=parse_duration("600 s"),
                          pairs=keys if pairs else None, allreduce=keys)


CLUSTER = SimpleNamespace(error=None, nodes={n: None for n in NODES}, available=NODES)


def test_cluster_pairs_in_a_re_test_runs_the_suspects_only_and_seals_every_round():
    """cluster.pairs of the 16-node cluster whose first pass blamed n07 (its 15 pairs failed, the 105 others carried):
    run_pairs launches 3 srun jobs, n07 with three nodes the old pass cleared, where the first pass launched 120; the
    12 old failures not run again are not measured, saying what the suspects' rounds found."""
    passed = [f"{a}+{b}" for r in plan(NODES, "") for a, b in r if "n07" not in (a, b)]
    state, runner = cluster_session(lambda nodes: "n07" in nodes, carried_checks(("cluster.pairs", s) for s in passed))
    runs = run_pairs(state, Slurm(), section(), CLUSTER, "cluster.pairs")
    assert len(runner.argv) == 3 and runs.blame.bad_nodes == ("n07",)
    measured = {pair: r for pair, r in runs.results.items() if r.busbw is not None}
    assert len(measured) == 3 and all(r.busbw == 196.35 and "n07" in pair for pair, r in measured.items())
    others = [r for r in runs.results.values() if r.busbw is None]
    assert len(others) == 12 and others[0].problem == (
        "not measured again: the re-test (--gpuaccept-rerun-failed) ran the old failures' suspects against known-good "
        "nodes: node n07 fails; 3 rounds, 3 jobs (3 of 2 nodes)")
    sealed = runner.written[RETEST_PAIRS]
    assert sealed["retest_of"] == ["d" * 64] and len(sealed["rounds"]) == 3 and sealed["bad_nodes"] == ["n07"]


def test_cluster_allreduce_in_a_re_test_halves_a_whole_failure_no_pair_explains():
    """No pairs in the contract; the old whole all_reduce failed, the cluster.nodes checks passed (carried). n05 is slow
    only in jobs over 4 nodes (32 ranks): run_allreduce halves, padding each half to 8 nodes, and names n05 in 5
    rounds (9 srun jobs); the check is judged on round 1, the whole, as a first pass judges it."""
    state, runner = cluster_session(lambda nodes: "n05" in nodes and len(nodes) > 4,
                                    carried_checks(("cluster.nodes", n) for n in NODES))
    run = run_allreduce(state, Slurm(), section(pairs=False), CLUSTER, "cluster.pairs")
    assert run.result is not None and run.result.busbw == 196.35 and run.nodes == tuple(NODES)
    assert len(runner.argv) == 9 and runner.argv[0][runner.argv[0].index("-w") + 1] == ",".join(NODES)
    assert not any("NCCL_ALGO=Ring" in a for argv in runner.argv for a in argv)  # as cluster.allreduce runs
    assert runner.keys[:3] == ["retest-whole-cluster-1-1", "retest-whole-cluster-2-1", "retest-whole-cluster-2-2"]
    sealed = runner.written[RETEST_ALLREDUCE]
    assert sealed["bad_nodes"] == ["n05"] and len(sealed["rounds"]) == 5
    assert sealed["rounds"][0] == {"round": 1, "stage": "whole", "jobs": [{"nodes": NODES, "passed": False}]}


def test_a_run_that_is_no_re_test_runs_the_first_pass_as_before():
    state, runner = cluster_session(lambda nodes: False, {})
    assert len(run_pairs(state, Slurm(), section(), CLUSTER, "cluster.pairs").results) == 120 and len(runner.argv) == 120
    assert run_allreduce(state, Slurm(), section(), CLUSTER, "cluster.pairs").result.busbw == 392.69 and len(runner.argv) == 121
    assert runner.written == {}


def test_a_re_test_on_another_host_is_refused_before_anything_is_measured_and_its_own_host_is_not(tmp_path):
    """Retest.pytest_sessionstart compares the old bundle's host with this one as NVML reads it (the recorded host's
    hostname and UUIDs here): the same host goes on; a spare with one GPU swapped is a usage error naming both."""
    contract_text = HOST_CONTRACT.format(python="/usr/bin/python3")
    old = previous(old_bundle(tmp_path / "old", contract_text, {("memory_bandwidth", "GPU0")}), sha256_of(contract_text))
    gpus = [SimpleNamespace(uuid=g["uuid"]) for g in RECORDED_HOST["gpus"]]

    def session_on(hostname, uuids):
        host = SimpleNamespace(hostname=hostname, gpus=uuids, error=None)
        state = SimpleNamespace(is_controller=True, mode="simulated", contract=parse_contract(contract_text),
                                host=lambda: host)
        return Retest(state, old)

    session_on(RECORDED_HOST["hostname"], gpus).pytest_sessionstart(None)  # the same host: nothing said
    swapped = [*gpus[:7], SimpleNamespace(uuid="GPU-ffffffff-0000-0000-0000-000000000007")]
    with pytest.raises(pytest.UsageError) as other:
        session_on("spare-7", swapped).pytest_sessionstart(None)
    assert str(other.value) == (
        f"--gpuaccept-rerun-failed: the bundle {tmp_path / 'old'} measured another host (hostname 'trial-h100-' there, "
        "'spare-7' here; GPUs 8 there, 8 here; only there: GPU-h100-07aaaaaaa-0000-0000-0000-000000000007; only here: "
        "GPU-ffffffff-0000-0000-0000-000000000007): re-test the host it measured")
