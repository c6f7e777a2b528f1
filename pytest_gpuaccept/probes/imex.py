"""nvidia-imex-ctl -N: the IMEX domain as one node's IMEX daemon sees it (the nodes it knows, each one's state, the
connection grid between them, the domain's state).

The text form is parsed, not `-j`: every real output of the tool found in public sources is the text one
(tests/data/nvl72), and its JSON keys are not published. Lines as IMEX 570 prints them:

    Node #0   - 172.31.48.81    - READY                - Version: 570.172
     Nodes From\\To  0   1
           0        C   C
    Domain State: UP

The connection grid's legend (printed by the tool): C connected, I invalid, N never connected, R recovering,
D disconnected, A authenticating, !V! version mismatch, !M! node map mismatch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import ParseError

TOOL = "nvidia-imex-ctl"
ARGS = ("-N",)
READY = "READY"
CONNECTED = "C"
UP = "UP"

_NODE = re.compile(r"^\s*Node\s+#(\d+)\s+-\s+(\S+)\s+-\s+([A-Z_]+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_GRID_HEAD = re.compile(r"^\s*Nodes\s+From\\To\s+(.*)$")
_DOMAIN = re.compile(r"^\s*Domain State:\s*(\S+)\s*$")
CELLS = {"C": "connected", "I": "invalid (not reachable)", "N": "never connected", "R": "recovering",
         "D": "disconnected", "A": "authenticating", "!V!": "version mismatch", "!M!": "node map mismatch"}


@dataclass(frozen=True, slots=True)
class ImexNode:
    index: int
    address: str
    status: str  # READY, or the daemon's other states (WAITING_FOR_PEERS, UNAVAILABLE, ...)
    version: str | None  # IMEX 570.00 printed none


@dataclass(frozen=True, slots=True)
class ImexDomain:
    nodes: tuple[ImexNode, ...]
    grid: dict[tuple[int, int], str]  # (from, to) -> the legend's letter
    state: str  # UP, DOWN, DEGRADED

    def by_address(self, address: str) -> ImexNode | None:
        return next((n for n in self.nodes if n.address == address), None)

    def bad_cells(self, index: int) -> list[tuple[int, int, str]]:
        """The connections from or to node `index` that are not connected: (from, to, letter)."""
        return [(a, b, cell) for (a, b), cell in sorted(self.grid.items())
                if index in (a, b) and a != b and cell != CONNECTED]


def parse_domain(text: str) -> ImexDomain:
    """`nvidia-imex-ctl -N`'s output; ParseError where it lists no node, has no domain state, or its grid does not
    cover every node listed."""
    nodes: list[ImexNode] = []
    grid: dict[tuple[int, int], str] = {}
    columns: list[int] | None = None
    state = None
    for line in text.splitlines():
        if (node := _NODE.match(line)) is not None:
            nodes.append(ImexNode(int(node.group(1)), node.group(2), node.group(3), node.group(4)))
        elif (head := _GRID_HEAD.match(line)) is not None:
            columns = [int(t) for t in head.group(1).split() if t.isdigit()]
        elif (domain := _DOMAIN.match(line)) is not None:
            state = domain.group(1)
        elif columns is not None and (tokens := line.split()) and tokens[0].isdigit():
            if len(tokens) - 1 != len(columns):
                raise ParseError("nvidia-imex-ctl", f"grid row {tokens[0]} has {len(tokens) - 1} cells for "
                                                    f"{len(columns)} columns: {line.strip()[:120]!r}")
            grid.update({(int(tokens[0]), to): cell for to, cell in zip(columns, tokens[1:])})
    if not nodes:
        raise ParseError("nvidia-imex-ctl", "no `Node #<n> - <address> - <state>` line")
    if state is None:
        raise ParseError("nvidia-imex-ctl", "no `Domain State:` line")
    indices = {n.index for n in nodes}
    if {a for a, _ in grid} != indices or {b for _, b in grid} != indices:
        raise ParseError("nvidia-imex-ctl", f"the connection grid does not cover the {len(nodes)} nodes listed")
    return ImexDomain(tuple(nodes), grid, state)
