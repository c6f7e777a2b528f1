"""The fabric between a cluster's nodes, from its RDMA links' figures (pure): which device or link a failing link
blames, and each rail's rate under full load against its rate alone.

A link is one direction from a node's device to another node's (`h1:mlx5_0->h2:mlx5_0`). Its figure is the one it
carried without the fabric's contention: a link slow in its loaded round is measured again alone, and judged on that;
its loaded figure feeds the fabric's ratio. Blame reads the links as pairs of endpoints (`h3:mlx5_2`), as
cluster/pairs.py reads pairs of nodes: an endpoint failing with most of its partners is that node's NIC, cable or
switch port; a failing link no such endpoint explains is that link; links slow only together blame no one here:
cluster.fabric judges them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from .pairs import Blame, blame

Endpoint = tuple[str, str]  # (node, device)


@dataclass(frozen=True, slots=True)
class Measured:
    """One ib_write_bw run of a link: the client's figure, what the ports' counters said of it, or why nothing."""

    gbit_s: float | None  # the client's BW average (Gb/s); None where there is no figure
    problem: str | None = None  # not measured: the tool failed, the counters or the peer say it measured something else
    refuted: str | None = None  # a second source refutes the figure: the check fails with this
    counted_gbit_s: float | None = None  # the sender's counter over the plugin's clock
    shown: str = ""  # beside a believed figure: what the second sources said
    details: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()

    def passes(self, minimum: float) -> bool:
        return self.problem is None and self.refuted is None and self.gbit_s is not None and self.gbit_s >= minimum

    @property
    def figure(self) -> float | None:
        """The figure a fabric's ratio reads: the client's, where nothing refuted or voided it."""
        return self.gbit_s if self.problem is None and self.refuted is None else None


@dataclass(frozen=True, slots=True)
class RdmaLink:
    """One direction of one link, in its round (every rail of every pair of the round at once) and, where it came out
    slow there, alone."""

    sender: Endpoint
    receiver: Endpoint
    round: int
    line_rate_gbit_s: float | None
    line_rate_source: str
    loaded: Measured
    alone: Measured | None = None

    @property
    def name(self) -> str:
        return link_name(self.sender, self.receiver)

    @property
    def judged(self) -> Measured:
        """What the link's check is judged on: its run alone where it had one, else its round's."""
        return self.alone if self.alone is not None else self.loaded


def directions(a: str, b: str, devices: list[str] | tuple[str, ...], k: int) -> list[tuple[Endpoint, Endpoint]]:
    """The links of pair (a, b) in the step with device offset k: a's i-th device to b's (i+k)-th, and b's i-th to
    a's (i+k)-th (k = 0: rail to rail; `pairing: all` takes every k). Each device sends once and receives once."""
    count = len(devices)
    return [((x, devices[i]), (y, devices[(i + k) % count])) for x, y in ((a, b), (b, a)) for i in range(count)]


def offsets(devices: list[str] | tuple[str, ...], pairing: str) -> range:
    """The device offsets a pair's steps take: rail, 0 alone; all, every one (every device pair, each in one step)."""
    return range(len(devices)) if pairing == "all" else range(1)


def link_name(sender: Endpoint, receiver: Endpoint) -> str:
    return f"{sender[0]}:{sender[1]}->{receiver[0]}:{receiver[1]}"


def endpoint_name(end: Endpoint) -> str:
    return f"{end[0]}:{end[1]}"


@dataclass(frozen=True, slots=True)
class RailLoad:
    """A rail's figures alone and with every rail of every node loaded at once (the cross-halves permutation)."""

    device: str
    alone: tuple[tuple[str, float], ...]  # (link, Gb/s)
    loaded: tuple[tuple[str, float], ...]
    problems: tuple[str, ...] = ()  # links of the loaded round with no figure, and why

    @property
    def alone_gbit_s(self) -> float | None:
        return statistics.median(f for _n, f in self.alone) if self.alone else None

    @property
    def loaded_gbit_s(self) -> float | None:
        return statistics.median(f for _n, f in self.loaded) if self.loaded else None

    @property
    def ratio(self) -> float | None:
        """The median link's rate loaded over the median link's rate alone: the rail's effective share of the
        fabric under full load (1.0: non-blocking; 0.5: a 2:1 oversubscription)."""
        alone, loaded = self.alone_gbit_s, self.loaded_gbit_s
        return None if alone is None or loaded is None or alone <= 0 else loaded / alone


@dataclass(frozen=True, slots=True)
class RdmaRuns:
    """cluster.links.rdma and cluster.fabric: every link by name, the blame, and each rail under load."""

    links: dict[str, RdmaLink]
    minimum: dict[str, float] = field(default_factory=dict)  # link -> the Gb/s it must carry (fraction x line rate)
    blame: Blame = field(default_factory=lambda: blame({}))
    rails: dict[str, RailLoad] = field(default_factory=dict)
    cross_halves: tuple[tuple[str, str], ...] = ()
    error: str | None = None
    evidence: tuple[str, ...] = ()
    partners: dict[str, tuple[int, int]] = field(default_factory=dict)  # endpoint -> (failing partners, partners)

    def word(self, link: RdmaLink) -> str:
        """Whom a failing link blames, in words: its device that fails with most partners, or the link itself."""
        ends = [e for e in (link.sender, link.receiver) if endpoint_name(e) in self.blame.bad_nodes]
        if ends:
            said = []
            for node, device in ends:
                failed, met = self.partners.get(endpoint_name((node, device)), (0, 0))
                said.append(f"{node}'s {device} fails with {failed} of {met} partners (that node's NIC, cable or "
                            f"switch port)")
            return "; ".join(said)
        return (f"the link {endpoint_name(link.sender)} - {endpoint_name(link.receiver)} itself: both ends pass with "
                "every other partner")


def blamed(links: dict[str, RdmaLink], minimum: dict[str, float]) -> tuple[Blame, dict[str, tuple[int, int]]]:
    """The blame the links' judged figures put on endpoints and links (pairs.blame over endpoints: an endpoint failing
    with more than half of its partners, and at least two, is bad); a link with no figure blames no one. With each
    endpoint's (failing partners, partners)."""
    passed: dict[tuple[str, str], bool] = {}
    for link in links.values():
        judged = link.judged
        if judged.problem is not None:
            continue
        key = (endpoint_name(link.sender), endpoint_name(link.receiver))
        ordered = key if key[0] <= key[1] else (key[1], key[0])
        passed[ordered] = passed.get(ordered, True) and judged.passes(minimum.get(link.name, 0.0))
    partners: dict[str, list[bool]] = {}
    for (a, b), ok in passed.items():
        partners.setdefault(a, []).append(ok)
        partners.setdefault(b, []).append(ok)
    counts = {end: (oks.count(False), len(oks)) for end, oks in partners.items()}
    return blame(passed), counts


def rail_loads(devices: list[str], alone: dict[str, Measured], loaded: dict[str, Measured],
               excluded: set[str]) -> dict[str, RailLoad]:
    """Each rail (the sender's device) from the links measured alone (`alone`, by name) and the links of the loaded
    round (`loaded`, by name); a link in `excluded` (a blamed device's or link's) is left out of both: a bad port is
    no measure of the fabric."""
    def sender_device(name: str) -> str:
        return name.split("->")[0].split(":", 1)[1]

    out = {}
    for device in devices:
        mine = [(name, m) for name, m in sorted(alone.items()) if sender_device(name) == device and name not in excluded]
        loaded_here = [(name, m) for name, m in sorted(loaded.items()) if sender_device(name) == device]
        out[device] = RailLoad(
            device, tuple((name, m.figure) for name, m in mine if m.figure is not None),
            tuple((name, m.figure) for name, m in loaded_here if m.figure is not None and name not in excluded),
            tuple(f"{name}: {m.problem or m.refuted}" for name, m in loaded_here if m.figure is None))
    return out


def excluded_names(names: list[str], found: Blame) -> set[str]:
    """The links (by name) a blamed endpoint or link takes part in: left out of the fabric's figures."""
    bad_ends = set(found.bad_nodes)
    bad_pairs = {frozenset(p) for p in found.bad_links}
    out = set()
    for name in names:
        a, _, b = name.partition("->")
        if a in bad_ends or b in bad_ends or frozenset((a, b)) in bad_pairs:
            out.add(name)
    return out
