"""The published figures of GPU models, keyed by PCI device ID: data in gpus.json, each with its sources."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Model:
    device_id: str  # 4 hex digits, lower case, no 0x
    name: str
    form_factor: str  # sxm | pcie | nvl | superchip (GH200, GB200, GB300: the GPU of a CPU-GPU module)
    memory_gb: tuple[float, ...]  # one size, or each size the cards sharing this device ID come in
    memory_bandwidth_gbyte_s: float | None  # None: not published for this device ID
    tflops: dict[str, float]  # dense peaks by dtype; a dtype without a published figure is absent
    nvlink_gbyte_s: float | None  # both directions, per GPU; None where the model has no NVLink
    nvlink_links: int  # NVLinks per GPU (0: none, or a bridge)
    pcie_gen: int | None  # None: the GPU has no PCIe link of its own to publish (a superchip), or none published
    tdp_w: float | None  # None: not published as one figure (configurable, or shared by several cards)
    sources: tuple[str, ...]
    nvml_name: str = ""  # how NVML names it: only to recognise a contract's `model`
    nvlink_bridge_gbyte_s: float | None = None  # an NVLink bridge between card pairs (PCIe and NVL cards)
    boost_clock_mhz: float | None = None
    nvml_names: tuple[str, ...] = ()  # the other names NVIDIA gives this device ID (by subsystem: A16 and A2)
    # The NVSwitches of the model's 8-GPU baseboard: their PCI device IDs, how many, and whether they reduce in
    # the switch (NVLink SHARP, NCCL's NVLS); () / None where the table does not know them
    nvswitch_ids: tuple[str, ...] = ()
    nvswitch_count: int | None = None
    nvswitch_nvls: bool = False
    # The GPU temperature at which the GPU begins its hardware slowdown, where a source publishes it (burnin.temperature
    # sets NVML's threshold beside it); None where the table has none, never guessed
    slowdown_temp_c: float | None = None
    # What one NVLink carries each way, GB/s (gpus.json `nvlink.link_gbyte_s`): the rate every NVLink cap multiplies
    # NVML's active link count by; None where the model has no NVLink of its own
    nvlink_link_gbyte_s: float | None = None
    # A configurable-TDP card's lowest published TDP (H100 NVL: 350-400 W): tdp_w is the highest; None: one figure
    tdp_min_w: float | None = None

    @property
    def published_tdp(self) -> str:
        """The published TDP as a person reads it: "700 W", or a configurable card's range "350-400 W"."""
        low = f"{self.tdp_min_w:g}-" if self.tdp_min_w else ""
        return f"{low}{self.tdp_w:g} W" if self.tdp_w else ""

    @property
    def has_nvlink(self) -> bool:
        return bool(self.nvlink_links or self.nvlink_bridge_gbyte_s)

    @property
    def per_link_gbyte_s(self) -> float | None:
        """One NVLink's rate each way: the table's per-link figure, else the both-ways figure over the links."""
        if self.nvlink_link_gbyte_s:
            return self.nvlink_link_gbyte_s
        return self.nvlink_gbyte_s / self.nvlink_links / 2 if self.nvlink_gbyte_s and self.nvlink_links else None


TABLE_FILE = "pytest_gpuaccept/models/gpus.json"


def not_in_table(device_id: str | None) -> str:
    """Why a figure of the table is missing for a device ID, and what to do: the message of every clause that
    needs a published figure of a GPU whose PCI device ID the table lacks."""
    if not device_id:
        return "PCI device ID could not be read from sysfs, so no published figure can be looked up"
    return f"device ID 0x{device_id.lower().removeprefix('0x')} is not in the model table ({TABLE_FILE}): add it"


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "gpus.json").read_text())
    return data


def by_device_id(device_id: str) -> Model | None:
    """The model of a PCI device ID (`0x2330`, `2330`), or None where the table does not know it."""
    key = device_id.lower().removeprefix("0x")
    entry = _table()["models"].get(key)
    if entry is None:
        return None
    sources = _table()["_sources"]
    memory = entry["memory_gb"]
    switch = entry.get("nvswitch", {})
    return Model(key, entry["name"], entry["form_factor"], tuple(memory if isinstance(memory, list) else [memory]),
                 entry["memory_bandwidth_gbyte_s"], dict(entry["tflops"]), entry["nvlink"].get("gbyte_s"),
                 entry["nvlink"].get("links", 0), entry["pcie_gen"], entry["tdp_w"],
                 tuple(sources[s] for s in entry["sources"]), entry.get("nvml_name", ""),
                 entry["nvlink"].get("bridge_gbyte_s"), entry.get("boost_clock_mhz"), tuple(entry.get("nvml_names", ())),
                 tuple(switch.get("device_ids", ())), switch.get("count"), bool(switch.get("nvls", False)),
                 entry.get("slowdown_temp_c"), nvlink_link_gbyte_s=entry["nvlink"].get("link_gbyte_s"),
                 tdp_min_w=entry.get("tdp_min_w"))


# PCIe x16 bandwidth in one direction after line encoding, GB/s: what "x % of published" means for a host link.
PCIE_X16_GBYTE_S: dict[int | None, float] = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}


def fraction_note(measured: float, published: float | None, what: str) -> tuple[dict[str, Any], str]:
    """(details, message suffix) for a measured figure against a published one; empty where none is known."""
    if not published:
        return {}, ""
    fraction = measured / published
    return ({"fraction_of_published": round(fraction, 4), "published": f"{published:g} GB/s ({what})"},
            f"; {fraction:.0%} of the published {published:g} GB/s ({what})")


def all_models() -> list[Model]:
    return [m for key in _table()["models"] if (m := by_device_id(key)) is not None]


def names(model: Model, name: str) -> bool:
    """Whether `name` names this model: its marketing name (or a name NVML gives it) contains it, or the reverse
    (case, spaces and dashes ignored, a leading "NVIDIA" too): "H100 SXM5" names "H100 SXM5 80GB"."""
    wanted = _squash(name)
    return bool(wanted) and any(wanted in _squash(known) or _squash(known) in wanted
                                for known in (model.name, model.nvml_name, *model.nvml_names) if known)


def answers_to(model: Model, nvml_name: str) -> bool:
    """Whether NVML's name for a GPU is one its device ID is given: equal (case, spaces, dashes and a leading
    NVIDIA or Tesla ignored) to a name NVIDIA gives that ID, or to the table's name. Stricter than `names`,
    which lets a contract's "H100" name an H100 SXM5: an L40 (0x26b5) that NVML calls "NVIDIA L40S" is renamed."""
    if not model.nvml_name:
        return names(model, nvml_name)
    wanted = _squash(nvml_name)
    return any(wanted == _squash(known) for known in (model.name, model.nvml_name, *model.nvml_names) if known)


# A vGPU guest's NVML name is its profile: `GRID V100D-8C`, `NVIDIA A100-40C`, `GRID T4-16Q`: the board (letters
# and digits, an `S` that is part of the board's name as in V100S or L40S, then the vGPU manager's variant letters
# such as D, X, DX, XM, L), a dash, the frame buffer in GB and the series letter (A, B, C, Q).
_VGPU_PROFILE = re.compile(r"^(?:GRID |NVIDIA )?([A-Z]+\d+S?)[A-Z]*-(\d+)([ABCQ])$")


def vgpu_board(nvml_name: str) -> str | None:
    """The board a vGPU profile name runs on (`GRID V100D-8C` -> `V100`), None where the name is no profile."""
    match = _VGPU_PROFILE.match(nvml_name.strip())
    return match.group(1) if match else None


def vgpu_of(model: Model, nvml_name: str) -> bool:
    """Whether NVML's name is a vGPU profile of this model's board: the board is a word of the model's name
    (V100 in "Tesla V100 PCIe 32GB"; A10 is no word of "A100 PCIe 40GB")."""
    board = vgpu_board(nvml_name)
    words = re.split(r"[^0-9a-z]+", model.name.lower())
    return board is not None and board.lower() in words


def matching(name: str) -> list[Model]:
    """The models `name` names."""
    return [m for m in all_models() if names(m, name)]


def _squash(text: str) -> str:
    text = text.lower().strip()
    for prefix in ("nvidia", "tesla"):
        text = text.removeprefix(prefix).strip()
    return "".join(ch for ch in text if ch.isalnum())
