"""A bundle is data: the vendor makes it, the buyer verifies, replays and compares it at home, and nothing in it may
run on the buyer's machine, be read from outside it, be written where it points, exhaust the machine or fool the
buyer's terminal. Each class of hostile bundle is built from an honest one (the vendor's edits, then the manifest
and report sealed again, as `reseal` does) and refused in one line, with no planted program run, no planted secret
shown and nothing written outside the buyer's output folder; the honest twin verifies."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from builders import bundle_copy, measured_run
from conftest import reseal

from pytest_gpuaccept.bundle_files import MAX_FILE_BYTES, MAX_FILES, MAX_MANIFEST_BYTES
from pytest_gpuaccept.rejudge import RECOMPUTED
from pytest_gpuaccept.untrusted import Untrusted, escaped, shown, strict_json

CONTRACT = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
gpus: {count: 8, model: "H100", memory: "80 GB"}
nvlink: {every_pair: true, min_links: 18}
"""
OVERSOLD = CONTRACT.replace('memory: "80 GB"', 'memory: "141 GB"')  # an H100 80GB host sold as H200s: REJECTED
SECRET = "SECRET-5f0c2a-do-not-leak"
RUN = {"stdin": subprocess.DEVNULL, "capture_output": True, "text": True, "timeout": 120}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, Path]:
    runs = tmp_path_factory.mktemp("runs")
    return {"accepted": measured_run(runs / "accepted", CONTRACT), "rejected": measured_run(runs / "rejected", OVERSOLD)}


@pytest.fixture
def honest(measured, tmp_path) -> Path:
    return bundle_copy(measured["accepted"], tmp_path / "bundle")


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "home" / ".ssh" / "id_ed25519"
    path.parent.mkdir(parents=True)
    path.write_text(SECRET + "\n")
    return path


def _verify(*args: object, cwd: Path | None = None, limit_memory: bool = False) -> subprocess.CompletedProcess[str]:
    """The README's command, `python -I -m pytest_gpuaccept ...`, as the buyer types it; killed (the test fails)
    past 60 s, and given 1 GB of address space where asked."""
    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-I", "-m", "pytest_gpuaccept", *map(str, args)], cwd=cwd,
                          **{**RUN, "timeout": 60}, preexec_fn=capped if limit_memory else None)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and not p.is_symlink()}


def _written_outside(root: Path, before: dict[str, bytes], out: Path | None = None) -> list[str]:
    """Files under `root` that are new or changed since `before`, outside the buyer's output folder `out`."""
    after = _files(root)
    return [name for name, data in after.items() if before.get(name) != data
            and (out is None or not (root / name).is_relative_to(out))]


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


def _edit_results(bundle: Path, change) -> None:
    for path in (bundle / "gpuaccept-results.json", bundle / "gpuaccept-evidence" / "results.json"):
        _edit_json(path, change)


def _refused(done: subprocess.CompletedProcess[str], line: str) -> None:
    """verify failed, with `line` among its FAIL lines, and nothing of the planted secret in its output."""
    assert done.returncode != 0, done.stdout
    assert f"FAIL {line}" in done.stdout.splitlines(), done.stdout
    assert SECRET not in done.stdout + done.stderr


def test_the_honest_bundle_verifies_and_says_first_what_was_verified(honest):
    done = _verify("verify", honest)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    contract = hashlib.sha256((honest / "gpuaccept-evidence" / "contract.yaml").read_bytes()).hexdigest()
    assert lines[1].startswith("mode: SIMULATED")
    assert lines[2] == f"contract judged: the bundle's contract.yaml, SHA-256 {contract}"
    assert "GPU0 GPU-" in lines[3] and " serial " in lines[3]
    assert lines[4] == f"{RECOMPUTED}: ACCEPTED over 53 checks, which agrees with the bundle's results (ACCEPTED)"


def test_a_live_recorded_bundle_says_live_and_its_host_from_the_raw_evidence(tmp_path):
    """A live run on this machine (no GPU driver here: NVML cannot start, the run is REJECTED) is a live bundle."""
    run = tmp_path / "live"
    run.mkdir()
    (run / "vendor.yaml").write_text(CONTRACT)
    subprocess.run([sys.executable, "-m", "pytest", "--contract=vendor.yaml", "-p", "no:cacheprovider"], cwd=run, **RUN)
    done = _verify("verify", run)
    lines = done.stdout.splitlines()
    assert lines[1].startswith("mode: LIVE (measured on the host)"), done.stdout
    assert lines[2].startswith("contract judged: the bundle's contract.yaml, SHA-256 ")
    assert lines[3].startswith("host (from the raw evidence, re-judged): ") and "0 GPUs: none" in lines[3]
    assert lines[4].startswith(f"{RECOMPUTED}: REJECTED over ")
    assert "which agrees with the bundle's results (REJECTED)" in lines[4]


def test_verify_against_another_contract_fails_naming_both_digests(honest, tmp_path):
    other = tmp_path / "buyer.yaml"
    other.write_text(CONTRACT.replace("min_links: 18", "min_links: 12"))
    done = _verify("verify", honest, "--contract", other)
    theirs = hashlib.sha256((honest / "gpuaccept-evidence" / "contract.yaml").read_bytes()).hexdigest()
    _refused(done, f"the bundle was judged against another contract: its contract.yaml has SHA-256 {theirs}, "
                   f"--contract {other} has {hashlib.sha256(other.read_bytes()).hexdigest()}")
    same = tmp_path / "same.yaml"
    same.write_text(CONTRACT)
    assert _verify("verify", honest, "--contract", same).returncode == 0


# ------------------------------------------------------------------ the bundle picks a program the verifier runs

PLANTED = """#!/bin/sh
echo "$@" > {marker}
env >> {marker}
echo "alice"
echo 'Good "gpuaccept-bundle" signature for alice with ED25519 key SHA256:forged'
exit 0
"""


def test_a_program_the_bundle_s_contract_names_is_never_run(honest, tmp_path):
    marker = tmp_path / "ran"
    program = tmp_path / "ssh-keygen"
    program.write_text(PLANTED.format(marker=marker))
    program.chmod(0o755)
    copy = honest / "gpuaccept-evidence" / "contract.yaml"
    copy.write_text(copy.read_text() + f"tools:\n  ssh_keygen: {program}\n")
    _edit_results(honest, lambda r: r["contract"].update(sha256=hashlib.sha256(copy.read_bytes()).hexdigest()))
    reseal(honest)
    (honest / "gpuaccept-evidence" / "signatures").mkdir()
    (honest / "gpuaccept-evidence" / "signatures" / "1.sig").write_text("-----BEGIN SSH SIGNATURE-----\n")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("alice ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    done = _verify("verify", honest, "--allowed-signers", allowed)
    assert done.returncode == 1 and not marker.exists()
    assert "signed by:" not in done.stdout
    assert "signatures checked with ssh-keygen: /usr/bin/ssh-keygen (the system's)" in done.stdout
    assert "tools.ssh_keygen: no longer read" in done.stdout  # the re-judge refuses the contract copy


def test_a_signer_is_only_the_one_ssh_keygen_names_on_its_good_line_and_no_agent_reaches_it(honest, tmp_path,
                                                                                          monkeypatch):
    """Even an ssh-keygen the buyer names: its exit 0 and a first word are no signer, and it never sees the agent."""
    marker = tmp_path / "ran"
    program = tmp_path / "ssh-keygen"
    program.write_text(PLANTED.format(marker=marker).replace("for alice", "for mallory"))
    program.chmod(0o755)
    (honest / "gpuaccept-evidence" / "signatures").mkdir()
    (honest / "gpuaccept-evidence" / "signatures" / "1.sig").write_text("-----BEGIN SSH SIGNATURE-----\n")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    done = _verify("verify", honest, "--allowed-signers", allowed, "--ssh-keygen", program)
    assert done.returncode == 1 and "signed by:" not in done.stdout
    assert "FAIL signature 1.sig of alice: does not match the manifest (no Good signature line)" in done.stdout
    assert "SSH_AUTH_SOCK" not in marker.read_text()
    assert f"signatures checked with ssh-keygen: {program} (named with --ssh-keygen)" in done.stdout


# ------------------------------------------------------------------ the bundle picks a file the verifier reads

RECORD = "gpuaccept-evidence/nvidia-smi_topo_-m.json"


@pytest.mark.parametrize("target", ["../../home/.ssh/id_ed25519", "/proc/self/environ", "{secret}", "/dev/zero"])
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_record_naming_a_file_outside_the_bundle_is_never_read(honest, secret, tmp_path, target, stream):
    _edit_json(honest / RECORD, lambda r: r.update({stream: target.format(secret=secret)}))
    reseal(honest)
    out = tmp_path / "recheck"
    before = _files(tmp_path)
    done = _verify("verify", honest, "--rejudged", out, limit_memory=True)
    assert _written_outside(tmp_path, before, out) == []
    assert done.returncode == 1 and SECRET not in done.stdout
    assert "FAIL re-judged: " in done.stdout and "nvlink" in done.stdout  # the topology was not measured
    assert all(SECRET.encode() not in data and b"PATH=" not in data for data in _files(out).values())


@pytest.mark.parametrize("kind", ["link to a secret", "link to /dev/zero", "FIFO", "link to a folder"])
def test_a_link_fifo_or_device_in_the_bundle_is_refused_before_anything_is_read(honest, secret, tmp_path, kind):
    evidence = honest / "gpuaccept-evidence"
    planted = evidence / "nvidia-smi_topo_-m.txt"
    planted.unlink()
    if kind == "FIFO":
        os.mkfifo(planted)
    elif kind == "link to a folder":
        planted.symlink_to(secret.parent, target_is_directory=True)
    else:
        planted.symlink_to(secret if kind == "link to a secret" else "/dev/zero")
    before = _files(tmp_path)
    done = _verify("verify", honest, limit_memory=True)
    why = "a symbolic link inside the bundle" if kind != "FIFO" else "not a regular file (a FIFO, socket or device)"
    _refused(done, f"nvidia-smi_topo_-m.txt: {why}: refused")
    replayed = _verify("replay", honest, "--out", tmp_path / "out")
    assert replayed.returncode == 1 and f"FAIL nvidia-smi_topo_-m.txt: {why}: refused" in replayed.stdout
    assert not (tmp_path / "out").exists() and _written_outside(tmp_path, before) == []


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/./b", "with\x1b[2Kescape"])
def test_a_manifest_path_that_is_not_a_plain_relative_path_is_refused(honest, path):
    _edit_json(honest / "gpuaccept-evidence" / "manifest.json",
               lambda m: m["files"].append({"path": path, "sha256": "0" * 64, "size": 1}))
    done = _verify("verify", honest)
    _refused(done, f"manifest.json `files`: {escaped(path)} is not a plain relative path inside the bundle: refused")
    assert "\x1b" not in done.stdout


# ------------------------------------------------------------------ the bundle's folder is code

def _plant_code(folder: Path, marker: Path) -> None:
    """Everything that would run if pytest or Python took configuration or modules from `folder`."""
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -p evil\npythonpath = .\n")
    (folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-p evil'\n")
    (folder / "conftest.py").write_text(code)
    (folder / "evil.py").write_text(code)
    shadow = folder / "pytest_gpuaccept"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(code)
    (shadow / "__main__.py").write_text(code + "print('OK: every file matches the manifest')\n")


def test_the_readme_commands_from_inside_a_hostile_bundle_run_nothing_of_it(honest, measured, tmp_path):
    marker = tmp_path / "ran"
    _plant_code(honest, marker)
    other = bundle_copy(measured["accepted"], tmp_path / "other")
    before = _files(tmp_path)
    verified = _verify("verify", ".", cwd=honest)
    assert verified.returncode == 0, verified.stdout  # the planted files are beside the evidence, not in it
    replayed = _verify("replay", ".", "--out", tmp_path / "recheck", cwd=honest)
    assert replayed.returncode == 0, replayed.stdout
    compared = _verify("compare", ".", other, cwd=honest)
    assert compared.returncode == 0, compared.stdout
    assert not marker.exists() and _written_outside(tmp_path, before, tmp_path / "recheck") == []


def test_the_readme_commands_under_a_hostile_ini_run_nothing_of_it(honest, measured, tmp_path):
    marker = tmp_path / "ran"
    work = tmp_path / "work"
    inside = work / "sub"
    inside.mkdir(parents=True)
    _plant_code(work, marker)
    assert _verify("verify", honest, cwd=inside).returncode == 0
    assert _verify("replay", honest, f"--out={inside / 'recheck'}", f"--contract={honest / 'gpuaccept-evidence' / 'contract.yaml'}",
                   cwd=inside).returncode == 0
    assert _verify("compare", honest, bundle_copy(measured["accepted"], tmp_path / "other"), cwd=inside).returncode == 0
    assert not marker.exists()


def test_a_direct_pytest_replay_of_a_bundle_with_an_ini_file_is_refused_before_its_settings_load(honest, tmp_path):
    """pytest finds an ini file from the folder a space-separated option value names: the bundle's. Refused before
    its `pythonpath` or any conftest loads (the README's replay is the isolated command above); with `=` the bundle's
    folder is no path to pytest, and nothing of it loads."""
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'a').write(__name__)\n"
    (honest / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (honest / "conftest.py").write_text(code)
    contract = f"--contract={honest / 'gpuaccept-evidence' / 'contract.yaml'}"
    done = subprocess.run([sys.executable, "-m", "pytest", contract, "--gpuaccept-replay", str(honest),
                           f"--html={tmp_path / 'r' / 'report.html'}"], cwd=tmp_path, **RUN)
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"--gpuaccept-replay: the ini file {honest / 'pytest.ini'} is inside the bundle" in done.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()
    joined = subprocess.run([sys.executable, "-m", "pytest", contract, f"--gpuaccept-replay={honest}",
                             f"--html={tmp_path / 'r' / 'report.html'}"], cwd=tmp_path, **RUN)
    assert joined.returncode == 0 and not marker.exists(), joined.stdout


# ------------------------------------------------------------------ the verifier writes where the bundle points

def test_a_rejudged_folder_that_is_a_link_out_of_the_bundle_is_not_written(honest, tmp_path):
    outside = tmp_path / "home" / ".ssh"
    outside.mkdir(parents=True)
    (honest / "recheck").symlink_to(outside, target_is_directory=True)
    done = _verify("verify", honest, "--rejudged", honest / "recheck")
    assert done.returncode == 2
    assert done.stdout.splitlines() == [f"FAIL --rejudged {honest / 'recheck'} is inside the bundle {honest}: a re-judge "
                                        "never writes inside the bundle it reads"]
    assert list(outside.iterdir()) == []


def test_compare_never_writes_through_a_link_or_inside_a_bundle(honest, measured, tmp_path):
    bashrc = tmp_path / ".bashrc"
    bashrc.write_text("export PS1='$ '\n")
    (tmp_path / "compare.html").symlink_to(bashrc)
    other = bundle_copy(measured["accepted"], tmp_path / "other")
    done = _verify("compare", honest, other, "--html", tmp_path / "compare.html")
    assert done.returncode == 2 and f"FAIL --html {tmp_path / 'compare.html'}: cannot be written" in done.stdout
    assert bashrc.read_text() == "export PS1='$ '\n"
    inside = _verify("compare", honest, other, "--json", honest / "compare.json")
    assert inside.returncode == 2 and not (honest / "compare.json").exists()


# ------------------------------------------------------------------ resources

def test_json_nested_100000_deep_is_one_line(honest):
    (honest / "gpuaccept-evidence" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    done = _verify("verify", honest, limit_memory=True)
    _refused(done, "changed: manifest.json: nested deeper than 64 levels")
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("count", [300_000, 1_000_000])
def test_a_manifest_of_a_million_entries_is_one_line(honest, count):
    with open(honest / "gpuaccept-evidence" / "manifest.json", "w") as manifest:  # written as it goes: this test
        manifest.write('{"files": [')  # process stays small (a child forked from it starts with its memory)
        for n in range(count):
            manifest.write(("," if n else "") + json.dumps({"path": f"f{n}", "sha256": "0" * 64, "size": 1}))
        manifest.write("]}")
    done = _verify("verify", honest, limit_memory=True)
    size = (honest / "gpuaccept-evidence" / "manifest.json").stat().st_size
    _refused(done, f"manifest.json: `files` lists {count:,} files, over the {MAX_FILES:,} a bundle may hold"
             if size <= MAX_MANIFEST_BYTES else f"manifest.json: {size:,} bytes, over the {MAX_MANIFEST_BYTES:,} it "
                                                "may have: refused")
    assert len(done.stdout.splitlines()) < 10


def test_a_sparse_3_gb_stream_a_contract_copy_asks_to_replay_is_refused_unread(honest, tmp_path):
    stream = honest / "gpuaccept-evidence" / "burnin-stream.jsonl"
    with open(stream, "wb") as handle:
        handle.truncate(3 << 30)
    manifest = honest / "gpuaccept-evidence" / "manifest.json"
    _edit_json(manifest, lambda m: m["files"].append({"path": "burnin-stream.jsonl", "sha256": "0" * 64,
                                                      "size": 3 << 30}))
    done = _verify("verify", honest, "--rejudged", tmp_path / "out", limit_memory=True)
    _refused(done, f"burnin-stream.jsonl: {3 << 30:,} bytes, over the {MAX_FILE_BYTES:,} a bundle's file may have: "
                   "refused")
    assert sum(len(data) for data in _files(tmp_path / "out").values()) == 0
    # ...and a manifest that states a small size for it: read no further than that, then named as changed
    _edit_json(manifest, lambda m: m["files"][-1].update(size=100))
    _refused(_verify("verify", honest, limit_memory=True), "changed: burnin-stream.jsonl")


# ------------------------------------------------------------------ what the buyer is shown

HOSTILE = "\x1b]52;c;ZXZpbA==\x07\x1b[2K\rOK: every file matches\u202egpj.exe\u200b"


def test_escape_sequences_bidi_and_zero_width_characters_reach_the_terminal_and_page_escaped(honest, tmp_path):
    """The raw evidence names a GPU serial built to write the clipboard, erase a line and fake an OK; the results
    say the same (the vendor made both). verify shows it escaped, in the terminal and the re-judged page."""
    reading = honest / "gpuaccept-evidence" / "nvml-host.json"
    _edit_json(reading, lambda r: r["gpus"][0].update(serial=HOSTILE))
    _edit_results(honest, lambda r: r["host"]["gpus"][0].update(serial=HOSTILE))
    reseal(honest)
    out = tmp_path / "recheck"
    done = _verify("verify", honest, "--rejudged", out)
    printed = done.stdout + done.stderr
    for raw in ("\x1b", "\x07", "\r", "\u202e", "\u200b"):
        assert raw not in printed
    assert escaped(HOSTILE) in printed  # shown, as data: \x1b]52;c;...\u202e...
    page = (out / "report.html").read_text()
    assert "\u202e" not in page and "\x1b" not in page and "\\u202e" in page
    (honest / "gpuaccept-evidence" / f"planted{HOSTILE}").write_text("x")  # and a file named to fake a line
    added = _verify("verify", honest)
    assert added.returncode == 1 and f"FAIL added: planted{escaped(HOSTILE)} (not in the manifest)" in added.stdout
    assert "\x1b" not in added.stdout and "\u202e" not in added.stdout


def test_the_escaping_helpers_leave_honest_text_alone():
    assert shown("NVIDIA H100 80GB HBM3, 1652322000000 — 450 GB/s ≥ 90 %") == "NVIDIA H100 80GB HBM3, 1652322000000 — 450 GB/s ≥ 90 %"
    assert shown("a\nb") == "a\\x0ab" and escaped("a\tb\nc\r", keep="\t\n") == "a\tb\nc\\x0d"
    assert shown("x" * 500, 10) == "xxxxxxxxxx[... 490 more characters]"


def test_a_report_showing_accepted_over_a_rejected_verdict_fails(measured, tmp_path):
    bundle = bundle_copy(measured["rejected"], tmp_path / "bundle")
    assert _verify("verify", bundle).returncode == 0  # the honest twin: REJECTED, and verified as such
    page = bundle / "gpuaccept-report.html"
    page.write_text(page.read_text().replace(">REJECTED</h2>", ">ACCEPTED</h2>"))  # the attribute still says rejected
    reseal_manifest_only(bundle)
    _refused(_verify("verify", bundle), "the report gpuaccept-report.html shows 'ACCEPTED' in its verdict box, the "
                                        "results give REJECTED")


def test_a_gpu_swap_hidden_by_editing_results_host_fails_verify_and_compare(honest, measured, tmp_path):
    swapped = "GPU-00000000-0000-0000-0000-00000000dead"
    old_uuid = json.loads((honest / "gpuaccept-results.json").read_text())["host"]["gpus"][0]["uuid"]
    _edit_json(honest / "gpuaccept-evidence" / "nvml-host.json", lambda r: r["gpus"][0].update(uuid=swapped))
    reseal(honest)  # the raw evidence has the new card; results.host still names the old one
    done = _verify("verify", honest)
    assert done.returncode == 1
    assert ("FAIL re-judged: results.json: host GPU0: the results say GPU0 NVIDIA H100 80GB HBM3 "
            f"{old_uuid} serial 1652322000000, the raw evidence GPU0 NVIDIA H100 80GB HBM3 {swapped} serial "
            "1652322000000") in done.stdout.splitlines(), done.stdout
    old = bundle_copy(measured["accepted"], tmp_path / "old")
    compared = _verify("compare", old, honest)
    assert compared.returncode == 2 and "NEW" in compared.stdout and "refused, not compared" in compared.stdout


def test_compare_of_an_edited_bundle_with_a_recomputed_manifest_is_refused(honest, measured, tmp_path):
    _edit_results(honest, lambda r: r["checks"][0].update(measured=90.0))
    reseal(honest)
    old = bundle_copy(measured["accepted"], tmp_path / "old")
    done = _verify("compare", old, honest)
    assert done.returncode == 2, done.stdout
    assert "nothing regressed" not in done.stdout and "FAIL NEW" in done.stdout and "re-judged" in done.stdout


@pytest.mark.parametrize("edit, line", [
    (lambda text: text.replace('"complete": true', '"complete": NaN', 1), "NaN is not a number JSON allows"),
    (lambda text: text.replace('"complete": true', '"complete": true, "complete": true', 1),
     "the key 'complete' is given twice in one object"),
    (lambda text: text.replace('"gpuaccept": 1', '"gpuaccept": 999', 1), "results format 999, this version reads format 1"),
])
def test_results_that_are_not_format_1_json_are_refused_by_verify_and_compare(honest, measured, tmp_path, edit, line):
    for path in (honest / "gpuaccept-results.json", honest / "gpuaccept-evidence" / "results.json"):
        path.write_text(edit(path.read_text()))
    reseal_manifest_only(honest)
    done = _verify("verify", honest)
    assert done.returncode == 1 and line in done.stdout and "Traceback" not in done.stderr, done.stdout
    compared = _verify("compare", bundle_copy(measured["accepted"], tmp_path / "old"), honest,
                       "--html", tmp_path / "c.html")
    assert compared.returncode == 2 and "Traceback" not in compared.stderr and not (tmp_path / "c.html").exists()


def reseal_manifest_only(folder: Path) -> None:
    """The manifest written again over the edited files (the results are not JSON `reseal` can read)."""
    from pytest_gpuaccept.bundle import write_manifest  # noqa: PLC0415
    evidence = folder / "gpuaccept-evidence"
    manifest = json.loads((evidence / "manifest.json").read_text())
    write_manifest(evidence, [folder / e["path"] for e in manifest["bundle"]],
                   {k: v for k, v in manifest.items() if k not in ("files", "bundle", "evidence_digest", "checksum")})


def test_strict_json_refuses_what_format_1_never_writes():
    for text, why in (('{"a": 1, "a": 2}', "given twice"), ('{"a": Infinity}', "not a number"),
                      ('{"a": 1e400}', "beyond what a float holds"), ("[" * 100 + "]" * 100, "deeper than 64")):
        with pytest.raises(Untrusted, match=why):
            strict_json(text, "x.json")
    assert strict_json('{"a": [1, 2.5, "b"]}', "x.json") == {"a": [1, 2.5, "b"]}


def test_a_report_kept_elsewhere_is_checked_where_the_buyer_says(honest, tmp_path):
    """verify --report: the report the manifest lists, kept outside the bundle, is checked there, and only there."""
    kept = tmp_path / "signed" / "report.html"
    kept.parent.mkdir()
    (honest / "gpuaccept-report.html").rename(kept)
    assert _verify("verify", honest, "--report", kept).returncode == 0
    kept.write_text(kept.read_text().replace("</body>", "<p>edited</p></body>"))
    _refused(_verify("verify", honest, "--report", kept), f"changed: gpuaccept-report.html (at {kept})")
