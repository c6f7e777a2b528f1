"""`python -m pytest_gpuaccept verify DIR`: check an evidence bundle against its manifest and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .bundle import verify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gpuaccept", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("verify", help="verify an evidence bundle (the folder of the report, or gpuaccept-evidence/)")
    check.add_argument("folder", type=Path)
    check.add_argument("--report", type=Path, default=None, help="the HTML report, if not beside the folder")
    args = parser.parse_args(argv)
    result = verify(args.folder, args.report)
    for problem in result.problems:
        print(f"FAIL {problem}")
    if result.ok:
        print(f"OK: every file matches the manifest; manifest SHA-256 {result.manifest_sha256}")
        return 0
    print(f"bundle does NOT verify ({len(result.problems)} problems); manifest SHA-256 {result.manifest_sha256}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
