"""The README's first command, as a new user runs it: get the source, install it from its path into a fresh
virtual environment, and run a preset from an empty folder. This machine has no GPU, so the run happens
and is REJECTED because NVML could not start."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_the_readme_says_how_to_get_the_source_and_that_no_index_has_it():
    assert len(README.encode()) < 12_000
    assert "not on a package index" in README
    assert "git clone <the repository's URL> pytest-gpuaccept\n    python -m pip install ./pytest-gpuaccept" in README
    assert "python -m pip install /path/to/pytest-gpuaccept" in README
    assert "\n    pytest --contract=h100-sxm5-8gpu\n" in README
    assert "\n    ./test.sh\n" in README  # the command .ci/run runs
    for section in ("Getting it and installing", "The one command", "Reading the verdict", "The contract in brief",
                    "Evidence and signing", "A cluster", "Developing"):
        assert f"\n## {section}\n" in README


def test_every_link_in_the_readme_and_docs_leads_to_a_file():
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.name} links to {target}"


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver: the verdict differs")
@pytest.mark.xdist_group("fresh-install")  # the install shared with the demo's test: made once
def test_the_first_command_from_an_empty_folder_as_a_new_user(fresh_install, tmp_path):
    # The README's install line: a clone URL cannot be reached from here, so the install is the README's other line,
    # `python -m pip install /path/to/pytest-gpuaccept`, into a fresh venv (conftest's fresh_install).
    venv, env = fresh_install.venv, fresh_install.env
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(["pytest", "--contract=h100-sxm5-8gpu"], cwd=empty, env=env, capture_output=True, text=True,
                          timeout=600)

    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # rejected, not a usage error (4)
    lines = done.stdout.rstrip().splitlines()
    assert lines[-1].startswith("gpuaccept verdict: REJECTED")
    cause = next(n for n, line in enumerate(lines) if line.startswith("gpuaccept: NVML could not start"))
    assert "checks not measured" in lines[cause]
    assert cause < lines.index(next(line for line in lines if "= FAILURES =" in line))  # the cause comes first
    results = json.loads((empty / "gpuaccept-results.json").read_text())
    assert results["verdict"] == "rejected" and results["complete"] is True
    assert "foreign_code" not in results, results["foreign_code"]  # a fresh venv, pip's install: nothing foreign
    assert results["code_audit"]["this_package"].startswith("installed: pytest-gpuaccept==")
    assert results["contract"]["path"].endswith("h100_sxm5_8gpu.yaml")
    assert str(venv) in results["contract"]["path"]  # the installed package's preset, not this checkout's
    assert any("NVML could not start" in check["message"] for check in results["checks"])
    assert all(check["outcome"] in ("failed", "not_measured") for check in results["checks"])
    assert "REJECTED" in (empty / "gpuaccept-report.html").read_text()
    assert (empty / "gpuaccept-evidence" / "manifest.json").exists()
