"""NVLink health: `nvidia-smi nvlink -s` link state and speed, `nvlink -e` counters across the load."""

import pytest
from builders import NVLINK_HEALTH_CONTRACT, STATUS_H100, h100_errors, h100_status
from conftest import DATA, nvml_recording, staged_recording

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.nvidia_smi import parse_nvlink_errors, parse_nvlink_status


def test_a_real_h100_status_reads_18_links_at_26_562():
    status = parse_nvlink_status(STATUS_H100)
    assert list(status.links) == [0]
    assert status.links[0] == {n: 26.562 for n in range(18)}


def test_a_markdown_mangled_v100_status_reads_6_links():
    status = parse_nvlink_status((DATA / "nvlink" / "v100_sxm2_status_i0_markdown_mangled.txt").read_text())
    assert status.links[0] == {n: 25.781 for n in range(6)}


@pytest.mark.parametrize("name, parse, line", [
    ("dgx1_v100_status_all_gpus_snipped.txt", parse_nvlink_status, "[snip]"),
    ("h100_errorcounters_e_elided_masked_uuid.txt", parse_nvlink_errors, "[...]"),
    ("dgx1_v100_capabilities_snipped.txt", parse_nvlink_status, "Link 0, P2P is supported: true"),
])
def test_elided_or_foreign_output_is_refused_quoting_the_line(name, parse, line):
    with pytest.raises(ParseError) as info:
        parse((DATA / "nvlink" / name).read_text())
    assert str(info.value).endswith(repr(line))


def test_a_capture_that_begins_with_a_scripts_comment_lines_reads_as_the_real_one():
    real = (DATA / "nvlink" / "h100_status_i0_18links.txt").read_text()
    # CONSTRUCTED: the real capture behind the comment lines a saving script writes first
    commented = "# cmd: nvidia-smi nvlink -s\n# host: gpu-node-07\n\n" + real
    assert parse_nvlink_status(commented) == parse_nvlink_status(real)
    assert parse_nvlink_status(commented).links[0] == {n: 26.562 for n in range(18)}


def test_a_comment_line_after_the_first_gpu_is_refused_quoting_it():
    lines = (DATA / "nvlink" / "h100_status_i0_18links.txt").read_text().splitlines()
    # CONSTRUCTED: a comment where a link line belongs must not read as a GPU with one link fewer
    text = "\n".join([*lines[:4], "# Link 3 hidden", *lines[5:]])
    with pytest.raises(ParseError) as info:
        parse_nvlink_status(text)
    assert str(info.value).endswith(repr("# Link 3 hidden"))
    with pytest.raises(ParseError):  # `nvlink -e` is not given the skip
        parse_nvlink_errors("# cmd: nvidia-smi nvlink -e\n" + h100_errors(1))


def test_the_counters_parse_per_link():
    errors = parse_nvlink_errors(h100_errors(2, {(1, 4): 7}))
    assert errors.counters[1][4] == {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 7}
    assert errors.total(1) == 7 and errors.total(0) == 0


def test_healthy_links_pass_and_counters_that_grow_under_load_fail(accept, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt", when="topo")
    fake_tools.add("nvidia-smi", h100_status(8, inactive={(3, 5)}, slow={(6, 0)}), when="nvlink -s")
    fake_tools.add("nvidia-smi", h100_errors(8), when="nvlink -e")
    # all_reduce_perf rewrites the counters the second `nvlink -e` will print: as if the load caused CRC errors.
    fake_tools.add("all_reduce_perf", b"", rc=1)
    after = fake_tools.bin_dir / ".nvidia-smi.2.out"
    grown = h100_errors(8, {(2, 11): 5})
    wrapper = fake_tools.bin_dir / "all_reduce_perf"
    wrapper.write_text(wrapper.read_text().replace("import json, os, signal, sys, time",
                       f"import json, os, signal, sys, time\nopen({str(after)!r}, 'w').write({grown!r})"))
    def link_5_of_gpu3_down(reading):  # NVML sees what `nvlink -s` sees: one host, two sources that agree
        reading["gpus"][3]["nvlinks"][5]["active"] = False

    run = accept(NVLINK_HEALTH_CONTRACT, staged_recording(tmp_path, "h100_sxm5_8gpu.json", link_5_of_gpu3_down))
    links = {c["subject"]: c for c in run.checks("nvlink.links")}
    assert links["GPU0"]["outcome"] == "passed" and links["GPU0"]["measured"] == 18
    assert links["GPU0"]["message"] == "18 links active at 26.562 GB/s"
    assert links["GPU3"]["outcome"] == "failed" and links["GPU3"]["measured"] == 17
    assert links["GPU3"]["message"] == "17 links active at 26.562 GB/s; 17 of 18 links active (inactive: [5])"
    assert links["GPU6"]["message"].endswith("links [0] below 26.5 GB/s (13.281 GB/s)")
    errors = {c["subject"]: c for c in run.checks("nvlink.errors")}
    assert errors["GPU0"]["outcome"] == "passed"
    assert errors["GPU2"]["outcome"] == "failed" and errors["GPU2"]["measured"] == 5
    assert errors["GPU2"]["message"] == "error counters increased during the load: link 11 CRC Errors 0 -> 5"
    calls = [c[1:] for c in fake_tools.calls()]
    allreduce = calls.index(["-g", "8", "-b", "8388608", "-e", "8589934592", "-f", "2", "-c", "1"])
    # Read right before and right after the all_reduce, not around whatever else the run measured in between.
    assert calls[allreduce - 1] == calls[allreduce + 1] == ["nvlink", "-e"]
    assert calls.count(["nvlink", "-e"]) == 2 and calls.count(["nvlink", "-s"]) == 1


def test_a_shadowed_nvidia_smi_showing_a_dead_link_active_fails_against_nvml(accept, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", h100_status(8), when="nvlink -s")  # every link of every GPU up, it says

    def link_5_of_gpu3_down(reading):
        reading["gpus"][3]["nvlinks"][5]["active"] = False

    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink:\n  every_pair: true\n  links_per_gpu: 18\n",
                 staged_recording(tmp_path, "h100_sxm5_8gpu.json", link_5_of_gpu3_down), "-k", "links_active")
    links = {c["subject"]: c for c in run.checks("nvlink.links")}
    assert [s for s, c in links.items() if c["outcome"] != "passed"] == ["GPU3"]
    assert links["GPU3"]["message"] == ("`nvidia-smi nvlink -s` shows links [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
                                        "14, 15, 16, 17] active on GPU3, NVML shows [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, "
                                        "12, 13, 14, 15, 16, 17]")


def test_without_nvidia_smi_link_health_is_not_measured(accept, fake_tools):
    run = accept(NVLINK_HEALTH_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    assert {c["outcome"] for c in run.checks("nvlink.links") + run.checks("nvlink.errors")} == {"not_measured"}
    assert len(run.checks("nvlink.links")) == 8 and len(run.checks("nvlink.errors")) == 8
