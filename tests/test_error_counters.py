"""Error counters as health (issue 41): PCIe AER around the whole run (`health.pcie_aer`), the RDMA ports' error counters
(`rdma.errors`) and the interfaces' error statistics (`nics.errors`), judged in process on sysfs trees laid out as the
kernel lays them out, filled with real captures (tests/data/sysfs_errors, SOURCES.md).

What happens "during the run" is staged right after the reading before it (the plugin takes that reading as the run's
tests start, and the judging harness as its session starts): registry.BEFORE_RUN gets one more step that changes the
tree, as the host's hardware would have between the two readings.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from conftest import DATA
from judging import judge

from pytest_gpuaccept.clauses import registry
from pytest_gpuaccept.compare import compare_check
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.probes import ParseError, aer, counters
from pytest_gpuaccept.verdict import Outcome

SYSFS = DATA / "sysfs_errors"
GPUS = ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0"]  # GPU0..3 of h100_sxm5_8gpu.json
AER_CONTRACT = "gpuaccept: 1\nvendor: V\ngpus: {count: 4}\nhealth:\n  pcie_aer: {max_correctable_per_hour: 100}\n"


# ------------------------------------------------------------------ the real captures, as sysfs files


def umockdev_aer() -> dict[str, dict[str, str]]:
    """The aer_dev_* files of fwupd's umockdev recording of an AMD Matisse host (a root port and a function below it),
    by the function's path. umockdev kept each file's text without its newlines ("RxErr 0BadTLP 0..."): the kernel
    prints one `NAME COUNT` a line, so the line breaks go back after each count."""
    records: dict[str, dict[str, str]] = {}
    path = ""
    for line in (SYSFS / "fwupd_amd_matisse_pci_20_08_1_umockdev.txt").read_text().splitlines():
        if line.startswith("P: "):
            path = line[3:]
            records[path] = {}
        elif line.startswith("A: aer_dev_"):
            name, _, glued = line[3:].partition("=")
            records[path][name] = re.sub(r"(\d)(?=[A-Z])", "\\1\n", glued) + "\n"
    return records


ROOT_PORT_FILES = umockdev_aer()["/devices/pci0000:20/0000:20:08.1"]  # a root port: every counter 0
CLEAN = umockdev_aer()["/devices/pci0000:20/0000:20:08.1/0000:23:00.1"]  # an endpoint: every counter 0


def chain(gpu: str) -> list[str]:
    """A GPU behind a PCIe switch, as on an HGX board: root port, switch upstream port, switch downstream port, GPU."""
    bus = int(gpu[5:7], 16)
    return [f"0000:{bus - 3:02x}:01.0", f"0000:{bus - 2:02x}:00.0", f"0000:{bus - 1:02x}:00.0", gpu]


def aer_tree(root: Path, gpus: list[str] = GPUS, files: dict[str, str] | None = None) -> Path:
    """devices/pci0000:XX/<root port>/<switch up>/<switch down>/<GPU>, each function with the real aer_dev_* files,
    and bus/pci/devices/<address> a link to each, as the kernel lists them; the GPUs with vendor, device and class."""
    listed = root / "bus" / "pci" / "devices"
    listed.mkdir(parents=True, exist_ok=True)
    for gpu in gpus:
        parts = chain(gpu)
        folder = root / "devices" / f"pci0000:{parts[0][5:7]}"
        for n, address in enumerate(parts):
            folder = folder / address
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in (files if files is not None else ROOT_PORT_FILES if n == 0 else CLEAN).items():
                (folder / name).write_text(text)
            if not (listed / address).exists():
                (listed / address).symlink_to(Path("../../..") / folder.relative_to(root))
        for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
            (folder / name).write_text(value + "\n")
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    return root


def function(root: Path, address: str) -> Path:
    return (root / "bus" / "pci" / "devices" / address).resolve()


def during_the_run(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """`change` happens after the reading before the run and before its first measurement."""
    monkeypatch.setattr(registry, "BEFORE_RUN", (*registry.BEFORE_RUN, lambda _state: change()))


def with_counts(text: str, **counts: int) -> str:
    """An aer_dev_* file with some counts changed, its TOTAL_ line raised by as much."""
    lines = [line.split() for line in text.splitlines()]
    added = sum(counts.values())
    out = []
    for words in lines:
        name = " ".join(words[:-1])
        value = int(words[-1])
        out.append(f"{name} {counts.get(name, value) if name in counts else value + added * name.startswith('TOTAL_')}")
    return "\n".join(out) + "\n"


def judged(contract: str, tmp_path: Path, sysfs: Path) -> Any:
    return judge(contract, {}, tmp_path, sysfs=sysfs)


# ------------------------------------------------------------------ the parser


def test_the_kernels_aer_files_are_read_as_it_prints_them() -> None:
    counts = aer.parse_aer(CLEAN["aer_dev_fatal"], "0000:23:00.1/aer_dev_fatal")
    assert counts["TOTAL_ERR_FATAL"] == 0 and counts["PoisonTLPBlocked"] == 0 and len(counts) == 19


def test_the_419_kernels_long_names_are_read_too() -> None:
    text = (SYSFS / "kernel_abi_4.19_aer_dev_correctable_1c.0.txt").read_text()
    counts = aer.parse_aer(text, "0000:00:1c.0/aer_dev_correctable")
    assert counts == {"Receiver Error": 2, "Bad TLP": 0, "Bad DLLP": 0, "RELAY_NUM Rollover": 0,
                      "Replay Timer Timeout": 0, "Advisory Non-Fatal": 0, "Corrected Internal Error": 0,
                      "Header Log Overflow": 0, "TOTAL_ERR_COR": 2}


def test_a_file_whose_lines_ran_together_is_refused_not_guessed() -> None:
    glued = next(line for line in (SYSFS / "fwupd_amd_matisse_pci_20_08_1_umockdev.txt").read_text().splitlines()
                 if line.startswith("A: aer_dev_correctable=")).partition("=")[2]
    with pytest.raises(ParseError, match=r"^sysfs: 0000:23:00.1/aer_dev_correctable: no TOTAL_ERR_ line \(got 1 lines\)$"):
        aer.parse_aer(glued, "0000:23:00.1/aer_dev_correctable")


def test_the_ports_above_a_function_are_named_from_its_sysfs_path(tmp_path: Path) -> None:
    reading = aer.read_aer(aer_tree(tmp_path / "sys"))
    assert aer.upstream(reading, "0000:38:00.0") == ["0000:38:00.0", "0000:37:00.0", "0000:36:00.0", "0000:35:01.0"]
    assert reading["with_aer"] == 16


# ------------------------------------------------------------------ health.pcie_aer


def test_fatal_aer_growth_on_a_gpus_switch_port_is_rejected_naming_the_port(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    root = aer_tree(tmp_path / "sys")
    port = function(root, "0000:27:00.0")  # GPU1's switch downstream port
    during_the_run(monkeypatch, lambda: (port / "aer_dev_fatal").write_text(with_counts(CLEAN["aer_dev_fatal"], SDES=1)))
    checks = {c.subject: c for c in judged(AER_CONTRACT, tmp_path, root).of("health.pcie_aer")}
    gpu1 = checks["GPU1"]
    assert gpu1.outcome is Outcome.FAILED
    assert re.fullmatch(r"GPU1's upstream port 0000:27:00\.0: aer_dev_fatal TOTAL_ERR_FATAL 0 -> 1 \(\+1; SDES 0 -> 1\) "
                        r"during the run \([\d.]+ min by the plugin's clock; correctable allowed: 10\)", gpu1.message)
    assert gpu1.details["sources"] == ["the kernel's AER counters (sysfs)"]
    [part] = [p for p in gpu1.details["parts"] if p["pci"] == "0000:27:00.0"]
    assert part["before"]["fatal"] == 0 and part["after"]["fatal"] == 1
    assert [checks[g].outcome for g in ("GPU0", "GPU2", "GPU3")] == [Outcome.PASSED] * 3


def test_counters_that_stay_still_are_accepted(tmp_path: Path) -> None:
    run = judged(AER_CONTRACT, tmp_path, aer_tree(tmp_path / "sys"))
    checks = run.of("health.pcie_aer")
    assert [c.outcome for c in checks] == [Outcome.PASSED] * 4
    assert re.fullmatch(r"GPU0: no fatal or non-fatal AER error, 0 correctable \(at most 10\) over 0000:18:00\.0, "
                        r"0000:17:00\.0, 0000:16:00\.0, 0000:15:01\.0 during the run \([\d.]+ min\D+\)", checks[0].message)
    assert checks[0].evidence == ("error-counters-before.json", "error-counters-after.json")


@pytest.mark.parametrize(("gained", "outcome"), [(5000, Outcome.FAILED), (7, Outcome.PASSED)])
def test_a_correctable_error_storm_is_rejected_and_a_few_are_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     gained: int, outcome: Outcome) -> None:
    root = aer_tree(tmp_path / "sys")
    gpu = function(root, "0000:48:00.0")
    during_the_run(monkeypatch, lambda: (gpu / "aer_dev_correctable").write_text(
        with_counts(CLEAN["aer_dev_correctable"], RxErr=gained)))
    check = judged(AER_CONTRACT, tmp_path, root).one("health.pcie_aer", "GPU3")
    assert check.outcome is outcome and check.measured == gained
    if outcome is Outcome.FAILED:
        assert check.message.startswith("PCI 0000:48:00.0 (GPU3): aer_dev_correctable TOTAL_ERR_COR 0 -> 5000 (+5000; "
                                        "RxErr 0 -> 5000) during the run")


def test_the_correctable_allowance_grows_with_the_run_by_the_plugins_clock(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """100 an hour over a run of 2 h allows 200: 150 pass (the floor of 10 alone would have failed them)."""
    now = [1000.0]
    monkeypatch.setattr(counters, "clocks", lambda: {"monotonic_s": now[0], "boottime_s": now[0]})
    root = aer_tree(tmp_path / "sys")
    gpu = function(root, "0000:18:00.0")

    def two_hours() -> None:
        (gpu / "aer_dev_correctable").write_text(with_counts(CLEAN["aer_dev_correctable"], BadDLLP=150))
        now[0] += 7200.0
    during_the_run(monkeypatch, two_hours)
    check = judged(AER_CONTRACT, tmp_path, root).one("health.pcie_aer", "GPU0")
    assert check.outcome is Outcome.PASSED and check.details["allowance"] == 200.0 and check.measured == 150
    assert check.required == "<= 200 correctable, 0 non-fatal, 0 fatal"


def test_a_counter_that_went_down_is_refused_not_read_as_no_growth(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = aer_tree(tmp_path / "sys", files={**CLEAN, "aer_dev_correctable": with_counts(CLEAN["aer_dev_correctable"],
                                                                                           RxErr=500)})
    gpu = function(root, "0000:18:00.0")
    during_the_run(monkeypatch, lambda: (gpu / "aer_dev_correctable").write_text(CLEAN["aer_dev_correctable"]))
    check = judged(AER_CONTRACT, tmp_path, root).one("health.pcie_aer", "GPU0")
    assert check.outcome is Outcome.FAILED
    assert check.message == ("PCI 0000:18:00.0 (GPU0): aer_dev_correctable went down during the run (RxErr 500 -> 0, "
                             "TOTAL_ERR_COR 500 -> 0): the counters were reset (the device removed and found again, or "
                             "the kernel restarted), so the run's errors cannot be counted")


def test_aer_files_unreadable_after_the_run_are_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = aer_tree(tmp_path / "sys")
    gpu = function(root, "0000:28:00.0")
    during_the_run(monkeypatch, lambda: (gpu / "aer_dev_nonfatal").unlink())
    check = judged(AER_CONTRACT, tmp_path, root).one("health.pcie_aer", "GPU1")
    assert check.outcome is Outcome.NOT_MEASURED
    assert check.message.endswith("PCI 0000:28:00.0 (GPU1), read after the run: PCI 0000:28:00.0 has no aer_dev_nonfatal")


def test_a_port_without_aer_files_where_the_kernel_has_aer_is_not_measured(tmp_path: Path) -> None:
    root = aer_tree(tmp_path / "sys")
    for name in aer.KINDS.values():
        (function(root, "0000:36:00.0") / name).unlink()
    check = judged(AER_CONTRACT, tmp_path, root).one("health.pcie_aer", "GPU2")
    assert check.outcome is Outcome.NOT_MEASURED
    assert check.message.endswith("GPU2's upstream port 0000:36:00.0 has no aer_dev_* files, though the kernel keeps "
                                  "AER statistics for other functions: its PCIe errors cannot be counted")


def test_a_kernel_without_aer_statistics_is_not_measured(tmp_path: Path) -> None:
    root = aer_tree(tmp_path / "sys", files={})
    checks = judged(AER_CONTRACT, tmp_path, root).of("health.pcie_aer")
    assert {c.outcome for c in checks} == {Outcome.NOT_MEASURED}
    assert "the kernel keeps no AER statistics for any PCI function" in checks[0].message


def test_without_the_reading_before_the_run_nothing_is_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "BEFORE_RUN", ())
    checks = judged(AER_CONTRACT, tmp_path, aer_tree(tmp_path / "sys")).of("health.pcie_aer")
    assert {c.outcome for c in checks} == {Outcome.NOT_MEASURED}
    assert checks[0].message.endswith("the error counters were not read before the run's first measurement")


def test_health_pcie_aer_needs_no_utilisation_section_and_other_health_keys_still_do() -> None:
    parse_contract(AER_CONTRACT, "vendor.yaml")
    with pytest.raises(ContractError, match=r"health: needs a utilisation section"):
        parse_contract(AER_CONTRACT + "  ecc: true\n", "vendor.yaml")
    with pytest.raises(ContractError, match=r"vendor\.yaml:5: health\.pcie_aer: expected a mapping such as "
                                            r"\{max_correctable_per_hour: 100\}, got 100"):
        parse_contract(AER_CONTRACT.replace("{max_correctable_per_hour: 100}", "100"), "vendor.yaml")


# ------------------------------------------------------------------ rdma.errors


RDMA = "gpuaccept: 1\nvendor: V\nrdma: {devices: [mlx5_1], min_fraction_of_line_rate: 0.9, errors: true}\n"


def ib_port(root: Path, capture: str = "gpud_943_mlx5_1_port1_counters.txt", **values: int) -> Path:
    """class/infiniband/mlx5_1/ports/1/counters from the capture's `=== ./NAME ===` blocks (values as given)."""
    folder = root / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"
    folder.mkdir(parents=True, exist_ok=True)
    text = (SYSFS / capture).read_text()
    for name, value in re.findall(r"^=== \./(\w+) ===\n(\d+)$", text, re.M):
        (folder / name).write_text(f"{values.get(name, value)}\n")
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    return folder


def test_a_port_whose_link_downed_counter_is_saturated_is_not_measured(tmp_path: Path) -> None:
    """The capture as it is: link_downed 255 and excessive_buffer_overrun_errors 15, the widths' maxima."""
    ib_port(tmp_path / "sys")
    check = judged(RDMA, tmp_path, tmp_path / "sys").one("rdma.errors", "mlx5_1")
    assert check.outcome is Outcome.NOT_MEASURED
    assert check.message.endswith("mlx5_1 port 1: link_downed, excessive_buffer_overrun_errors sat at its maximum "
                                  "before and after the run (a saturated PortCounter no longer counts)")


@pytest.mark.parametrize(("after", "outcome"), [(57, Outcome.FAILED), (0, Outcome.PASSED)])
def test_rising_infiniband_symbol_errors_are_rejected_naming_the_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     after: int, outcome: Outcome) -> None:
    folder = ib_port(tmp_path / "sys", link_downed=3, excessive_buffer_overrun_errors=0)
    during_the_run(monkeypatch, lambda: (folder / "symbol_error").write_text(f"{after}\n"))
    check = judged(RDMA, tmp_path, tmp_path / "sys").one("rdma.errors", "mlx5_1")
    assert check.outcome is outcome
    if outcome is Outcome.FAILED:
        assert check.message == "error counters grew during the run (sysfs): mlx5_1 port 1: symbol_error 0 -> 57"
        assert check.measured == 57
    else:
        assert check.message == "mlx5_1: no error counter of port 1 grew during the run (sysfs)"
    assert check.details["ports"]["1"]["before"]["link_downed"] == 3
    assert check.details["ports"]["1"]["hw_counters"] == "none (not an mlx5 port)"


def test_mlx5_hw_counters_are_judged_where_the_port_has_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = ib_port(tmp_path / "sys", link_downed=3, excessive_buffer_overrun_errors=0)
    hw = folder.parent / "hw_counters"
    hw.mkdir()
    for name in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err"):
        (hw / name).write_text("0\n")
    during_the_run(monkeypatch, lambda: (hw / "local_ack_timeout_err").write_text("12\n"))
    check = judged(RDMA, tmp_path, tmp_path / "sys").one("rdma.errors", "mlx5_1")
    assert check.outcome is Outcome.FAILED
    assert check.message.endswith("mlx5_1 port 1: hw_counters/local_ack_timeout_err 0 -> 12")


def test_an_ib_counter_reset_during_the_run_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = ib_port(tmp_path / "sys", link_downed=3, excessive_buffer_overrun_errors=0, symbol_error=40)
    during_the_run(monkeypatch, lambda: (folder / "symbol_error").write_text("0\n"))
    check = judged(RDMA, tmp_path, tmp_path / "sys").one("rdma.errors", "mlx5_1")
    assert check.outcome is Outcome.FAILED
    assert check.message == ("mlx5_1 port 1: symbol_error 40 -> 0: the counters went down during the run (reset), so "
                             "the run's errors cannot be counted")


def test_counters_without_a_pma_are_not_measured(tmp_path: Path) -> None:
    """i40iw (iWARP) prints `N/A (no PMA)` in every PortCounter file (node_exporter issue 966)."""
    folder = tmp_path / "sys" / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"
    folder.mkdir(parents=True)
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    for line in (SYSFS / "node_exporter_966_i40iw_counters_no_pma.txt").read_text().splitlines()[1:]:
        path, _, value = line.rpartition(":")
        (folder / Path(path).name).write_text(value + "\n")
    check = judged(RDMA, tmp_path, tmp_path / "sys").one("rdma.errors", "mlx5_1")
    assert check.outcome is Outcome.NOT_MEASURED
    assert check.message.endswith("mlx5_1 port 1: counters/excessive_buffer_overrun_errors, counters/link_downed, "
                                  "counters/link_error_recovery, counters/local_link_integrity_errors, "
                                  "counters/port_rcv_errors, counters/symbol_error cannot be read")


# ------------------------------------------------------------------ nics.errors


NICS = "gpuaccept: 1\nvendor: V\nnics: {interfaces: [eth0], min_speed: \"1 Gb/s\", errors: true}\n"


def statistics(root: Path, capture: str) -> Path:
    """class/net/eth0/statistics/NAME from a `grep` capture's `/sys/class/net/eth0/statistics/NAME:VALUE` lines."""
    folder = root / "class" / "net" / "eth0" / "statistics"
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in re.findall(r"/sys/class/net/eth0/statistics/(\w+):(\d+)$", (SYSFS / capture).read_text(), re.M):
        (folder / name).write_text(value + "\n")
    return folder


@pytest.mark.parametrize("crc", [True, False])
def test_a_nics_rising_crc_errors_are_rejected_naming_the_interface(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   crc: bool) -> None:
    root = tmp_path / "sys"
    statistics(root, "ubuntu_eth0_statistics_grep.txt")
    if crc:  # the StarFive board's counts after its broken rgmii-id runs, on the same interface
        during_the_run(monkeypatch, lambda: statistics(root, "starfive_eth0_statistics_nonzero_grep.txt"))
    check = judged(NICS, tmp_path, root).one("nics.errors", "eth0")
    if crc:
        assert check.outcome is Outcome.FAILED and check.measured == 12
        assert check.message == "eth0: rx_errors 0 -> 6, rx_crc_errors 0 -> 6 during the run (sysfs statistics)"
    else:
        assert check.outcome is Outcome.PASSED
        assert check.message == "eth0: no error statistic grew during the run (sysfs)"
    assert check.details["before"]["rx_crc_errors"] == 0


def test_statistics_unreadable_after_the_run_are_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "sys"
    folder = statistics(root, "ubuntu_eth0_statistics_grep.txt")
    during_the_run(monkeypatch, lambda: shutil.rmtree(folder))
    check = judged(NICS, tmp_path, root).one("nics.errors", "eth0")
    assert check.outcome is Outcome.NOT_MEASURED
    assert re.search(r"eth0's statistics, read after the run: \S+/class/net/eth0/statistics cannot be listed$",
                     check.message)


# ------------------------------------------------------------------ compare


def test_compare_names_error_counters_that_grew_since_the_last_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs of one host: the port that gained symbol errors and the GPU whose correctable errors rose regressed."""
    folder = ib_port(tmp_path / "a" / "sys", link_downed=3, excessive_buffer_overrun_errors=0)
    old = judged(RDMA, tmp_path / "a", tmp_path / "a" / "sys").one("rdma.errors", "mlx5_1")
    during_the_run(monkeypatch, lambda: (folder / "symbol_error").write_text("57\n"))
    new = judged(RDMA, tmp_path / "b", tmp_path / "a" / "sys").one("rdma.errors", "mlx5_1")
    row = compare_check(old.to_dict(), new.to_dict(), 0.05)
    assert (row.clause, row.subject, row.status, row.old, row.new) == ("rdma.errors", "mlx5_1", "regressed", 0, 57)
    assert row.note == "100.0% worse (bound 5%); passed -> failed"
    same = compare_check(old.to_dict(), old.to_dict(), 0.05)
    assert same.status == "same"


def test_a_nics_root_port_with_non_fatal_errors_is_rejected_naming_it_beside_healthy_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NIC behind its own root port (devices/pci0000:98/0000:98:02.0/0000:99:00.0/net/ens6f0): completion timeouts
    seen by the root port fail the NIC's check, naming the port; the GPUs' checks pass."""
    root = aer_tree(tmp_path / "sys")
    port = root / "devices" / "pci0000:98" / "0000:98:02.0"
    nic = port / "0000:99:00.0"
    (nic / "net" / "ens6f0").mkdir(parents=True)
    (nic / "net" / "ens6f0" / "device").symlink_to(Path("../.."))
    (root / "class" / "net" / "ens6f0").symlink_to(nic / "net" / "ens6f0")
    for folder, files in ((port, ROOT_PORT_FILES), (nic, CLEAN)):
        for name, text in files.items():
            (folder / name).write_text(text)
        (root / "bus" / "pci" / "devices" / folder.name).symlink_to(folder)
    during_the_run(monkeypatch, lambda: (port / "aer_dev_nonfatal").write_text(
        with_counts(ROOT_PORT_FILES["aer_dev_nonfatal"], CmpltTO=2)))
    contract = AER_CONTRACT + 'nics: {interfaces: [ens6f0], min_speed: "100 Gb/s"}\n'
    checks = {c.subject: c for c in judged(contract, tmp_path, root).of("health.pcie_aer")}
    assert sorted(checks) == ["GPU0", "GPU1", "GPU2", "GPU3", "ens6f0"]
    assert {checks[f"GPU{i}"].outcome for i in range(4)} == {Outcome.PASSED}
    assert checks["ens6f0"].outcome is Outcome.FAILED
    assert checks["ens6f0"].message.startswith("ens6f0's root port 0000:98:02.0: aer_dev_nonfatal TOTAL_ERR_NONFATAL "
                                               "0 -> 2 (+2; CmpltTO 0 -> 2) during the run")
