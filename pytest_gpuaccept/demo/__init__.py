"""`python -m pytest_gpuaccept demo [DIR] [--rejected]`: what a run and its bundle look like, on a SIMULATED host.

The host is the package's own recordings of an HGX H100 8-GPU server (this folder; SOURCES.md says where each
comes from): an NVML recording, the sysfs PCI functions of its GPUs, and the real outputs of `nvidia-smi topo -m`
and `nvidia-smi nvlink -s`, printed by a stand-in nvidia-smi first on PATH. The run is an ordinary simulated run
(`--gpuaccept-nvml`, `--gpuaccept-sysfs`) in a process of its own, isolated as a re-judge is (rejudge.py: `python
-I`, no ini or conftest of anyone's), writing its bundle into DIR; then `verify` checks that bundle. Every line the
demo prints starts with SIMULATED, and the report says SIMULATED on every page.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..i18n import DEFAULT, LANGS, tr
from ..outputs import Unwritable, output_folder
from ..probes.process import SYSTEM_PATH
from ..probes.sysfs import sysfs_bus_id
from ..rejudge import isolated_pytest

DEFAULT_DIR = Path("gpuaccept-demo")
PREFIX = "{simulated} | "  # every line the demo prints: nobody mistakes a demo's ACCEPTED for a host's
INTRO = ("demo: a simulated HGX H100 8-GPU host ({kind}), from recordings shipped in the package; nothing here is "
         "measured")
KINDS = ("as contracted", "a PCIe GPU and a slow NVLink")
NO_BUNDLE = "the simulated run made no bundle (pytest exit {code})"
TEMPLATES = ("SIMULATED", INTRO, *KINDS, NO_BUNDLE)  # the demo's own words, given to i18n.tr
CONTRACT = "vendor.yaml"  # the contract's name in the bundle folder (a bundle holds the contract it was judged with)
NVSWITCHES = ("0000:c0:00.0", "0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0")
PCIE_GPU, SLOW_GPU, SLOW_LINK = 7, 3, 5  # --rejected: GPU7 an H100 PCIe, GPU3's link 5 at half speed
NVLINK4, HALF = "26.562 GB/s", "13.281 GB/s"


def _data(name: str) -> str:
    return files(__name__).joinpath(name).read_text(encoding="utf-8")


def say(line: str, lang: str = DEFAULT) -> None:
    """A line of the demo, marked SIMULATED (in the buyer's language: zh-CN `模拟 (SIMULATED)`)."""
    print(PREFIX.format(simulated=tr(lang, "SIMULATED")) + line, flush=True)


def recording(rejected: bool) -> dict[str, Any]:
    """The host's NVML reading: the shipped H100 recording, with GPU7 an H100 PCIe (0x2331, no NVLink) if rejected."""
    reading: dict[str, Any] = json.loads(_data("nvml-h100-sxm5-8gpu.json"))
    if rejected:
        gpu = reading["gpus"][PCIE_GPU]
        gpu.update(name="NVIDIA H100 PCIe", pci_device_id="0x2331", nvlinks=[],
                   nvlink_error="NVMLError_NotSupported: Not Supported")
    return reading


def nvlink_status(rejected: bool) -> str:
    """`nvidia-smi nvlink -s` of the 8 GPUs: the real GPU0 block once per GPU, GPU3's link 5 at half speed if rejected."""
    head, *links = _data("nvidia-smi-nvlink-s-gpu0.txt").splitlines()
    out = []
    for gpu in range(8):
        out.append(head.replace("GPU 0:", f"GPU {gpu}:"))
        out += [line.replace(NVLINK4, HALF) if rejected and (gpu, n) == (SLOW_GPU, SLOW_LINK) else line
                for n, line in enumerate(links)]
    return "\n".join(out) + "\n"


def sysfs_tree(root: Path, reading: dict[str, Any]) -> None:
    """bus/pci/devices as the kernel lists the recording's GPUs (their device IDs, as NVML reads them) and the four
    NVSwitches beside them (bridge class, never counted as GPUs)."""
    devices = root / "bus" / "pci" / "devices"
    gpus = reading["gpus"]
    for gpu in gpus:
        local = "0-55" if gpu["index"] < len(gpus) // 2 else "56-111"
        _device(devices / sysfs_bus_id(gpu["pci_bus_id"]),
                {"vendor": "0x10de", "device": gpu["pci_device_id"], "class": "0x030200", "local_cpulist": local})
    for bus in NVSWITCHES:
        _device(devices / bus, {"vendor": "0x10de", "device": "0x22a3", "class": "0x068000"})
    (root / "class" / "net").mkdir(parents=True)


def _device(folder: Path, values: dict[str, str]) -> None:
    folder.mkdir(parents=True)
    for name, value in values.items():
        (folder / name).write_text(value + "\n")


def stand_in_nvidia_smi(bin_dir: Path, outputs: dict[str, Path]) -> None:
    """An nvidia-smi that prints the recorded output its subcommand asks for (`topo -m`, `nvlink -s`), and fails
    as a missing subcommand does otherwise."""
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!{sys.executable} -I\n"
                      "import sys\n"
                      f"outputs = {json.dumps({k: str(v) for k, v in outputs.items()})}\n"
                      "asked = ' '.join(sys.argv[1:])\n"
                      "for words, path in outputs.items():\n"
                      "    if asked.startswith(words):\n"
                      "        sys.stdout.write(open(path).read())\n"
                      "        sys.exit(0)\n"
                      "sys.stderr.write('demo nvidia-smi: no recorded output for: ' + asked + '\\n')\n"
                      "sys.exit(64)\n")
    script.chmod(0o755)


def simulated_host(host: Path, rejected: bool) -> list[str]:
    """The simulated host in `host`: its NVML recording, sysfs tree and stand-in tools; the run's source options."""
    reading = recording(rejected)
    nvml = host / "nvml-recording.json"
    nvml.write_text(json.dumps(reading, indent=1) + "\n")
    sysfs_tree(host / "sys", reading)
    outputs = {"topo -m": host / "nvidia-smi-topo-m.txt", "nvlink -s": host / "nvidia-smi-nvlink-s.txt"}
    outputs["topo -m"].write_text(_data("nvidia-smi-topo-m.txt"))
    outputs["nvlink -s"].write_text(nvlink_status(rejected))
    stand_in_nvidia_smi(host / "bin", outputs)
    return [f"--gpuaccept-nvml={nvml}", f"--gpuaccept-sysfs={host / 'sys'}"]


def run_demo(dest: Path | None, rejected: bool = False, lang: str = DEFAULT) -> int:
    """The demo, into `dest` (new or empty): the simulated run, then verify of its bundle. Exit: the run's, or
    verify's where the run was judged as expected and verify failed; 2 where `dest` cannot be written."""
    folder = dest or DEFAULT_DIR
    if lang not in LANGS:
        say(f"--gpuaccept-lang {lang}: expected one of {', '.join(LANGS)}")
        return 2
    try:
        output_folder(folder, (), "the demo's folder")
    except Unwritable as exc:
        say(f"FAIL {exc}", lang)
        return 2
    folder = folder.resolve()
    (folder / CONTRACT).write_text(_data("contract.yaml"))
    say(tr(lang, INTRO, kind=tr(lang, KINDS[rejected])), lang)
    with tempfile.TemporaryDirectory(prefix="gpuaccept-demo-host-") as tmp:
        host = Path(tmp)
        sources = simulated_host(host, rejected)
        args = [f"--contract={folder / CONTRACT}", *sources, f"--html={folder / 'gpuaccept-report.html'}",
                f"--gpuaccept-json={folder / 'gpuaccept-results.json'}", "-p", "no:xdist"]
        if lang != DEFAULT:
            args.append(f"--gpuaccept-lang={lang}")
        code = _run(args, host, lang)
    if not (folder / "gpuaccept-evidence" / "manifest.json").is_file():
        say(tr(lang, NO_BUNDLE, code=code), lang)
        return code or 1
    return _verify(folder, code, lang)


def _run(args: list[str], host: Path, lang: str) -> int:
    """The simulated run, isolated, its stand-in tools first on PATH; its terminal shown a line at a time."""
    work = host / "work"
    work.mkdir()
    argv, env = isolated_pytest(args, work)
    env["PATH"] = os.pathsep.join((str(host / "bin"), *SYSTEM_PATH))
    say("$ python " + " ".join(argv[1:]), lang)  # as run, the interpreter's path aside
    with subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as process:
        assert process.stdout is not None
        for line in process.stdout:
            say(line.rstrip("\n"), lang)
        return process.wait()


def _verify(folder: Path, code: int, lang: str) -> int:
    """verify of the demo's bundle (its digests, and its verdict re-judged from the raw evidence), each line shown;
    its verdict line last."""
    from ..verifier import run_verify  # noqa: PLC0415 (the re-judge's imports, after the run)

    said_lang = "" if lang == DEFAULT else f" --gpuaccept-lang {lang}"
    say(f"$ python -I -m pytest_gpuaccept verify {folder}{said_lang}", lang)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        verified = run_verify(folder, None, None, lang=lang)
    for line in printed.getvalue().splitlines():
        say(line, lang)
    return verified or code

