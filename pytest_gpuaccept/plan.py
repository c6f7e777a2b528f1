"""What a contract asks to be checked: its clauses and, per clause, the subjects to judge.

Pure functions of the contract (and of the names the host lists, for globbed clauses): collection
parametrizes from them and the verdict uses them to find what was asked for and never judged.
"""

from __future__ import annotations

from .checks import match_names
from .contract import Contract

# Every clause the format knows, in report order. A clause names the contract key it judges.
ALL_CLAUSES = (
    "gpus.count", "gpus.model", "gpus.memory", "gpus.driver", "gpus.cuda",
    "nvlink", "nvlink.links", "nvlink.errors",
    "allreduce", "nics", "rdma", "iperf3", "utilisation",
    "health.ecc", "health.row_remapping", "health.throttle", "health.pcie",
)


def present_clauses(contract: Contract) -> list[str]:
    """The clauses this contract has, each of which must produce at least one check."""
    present = []
    gpus = contract.gpus
    if gpus is not None:
        present += [f"gpus.{key}" for key in ("count", "model", "memory", "driver", "cuda")
                    if getattr(gpus, key) is not None]
    if contract.nvlink is not None:
        present.append("nvlink")
        if contract.nvlink.links_per_gpu is not None or contract.nvlink.link_speed is not None:
            present.append("nvlink.links")
        if contract.nvlink.errors_stable:
            present.append("nvlink.errors")
    present += [name for name in ("allreduce", "nics", "rdma", "iperf3", "utilisation")
                if getattr(contract, name) is not None]
    health = contract.health
    if health is not None:
        present += [f"health.{key}" for key in ("ecc", "row_remapping", "throttle") if getattr(health, key)]
        if health.pcie_gen is not None or health.pcie_width is not None:
            present.append("health.pcie")
    return present


def gpu_subjects(contract: Contract) -> list[str]:
    count = contract.gpus.count if contract.gpus is not None and contract.gpus.count is not None else 0
    return [f"GPU{i}" for i in range(count)]


def pair_subjects(contract: Contract) -> list[str]:
    count = len(gpu_subjects(contract))
    return [f"GPU{i}-GPU{j}" for i in range(count) for j in range(i + 1, count)]


def named_subjects(patterns: tuple[str, ...], available: list[str]) -> list[str]:
    """One subject per matching name; a pattern that matches nothing is a subject of its own (it fails)."""
    return [name if name is not None else pattern for pattern, name in match_names(patterns, available)]


def expected_checks(contract: Contract, interfaces: list[str], rdma_devices: list[str]) -> list[tuple[str, str]]:
    """(clause, subject) of every check the contract asks for on a host with these names."""
    per_gpu = {"gpus.model", "gpus.memory", "utilisation", "nvlink.links", "nvlink.errors",
               "health.ecc", "health.row_remapping", "health.throttle", "health.pcie"}
    expected: list[tuple[str, str]] = []
    for clause in present_clauses(contract):
        if clause in per_gpu:
            subjects = gpu_subjects(contract) or ["GPUs"]
        elif clause == "nvlink":
            subjects = pair_subjects(contract)
        elif clause == "allreduce":
            subjects = ["all_reduce"]
        elif clause == "nics":
            subjects = named_subjects(contract.nics.interfaces, interfaces)
        elif clause == "rdma":
            subjects = named_subjects(contract.rdma.devices, rdma_devices)
        elif clause == "iperf3":
            subjects = [contract.iperf3.server]
        else:
            subjects = ["host"]
        expected += [(clause, subject) for subject in subjects]
    return expected
