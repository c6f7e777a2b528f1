"""NVRM Xid lines in every format the kernel and journald print: real excerpts from public issue threads
(tests/data/kernel, sources in tests/data/SOURCES.md) read to the Xid numbers and PCI addresses a person
reads in them, and health.xid judged on them through a live-mode run with fake `dmesg` / `journalctl`.

The live mode needs NVML: the runs here replace `nvml.read_host` and `nvml.sample_gpus` with the 4-GPU H100
recording and its sample series (as `--gpuaccept-nvml` would replay them), and `kernel_log.uptime` with a
fixed boot clock, so that the kernel log is read as on a real host (an NVML recording never reads it). They run
inside this process (accept(..., subprocess=False)), where those replacements reach: never an accepted run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import recording
from conftest import DATA, pci_tree

from pytest_gpuaccept.clauses.utilisation import XID as XID_CLAUSE
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.measurements import LoadRun
from pytest_gpuaccept.probes import kernel_log, nvml
from pytest_gpuaccept.probes._run import Reading
from pytest_gpuaccept.probes.kernel_log import parse_dmesg_xids, parse_journal_xids, parse_xids
from pytest_gpuaccept.probes.nvml import GpuSeries
from pytest_gpuaccept.subjects import Subject

KERNEL = DATA / "kernel"


def read(name: str):
    return parse_xids((KERNEL / name).read_text())


def seen(name: str) -> list[tuple[str, int, float | None]]:
    return [(x.pci, x.xid, x.t_s) for x in read(name).xids]


# ---------------------------------------------------------------- the real corpus, as a person reads it

def test_plain_dmesg_seconds_since_boot():
    assert seen("dmesg_xid32_31_bumblebee677.txt") == [
        ("0000:01:00", 32, 24128.828315), ("0000:01:00", 32, 24128.828608), ("0000:01:00", 31, 24128.834365)]
    assert seen("dmesg_xid44_31_bumblebee608.txt") == [("0000:08:00", 44, 94.573839), ("0000:08:00", 31, 94.627944)]
    log = read("dmesg_xid119_gsp_timeout_aznhc.txt")
    assert [(x.pci, x.xid, x.t_s) for x in log.xids] == [("0002:00:00", 119, 3606.832215)]  # Azure's own domain
    assert log.xids[0].text.startswith("pid=67769, name=nvidia-smi, Timeout waiting for RPC from GSP1!")
    assert read("dmesg_h200_vm_boot_no_xid.txt").xids == () and read("dmesg_h200_vm_boot_no_xid.txt").unreadable == ()


def test_dmesg_T_wall_clock_lines_are_read_and_not_placed():
    log = read("dmesg_T_xid43_31_94_akash244.txt")
    assert [(x.pci, x.xid) for x in log.xids] == [
        ("0000:00:05", 43), ("0000:00:05", 43), ("0000:00:07", 31), ("0000:00:08", 94)]
    assert all(x.t_s is None for x in log.xids)  # a wall-clock time is not on the load's clock
    assert [x.stamp for x in log.xids] == ["Wed Jul 31 23:14:18 2024", "Wed Jul 31 23:15:26 2024",
                                           "Mon Aug  5 03:54:13 2024", "Fri Aug  9 13:32:56 2024"]
    assert log.xids[3].text == "pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"
    assert log.unreadable == ()  # `NVRM: GPU at PCI:...` and the serial-number lines are no Xid


def test_journal_lines_in_any_locale_with_or_without_host():
    assert seen("journal_pl_locale_xid38_109_ogkm1045.txt") == [("0000:07:00", 38, None)] + \
        [("0000:07:00", 109, None)] * 5
    assert [x.stamp for x in read("journal_pl_locale_xid38_109_ogkm1045.txt").xids][:1] == ["kwi 15 07:56:59 testowy"]
    assert seen("journal_no_hostname_xid13_proton8072.txt") == [("0000:01:00", 13, None)] * 3
    assert read("journal_no_hostname_xid13_proton8072.txt").xids[0].text.startswith("pid=12770, name=Warhammer 40000,")
    assert [(x.pci, x.xid) for x in read("journal_kernel_prefix_only_xid45_ogkm1150.txt").xids] == [
        ("0000:dc:00", 45), ("0000:ed:00", 45), ("0000:ba:00", 45), ("0000:97:00", 45),
        ("0000:dc:00", 45), ("0000:ba:00", 45), ("0000:ed:00", 45)]


def test_a_journal_line_wrapped_by_the_pager_still_gives_its_xid():
    log = read("journal_wrapped_line_xid13_nixos539036.txt")
    assert [(x.pci, x.xid, x.stamp) for x in log.xids] == [("0000:01:00", 13, "Jul 06 20:02:59 gaming")]
    assert log.unreadable == ()  # the wrapped tail ` 00000000` names no Xid


def test_no_time_stamp_printk_time_0_and_old_drivers_without_pci_prefix():
    log = read("kernlog_r304_no_time_no_pci_prefix_xid16_8_bumblebee329.txt")  # 304.64: `NVRM: Xid (0000:01:00): 16`
    assert [(x.pci, x.xid, x.t_s, x.stamp) for x in log.xids] == [("0000:01:00", 16, None, "")] * 8 + \
        [("0000:01:00", 8, None, "")]
    assert seen("kmsg_no_time_domain0019_xid149_gpud1174.txt") == [("0019:01:00", 149, None)]  # a GB200 tray's domain


# ---------------------------------------------------------------- a GPU lost without an Xid line

def lost(name: str) -> list[tuple[str, str, float | None]]:
    return [(x.pci, x.what, x.t_s) for x in read(name).xids]


def test_r570_prints_no_xid_for_a_gpu_fallen_off_the_bus_and_the_three_line_message_is_read_as_one():
    log = read("dmesg_r570_fallen_off_no_xid_nvsentinel155.txt")
    assert [(x.pci, x.xid, x.what, x.t_s) for x in log.xids] == [
        ("0000:b3:00", None, "GPU lost (fallen off the bus)", 1843.308145),
        ("0000:b3:00", None, "GPU lost (probe failed)", 1843.439662)]  # no address of its own: the GPU named before it
    assert log.xids[0].text == ("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen "
                                "off the bus and is not responding to commands.")
    assert log.unreadable == ()  # `loading NVIDIA UNIX Open Kernel Module ... 13:13:04` names no GPU and no loss


def test_the_kernels_own_probe_failure_and_the_runtime_message_beside_xid_79_are_read():
    assert lost("dmesg_h100_fallen_off_probe_failed_r525_kubecon.txt") == [
        ("0000:5d:00", "GPU lost (fallen off the bus)", 14387.209961),
        ("0000:5d:00", "GPU lost (probe failed)", 14387.210134),  # `nvidia: probe of 0000:5d:00.0 failed with error -1`
        ("0000:5d:00", "GPU lost (probe failed)", 14387.274303)]
    assert read("dmesg_h100_fallen_off_probe_failed_r525_kubecon.txt").xids[1].text == \
        "nvidia: probe of 0000:5d:00.0 failed with error -1"
    # the Xid 79 line is read as its Xid, the driver's next line as the lost GPU; `GPU at PCI:...` and the crash dump
    # message (with its indented lines) are neither
    assert lost("dmesg_h100_xid79_fallen_off_r525_kubecon.txt") == [
        ("0000:5d:00", "Xid 79", 4254.19786), ("0000:5d:00", "GPU lost (fallen off the bus)", 4254.197871)]
    assert lost("kernel_probe_with_driver_nvidia_failed_cosmic2146.txt") == [  # newer kernels' words
        ("0000:01:00", "GPU lost (probe failed)", None)]


def test_rminitadapter_failures_name_each_gpu_in_every_format():
    assert lost("dmesg_rminitadapter_two_gpus_gpuoperator649.txt") == [
        ("0000:04:01", "GPU lost (RmInitAdapter failed)", 1097.650222),
        ("0000:04:02", "GPU lost (RmInitAdapter failed)", 1102.46987),
        ("0000:04:02", "GPU lost (RmInitAdapter failed)", 1107.289575),
        ("0000:04:01", "GPU lost (RmInitAdapter failed)", 1112.163623),
        ("0000:04:01", "GPU lost (RmInitAdapter failed)", 1117.008104)]  # `rm_init_adapter failed` is the same event
    syslog = read("syslog_boot_clock_rminitadapter_gpuoperator1146.txt").xids
    assert [(x.pci, x.t_s) for x in syslog] == [("0000:0a:00", t) for t in (
        885.242168, 926.232044, 1015.260402, 1172.496983, 1174.243378, 1188.283575)]  # the boot clock behind syslog's
    assert syslog[0].text == "GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)"
    assert [(x.pci, x.t_s, x.stamp) for x in read("dmesg_T_rminitadapter_titanv_illinois76.txt").xids] == [
        ("0000:81:00", None, "Sun Apr 14 12:48:42 2024"), ("0000:81:00", None, "Sun Apr 14 12:48:43 2024")]


def test_an_old_drivers_words_and_a_probe_failure_naming_no_gpu_take_the_gpu_named_before():
    assert lost("dmesg_old_driver_gpu_at_fallen_off_bumblebee554.txt") == [
        ("0000:01:00", "GPU lost (fallen off the bus)", 49.261458),
        ("0000:01:00", "GPU lost (fallen off the bus)", 49.261472)]
    # the address is on an indented `NVRM: BAR0 is 0M @ 0x0 (PCI:0000:01:00.0)` line before each probe failure
    assert lost("dmesg_bar0_invalid_probe_failed_archinstoo244.txt") == [
        ("0000:01:00", "GPU lost (probe failed)", 6.554916), ("0000:01:00", "GPU lost (probe failed)", 6.821283)]


def test_a_lost_gpu_message_with_no_address_before_it_names_no_gpu():
    log = read("journal_dgx_station_a100_gpu_lost_no_address_ogkm688.txt")
    assert [(x.pci, x.what, x.stamp) for x in log.xids] == [
        ("", "GPU lost", "Feb 17 08:00:34 abggdna-DGX-Station-A100")] * 3  # `_issueRpcAndWait` lines are no loss
    assert log.xids[0].text.startswith("nvAssertOkFailedNoLog: Assertion failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST]")


@pytest.mark.parametrize("text", [
    # CONSTRUCTED from the real R570 message: journalctl -k -o short-monotonic indents a message's later lines too
    "[ 1843.308145] host kernel: NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "                            NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "                            NVRM: fallen off the bus and is not responding to commands.\n",
    # CONSTRUCTED: a log that writes each line of the message as a record of its own, each with its prefix
    "Oct 15 10:21:33 host kernel: [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "Oct 15 10:21:33 host kernel: [ 1843.308145] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "Oct 15 10:21:33 host kernel: [ 1843.308145] NVRM: fallen off the bus and is not responding to commands.\n",
])
def test_the_three_line_message_is_one_loss_of_its_gpu_however_its_lines_arrive(text):
    assert [(x.pci, x.what, x.t_s) for x in parse_xids(text).xids] == [
        ("0000:b3:00", "GPU lost (fallen off the bus)", 1843.308145)]


# ---------------------------------------------------------------- the tools' own errors are no log

def test_dmesgs_own_refusal_is_unreadable_never_an_empty_log():
    text = (KERNEL / "dmesg_restrict_eperm_rhel_edge5955.txt").read_text()
    with pytest.raises(ValueError) as info:
        parse_dmesg_xids(text)
    assert str(info.value) == ("dmesg printed its own error, not the kernel log: "
                               "'dmesg: read kernel buffer failed: Operation not permitted'")
    honest = parse_dmesg_xids((DATA / "h200" / "accepted-dmesg_after_load.txt").read_text())  # a whole real boot log
    assert (honest.xids, honest.unreadable) == ((), ())


@pytest.mark.parametrize("name, line", [
    ("journalctl_k_no_journal_files_coreos948.txt", "No journal files were found."),
    ("journalctl_hint_insufficient_permissions_usernetes281.txt",
     "Hint: You are currently not seeing messages from the system."),
])
def test_journalctls_own_words_are_unreadable_never_an_empty_log(name, line):
    with pytest.raises(ValueError) as info:
        parse_journal_xids((KERNEL / name).read_text())
    assert str(info.value) == f"journalctl printed its own error, not the kernel log: {line!r}"


# ---------------------------------------------------------------- formats no real excerpt was found for (constructed)

@pytest.mark.parametrize("line, t_s", [
    # CONSTRUCTED from the real aznhc line: rsyslog's /var/log/kern.log keeps the kernel's own stamp
    ("Oct 15 10:21:33 host kernel: [ 3606.832215] NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi", 3606.832215),
    # CONSTRUCTED: journalctl -k -o short-monotonic, the fallback this plugin runs
    ("[ 3606.832215] host kernel: NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi", 3606.832215),
    # CONSTRUCTED: the kernel's raw record with its log level, as busybox dmesg -r prints it
    ("<4>[ 3606.832215] NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi", 3606.832215),
    # CONSTRUCTED: the address with a function number, as NVSwitch SXid lines print theirs
    ("[ 3606.832215] NVRM: Xid (PCI:0002:00:00.0): 119, pid=67769, name=nvidia-smi", 3606.832215),
])
def test_every_prefix_on_the_boot_clock_is_placed(line, t_s):
    assert [(x.pci, x.xid, x.t_s) for x in parse_xids(line).xids] == [("0002:00:00", 119, t_s)]


def test_an_nvrm_xid_line_that_cannot_be_read_is_kept_quoted_escaped_and_bounded():
    # CONSTRUCTED: an address the parser cannot read, a terminal escape and a very long line
    text = "[ 12.5] NVRM: Xid (PCI:...): 79, GPU has fallen off the bus\x07\n" + \
           "NVRM: Xid (GPU-1234): 48, " + "x" * 400 + "\n[ 13.0] NVRM: Xid (PCI:0000:18:00): 48, DBE\n"
    log = parse_xids(text)
    assert [(x.pci, x.xid) for x in log.xids] == [("0000:18:00", 48)]
    assert log.unreadable[0] == r"[ 12.5] NVRM: Xid (PCI:...): 79, GPU has fallen off the bus\x07"
    assert len(log.unreadable[1]) == kernel_log.QUOTE_LIMIT + 3 and log.unreadable[1].endswith("xxx...")


def test_a_wider_vmd_pci_domain_is_kept_as_the_kernel_prints_it():
    # CONSTRUCTED: a GPU behind Intel VMD sits in domain 10000
    assert [x.pci for x in parse_xids("NVRM: Xid (PCI:10000:01:00): 79, GPU has fallen off the bus.").xids] == [
        "10000:01:00"]


def test_an_empty_journal_is_not_a_log_without_xid():
    with pytest.raises(ValueError, match="no kernel message of this boot"):
        parse_journal_xids("-- No entries --\n")


# ---------------------------------------------------------------- the judge, one GPU at a time

XID = "gpuaccept: 1\nvendor: V\ngpus: {count: 4}\n" \
      "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\nhealth: {xid: true}\n"


def _judge(kernel: Reading, bus: str, window=(3600.0, 3700.0)):
    series = GpuSeries(0, (), {}, None, {"events": []})
    load = LoadRun(None, {0: series}, None, None, (), kernel, window, {0: bus})
    contract = parse_contract(XID)
    return XID_CLAUSE.judge(XID_CLAUSE.section.of(contract), Subject.of_gpu(0), load, contract)


def test_a_wall_clock_xid_counts_inside_the_load_and_says_why():
    kernel = Reading(None, read("dmesg_T_xid43_31_94_akash244.txt"), None)
    check = _judge(kernel, "00000000:00:05.0")
    assert (check.outcome.value, check.measured) == ("failed", 2)
    assert check.message == (
        "NVML reported no Xid event, but the kernel log shows 2 for PCI 0000:00:05 during the load (a line without a "
        "boot-clock time counts as inside the load): [Wed Jul 31 23:14:18 2024] Xid 43: pid=1045242, "
        "name=pt_main_thread, Ch 00000008; [Wed Jul 31 23:15:26 2024] Xid 43: pid=1084984, name=pt_main_thread, "
        "Ch 00000008")
    assert _judge(kernel, "00000000:00:06.0").outcome.value == "passed"  # no line for that GPU


def test_an_unreadable_xid_line_fails_every_gpu_quoting_it():
    kernel = Reading(None, parse_xids("[ 3650.0] NVRM: Xid (PCI:...): 79, GPU has fallen off the bus\n"), None)
    check = _judge(kernel, "00000000:18:00.0")
    assert (check.outcome.value, check.measured) == ("failed", 1)
    assert check.message == ("NVML reported no Xid event, but the kernel log has 1 NVRM Xid line(s) that cannot be read "
                             "(counted against every GPU): '[ 3650.0] NVRM: Xid (PCI:...): 79, GPU has fallen off the bus'")


def test_an_unreadable_kernel_log_is_not_measured_never_no_xid():
    check = _judge(Reading(None, None, "`dmesg` exited with code 1: dmesg: read kernel buffer failed: Operation "
                                       "not permitted; and `journalctl ...` ..."), "00000000:18:00.0")
    assert check.outcome.value == "not_measured"
    assert check.message.startswith("not measured: NVML reported no Xid event, but the kernel log cannot be read: "
                                     "`dmesg` exited")


def test_a_gpu_whose_pci_address_nvml_does_not_give_owns_every_line():
    kernel = Reading(None, read("dmesg_xid119_gsp_timeout_aznhc.txt"), None)
    check = _judge(kernel, "")
    assert check.outcome.value == "failed" and "for PCI (unknown) during the load" in check.message


def test_a_gpu_lost_without_an_xid_line_fails_naming_its_pci_address_beside_its_honest_twin():
    kernel = Reading(None, read("dmesg_r570_fallen_off_no_xid_nvsentinel155.txt"), None)
    check = _judge(kernel, "00000000:b3:00.0", window=(1800.0, 1900.0))
    assert (check.outcome.value, check.measured) == ("failed", 2)
    assert check.message == (
        "NVML reported no Xid event, but the kernel log shows 2 for PCI 0000:b3:00 during the load: [1843.3] GPU lost "
        "(fallen off the bus): The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fal; "
        "[1843.4] GPU lost (probe failed): The NVIDIA probe routine failed for 1 device(s).")
    assert _judge(kernel, "00000000:18:00.0", window=(1800.0, 1900.0)).outcome.value == "passed"  # another GPU
    assert _judge(kernel, "00000000:b3:00.0", window=(3600.0, 3700.0)).outcome.value == "passed"  # before the load


def test_an_rminitadapter_failure_fails_its_gpu_only():
    kernel = Reading(None, read("dmesg_rminitadapter_two_gpus_gpuoperator649.txt"), None)
    check = _judge(kernel, "00000000:04:02.0", window=(1100.0, 1110.0))
    assert (check.outcome.value, check.measured) == ("failed", 2)
    assert check.message.endswith("during the load: [1102.5] GPU lost (RmInitAdapter failed): GPU 0000:04:02.0: "
                                  "RmInitAdapter failed! (0x11:0x45:2525); [1107.3] GPU lost (RmInitAdapter failed): "
                                  "GPU 0000:04:02.0: RmInitAdapter failed! (0x11:0x45:2525)")
    assert _judge(kernel, "00000000:04:01.0", window=(1100.0, 1110.0)).outcome.value == "passed"


def test_a_lost_gpu_message_naming_no_gpu_fails_every_gpu_saying_so():
    kernel = Reading(None, read("journal_dgx_station_a100_gpu_lost_no_address_ogkm688.txt"), None)
    for bus in ("00000000:07:00.0", "00000000:0f:00.0"):
        check = _judge(kernel, bus)
        assert (check.outcome.value, check.measured) == ("failed", 3)
        assert " during the load (a line without a boot-clock time counts as inside the load) (a message naming no " \
               "GPU counts for every GPU): [Feb 17 08:00:34 abggdna-DGX-Station-A100] GPU lost: nvAssertOkFailedNoLog" \
               in check.message


# ---------------------------------------------------------------- acceptance: a live run, fake dmesg / journalctl

DMESG_DENIED = "dmesg: read kernel buffer failed: Operation not permitted\n"
JOURNAL_HINT = ("Hint: You are currently not seeing messages from other users and the system.\n"
                "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
                "      Pass -q to turn off this notice.\n")


@pytest.fixture
def live(monkeypatch, tmp_path, fake_tools):
    """A live-mode host: NVML is the 4-GPU H100 recording with GPU0 moved to `bus`, its samples the steady series
    of builders.py (series), the boot clock 3600 s at the load's start and 3700 s at its end."""
    fake_tools.add("train-job", "training\n", hang=30)

    def host(bus: str) -> str:
        reading = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
        reading["gpus"][0]["pci_bus_id"] = bus
        path = tmp_path / "nvml-live.json"
        path.write_text(json.dumps(reading))
        samples = json.loads(Path(recording(tmp_path).split("=", 1)[1]).read_text())["utilisation"]
        monkeypatch.setattr(nvml, "read_host", lambda: json.loads(path.read_text()))

        def sample(count, interval_s, duration_s, stop, progress=None):
            stop.wait(duration_s)
            return samples
        monkeypatch.setattr(nvml, "sample_gpus", sample)
        clock = iter([3600.0, 3700.0])
        monkeypatch.setattr(kernel_log, "uptime", lambda proc=None: next(clock))
        return pci_tree(tmp_path / "sys", recording=path)

    return host


def xid_checks(run) -> dict[str, dict]:
    return {c["subject"]: c for c in run.checks("health.xid")}


@pytest.mark.parametrize("name, bus, xid", [
    ("dmesg_xid119_gsp_timeout_aznhc.txt", "00000002:00:00.0", "[3606.8] Xid 119"),  # dmesg
    ("dmesg_T_xid43_31_94_akash244.txt", "00000000:00:07.0", "[Mon Aug  5 03:54:13 2024] Xid 31"),  # dmesg -T
    ("journal_pl_locale_xid38_109_ogkm1045.txt", "00000000:07:00.0", "[kwi 15 07:56:59 testowy] Xid 38"),  # journal
    ("kmsg_no_time_domain0019_xid149_gpud1174.txt", "00000019:01:00.0", "[no time stamp] Xid 149"),  # printk.time=0
])
def test_an_xid_in_every_kernel_log_format_fails_health_xid(accept, fake_tools, live, name, bus, xid):
    fake_tools.add("dmesg", KERNEL / name)
    run = accept(XID, live(bus), subprocess=False)
    checks = xid_checks(run)
    assert checks["GPU0"]["outcome"] == "failed", checks["GPU0"]["message"]
    assert "during the load" in checks["GPU0"]["message"] and xid in checks["GPU0"]["message"]
    assert [checks[f"GPU{i}"]["outcome"] for i in (1, 2, 3)] == ["passed"] * 3
    assert run.json["verdict"] == "rejected"
    assert fake_tools.calls("journalctl") == []  # dmesg was readable: the journal is not asked


def test_where_dmesg_is_restricted_the_journal_is_read(accept, fake_tools, live):
    fake_tools.add("dmesg", rc=1, stderr=DMESG_DENIED)
    fake_tools.add("journalctl", KERNEL / "journal_kernel_prefix_only_xid45_ogkm1150.txt")
    run = accept(XID, live("00000000:97:00.0"), subprocess=False)
    checks = xid_checks(run)
    assert checks["GPU0"]["outcome"] == "failed"
    assert checks["GPU0"]["message"].startswith("NVML reported no Xid event, but the kernel log (journalctl -k) shows 1 "
                                                "for PCI 0000:97:00 during the load")
    assert checks["GPU1"]["message"] == ("no Xid event during the load (NVML events); the kernel log (journalctl -k) "
                                         "agrees (no NVRM Xid for PCI 0000:28:00 during the load)")
    assert fake_tools.calls("journalctl") == [["journalctl", "-k", "-o", "short-monotonic", "--no-pager"]]
    evidence = run.path / "gpuaccept-evidence"
    assert (evidence / "dmesg_after_load.json").is_file() and (evidence / "journalctl_kernel_after_load.json").is_file()


@pytest.mark.parametrize("journal, why", [
    (dict(rc=1, stderr="Failed to open journal: Permission denied\n"),  # CONSTRUCTED stderr
     "exited with code 1: Failed to open journal: Permission denied"),
    (dict(stdout="-- No entries --\n", stderr=JOURNAL_HINT),  # systemd's hint to a user outside its groups, exit 0
     "cannot see the system's messages (the systemd-journal or adm group can): Hint: You are currently not seeing "
     "messages from other users and the system."),
    (dict(stdout="-- No entries --\n"), "the journal holds no kernel message of this boot"),  # journald keeps none here
])
def test_a_kernel_log_neither_tool_can_read_is_not_measured(accept, fake_tools, live, journal, why):
    fake_tools.add("dmesg", rc=1, stderr=DMESG_DENIED)
    fake_tools.add("journalctl", **journal)
    run = accept(XID, live("00000000:18:00.0"), subprocess=False)
    checks = xid_checks(run)
    assert {c["outcome"] for c in checks.values()} == {"not_measured"}, checks["GPU0"]["message"]
    message = checks["GPU0"]["message"]
    assert message.startswith("not measured: NVML reported no Xid event, but the kernel log cannot be read: `")
    assert "/dmesg` exited with code 1: dmesg: read kernel buffer failed: Operation not permitted; and " in message
    assert "journalctl -k -o short-monotonic --no-pager" in message and why in message
    assert run.json["verdict"] != "accepted"


def test_a_clean_kernel_log_passes_naming_it(accept, fake_tools, live):
    fake_tools.add("dmesg", KERNEL / "dmesg_h200_vm_boot_no_xid.txt")
    run = accept(XID, live("00000000:18:00.0"), subprocess=False)
    assert xid_checks(run)["GPU0"]["message"] == ("no Xid event during the load (NVML events); the kernel log agrees "
                                                  "(no NVRM Xid for PCI 0000:18:00 during the load)")


def test_an_unparsable_nvrm_xid_line_fails_the_run(accept, fake_tools, live):
    fake_tools.add("dmesg", "[ 3650.100000] NVRM: Xid (PCI:0000:18:00.0.0): 79, GPU has fallen off the bus.\n")  # CONSTRUCTED
    run = accept(XID, live("00000000:18:00.0"), subprocess=False)
    checks = xid_checks(run)
    assert {c["outcome"] for c in checks.values()} == {"failed"}
    assert "'[ 3650.100000] NVRM: Xid (PCI:0000:18:00.0.0): 79, GPU has fallen off the bus.'" in checks["GPU3"]["message"]



def test_a_gpu_fallen_off_the_bus_with_no_xid_line_rejects_a_live_run(accept, fake_tools, live, monkeypatch):
    fake_tools.add("dmesg", KERNEL / "dmesg_r570_fallen_off_no_xid_nvsentinel155.txt")
    host = live("00000000:b3:00.0")
    clock = iter([1800.0, 1900.0])  # the load around the driver's message at 1843 s
    monkeypatch.setattr(kernel_log, "uptime", lambda proc=None: next(clock))
    run = accept(XID, host, subprocess=False)
    checks = xid_checks(run)
    assert checks["GPU0"]["outcome"] == "failed"
    assert checks["GPU0"]["message"].startswith("NVML reported no Xid event, but the kernel log shows 2 for PCI "
                                                "0000:b3:00 during the load: [1843.3] GPU lost (fallen off the bus): ")
    assert [checks[f"GPU{i}"]["outcome"] for i in (1, 2, 3)] == ["passed"] * 3
    assert run.json["verdict"] == "rejected"


def test_the_tools_own_errors_in_their_output_leave_the_kernel_log_not_measured(accept, fake_tools, live):
    # a dmesg whose error reaches stdout with exit code 0 (its streams merged by a wrapper), and the same of journalctl
    fake_tools.add("dmesg", KERNEL / "dmesg_restrict_eperm_rhel_edge5955.txt")
    fake_tools.add("journalctl", KERNEL / "journalctl_k_no_journal_files_coreos948.txt")
    run = accept(XID, live("00000000:18:00.0"), subprocess=False)
    checks = xid_checks(run)
    assert {c["outcome"] for c in checks.values()} == {"not_measured"}
    message = checks["GPU0"]["message"]
    assert "/dmesg`: dmesg printed its own error, not the kernel log: 'dmesg: read kernel buffer failed: Operation " \
           "not permitted'; and cannot read the output of `" in message
    assert message.endswith("journalctl -k -o short-monotonic --no-pager`: journalctl printed its own error, not the "
                            "kernel log: 'No journal files were found.'")
    assert run.json["verdict"] != "accepted"


@pytest.mark.parametrize("stderr, why", [
    ((KERNEL / "journalctl_hint_insufficient_permissions_usernetes281.txt").read_text(),  # the older hint's words
     "cannot see the system's messages (the systemd-journal or adm group can): Hint: You are currently not seeing "
     "messages from the system."),
    ((KERNEL / "journalctl_k_no_journal_files_coreos948.txt").read_text(),  # on stderr, exit code 0
     "printed its own error: No journal files were found."),
])
def test_journalctls_own_words_on_stderr_leave_a_log_it_printed_not_measured(accept, fake_tools, live, stderr, why):
    fake_tools.add("dmesg", rc=1, stderr=DMESG_DENIED)
    fake_tools.add("journalctl", KERNEL / "dmesg_h200_vm_boot_no_xid.txt", stderr=stderr)
    run = accept(XID, live("00000000:18:00.0"), subprocess=False)
    checks = xid_checks(run)
    assert {c["outcome"] for c in checks.values()} == {"not_measured"}
    assert checks["GPU0"]["message"].endswith(why)
