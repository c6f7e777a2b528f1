"""node-check: the contract's quick per-node sections, one line and one exit code in each caller's protocol (Slurm,
Nagios, Node Problem Detector, NVIDIA Health Validation), and the scheduler touched only where asked and only for a
node drained by gpuaccept. Profiles and Scontrol are judged in process; two node-checks of a simulated node start the
judging pytest node-check starts (about a second each). The real Slurm cluster is in test_node_check_slurm.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from builders import NODE_CHECK_CONTRACT, node_check_node, node_check_smi
from conftest import DATA

from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.nodecheck import (
    FAIL,
    NOT_MEASURED,
    NOT_RUN,
    PASS,
    PROFILES,
    Finding,
    NodeCheckError,
    Request,
    Scontrol,
    drain_reason,
    finding,
    node_check,
    select,
)

DIGEST = "e08f8b66f9cfe456ac8bee67bea80d8bd82536da396cc4c8d50ae07a6fc84369"
FAILED = Finding(FAIL, "h1", "nvlink.links", "GPU3", "17 links active at 26.562 GB/s; 17 of 18 links active "
                 "(inactive: [5])", passed=52, failed=1, digest=DIGEST, bundle="/var/tmp/b", seconds=1.25)
PASSED = Finding(PASS, "h1", passed=53, digest=DIGEST, seconds=1.0)
UNMEASURED = Finding(NOT_MEASURED, "h1", "nvlink.links", "GPU0", "`nvidia-smi nvlink -s` exited 9", passed=50,
                     not_measured=3, digest=DIGEST)
UNRUN = Finding(NOT_RUN, "h1", "node-check", "host", "the judging run did not finish in 600 s")


def npd_reads(stdout: str, code: int, max_output_length: int = 80) -> tuple[str, str]:
    """What Node Problem Detector makes of a custom plugin's run (pkg/custompluginmonitor/plugin/plugin.go @ 011b9e6a:
    stdout trimmed, cut at max_output_length bytes; exit 0 OK, 1 NonOK, anything else Unknown)."""
    output = stdout.encode().strip()[:max_output_length].decode(errors="replace")
    return {0: "OK", 1: "NonOK"}.get(code, "Unknown"), output


@pytest.mark.parametrize("profile, codes", [
    ("slurm-prolog", (0, 1, 1, 2)), ("slurm-epilog", (0, 1, 1, 2)), ("slurm-healthcheck", (0, 1, 1, 2)),
    ("nagios", (0, 2, 3, 3)), ("npd", (0, 1, 2, 2)), ("health-validation", (0, 1, 1, 2)),
])
def test_each_profile_gives_its_protocols_code_and_never_passes_what_was_not_measured(profile, codes):
    assert tuple(PROFILES[profile].codes[state] for state in (PASS, FAIL, NOT_MEASURED, NOT_RUN)) == codes


def test_the_slurm_line_names_the_first_failing_check_and_the_bundle():
    assert PROFILES["slurm-prolog"].line(FAILED) == (
        "gpuaccept node-check h1: FAIL nvlink.links GPU3: 17 links active at 26.562 GB/s; 17 of 18 links active "
        f"(inactive: [5]); bundle sha256:{DIGEST} /var/tmp/b")
    assert PROFILES["slurm-epilog"].line(PASSED) == \
        f"gpuaccept node-check h1: PASS 53 checks passed on h1; bundle sha256:{DIGEST}"
    assert PROFILES["slurm-healthcheck"].line(UNRUN) == ("gpuaccept node-check h1: NOT RUN node-check host: the judging "
                                                         "run did not finish in 600 s; bundle none")


def test_the_nagios_line_is_status_text_and_perfdata():
    assert PROFILES["nagios"].line(FAILED) == (
        "GPUACCEPT CRITICAL - nvlink.links GPU3: 17 links active at 26.562 GB/s; 17 of 18 links active (inactive: [5]); "
        f"bundle sha256:{DIGEST}|passed=52;;;0 failed=1;;;0 not_measured=0;;;0 seconds=1.2s;;;0")
    assert PROFILES["nagios"].line(PASSED).startswith(f"GPUACCEPT OK - 53 checks passed on h1; bundle sha256:{DIGEST}|")
    assert PROFILES["nagios"].line(UNMEASURED).startswith("GPUACCEPT UNKNOWN - nvlink.links GPU0: `nvidia-smi nvlink "
                                                          "-s` exited 9; bundle")


@pytest.mark.parametrize("found, status, message", [
    (FAILED, "NonOK", "FAIL nvlink.links GPU3 bundle sha256:e08f8b66f9cf"),
    (PASSED, "OK", "OK 53 passed bundle sha256:e08f8b66f9cf"),
    (UNMEASURED, "Unknown", "UNKNOWN nvlink.links GPU0 bundle sha256:e08f8b66f9cf"),
    (UNRUN, "Unknown", "UNKNOWN node-check host bundle none"),
])
def test_npd_reads_the_line_whole_as_its_documented_protocol_reads_a_plugin(found, status, message):
    profile = PROFILES["npd"]
    assert npd_reads(profile.line(found) + "\n", profile.codes[found.state]) == (status, message)


HOSTILE = "GPU3 \x1b[31mOK\x1b[0m\nGPUACCEPT OK - fine|passed=99 \u202egnp.\u202c " + "x" * 300


def test_hostile_text_stays_one_escaped_line_and_npd_keeps_its_80_bytes():
    found = Finding(FAIL, "h1", "nics.speed", HOSTILE, HOSTILE, failed=1, digest=DIGEST)
    for name, profile in PROFILES.items():
        line = profile.line(found)
        assert "\n" not in line and "\x1b" not in line and "\u202e" not in line, name
    nagios = PROFILES["nagios"].line(found)
    assert nagios.count("|") == 1 and nagios.startswith("GPUACCEPT CRITICAL - nics.speed GPU3 \\x1b[31mOK\\x1b[0m ")
    npd = PROFILES["npd"].line(found)
    assert len(npd.encode()) == 80 and npd.isascii() and npd.endswith("... bundle sha256:e08f8b66f9cf")
    assert npd_reads(npd, 1) == ("NonOK", npd)
    reason = drain_reason(found)
    assert len(reason) == 120 and reason.isascii() and reason.endswith("xxx...")
    assert reason.startswith("[gpuaccept] nics.speed GPU3 \\x1b[31mOK\\x1b[0m GPUACCEPT OK - fine|passed=99 \\u202egnp.")


def test_a_finding_fails_on_the_first_failed_check_and_passes_only_a_complete_accepted_run():
    checks = [{"clause": "gpus.count", "subject": "host", "outcome": "passed", "message": "8 GPUs"},
              {"clause": "nvlink", "subject": "GPU0-GPU3", "outcome": "not_measured", "message": "no topology"},
              {"clause": "nvlink.links", "subject": "GPU3", "outcome": "failed", "message": "17 links active"}]
    failed = finding("h1", {"verdict": "rejected", "complete": True, "checks": checks})
    assert (failed.state, failed.what, failed.passed, failed.failed, failed.not_measured) == \
        (FAIL, "nvlink.links GPU3", 1, 1, 1)
    assert finding("h1", {"verdict": "rejected", "complete": True, "checks": checks[:2]}).what == "nvlink GPU0-GPU3"
    assert finding("h1", {"verdict": "accepted", "complete": True, "checks": checks[:1]}).state == PASS
    incomplete = finding("h1", {"verdict": "accepted", "complete": False, "checks": checks[:1]})
    assert (incomplete.state, incomplete.message) == (NOT_MEASURED, "the run did not complete")
    foreign = finding("h1", {"verdict": "rejected", "complete": True, "checks": checks[:1],
                             "foreign_code": ["pytest plugin evil (entry point)"]})
    assert (foreign.state, foreign.what, foreign.message) == (FAIL, "run host", "pytest plugin evil (entry point)")
    assert finding("h1", {"verdict": "accepted", "complete": True, "checks": []}).state == NOT_MEASURED
    assert finding("h1", None, "no results").state == NOT_RUN
    edited = finding("h1", {"verdict": "accepted", "complete": True, "checks": checks[:1]}, "the bundle does not verify")
    assert (edited.state, edited.what) == (FAIL, "bundle host")


CONTRACT = """\
gpuaccept: 1
vendor: "Trial cluster"
cluster:
  engine: slurm
  nodes: ["h[1-4]"]
  allreduce: {min_busbw: "200 GB/s"}
node_check:
  quick: [nvlink]
gpus:
  count: 8
nvlink:
  every_pair: true
allreduce:
  min_busbw: "450 GB/s"
"""


def test_only_the_quick_sections_are_judged_at_the_buyers_line_numbers_and_never_the_cluster():
    chosen = select(CONTRACT, "vendor.yaml")
    assert (chosen.sections, chosen.left_out, chosen.not_per_node) == (("gpus", "nvlink"), ("allreduce",), ("cluster",))
    lines = chosen.text.splitlines()
    assert len(lines) == len(CONTRACT.splitlines()) and lines[8:10] == ["gpus:", "  count: 8"]
    assert "cluster:" not in chosen.text and "node_check" not in chosen.text and "allreduce" not in chosen.text
    unmarked = select(CONTRACT.replace("node_check:\n  quick: [nvlink]\n", ""))
    assert unmarked.sections == ("gpus", "nvlink", "allreduce")  # no marking: every per-node section


@pytest.mark.parametrize("marking, problem", [
    ("quick: [cluster]", "vendor.yaml:7: node_check.quick: 'cluster' is judged over the whole cluster from a login "
                         "node, never by one node's check: remove it"),
    ("quick: [burnin]", "vendor.yaml:7: node_check.quick: 'burnin' is not a section of this contract (it has gpus, "
                        "nvlink, allreduce)"),
    ("quick: []", "vendor.yaml:7: node_check.quick: expected a non-empty list of section names, e.g. [gpus, nvlink]"),
    ("fast: [gpus]", "vendor.yaml:7: node_check: expected a mapping with one key, quick: a list of the contract's "
                     "per-node sections, e.g. node_check: {quick: [gpus, nvlink]}"),
])
def test_a_marking_that_names_no_per_node_section_is_refused_at_its_line(marking, problem):
    with pytest.raises(NodeCheckError) as info:
        select(CONTRACT.replace("node_check:\n  quick: [nvlink]\n", f"node_check: {{{marking}}}\n"), "vendor.yaml")
    assert str(info.value) == problem


# ------------------------------------------------------------------ the scheduler

SLURM = DATA / "slurm"


class FakeScontrol:
    """scontrol replayed: `show node` prints a real capture, `update` answers `rc`; every argv and timeout kept."""

    def __init__(self, show: Path, rc: int = 0, stderr: str = "") -> None:
        self.show, self.rc, self.stderr, self.calls = show, rc, stderr, []

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, timeout))
        if argv[1:3] == ["show", "node"]:
            return subprocess.CompletedProcess(argv, 0, self.show.read_text(), "")
        return subprocess.CompletedProcess(argv, self.rc, "", self.stderr)


def test_drain_sets_our_reason_with_an_argv_list_and_a_timeout():
    fake = FakeScontrol(SLURM / "netns_22.05.8_idle_after_resume.txt")
    assert Scontrol(run=fake).drain("h1", "[gpuaccept] nvlink GPU0-GPU3") == "drained h1: [gpuaccept] nvlink GPU0-GPU3"
    assert fake.calls == [(["scontrol", "show", "node", "h1"], 30.0),
                          (["scontrol", "update", "nodename=h1", "state=drain", "reason=[gpuaccept] nvlink GPU0-GPU3"],
                           30.0)]


def test_a_node_drained_by_us_is_drained_again_and_resumed_and_one_drained_by_others_never_touched():
    ours = FakeScontrol(SLURM / "netns_22.05.8_idle_drain_gpuaccept_reason.txt")
    assert Scontrol(run=ours).resume("h1") == "resumed h1 (was drained by gpuaccept)"
    assert ours.calls[-1][0] == ["scontrol", "update", "nodename=h1", "state=resume"]
    admin = FakeScontrol(SLURM / "netns_22.05.8_idle_drain_admin_reason.txt")
    assert Scontrol(run=admin).resume("h2") == ("not resumed: drained by someone else (reason 'disk swap, ticket 4711 "
                                                "[root@2026-12-07T05:10:19]'), left as it is")
    assert Scontrol(run=admin).drain("h2", "[gpuaccept] gpus.count host") == (
        "not drained: already drained by someone else (reason 'disk swap, ticket 4711 [root@2026-12-07T05:10:19]'), "
        "left as it is")
    # character-ai/slonk's real drained H100 node: a Prolog's own reason, not ours
    slonk = FakeScontrol(SLURM / "slonk_h100_4nodes_drain_maintenance_reserved_23.11.txt")
    assert Scontrol(run=slonk).resume("cluster-h100-9-78").startswith(
        "not resumed: drained by someone else (reason 'Prolog error: 571 xid 13 errors [root@2023-12-24T06:51:08]')")
    assert all(argv[1] == "show" for argv, _t in admin.calls + slonk.calls)  # nothing but reads
    idle = FakeScontrol(SLURM / "netns_22.05.8_idle_after_resume.txt")
    assert Scontrol(run=idle).resume("h1") == "h1 not drained: nothing to resume"


def test_a_scontrol_that_fails_is_said_and_nothing_is_claimed():
    fake = FakeScontrol(SLURM / "netns_22.05.8_idle_after_resume.txt", rc=1,
                        stderr="slurm_update error: Invalid node name specified\n")  # real, from the namespace cluster
    assert Scontrol(run=fake).drain("h1", "[gpuaccept] x") == (
        "not drained: `scontrol update nodename=h1 state=drain reason=[gpuaccept] x` exited 1: slurm_update error: "
        "Invalid node name specified")

    def hangs(argv, timeout):
        raise subprocess.TimeoutExpired(argv, timeout)

    assert Scontrol(run=hangs).resume("h1") == "not resumed: `scontrol show node h1` did not finish in 30 s"
    gone = FakeScontrol(SLURM / "netns_22.05.8_idle_after_resume.txt")
    assert Scontrol(run=gone).drain("h7", "[gpuaccept] x") == "not drained: `scontrol show node h7` lists no node h7"


# ------------------------------------------------------------------ a simulated node, judged (a pytest of its own)

def test_a_simulated_node_passes_and_then_fails_when_a_link_goes_down_the_scheduler_untouched(tmp_path):
    node = node_check_node(tmp_path / "nodes" / "h1")
    smi = node_check_smi(tmp_path / "bin" / "nvidia-smi", str(tmp_path / "nodes"))
    contract = tmp_path / "vendor.yaml"
    contract.write_text(NODE_CHECK_CONTRACT.format(smi=smi))
    smi.write_text(smi.read_text().replace("/$(hostname)", "/h1"))  # this machine stands in for h1
    untouched = FakeScontrol(SLURM / "netns_22.05.8_idle_after_resume.txt")
    request = Request(contract, "nagios", tmp_path / "ok", nvml=node / "nvml.json", sysfs=node / "sys", node="h1")
    line, code = node_check(request, Scontrol(run=untouched))
    assert code == 0, line
    assert re.fullmatch(r"GPUACCEPT OK - 53 checks passed on h1; bundle sha256:[0-9a-f]{64}; SIMULATED run"
                        r"\|passed=53;;;0 failed=0;;;0 not_measured=0;;;0 seconds=[\d.]+s;;;0", line), line
    assert (tmp_path / "ok" / "gpuaccept-evidence" / "manifest.json").is_file()
    judged = (tmp_path / "ok" / "gpuaccept-evidence" / "contract.yaml").read_text()
    assert "allreduce" not in judged and "node_check" not in judged  # not quick: not run, not in the bundle

    node_check_node(node, down={(3, 5)})
    line, code = node_check(Request(contract, "npd", tmp_path / "bad", nvml=node / "nvml.json", sysfs=node / "sys",
                                    node="h1"), Scontrol(run=untouched))
    assert (code, line[:29]) == (1, "FAIL nvlink GPU0-GPU3 bundle ") and len(line) <= 80
    assert npd_reads(line + "\n", code) == ("NonOK", line)
    assert untouched.calls == []  # neither --drain nor --undrain-if-pass: the scheduler is not asked anything


def test_an_out_folder_that_is_not_empty_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    line, code = node_check(Request(tmp_path / "none.yaml", "health-validation", tmp_path / "out", node="h1"))
    assert code == 2
    assert line == (f"gpuaccept NOT RUN h1: node-check host: --out: --out {tmp_path / 'out'} exists and is not an empty "
                    "folder: name a new one; bundle none")


def test_a_flow_style_contract_cannot_leave_a_section_out_and_an_invalid_one_is_not_run(tmp_path):
    with pytest.raises(NodeCheckError) as info:
        select('{gpuaccept: 1, vendor: V, gpus: {count: 8}, allreduce: {min_busbw: "1 GB/s"}, '
               'node_check: {quick: [gpus]}}\n', "flow.yaml")
    assert str(info.value) == ("flow.yaml:1: node_check: node-check needs each top-level key of the contract on lines "
                               "of its own (block style), to leave out 'allreduce'")
    contract = tmp_path / "vendor.yaml"
    contract.write_text(CONTRACT.replace("  count: 8\n", "  count: eight\n"))
    line, code = node_check(Request(contract, "health-validation", tmp_path / "out", node="h1"))
    assert code == 2
    assert re.fullmatch(rf"gpuaccept NOT RUN h1: node-check host: invalid contract: {re.escape(str(contract))}:10: "
                        r"gpus\.count: .*; bundle none", line), line


def test_a_mistyped_section_is_not_left_out_quietly_but_refused_as_a_judging_run_refuses_it():
    with pytest.raises(ContractError) as info:
        parse_contract(select(CONTRACT + "nvlnk:\n  every_pair: true\n", "vendor.yaml").text, "vendor.yaml")
    assert info.value.problems[0].startswith("vendor.yaml:15: nvlnk: unknown key")
