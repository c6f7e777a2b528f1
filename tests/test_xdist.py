"""Under `-n 2` a run gives the serial verdict: each tool once, checks listed once, loads never overlapping."""

import json

from builders import recording
from conftest import DATA, nccl_log

CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 4
  model: H100
  memory: "80 GB"
nvlink:
  every_pair: true
  min_links: 6
allreduce:
  min_busbw: "1 GB/s"
  max_bytes: "128 MiB"
  min_bytes: "8 B"
  repeats: 2
utilisation:
  min_percent: 80
  duration: "1.5 s"
  warmup: "1 s"
  workload: ["train-job"]
health:
  throttle: true
"""


def four_rank_log() -> bytes:
    # The real 8-GPU RTX 5090 log, its header claiming the 4 GPUs this contract has (ranks 0-3 kept).
    return nccl_log(DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt", "h100_sxm5_4gpu.json", ranks=4)


def run(accept, fake_tools, tmp_path, *args):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_4gpu_nv6_4nic_matrix_only.txt")
    fake_tools.add_nccl(four_rank_log())
    fake_tools.add("train-job", "training\n", hang=30)
    return accept(CONTRACT, recording(tmp_path), *args, subprocess=True)


def test_two_workers_and_none_give_the_same_checks_each_tool_once(accept, fake_tools, tmp_path, pytester):
    serial = run(accept, fake_tools, tmp_path, "-n", "0")
    serial_checks = serial.json["checks"]
    serial_calls = sorted(map(json.dumps, fake_tools.calls()))
    fake_tools.log.unlink()
    parallel = run(accept, fake_tools, tmp_path, "-n", "2")
    key = lambda c: (c["clause"], c["subject"])
    strip = lambda checks: sorted(({k: v for k, v in c.items() if k != "details"} for c in checks), key=key)
    assert strip(parallel.json["checks"]) == strip(serial_checks)
    assert len({key(c) for c in parallel.json["checks"]}) == len(parallel.json["checks"])
    assert sorted(map(json.dumps, fake_tools.calls())) == serial_calls
    assert len(fake_tools.calls("nvidia-smi")) == 1
    assert len(fake_tools.calls("all_reduce_perf")) == 2 and len(fake_tools.calls("train-job")) == 1
    assert parallel.json["verdict"] == serial.json["verdict"]


def test_exclusive_measurements_never_overlap_under_xdist(accept, fake_tools, tmp_path):
    parallel = run(accept, fake_tools, tmp_path, "-n", "2")
    assert parallel.json["complete"] is True
    loads = sorted((start, end, tool) for tool, start, end in fake_tools.intervals()
                   if tool in ("all_reduce_perf", "train-job"))
    assert len(loads) == 3
    for (_s1, end1, tool1), (start2, _e2, tool2) in zip(loads, loads[1:]):
        assert end1 <= start2, f"{tool1} and {tool2} overlapped"
