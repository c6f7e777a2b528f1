"""Contract warnings at load: never failures, always shown (terminal header, report, results)."""

import pytest
from builders import p5_log
from conftest import nvml_recording

from pytest_gpuaccept.clauses.advice import advise
from pytest_gpuaccept.contract import parse_contract


@pytest.mark.parametrize("sections, warning", [
    ("gpus: {count: 8, model: NVIDIA}\n", "gpus.model 'NVIDIA' matches almost any NVIDIA GPU: name the model that was sold"),
    ("gpus: {count: 8, model: 'H1OO SXM5'}\n", "gpus.model 'H1OO SXM5' names no GPU in the model table (nearest: "
                                              "H100 SXM5 80GB"),
    ("gpus: {count: 8, model: 'H100 SXM5'}\nallreduce: {min_busbw: '450 Gb/s'}\n",
     "allreduce.min_busbw 450 Gb/s is 56.25 GB/s, 12% of the published 450 GB/s of H100 SXM5 80GB (NVLink one way): "
     "a unit mistake (Gb/s for GB/s)?"),
    ("gpus: {count: 8, model: 'H100 SXM5'}\nnvlink: {every_pair: true, min_links: 1}\n",
     "nvlink.min_links is 1 on H100 SXM5 80GB, which has 18 NVLinks per GPU: any one link would pass"),
])
def test_a_contract_that_looks_mistaken_is_warned_about(sections, warning):
    found = advise(parse_contract("gpuaccept: 1\nvendor: V\n" + sections))
    assert any(line.startswith(warning) for line in found), found


def test_a_sound_contract_has_no_warning():
    contract = parse_contract("gpuaccept: 1\nvendor: V\ngpus: {count: 8, model: 'H100 SXM5'}\n"
                              "allreduce: {min_busbw: '450 GB/s'}\nnvlink: {every_pair: true, min_links: 18}\n")
    assert advise(contract) == []


def test_warnings_are_shown_and_change_no_verdict(accept, fake_tools):
    fake_tools.add_nccl(p5_log(), iters=1)
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 8, model: 'H100 SXM5'}\n"
                 "allreduce: {min_busbw: '450 Gb/s', max_bytes: '16 GiB', args: ['-n', '1']}\n", nvml_recording("h100_sxm5_8gpu.json"))
    run.result.stdout.fnmatch_lines(["gpuaccept warning: allreduce.min_busbw 450 Gb/s is 56.25 GB/s*"])
    assert run.json["contract_warnings"][0].startswith("allreduce.min_busbw 450 Gb/s")
    assert "Contract warnings" in run.html
    assert {c["clause"]: c["outcome"] for c in run.checks()}["allreduce"] == "passed"
