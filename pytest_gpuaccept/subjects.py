"""Typed subjects: what one check judges (a GPU, a pair, a name, the host), and on which host.

A Subject is the parametrize value itself. `str(subject)` is the test id, the results `subject` and the
report cell, so the three cannot disagree. The host part is empty on the local host; a node of a
cluster prefixes it (`node07/GPU3`) without any clause knowing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

# Names from the host that may appear unescaped in a test id (pytest-html shows ids as HTML).
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:*?\[\]+-]+$")  # + joins a pair of cluster nodes (h1+h2)


class Kind(str, Enum):
    """What a subject is; each kind formats its local part one way."""

    HOST = "host"  # the host as a whole, or one thing of it named by `label` (all_reduce, an iperf3 server)
    GPU = "gpu"
    ALL_GPUS = "all_gpus"  # a per-GPU clause without gpus.count: every GPU found, judged at once
    PAIR = "pair"  # unordered, i < j
    ORDERED_PAIR = "ordered_pair"  # i -> j: data moving from GPU i to GPU j
    BOTH_WAYS = "both_ways"  # i <-> j, i < j: both directions at once
    NAME = "name"  # a name the host lists (interface, RDMA device), or the pattern that matched none
    GPU_TEST = "gpu_test"  # one test a tool ran on one GPU (DCGM's): GPU0/memory


@dataclass(frozen=True, slots=True, order=True)
class Host:
    """Where a subject lives: '' is the host this run is on; a node name in a cluster run."""

    name: str = ""

    def __str__(self) -> str:
        return self.name or "local"


LOCAL = Host()


@dataclass(frozen=True, slots=True)
class Subject:
    kind: Kind
    host: Host = LOCAL
    gpu: int | None = None
    peer: int | None = None
    name: str | None = None  # NAME: the matched name (None: the pattern matched nothing); HOST: the label
    pattern: str | None = None  # NAME: the contract's name or glob
    aspect: str | None = None  # GPU: one aspect of it measured apart (h2d, d2h): GPU0:h2d

    # ---------------------------------------------------------------- constructors

    @classmethod
    def whole(cls, label: str = "host") -> Subject:
        return cls(Kind.HOST, name=label)

    @classmethod
    def of_gpu(cls, index: int, aspect: str | None = None) -> Subject:
        return cls(Kind.GPU, gpu=index, aspect=aspect)

    @classmethod
    def gpu_test(cls, index: int, test: str) -> Subject:
        return cls(Kind.GPU_TEST, gpu=index, aspect=test)

    @classmethod
    def all_gpus(cls) -> Subject:
        return cls(Kind.ALL_GPUS)

    @classmethod
    def pair(cls, i: int, j: int) -> Subject:
        return cls(Kind.PAIR, gpu=min(i, j), peer=max(i, j))

    @classmethod
    def ordered(cls, i: int, j: int) -> Subject:
        return cls(Kind.ORDERED_PAIR, gpu=i, peer=j)

    @classmethod
    def both_ways(cls, i: int, j: int) -> Subject:
        return cls(Kind.BOTH_WAYS, gpu=min(i, j), peer=max(i, j))

    @classmethod
    def named(cls, pattern: str, name: str | None) -> Subject:
        return cls(Kind.NAME, name=name, pattern=pattern)

    def on(self, host: Host) -> Subject:
        """The same subject on another host (a node of a cluster)."""
        return replace(self, host=host)

    # ---------------------------------------------------------------- formatting

    @property
    def local(self) -> str:
        """The subject without its host: GPU3, GPU0-GPU1, GPU0->GPU1, ens1f0, host."""
        if self.kind is Kind.GPU:
            return f"GPU{self.gpu}" + (f":{self.aspect}" if self.aspect else "")
        if self.kind is Kind.GPU_TEST:
            return f"GPU{self.gpu}/{self.aspect}"
        if self.kind is Kind.ALL_GPUS:
            return "GPUs"
        if self.kind is Kind.PAIR:
            return f"GPU{self.gpu}-GPU{self.peer}"
        if self.kind is Kind.ORDERED_PAIR:
            return f"GPU{self.gpu}->GPU{self.peer}"
        if self.kind is Kind.BOTH_WAYS:
            return f"GPU{self.gpu}<->GPU{self.peer}"
        if self.kind is Kind.NAME:
            return self.name if self.name is not None else str(self.pattern)
        return self.name or "host"

    def __str__(self) -> str:
        return f"{self.host.name}/{self.local}" if self.host.name else self.local

    @property
    def id(self) -> str:
        """The test id: str(self), or hex where a host-given name could smuggle markup into the report."""
        text = str(self)
        given = [self.host.name, self.name or "", self.pattern or "", self.aspect or ""]  # text from outside
        return text if all(_SAFE_ID.match(part) for part in given if part) else "unsafe-" + text.encode().hex()[:40]

    @property
    def matched(self) -> bool:
        """False for a contract name or glob that matched nothing on the host (it fails)."""
        return self.kind is not Kind.NAME or self.name is not None


def gpu_count(contract: Any) -> int:
    """The GPUs a contract's `gpus.count` names (0 where it names none): GPU0..GPU<count-1> are its subjects. Here,
    below the clauses and the engines that both ask, so that neither imports the other for it."""
    gpus = contract.by_section.get("gpus")
    count = getattr(gpus, "count", None)
    return count if isinstance(count, int) else 0
