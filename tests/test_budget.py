"""What the plugin may cost (benchmarks/README.md): its budget of 1.5 s on the 8-GPU benchmark contract is at most
2 % of the tools' time of a real 8-GPU run; and nothing heavy is imported in a pytest run without --contract.
The budget's own figure is timed by benchmarks/overhead.py, not here: a timed assertion on a shared 2-core machine
is a coin toss, not a gate (issue 40)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BUDGET_S = 1.5  # the plugin's own time on the benchmark contract, on the development machine
SHARE = 0.02  # of the tools' time of a real run
REALISTIC_TOOLS_S = 279.0  # the shipped H100 contract with tools that take what the real ones take (benchmarks/README.md)


def test_the_budget_is_at_most_two_percent_of_a_real_runs_tool_time():
    readme = (REPO / "benchmarks" / "README.md").read_text()
    assert f"{REALISTIC_TOOLS_S:.0f} s" in readme and f"{BUDGET_S} s" in readme
    assert BUDGET_S <= SHARE * REALISTIC_TOOLS_S  # 1.5 s <= 5.58 s
    # Even counting only the loads the shipped contract itself asks for (the GEMM's duration, the utilisation
    # window and its warm-up), with every tool taking no time at all, the budget is within 2 %.
    contract = yaml.safe_load((REPO / "contracts" / "h100_sxm5_8gpu.yaml").read_text())

    def seconds(text: str) -> float:
        value, unit = text.split()
        assert unit == "s"
        return float(value)

    loads = (seconds(contract["compute"]["duration"]) + seconds(contract["utilisation"]["warmup"])
             + seconds(contract["utilisation"]["duration"]))
    assert loads == 100.0
    assert BUDGET_S <= SHARE * loads


def _entry_points() -> list[str]:
    section = (REPO / "pyproject.toml").read_text().split("[project.entry-points.pytest11]", 1)[1].split("\n[", 1)[0]
    return re.findall(r'^\w+\s*=\s*"([\w.]+)"', section, re.M)


def test_a_pytest_run_without_a_contract_imports_nothing_heavy(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    code = ("import json, sys, pytest; rc = pytest.main(['-q', '-p', 'no:cacheprovider', 'test_plain.py']); "
            "print(json.dumps([rc, sorted(sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    rc, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert rc == 0, done.stdout
    ours = {name for name in modules if name.startswith("pytest_gpuaccept")}
    assert ours == {"pytest_gpuaccept", *_entry_points()}, sorted(ours)
    heavy = [name for name in modules if name.split(".")[0] in ("yaml", "pynvml")]
    assert heavy == [], heavy
