"""`python -m pytest_gpuaccept verify BUNDLE` and `sign BUNDLE --key KEY`: check and sign an evidence bundle.
`record-nvml OUT.json`: record this host's NVML readings in the format `--gpuaccept-nvml` reads.
`contracts [--copy NAME [DEST]]`: list the shipped example contracts (presets), or copy one to edit.
`doctor --contract FILE|PRESET`: what each clause needs on this host, what is missing, how to get it.
`compare OLD NEW`: what got worse between two verified bundles of the same hosts (compare.py)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
from pathlib import Path

from .bundle import SIGNATURES, check_signatures, evidence_folder, sign, signature_files, verify
from .presets import describe, find, key, presets, resolve, suggest, unknown
from .rejudge import RECOMPUTED, rejudge

# The contract, the doctor (every clause module), the cluster's node side and the NVML probe are imported by the
# command that needs them: together about a second that `verify` and `sign` do not need.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gpuaccept", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("verify", help="verify a bundle (the report's folder, or gpuaccept-evidence/)")
    check.add_argument("folder", type=Path)
    check.add_argument("--report", type=Path, default=None, help="the HTML report, if not in the bundle folder")
    check.add_argument("--allowed-signers", type=_allowed_signers, default=None,
                       help="an OpenSSH allowed_signers file: the bundle must carry valid signatures by these keys")
    check.add_argument("--rejudged", type=Path, default=None, metavar="DIR",
                       help="keep the re-judging run's own report and results in DIR (outside the bundle)")
    signing = commands.add_parser("sign", help="sign a bundle's manifest with an SSH key (ssh-keygen -Y sign)")
    signing.add_argument("folder", type=Path)
    signing.add_argument("--key", type=Path, required=True, help="the private key (its .pub beside it)")
    record = commands.add_parser("record-nvml", help="record this host's NVML readings (docs/nvml-recording.md)")
    record.add_argument("out", type=Path)
    record.add_argument("--samples", type=float, default=5.0, metavar="SECONDS",
                        help="also sample every GPU for this long, as under a load (default 5; 0: none)")
    listing = commands.add_parser("contracts", help="list the shipped example contracts, or copy one (--copy NAME)")
    listing.add_argument("--copy", metavar="NAME", default=None, help="copy this preset to DEST (default NAME.yaml here)")
    listing.add_argument("dest", nargs="?", type=Path, default=None)
    doctor = commands.add_parser("doctor", help="what each clause of a contract needs here, and how to get what is missing")
    doctor.add_argument("--contract", required=True, help="a contract file or a preset name")
    doctor.add_argument("--gpuaccept-nvml", dest="nvml", type=Path, default=None,
                        help="judge NVML as available from this recording (as a simulated run would)")
    node = commands.add_parser("node-run", help="(started by a cluster run on each node) run the per-node suite here "
                                                "and print its bundle on stdout")
    node.add_argument("--node", required=True, help="this node's name, as the scheduler knows it")
    node.add_argument("--contract-b64", required=True, help="the contract's bytes, base64")
    node.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the login node's options")
    _compare_command(commands)
    args = parser.parse_args(argv)
    if args.command == "compare":
        from .compare import run as run_compare  # noqa: PLC0415 (lazy: see the imports)

        return run_compare(args.old, args.new, args.json, args.html, args.max_regression)
    if args.command == "node-run":
        from .cluster.node import node_run  # noqa: PLC0415 (lazy: see the imports)

        return node_run(args.node, args.contract_b64, [a for a in args.pytest_args if a != "--"][:64])
    if args.command == "doctor":
        return run_doctor(args.contract, args.nvml)
    if args.command == "contracts":
        return contracts(args.copy, args.dest)
    if args.command == "record-nvml":
        return record_nvml(args.out, args.samples)
    if args.command == "sign":
        from .hardening import ssh_keygen_for  # noqa: PLC0415 (lazy: see the imports)

        keygen = ssh_keygen_for(args.folder)  # never the one on PATH
        try:
            target = sign(args.folder, args.key, keygen)
        except (ValueError, OSError) as exc:
            print(f"FAIL {exc} (ssh-keygen: {keygen})")
            return 1
        print(f"signed: {target} (ssh-keygen: {keygen})")
        return 0
    return run_verify(args.folder, args.report, args.allowed_signers, args.rejudged)


def _compare_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compared = commands.add_parser("compare", help="what got worse between two bundles of the same hosts (both verified first)")
    compared.add_argument("old", type=Path)
    compared.add_argument("new", type=Path)
    compared.add_argument("--json", type=Path, default=None, metavar="FILE", help="write the comparison as JSON")
    compared.add_argument("--html", type=Path, default=None, metavar="FILE", help="write it as a page in the report's style")
    compared.add_argument("--max-regression", type=float, default=0.05, metavar="FRACTION",
                          help="the most a measured value may move the worse way (default 0.05: 5 %%)")


def _allowed_signers(value: str) -> Path:
    """A usage error, not a failed signature, when the file is not there."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"allowed-signers file {path} {'is not a file' if path.exists() else 'does not exist'}")
    return path


def run_verify(folder: Path, report: Path | None, allowed_signers: Path | None, rejudged: Path | None = None) -> int:
    """Every digest and the verdict; the signatures too when `allowed_signers` says whose keys count.
    Without it a signature is never called valid: the output says it was not checked, and how to check it.
    Then the verdict that counts: every clause re-judged from the raw evidence in a process of its own."""
    if rejudged is not None and folder.resolve() in (rejudged.resolve(), *rejudged.resolve().parents):
        print(f"FAIL --rejudged {rejudged} is inside the bundle {folder}: a re-judge never writes inside it")
        return 2
    result = verify(folder, report)
    problems = list(result.problems)
    signatures = signature_files(folder)
    keygen = None
    if allowed_signers is not None:
        from .hardening import ssh_keygen_for  # noqa: PLC0415 (lazy: see the imports)

        keygen = ssh_keygen_for(folder)  # never the one on PATH
    checked = [] if keygen is None or allowed_signers is None else check_signatures(folder, allowed_signers, keygen)
    if allowed_signers is not None and not signatures:
        problems.append(f"no signature in {evidence_folder(folder) / SIGNATURES}")
    problems += [signature.problem for signature in checked if signature.problem]
    # Judging evidence that does not verify would be judging its editor: the re-judge needs a bundle that does.
    recomputed = rejudge(evidence_folder(folder), rejudged) if result.ok else None
    problems += [f"re-judged: {line}" for line in recomputed.problems] if recomputed else []
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        print(f"bundle does NOT verify ({len(problems)} problems); manifest SHA-256 {result.manifest_sha256}")
    else:
        print(f"OK: every file matches the manifest; manifest SHA-256 {result.manifest_sha256}")
        for signature in checked:  # a good signature over a bundle that does not verify vouches for nothing
            print(f"signed by: {signature.signer} with {signature.key or 'a key'} in {allowed_signers} "
                  f"({signature.file.relative_to(folder)} verified)")
    if recomputed is not None and recomputed.verdict is not None:
        agrees = "agrees with" if not recomputed.problems else "DIFFERS from"
        print(f"{RECOMPUTED}: {recomputed.verdict.upper()} over {recomputed.checks} checks, which {agrees} the "
              f"bundle's results ({str(recomputed.recorded_verdict).upper()})")
    if allowed_signers is None and signatures:
        names = ", ".join(str(sig.relative_to(folder)) for sig in signatures)
        print(f"signatures NOT checked: {names} (who signed is not known; to check: "
              f"python -m pytest_gpuaccept verify {folder} --allowed-signers FILE)")
    if keygen is not None:
        print(f"signatures checked with ssh-keygen: {keygen}")
    return 1 if problems else 0


def run_doctor(name: str, nvml: Path | None) -> int:
    from .contract import ContractError, load_contract  # noqa: PLC0415 (lazy: see the imports)
    from .doctor import diagnose, render  # noqa: PLC0415 (lazy: see the imports)

    mistyped = unknown(name)
    if mistyped is not None:
        print(mistyped)
        return 4
    try:
        contract = load_contract(resolve(name))
    except ContractError as exc:
        print("invalid contract:\n" + "\n".join(exc.problems))
        return 4
    found = diagnose(contract, nvml)
    print(render(found, contract))
    return 1 if any(n.found is None for n in found) else 0


def contracts(name: str | None, dest: Path | None) -> int:
    """`pytest --contract=NAME` runs a preset as it is; copy one to write the vendor's own figures into it."""
    if name is None:
        for preset, path in presets().items():
            print(f"{preset:24} {describe(path)}")
        print("\nrun one: pytest --contract=NAME    copy one to edit: python -m pytest_gpuaccept contracts --copy NAME")
        return 0
    source = find(name)
    if source is None:
        print(f"{name}: no such preset; {suggest(name)}")
        return 2
    target = dest or Path(f"{key(name)}.yaml")
    if target.exists():
        print(f"{target} exists: not overwritten")
        return 1
    shutil.copyfile(source, target)
    print(f"copied {key(name)} to {target}")
    return 0


def record_nvml(out: Path, seconds: float) -> int:
    """The host reading, and `seconds` of samples (utilisation, clocks, power, Xid events, health) of every GPU."""
    from .probes import nvml  # noqa: PLC0415 (lazy: see the imports)

    reading = nvml.read_host()
    if seconds > 0 and not reading.get("error"):
        reading[nvml.RECORDED_SAMPLES] = nvml.sample_gpus(len(reading["gpus"]), 0.15, seconds, threading.Event())
    out.write_text(json.dumps(reading, indent=1) + "\n")
    gpus = ", ".join(f"GPU{g['index']} {g['name']} ({g.get('pci_device_id')})" for g in reading["gpus"])
    print(f"{out}: {reading.get('error') or gpus or 'no GPU'}")
    return 1 if reading.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
