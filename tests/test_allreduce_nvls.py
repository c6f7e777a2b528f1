"""allreduce.algo: nvls: NCCL's own INFO lines (NCCL_DEBUG=INFO, put on the command line) must show NVLink SHARP set up
on every rank; NVML's NVLinks to NVSwitches are the second word that it can be. Real NCCL logs with NVLS and without;
judged in process."""

from pathlib import Path

import pytest
from builders import p5_log
from conftest import DATA, nccl_log, staged_recording
from judging import Output, judge, option_path

from pytest_gpuaccept.clauses.allreduce import nvls_missing
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.probes.nccl_tests import algo_allows_nvls, parse_nvls, run_all_reduce
from pytest_gpuaccept.probes.process import file_sha256

NVLS_ON = DATA / "nccl_nvls" / "h800_8gpu_nccl2.18.3_nvls_tree_16_channels_excerpt.txt"
ZERO_CHANNELS = DATA / "nccl_nvls" / "h800_8gpu_nccl_issue892_algo_env_0_nvls_channels_fragment.txt"
A100_SCATTER = DATA / "allreduce" / "scatter_aws_a100_2node_srun_prefixed_nccl_info_interleaved.txt"
P5 = DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt"


def contract(count: int = 8, extra: str = "") -> str:
    return (f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\nallreduce:\n  min_busbw: '1 GB/s'\n"
            f"  max_bytes: '16 GiB'\n  args: ['-n', '1']\n  algo: nvls\n{extra}")


def info_lines(path: Path, host: str | None = None) -> str:
    """NCCL's INFO lines of a real log (of one host where it holds two), as NCCL prints them beside the table."""
    return "".join(line + "\n" for line in path.read_text().splitlines()
                   if "NCCL INFO" in line and (host is None or host in line))


def cuda_12_2(tmp_path: Path, source: str = "h100_sxm5_8gpu.json") -> Path:
    """The recording with the CUDA version NCCL's `cudaDriverVersion 12020` line names (the NVLS log's host's)."""
    return option_path(staged_recording(tmp_path, source, lambda reading: reading.update(cuda="12.2")))


def run(log: bytes, info: str) -> dict[str, Output]:
    """all_reduce_perf under `env NCCL_DEBUG=INFO`, NCCL's INFO lines before the real table (as NCCL prints them)."""
    return {"env NCCL_DEBUG=INFO": Output(info.encode() + log, seconds=1.0)}


def test_nvls_in_use_on_every_rank_is_accepted_on_nccls_word_and_nvmls(tmp_path):
    judged = judge(contract(), run(p5_log(), info_lines(NVLS_ON)), tmp_path, nvml=cuda_12_2(tmp_path))
    [check] = judged.of("allreduce.algo")
    assert (check.outcome.value, check.measured, check.unit) == ("passed", 16, "nvls channels")
    assert check.message == "NVLS in use: every rank set up 16 or more nvls channels (NCCL's INFO lines)"
    assert check.details["sources"] == ["NCCL's INFO lines (NCCL_DEBUG=INFO)", "NVML's NVLinks to NVSwitches"]
    [argv] = judged.recordings.asked
    assert argv[:2] == ["env", "NCCL_DEBUG=INFO"] and Path(argv[2]).name == "all_reduce_perf"
    assert argv[3:] == ["-g", "8", "-b", "8388608", "-e", "17179869184", "-f", "2", "-c", "1", "-n", "1"]
    assert judged.of("allreduce")[0].outcome.value == "passed"  # the same run judges busbw


def test_nvls_off_is_rejected_saying_what_nccl_set_up(tmp_path):
    judged = judge(contract(), run(p5_log(), info_lines(ZERO_CHANNELS)), tmp_path)
    [check] = judged.of("allreduce.algo")
    assert (check.outcome.value, check.measured) == ("failed", 0)
    assert check.message == (
        "run: 2 of 2 ranks set up 0 nvls channels (16 coll channels); NCCL connected trees; NVML shows every GPU's "
        "NVLinks going to an NVSwitch: NVLS was possible (`env NCCL_DEBUG=INFO "
        f"{judged.recordings.asked[0][2]} -g 8 -b 8388608 -e 17179869184 -f 2 -c 1 -n 1`)")


def test_multicast_not_available_is_rejected_quoting_nccl(tmp_path):
    """The real A100 log (NVSwitch, but no NVLS before Hopper): NCCL says multicast is not available on any GPU."""
    log = nccl_log(P5, "a100_sxm4_40gb_8gpu.json")
    judged = judge(contract(), run(log, info_lines(A100_SCATTER, "distributed-ml-1:")), tmp_path,
                   nvml="a100_sxm4_40gb_8gpu.json")
    [check] = judged.of("allreduce.algo")
    assert check.outcome.value == "failed"
    assert check.message.startswith("run: NCCL's log says NVLS multicast support is not available on dev 0, 1, 2, 3, "
                                    "4, 5, 6, 7; NVML shows every GPU's NVLinks going to an NVSwitch")


def test_nvls_lines_on_a_host_without_an_nvswitch_are_refused_by_nvml(tmp_path):
    """NVLS lines replayed on RTX 5090s (no NVLink at all, NVML says): NCCL's word there is not this host's."""
    log = nccl_log(P5, "rtx5090_4gpu.json", ranks=4, table_ranks=8)
    lines = "".join(line + "\n" for line in info_lines(NVLS_ON).splitlines()
                    if "cudaDriverVersion" not in line and any(f"[{r}]" in line for r in range(4)))
    judged = judge(contract(4), run(log, lines), tmp_path, nvml="rtx5090_4gpu.json")
    [check] = judged.of("allreduce.algo")
    assert check.outcome.value == "failed"
    assert check.message == ("NCCL's log says NVLS (16 nvls channels per rank), but NVML shows no GPU with an NVLink to "
                             "an NVSwitch: NVLS cannot run here, the log is not this host's")


def test_a_run_without_nccl_info_lines_is_not_measured(tmp_path):
    judged = judge(contract(), run(p5_log(), ""), tmp_path)
    [check] = judged.of("allreduce.algo")
    assert check.outcome.value == "not_measured"
    assert "printed no `NCCL INFO` line: NCCL_DEBUG=INFO did not take effect" in check.message


def test_the_real_logs_read_as_nccl_wrote_them():
    on, zero, scatter = (parse_nvls(path.read_text()) for path in (NVLS_ON, ZERO_CHANNELS, A100_SCATTER))
    assert (on.available, on.nvls_channels, on.connected_nvls) == (tuple(range(8)), (16,) * 8, 8)
    assert nvls_missing(on, 8) is None
    assert (zero.nvls_channels, zero.algo_env) == ((0, 0), ("Tree,Ring,,CollnetDirect,CollnetChain,NVLS",))
    assert scatter.unavailable == tuple(range(8)) and set(scatter.nvls_channels) == {0}
    assert nvls_missing(on, 9) == "only 8 of 9 ranks logged their nvls channels"


@pytest.mark.parametrize("value, allows", [
    ("Tree,Ring,,CollnetDirect,CollnetChain,NVLS", True), ("Ring", False), ("ring,tree", False), ("^NVLS", False),
    ("^Ring", True), ("NVLSTree", True), ("allreduce:nvls,ring;broadcast:ring", True),
    ("allreduce:ring;broadcast:nvls", False), ("broadcast:ring", True)])
def test_nccls_algo_setting_is_read_as_nccl_reads_it(value, allows):
    assert algo_allows_nvls(value) is allows


def test_a_setting_that_turns_nvls_off_is_named():
    text = NVLS_ON.read_text() + "h:1:2 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n"
    assert nvls_missing(parse_nvls(text), 8) == "NVLS is off: NCCL's log says NCCL_ALGO set by environment to Ring"
    text = NVLS_ON.read_text() + "h:1:2 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.\n"
    assert nvls_missing(parse_nvls(text), 8) == "NVLS is off: NCCL's log says NCCL_NVLS_ENABLE set by environment to 0"


def test_algo_asks_for_nccl_tests():
    with pytest.raises(ContractError, match=r"allreduce\.algo: expected tool: nccl-tests with algo \(nvls\)"):
        parse_contract(contract() + "  tool: torch\n", "v.yaml")


def fake_all_reduce_perf(folder: Path) -> Path:
    """A stand-in all_reduce_perf that prints the NCCL_DEBUG it was started with (started for real, no pytest)."""
    script = folder / "all_reduce_perf"
    script.write_text("#!/bin/sh\necho \"NCCL_DEBUG=$NCCL_DEBUG\"\n")
    script.chmod(0o755)
    return script


def test_the_run_gets_nccl_debug_on_its_command_line(tmp_path):
    script = fake_all_reduce_perf(tmp_path)
    runner = ToolRunner(tmp_path / "evidence", tool_paths={"all_reduce_perf": str(script)}, shared=False)
    done = run_all_reduce(runner, ["-g", "1"], 1, env={"NCCL_DEBUG": "INFO"})
    assert (done.returncode, done.stdout, done.argv[1:]) == (0, "NCCL_DEBUG=INFO\n", ("NCCL_DEBUG=INFO", str(script), "-g", "1"))
    assert Path(done.argv[0]).name == "env"


def test_a_binary_that_is_not_the_pinned_one_is_not_run_through_env_either(tmp_path):
    script = fake_all_reduce_perf(tmp_path)
    runner = ToolRunner(tmp_path / "evidence", tool_paths={"all_reduce_perf": str(script)}, pins={"all_reduce_perf": "0" * 64},
                        shared=False)
    done = run_all_reduce(runner, ["-g", "1"], 1, env={"NCCL_DEBUG": "INFO"})
    assert done.returncode is None and done.stdout == ""
    assert f"has SHA-256 {file_sha256(str(script))}, the contract pins {'0' * 64} (tools.sha256)" in (done.error or "")


def test_the_clusters_all_reduce_jobs_take_no_algo_yet():
    """Each node's own `allreduce.algo` judges NVLS; the multi-node job's INFO lines are not read for it yet."""
    text = ("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\ncluster:\n  engine: slurm\n  nodes: ['gpu[01-02]']\n"
            "  allreduce: {min_busbw: '100 GB/s', algo: nvls}\n")
    with pytest.raises(ContractError, match=r"cluster\.allreduce\.algo \(line 8\): unknown key"):
        parse_contract(text, "v.yaml")
