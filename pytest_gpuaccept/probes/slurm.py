"""Slurm as the cluster engine sees it: node records from `scontrol show node`, `sinfo -N -l` rows, the
GPUs a node offers (Gres, or gres/gpu in CfgTRES), and hostlist expressions (`gpu[01-16]`).

Pure parsers; the cluster engine runs the commands. A record that cannot be read with certainty is
refused (ParseError), never guessed: a node that is not read is a node that failed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import ParseError

TOOL = "scontrol"
_FIELD = re.compile(r"(\w+)=(\S*)")
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
# What a node's state words mean for a run, decided flag by flag from the Slurm 22.05-24.11 man pages (scontrol(1)
# "State", sinfo(1) "NODE STATE CODES") and the code that prints them (src/common/slurm_protocol_defs.c:
# scontrol prints BASE+FLAG+FLAG, node_state_string_complete; sinfo prints one lower-case word, long or compact,
# with at most one suffix character). A node whose state carries any word of UNUSABLE, or a word in neither
# table, is never run on; the reason names the word.
USABLE = {
    "IDLE": "not allocated to any jobs and available for use",
    "MIXED": "some of its CPUs allocated, others idle",
    "ALLOCATED": "allocated to jobs: an exclusive step waits for them to end",
    "COMPLETING": "its jobs are completing: an exclusive step waits for them to end",
    "PLANNED": "earmarked by the backfill scheduler for a later job: an exclusive step waits its turn",
    "RESERVED": "in an advanced reservation (a maintenance one also carries MAINTENANCE, which is refused)",
    "CLOUD": "a cloud node; whether it is up is said by POWERED_DOWN / POWERING_UP / POWER_*, which are refused",
    "DYNAMIC_NORM": "a dynamic node registered by its slurmd (slurmd -Z)",
}
UNUSABLE = {
    "DOWN": "unavailable for use",
    "ERROR": "in an error state",
    "FUTURE": "not fully configured, expected at some point in the future",
    "UNKNOWN": "its state has not been determined yet",
    "INVALID": "a base state the scheduler itself cannot name",
    "DRAIN": "drained or draining: accepts no new jobs",
    "FAIL": "expected to fail soon, unavailable per administrator request",
    "INVALID_REG": "did not register correctly with the controller (fewer resources than configured)",
    "MAINTENANCE": "in a reservation with the maintenance flag",
    "NOT_RESPONDING": "not responding",
    "POWER_DOWN": "pending power down",
    "POWER_UP": "a power up was requested: not up yet",
    "POWERED_DOWN": "powered down and not capable of running any jobs",
    "POWERING_DOWN": "powering down and not capable of running any jobs",
    "POWERING_UP": "being powered up or configured",
    "REBOOT_REQUESTED": "a reboot was requested",
    "REBOOT_ISSUED": "a reboot was issued",
    "BLOCKED": "blocked by an exclusive topology job",
    "PERFCTRS": "its network performance counters are in use, not usable for any other jobs",
    "DYNAMIC_FUTURE": "a dynamic future node that has not registered",
    "RESUME": "a resume request not yet carried out",
    "?": "carries a flag the scheduler itself cannot name",
}
# sinfo's suffix characters (sinfo(1) NODE STATE CODES); `+` after ALLOCATED/ALLOC is COMPLETING.
SUFFIXES = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "!": "POWER_DOWN", "%": "POWERING_DOWN",
            "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED", "-": "PLANNED"}
# sinfo's words (node_state_string and node_state_string_compact) that are not scontrol's names.
_SINFO_WORDS: dict[str, tuple[str, ...]] = {
    "ALLOC": ("ALLOCATED",), "MIX": ("MIXED",), "COMP": ("COMPLETING",), "FUTR": ("FUTURE",), "UNK": ("UNKNOWN",),
    "RESV": ("IDLE", "RESERVED"), "PLND": ("IDLE", "PLANNED"), "BLOCK": ("IDLE", "BLOCKED"),
    "DRAINED": ("DRAIN",), "DRAINING": ("DRAIN",), "DRNG": ("DRAIN",), "FAILING": ("FAIL",), "FAILG": ("FAIL",),
    "MAINT": ("MAINTENANCE",), "INVAL": ("INVALID_REG",), "REBOOT": ("REBOOT_REQUESTED",),
    "BOOT": ("REBOOT_REQUESTED",), "POW_DN": ("POWER_DOWN",), "POW_UP": ("POWER_UP",),
    "POWRING_DN": ("POWERING_DOWN",), "POWERED_DN": ("POWERED_DOWN",), "NPC": ("PERFCTRS",), "RESM": ("RESUME",),
}
# Words that are scontrol flags but, printed alone by sinfo, name a base state with that flag (node_state_string:
# RESERVED, BLOCKED, PLANNED are IDLE nodes; CLOUD alone has no base, i.e. UNKNOWN).
_SINFO_ALONE = {"RESERVED": ("IDLE", "RESERVED"), "PLANNED": ("IDLE", "PLANNED"), "BLOCKED": ("IDLE", "BLOCKED"),
                "CLOUD": ("UNKNOWN", "CLOUD")}
_BASES = ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")


def state_flags(state: str) -> tuple[str, ...]:
    """Every word a state carries, in scontrol's names: `IDLE+MAINTENANCE+RESERVED` -> the three; sinfo's
    `maint` -> MAINTENANCE, `idle~` -> IDLE POWERED_DOWN, `alloc+` -> ALLOCATED COMPLETING, `drng*` -> DRAIN
    NOT_RESPONDING. An empty state or word stays as an unknown word."""
    text, words, completing = state.strip(), [], state.strip().endswith("+")
    tokens = (text[:-1] if completing else text).split("+")
    for token in tokens:
        suffixes: list[str] = []
        while len(token) > 1 and token[-1] in SUFFIXES:
            token, suffixes = token[:-1], [SUFFIXES[token[-1]], *suffixes]
        name = token.upper()
        alone = _SINFO_ALONE.get(name) if len(tokens) == 1 else None
        words += [*(alone or _SINFO_WORDS.get(name, (name,))), *suffixes]
    return tuple(dict.fromkeys(words + ["COMPLETING"] * completing))


def unusable_flags(state: str) -> tuple[tuple[str, str], ...]:
    """The words of a state that forbid running on the node, each with the man page's reason; a word in neither
    table, or a state with no base the node could run in, is refused too (fail closed)."""
    flags = state_flags(state)
    found = [(f, UNUSABLE[f]) for f in flags if f in UNUSABLE]
    found += [(f, "a state word the Slurm 22.05-24.11 man pages do not define") for f in flags
              if f not in UNUSABLE and f not in USABLE]
    if not found and not any(f in _BASES for f in flags):
        found.append((state, "no base state a job could run in (IDLE, MIXED, ALLOCATED, COMPLETING)"))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    states: tuple[str, ...]  # IDLE, MIXED, DOWN+NOT_RESPONDING -> ("DOWN", "NOT_RESPONDING")
    gpus: int | None  # from Gres=, else CfgTRES gres/gpu=; None where the node declares none
    addr: str | None
    version: str | None
    reason: str | None

    @property
    def schedulable(self) -> bool:
        return not unusable_flags("+".join(self.states))

    @property
    def why_unschedulable(self) -> str | None:
        """`MAINTENANCE: in a reservation with the maintenance flag`, one clause per word; None when usable."""
        found = unusable_flags("+".join(self.states))
        return "; ".join(f"{flag}: {why}" for flag, why in found) or None


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
    """`sinfo -N -l` (or `sinfo -N`): node -> state as printed (`idle`, `down~`; read it with state_flags), from
    the table under its NODELIST header; the table ends at a row whose NODES is not a count (a prompt line)."""
    states: dict[str, str] = {}
    columns: list[str] | None = None
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "NODELIST":
            columns = tokens
            continue
        if columns is not None and len(tokens) >= columns.index("STATE") + 1 and not tokens[0].startswith("$") \
                and ("NODES" not in columns or tokens[columns.index("NODES")].isdigit()):
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
