"""Slurm node states as scontrol and sinfo print them (Slurm 22.05-24.11), read as flags, on real outputs
(tests/data/slurm, sources in tests/data/SOURCES.md). A node whose state carries a word the man pages call
unusable is never run on, and the reason names the word; honest IDLE/MIXED/ALLOCATED nodes stay usable."""

from __future__ import annotations

import pytest
from conftest import DATA

from pytest_gpuaccept.cluster.engine import Slurm
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.slurm import (
    UNUSABLE,
    USABLE,
    parse_scontrol_nodes,
    parse_sinfo_nodes,
    state_flags,
    unusable_flags,
)

SLURM = DATA / "slurm"
FLEET = DATA / "fleet"


def _nodes(name: str) -> dict[str, object]:
    return {n.name: n for n in parse_scontrol_nodes((SLURM / name).read_text())}


def test_maintenance_reservation_on_real_h100_nodes_is_never_run_on():
    # character-ai/slonk: 4 H100 nodes of Slurm 23.11.0-0rc1, Gres=gpu:8, all in a MAINT reservation "example".
    nodes = _nodes("slonk_h100_4nodes_drain_maintenance_reserved_23.11.txt")
    assert sorted(nodes) == ["cluster-h100-9-69", "cluster-h100-9-75", "cluster-h100-9-78", "cluster-h100-9-79"]
    busy = nodes["cluster-h100-9-69"]
    assert busy.states == ("ALLOCATED", "MAINTENANCE", "RESERVED") and busy.gpus == 8
    assert busy.version == "23.11.0-0rc1" and busy.reason is None
    # ALLOCATED and RESERVED alone would be usable: MAINTENANCE is what refuses the node, and the reason says so
    assert not busy.schedulable
    assert busy.why_unschedulable == "MAINTENANCE: in a reservation with the maintenance flag"
    drained = nodes["cluster-h100-9-78"]
    assert drained.states == ("IDLE", "DRAIN", "MAINTENANCE", "RESERVED") and not drained.schedulable
    assert drained.reason == "Prolog error: 571 xid 13 errors [root@2023-12-24T06:51:08]"
    assert [f for f, _ in unusable_flags("+".join(drained.states))] == ["DRAIN", "MAINTENANCE"]
    assert nodes["cluster-h100-9-79"].reason == "SAM [root@2023-12-25T03:52:00]"


def test_the_engine_fails_a_maintenance_node_with_the_flag_and_the_schedulers_reason():
    text = (SLURM / "slonk_h100_4nodes_drain_maintenance_reserved_23.11.txt").read_text()
    states = Slurm().inventory(["cluster-h100-9-75", "cluster-h100-9-78", "gpu99"], text)
    assert states["cluster-h100-9-75"].present and not states["cluster-h100-9-75"].schedulable
    assert states["cluster-h100-9-75"].state == "ALLOCATED+MAINTENANCE+RESERVED"
    assert states["cluster-h100-9-75"].reason == "MAINTENANCE: in a reservation with the maintenance flag"
    assert states["cluster-h100-9-78"].reason == (
        "Prolog error: 571 xid 13 errors [root@2023-12-24T06:51:08]; DRAIN: drained or draining: accepts no new "
        "jobs; MAINTENANCE: in a reservation with the maintenance flag")
    assert not states["gpu99"].present


def test_powered_down_static_node_on_parallelcluster_is_never_run_on_in_scontrol_or_sinfo():
    # gnosia93/slurm-on-aws: g7e.8xlarge (1 RTX PRO 6000 Server) static node being replaced.
    text = (SLURM / "pcluster_g7e_sinfo_scontrol_down_cloud_powered_down.txt").read_text()
    (node,) = parse_scontrol_nodes(text)
    assert (node.name, node.states, node.gpus, node.addr) == ("gpu-st-ml-1", ("DOWN", "CLOUD", "POWERED_DOWN"), 1,
                                                              "10.0.10.166")
    assert not node.schedulable
    assert "POWERED_DOWN: powered down and not capable of running any jobs" in (node.why_unschedulable or "")
    assert node.reason == "Static node maintenance: unhealthy node is being replaced [root@2026-03-13T04:18:07]"
    # the same node in sinfo -N, and the prompt line after the table is not read as a node
    sinfo = parse_sinfo_nodes(text)
    assert sinfo == {"gpu-st-ml-1": "down~", "gpu-st-ml-2": "down~"}
    assert [f for f, _ in unusable_flags(sinfo["gpu-st-ml-1"])] == ["DOWN", "POWERED_DOWN"]


def test_powered_down_idle_dynamic_node_is_never_run_on():
    # Azure/cyclecloud-slurm: Slurm 22.05.8 dynamic node, IDLE but powered down (sinfo would print idle~).
    nodes = _nodes("cyclecloud_22.05.8_dynamic_powered_down_and_powering_up.txt")
    node = nodes["s301-c7-dynamic-7"]
    assert node.states == ("IDLE", "DYNAMIC_NORM", "POWERED_DOWN") and node.version == "22.05.8"
    assert node.why_unschedulable == "POWERED_DOWN: powered down and not capable of running any jobs"
    waking = nodes["d1"]
    assert waking.states == ("IDLE", "CLOUD", "DYNAMIC_NORM", "NOT_RESPONDING", "POWERING_UP")
    assert [f for f, _ in unusable_flags("+".join(waking.states))] == ["NOT_RESPONDING", "POWERING_UP"]


def test_not_responding_idle_node_is_never_run_on():
    # OpenNebula/website: the Slurm worker as its guide shows it ("You should see output similar to the
    # following"): IDLE, but NOT_RESPONDING, SlurmdStartTime=None.
    (node,) = _nodes("opennebula_worker_idle_dynamic_norm_not_responding.txt").values()
    assert (node.name, node.addr, node.gpus) == ("slurm-one-worker-1", "10.0.1.101", None)
    assert node.states == ("IDLE", "DYNAMIC_NORM", "NOT_RESPONDING")
    assert not node.schedulable and node.why_unschedulable == "NOT_RESPONDING: not responding"


def test_down_cloud_node_not_responding_is_never_run_on():
    # aws-samples/aws-eda-slurm-cluster issue #55: an instance Slurm believes down, powered down, not responding.
    (node,) = _nodes("aws_eda_issue55_down_cloud_powered_down_not_responding.txt").values()
    assert node.states == ("DOWN", "CLOUD", "POWERED_DOWN", "NOT_RESPONDING") and node.addr == "10.0.99.184"
    assert [f for f, _ in unusable_flags("+".join(node.states))] == ["DOWN", "POWERED_DOWN", "NOT_RESPONDING"]


def test_invalid_registration_is_never_run_on():
    # CONSTRUCTED: no full real scontrol record with INVALID_REG was found (see SOURCES.md); the state words are
    # the ones Slurm prints (node_state_string_complete) and sinfo's `inval` (node_state_string_compact).
    (node,) = parse_scontrol_nodes("NodeName=g1 Arch=x86_64\n   Gres=gpu:8\n   State=IDLE+DRAIN+INVALID_REG "
                                   "ThreadsPerCore=1\n   Reason=gres/gpu count reported lower than configured (0 < 8)"
                                   " [slurm@2026-09-15T10:00:00]\n")
    assert not node.schedulable
    assert "INVALID_REG: did not register correctly" in (node.why_unschedulable or "")
    assert [f for f, _ in unusable_flags("inval")] == ["INVALID_REG"]


def test_a_real_invalid_registration_state_line_is_never_run_on():
    """The real `State=DOWN+INVALID_REG` and `Reason=` lines a controller printed for a node whose slurmd reported
    less memory than configured (an excerpt: the NodeName= line was not published, so the record as a whole is
    refused, and the state it carries refuses the node)."""
    text = (DATA / "slurm" / "l40_lab_down_invalid_reg_state_reason_excerpt.txt").read_text()
    state = text.splitlines()[0].partition("=")[2]
    assert state == "DOWN+INVALID_REG"
    assert [f for f, _ in unusable_flags(state)] == ["DOWN", "INVALID_REG"]
    with pytest.raises(ParseError, match="no NodeName= record"):
        parse_scontrol_nodes(text)
    (node,) = parse_scontrol_nodes("NodeName=l40-node-01\n" + text)  # the same lines under the node's name
    assert not node.schedulable and "INVALID_REG" in (node.why_unschedulable or "")
    assert (node.reason or "").startswith("Low socket*core*thread count, Low CPUs,")


@pytest.mark.parametrize("name, node, states, gpus", [
    ("pcluster_g7e_idle_cloud_running_24.11.7.txt", "gpu-st-ml-1", ("IDLE", "CLOUD"), 1),
    ("../fleet/scontrol_show_partition_and_node_a100_slurm24.11.txt", "amax-a100", ("IDLE",), 2),
    ("../fleet/slurm22.05_netns_sinfo_scontrol.txt", "h1", ("IDLE",), None),
])
def test_honest_running_nodes_stay_usable(name, node, states, gpus):
    # a running cloud node keeps CLOUD in its state (CPULoad 1.23, SlurmdStartTime set): CLOUD alone is no refusal
    record = _nodes(name)[node]
    assert (record.states, record.gpus) == (states, gpus)
    assert record.schedulable and record.why_unschedulable is None


@pytest.mark.parametrize("state, flags, refused", [
    # scontrol: BASE+FLAG... (node_state_string_complete)
    ("IDLE+MAINTENANCE+RESERVED", ("IDLE", "MAINTENANCE", "RESERVED"), ["MAINTENANCE"]),
    ("MIXED+PLANNED", ("MIXED", "PLANNED"), []),
    ("MIXED+RESERVED", ("MIXED", "RESERVED"), []),
    ("ALLOCATED+COMPLETING", ("ALLOCATED", "COMPLETING"), []),
    ("IDLE+CLOUD+POWER_DOWN+POWERED_DOWN", ("IDLE", "CLOUD", "POWER_DOWN", "POWERED_DOWN"),
     ["POWER_DOWN", "POWERED_DOWN"]),
    ("IDLE+POWERING_DOWN", ("IDLE", "POWERING_DOWN"), ["POWERING_DOWN"]),
    ("DOWN+REBOOT_ISSUED", ("DOWN", "REBOOT_ISSUED"), ["DOWN", "REBOOT_ISSUED"]),
    ("MIXED+REBOOT_REQUESTED", ("MIXED", "REBOOT_REQUESTED"), ["REBOOT_REQUESTED"]),
    ("IDLE+BLOCKED", ("IDLE", "BLOCKED"), ["BLOCKED"]),
    ("IDLE+PERFCTRS", ("IDLE", "PERFCTRS"), ["PERFCTRS"]),
    ("FUTURE+DYNAMIC_FUTURE", ("FUTURE", "DYNAMIC_FUTURE"), ["FUTURE", "DYNAMIC_FUTURE"]),
    ("UNKNOWN+NOT_RESPONDING", ("UNKNOWN", "NOT_RESPONDING"), ["UNKNOWN", "NOT_RESPONDING"]),
    ("MIXED+FAIL", ("MIXED", "FAIL"), ["FAIL"]),
    ("INVALID", ("INVALID",), ["INVALID"]),
    ("IDLE+?", ("IDLE", "?"), ["?"]),
    ("IDLE+SOMETHING_NEW", ("IDLE", "SOMETHING_NEW"), ["SOMETHING_NEW"]),
    # sinfo: one word (long or compact), lower case, one suffix character (sinfo(1) NODE STATE CODES)
    ("maint", ("MAINTENANCE",), ["MAINTENANCE"]),
    ("MAINT*", ("MAINTENANCE", "NOT_RESPONDING"), ["MAINTENANCE", "NOT_RESPONDING"]),
    ("idle$", ("IDLE", "MAINTENANCE"), ["MAINTENANCE"]),
    ("mix$", ("MIXED", "MAINTENANCE"), ["MAINTENANCE"]),
    ("idle~", ("IDLE", "POWERED_DOWN"), ["POWERED_DOWN"]),
    ("idle#", ("IDLE", "POWERING_UP"), ["POWERING_UP"]),
    ("idle!", ("IDLE", "POWER_DOWN"), ["POWER_DOWN"]),
    ("idle%", ("IDLE", "POWERING_DOWN"), ["POWERING_DOWN"]),
    ("alloc@", ("ALLOCATED", "REBOOT_REQUESTED"), ["REBOOT_REQUESTED"]),
    ("boot^", ("REBOOT_REQUESTED", "REBOOT_ISSUED"), ["REBOOT_REQUESTED", "REBOOT_ISSUED"]),
    ("idle*", ("IDLE", "NOT_RESPONDING"), ["NOT_RESPONDING"]),
    ("mixed-", ("MIXED", "PLANNED"), []),
    ("alloc+", ("ALLOCATED", "COMPLETING"), []),
    ("drng", ("DRAIN",), ["DRAIN"]),
    ("drained*", ("DRAIN", "NOT_RESPONDING"), ["DRAIN", "NOT_RESPONDING"]),
    ("failg", ("FAIL",), ["FAIL"]),
    ("inval", ("INVALID_REG",), ["INVALID_REG"]),
    ("futr", ("FUTURE",), ["FUTURE"]),
    ("unk*", ("UNKNOWN", "NOT_RESPONDING"), ["UNKNOWN", "NOT_RESPONDING"]),
    ("resv", ("IDLE", "RESERVED"), []),
    ("plnd", ("IDLE", "PLANNED"), []),
    ("block", ("IDLE", "BLOCKED"), ["BLOCKED"]),
    ("pow_dn", ("POWER_DOWN",), ["POWER_DOWN"]),
    ("powered_dn", ("POWERED_DOWN",), ["POWERED_DOWN"]),
    ("npc", ("PERFCTRS",), ["PERFCTRS"]),
    ("cloud", ("UNKNOWN", "CLOUD"), ["UNKNOWN"]),
    ("idle", ("IDLE",), []),
    ("comp", ("COMPLETING",), []),
])
def test_state_words_are_compared_as_flags(state, flags, refused):
    assert state_flags(state) == flags
    assert [f for f, _ in unusable_flags(state)] == refused


def test_a_state_with_nothing_a_job_could_run_in_is_refused():
    assert unusable_flags("") and unusable_flags("RESERVED+CLOUD")


def test_every_state_and_flag_slurm_22_05_to_24_11_prints_is_decided():
    # src/common/slurm_protocol_defs.c node_states[] and node_state_flags[] (slurm-22-05-11-1 to slurm-24-11-7-1;
    # PERFCTRS up to 23.11, BLOCKED from 24.05)
    printed = {"DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN", "BLOCKED", "CLOUD", "COMPLETING",
               "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "INVALID_REG", "FAIL", "MAINTENANCE", "POWER_DOWN",
               "POWER_UP", "PERFCTRS", "POWERED_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED", "RESUME",
               "NOT_RESPONDING", "PLANNED", "POWERING_UP", "POWERING_DOWN"}
    assert printed <= set(USABLE) | set(UNUSABLE)
    assert not set(USABLE) & set(UNUSABLE)
    for word in ("MAINTENANCE", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP", "INVALID_REG",
                 "NOT_RESPONDING", "DOWN", "DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED", "UNKNOWN", "FUTURE",
                 "BLOCKED"):
        assert word in UNUSABLE
