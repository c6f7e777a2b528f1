"""Foreign code cannot judge: find code of this package replaced at run time, and list what else was loaded.

Conftest files are not loaded when the shipped suites run (the plugin sets --noconftest), and judges
are bound in the clause definitions at import. Every way other code gets into the process (plugins, hooks,
.pth files, sitecustomize, every module's file) is audited by foreign.py; what this module adds is a plugin
replacing a function or method of this package, or one of its fixtures, which is found here and rejects the
run; every plugin and conftest that was loaded is listed with its SHA-256 so that a reader of the report can tell.
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


# Libraries whose classes and callables this package's modules name (packaging's SpecifierSet, pytest's
# fixture definitions): an attribute of ours may be one of theirs, never anybody else's.
_LIBRARIES = frozenset({"builtins", "typing_extensions", "pytest", "_pytest", "pluggy", "yaml", "packaging",
                        "pytest_html", "pynvml", "jinja2", "markupsafe"})


def _library(module: str) -> bool:
    top = module.split(".")[0]
    return top in _LIBRARIES or top in sys.stdlib_module_names


def _replaced_attribute(name: str, attr: str, value: Any) -> str | None:
    """Why a module-level name of this package now holds someone else's code, whatever module that code claims:
    a function defined in a plugin keeps its plugin's __module__, so a check that only looked at names
    whose __module__ is ours missed `helpers._sampled = lambda ...`."""
    if not callable(value):
        return None  # a module, a constant, a record: nothing below can name it (each asks for a callable)
    if inspect.isclass(value):
        owner = str(getattr(value, "__module__", ""))
        if owner == PACKAGE or owner.startswith(PACKAGE + ".") or _library(owner):
            return None  # ours (their methods are looked at in the module that defines them), or a library's
        return f"{name}.{attr} was replaced by the class {owner}.{value.__qualname__}"
    func = value.func if isinstance(value, functools.partial) else value
    if inspect.isfunction(func) or (callable(func) and hasattr(func, "__wrapped__")):
        unwrapped = inspect.unwrap(func)
        if inspect.isfunction(unwrapped) and not is_ours(unwrapped):
            return f"{name}.{attr} was replaced by code from {unwrapped.__code__.co_filename}"
        return None
    if callable(func) and not inspect.isbuiltin(func) and not _library(type(func).__module__):
        return f"{name}.{attr} was replaced by a {type(func).__module__}.{type(func).__qualname__} object"
    return None


def replaced_code() -> list[str]:
    """Functions, classes and methods of this package (and the clauses' judges) whose code lives elsewhere."""
    problems = []
    ours = sorted((name, module) for name, module in list(sys.modules.items())
                  if name == PACKAGE or name.startswith(PACKAGE + "."))
    for name, module in ours:
        if module is None or name.endswith("__main__"):
            continue
        for attr, value in list(vars(module).items()):
            replaced = _replaced_attribute(name, attr, value)
            if replaced:
                problems.append(replaced)
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
