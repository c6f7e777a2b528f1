"""dcgm: what DCGM does not print confirms its Pass (issue 38). Each fraud a vendor who controls `dcgmi` can serve is
rejected naming the source that refuted it, beside its honest twin, accepted: the plugin's clock against a run too
short for its level, NVML's driver version, NVML's serial, UUID and PCI address, NVML's memory total against DCGM's
memory lines, NVML's row remapping and retired pages against a deployment Pass. A document with no identity of its
GPUs is taken on DCGM's word and says so."""

from __future__ import annotations

import json

import pytest
from builders import dcgm4_document, t4_recording
from conftest import DATA, staged_recording
from judging import Output, judge, option_path

from pytest_gpuaccept.probes.dcgm import NOT_SUPPORTED, memory_figures, parse_diag

DCGM = DATA / "dcgm"
R2_T4 = DCGM / "3.x_r2_t4_1gpu_pass.json"
R3_T4 = DCGM / "3.x_r3_t4_1gpu_eud_skip.json"
GB10 = DCGM / "4.2.3_r1_gb10_software_fail_persistence_exit226.json"
SERIALS = [f"165232200000{i}" for i in range(4)]  # NVML's serials in tests/data/nvml/h100_sxm5_4gpu.json

CONTRACT = """\
gpuaccept: 1
vendor: V
gpus: {{count: {count}}}
dcgm: {{level: {level}}}
"""


def _judge(tmp_path, output, level, count=1, recording="h100_sxm5_4gpu.json", seconds=None):
    """dcgmi diag -r LEVEL printing `output` after `seconds`, judged in process: its dcgm checks by subject."""
    judged = judge(CONTRACT.format(count=count, level=level), {f"dcgmi {level}": Output(output, seconds=seconds)},
                   tmp_path, nvml=recording)
    return {c.subject: c.to_dict() for c in judged.of("dcgm")}


def _staged(tmp_path, change, source="h100_sxm5_4gpu.json"):
    """The NVML recording with something staged in it, as a path for the harness."""
    return option_path(staged_recording(tmp_path, source, change))


# ------------------------------------------------------------------ the plugin's clock

def test_a_level_3_all_pass_document_printed_at_once_fails_every_pass_on_the_plugins_clock(tmp_path):
    checks = _judge(tmp_path, R3_T4, 3, recording=t4_recording(tmp_path), seconds=2.95)
    passes = ["software", "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"]
    assert [checks[f"GPU0/{t}"]["outcome"] for t in passes] == ["failed"] * 7
    assert checks["GPU0/diagnostic"]["message"] == (
        "DCGM diagnostic on GPU0: Pass, but `dcgmi diag -r 3 -j` returned in 3.0 s by the plugin's clock, and a run whose "
        "targeted_stress passes takes at least 30 s (level 3: DCGM's documentation gives about 15 minutes): this document "
        "was not made by this run")
    assert "the plugin's clock" in checks["GPU0/diagnostic"]["details"]["sources"]


def test_the_same_level_3_document_after_a_run_of_its_length_passes(tmp_path):
    checks = _judge(tmp_path, R3_T4, 3, recording=t4_recording(tmp_path), seconds=840.0)
    assert {s: c["outcome"] for s, c in checks.items() if c["outcome"] != "not_measured"} == {
        f"GPU0/{t}": "passed" for t in ["software", "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power",
                                        "memory_bandwidth"]}


@pytest.mark.parametrize(("seconds", "outcome"), [(2.95, "failed"), (25.0, "passed")])
def test_a_level_2_document_answered_in_3_s_fails_and_one_answered_in_25_s_passes(tmp_path, seconds, outcome):
    checks = _judge(tmp_path, R2_T4, 2, recording=t4_recording(tmp_path), seconds=seconds)
    assert {c["outcome"] for c in checks.values()} == {outcome}
    if outcome == "failed":
        assert checks["GPU0/software"]["message"] == (
            "DCGM software on GPU0: Pass, but `dcgmi diag -r 2 -j` returned in 3.0 s by the plugin's clock, and a run "
            "whose pcie passes takes at least 5 s (level 2: DCGM's documentation gives about two minutes): this "
            "document was not made by this run")


def test_level_1_has_no_floor_a_deployment_check_takes_seconds(tmp_path):
    checks = _judge(tmp_path, dcgm4_document(SERIALS), 1, 4, seconds=0.5)
    assert {c["outcome"] for c in checks.values()} == {"passed"}
    assert "the plugin's clock" not in checks["GPU0/software"]["details"]["sources"]


# ------------------------------------------------------------------ NVML's driver version

@pytest.mark.parametrize(("driver", "outcome"), [("550.54.15", "failed"), ("560.35.03", "passed")])
def test_a_document_of_another_driver_fails_naming_nvmls_and_one_of_this_driver_passes(tmp_path, driver, outcome):
    checks = _judge(tmp_path, dcgm4_document(SERIALS, driver=driver), 1, 4)
    assert {c["outcome"] for c in checks.values()} == {outcome}
    assert "NVML's driver version" in checks["GPU1/software"]["details"]["sources"]
    if outcome == "failed":
        assert checks["GPU1/software"]["message"] == (
            "DCGM software on GPU1: Pass, but DCGM's document says it detected driver 550.54.15, NVML's driver is "
            "560.35.03: not this host's driver today")


# ------------------------------------------------------------------ NVML's row remapping and retired pages

def _health(rows=None, retired=None, gpu=2):
    def change(reading):
        for g in reading["gpus"]:
            g["remapped_rows"], g["retired_pages_pending"] = [0, 0, 0, 0], None
        reading["gpus"][gpu].update(remapped_rows=rows, retired_pages_pending=retired)
    return change


def test_a_row_remapping_pending_today_fails_the_deployment_pass_naming_nvml(tmp_path):
    recording = _staged(tmp_path, _health([0, 3, 1, 0]))
    checks = _judge(tmp_path, dcgm4_document(SERIALS), 1, 4, recording=recording)
    assert [checks[f"GPU{i}/software"]["outcome"] for i in range(4)] == ["passed", "passed", "failed", "passed"]
    assert checks["GPU2/software"]["message"] == (
        "DCGM software on GPU2: Pass, but NVML's GPU2 has a row remapping pending (NVML's remapped rows: 0 correctable, "
        "3 uncorrectable, pending 1, failure 0), which DCGM's deployment check 'Page Retirement/Row Remap' fails: not "
        "this card's document today")
    assert checks["GPU0/software"]["details"]["sources"] == [
        "DCGM (dcgmi diag)", "NVML's driver version", "NVML's serial", "sysfs's PCI device ID", "NVML's row remapping"]


def test_rows_remapped_in_the_past_and_none_pending_do_not_contradict_a_deployment_pass(tmp_path):
    recording = _staged(tmp_path, _health([2, 3, 0, 0]))
    checks = _judge(tmp_path, dcgm4_document(SERIALS), 1, 4, recording=recording)
    assert {c["outcome"] for c in checks.values()} == {"passed"}


@pytest.mark.parametrize(("retired", "outcome"), [(True, "failed"), (False, "passed")])
def test_pages_pending_retirement_on_a_gpu_that_retires_pages_fail_the_deployment_pass(tmp_path, retired, outcome):
    recording = _staged(tmp_path, _health(None, retired))
    checks = _judge(tmp_path, dcgm4_document(SERIALS), 1, 4, recording=recording)
    assert checks["GPU2/software"]["outcome"] == outcome
    assert "NVML's retired pages" in checks["GPU2/software"]["details"]["sources"]
    if retired:
        assert checks["GPU2/software"]["message"] == (
            "DCGM software on GPU2: Pass, but NVML's GPU2 has retired pages pending, which DCGM's deployment check "
            "'Page Retirement/Row Remap' fails: not this card's document today")


# ------------------------------------------------------------------ NVML's memory total

ALLOCATED = "GPU 0 Allocated 15206918958 bytes (97.3%)"


@pytest.mark.parametrize(("line", "outcome"), [
    ("GPU 0 Allocated 41156766400 bytes (97.3%)", "failed"),  # 97.3 % of an A100 40GB's CUDA total, 42298834944 B
    ("GPU 0 Allocated 82733371621 bytes (97.3%)", "passed"),  # 97.3 % of an H100 80GB's, 85029158912 B
])
def test_another_hosts_dcgm_3_document_allocating_40_gb_on_an_80_gb_card_fails_naming_nvmls_total(tmp_path, line, outcome):
    # Constructed from the real T4 level-2 run: its memory line as DCGM 3 prints it on another card.
    document = R2_T4.read_text().replace(ALLOCATED, line)
    assert document != R2_T4.read_text()
    checks = _judge(tmp_path, document, 2, seconds=60.0)
    assert {c["outcome"] for c in checks.values()} == {outcome}
    if outcome == "failed":
        assert checks["GPU0/memory"]["message"] == (
            "DCGM memory on GPU0: Pass, but DCGM's memory test on GPU 0 allocated 41.2 GB, 97.3 % of a 42.3 GB card; "
            "NVML's GPU0 has 85.5 GB: not this card's memory")
        assert "NVML's memory total" in checks["GPU0/memory"]["details"]["sources"]
    else:  # no serial to confirm the card with: DCGM's word, and what agreed with it
        assert checks["GPU0/memory"]["details"]["unconfirmed"].endswith(
            "(the plugin's clock, NVML's memory total agreed with it)")


def test_the_real_t4_document_is_refuted_on_an_h100_and_accepted_on_the_t4(tmp_path):
    on_h100 = _judge(tmp_path / "h100", R2_T4, 2, seconds=60.0)
    on_t4 = _judge(tmp_path / "t4", R2_T4, 2, recording=t4_recording(tmp_path), seconds=60.0)
    assert on_h100["GPU0/pcie"]["message"] == (
        "DCGM pcie on GPU0: Pass, but DCGM's memory test on GPU 0 allocated 15.2 GB, 97.3 % of a 15.6 GB card; NVML's "
        "GPU0 has 85.5 GB: not this card's memory")
    assert {c["outcome"] for c in on_t4.values()} == {"passed"}


def test_a_diagnostic_that_started_from_more_memory_than_the_card_has_fails(tmp_path):
    # Constructed from the real T4 level-3 run: its GEMM's free bytes those of an H100 80GB (DCGM #215's 76077622886).
    document = R3_T4.read_text().replace("from 13826359296 bytes available", "from 76077622886 bytes available")
    checks = _judge(tmp_path, document, 3, recording=t4_recording(tmp_path), seconds=840.0)
    assert checks["GPU0/diagnostic"]["message"] == (
        "DCGM diagnostic on GPU0: Pass, but DCGM's diagnostic on GPU 0 started from 76.1 GB free; NVML's GPU0 has 15.8 "
        "GB in all: not this card's memory")


def test_dcgms_memory_lines_are_read_as_dcgm_3_writes_them():
    figures = memory_figures(parse_diag(R3_T4.read_text()), 0)
    assert (figures.allocated, figures.available) == (((15206918958, 97.3),), (13826359296,))
    assert memory_figures(parse_diag(R3_T4.read_text()), 1).allocated == ()


# ------------------------------------------------------------------ NVML's serial, UUID and PCI address

@pytest.mark.parametrize("serial", [NOT_SUPPORTED, None, ""])  # None: no serial_num key, as dcgmi leaves a blank out
def test_serials_dcgm_calls_not_supported_or_leaves_out_where_nvml_reads_one_fail_naming_nvmls(tmp_path, serial):
    document = json.loads(dcgm4_document([serial or ""] * 4))
    for entity in document["entity_groups"][0]["entities"]:
        if serial is None:
            del entity["serial_num"]
    checks = _judge(tmp_path, json.dumps(document), 1, 4)
    assert {c["outcome"] for c in checks.values()} == {"failed"}
    said = "calls its serial not supported" if serial else "gives it no serial"
    assert checks["GPU1/software"]["message"] == (
        f"DCGM software on GPU1: Pass, but DCGM's document {said} for GPU 1, NVML reads GPU1's serial 1652322000001: "
        "DCGM reads the serial from NVML, so not this card's document")
    assert "NVML's serial" in checks["GPU1/software"]["details"]["sources"]


def test_not_supported_where_nvml_has_no_serial_either_passes_on_dcgms_word_said(tmp_path):
    def no_serials(reading):
        for g in reading["gpus"]:
            g["serial"] = ""
    checks = _judge(tmp_path, dcgm4_document([NOT_SUPPORTED] * 4), 1, 4, recording=_staged(tmp_path, no_serials))
    assert {c["outcome"] for c in checks.values()} == {"passed"}
    assert checks["GPU0/software"]["details"]["sources"] == ["DCGM (dcgmi diag)"]
    assert checks["GPU0/software"]["details"]["unconfirmed"] == (
        "DCGM's document names no serial, UUID or PCI address of GPU 0 that NVML's could confirm: its verdict is not "
        "confirmed to be this card's (NVML's driver version, sysfs's PCI device ID agreed with it)")


def test_a_serial_dcgm_gives_where_nvml_reads_none_is_not_this_cards(tmp_path):
    def no_serials(reading):
        for g in reading["gpus"]:
            g["serial"] = ""
    checks = _judge(tmp_path, dcgm4_document(SERIALS), 1, 4, recording=_staged(tmp_path, no_serials))
    assert checks["GPU0/software"]["message"] == (
        "DCGM software on GPU0: Pass, but DCGM's GPU 0 has serial 1652322000000, NVML's GPU0 has none: not the same card")


def _with(document: str, **keys: list[str]) -> str:
    """A DCGM 4 document whose entities carry more keys (a uuid, a pci_bus_id), each GPU its value."""
    data = json.loads(document)
    for entity in data["entity_groups"][0]["entities"]:
        entity.update({key: values[entity["entity_id"]] for key, values in keys.items()})
    return json.dumps(data)


NVML_UUIDS = [f"GPU-h100-0{i}aaaaaaa-0000-0000-0000-00000000000{i}" for i in range(4)]
NVML_BUSES = ["00000000:18:00.0", "00000000:28:00.0", "00000000:38:00.0", "00000000:48:00.0"]


def test_uuids_and_pci_addresses_where_the_document_gives_them_are_nvmls_or_fail(tmp_path):
    uuids = NVML_UUIDS[:3] + ["GPU-0f3e0e9a-5a3c-4c1d-9d2e-7b1a2c3d4e5f"]
    buses = [b.replace("00000000:", "0000:") for b in NVML_BUSES]  # as sysfs writes them: the same address
    checks = _judge(tmp_path, _with(dcgm4_document(SERIALS), uuid=uuids, pci_bus_id=buses), 1, 4)
    assert [checks[f"GPU{i}/software"]["outcome"] for i in range(4)] == ["passed", "passed", "passed", "failed"]
    assert checks["GPU3/software"]["message"] == (
        "DCGM software on GPU3: Pass, but DCGM's GPU 3 has UUID GPU-0f3e0e9a-5a3c-4c1d-9d2e-7b1a2c3d4e5f, NVML's GPU3 has "
        "GPU-h100-03aaaaaaa-0000-0000-0000-000000000003: not the same card")
    assert checks["GPU0/software"]["details"]["sources"] == [
        "DCGM (dcgmi diag)", "NVML's driver version", "NVML's serial", "NVML's UUID", "NVML's PCI address",
        "sysfs's PCI device ID"]


def test_a_uuid_alone_confirms_the_card_where_the_serial_is_not_supported_on_both_sides(tmp_path):
    def no_serials(reading):
        for g in reading["gpus"]:
            g["serial"] = ""
    document = _with(dcgm4_document([NOT_SUPPORTED] * 4), uuid=NVML_UUIDS)
    checks = _judge(tmp_path, document, 1, 4, recording=_staged(tmp_path, no_serials))
    assert {c["outcome"] for c in checks.values()} == {"passed"}
    assert "unconfirmed" not in checks["GPU2/software"]["details"]
    assert "NVML's UUID" in checks["GPU2/software"]["details"]["sources"]


def test_the_identity_of_each_shape_is_read_as_dcgm_writes_it():
    gb10 = parse_diag(GB10.read_text())
    assert (gb10.serials, gb10.entities, gb10.carries_identity) == ({0: NOT_SUPPORTED}, (0,), True)
    t4 = parse_diag(R2_T4.read_text())
    assert (t4.serials, t4.entities, t4.carries_identity) == ({}, None, False)


def _dcgm_3_3(serial: str, source=R2_T4, driver: str = "560.35.03") -> str:
    """Constructed from a real T4 run: the keys DCGM 3.1.7 to 3.3.7 write at the document's root, beside the
    diagnostic (dcgmi/Diag.cpp HelperJsonBuildOutput), for the T4 of t4_recording."""
    document = json.loads(source.read_text())
    document.update({"version": "3.3.7", "Driver Version Detected": driver, "GPU Device IDs": ["1eb8"],
                     "GPU Device Serials": {"0": serial}})
    return json.dumps(document, indent="\t")


def test_dcgm_3_3_writes_its_driver_and_serials_at_the_root():
    diag = parse_diag(_dcgm_3_3("1652322000000"))
    assert (diag.version, diag.driver, diag.serials, diag.device_ids) == ("3.3.7", "560.35.03", {0: "1652322000000"}, {})


@pytest.mark.parametrize(("serial", "outcome"), [("1324219070301", "failed"), ("1652322000000", "passed")])
def test_a_dcgm_3_3_document_of_another_card_fails_naming_nvmls_serial_and_this_cards_is_confirmed(tmp_path, serial,
                                                                                                    outcome):
    checks = _judge(tmp_path, _dcgm_3_3(serial), 2, recording=t4_recording(tmp_path), seconds=60.0)
    assert {c["outcome"] for c in checks.values()} == {outcome}
    memory = checks["GPU0/memory"]
    if outcome == "failed":
        assert memory["message"] == ("DCGM memory on GPU0: Pass, but DCGM's GPU 0 has serial 1324219070301, NVML's GPU0 "
                                     "has 1652322000000: not the same card")
    else:
        assert memory["details"]["sources"] == ["DCGM (dcgmi diag)", "the plugin's clock", "NVML's driver version",
                                                "NVML's serial", "NVML's memory total"]
        assert "unconfirmed" not in memory["details"]


def test_a_month_old_level_3_document_of_this_card_printed_at_once_names_every_source_that_refutes_it(tmp_path):
    """Issue 38's first fraud whole: this card's own level-3 all-Pass document kept from a month ago (driver 550.54.15,
    before today's 560.35.03 and today's pending row remapping), printed at once."""
    recording = _staged(tmp_path, _health([0, 1, 1, 0], gpu=0), t4_recording(tmp_path))
    checks = _judge(tmp_path, _dcgm_3_3("1652322000000", R3_T4, "550.54.15"), 3, recording=recording, seconds=2.95)
    assert checks["GPU0/software"]["message"] == (
        "DCGM software on GPU0: Pass, but `dcgmi diag -r 3 -j` returned in 3.0 s by the plugin's clock, and a run whose "
        "targeted_stress passes takes at least 30 s (level 3: DCGM's documentation gives about 15 minutes): this document "
        "was not made by this run; and DCGM's document says it detected driver 550.54.15, NVML's driver is 560.35.03: not "
        "this host's driver today; and NVML's GPU0 has a row remapping pending (NVML's remapped rows: 0 correctable, 1 "
        "uncorrectable, pending 1, failure 0), which DCGM's deployment check 'Page Retirement/Row Remap' fails: not this "
        "card's document today")
    assert {c["outcome"] for c in checks.values()} == {"failed", "not_measured"}  # nvbandwidth (none in DCGM 3), eud
    honest = _judge(tmp_path / "today", _dcgm_3_3("1652322000000", R3_T4), 3, recording=t4_recording(tmp_path),
                    seconds=840.0)
    assert {s: c["outcome"] for s, c in honest.items() if c["outcome"] == "failed"} == {}
