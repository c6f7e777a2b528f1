"""The schedule (issue 29): measurements that hold nothing in common run together, those that share a resource stay
apart, decided by schedule.plan over the resources each declares; what ran when is in the results and the report.
The realistic-times host (benchmarks/realistic.py) runs here at 2 % of its times: the schedule's arithmetic, not its
minutes."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from builders import IB_UP, RDMA_CONTRACT, counting_port, sysfs_tree
from conftest import DATA

from pytest_gpuaccept import schedule
from pytest_gpuaccept.clauses import together
from pytest_gpuaccept.schedule import GPUS, NVLINK, Bar, Job, Timeline, plan, planned_seconds, port

# Its tests share a module fixture (one whole run): one worker builds it once (test.sh: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_schedule")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import realistic  # noqa: E402

SCALE = 0.02
BW_90 = DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt"


def moving(root: Path, gbit_s: float) -> str:
    """What a client (its last argument a host) does to its own device's port counters (-d): `gbit_s` for as long as
    its process has lived, as test_network_second_sources' honest fake does for one device."""
    return textwrap.dedent(f"""\
        if not sys.argv[-1].isdigit():
            device = sys.argv[sys.argv.index("-d") + 1]
            born = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            lived = float(open("/proc/uptime").read().split()[0]) - born
            for name in ("port_xmit_data", "port_rcv_data"):
                path = {str(root)!r} + "/class/infiniband/" + device + "/ports/1/counters/" + name
                value = int(open(path).read())
                open(path, "w").write(str(value + int({gbit_s} * 1e9 * lived / 8 / 4)))
        """)


def ports(n: int) -> list[Job]:
    return [Job(f"ib_write_bw mlx5_{d}", frozenset({port(f"mlx5_{d}/1")}), 8.0) for d in range(n)]


# ------------------------------------------------------------------ the plan


def test_eight_devices_on_eight_ports_share_one_slot_and_one_at_a_time_takes_eight():
    together = plan(ports(8))
    assert [slot.names for slot in together] == [tuple(f"ib_write_bw mlx5_{d}" for d in range(8))]
    assert planned_seconds(together) == 8.0
    apart = plan(ports(8), together=False)
    assert [slot.names for slot in apart] == [(f"ib_write_bw mlx5_{d}",) for d in range(8)]
    assert planned_seconds(apart) == 64.0


def test_two_names_of_one_port_never_run_at_once():
    twins = [Job("mlx5_0", frozenset({port("0x1234")})), Job("mlx5_bond", frozenset({port("0x1234")})),
             Job("mlx5_1", frozenset({port("mlx5_1/1")}))]
    assert [slot.names for slot in plan(twins)] == [("mlx5_0", "mlx5_1"), ("mlx5_bond",)]


def test_jobs_that_hold_the_gpus_keep_their_order_and_ports_go_beside_the_gpu_load():
    load = Job("GPU load", frozenset({GPUS}), 70.0)
    copies = Job("nvbandwidth", frozenset({GPUS, NVLINK}), 93.0)
    allreduce = Job("all_reduce", frozenset({GPUS, NVLINK}), 6.4)
    slots = plan([load, *ports(8), copies, allreduce])
    assert [slot.names for slot in slots] == [("GPU load", *(f"ib_write_bw mlx5_{d}" for d in range(8))),
                                              ("nvbandwidth",), ("all_reduce",)]
    # 279 s of the run in series; with the plan: the load's 70 s hides the eight 8 s ib_write_bw runs.
    assert planned_seconds(slots) == 70.0 + 93.0 + 6.4


def test_one_process_runs_each_testcase_once_in_order():
    cases = schedule.one_run([("write", "read"), ("local",), (), ("read", "h2d")])
    assert cases == ("write", "read", "local", "h2d")


@pytest.mark.parametrize("gemm, load, builtin, shared", [
    (30.0, 60.0, True, 60.0), (120.0, 60.0, True, 120.0),  # the longer of the two
    (30.0, 60.0, False, None),  # the contract's own workload is what utilisation judges
    (30.0, 2 * 3600.0, True, None),  # a burn-in's length: the GEMM's output would pass its 8 MiB
])
def test_the_gpu_load_is_shared_where_the_workload_is_ours_and_the_load_not_too_long(gemm, load, builtin, shared):
    assert schedule.shared_load_s(gemm, load, builtin) == shared


def test_the_time_line_counts_wall_busy_and_series_time():
    line = schedule.timeline([("b", "ib_write_bw", 110.0, 8.0), ("a", "gemm", 100.0, 70.0), ("c", "nvbandwidth", 170.0, 93.0),
                              ("never", "dcgmi", None, 0.0)])
    assert line.bars == (Bar("a", "gemm", 0.0, 70.0), Bar("b", "ib_write_bw", 10.0, 8.0), Bar("c", "nvbandwidth", 70.0, 93.0))
    assert (line.wall_s, line.busy_s, line.tools_s) == (163.0, 163.0, 171.0)
    gap = Timeline((Bar("a", "x", 0.0, 2.0), Bar("b", "y", 5.0, 1.0)))
    assert (gap.wall_s, gap.busy_s) == (6.0, 3.0)


def test_a_clusters_thousands_of_runs_are_drawn_a_row_per_kind_and_kept_every_one_in_the_results():
    """A host's few dozen runs are a row each; a 64-node cluster's 10,146 (pairs, links, node runs) were 2 MB of a
    2.6 MB report drawn that way: past ROW_PER_RUN, a row per kind of run with the stretches its runs covered."""
    runs = [(f"node-run-n{n:04d}", "mpirun", 0.0, 3.0) for n in range(64)]
    runs += [(f"pair-n{n:04d}+n{n + 1:04d}", "mpirun", 3.0 + r, 0.9) for r in range(63) for n in range(0, 64, 2)]
    runs += [(f"link-server-n{n:04d}-n{n + 1:04d}-eth0-there", "mpirun", 70.0 + 2 * r, 1.5)
             for r in range(63) for n in range(0, 64, 2)]
    line = schedule.timeline(runs)
    recorded = line.to_json()
    assert len(recorded["runs"]) == len(runs) == 64 + 2 * 63 * 32
    page = together.draw(recorded)
    assert len(page) < 10_000 and page.count("<tr>") == 4
    assert "<td>node-run (64)<td>mpirun<td>0.0<td>192.0" in page and "<td>pair (2016)<td>mpirun<td>3.0" in page
    assert "link-server (2016)" in page and f"{len(runs)} runs, a row per kind" in page
    host = together.draw(schedule.timeline([("gemm", "gemm", 0.0, 40.0), ("ib_write_bw_mlx5_0_client", "ib_write_bw",
                                                                         1.0, 8.0)]).to_json())
    assert "<td>ib_write_bw_mlx5_0_client<td>ib_write_bw<td>1.0<td>8.0" in host and host.count("<tr>") == 3
    assert together.kind("link-address-n0001-eth0") == "link-address" and together.kind("cluster-allreduce") == \
        "cluster-allreduce" and together.kind("ib_write_bw_mlx5_7_client") == "ib_write_bw_mlx5_7_client"


# ------------------------------------------------------------------ RDMA devices at once, or one at a time


@pytest.mark.parametrize("concurrent", [True, False])
def test_rdma_devices_on_distinct_ports_run_at_once_unless_told_otherwise(accept, fake_tools, tmp_path, concurrent):
    sysfs = sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP, "mlx5_1": IB_UP})
    for device in ("mlx5_0", "mlx5_1"):
        counting_port(tmp_path / "sys", device)
    fake_tools.add("ib_write_bw", BW_90, then=moving(tmp_path / "sys", 92.0))
    extra = "" if concurrent else "  concurrent: false\n"
    run = accept(RDMA_CONTRACT.format(devices="['mlx5_*']", extra=extra), sysfs)
    assert [c["outcome"] for c in run.checks("rdma")] == ["passed", "passed"], [c["message"] for c in run.checks("rdma")]
    spans = sorted((start, end) for tool, start, end in fake_tools.intervals() if tool == "ib_write_bw")
    assert len(spans) == 4
    overlapping = spans[2][0] < spans[1][1]  # the second device's server started before the first device's end
    assert overlapping is concurrent
    runs = {r["key"]: r for r in run.json["schedule"]["runs"]}
    starts = {runs[f"ib_write_bw_{d}_client"]["start_s"] for d in ("mlx5_0", "mlx5_1")}
    assert (len(starts) == 1) is concurrent


# ------------------------------------------------------------------ the realistic host at 2 % of its times


@pytest.fixture(scope="module")
def realistic_run(tmp_path_factory) -> realistic.Result:
    return realistic.run(realistic.build(tmp_path_factory.mktemp("realistic"), SCALE))


def test_the_realistic_host_is_accepted_with_every_check_and_the_schedule_in_the_results(realistic_run):
    assert (realistic_run.verdict, realistic_run.checks) == ("accepted", 260), realistic_run.output
    keys = [r["key"] for r in realistic_run.schedule["runs"]]
    # One nvbandwidth process for p2p, memory and host copies; one GPU load (the GEMM) for compute and utilisation.
    assert keys.count("nvbandwidth") == 1 and not any(k.startswith("nvbandwidth_") for k in keys)
    assert "gemm_torch" in keys and "workload_builtin" not in keys
    report = (realistic_run.folder / "gpuaccept-report.html").read_text()
    assert "<h3>Schedule</h3>" in report and "ib_write_bw_mlx5_7_client" in report


def test_rdma_runs_beside_the_gpu_load_and_the_nvlink_counters_around_the_all_reduce(realistic_run):
    runs = realistic_run.schedule["runs"]
    by_key = {r["key"]: r for r in runs}
    load = by_key["gemm_torch"]
    rdma = [r for r in runs if r["tool"] == "ib_write_bw"]
    assert len(rdma) == 16 and len({r["start_s"] for r in rdma}) == 1
    assert load["start_s"] <= rdma[0]["start_s"] <= load["start_s"] + load["seconds"]
    order = [r["key"] for r in sorted(runs, key=lambda r: r["start_s"])]
    first = order.index("nvidia-smi_nvlink_-e.before")
    assert order[first + 1].startswith("all_reduce_perf") and order[first + 2].startswith("all_reduce_perf")
    assert order[first + 3] == "nvidia-smi_nvlink_-e.after"


def test_the_schedules_arithmetic_holds_on_the_fast_fakes(realistic_run):
    """The tools' busy time is the plan's (each slot as long as its longest run, one slot after another), give or take
    the fakes' start-up on a loaded machine; run one after another they would take far longer."""
    recorded = realistic_run.schedule
    planned, series = realistic.planned(SCALE), realistic.series(SCALE)
    assert planned * 0.9 <= recorded["busy_s"] <= planned * 1.3 + 4.0, (planned, recorded["busy_s"])
    assert recorded["tools_s"] >= series * 0.9 and series - planned > 40.0  # 16 runs of 5 s at once, not one after another
    assert json.dumps(recorded)  # plain data
