"""Warnings about a contract, at load: thresholds far below the published figures, a `model` that names no
known GPU or any GPU, `min_links: 1` on an NVSwitch model. Never failures: the contract stays the buyer's
word; the terminal and the report say what looks like a mistake."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from ..models import all_models, matching
from . import allreduce, gpus, memory_bandwidth, nvlink, p2p

if TYPE_CHECKING:
    from ..contract import Contract

FAR_BELOW = 0.25  # a threshold under a quarter of the published figure is probably a unit mistake
_ANY_GPU = {"nvidia", "gpu", "tesla", "geforce", "rtx", "a", "h"}


def advise(contract: Contract) -> list[str]:
    gpus_section = gpus.SECTION.get(contract)
    model_text = gpus_section.model if gpus_section is not None else None
    found: list[str] = []
    models = matching(model_text) if model_text else []
    if model_text and model_text.strip().lower() in _ANY_GPU:
        found.append(f"gpus.model {model_text!r} matches almost any NVIDIA GPU: name the model that was sold")
    elif model_text and not models:
        names = [m.name for m in all_models()]
        near = difflib.get_close_matches(model_text, names, n=3, cutoff=0.3)
        found.append(f"gpus.model {model_text!r} names no GPU in the model table"
                     + (f" (nearest: {', '.join(near)})" if near else ""))
    # The figures below are judged against the slowest model the name could mean.
    if not models:
        return found
    nvlink_gbyte_s = min((m.nvlink_gbyte_s or 0) for m in models)
    links = min(m.nvlink_links for m in models)
    memory = min(m.memory_bandwidth_gbyte_s or 0 for m in models)  # 0: one of them has none published
    name = " / ".join(sorted({m.name for m in models}))
    links_section = nvlink.SECTION.get(contract)
    if links_section is not None and links >= 12 and links_section.min_links == 1:
        found.append(f"nvlink.min_links is 1 on {name}, which has {links} NVLinks per GPU: any one link would pass")
    reduce, pairs, local = (allreduce.SECTION.get(contract), p2p.SECTION.get(contract),
                            memory_bandwidth.SECTION.get(contract))
    checks = [("allreduce.min_busbw", reduce.min_busbw if reduce else None, nvlink_gbyte_s / 2, "NVLink one way"),
              ("p2p.min_bandwidth", pairs.min_bandwidth if pairs else None, nvlink_gbyte_s / 2, "NVLink one way"),
              ("memory_bandwidth.min_bandwidth", local.min_bandwidth if local else None, memory, "memory bandwidth")]
    for key, threshold, published, what in checks:
        if threshold is not None and published and threshold.gbyte_s < FAR_BELOW * published:
            found.append(f"{key} {threshold} is {threshold.gbyte_s:g} GB/s, {threshold.gbyte_s / published:.0%} of the "
                         f"published {published:g} GB/s of {name} ({what}): a unit mistake (Gb/s for GB/s)?")
    return found
