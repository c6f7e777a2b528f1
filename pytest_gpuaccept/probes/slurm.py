"""Slurm as the cluster engine sees it: node records from `scontrol show node`, `sinfo -N -l` rows, the
GPUs a node offers (Gres, or gres/gpu in CfgTRES), and hostlist expressions (`gpu[01-16]`).

Pure parsers; the cluster engine runs the commands. A record that cannot be read with certainty is
refused (ParseError), never guessed: a node that is not read is a node that failed.
"""

from __future__ import annotations

import re

from ..records import record
from . import ParseError

TOOL = "scontrol"
_FIELD = re.compile(r"(\w+)=(\S*)")
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
BAD_STATES = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "MAINT", "REBOOT",
              "FUTURE", "POWERED_DOWN", "POWERING_DOWN", "UNKNOWN", "INVAL")


@record
class SlurmNode:
    name: str
    states: tuple[str, ...]  # IDLE, MIXED, DOWN+NOT_RESPONDING -> ("DOWN", "NOT_RESPONDING")
    gpus: int | None  # from Gres=, else CfgTRES gres/gpu=; None where the node declares none
    addr: str | None
    version: str | None
    reason: str | None

    @property
    def schedulable(self) -> bool:
        return not any(state.rstrip("*~#!%$@^-") in BAD_STATES for state in self.states)


def gpu_count(gres: str | None) -> int | None:
    """`gpu:nvidia_a100_80gb_pcie:2` -> 2, `gpu:4(S:0-1)` -> 4, several entries summed; `(null)` -> None."""
    if not gres or gres == "(null)":
        return None
    found = [int(n) for n in _GRES_GPU.findall(re.sub(r"\([^)]*\)", "", gres))]
    return sum(found) if found else None


def tres_gpus(tres: str | None) -> int | None:
    """`cpu=32,mem=250G,billing=154,gres/gpu=4` -> 4."""
    found = _TRES_GPU.findall(tres or "")
    return int(found[0]) if found else None


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """Every `NodeName=` record of `scontrol show node` (any number; partition records around them ignored)."""
    records: list[dict[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("NodeName="):
            records.append({})
        elif stripped.startswith("PartitionName="):
            records.append({"_partition": "1"})
        if not records or "_partition" in records[-1]:
            continue
        if stripped.startswith("Reason="):
            records[-1]["Reason"] = stripped.partition("=")[2]
            continue
        for key, value in _FIELD.findall(stripped):
            records[-1].setdefault(key, value)
    nodes = []
    for node in (r for r in records if "_partition" not in r):
        if "State" not in node:
            raise ParseError(TOOL, f"node record {node.get('NodeName')!r} has no State=")
        gpus = gpu_count(node.get("Gres"))
        nodes.append(SlurmNode(node["NodeName"], tuple(node["State"].split("+")),
                               gpus if gpus is not None else tres_gpus(node.get("CfgTRES")),
                               node.get("NodeAddr"), node.get("Version"), node.get("Reason")))
    if not nodes:
        raise ParseError(TOOL, "no NodeName= record in the output")
    return nodes


def parse_sinfo_nodes(text: str) -> dict[str, str]:
    """`sinfo -N -l` (or `sinfo -N`): node -> state, from the table under its NODELIST header."""
    states: dict[str, str] = {}
    columns: list[str] | None = None
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "NODELIST":
            columns = tokens
            continue
        if columns is not None and len(tokens) >= columns.index("STATE") + 1 and not tokens[0].startswith("$"):
            states[tokens[0]] = tokens[columns.index("STATE")]
        elif columns is not None:
            columns = None  # the table ended (another command's output follows)
    if not states:
        raise ParseError("sinfo", "no NODELIST ... STATE table in the output")
    return states


def expand_hostlist(expression: str) -> list[str]:
    """Slurm hostlist expressions: `gpu[01-03,07]` -> gpu01 gpu02 gpu03 gpu07; `a[1-2]-b[1-2]` -> 4 names;
    `h1,h2` -> h1 h2. Zero padding follows the range's start."""
    names: list[str] = []
    part, depth = "", 0
    for char in expression + ",":
        if char == "," and depth == 0:
            names += [name for name in _expand_one(part.strip()) if name]
            part = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        part += char
    if depth:
        raise ValueError(f"hostlist {expression!r}: unbalanced brackets")
    return names


def _expand_one(part: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", part)
    if match is None:
        return [part]
    head, tail = part[:match.start()], part[match.end():]
    out = []
    for item in match.group(1).split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"hostlist {part!r}: {item!r} is not a number or a range")
        for n in range(int(low), int(high or low) + 1):
            out += [head + str(n).zfill(len(low)) + rest for rest in _expand_one(tail)]
    return out
