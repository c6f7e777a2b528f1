"""Measurements that must not pass: a link that vanished, a counter reset, a GPU lost mid-load, a port
that trained below its line rate. Each fake host below would have been accepted, or judged on what
was left, before; each is now a failure that names what happened.

Each is judged in process (tests/judging.py); the counter reset stays a whole run, rejected."""

import json

from builders import (
    IB_UP,
    LOAD_CONTRACT,
    NVLINK_HEALTH_CONTRACT,
    RDMA_CONTRACT,
    UTILISATION_FIELDS,
    h100_errors,
    h100_status,
    recording,
    series,
    sysfs_tree,
)
from conftest import DATA, nvml_recording
from judging import Output, judge, option_path


def _errors_change_under_load(fake_tools, after: str) -> None:
    """all_reduce_perf rewrites what the second `nvidia-smi nvlink -e` prints, as the load would."""
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt", when="topo")
    fake_tools.add("nvidia-smi", h100_status(8), when="nvlink -s")
    fake_tools.add("nvidia-smi", h100_errors(8, {(1, 3): 9}), when="nvlink -e")
    fake_tools.add("all_reduce_perf", b"", rc=1)
    target = fake_tools.bin_dir / ".nvidia-smi.2.out"
    wrapper = fake_tools.bin_dir / "all_reduce_perf"
    wrapper.write_text(wrapper.read_text().replace("import json, os, signal, sys, time",
                       f"import json, os, signal, sys, time\nopen({str(target)!r}, 'w').write({after!r})"))


def errors_change_under_load(after: str) -> dict[str, Output]:
    """The harness's _errors_change_under_load: all_reduce_perf changes what the second `nvidia-smi nvlink -e` prints."""
    errors = Output(h100_errors(8, {(1, 3): 9}))

    def load() -> None:
        errors.stdout = after

    return {"nvidia-smi topo": Output(DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"),
            "nvidia-smi nvlink -s": Output(h100_status(8)), "nvidia-smi nvlink -e": errors,
            "all_reduce_perf": Output(b"", returncode=1, then=load)}


def test_a_link_missing_after_the_load_fails_naming_it(tmp_path):
    kept, gpu = [], -1
    for line in h100_errors(8, {(1, 3): 9}).splitlines():
        gpu = gpu + 1 if line.startswith("GPU ") else gpu
        if not (gpu == 4 and line.strip().startswith("Link 7:")):
            kept.append(line)
    judged = judge(NVLINK_HEALTH_CONTRACT, errors_change_under_load("\n".join(kept)), tmp_path)
    errors = {c.subject: c for c in judged.of("nvlink.errors")}
    assert errors["GPU4"].outcome.value == "failed"
    assert errors["GPU4"].message == ("the error counters cannot be compared across the load: link 7 was in "
                                      "`nvlink -e` before the load and is missing after it")
    assert errors["GPU0"].outcome.value == "passed"


def test_a_counter_that_went_down_is_a_reset_not_a_clean_link(accept, fake_tools):
    """A whole run, rejected."""
    _errors_change_under_load(fake_tools, h100_errors(8))  # GPU1 link 3 CRC 9 -> 0
    run = accept(NVLINK_HEALTH_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    errors = {c["subject"]: c for c in run.checks("nvlink.errors")}
    assert errors["GPU1"]["outcome"] == "failed"
    assert "link 3 CRC Errors went down 9 -> 0 (counters reset during the load)" in errors["GPU1"]["message"]
    assert run.json["verdict"] == "rejected"


def _load_recording(tmp_path, gpus: dict) -> str:
    base = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    base["utilisation"] = {"interval_s": 0.2, "fields": UTILISATION_FIELDS, "gpus": [
        {"index": i, "health": {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0]}, **gpus.get(i, {})}
        for i in range(4)]}
    for gpu in base["utilisation"]["gpus"]:
        gpu.setdefault("samples", series())
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(base))
    return f"--gpuaccept-nvml={path}"




LOAD = {"train-job": Output("training\n", seconds=1.5)}  # runs as long as the load's duration, as one stopped at its end


def test_a_gpu_that_stops_answering_nvml_fails_from_that_moment(tmp_path):
    lost = {"samples": series(seconds=7.4), "lost": {"t_s": 7.4, "error": "NVMLError_GpuIsLost: GPU is lost"}}
    judged = judge(LOAD_CONTRACT, LOAD, tmp_path, nvml=option_path(_load_recording(tmp_path, {2: lost})))
    util = {c.subject: c for c in judged.of("utilisation")}
    assert util["GPU2"].outcome.value == "failed" and util["GPU2"].measured is None
    assert util["GPU2"].message == ("GPU2 stopped answering NVML at t=7.4 s during the load (NVMLError_GpuIsLost: "
                                    "GPU is lost): lost, not judged on what came before")
    assert util["GPU0"].outcome.value == "passed"
    # Every reading under load fails for GPU2; who it is was read before the load, and stands.
    assert {c.outcome.value for c in judged.checks if c.subject == "GPU2" and c.clause != "gpus.identity"} == {"failed"}


def test_a_gpu_with_far_fewer_samples_is_not_judged_on_what_is_left(tmp_path):
    judged = judge(LOAD_CONTRACT, LOAD, tmp_path, nvml=option_path(_load_recording(tmp_path, {3: {"samples": series(seconds=2.0)}})))
    util = {c.subject: c for c in judged.of("utilisation")}
    assert util["GPU3"].outcome.value == "failed"
    assert util["GPU3"].message == ("GPU3 has 10 samples where another GPU has 60, the last at t=1.8 s: "
                                    "it stopped answering NVML during the load")


def test_a_400g_port_trained_at_200_fails_even_when_ib_write_bw_reaches_90_percent_of_200(tmp_path):
    half = {**IB_UP, "rate": "200 Gb/sec (2X NDR)"}
    sysfs_tree(tmp_path / "sys", {"mlx5_0": half})
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0]", extra="  line_rate: '400 Gb/s'\n"),
                   {"ib_write_bw": Output(DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt")},
                   tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert (check.outcome.value, check.measured) == ("failed", 0)
    assert check.message == ("mlx5_0 port 1 is active at 200 Gb/s, below the contract's line rate 400 Gb/s "
                             "(4: ACTIVE / 5: LinkUp): not measured further")
    assert [call for call in judged.recordings.asked if call[0] == "ib_write_bw"] == []


POWER = LOAD_CONTRACT + "  power_limit: default\n  max_remapped_rows: 0\n"
HEALTHY = {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "power_limit_enforced_w": 700.0,
           "power_limit_default_w": 700.0}


def test_a_rack_capped_to_half_its_power_and_a_card_with_remapped_rows_fail(tmp_path):
    capped = {**HEALTHY, "power_limit_enforced_w": 350.0}
    worn = {**HEALTHY, "remapped_rows": [3, 2, 0, 0]}
    judged = judge(POWER, LOAD, tmp_path, nvml=option_path(recording(tmp_path, health={0: HEALTHY, 1: capped, 2: worn, 3: HEALTHY})))
    power = {c.subject: c for c in judged.of("health.power_limit")}
    assert (power["GPU0"].outcome.value, power["GPU0"].measured) == ("passed", 700.0)
    assert power["GPU1"].outcome.value == "failed"
    assert power["GPU1"].message == ("enforced power limit 350 W under load, default 700 W: capped to 50% of "
                                     "the default")
    rows = {c.subject: c for c in judged.of("health.remapped_rows")}
    assert (rows["GPU2"].outcome.value, rows["GPU2"].measured) == ("failed", 2)
    assert rows["GPU2"].message == "2 rows remapped for uncorrectable errors (at most 0)"
    assert rows["GPU0"].outcome.value == "passed"


def test_power_limits_nvml_does_not_give_are_not_measured(tmp_path):
    judged = judge(POWER, LOAD, tmp_path, nvml=option_path(recording(tmp_path)))  # the recording has no power limits
    assert {c.message for c in judged.of("health.power_limit")} == {
        "not measured: NVML gives no enforced or default power limit for this GPU"}
