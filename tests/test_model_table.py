"""The model table (pytest_gpuaccept/models/gpus.json) and its second source of names, pci.ids: every entry
well formed with its sources, every device ID one the PCI ID database lists, the real 10de section of pci.ids
read as a person reads it, and a GPU whose device ID the table lacks still judged on who it is."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from builders import GEMM_CPU_RUN, as_gpus, compute_run
from conftest import DATA, pci_tree, staged_recording

from pytest_gpuaccept.clauses.gpus import judge_identity
from pytest_gpuaccept.models import TABLE_FILE, all_models, answers_to, by_device_id, matching, names, not_in_table, pciids
from pytest_gpuaccept.models.pciids import describe, parse_pci_ids, read_pci_ids

ROOT = Path(__file__).parent.parent
TABLE = json.loads((ROOT / TABLE_FILE).read_text())
PCI_IDS = DATA / "pciids" / "pci.ids-10de.txt"  # pciutils/pciids pci.ids 2026.08.22, lines 10234-13697
# NVIDIA/open-gpu-kernel-modules 595.45.04 README.md, "Compatible GPUs" to the end: NVIDIA's name of each ID
COMPATIBLE = DATA / "pciids" / "open-gpu-kernel-modules-595.45.04-README-compatible-gpus.md"
FIGURES = ("memory_bandwidth_gbyte_s", "pcie_gen", "tdp_w", "boost_clock_mhz")
KEYS = {"name", "form_factor", "memory_gb", "tflops", "nvlink", "nvswitch", "sources", "nvml_name", "nvml_names",
        "verify", "note", "tdp_min_w", *FIGURES}
PEAK_DTYPES = {"fp64", "tf32", "bf16", "fp16", "fp8"}

# The models the table must cover (NVIDIA data-centre and workstation GPUs since Volta, and the consumer cards
# rented for compute), each by every device ID pci.ids gives it, with the name the table uses.
COVERED = {
    "1db1": "Tesla V100 SXM2 16GB", "1df5": "Tesla V100 SXM2 16GB", "1db5": "Tesla V100 SXM2 32GB",
    "1db4": "Tesla V100 PCIe 16GB", "1db6": "Tesla V100 PCIe 32GB", "1db8": "Tesla V100 SXM3 32GB",
    "1df6": "Tesla V100S PCIe 32GB", "1eb8": "Tesla T4", "1e04": "GeForce RTX 2080 Ti",
    "1e07": "GeForce RTX 2080 Ti Rev. A", "1e30": "Quadro RTX 6000/8000", "1e36": "Quadro RTX 6000",
    "20b0": "A100 SXM4 40GB", "20b2": "A100 SXM4 80GB", "20b1": "A100 PCIe 40GB", "20f1": "A100 PCIe 40GB",
    "20b5": "A100 PCIe 80GB", "20b7": "A30", "2236": "A10", "2237": "A10G", "25b6": "A2 / A16", "2235": "A40",
    "20bd": "A800 SXM4 40GB", "20f3": "A800 SXM4 80GB", "20f5": "A800 80GB PCIe", "2230": "RTX A6000",
    "2231": "RTX A5000", "24b0": "RTX A4000", "2330": "H100 SXM5 80GB", "2331": "H100 PCIe", "2321": "H100 NVL",
    "2324": "H800 SXM", "2329": "H20", "2335": "H200 SXM 141GB", "233b": "H200 NVL",
    "2342": "GH200 96GB (Grace Hopper 120GB / 480GB)", "2348": "GH200 144GB HBM3e", "27b8": "L4", "26b5": "L40",
    "26b9": "L40S", "26b7": "L20", "26ba": "L20", "26b1": "RTX 6000 Ada Generation", "2684": "GeForce RTX 4090",
    "2901": "B200", "3182": "B300 SXM6 AC", "2941": "GB200", "31c2": "GB300", "31c3": "GB300",
    "2b85": "GeForce RTX 5090", "2bb1": "RTX PRO 6000 Blackwell Workstation Edition",
    "2bb5": "RTX PRO 6000 Blackwell Server Edition",
}


def _positive(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)


@pytest.mark.parametrize("key", sorted(TABLE["models"]))
def test_every_entry_has_a_name_form_factor_memory_and_sources_and_only_positive_figures(key):
    entry = TABLE["models"][key]
    assert re.fullmatch(r"[0-9a-f]{4}", key)
    assert set(entry) <= KEYS, set(entry) - KEYS
    assert entry["name"] and entry["form_factor"] in ("sxm", "pcie", "nvl", "superchip")
    memory = entry["memory_gb"] if isinstance(entry["memory_gb"], list) else [entry["memory_gb"]]
    assert memory and all(_positive(m) and m is not None for m in memory)
    assert entry["sources"] and set(entry["sources"]) <= set(TABLE["_sources"]) and "pci.ids" in entry["sources"]
    assert all(_positive(entry.get(f)) for f in FIGURES), entry  # a figure unknown is null, never 0
    assert set(entry["tflops"]) <= PEAK_DTYPES and all(_positive(v) and v for v in entry["tflops"].values())
    nvlink = entry["nvlink"]
    assert set(nvlink) <= {"links", "gbyte_s", "link_gbyte_s", "bridge_gbyte_s"} and isinstance(nvlink.get("links", 0), int)
    assert all(_positive(v) for k, v in nvlink.items() if k != "links") and nvlink.get("links", 0) >= 0
    assert bool(nvlink.get("links")) == bool(nvlink.get("gbyte_s"))  # links and their speed come together
    assert set(entry.get("verify", [])) <= {*FIGURES, "tflops", "nvlink.links", "pcie_gen", "fp64"}
    switch = entry.get("nvswitch")
    if switch is not None:  # an 8-GPU baseboard's NVSwitches: device IDs pci.ids lists, how many, in-switch reduction
        assert set(switch) == {"device_ids", "count", "nvls"} and nvlink.get("links") and isinstance(switch["nvls"], bool)
        assert switch["device_ids"] and all(re.fullmatch(r"[0-9a-f]{4}", d) for d in switch["device_ids"])
        assert isinstance(switch["count"], int) and switch["count"] > 0


def test_the_table_covers_every_listed_model_by_each_of_its_device_ids():
    missing = {k: name for k, name in COVERED.items() if k not in TABLE["models"]}
    assert not missing
    assert {k: TABLE["models"][k]["name"] for k in COVERED} == COVERED
    assert len(all_models()) == len(TABLE["models"]) == 54


def test_every_nvswitch_device_id_is_an_nvswitch_the_real_pci_ids_lists():
    listed = parse_pci_ids(PCI_IDS.read_text()).devices
    switches = {d for e in TABLE["models"].values() for d in e.get("nvswitch", {}).get("device_ids", [])}
    assert switches == {"22a3", "1af1"}
    assert all("NVSwitch" in listed[d] for d in switches), {d: listed.get(d) for d in switches}


def test_every_device_id_of_the_table_is_a_gpu_the_real_pci_ids_lists():
    listed = parse_pci_ids(PCI_IDS.read_text()).devices
    assert {k: listed.get(k) for k in TABLE["models"] if k not in listed} == {}
    not_gpus = {k: listed[k] for k in TABLE["models"] if re.search(r"Audio|NVSwitch|PCI bridge|Root|Endpoint", listed[k])}
    assert not_gpus == {}


def test_the_table_names_what_pci_ids_names_for_a_few_device_ids():
    """Read by a person from the excerpt: the bracketed marketing names of the IDs hosts often carry."""
    listed = parse_pci_ids(PCI_IDS.read_text()).devices
    assert {k: listed[k] for k in ("2230", "2329", "1e07", "20b7", "1eb8", "25b6", "2342", "31c2")} == {
        "2230": "GA102GL [RTX A6000]", "2329": "GH100 [H20]", "1e07": "TU102 [GeForce RTX 2080 Ti Rev. A]",
        "20b7": "GA100GL [A30 PCIe]", "1eb8": "TU104GL [Tesla T4]", "25b6": "GA107GL [A2 / A16]",
        "2342": "GH100 [GH200 120GB / 480GB]", "31c2": "GB110 [GB300]"}


def test_a_model_read_through_by_device_id_keeps_unknown_figures_unknown():
    a10g = by_device_id("0x2237")
    assert a10g is not None and (a10g.memory_gb, a10g.memory_bandwidth_gbyte_s, a10g.tdp_w, a10g.pcie_gen) == \
        ((24,), None, None, None)
    quadro = by_device_id("1e30")
    assert quadro is not None and quadro.memory_gb == (24, 48) and quadro.nvlink_bridge_gbyte_s == 100
    a100 = by_device_id("20b2")
    assert a100 is not None and a100.boost_clock_mhz == 1410 and a100.nvlink_links == 12
    assert [m.device_id for m in matching("RTX A6000")] == ["2230"]
    assert {m.device_id for m in matching("A16")} == {"25b6"}


def _nvidia_names() -> dict[str, set[str]]:
    """Device ID -> every product name NVIDIA's table gives it (`| NVIDIA A16 | 25B6 10DE 14A9 |`)."""
    names: dict[str, set[str]] = {}
    for line in COMPATIBLE.read_text().splitlines():
        if match := re.match(r"^\| (.+?)\s+\| ([0-9A-F]{4})[ 0-9A-F]*\|$", line):
            names.setdefault(match.group(2).lower(), set()).add(match.group(1))
    return names


def test_nvidias_own_list_reads_to_its_rows():
    """825 rows under the header (827 `| ` lines), 289 device IDs, 330 different (ID, name) pairs: most IDs have
    one name for every subsystem, some several (a person counts them with grep, sort -u and awk)."""
    names = _nvidia_names()
    assert sum(1 for line in COMPATIBLE.read_text().splitlines() if line.startswith("| ")) == 827
    assert (len(names), sum(len(v) for v in names.values())) == (289, 330)
    assert names["25b6"] == {"NVIDIA A16", "NVIDIA A2"} and names["232c"] == {"NVIDIA H20-3e"}
    assert names["2342"] == {"NVIDIA GH200 120GB", "NVIDIA GH200 480GB"}
    assert names["1e30"] == {"Quadro RTX 6000", "Quadro RTX 8000"} and names["2330"] == {"NVIDIA H100 80GB HBM3"}


def test_every_name_nvidia_gives_a_device_id_of_the_table_is_that_models_name():
    """An honest card never fails gpus.identity on its name: each name NVIDIA's driver gives the device ID (by
    subsystem: a Quadro RTX 8000 and 6000 share 0x1e30) is one the table's model answers to, and the table's
    NVML name is one of NVIDIA's."""
    nvidia = _nvidia_names()
    known = {k: by_device_id(k) for k in TABLE["models"] if k in nvidia}
    assert len(known) == 44
    refused = {k: sorted(n for n in nvidia[k] if not answers_to(m, n)) for k, m in known.items() if m is not None}
    assert {k: v for k, v in refused.items() if v} == {}
    assert {k: m.nvml_name for k, m in known.items() if m is not None and m.nvml_name not in nvidia[k]} == {}


def test_a_name_of_another_device_id_is_not_this_models_name():
    """NVML's name is checked against the device ID's names exactly (a contract's `model` matches loosely):
    an L40 that NVML calls "NVIDIA L40S", an A10 called an A100, are renamed cards."""
    h100_sxm5, a100_40, l40, a10 = (by_device_id(k) for k in ("2330", "20b0", "26b5", "2236"))
    assert h100_sxm5 is not None and not answers_to(h100_sxm5, "NVIDIA H100 PCIe")
    assert a100_40 is not None and not answers_to(a100_40, "NVIDIA A100-SXM4-80GB")
    assert l40 is not None and not answers_to(l40, "NVIDIA L40S") and names(l40, "NVIDIA L40S")  # names: loose
    assert a10 is not None and not answers_to(a10, "NVIDIA A100-SXM4-40GB")
    assert answers_to(a100_40, "A100-SXM4-40GB") and answers_to(l40, "nvidia l40")  # prefix, case, spaces


# ------------------------------------------------------------------------------------- pci.ids, the parser


def test_the_real_nvidia_section_reads_to_every_device_line():
    """The excerpt is the whole 10de section: 1978 device lines (one tab), subsystem lines (two tabs) and 22
    comment lines inside it, from `10de  NVIDIA Corporation` to `\t3340  GB120`."""
    text = PCI_IDS.read_text()
    table = parse_pci_ids(text)
    assert table.version is None  # the excerpt starts at the vendor line: the file's header is not in it
    assert len(table.devices) == 1978 == sum(1 for line in text.splitlines() if re.match(r"\t[0-9a-f]{4}  ", line))
    assert table.devices["0008"] == "NV1 [STG2000X-B Series]" and table.devices["3340"] == "GB120"
    assert table.devices["1db8"] == "GV100GL [Tesla V100 SXM3 32GB]"  # its subsystem line `10de 131d` is not a device
    assert table.devices["22a3"] == "GH100 [H100 NVSwitch]"
    assert sum(1 for line in text.splitlines() if line.startswith("#")) == 22


def test_the_section_ends_at_the_next_vendor_and_the_header_gives_the_version():
    """Constructed around the real section: the header's version line (as pci.ids 2026.08.22 prints it), and the
    real lines that follow the section in that file (Emulex's vendor line and first device), then a class."""
    text = ("#\n#\tList of PCI IDs\n#\n#\tVersion: 2026.08.22\n\n" + PCI_IDS.read_text()
            + "10df  Emulex Corporation\n\t0720  OneConnect NIC (Skyhawk)\nC 00  Unclassified device\n\t00  Non-VGA\n")
    table = parse_pci_ids(text)
    assert table.version == "2026.08.22" and "0720" not in table.devices and len(table.devices) == 1978
    assert parse_pci_ids(text, vendor="10df").devices == {"0720": "OneConnect NIC (Skyhawk)"}
    assert parse_pci_ids(text, vendor="1af4").devices == {}


def test_an_installed_file_plain_or_gzipped_names_the_ids_asked_and_an_absent_one_says_so(tmp_path):
    plain, packed = tmp_path / "pci.ids", tmp_path / "pci.ids.gz"
    plain.write_bytes(PCI_IDS.read_bytes())
    packed.write_bytes(gzip.compress(PCI_IDS.read_bytes()))
    for path in (plain, packed):
        found = read_pci_ids(["2230", "2330", "ffff"], (str(tmp_path / "absent"), str(path)))
        assert found == {"file": str(path), "version": None,
                         "names": {"2230": "GA102GL [RTX A6000]", "2330": "GH100 [H100 SXM5 80GB]"}}
        assert describe(found, "2230") == "pci.ids: GA102GL [RTX A6000]"
        assert describe(found, "ffff") == f"pci.ids ({path}) does not list 0xffff"
    absent = read_pci_ids(["2230"], (str(tmp_path / "absent"),))
    assert absent == {"file": None, "error": f"pci.ids not installed (looked in {tmp_path / 'absent'})"}
    assert describe(absent, "2230") == "pci.ids not installed"
    assert describe(None, "2230") == "pci.ids not read (a reading kept before pci.ids was read)"


# ---------------------------------------------------- a device ID the table lacks: identity is still judged

GPUS_8 = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n"
UNKNOWN = "232c"  # pci.ids: GH100 [H20 HBM3e]; its memory is not published, so the table leaves it out


def _h20_3e(reading):
    """The 8-GPU H100 recording as an H20 HBM3e host's NVML would give it (constructed: name and device ID)."""
    for gpu in reading["gpus"]:
        gpu["name"], gpu["pci_device_id"] = "NVIDIA H20", f"0x{UNKNOWN}"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The real pci.ids section installed where Debian puts it (a path of this test's own)."""
    path = tmp_path / "usr-share-misc-pci.ids"
    path.write_bytes(PCI_IDS.read_bytes())
    monkeypatch.setattr(pciids, "PATHS", (str(path),))
    return path


def test_an_unknown_device_id_still_gets_its_identity_judged_and_passed(accept, tmp_path, installed):
    assert by_device_id(UNKNOWN) is None
    run = accept(GPUS_8, staged_recording(tmp_path, "h100_sxm5_8gpu.json", _h20_3e),
                 pci_tree(tmp_path / "sys", f"0x{UNKNOWN}"), subprocess=False)  # pci.ids replaced in this process
    checks = {c["subject"]: c for c in run.checks("gpus.identity")}
    assert len(checks) == 8 and {c["outcome"] for c in checks.values()} == {"passed"}
    assert checks["GPU0"]["measured"] == "0x232c"
    assert checks["GPU0"]["message"] == (
        "GPU0: NVML 'NVIDIA H20' at 0000:18:00.0, sysfs PCI device 0x232c (pci.ids: GH100 [H20 HBM3e]; GPU0's "
        "device ID 0x232c is not in the model table (pytest_gpuaccept/models/gpus.json): add it, so NVML's name "
        "is not checked against it), visible to CUDA, MIG off")
    assert checks["GPU0"]["details"]["pci_ids"] == "pci.ids: GH100 [H20 HBM3e]"
    # Every check passed; run in this process (its pci.ids replaced), this test session's modules are foreign code
    assert {c["outcome"] for c in run.checks()} == {"passed"} and run.json["foreign_code"]


def test_only_the_clauses_that_need_a_published_figure_are_not_measured(accept, tmp_path, monkeypatch):
    monkeypatch.setattr(pciids, "PATHS", (str(tmp_path / "absent"),))
    run = accept(GPUS_8 + "  form_factor: sxm\n", staged_recording(tmp_path, "h100_sxm5_8gpu.json", _h20_3e),
                 pci_tree(tmp_path / "sys", f"0x{UNKNOWN}"), subprocess=False)
    identity = {c["subject"]: c for c in run.checks("gpus.identity")}
    assert {c["outcome"] for c in identity.values()} == {"passed"}
    assert identity["GPU3"]["details"]["pci_ids"] == "pci.ids not installed"
    assert "(pci.ids not installed; GPU3's device ID 0x232c is not in the model table" in identity["GPU3"]["message"]
    form = {c["subject"]: c for c in run.checks("gpus.form_factor")}
    assert {c["outcome"] for c in form.values()} == {"not_measured"}
    assert form["GPU0"]["message"] == ("not measured: GPU0's device ID 0x232c is not in the model table "
                                       "(pytest_gpuaccept/models/gpus.json): add it")
    assert run.json["verdict"] != "accepted"  # a clause not measured is never a pass


def test_a_device_id_newly_in_the_table_is_checked_against_its_name(accept, tmp_path, installed):
    """0x2230, the RTX A6000 the issue names: now in the table, so NVML's name is checked against it, and a
    shim that calls it an A100 fails on the table's name while pci.ids' name stands beside it."""
    def a6000(reading, name="NVIDIA RTX A6000"):
        for gpu in reading["gpus"]:
            gpu["name"], gpu["pci_device_id"] = name, "0x2230"
    honest = accept(GPUS_8.replace("8", "4"), staged_recording(tmp_path, "h100_sxm5_4gpu.json", a6000),
                    pci_tree(tmp_path / "sys", "0x2230", recording="h100_sxm5_4gpu.json"), subprocess=False)
    check = honest.checks("gpus.identity")[0]
    assert check["outcome"] == "passed", check["message"]
    assert check["message"] == ("GPU0: NVML 'NVIDIA RTX A6000' at 0000:18:00.0, sysfs PCI device 0x2230 (RTX A6000), "
                                "visible to CUDA, MIG off")
    assert check["details"]["pci_ids"] == "pci.ids: GA102GL [RTX A6000]"


def test_the_message_of_a_missing_figure_names_the_device_id_and_the_file():
    assert not_in_table("0x2230") == ("device ID 0x2230 is not in the model table "
                                      "(pytest_gpuaccept/models/gpus.json): add it")
    assert not_in_table(None).startswith("PCI device ID could not be read from sysfs")
    assert judge_identity.__doc__ and "pci.ids" in judge_identity.__doc__


def test_an_l40_that_nvml_calls_an_l40s_fails_on_its_name(accept, tmp_path, installed):
    """A shim that renames cards and reports the device ID sysfs has: "NVIDIA L40S" contains "L40", but it is not
    a name NVIDIA gives 0x26b5, so the loose match a contract's `model` gets is not enough for identity."""
    def renamed(reading):
        for gpu in reading["gpus"]:
            gpu["name"], gpu["pci_device_id"] = "NVIDIA L40S", "0x26b5"
    run = accept(GPUS_8.replace("8", "4"), staged_recording(tmp_path, "h100_sxm5_4gpu.json", renamed),
                 pci_tree(tmp_path / "sys", "0x26b5", recording="h100_sxm5_4gpu.json"), subprocess=False)
    check = run.checks("gpus.identity")[0]
    assert (check["outcome"], check["message"]) == ("failed", "NVML names GPU0 'NVIDIA L40S', but sysfs says PCI "
                                                    "device 0x26b5 at 0000:18:00.0, a L40 (NVML name 'NVIDIA L40')")
    assert check["details"]["pci_ids"] == "pci.ids: AD102GL [L40]"


def test_a_fraction_of_peak_on_an_unknown_device_id_is_not_measured_naming_it(accept, fake_tools, tmp_path):
    """compute's min_fraction_of_peak needs the table's figure: not measured, saying which ID to add."""
    run = compute_run(accept, fake_tools, tmp_path, as_gpus(GEMM_CPU_RUN, "bf16"), "bf16", "min_fraction_of_peak: 0.7",
                      device=f"0x{UNKNOWN}")
    assert {c["message"] for c in run.checks("compute")} == {
        f"not measured: GPU{i}'s device ID 0x232c is not in the model table (pytest_gpuaccept/models/gpus.json): "
        "add it: no figure to take 0.7 of" for i in (0, 1)}
