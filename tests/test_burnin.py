"""burnin: an 8-GPU load of an hour (or eight) replayed from a recorded NVML stream at the speed it can be read.

The streams are built here, in the format `nvml.stream_gpus` writes (docs/nvml-recording.md, the burn-in stream):
constructed, not captured on a GPU (no GPU machine was lent to this work). A header, a row per GPU every
`interval` seconds, the error counters every 10 s, and the events a test stages: a throttle span, an Xid, an ECC
error. The recording that names the stream is the real-shaped 8-GPU H100 one of tests/data/nvml.

The clauses are judged in process from the stream (tests/judging.py); a whole pytest run stays where the run itself
is the point: a rejected run and a short stream's (complete), an interrupted one, a bundle judged again, a live
burn-in with its sampler and kernel log.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from builders import BURNIN_HEADER, HW_SLOWDOWN, SW_POWER_CAP, stream_lines
from conftest import DATA, pci_tree
from judging import Output, judge

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from burnin_memory import run as burn  # noqa: E402

from pytest_gpuaccept.clauses.burnin import SECTION, progress_line
from pytest_gpuaccept.probes import kernel_log, nvml
from pytest_gpuaccept.probes.nvml_stream import GpuResult, Watch
from pytest_gpuaccept.units import parse_duration


def recording(tmp_path: Path, stream: Path | str) -> str:
    """The 8-GPU H100 recording, naming the burn-in stream beside it."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    reading["burnin"] = {"stream": str(stream)}
    path = tmp_path / "nvml-burnin.json"
    path.write_text(json.dumps(reading))
    return f"--gpuaccept-nvml={path}"


def contract(duration: str = "60 min", extra: str = "") -> str:
    return ("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n"
            f"burnin:\n  duration: \"{duration}\"\n  workload: [\"burn-job\"]\n  max_throttle_s: 5\n  min_percent: 90\n{extra}")


@pytest.fixture
def burn_job(fake_tools):
    fake_tools.add("burn-job", "step 1\n", sleep=600)
    return fake_tools


def write_stream(tmp_path: Path, lines) -> Path:
    path = tmp_path / "burnin-stream.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def judged_burnin(tmp_path: Path, lines, text: str | None = None, burn_job: str | Path = "step 1\n"):
    """The contract (contract() unless `text`) judged in process on the recording naming the stream of `lines`, the
    burn-job printing `burn_job`."""
    nvml = Path(recording(tmp_path, write_stream(tmp_path, lines)).split("=", 1)[1])
    return judge(contract() if text is None else text, {"burn-job": Output(burn_job)}, tmp_path, nvml=nvml)


def test_an_hour_of_eight_gpus_fails_each_staged_fault_with_its_time(accept, burn_job, tmp_path):
    stream = write_stream(tmp_path, stream_lines(60, throttle=[(2, 300, 312)], xids=[(5, 2400, 79)], ecc=[(3, 1200)]))
    run = accept(contract(), recording(tmp_path, stream))
    failed = {(c["clause"], c["subject"]): c["message"] for c in run.checks() if c["outcome"] != "passed"}
    assert failed == {
        ("burnin.throttle", "GPU2"): "GPU2: 1 span(s) longer than 5 s, the first at t=300.0 s (5.0 min) lasting 12 s "
                                     "(hw_slowdown); the longest 12 s at t=300.0 s (5.0 min); 1 span(s), 12 s throttled in all",
        ("burnin.xid", "GPU5"): "GPU5: 1 Xid event(s) during the burn-in (NVML): Xid 79 at t=2400.0 s (40.0 min)",
        ("burnin.ecc", "GPU3"): "GPU3: new ECC errors: uncorrected 0 -> 1, first seen at t=1200.0 s (20.0 min)",
    }
    assert run.json["verdict"] == "rejected" and run.json["complete"] is True
    util = [c for c in run.checks("burnin.utilisation")]
    assert len(util) == 8 and util[0]["measured"] == 99
    assert util[0]["details"]["startup"] == {"first_busy_s": 2.0}


def test_a_gpu_that_stops_answering_and_one_at_its_slowdown_temperature_fail_with_their_times(tmp_path):
    judged = judged_burnin(tmp_path, stream_lines(60, lost=[(6, 1800)], hot=[(7, 3000)]))
    failed = {(c.clause, c.subject): c.message for c in judged.checks if c.outcome.value != "passed"}
    lost = "GPU6 stopped answering NVML at t=1800.0 s (30.0 min) of the burn-in (NVMLError_GpuIsLost: GPU is lost): " \
           "lost, not judged on what came before"
    assert failed == {**{(clause, "GPU6"): lost for clause in ("burnin.utilisation", "burnin.clocks", "burnin.throttle",
                                                               "burnin.temperature", "burnin.ecc", "burnin.nvlink", "burnin.xid")},
                      ("burnin.temperature", "GPU7"): "GPU7 reached 88 C at t=3000.0 s (50.0 min), at or above NVML's "
                                                      "slowdown threshold of 87 C (hottest 88 C)"}


def test_a_clean_hour_is_accepted(tmp_path):
    judged = judged_burnin(tmp_path, stream_lines(60))
    assert judged.verdict == "accepted", [c.message for c in judged.checks if c.outcome.value != "passed"]
    assert {c.clause for c in judged.checks} >= {"burnin.utilisation", "burnin.clocks", "burnin.throttle",
                                                  "burnin.temperature", "burnin.ecc", "burnin.nvlink", "burnin.xid"}


def _start(tmp_path: Path, contract_text: str, stream: Path) -> tuple[subprocess.Popen, Path]:
    """`python -m pytest --contract` on the burn-in recording, in a folder of its own, started (not waited for)."""
    work = tmp_path / "run"
    work.mkdir()
    (work / "vendor.yaml").write_text(contract_text)
    argv = [sys.executable, "-m", "pytest", "--contract=vendor.yaml", "-p", "no:cacheprovider",
            recording(tmp_path, stream), pci_tree(tmp_path / "sys", recording="h100_sxm5_8gpu.json")]
    return subprocess.Popen(argv, cwd=work, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT), work


def test_an_interrupted_burn_in_is_incomplete_and_keeps_what_it_saw(burn_job, tmp_path):
    """Ten minutes of an hour stream through a pipe, a throttle span at minute 5 among them; then SIGTERM."""
    fifo = tmp_path / "burnin-stream.jsonl"
    os.mkfifo(fifo)
    proc, work = _start(tmp_path, contract(), fifo)
    lines = list(stream_lines(60, throttle=[(2, 300, 312)]))
    with open(fifo, "w") as feed:  # blocks until the burn-in opens the stream
        feed.write("\n".join(lines[:1 + 600 * 8 + 60 * 8]) + "\n")  # the header, then ten minutes: rows and counters
        feed.flush()
        deadline = time.monotonic() + 60
        while not any((work / "gpuaccept-evidence").glob("burnin-stream.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # the burn-in reads what was written, then waits on the pipe
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out.decode()[-3000:]
    results = json.loads((work / "gpuaccept-results.json").read_text())
    assert results["complete"] is False and results["verdict"] == "rejected"
    burnin = {(c["clause"], c["subject"]): c for c in results["checks"] if c["clause"].startswith("burnin.")}
    assert len(burnin) == 56
    throttle = burnin[("burnin.throttle", "GPU2")]
    assert throttle["outcome"] == "failed" and "the first at t=300.0 s (5.0 min) lasting 12 s" in throttle["message"]
    others = [c for key, c in burnin.items() if key != ("burnin.throttle", "GPU2")]
    assert {c["outcome"] for c in others} == {"not_measured"}
    util = burnin[("burnin.utilisation", "GPU0")]["message"]
    assert util.startswith("not measured: interrupted (KeyboardInterrupt: signal 15) at t=599.0 s (10.0 min) of the 1.00 h "
                           "burn-in; nothing failed in the 10.0 min it saw (GPU0: the least busy window ended at")
    kept = (work / "gpuaccept-evidence" / "burnin-stream.jsonl").read_text().splitlines()
    assert kept == lines[:len(kept)] and len(kept) > 5000  # what it saw, as it came
    summary = json.loads((work / "gpuaccept-evidence" / "burnin.json").read_text())
    assert summary["stopped"].startswith("interrupted") and summary["ended"] is False
    assert "INCOMPLETE RUN" in (work / "gpuaccept-report.html").read_text()


def test_memory_is_flat_in_the_duration(tmp_path):
    """Six minutes and four hours of 8 GPUs (every second here; the benchmark samples every 0.15 s for 8 and 24 h)
    streamed through a pipe: the pytest process's peak memory is the same. The four hours' 115,200 samples, held as
    the utilisation load holds its samples, would be some 25 MB more."""
    (tmp_path / "short").mkdir()
    (tmp_path / "long").mkdir()
    short = burn(0.1, tmp_path / "short", interval=1.0)
    long = burn(4.0, tmp_path / "long", interval=1.0)
    assert short.verdict == long.verdict == "accepted"
    assert long.rows == 40 * short.rows == 115200
    assert long.peak_rss_mb - short.peak_rss_mb < 8, (short, long)
    assert long.peak_rss_mb < 150


# ---------------------------------------------------------------- the live sampler and the watch, without a GPU

class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    pass


def stand_in_pynvml(lost_after: int = 8, xid_at: int = 3) -> types.SimpleNamespace:
    """A stand-in for the NVML bindings (no GPU here): two GPUs with two active NVLinks each; GPU1 stops answering
    after `lost_after` utilisation reads; one Xid 79 on GPU0 is waiting at the `xid_at`-th drain; GPU0's volatile
    uncorrected ECC count is 1 from the second counter reading on; NVLink ECC-data counters are not supported."""
    calls = {"util": [0, 0], "drain": 0, "ecc": 0}

    def util(handle):
        calls["util"][handle] += 1
        if handle == 1 and calls["util"][1] > lost_after:
            raise _NVMLError("GPU is lost")
        return types.SimpleNamespace(gpu=99)

    def wait(_events, _timeout):
        calls["drain"] += 1
        if calls["drain"] == xid_at:
            return types.SimpleNamespace(eventData=79, device=0)
        raise _NVMLError("Timeout")

    def ecc(handle, kind, _counter):
        calls["ecc"] += handle == 0 and kind == 1
        return int(handle == 0 and kind == 1 and calls["ecc"] > 1)

    def link_state(_handle, link):
        if link >= 2:
            raise _NVMLError("Invalid Argument")
        return 1

    def nvlink_errors(_handle, _link, kind):
        if kind == 4:
            raise _NotSupported("Not Supported")
        return 0

    return types.SimpleNamespace(
        NVMLError=_NVMLError, NVMLError_NotSupported=_NotSupported, NVML_FEATURE_ENABLED=1, NVML_CLOCK_SM=1,
        NVML_TEMPERATURE_GPU=0, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1, NVML_VOLATILE_ECC=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlEventSetCreate=lambda: "events",
        nvmlDeviceRegisterEvents=lambda h, kind, events: None, nvmlEventSetWait_v2=wait, nvmlEventSetFree=lambda e: None,
        nvmlDeviceGetIndex=lambda device: device, nvmlDeviceGetNvLinkState=link_state,
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: types.SimpleNamespace(busId="00000000:C0:00.0"),
        nvmlDeviceGetTemperatureThreshold=lambda h, kind: 87, nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetClockInfo=lambda h, kind: 1980, nvmlDeviceGetPowerUsage=lambda h: 690500,
        nvmlDeviceGetTemperature=lambda h, kind: 71, nvmlDeviceGetCurrentClocksEventReasons=lambda h: 4,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5, nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000, nvmlDeviceGetTotalEccErrors=ecc,
        nvmlDeviceGetRemappedRows=lambda h: (0, 0, 0, 0), nvmlDeviceGetNvLinkErrorCounter=nvlink_errors)


def test_the_live_sampler_hands_on_each_record_and_keeps_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_pynvml())
    monkeypatch.setattr(nvml, "COUNTERS_EVERY_S", 0.05)
    taken = []
    nvml.stream_gpus(2, 0.01, 0.3, threading.Event(), taken.append)
    header, *rest = taken
    assert header["stream"] == "gpuaccept-burnin" and header["fields"] == list(nvml.SAMPLE_FIELDS)
    assert header["gpus"] == [{"index": 0, "slowdown_temp_c": 87, "nvlinks": [0, 1]},
                              {"index": 1, "slowdown_temp_c": 87, "nvlinks": [0, 1]}]
    assert rest[0] == {"t_s": 0.0, "gpu": 0, "ecc": [0, 0], "remapped_rows": [0, 0, 0, 0], "nvlink_errors": [0, 0, 0, 0, None]}
    rows = [r for r in rest if isinstance(r, list)]
    assert rows[0] == [0, 0.0, 99, 1980, 690.5, 71, 4, 5, 16, 700.0]
    assert sum(1 for r in rows if r[0] == 1) == 8 and sum(1 for r in rows if r[0] == 0) > 8
    lost = [r for r in rest if isinstance(r, dict) and "lost" in r]
    assert lost == [{"t_s": lost[0]["t_s"], "gpu": 1, "lost": "_NVMLError: GPU is lost"}]
    assert [r["xid"] for r in rest if isinstance(r, dict) and "xid" in r] == [79]
    assert rest[-1] == {"end": True, "t_s": rest[-1]["t_s"]} and rest[-1]["t_s"] >= 0.3

    watch = Watch(0.3)
    for record in taken:
        watch.add(record)
    gpu0, gpu1 = (GpuResult.from_dict(g["burnin"]) for g in watch.summary()["gpus"])
    assert gpu1.lost_t_s == lost[0]["t_s"] and gpu1.lost_error == "_NVMLError: GPU is lost"
    assert gpu0.xids[0][1] == 79 and gpu0.counters["ecc"]["grew"][1] == [0, 1]
    assert gpu0.counters["nvlink_errors"]["first"] == [0, 0, 0, 0, None] and gpu0.nvlinks == (0, 1)


def test_the_watch_ends_a_span_still_going_at_the_last_sample_and_counts_past_its_keep():
    watch = Watch(60.0)
    watch.add({**BURNIN_HEADER, "interval_s": 1.0, "gpus": [{"index": 0, "slowdown_temp_c": None, "nvlinks": []}]})
    for t in range(1200):  # a second of HW slowdown every ten, and the last 30 s throttled
        bad = HW_SLOWDOWN if t % 10 == 0 or t >= 1170 else 0
        watch.add([0, float(t), 99, 1980, 690.5, 70 + t // 300, SW_POWER_CAP | bad, 5, 16, 700.0])
    result = GpuResult.from_dict(watch.summary()["gpus"][0]["burnin"])
    assert result.span_count == 118 and result.longest_span == (1170.0, 30.0, HW_SLOWDOWN)
    assert result.first_at_or_above(72) == (600.0, 72) and result.first_at_or_above(74) is None
    assert len(watch.summary()["gpus"][0]["samples"]) == 20  # one row a minute


@pytest.mark.parametrize("end, why", [
    (True, "not measured: the burn-in ended at t=1200.0 s (20.0 min), before its 1.00 h; nothing failed in the 20.0 min "
           "it saw (GPU0: "),
    (False, "not measured: the NVML stream stopped at t=1199.0 s (20.0 min) without its end; nothing failed in the "
            "20.0 min it saw (GPU0: "),
])
def test_a_stream_shorter_than_the_duration_is_never_passed(tmp_path, end, why):
    judged = judged_burnin(tmp_path, stream_lines(20, throttle=[(2, 300, 312)], end=end))
    burnin = [c for c in judged.checks if c.clause.startswith("burnin.")]
    failed = [(c.clause, c.subject) for c in burnin if c.outcome.value == "failed"]
    assert failed == [("burnin.throttle", "GPU2")]  # what it saw still fails, with its time
    assert {c.outcome.value for c in burnin if c.outcome.value != "failed"} == {"not_measured"}
    assert judged.of("burnin.utilisation")[0].message.startswith(why)
    assert judged.verdict == "rejected"


@pytest.mark.parametrize("end", [True, False])
def test_a_stream_shorter_than_the_duration_is_still_a_complete_run(accept, burn_job, tmp_path, end):
    """A whole run: a stream that ends early (with its end record or without) is judged, not an interrupted run."""
    stream = write_stream(tmp_path, stream_lines(20, throttle=[(2, 300, 312)], end=end))
    run = accept(contract(), recording(tmp_path, stream))
    assert run.json["verdict"] == "rejected" and run.json["complete"] is True


def test_a_bundle_is_judged_again_from_what_the_watch_kept(accept, burn_job, tmp_path):
    stream = write_stream(tmp_path, stream_lines(60, throttle=[(4, 900, 903)]))
    first = accept(contract(), recording(tmp_path, stream))
    assert first.json["verdict"] == "accepted"  # a 3 s span, 5 s allowed
    shutil.rmtree(burn_job.bin_dir)  # no tool left: a replay must not need one
    strict = contract().replace("max_throttle_s: 5", "max_throttle_s: 2")
    again = accept(strict, f"--gpuaccept-replay={first.path}", f"--html={tmp_path / 'r' / 'report.html'}",
                   f"--gpuaccept-json={tmp_path / 'r' / 'results.json'}")
    result = json.loads((tmp_path / "r" / "results.json").read_text())
    throttle = {c["subject"]: c for c in result["checks"] if c["clause"] == "burnin.throttle"}
    assert (throttle["GPU4"]["outcome"], throttle["GPU4"]["measured"]) == ("failed", 3.0)
    assert throttle["GPU4"]["message"].startswith("GPU4: 1 span(s) longer than 2 s, the first at t=900.0 s (15.0 min)")
    assert again.result.ret == 1
    kept = tmp_path / "r" / "gpuaccept-evidence" / "burnin-stream.jsonl"
    assert kept.read_bytes() == (first.path / "gpuaccept-evidence" / "burnin-stream.jsonl").read_bytes()


def test_the_progress_line_says_how_far_and_what_failed_so_far():
    watch = Watch(3600.0)
    for line in stream_lines(45, throttle=[(2, 300, 312)], xids=[(5, 2400, 79)], ecc=[(3, 1200)], end=False):
        watch.add(json.loads(line))
    section = SECTION.build(duration=parse_duration("1 h"), workload="builtin", max_throttle_s=5.0, min_percent=90.0)
    assert progress_line(watch, section) == ("gpuaccept: burn-in 45/60 min: least busy GPU0 99 %; throttle spans over "
                                             "5 s: GPU2 1; Xid: GPU5 1; counters grown: GPU3 ecc")


def test_the_builtin_loads_own_start_up_is_kept_beside_nvmls(tmp_path):
    """The real output of the builtin load on this CPU (tests/data/torch; no PyTorch in the test environment, so a fake
    workload prints it): each rank's first step, in seconds since launch, beside NVML's first busy sample."""
    judged = judged_burnin(tmp_path, stream_lines(60), burn_job=DATA / "torch" / "train_cpu_2proc_first_step.txt")
    startup = {c.subject: c.details["startup"] for c in judged.of("burnin.utilisation")}
    assert startup["GPU0"] == {"first_busy_s": 2.0, "first_step_s": 84.11}
    assert startup["GPU1"] == {"first_busy_s": 2.0, "first_step_s": 72.51}
    assert startup["GPU2"] == {"first_busy_s": 2.0}


def test_a_live_burn_in_streams_to_the_evidence_and_reads_its_own_kernel_log(accept, fake_tools, monkeypatch, tmp_path):
    """Live mode in this process (NVML replaced: the host is the 4-GPU recording cut to two, the sampler's bindings the
    stand-in above; the run is never accepted in-process, its checks are what is looked at): an Xid NVML reports on
    GPU0, and one only the kernel log (a real dmesg line) shows for GPU1's PCI address during the load."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    reading["gpus"] = reading["gpus"][:2]
    reading["gpus"][1]["pci_bus_id"] = "00000002:00:00.0"
    reading["cuda_devices"].update(count=2, bus_ids=["0000:18:00.0", "0002:00:00.0"])
    path = tmp_path / "nvml-live.json"
    path.write_text(json.dumps(reading))
    monkeypatch.setattr(nvml, "read_host", lambda: json.loads(path.read_text()))
    bindings = stand_in_pynvml(lost_after=10**6)
    bindings.__spec__ = importlib.machinery.ModuleSpec("pynvml", None)  # the run's preflight looks the module up
    monkeypatch.setitem(sys.modules, "pynvml", bindings)
    clock = iter([3600.0, 3700.0])
    monkeypatch.setattr(kernel_log, "uptime", lambda proc=None: next(clock))
    fake_tools.add("burn-job", "burning\n", hang=30)
    fake_tools.add("dmesg", DATA / "kernel" / "dmesg_xid119_gsp_timeout_aznhc.txt")
    text = ("gpuaccept: 1\nvendor: V\ngpus: {count: 2}\n"
            "burnin: {duration: '2 s', workload: ['burn-job'], min_percent: 90}\n")
    run = accept(text, pci_tree(tmp_path / "sys", recording=path), subprocess=False)
    xid = {c["subject"]: c for c in run.checks("burnin.xid")}
    assert xid["GPU0"]["message"].startswith("GPU0: 1 Xid event(s) during the burn-in (NVML): Xid 79 at t=0.")
    assert xid["GPU1"]["message"].startswith("NVML reported no Xid event, but the kernel log shows 1 for PCI 0002:00:00 "
                                             "during the load: [3606.8] Xid 119")
    evidence = run.path / "gpuaccept-evidence"
    records = (evidence / "burnin-stream.jsonl").read_text().splitlines()
    assert json.loads(records[0])["stream"] == "gpuaccept-burnin" and json.loads(records[-1])["end"] is True
    assert (evidence / "dmesg_after_burnin.json").is_file()
    assert {c["outcome"] for c in run.checks("burnin.utilisation")} == {"passed"}

