"""The example contracts shipped with the package, named by preset: `--contract=h100-sxm5-8gpu`."""

from __future__ import annotations

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
    return {p.stem.replace("_", "-"): p for p in sorted(where.glob("*.yaml"))} if where else {}


def resolve(value: str) -> str:
    """A path that exists stays itself; a preset name becomes its file; anything else is returned as given
    (loading it then says the file is not found, and lists the presets)."""
    if Path(value).exists():
        return value
    found = presets().get(value.removesuffix(".yaml").replace("_", "-"))
    return str(found) if found else value


def describe(path: Path) -> str:
    """The contract's `description:` line, for the list."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip().strip('"')
    return ""
