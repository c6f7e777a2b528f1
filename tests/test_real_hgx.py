"""A real HGX H100 as a current driver shows it, replayed: accepted on its NVLink clauses.

The host's `nvidia-smi topo -m` is the real output of an HPE Cray XD670 (8x H100 80GB HBM3, driver 580.126.20,
tests/data/SOURCES.md), ANSI-underlined header, 12 NICs and all. Its NVML state is the 8x H100 SXM5 reading
tests/data/nvml/h100_sxm5_8gpu.json (18 links per GPU into four NVSwitches). `topo -m` names no PCI bus IDs,
so nothing in it can disagree with the reading's bus IDs; what is compared is the links: NV18 on every pair
against 18 active NVSwitch links per GPU in NVML.
"""

from conftest import DATA, nvml_recording

XD670 = DATA / "topo" / "h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt"
STATUS_H100 = (DATA / "nvlink" / "h100_status_i0_18links.txt").read_text()

CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 8
  model: "H100 80GB HBM3"
  memory: "80 GB"
nvlink:
  every_pair: true
  min_links: 18
  links_per_gpu: 18
  link_speed: "26.5 GB/s"
"""


def status_8gpu() -> str:
    """`nvlink -s` of 8 GPUs: the real GPU0 block of an H100 (18 links at 26.562 GB/s) once per GPU, as a live
    8-GPU run prints one block per GPU (constructed from the real block: only the GPU number changes)."""
    head, *links = STATUS_H100.splitlines()
    blocks = [[head.replace("GPU 0:", f"GPU {gpu}:"), *links] for gpu in range(8)]
    return "\n".join(line for block in blocks for line in block) + "\n"


def test_the_topo_replayed_is_the_real_ansi_output():
    raw = XD670.read_bytes()
    assert raw.startswith(b"\x1b[4mGPU0\tGPU1\t") and b"GPU NUMA ID\x1b[0m\nGPU0\t X \tNV18" in raw
    assert raw.count(b"NV18") == 56  # 8 rows x 7 peers


def test_a_real_hgx_h100_with_its_nvml_state_is_accepted(accept, fake_tools):
    fake_tools.add("nvidia-smi", XD670, when="topo")
    fake_tools.add("nvidia-smi", status_8gpu(), when="nvlink -s")
    run = accept(CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    pairs = run.checks("nvlink")
    assert len(pairs) == 28
    assert {(c["outcome"], c["measured"]) for c in pairs} == {("passed", 18)}
    assert pairs[0]["message"] == "NV18 between GPU0 and GPU1 (100% of the 18 NVLinks of a H100 SXM5 80GB)"
    links = run.checks("nvlink.links")
    assert len(links) == 8 and {c["outcome"] for c in links} == {"passed"}
    assert {c["message"] for c in links} == {"18 links active at 26.562 GB/s"}
    assert {c["outcome"] for c in run.json["checks"]} == {"passed"}
    assert run.json["verdict"] == "accepted" and run.json["complete"] is True
    assert run.result.ret == 0
    assert ["nvidia-smi", "topo", "-m"] in fake_tools.calls("nvidia-smi")


def test_the_evidence_keeps_the_escape_bytes_the_tool_printed(accept, fake_tools):
    fake_tools.add("nvidia-smi", XD670, when="topo")
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink:\n  every_pair: true\n  min_links: 18\n",
                 nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "accepted"
    evidence = {e for c in run.checks("nvlink") for e in c.get("evidence", [])}
    assert "nvidia-smi_topo_-m.txt" in evidence  # every pair names the run it was read from
    assert (run.path / "gpuaccept-evidence" / "nvidia-smi_topo_-m.txt").read_bytes() == XD670.read_bytes()
