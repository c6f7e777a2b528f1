"""The example contracts shipped with the package, named by preset: `--contract=h100-sxm5-8gpu`.

A preset's name is its file's stem; `-` and `_` are alike in it (h100-sxm5-8gpu, h100_sxm5_8gpu), so is case.
"""

from __future__ import annotations

import difflib
from pathlib import Path


def folder() -> Path | None:
    """Inside the package when installed, beside it in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "contracts", here.parent / "contracts"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return None


def presets() -> dict[str, Path]:
    """Preset name (the file's stem, dashes for underscores) -> the contract file."""
    where = folder()
    return {key(p.stem): p for p in sorted(where.glob("*.yaml"))} if where else {}


def key(name: str) -> str:
    """A preset name as presets are compared: no `.yaml`, `-` for `_`, lower case."""
    return name.removesuffix(".yaml").replace("_", "-").lower()


def find(name: str) -> Path | None:
    """The preset's contract file, or None."""
    return presets().get(key(name))


def resolve(value: str) -> str:
    """A path that exists stays itself; a preset name becomes its file; anything else is returned as given
    (loading it then says the file is not found, and lists the presets)."""
    if Path(value).exists():
        return value
    found = find(value)
    return str(found) if found else value


def suggest(name: str) -> str:
    """For a name that is no preset: the presets it may have meant (those it begins, then difflib's closest two),
    and every preset."""
    names = list(presets())
    close = [n for n in names if n.startswith(key(name))] + difflib.get_close_matches(key(name), names, n=2)
    meant = list(dict.fromkeys(close))[:2]  # in order, once each
    return (f"did you mean {' or '.join(meant)}? " if meant else "") + f"the shipped presets are: {', '.join(names) or 'none'}"


def unknown(value: str) -> str | None:
    """What to say of a --contract value that is a bare name (no folder, no .yaml) naming neither a file here nor
    a preset; None otherwise (a path that is not there keeps the loader's `file not found`)."""
    if Path(value).exists() or find(value) is not None or "/" in value or value.endswith((".yaml", ".yml")):
        return None
    return f"{value}: no such preset, nor a contract file here; {suggest(value)}"


def describe(path: Path) -> str:
    """The contract's `description:` line, for the list."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip().strip('"')
    return ""
