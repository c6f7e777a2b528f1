"""The long and the short load confirmed by what the vendor does not print (issue 38): each fraud beside its honest twin.

The honest base is real: the H200's NVML samples under the bf16 GEMM (tests/data/h200/run-nvml-samples-gemm.json:
idle at 345 MHz and 79 W, then 98-100 % busy at 1455-1935 MHz, held at its 700 W limit with sw_power_cap) and under
the builtin load (run-nvml-samples.json), on the H200's own host reading (nvml-h200.json). A burn-in stream is built
from them here (constructed from real, tests/data/SOURCES.md): the real start-up, then the real busy samples over and
over for the stream's minutes, each with the 700 W enforced limit NVML read for that GPU (the samples were recorded
before the limit was a column). A fraud changes only what it changes, and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from builders import BURNIN_HEADER
from conftest import DATA
from judging import judge, workload

from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.verdict import Check

GEMM = json.loads((DATA / "h200" / "run-nvml-samples-gemm.json").read_text())["gpus"][0]["samples"]
REAL_LIMIT_W = 700.0  # nvml-h200.json: power_limit_enforced_w and power_limit_default_w
FIRST_BUSY = next(n for n, row in enumerate(GEMM) if row[1] >= 50)
LAST_BUSY = max(n for n, row in enumerate(GEMM) if row[1] >= 50)
Row = list  # [t_s, util, sm clock, power, temp, reasons, pcie gen, pcie width, enforced limit]


def real_rows(seconds: float, interval: float = 0.15) -> list[Row]:
    """The real start-up (idle samples up to the first busy one), then the real busy samples again and again, one every
    `interval` s, each with the enforced limit of 700 W."""
    start, busy = GEMM[:FIRST_BUSY], GEMM[FIRST_BUSY:LAST_BUSY + 1]
    rows = []
    for n in range(int(seconds / interval)):
        real = start[n] if n < len(start) else busy[(n - len(start)) % len(busy)]
        rows.append([round(n * interval, 3), *real[1:8], REAL_LIMIT_W])
    return rows


def burnin_recording(tmp_path: Path, minutes: float, change: Callable[[Row], Row] | None = None,
                     before: dict | None = None) -> Path:
    """The H200's host reading (with `before` over its GPU's keys) naming a burn-in stream of the real samples, each
    busy row passed through `change` (the fraud). Counters every 10 s: ECC [0, 0], rows [0, 0, 0, 0], as NVML read."""
    lines = [json.dumps({**BURNIN_HEADER, "interval_s": 0.15,
                         "gpus": [{"index": 0, "slowdown_temp_c": 86, "nvlinks": []}]})]
    counted = -10.0
    for row in real_rows(minutes * 60):
        if row[0] - counted >= 10.0:
            counted = row[0]
            lines.append(json.dumps({"t_s": row[0], "gpu": 0, "ecc": [0, 0], "remapped_rows": [0, 0, 0, 0],
                                     "nvlink_errors": None}))
        lines.append(json.dumps([0, *(change(row) if change and row[1] >= 50 else row)]))
    lines.append(json.dumps({"end": True, "t_s": minutes * 60}))
    stream = tmp_path / "burnin-stream.jsonl"
    stream.write_text("\n".join(lines) + "\n")
    reading = json.loads((DATA / "h200" / "nvml-h200.json").read_text())
    reading["gpus"][0].update(before or {})
    reading["burnin"] = {"stream": str(stream)}
    path = tmp_path / "nvml-h200-burnin.json"
    path.write_text(json.dumps(reading))
    return path


BURNIN = ("gpuaccept: 1\nvendor: V\ngpus:\n  count: 1\n"
          "burnin:\n  duration: \"5 min\"\n  workload: [\"burn-job\"]\n  max_throttle_s: 5\n  min_percent: 90\n")


def burnin_checks(tmp_path: Path, change: Callable[[Row], Row] | None = None, before: dict | None = None,
                  minutes: int = 5) -> dict[str, Check]:
    contract = BURNIN.replace('"5 min"', f'"{minutes} min"')
    judged = judge(contract, {"burn-job": workload(minutes * 60)["train-job"]}, tmp_path,
                   nvml=burnin_recording(tmp_path, minutes, change, before))
    return {c.clause: c for c in judged.checks}


# ---------------------------------------------------------------- burnin: busy at an idle GPU's power and clock

def test_99_percent_busy_at_345_mhz_and_70_w_for_ten_minutes_is_not_busy(tmp_path):
    """The fraud: every busy sample's clock and power replaced by an idle GPU's (345 MHz, 70 W) for ten minutes; its
    utilisation (98-100 %) kept."""
    checks = burnin_checks(tmp_path, lambda row: [row[0], row[1], 345, 70.0, *row[4:]], minutes=10)
    util = checks["burnin.utilisation"]
    assert (util.outcome.value, util.measured) == ("failed", 0)
    assert util.message.startswith(
        "GPU0: 100% of the samples of the 1.0 min ending at t=67.2 s (1.1 min) are at least 50 % busy (NVML) while drawing "
        "70 W (10% of its 700 W enforced limit) at 345 MHz (17% of the 1980 MHz boost of a H200 SXM 141GB), their means: "
        "an idle GPU's power and clock, not busy; GPU0: the least busy window ended at")
    assert util.details["sources"] == ["NVML utilisation", "NVML power draw and enforced limit", "NVML SM clock",
                                       "the model table's boost clock (H200 SXM 141GB)"]
    clocks = checks["burnin.clocks"]
    assert (clocks.outcome.value, clocks.measured) == ("failed", 345)
    assert clocks.message == ("GPU0: the lowest window of its busy samples under 90% of the power limit 345 MHz ending at "
                              "t=67.2 s (1.1 min), 17% of the 1980 MHz boost of a H200 SXM 141GB, under 1683 MHz with its "
                              "power to spare: a clock held down (locked or application clocks?)")


def test_the_real_h200_burn_in_is_busy_and_its_clocks_are_what_its_power_buys(tmp_path):
    checks = burnin_checks(tmp_path, minutes=10)
    util, clocks = checks["burnin.utilisation"], checks["burnin.clocks"]
    assert util.outcome.value == "passed", util.message
    assert util.details["sources"] == ["NVML utilisation", "NVML power draw and enforced limit", "NVML SM clock",
                                       "the model table's boost clock (H200 SXM 141GB)"]
    assert clocks.outcome.value == "passed", clocks.message
    assert "; at its power limit in " in clocks.message and clocks.message.endswith(
        "busy samples: its clock is what that power buys (the boost clock of a H200 SXM 141GB is 1980 MHz)")
    assert clocks.details["sources"] == ["NVML SM clock", "the model table's boost clock (H200 SXM 141GB)"]


def test_a_light_load_at_the_boost_clock_drawing_an_idle_gpus_power_is_busy(tmp_path):
    """Honest variety: a load too light to draw power, at the boost clock. The real H200 drew 127.3 W at 1980 MHz as
    its builtin load began (run-nvml-samples.json, t=0.0 s); the busy samples given that clock and power."""
    checks = burnin_checks(tmp_path, lambda row: [row[0], row[1], 1980, 127.3, *row[4:]])
    util, clocks = checks["burnin.utilisation"], checks["burnin.clocks"]
    assert util.outcome.value == "passed", util.message
    assert clocks.outcome.value == "passed", clocks.message
    assert "the lowest window of its busy samples under 90% of the power limit 1980 MHz" in clocks.message


def test_a_power_capped_load_whose_power_average_reads_under_90_percent_is_held_by_power(tmp_path):
    """Honest variety: the real H200's ramp drew 285-570 W of its 700 W at 1695-1845 MHz with sw_power_cap raised
    (NVML's power is a 1 s average; the cap acts faster). Every busy sample at 600 W (86 %) and 1500 MHz, the reason
    raised: held by power, not a clock locked below the boost."""
    checks = burnin_checks(tmp_path, lambda row: [row[0], row[1], 1500, 600.0, row[4], 0x4, *row[6:]])
    assert checks["burnin.clocks"].outcome.value == "passed", checks["burnin.clocks"].message


# ---------------------------------------------------------------- burnin: clocks locked below the boost, no reason

def test_clocks_locked_at_1200_mhz_with_no_reason_raised_fail_burnin_clocks_on_the_boost_clock(tmp_path):
    """The fraud: `nvidia-smi -lgc 1200` during the load: the busy samples at 1200 MHz drawing 450 W, no clock event
    reason raised (what locked clocks raise). Its lowest window is its highest: only the boost clock refutes it."""
    checks = burnin_checks(tmp_path, lambda row: [row[0], row[1], 1200, 450.0, row[4], 0, *row[6:]])
    clocks = checks["burnin.clocks"]
    assert (clocks.outcome.value, clocks.measured, clocks.threshold) == ("failed", 1200, pytest.approx(1683))
    assert clocks.required == ">= 1683 (0.85 x the 1980 MHz boost of a H200 SXM 141GB)"
    assert "1200 MHz ending at" in clocks.message and "61% of the 1980 MHz boost" in clocks.message
    assert clocks.details["sources"] == ["NVML SM clock", "the model table's boost clock (H200 SXM 141GB)"]
    assert checks["burnin.throttle"].outcome.value == "passed"  # no reason raised: the throttle spans see nothing


# ---------------------------------------------------------------- burnin: a power limit set for the load, undone after

def test_a_power_limit_lowered_for_the_burn_in_and_raised_again_fails_on_the_limit_read_before(tmp_path):
    """The fraud: `nvidia-smi -pl 350` as the load starts, 700 W again before anything reads it: NVML's host reading
    before the load says 700 W; the samples carry 350 W, and the GPU held at it (half the real draw)."""
    checks = burnin_checks(tmp_path, lambda row: [*row[:3], round(row[3] / 2, 1), *row[4:8], 350.0],
                           before={"power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0})
    clocks = checks["burnin.clocks"]
    assert clocks.outcome.value == "failed"
    assert clocks.message == ("GPU0: the enforced power limit in the samples was 350 W at t=7.3 s, under the 700 W default "
                              "limit NVML read before the load (50% of it): a limit lowered for the load holds its clocks "
                              "and power")
    assert clocks.details["sources"] == ["NVML enforced power limit in the samples", "NVML power limits read before the load"]


def test_the_real_limit_is_the_one_read_before_the_load(tmp_path):
    clocks = burnin_checks(tmp_path, before={"power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0})
    assert clocks["burnin.clocks"].outcome.value == "passed", clocks["burnin.clocks"].message


# ---------------------------------------------------------------- burnin: ECC off while its counters read 0

def test_ecc_disabled_before_the_burn_in_is_not_measured_though_the_counters_read_0(tmp_path):
    """The fraud: the real H200's ECC mode (Enabled/Enabled, nvidia-smi-q.txt) read as Disabled by NVML before the load;
    the counters of the stream still read [0, 0]."""
    ecc = burnin_checks(tmp_path, before={"ecc_mode_current": 0, "ecc_mode_pending": 0})["burnin.ecc"]
    assert ecc.outcome.value == "not_measured"
    assert ecc.message == ("not measured: ECC is disabled on GPU0 (NVML's ECC mode, read before the load): memory errors "
                           "are neither corrected nor counted, so its ECC counters read [0, 0] and say nothing")


def test_ecc_mode_unreadable_while_the_counters_read_is_not_measured(tmp_path):
    ecc = burnin_checks(tmp_path, before={"ecc_mode_current": None, "ecc_mode_pending": None})["burnin.ecc"]
    assert ecc.outcome.value == "not_measured"
    assert ecc.message == ("not measured: NVML reads no ECC mode of GPU0 (not supported: no ECC) before the load, yet its "
                           "ECC counters read [0, 0]: counters of memory errors a GPU without ECC does not count say nothing")


def test_ecc_disabled_fails_the_burn_in_where_health_expects_ecc(tmp_path):
    """With `health: {ecc: true}` (read around a utilisation load: the real H200 builtin load's samples) ECC off fails."""
    samples = json.loads((DATA / "h200" / "run-nvml-samples.json").read_text())
    path = burnin_recording(tmp_path, 5, before={"ecc_mode_current": 0, "ecc_mode_pending": 0})
    reading = json.loads(path.read_text())
    reading["utilisation"] = samples
    path.write_text(json.dumps(reading))
    contract = BURNIN + "utilisation: {min_percent: 1, duration: '20 s', warmup: '18.4 s', workload: ['train-job']}\n" \
                        "health: {ecc: true}\n"
    judged = judge(contract, {"burn-job": workload(300)["train-job"], **workload(20)}, tmp_path, nvml=path)
    ecc = {c.clause: c for c in judged.checks}["burnin.ecc"]
    assert ecc.outcome.value == "failed"
    assert ecc.message.endswith("so its ECC counters read [0, 0] and say nothing; health.ecc expects ECC")


def test_ecc_enabled_before_the_burn_in_passes_on_its_counters(tmp_path):
    """The real mode: Enabled, Enabled (tests/data/h200/nvidia-smi-q.txt)."""
    ecc = burnin_checks(tmp_path, before={"ecc_mode_current": 1, "ecc_mode_pending": 1})["burnin.ecc"]
    assert ecc.outcome.value == "passed", ecc.message


# ---------------------------------------------------------------- utilisation and health: the short load's twins

def _h200_load(tmp_path: Path, change: Callable[[list], list] | None = None, health: dict | None = None) -> Path:
    """The H200's host reading with the real builtin load's samples (each busy row through `change`), the enforced
    limit of each sample added (700 W, the real one, unless `change` says otherwise)."""
    real = json.loads((DATA / "h200" / "run-nvml-samples.json").read_text())
    real["fields"] = [*real["fields"], "power_limit_w"]
    gpu = real["gpus"][0]
    gpu["samples"] = [(change(row + [REAL_LIMIT_W]) if change and row[1] >= 50 else row + [REAL_LIMIT_W])
                      for row in gpu["samples"]]
    gpu["health"].update(health or {})
    reading = json.loads((DATA / "h200" / "nvml-h200.json").read_text())
    reading["utilisation"] = real
    path = tmp_path / "nvml-h200-load.json"
    path.write_text(json.dumps(reading))
    return path


LOAD = ("gpuaccept: 1\nvendor: V\ngpus:\n  count: 1\n"
        "utilisation: {min_percent: 1, duration: '20 s', warmup: '18.4 s', workload: ['train-job']}\n")


def _health(tmp_path: Path, keys: str, change: Callable[[list], list] | None = None,
            health: dict | None = None) -> dict[str, Check]:
    judged = judge(LOAD + f"health: {{{keys}}}\n", workload(20), tmp_path, nvml=_h200_load(tmp_path, change, health))
    return {c.clause: c for c in judged.checks}


def test_an_ecc_mode_nvml_cannot_read_beside_a_counter_of_0_is_not_measured(tmp_path):
    """The fraud: NVML's ECC mode unreadable (null, as NotSupported records it) while the counter reads the real 0."""
    ecc = _health(tmp_path, "ecc: true", health={"ecc_mode_current": None, "ecc_mode_pending": None})["health.ecc"]
    assert (ecc.outcome.value, ecc.message) == (
        "not_measured", "not measured: NVML reads no ECC mode of GPU0 (not supported: no ECC), yet its volatile "
                        "uncorrectable ECC counter reads 0: a GPU without ECC counts no memory error")


def test_the_real_h200_ecc_mode_and_counter_pass_health_ecc(tmp_path):
    """The real mode, Enabled/Enabled (tests/data/h200/nvidia-smi-q.txt), beside the real counter of 0."""
    ecc = _health(tmp_path, "ecc: true", health={"ecc_mode_current": 1, "ecc_mode_pending": 1})["health.ecc"]
    assert (ecc.outcome.value, ecc.message) == ("passed", "0 volatile uncorrectable ECC errors")


def test_clocks_locked_with_no_reason_fail_health_throttle_on_the_boost_clock(tmp_path):
    """The fraud: the real load's busy samples at a locked 1200 MHz drawing 450 W, no clock event reason raised."""
    throttle = _health(tmp_path, "throttle: true", lambda row: [row[0], row[1], 1200, 450.0, row[4], 0, *row[6:]])
    check = throttle["health.throttle"]
    assert (check.outcome.value, check.measured) == ("failed", 11)
    assert check.message == ("11 of 11 busy samples under the power limit run under 1683 MHz with no clock event reason "
                             "raised, first at t=18.5 s (median 1200 MHz, 61% of the 1980 MHz boost of a H200 SXM 141GB): "
                             "a clock held down that NVML's reasons do not explain (locked clocks raise none)")
    assert check.details["sources"] == ["NVML clock event reasons", "NVML SM clock",
                                        "the model table's boost clock (H200 SXM 141GB)"]


def test_the_real_h200_load_passes_health_throttle_beside_the_boost_clock(tmp_path):
    check = _health(tmp_path, "throttle: true")["health.throttle"]
    assert check.outcome.value == "passed", check.message
    assert check.message == ("no bad throttle reason in 134 samples; reasons seen: gpu_idle, sw_power_cap; 4 of 4 busy "
                             "samples under the power limit at 1683 MHz or more, or with a reason")


def test_a_power_limit_lowered_for_the_load_does_not_excuse_health_clocks(tmp_path):
    """The fraud: 350 W in every busy sample (the GPU held at it, drawing half the real power at 0.7 of its clock),
    700 W again as the load ends: health.clocks used to take those samples as "what that power buys"."""
    checks = _health(tmp_path, "clocks: true",
                     lambda row: [row[0], row[1], round(row[2] * 0.7), round(row[3] / 2, 1), *row[4:8], 350.0])
    clocks = checks["health.clocks"]
    assert clocks.outcome.value == "failed"
    assert clocks.message == ("GPU0 median 1228 MHz under load, held by a power limit of 350 W (NVML's enforced limit, at "
                              "t=19.1 s; 7 of 7 samples at the power limit) under its 700 W default limit (50%): a limit "
                              "lowered for the load buys its clock, it does not excuse it")
    assert clocks.details["sources"][:2] == ["NVML enforced power limit in the samples", "NVML default power limit"]


def test_the_real_h200_load_at_its_own_limit_passes_health_clocks(tmp_path):
    """The honest twin: the same samples at the real 700 W limit, the default limit the load ends with."""
    clocks = _health(tmp_path, "clocks: true")["health.clocks"]
    assert clocks.outcome.value == "passed", clocks.message
    assert clocks.message.endswith("more at the power limit, not counted")


# ---------------------------------------------------------------- utilisation: hours belong in the burn-in

def test_a_utilisation_load_of_hours_is_refused_pointing_at_burnin():
    text = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nutilisation:\n  min_percent: 90\n  duration: '8 h'\n"
    with pytest.raises(ContractError) as info:
        parse_contract(text, "vendor.yaml")
    assert info.value.problems == [
        "vendor.yaml:7: utilisation.duration: expected at most 1 h, got 8 h: a load of hours is a burn-in, which streams "
        "its samples (burnin: {duration: \"8 h\", min_percent: ...})"]


def test_a_utilisation_load_of_an_hour_is_taken():
    text = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nutilisation:\n  min_percent: 90\n  duration: '60 min'\n"
    assert parse_contract(text, "vendor.yaml")
