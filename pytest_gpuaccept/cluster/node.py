"""The per-node half of a cluster run: `python -m pytest_gpuaccept node-run`, started on each node by the
engine. It runs the per-node suite on this node in a fresh folder (the contract as the login node read
it, with --gpuaccept-node so that the `cluster` section is left to the login node), then prints the
node's bundle on stdout (bundles.encode) and removes the folder: nothing is left for a shared
filesystem to carry, and nothing the node had before is read.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .bundles import encode, pack

OUTPUT_FILE = "pytest-output.txt"  # the node's own pytest output, kept in its bundle


def node_run(node: str, contract_b64: str, pytest_args: list[str]) -> int:
    try:
        contract = base64.b64decode(contract_b64, validate=True)
    except (binascii.Error, ValueError):
        print("gpuaccept node-run: --contract-b64 is not base64", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpuaccept-node-"))
    try:
        (work / "contract.yaml").write_bytes(contract)
        out = work / "bundle"
        out.mkdir()
        argv = [sys.executable, "-m", "pytest", f"--contract={work / 'contract.yaml'}", f"--gpuaccept-node={node}",
                f"--html={out / 'gpuaccept-report.html'}", f"--gpuaccept-json={out / 'gpuaccept-results.json'}",
                "-p", "no:cacheprovider", "-q", *pytest_args]
        with (out / OUTPUT_FILE).open("wb") as log:
            # The folder is fresh and ours: `python -m` puts it first on sys.path, and it holds no code.
            code = subprocess.run(argv, cwd=work, stdout=log, stderr=subprocess.STDOUT, check=False,
                                  env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).returncode
        if not (out / "gpuaccept-results.json").is_file():
            print(f"gpuaccept node-run: the per-node run on {node} wrote no results (pytest exit code {code}); "
                  f"its output: {(out / OUTPUT_FILE).read_text(errors='replace')[-2000:]}", file=sys.stderr)
        for line in encode(node, pack(out)):
            print(line)
        sys.stdout.flush()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
