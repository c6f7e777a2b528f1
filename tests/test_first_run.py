"""What a new user meets first on the command line: `verify` says which signatures it checked (and that it
checked none without --allowed-signers), a missing allowed-signers file is a usage error, and preset names
take `-` and `_` alike and suggest the closest preset when mistyped."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import bundle_copy, keypair, measured_run
from conftest import DATA

from pytest_gpuaccept.__main__ import main as cli
from pytest_gpuaccept.bundle import system_ssh_keygen
from pytest_gpuaccept.presets import resolve, unknown
from pytest_gpuaccept.rejudge import RECOMPUTED

REPO = Path(__file__).resolve().parent.parent
PRESETS = "the shipped presets are: a100-sxm4-80gb-8gpu, h100-sxm5-8gpu, h200-sxm-1gpu, l40s-pcie-4gpu"
needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                      reason="OpenSSH's ssh-keygen is needed (.ci/run installs it)")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A bundle as a run makes it: the H100 recording with the real `topo -m` of an HGX H100, judged ACCEPTED. Its
    raw evidence is complete, so that verify's re-judge recomputes the same verdict. Made once, copied per test."""
    run = measured_run(tmp_path_factory.mktemp("first-run") / "run", "gpuaccept: 1\nvendor: Example\n"
                       "gpus: {count: 8, model: H100, memory: 80 GB}\nnvlink: {every_pair: true, min_links: 18}\n")
    assert json.loads((run / "gpuaccept-results.json").read_text())["verdict"] == "accepted"
    return run


@pytest.fixture
def bundle(measured, tmp_path) -> Path:
    return bundle_copy(measured, tmp_path / "bundle")


REJUDGED = f"{RECOMPUTED}: ACCEPTED over 53 checks, which agrees with the bundle's results (ACCEPTED)"


def _verified(out: str, bundle: Path) -> list[str]:
    """verify's lines after its header, once the header says what was verified: the bundle, the mode, the contract
    judged with its SHA-256, the host from the raw evidence and the recomputed verdict."""
    lines = out.splitlines()
    contract = hashlib.sha256((bundle / "gpuaccept-evidence" / "contract.yaml").read_bytes()).hexdigest()
    assert lines[0].startswith("verify ")
    assert lines[1].startswith("mode: SIMULATED (NVML readings from a recording, not a live host); sources: ")
    assert lines[2] == f"contract judged: the bundle's contract.yaml, SHA-256 {contract}"
    assert lines[3].startswith("host (from the raw evidence, re-judged): ") and "8 GPUs: GPU0 GPU-" in lines[3]
    assert lines[4] == REJUDGED
    return lines[5:]


def _manifest_sha(bundle: Path) -> str:
    return hashlib.sha256((bundle / "gpuaccept-evidence" / "manifest.json").read_bytes()).hexdigest()


def _signer(folder: Path, who: str) -> tuple[Path, str, str]:
    """A new key: (private key, its allowed_signers line, its fingerprint as ssh-keygen names it)."""
    key, line = keypair(folder, who)
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(folder / f"{who}.pub")], capture_output=True, text=True,
                                 check=True, timeout=30).stdout.split()[1]
    return key, line, fingerprint


# ------------------------------------------------------------------ verify and signatures

def test_an_unsigned_bundle_verifies_with_one_line(bundle, capsys):
    assert cli(["verify", str(bundle)]) == 0
    assert _verified(capsys.readouterr().out, bundle) == [
        f"OK: every file matches the manifest; manifest SHA-256 {_manifest_sha(bundle)}"]


@needs_ssh_keygen
def test_a_plain_verify_of_a_signed_bundle_says_its_signatures_were_not_checked(bundle, tmp_path, capsys):
    """The files match, so it exits 0 as before; but nothing about the signatures may read as verified."""
    key, _line, _fingerprint = _signer(tmp_path, "vendor")
    assert cli(["sign", str(bundle), "--key", str(key)]) == 0
    capsys.readouterr()
    assert cli(["verify", str(bundle)]) == 0
    assert _verified(capsys.readouterr().out, bundle) == [
        f"OK: every file matches the manifest; manifest SHA-256 {_manifest_sha(bundle)}",
        f"signatures NOT checked: gpuaccept-evidence/signatures/1.sig (who signed is not known; to check: "
        f"python -I -m pytest_gpuaccept verify {bundle} --allowed-signers FILE)"]


@needs_ssh_keygen
def test_a_plain_verify_of_a_changed_signed_bundle_fails_and_still_says_the_signatures_were_not_checked(
        bundle, tmp_path, capsys):
    key, _line, _fingerprint = _signer(tmp_path, "vendor")
    assert cli(["sign", str(bundle), "--key", str(key)]) == 0
    (bundle / "gpuaccept-evidence" / "nvidia-smi_topo_-m.txt").write_text("nothing happened\n")
    capsys.readouterr()
    assert cli(["verify", str(bundle / "gpuaccept-evidence")]) == 1
    assert capsys.readouterr().out.splitlines()[4:] == [
        f"{RECOMPUTED}: none (the bundle does not verify, so its evidence was not judged)",
        f"bundle does NOT verify (1 problem); manifest SHA-256 {_manifest_sha(bundle)}",
        "FAIL changed: nvidia-smi_topo_-m.txt",
        f"signatures NOT checked: signatures/1.sig (who signed is not known; to check: "
        f"python -I -m pytest_gpuaccept verify {bundle / 'gpuaccept-evidence'} --allowed-signers FILE)"]


@needs_ssh_keygen
def test_verify_with_allowed_signers_names_each_signature_file_its_signer_key_and_the_file_it_checked_with(
        bundle, tmp_path, capsys):
    buyer, buyer_line, buyer_key = _signer(tmp_path, "buyer")
    vendor, vendor_line, vendor_key = _signer(tmp_path, "vendor")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(buyer_line + vendor_line)
    assert cli(["sign", str(bundle), "--key", str(buyer)]) == 0
    assert cli(["sign", str(bundle), "--key", str(vendor)]) == 0
    capsys.readouterr()
    assert cli(["verify", str(bundle), "--allowed-signers", str(allowed)]) == 0
    assert _verified(capsys.readouterr().out, bundle) == [
        f"OK: every file matches the manifest; manifest SHA-256 {_manifest_sha(bundle)}",
        f"signed by: buyer@example.com with ED25519 key {buyer_key} in {allowed} "
        "(gpuaccept-evidence/signatures/1.sig verified)",
        f"signed by: vendor@example.com with ED25519 key {vendor_key} in {allowed} "
        "(gpuaccept-evidence/signatures/2.sig verified)",
        f"signatures checked with ssh-keygen: {system_ssh_keygen()}"]  # never the one on PATH


@needs_ssh_keygen
def test_a_signature_by_a_stranger_is_a_failure_never_a_signer(bundle, tmp_path, capsys):
    stranger, _line, _fingerprint = _signer(tmp_path, "stranger")
    _buyer, buyer_line, _buyer_key = _signer(tmp_path, "buyer")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(buyer_line)
    assert cli(["sign", str(bundle), "--key", str(stranger)]) == 0
    capsys.readouterr()
    assert cli(["verify", str(bundle), "--allowed-signers", str(allowed)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL signature 1.sig: signed by a key not in {allowed}" in out.splitlines()
    assert "signed by:" not in out and "OK" not in out


def test_a_missing_allowed_signers_file_is_a_usage_error_not_a_bad_signature(bundle, tmp_path, capsys):
    missing = tmp_path / "missing"
    with pytest.raises(SystemExit) as stopped:
        cli(["verify", str(bundle), "--allowed-signers", str(missing)])
    assert stopped.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1] == ("python -m pytest_gpuaccept verify: error: argument --allowed-signers: "
                                    f"allowed-signers file {missing} does not exist")
    with pytest.raises(SystemExit):
        cli(["verify", str(bundle), "--allowed-signers", str(tmp_path)])
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"allowed-signers file {tmp_path} is not a file")


def test_the_module_refuses_a_missing_allowed_signers_file_with_exit_2(bundle):
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "verify", str(bundle), "--allowed-signers",
                           "/missing"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1].endswith(": allowed-signers file /missing does not exist")


# ------------------------------------------------------------------ preset names

@pytest.mark.parametrize("name", ["h100-sxm5-8gpu", "h100_sxm5_8gpu", "h100_sxm5_8gpu.yaml", "H100-SXM5-8GPU"])
def test_a_preset_is_found_by_dashes_or_underscores(name):
    assert resolve(name) == str(REPO / "contracts" / "h100_sxm5_8gpu.yaml")
    assert unknown(name) is None


def test_a_mistyped_preset_gets_did_you_mean():
    assert unknown("h100-sxm9") == ("h100-sxm9: no such preset, nor a contract file here; did you mean h100-sxm5-8gpu "
                                    f"or h200-sxm-1gpu? {PRESETS}")
    assert unknown("h100") == f"h100: no such preset, nor a contract file here; did you mean h100-sxm5-8gpu? {PRESETS}"
    assert unknown("b200") == f"b200: no such preset, nor a contract file here; {PRESETS}"
    assert unknown("missing.yaml") is None and unknown("contracts/none") is None  # paths: the loader's own message


def test_pytest_with_a_mistyped_preset_says_did_you_mean(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--contract=h100_sxm9", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4
    assert (f"ERROR: h100_sxm9: no such preset, nor a contract file here; did you mean h100-sxm5-8gpu or h200-sxm-1gpu? "
            f"{PRESETS}") in done.stderr.splitlines()
    assert "file not found" not in done.stderr


def test_doctor_takes_underscores_and_suggests_for_a_mistyped_preset(capsys):
    cli(["doctor", "--contract", "h200_sxm_1gpu", "--gpuaccept-nvml", str(DATA / "h200" / "nvml-h200.json")])
    assert capsys.readouterr().out.splitlines()[0] == f"pytest-gpuaccept doctor: {REPO / 'contracts' / 'h200_sxm_1gpu.yaml'}"
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "doctor", "--contract", "h200-sxm1"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (4, "h200-sxm1: no such preset, nor a contract file here; did you mean "
                                                 f"h200-sxm-1gpu or h100-sxm5-8gpu? {PRESETS}\n")


def test_contracts_copy_takes_underscores_and_suggests_for_a_mistyped_name(tmp_path):
    def contracts(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "contracts", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    copied = contracts("--copy", "h100_sxm5_8gpu")
    assert (copied.returncode, copied.stdout) == (0, "copied h100-sxm5-8gpu to h100-sxm5-8gpu.yaml\n")
    assert (tmp_path / "h100-sxm5-8gpu.yaml").read_bytes() == (REPO / "contracts" / "h100_sxm5_8gpu.yaml").read_bytes()
    refused = contracts("--copy", "l40s_pcie")
    assert (refused.returncode, refused.stdout) == (
        2, f"l40s_pcie: no such preset; did you mean l40s-pcie-4gpu? {PRESETS}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h100-sxm5-8gpu.yaml"]
