"""Foreign code in the judging process: every way code can get into it besides Python's, pytest's, pytest-html's,
pytest-metadata's, pytest-xdist's and this package's, and every module in it accounted for by its file.

The ways in: a pytest plugin (an entry point, `-p`, PYTEST_PLUGINS, a conftest, one registered at run time), a
hook implemented by code from elsewhere, a `.pth` file that runs code at Python's start, a sitecustomize or
usercustomize, and the environment variables that make Python read code from elsewhere. Each is foreign unless
the contract's `tools.allow_plugins` names it with the SHA-256 of its file. Every module's file must be vouched
for: an installed distribution's RECORD with the same SHA-256, dpkg's MD5 where the OS keeps one, the
interpreter's standard library, or this package's own folder. The rules are plain functions over plain records;
`Files` vouches for a file (each hashed once a process) and `audit` reads this process.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import importlib.metadata
import inspect
import io
import os
import re
import site
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

OWN_DISTRIBUTION = "pytest-gpuaccept"
# Whose code may run in the judging process without being named in the contract: pytest, the plugins this one
# depends on or works with, and this one (pluggy and the libraries they import are accounted for as modules).
ALLOWED_DISTRIBUTIONS = frozenset({"pytest", "pytest-html", "pytest-metadata", "pytest-xdist", OWN_DISTRIBUTION})
# Environment variables that make Python run or read code from elsewhere (python -I ignores them, but the
# processes the run starts may not).
ENVIRONMENT = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX")
# .pth files an honest environment has that run code, by their exact content: setuptools' (pip brings it into
# every venv of Python 3.11 and before; Debian's python3-setuptools too), whose shim lets setuptools' own
# distutils be imported (49.x-59.x read 'stdlib' as the default, later versions 'local').
KNOWN_PTH = {
    ("import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, '" + default + "') == 'local'; "
     "enabled and __import__('_distutils_hack').add_shim(); ").encode() + end: "setuptools' distutils-precedence.pth"
    for default in ("local", "stdlib") for end in (b"", b"\n")
}
CUSTOMIZE = ("sitecustomize", "usercustomize")
HOME = os.path.dirname(os.path.abspath(__file__))  # this package's folder, as it was imported
DPKG = Path("/var/lib/dpkg")


def normalized(distribution: str) -> str:
    """A distribution's name as its index compares names (PEP 503): pytest_html, pytest.html are pytest-html."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


# ------------------------------------------------------------------ .pth files

def executable_lines(text: str) -> list[str]:
    """The lines of a .pth file that site.py runs: those starting with `import` and a space or a tab."""
    return [line for line in text.splitlines() if line.startswith(("import ", "import\t"))]


def path_lines(text: str, folder: str) -> list[str]:
    """The folders a .pth file adds to sys.path (site.py: any other line that is not blank or a comment)."""
    lines = [line.rstrip() for line in text.splitlines()]
    return [os.path.normpath(os.path.join(folder, line)) for line in lines
            if line and not line.startswith("#") and not line.startswith(("import ", "import\t"))]


@dataclass(frozen=True, slots=True)
class StartupFile:
    """A file Python may run at start: a .pth file, a sitecustomize or usercustomize module."""

    path: str
    data: bytes
    kind: str  # "pth" or the module's name


def startup_findings(files: Iterable[StartupFile], vouched: Mapping[str, str],
                     allowed: Mapping[str, str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Foreign startup code, and every startup file listed with what it is: a .pth that only adds paths, a
    known .pth by its exact content, a file a package vouches for (`vouched`: path -> who), or one allowed
    by name and SHA-256 (`allowed`)."""
    findings, listed = [], []
    for found in files:
        digest = hashlib.sha256(found.data).hexdigest()
        name = os.path.basename(found.path)
        code = executable_lines(found.data.decode(errors="replace")) if found.kind == "pth" else ["(a module)"]
        if not code:
            what = "adds folders to sys.path, runs nothing"
        elif found.kind == "pth" and found.data in KNOWN_PTH:
            what = KNOWN_PTH[found.data]
        elif found.path in vouched:
            what = vouched[found.path]
        elif digest in (allowed.get(name, "").lower(), allowed.get(name.removesuffix(".py"), "").lower()):
            what = "allowed by the contract's tools.allow_plugins"
        else:
            findings.append(_startup_finding(found, code[0]))
            what = "foreign"
        listed.append({"file": found.path, "sha256": digest, "what": what})
    return findings, listed


def _startup_finding(found: StartupFile, first: str) -> str:
    if found.kind == "pth":
        return f"{found.path}: a .pth file that runs code at every Python start: {first[:160]}"
    return f"{found.path}: a {found.kind} module, which Python runs at every start"


# ------------------------------------------------------------------ the environment

def environment_findings(environ: Mapping[str, str]) -> list[str]:
    """Python's environment variables that load or read code from elsewhere, each set one a finding."""
    return [f"{name}={environ[name]!r} is set: Python may run or read code from elsewhere (unset it)"
            for name in ENVIRONMENT if environ.get(name)]


# ------------------------------------------------------------------ who vouches for a file

def record_hash(digest: bytes) -> str:
    """A SHA-256 as a RECORD file writes it (PEP 376 / the wheel spec: URL-safe base64 without padding)."""
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def parse_record(text: str) -> dict[str, str]:
    """A RECORD file (CSV: path, hash, size): path as written (from the site folder) -> its hash field (`sha256=...`,
    or "" where none). Split at commas in one go where no path is quoted (torch's RECORD has 15,000 lines)."""
    fields = text.strip().replace("\n", ",").split(",")
    if '"' in text or len(fields) % 3:
        return {row[0]: row[1] if len(row) > 1 else "" for row in csv.reader(io.StringIO(text)) if row and row[0]}
    return dict(zip(fields[0::3], fields[1::3]))


@dataclass
class Installed:
    """An installed distribution: its site folder (ending in a separator), name==version, the names its top_level.txt
    gives (None without one), and its RECORD, read when first asked about a file it could list: each path from the
    folder -> hash field, and the few outside it (its scripts, `../../../bin/pytest`) by absolute path. A
    distribution whose top_level.txt does not name a file's top-level module is not read for it (torch's RECORD has
    15,000 lines): one that leaves out a module of its own leaves that module's file unvouched for, never vouched."""

    folder: str
    owner: str
    record: Callable[[], str]
    tops: frozenset[str] | None = None
    _text: str | None = field(default=None, repr=False)
    _files: dict[str, str] | None = field(default=None, repr=False)
    _outside: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, folder: str, owner: str, record: str, tops: Iterable[str] | None = None) -> Installed:
        return cls(os.path.join(folder, ""), owner, lambda: record, None if tops is None else frozenset(tops))

    def text(self) -> str:
        if self._text is None:
            self._text = self.record()
        return self._text

    def files(self) -> dict[str, str]:
        if self._files is None:
            self._files = parse_record(self.text())
            self._outside = {os.path.normpath(os.path.join(self.folder, path)): field
                             for path, field in self._files.items() if path[:1] in "./"}
        return self._files

    def recorded(self, path: str) -> str | None:
        """The hash field RECORD gives this absolute, normalised path; None where it does not list it."""
        if not path.startswith(self.folder):  # a script (../../../bin/pytest): where the RECORD names the file at all
            if self._files is None and f"/{os.path.basename(path)}," not in self.text():
                return None
            self.files()
            return self._outside.get(path)
        relative = path[len(self.folder):]
        if self.tops is not None and relative.split(os.sep, 1)[0].split(".")[0] not in self.tops:
            return None
        return self.files().get(relative)


def parse_md5sums(text: str, package: str) -> dict[str, tuple[str, str]]:
    """dpkg's <package>.md5sums: absolute path -> (MD5, package) (`<md5>  <path without the leading slash>`)."""
    sums = {}
    for line in text.splitlines():
        md5, _, path = line.partition("  ")
        if path:
            sums["/" + path] = (md5, package)
    return sums


def parse_conffiles(status: str) -> dict[str, tuple[str, str]]:
    """The configuration files dpkg's status lists under each package's Conffiles: path -> (MD5, package), of the
    packages that install Python's (/etc/python3.X/sitecustomize.py)."""
    found = {}
    for stanza in status.split("\n\n"):
        if "Conffiles:" not in stanza or "/etc/python" not in stanza:
            continue
        package = re.search(r"^Package: (\S+)", stanza, re.M)
        for match in re.finditer(r"^ (/\S+) ([0-9a-f]{32})(?: obsolete)?$", stanza, re.M):
            found[match.group(1)] = (match.group(2), package.group(1) if package else "?")
    return found


@dataclass
class Files:
    """Who vouches for a file, each file hashed once: an installed distribution's RECORD, dpkg's checksums (read when
    first needed), the standard library's folders, this package's own folders."""

    installed: list[Installed]
    stdlib: tuple[str, ...]
    own: tuple[str, ...] = ()  # an editable install's folders, whose files no RECORD lists
    dpkg_root: Path | None = None  # /var/lib/dpkg where the OS keeps one
    dpkg_folders: tuple[str, ...] = ("/usr/", "/etc/")  # where Debian's packages put Python and its configuration
    _dpkg: dict[str, tuple[str, str]] | None = field(default=None, repr=False)  # path -> (MD5, package), Python's
    _sha256: dict[str, bytes] = field(default_factory=dict, repr=False)
    _vouched: dict[str, tuple[str | None, str]] = field(default_factory=dict, repr=False)

    def sha256(self, path: str) -> bytes:
        if path not in self._sha256:
            try:
                self._sha256[path] = hashlib.sha256(Path(path).read_bytes()).digest()
            except OSError:
                self._sha256[path] = b""
        return self._sha256[path]

    def dpkg(self) -> dict[str, tuple[str, str]]:
        if self._dpkg is None:
            self._dpkg = _dpkg_sums(self.dpkg_root) if self.dpkg_root is not None else {}
        return self._dpkg

    def stdlib_by_dpkg(self) -> bool:
        """The OS's package manager keeps the standard library's checksums: each of its files must match."""
        return self.stdlib[0].startswith(self.dpkg_folders) and os.path.join(self.stdlib[0], "os.py") in self.dpkg()

    def vouch(self, path: str) -> tuple[str | None, str]:
        """(who vouches for the file, or None; why not): a distribution's name==version, "standard library",
        "dpkg (PACKAGE)", or "pytest-gpuaccept (editable)"; the path as given first, then with its links resolved
        (Debian's /usr/lib/python3.X/sitecustomize.py links to a configuration file in /etc)."""
        if path not in self._vouched:
            normal = os.path.normpath(os.path.abspath(path))
            found = self._vouch(normal)
            if found is None or found[0] is None:
                real = os.path.realpath(normal)
                resolved = self._vouch(real) if real != normal else None
                found = resolved if resolved is not None and (found is None or resolved[0] is not None) else found
            self._vouched[path] = found or (None, "listed by no installed distribution")
        return self._vouched[path]

    def recorded(self, path: str) -> tuple[str, str] | None:
        """(hash field, name==version) of the first installed distribution whose RECORD lists the path."""
        for dist in self.installed:
            recorded = dist.recorded(path)
            if recorded is not None:
                return recorded, dist.owner
        return None

    def _vouch(self, path: str) -> tuple[str | None, str] | None:
        if path.startswith(self.own):
            return f"{OWN_DISTRIBUTION} (editable)", ""
        in_stdlib = path.startswith(self.stdlib) and not _installed_folder(path)
        listed = self.recorded(path) if not in_stdlib else None  # no RECORD vouches for the standard library
        if listed is not None:
            recorded, owner = listed
            if recorded and recorded == record_hash(self.sha256(path)):
                return owner, ""
            return (None, f"changed since {owner} was installed (not the SHA-256 its RECORD lists)") if recorded \
                else (None, f"{owner}'s RECORD lists it without a SHA-256")
        if path.startswith(self.dpkg_folders):
            md5, package = self.dpkg().get(path, ("", ""))
            if md5:
                if md5 == hashlib.md5(_read(path), usedforsecurity=False).hexdigest():
                    return f"dpkg ({package}{', its configuration file ' + path if path.startswith('/etc/') else ''})", ""
                return None, f"changed since the Debian package {package} installed it (not the MD5 dpkg keeps)"
        if in_stdlib:
            if self.stdlib_by_dpkg():
                return None, "in the standard library's folder, but in none of its packages (dpkg)"
            return "standard library", ""
        return None


def _installed_folder(path: str) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.split(os.sep))


def name_version(dist: Any) -> str:
    """name==version from a distribution's METADATA headers alone (importlib.metadata parses the whole file, long
    description and all, each time it is asked)."""
    headers = (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").split("\n\n", 1)[0]
    fields = dict(re.findall(r"^(Name|Version):[ \t]*(.*?)\s*$", headers, re.M | re.I))
    fields = {key.title(): value for key, value in fields.items()}
    return f"{fields.get('Name', '?')}=={fields.get('Version', '?')}"


def allowed_owner(owner: str | None) -> bool:
    """A file vouched for by a distribution whose code may run in the judging process unnamed."""
    return owner is not None and normalized(owner.split("==")[0].removesuffix(" (editable)")) in ALLOWED_DISTRIBUTIONS


# ------------------------------------------------------------------ plugins and hooks

@dataclass(frozen=True, slots=True)
class Plugin:
    """A plugin pytest's plugin manager holds: its name there, the module its code is in, that file, how it came."""

    name: str
    module: str
    file: str  # "" when it has none
    door: str  # "entry point NAME==VERSION", "-p", "PYTEST_PLUGINS", "conftest" or "registered"
    code: tuple[str, ...] = ()  # the files its code is in: its own, or (a module made in memory) its functions'


@dataclass(frozen=True, slots=True)
class Hook:
    """One implementation of a pytest hook: the hook, the plugin's name, the file of the function's code."""

    hook: str
    plugin: str
    file: str  # "" when the function has no Python code
    wrapper: bool


def plugin_keys(name: str, module: str, file: str, rootdir: str) -> tuple[str, ...]:
    """The names tools.allow_plugins may give a plugin or module by: its name in pytest, its module's name, and, for
    a file under the rootdir, its path from there dotted without `.py` (`mine/conftest.py` is `mine.conftest`: how
    a conftest.py or one's own test module is named)."""
    keys = [name, module]
    if file and rootdir and file.startswith(os.path.join(rootdir, "")) and file.endswith(".py"):
        keys.append(os.path.relpath(file, rootdir).removesuffix(".py").replace(os.sep, "."))
    return tuple(dict.fromkeys(k for k in keys if k))


def pinned_files(pins: Mapping[str, str], candidates: Iterable[tuple[tuple[str, ...], str]],
                 sha256: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The files tools.allow_plugins allows (file -> the name it is allowed by), and those named there whose file has
    another SHA-256 than the one pinned (file -> what to say)."""
    allowed, mismatched = {}, {}
    pins = {key: pin.lower() for key, pin in pins.items()}
    for keys, file in candidates:
        for key in keys:
            if key in pins and file:
                digest = sha256(file).hex()
                if digest == pins[key]:
                    allowed[file] = key
                else:
                    mismatched[file] = (f"; its SHA-256 is {digest or 'unreadable'}, not the {pins[key]} "
                                        f"tools.allow_plugins gives '{key}'")
    return allowed, {file: note for file, note in mismatched.items() if file not in allowed}


def _door(plugin: Plugin) -> str:
    if plugin.door == "conftest":
        return f"conftest {plugin.file}, loaded because test paths were given"
    where = {"-p": "named with -p", "PYTEST_PLUGINS": "named in PYTEST_PLUGINS",
             "registered": "registered by other code while pytest ran"}.get(plugin.door)
    if where is None:
        where = f"installed as {plugin.door.removeprefix('entry point ')}, loaded through its pytest11 entry point"
    return f"pytest plugin '{plugin.name}' ({plugin.file or ', '.join(plugin.code) or 'no file'}) {where}"


def _hooked(hooks: Iterable[Hook]) -> str:
    return ", ".join(dict.fromkeys(f"{h.hook} (a wrapper)" if h.wrapper else h.hook for h in hooks))


def plugin_findings(plugins: Iterable[Plugin], hooks: Iterable[Hook], owner_of: Any, allowed: Mapping[str, str],
                    mismatched: Mapping[str, str]) -> tuple[list[str], set[str]]:
    """Plugins whose code is neither an allowed distribution's nor allowed by the contract, with the hooks they
    implement, and hooks of allowed plugins implemented by code from elsewhere; the files named."""
    def ours(file: str) -> bool:
        return bool(file) and (file in allowed or allowed_owner(owner_of(file)))

    def ours_all(plugin: Plugin) -> bool:
        return all(ours(file) for file in plugin.code)

    foreign_hooks: dict[str, list[Hook]] = {}
    for hook in hooks:
        if not ours(hook.file):
            foreign_hooks.setdefault(hook.plugin, []).append(hook)
    findings: list[str] = []
    named: set[str] = set()
    for plugin in plugins:
        hooked = foreign_hooks.pop(plugin.name, [])
        if ours_all(plugin) and not hooked:
            continue
        named.update(plugin.code)
        if ours_all(plugin):
            findings.append(f"pytest plugin '{plugin.name}' ({plugin.file}) runs code from elsewhere on {_hooked(hooked)}")
        else:
            findings.append(_door(plugin) + mismatched.get(plugin.file, "") + (f"; it hooks {_hooked(hooked)}" if hooked else ""))
    for name, hooked in foreign_hooks.items():  # a plugin unregistered since, whose hooks are still called
        findings.append(f"hooks of '{name}' run code from {', '.join(sorted({h.file or 'no file' for h in hooked}))} "
                        f"on {_hooked(hooked)}")
    return findings, named


# ------------------------------------------------------------------ modules

@dataclass(frozen=True, slots=True)
class Module:
    """A module in sys.modules: its name, its file ("" when none), built in or frozen, and (where it has no file)
    whether Python functions or classes were defined in it."""

    name: str
    file: str
    built_in: bool = False
    holds_code: bool = False


def module_findings(modules: Iterable[Module], vouch: Any, allowed: Mapping[str, str], mismatched: Mapping[str, str],
                    named: set[str]) -> tuple[list[str], dict[str, int]]:
    """Modules whose file nobody vouches for (or made in memory), one line per file; and how many modules each
    voucher accounts for."""
    findings: dict[str, str] = {}
    counts: dict[str, int] = {}
    for module in modules:
        if module.built_in or (not module.file and not module.holds_code):
            who = "built in, frozen, or no code of its own"
        elif not module.file:
            findings[f"memory:{module.name}"] = (f"module {module.name} has no file and is not built in, yet holds "
                                                 "Python code: code made in memory (an import hook's)")
            continue
        elif module.file in allowed:
            who = "allowed by the contract"
        else:
            owner, why = vouch(module.file)
            if owner is None:
                if module.file not in named:
                    findings.setdefault(module.file, f"module {module.name} ({module.file}): {why}"
                                                     + mismatched.get(module.file, ""))
                continue
            who = owner
        counts[who] = counts.get(who, 0) + 1
    return list(findings.values()), dict(sorted(counts.items()))


# ------------------------------------------------------------------ reading this process

def read_modules(modules: Mapping[str, Any]) -> list[Module]:
    """Every module object in sys.modules once (an alias's name is the first it is found under)."""
    found, seen = [], set()
    for name, module in list(modules.items()):
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if origin in ("built-in", "frozen") or name in sys.builtin_module_names:
            found.append(Module(name, "", built_in=True))
            continue
        file = getattr(module, "__file__", None) if isinstance(module, types.ModuleType) else None
        if file:
            found.append(Module(name, os.path.abspath(file)))
        else:
            found.append(Module(name, "", holds_code=_holds_code(module)))
    return found


def _holds_code(module: Any) -> bool:
    """Python functions, or classes with Python methods, defined in this object's namespace (a namespace package
    or Cython's shared module holds none; a module an import hook made from source in memory does)."""
    name = getattr(module, "__name__", None)
    try:
        values = list(vars(module).values())
    except TypeError:
        return True
    return any(getattr(v, "__module__", None) == name and (isinstance(v, types.FunctionType) or (
        isinstance(v, type) and any(isinstance(m, types.FunctionType) for m in vars(v).values()))) for v in values)


def _code_files(namespace: Any) -> tuple[str, ...]:
    """The files of the Python functions a module made in memory holds (fixtures unwrapped)."""
    files = set()
    for value in list(vars(namespace).values()):
        code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
        if code is not None:
            files.add(os.path.abspath(code.co_filename))
    return tuple(sorted(files))


def _file_of(obj: Any) -> tuple[str, str]:
    """The module an object's code is in, and its file."""
    module = obj if isinstance(obj, types.ModuleType) else \
        sys.modules.get(getattr(obj if inspect.isclass(obj) else type(obj), "__module__", ""))
    file = getattr(module, "__file__", None) or ""
    return getattr(module, "__name__", ""), os.path.abspath(file) if file else ""


def read_plugins(pluginmanager: Any, named: Iterable[str], environ: Mapping[str, str]) -> list[Plugin]:
    """The plugins pytest holds, each with how it came: `named` are the -p names given (config.option.plugins)."""
    entry = {id(plugin): f"entry point {name_version(dist)}" for plugin, dist in pluginmanager.list_plugin_distinfo()}
    by_env = {n.strip() for n in environ.get("PYTEST_PLUGINS", "").split(",") if n.strip()}
    by_p = {n for n in named if not n.startswith("no:")}
    plugins = []
    for name, plugin in pluginmanager.list_name_plugin():
        if plugin is None:
            continue  # blocked (-p no:NAME)
        module, file = _file_of(plugin)
        if id(plugin) in entry:
            door = entry[id(plugin)]
        elif isinstance(plugin, types.ModuleType) and os.path.basename(file) == "conftest.py":
            door = "conftest"
        else:
            door = "PYTEST_PLUGINS" if {name, module} & by_env else "-p" if {name, module} & by_p else "registered"
        code = (file,) if file else _code_files(plugin) if isinstance(plugin, types.ModuleType) else ("",)
        plugins.append(Plugin(str(name), module, file, door, code))
    return plugins


def read_hooks(pluginmanager: Any) -> list[Hook]:
    """Every implementation of every hook pytest calls, with the file its function's code comes from."""
    hooks = []
    for hook_name, caller in list(vars(pluginmanager.hook).items()):
        get = getattr(caller, "get_hookimpls", None)
        if get is None:
            continue
        for impl in get():
            function = getattr(impl.function, "__func__", impl.function)
            code = getattr(inspect.unwrap(function), "__code__", None)
            file = os.path.abspath(code.co_filename) if code is not None else ""
            hooks.append(Hook(hook_name, str(impl.plugin_name), file, bool(impl.hookwrapper or impl.wrapper)))
    return hooks


def site_folders() -> list[str]:
    """The folders site.py processed at start: site-packages (the system's too where the venv includes them), and the
    user's where enabled."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return [os.path.normpath(f) for f in dict.fromkeys(folders) if os.path.isdir(f)]


def read_startup(folders: Iterable[str], path: Iterable[str]) -> list[StartupFile]:
    """Every .pth file in the site folders and in sys.path's folders, and the sitecustomize and usercustomize
    modules Python would import."""
    found: dict[str, StartupFile] = {}
    for folder in dict.fromkeys([*folders, *(p for p in path if p and os.path.isdir(p))]):
        for pth in sorted(Path(folder).glob("*.pth")):
            found.setdefault(str(pth), StartupFile(str(pth), _read(str(pth)), "pth"))
    for name in CUSTOMIZE:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file:
            spec = PathFinder.find_spec(name, list(path))
            file = spec.origin if spec is not None and spec.has_location else None
        if file:
            found.setdefault(os.path.abspath(file), StartupFile(os.path.abspath(file), _read(file), name))
    return list(found.values())


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def _distributions(folders: list[str]) -> list[Any]:
    """The distributions installed in the site folders and the folders their .pth files add (not the working
    folder's, nor any other sys.path entry's: a RECORD planted there would vouch for anything)."""
    added = [p for f in folders for pth in sorted(Path(f).glob("*.pth"))
             for p in path_lines(_read(str(pth)).decode(errors="replace"), f) if os.path.isdir(p)]
    return list(importlib.metadata.distributions(path=list(dict.fromkeys([*folders, *added]))))


def _own_folders(installed: Iterable[Installed], sha256: Any) -> tuple[str, ...]:
    """An editable install of this package: the folders the path lines of its own .pth (RECORD-checked) name, the
    package and its suites beside it; () for an ordinary install, whose RECORD lists every file."""
    folders = []
    for dist in installed:
        if normalized(dist.owner.split("==")[0]) != OWN_DISTRIBUTION:
            continue
        for name, recorded in dist.files().items():
            path = os.path.normpath(dist.folder + name)
            if name.endswith(".pth") and recorded == record_hash(sha256(path)):
                for folder in path_lines(_read(path).decode(errors="replace"), dist.folder):
                    if os.path.join(folder, "pytest_gpuaccept") == HOME:  # where this package was imported from
                        folders += [os.path.join(folder, "pytest_gpuaccept", ""), os.path.join(folder, "suites", "")]
    return tuple(dict.fromkeys(folders))


def _dpkg_sums(root: Path) -> dict[str, tuple[str, str]]:
    """dpkg's MD5s of the Python packages' files (the interpreter's, python3-*: 2,800 files on Debian 12, 10 ms) and of
    the configuration files it installed for them (its status: Debian's /etc/python3.X/sitecustomize.py)."""
    sums: dict[str, tuple[str, str]] = {}
    for file in sorted((root / "info").glob("*python3*.md5sums")):
        sums.update(parse_md5sums(_read(str(file)).decode(errors="replace"), file.name.split(":")[0].removesuffix(".md5sums")))
    sums.update(parse_conffiles(_read(str(root / "status")).decode(errors="replace")))
    return sums


@functools.cache
def installed_files() -> Files:
    """Who vouches for which file in this interpreter: read once a process."""
    installed = [Installed(os.path.join(str(dist.locate_file("")), ""), name_version(dist), _reader(dist, "RECORD"),
                           _top_level(dist)) for dist in _distributions(site_folders())]
    paths = sysconfig.get_paths()
    stdlib = tuple(dict.fromkeys(os.path.join(form(paths[key]), "") for form in (os.path.realpath, os.path.normpath)
                                 for key in ("stdlib", "platstdlib")))
    files = Files(installed, stdlib, dpkg_root=DPKG if DPKG.is_dir() else None)
    files.own = _own_folders(installed, files.sha256)
    return files


def _reader(dist: Any, name: str) -> Callable[[], str]:
    return lambda: dist.read_text(name) or ""


def _top_level(dist: Any) -> frozenset[str] | None:
    text = dist.read_text("top_level.txt")
    return None if text is None else frozenset(line.strip().split("/")[0] for line in text.splitlines() if line.strip())


def _vouched_startup(startup: Iterable[StartupFile], files: Files) -> dict[str, str]:
    """Startup files vouched for by who made them: a .pth file of this package's own (its RECORD: an editable
    install's finder), and a sitecustomize or usercustomize the interpreter's own Debian package installed (dpkg's
    MD5: Debian's /etc/python3.X/sitecustomize.py, which /usr/lib/python3.X/sitecustomize.py links to). Any other
    package's .pth that runs code is foreign, whoever installed it: being installed is not being allowed."""
    interpreter = f"python{sys.version_info.major}.{sys.version_info.minor}"
    vouched = {}
    for found in startup:
        owner, _why = files.vouch(found.path)
        if owner is not None and (owner.startswith(OWN_DISTRIBUTION + "==") if found.kind == "pth" else
                                  owner.startswith("dpkg (") and interpreter in owner.split(",")[0]):
            vouched[found.path] = f"vouched for by {owner}"
    return vouched


@dataclass(frozen=True, slots=True)
class Audit:
    """What an audit found (each line rejects the run) and what it allowed, for the results' code_audit."""

    findings: list[str]
    listing: dict[str, Any]


def _this_package(files: Files) -> str:
    owner, why = files.vouch(os.path.join(HOME, "__init__.py"))
    if owner is None:
        return f"not vouched for: {why}"
    return f"editable, from {', '.join(files.own)}" if owner.endswith("(editable)") else f"installed: {owner} (its RECORD)"


def audit(pluginmanager: Any, pins: Mapping[str, str], named: Iterable[str], rootdir: str) -> Audit:
    """Audit this process: its plugins and hooks, startup files, environment and every module."""
    files = installed_files()
    modules = read_modules(sys.modules)
    plugins = read_plugins(pluginmanager, named, os.environ)
    candidates = [(plugin_keys(p.name, p.module, p.file, rootdir), p.file) for p in plugins] + \
                 [(plugin_keys(m.name, m.name, m.file, rootdir), m.file) for m in modules if m.file]
    allowed, mismatched = pinned_files(pins, candidates, files.sha256)
    findings, named_files = plugin_findings(plugins, read_hooks(pluginmanager), lambda f: files.vouch(f)[0], allowed,
                                            mismatched)
    module_lines, counts = module_findings(modules, files.vouch, allowed, mismatched, named_files)
    startup = read_startup(site_folders(), sys.path)
    startup_lines, listed = startup_findings(startup, _vouched_startup(startup, files), pins)
    stdlib = "checked against dpkg's MD5s" if files.stdlib_by_dpkg() else \
        f"by its folder {files.stdlib[0]} (no package manager keeps its checksums)"
    listing = {"python": sys.executable, "isolated": bool(sys.flags.isolated), "startup": listed,
               "allowed": [{"name": key, "file": file, "sha256": files.sha256(file).hex()} for file, key in allowed.items()],
               "modules": counts, "standard_library": stdlib,
               "this_package": _this_package(files)}
    return Audit(findings + module_lines + startup_lines + environment_findings(os.environ), listing)
