"""`python -I -m pytest_gpuaccept verify BUNDLE` and `sign BUNDLE --key KEY`: check and sign an evidence bundle.
`replay BUNDLE --contract FILE --out DIR`: judge a bundle's raw evidence again, against this contract, isolated.
`record-nvml OUT.json`: record this host's NVML readings in the format `--gpuaccept-nvml` reads.
`contracts [--copy NAME [DEST]]`: list the shipped example contracts (presets), or copy one to edit.
`doctor --contract FILE|PRESET`: what each clause needs on this host, what is missing, how to get it.
`compare OLD NEW`: what got worse between two verified bundles of the same hosts (compare.py).
`node-check --contract FILE --profile P`: the per-node clauses as a scheduler's check: one line, the profile's code.
`demo [DIR] [--rejected]`: a SIMULATED HGX H100 8-GPU host judged into DIR, and its bundle verified (demo/)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
from pathlib import Path

from .bundle import SYSTEM_SSH_KEYGEN, SshKeygen, system_ssh_keygen
from .presets import describe, find, key, presets, resolve, suggest, unknown

# The contract, the doctor (every clause module), the cluster's node side and the NVML probe are imported by the
# command that needs them: together about a second that `verify` and `sign` do not need.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gpuaccept", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _bundle_commands(commands)
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
    _lang_option(doctor)
    node = commands.add_parser("node-run", help="(started by a cluster run on each node) run the per-node suite here "
                                                "and print its bundle on stdout")
    node.add_argument("--node", required=True, help="this node's name, as the scheduler knows it")
    node.add_argument("--contract-b64", required=True, help="the contract's bytes, base64")
    node.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the login node's options")
    _compare_command(commands)
    _node_check_command(commands)
    _demo_command(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo  # noqa: PLC0415 (lazy: see the imports)

        return run_demo(args.dir, args.rejected, args.lang)
    if args.command == "compare":
        from .compare import run as run_compare  # noqa: PLC0415 (lazy: see the imports)

        return run_compare(args.old, args.new, args.json, args.html, args.max_regression, args.allow_different)
    if args.command == "node-check":
        return run_node_check(args)
    if args.command == "node-run":
        from .cluster.node import node_run  # noqa: PLC0415 (lazy: see the imports)

        return node_run(args.node, args.contract_b64, [a for a in args.pytest_args if a != "--"][:64])
    if args.command == "doctor":
        return run_doctor(args.contract, args.nvml, args.lang)
    if args.command == "contracts":
        return contracts(args.copy, args.dest)
    if args.command == "record-nvml":
        return record_nvml(args.out, args.samples)
    if args.command == "sign":
        return run_sign(args.folder, args.key, args.ssh_keygen)
    if args.command == "replay":
        from .verifier import run_replay  # noqa: PLC0415 (lazy: see the imports)

        return run_replay(args.folder, args.contract, args.out)
    from .verifier import run_verify  # noqa: PLC0415 (lazy: see the imports)

    return run_verify(args.folder, args.report, args.allowed_signers, args.rejudged, args.contract, args.ssh_keygen,
                      args.lang)


def _lang_option(command: argparse.ArgumentParser) -> None:
    from .i18n import DEFAULT, LANGS  # noqa: PLC0415 (small: the language names)

    command.add_argument("--gpuaccept-lang", dest="lang", default=DEFAULT, choices=LANGS, metavar="LANG",
                         help=f"the language it speaks: {' or '.join(LANGS)} (default {DEFAULT})")


def _ssh_keygen_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--ssh-keygen", type=_keygen, default=None, metavar="PATH",
                         help="the ssh-keygen to sign or check signatures with (default: the system's, "
                              f"{' or '.join(SYSTEM_SSH_KEYGEN)}; never one on PATH or named by a bundle)")


def _keygen(value: str) -> SshKeygen:
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"--ssh-keygen {value}: no such file")
    return SshKeygen(str(Path(value).absolute()), "named with --ssh-keygen")


def run_sign(folder: Path, key_file: Path, named: SshKeygen | None) -> int:
    from .bundle import sign  # noqa: PLC0415 (lazy: see the imports)
    from .bundle_files import Refused  # noqa: PLC0415 (lazy: see the imports)

    keygen = named or system_ssh_keygen()
    try:
        target = sign(folder, key_file, keygen)
    except (ValueError, OSError, Refused) as exc:
        print(f"FAIL {exc} (ssh-keygen: {keygen})")
        return 1
    print(f"signed: {target} (ssh-keygen: {keygen})")
    return 0


def _bundle_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """verify, sign and replay: the commands a buyer runs on a bundle the vendor made (verifier.py)."""
    check = commands.add_parser("verify", help="verify a bundle (the report's folder, or gpuaccept-evidence/)")
    check.add_argument("folder", type=Path)
    check.add_argument("--report", type=Path, default=None, help="the HTML report, if not in the bundle folder")
    check.add_argument("--allowed-signers", type=_allowed_signers, default=None,
                       help="an OpenSSH allowed_signers file: the bundle must carry valid signatures by these keys")
    check.add_argument("--rejudged", type=Path, default=None, metavar="DIR",
                       help="keep the re-judging run's own report and results in DIR (a new or empty folder outside "
                            "the bundle)")
    check.add_argument("--contract", type=Path, default=None, metavar="FILE",
                       help="the contract the bundle must have been judged against (fails naming both SHA-256s)")
    _ssh_keygen_option(check)
    _lang_option(check)
    signing = commands.add_parser("sign", help="sign a bundle's manifest with an SSH key (ssh-keygen -Y sign)")
    signing.add_argument("folder", type=Path)
    signing.add_argument("--key", type=Path, required=True, help="the private key (its .pub beside it)")
    _ssh_keygen_option(signing)
    replay = commands.add_parser("replay", help="judge a bundle's raw evidence again against a contract, isolated "
                                                "from the bundle and this folder (no tool runs)")
    replay.add_argument("folder", type=Path)
    replay.add_argument("--contract", type=Path, default=None, metavar="FILE",
                        help="the contract to judge against (default: the bundle's own copy)")
    replay.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="a new or empty folder outside the bundle for the report, results and evidence")


def _compare_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compared = commands.add_parser("compare", help="what got worse between two bundles of the same hosts (both verified first)")
    compared.add_argument("old", type=Path)
    compared.add_argument("new", type=Path)
    compared.add_argument("--json", type=Path, default=None, metavar="FILE", help="write the comparison as JSON")
    compared.add_argument("--html", type=Path, default=None, metavar="FILE", help="write it as a page in the report's style")
    compared.add_argument("--max-regression", type=float, default=0.05, metavar="FRACTION",
                          help="the most a measured value may move the worse way (default 0.05: 5 %%)")
    compared.add_argument("--allow-different", action="store_true",
                          help="compare bundles of different hosts, GPUs, contracts or modes (refused otherwise)")


def _demo_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser("demo", help="a SIMULATED HGX H100 8-GPU host from shipped recordings, judged into DIR "
                                            "and verified: what an ACCEPTED (or --rejected) bundle looks like")
    demo.add_argument("dir", nargs="?", type=Path, default=None,
                      help="a new or empty folder for the bundle (default ./gpuaccept-demo)")
    demo.add_argument("--rejected", action="store_true", help="a host with a PCIe GPU and a slow NVLink instead")
    demo.add_argument("--gpuaccept-lang", dest="lang", default="en", metavar="LANG",
                      help="the language of the report and the verdict lines (en, zh-CN)")


def _node_check_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .nodecheck import PROFILES, RUN_TIMEOUT_S  # noqa: PLC0415 (small: no clause module, no pytest)

    check = commands.add_parser("node-check", help="the contract's per-node clauses as a scheduler's check: one line, "
                                                   "the profile's exit code, a sealed bundle (docs/node-check.md)")
    check.add_argument("--contract", type=Path, required=True, help="the contract (its node_check.quick sections)")
    check.add_argument("--profile", required=True, choices=list(PROFILES), help="whose protocol the line and code follow")
    check.add_argument("--out", type=Path, default=None, metavar="DIR",
                       help="a new or empty folder for the bundle (default: a fresh one under /var/tmp/gpuaccept-node-check)")
    check.add_argument("--drain", action="store_true", help="drain this node (scontrol, reason '[gpuaccept] ...') "
                                                            "unless it passed; a node drained by someone else is left")
    check.add_argument("--undrain-if-pass", action="store_true",
                       help="resume this node if it passed and was drained with a '[gpuaccept]' reason")
    check.add_argument("--gpuaccept-nvml", dest="nvml", type=Path, default=None, metavar="FILE",
                       help="read NVML from this recording (a SIMULATED check)")
    check.add_argument("--gpuaccept-sysfs", dest="sysfs", type=Path, default=None, metavar="DIR",
                       help="where the host's sysfs is mounted (default /sys)")
    check.add_argument("--node", default=None, help="this node's name in the scheduler (default $SLURMD_NODENAME, "
                                                    "else the short host name)")
    check.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, metavar="SECONDS",
                       help=f"the judging run's limit (default {RUN_TIMEOUT_S:g}); past it: not run")


def run_node_check(args: argparse.Namespace) -> int:
    from .nodecheck import Request, node_check  # noqa: PLC0415 (lazy: see the imports)

    line, code = node_check(Request(args.contract, args.profile, args.out, args.drain, args.undrain_if_pass, args.nvml,
                                    args.sysfs, args.node, args.timeout))
    print(line, flush=True)
    return code


def _allowed_signers(value: str) -> Path:
    """A usage error, not a failed signature, when the file is not there."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"allowed-signers file {path} {'is not a file' if path.exists() else 'does not exist'}")
    return path


def run_doctor(name: str, nvml: Path | None, lang: str = "en") -> int:
    from .contract import ContractError, load_contract, not_a_contract  # noqa: PLC0415 (lazy: see the imports)
    from .doctor import diagnose, render  # noqa: PLC0415 (lazy: see the imports)

    mistyped = unknown(name) if name.strip() else None
    nothing = mistyped or not_a_contract(resolve(name))
    if nothing is not None:
        print(nothing)
        return 4
    try:
        contract = load_contract(resolve(name))
    except ContractError as exc:
        print("invalid contract:\n" + "\n".join(exc.problems))
        return 4
    found = diagnose(contract, nvml)
    print(render(found, contract, lang))
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
