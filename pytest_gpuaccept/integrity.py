"""Foreign code cannot judge: find code of this package replaced at run time, and list what else was loaded.

Conftest files are not loaded when the shipped suites run (the plugin sets --noconftest), and judges
are bound in the clause records at import. What remains possible, a plugin replacing a function or
method of this package, or one of its fixtures, is found here and rejects the run; every plugin and
conftest that was loaded is listed with its SHA-256 so that a reader of the report can tell.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterable

PACKAGE = "pytest_gpuaccept"
_HOME = Path(__file__).resolve().parent
_PATHS = sysconfig.get_paths()
_OURS = os.path.join(str(_HOME), "")
_STDLIB = tuple(os.path.join(os.path.realpath(_PATHS[key]), "") for key in ("stdlib", "platstdlib"))
# Where pip installs anyone's package: inside a virtual environment, "platstdlib" is the environment's
# lib/pythonX.Y, and site-packages is under it. Code from there is a plugin's, not the standard library's.
_INSTALLED = tuple(os.path.join(os.path.realpath(_PATHS[key]), "") for key in ("purelib", "platlib"))
# Methods that @dataclass writes with exec() (and a NamedTuple's __new__, with eval()): their code says
# "<string>", and their name is the dunder's.
_GENERATED = frozenset({"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__",
                        "__lt__", "__le__", "__gt__", "__ge__", "__match_args__", "__new__"})


def is_ours(func: Any, owner: type | None = None, name: str = "") -> bool:
    """Code from this package, from the standard library (enum, typing, dataclasses), or made by @dataclass."""
    unwrapped = inspect.unwrap(func) if hasattr(func, "__wrapped__") else func  # 1,700 a run: unwrap only wrappers
    code = getattr(unwrapped, "__code__", None)
    if code is None:
        return True  # builtins and C functions: not something a plugin writes
    if code.co_filename == "<string>":
        return owner is not None and name in _GENERATED and unwrapped.__name__ == name
    return _trusted_file(code.co_filename)


@functools.lru_cache(maxsize=None)
def _trusted_file(filename: str) -> bool:
    """This package's, or the standard library's but not an installed package's (symbolic links resolved)."""
    real = os.path.realpath(filename)
    if real.startswith(_OURS):
        return True
    return real.startswith(_STDLIB) and not real.startswith(_INSTALLED) and \
        not any(part in ("site-packages", "dist-packages") for part in real.split(os.sep))


def replaced_code() -> list[str]:
    """Functions and methods of this package (and the clause records' judges) whose code lives elsewhere."""
    problems = []
    for name, module in sorted(sys.modules.items()):
        if module is None or not (name == PACKAGE or name.startswith(PACKAGE + ".")) or name.endswith("__main__"):
            continue
        for attr, value in list(vars(module).items()):
            if inspect.isfunction(value) and getattr(value, "__module__", "") == name and not is_ours(value):
                problems.append(f"{name}.{attr} was replaced by code from {inspect.unwrap(value).__code__.co_filename}")
            if inspect.isclass(value) and value.__module__ == name:
                for method, member in list(vars(value).items()):
                    func = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                    if inspect.isfunction(func) and not is_ours(func, value, method):
                        problems.append(f"{name}.{attr}.{method} was replaced by code from "
                                        f"{inspect.unwrap(func).__code__.co_filename}")
    registry = sys.modules.get(f"{PACKAGE}.clauses.registry")
    for clause in getattr(registry, "CLAUSES", ()):
        if not is_ours(clause.judge):
            problems.append(f"the judge of clause {clause.key} was replaced by code from "
                            f"{inspect.unwrap(clause.judge).__code__.co_filename}")
    return problems


def _sha256(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def loaded_plugins(plugins: Iterable[tuple[str, Any]], distributions: dict[int, str]) -> list[dict[str, str]]:
    """Every plugin module pytest loaded but pytest's own and ours: name, file, SHA-256, distribution."""
    listed = []
    for name, plugin in plugins:
        file = getattr(plugin, "__file__", None)
        module = getattr(plugin, "__name__", "")
        if not file or module.startswith(("_pytest.", "pytest_gpuaccept")) or module in ("pytest", "_pytest"):
            continue
        listed.append({"name": str(name), "file": str(file), "sha256": _sha256(file),
                       "distribution": distributions.get(id(plugin), "conftest" if file.endswith("conftest.py") else "")})
    return sorted(listed, key=lambda p: p["file"])
