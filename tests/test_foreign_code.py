"""Foreign code in a judging run: each way code gets into the pytest process, on the fake host it would fool, is
named in `foreign_code` and rejects the run; a plugin the contract allows by its SHA-256, and environments made the
usual ways (a venv with pip and setuptools, an editable install, Debian's python3), are accepted.

Runs that need a site folder of their own (an entry point, a .pth file, a sitecustomize) run in a virtual
environment made with `python -m venv`, which reaches this environment's packages through a .pth file of plain
paths, and are started as the buyer starts them: `python -I -m pytest`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import nvml_recording

import pytest_gpuaccept
from pytest_gpuaccept import foreign

SOURCE = Path(__file__).resolve().parents[1]  # the checkout: pytest_gpuaccept/, suites/, contracts/
CONTRACT = "gpuaccept: 1\nvendor: V\ngpus: {count: 8}\n"
OVERSOLD = "gpuaccept: 1\nvendor: V\ngpus: {count: 8, memory: '100 GB'}\n"  # the H100s have 85.5 GB
NEWER_DRIVER = "gpuaccept: 1\nvendor: V\ngpus: {count: 8, driver: '>=570'}\n"  # the recording's driver is 560.35.03
H100 = nvml_recording("h100_sxm5_8gpu.json")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def allowing(contract: str, **pins: str) -> str:
    lines = "".join(f"    {name}: '{pin}'\n" for name, pin in pins.items())
    return contract + f"tools:\n  allow_plugins:\n{lines}"


# ------------------------------------------------------------------ environments made the usual ways

def outer_folders() -> list[str]:
    """Where this test environment's packages are: its site folders, and the folders their .pth files add."""
    folders = foreign.site_folders()
    added = [p for f in folders for pth in sorted(Path(f).glob("*.pth"))
             for p in foreign.path_lines(pth.read_text(errors="replace"), f)]
    return list(dict.fromkeys(folders + added))


@dataclass
class Venv:
    root: Path
    site: Path

    @property
    def python(self) -> tuple[str, ...]:
        """The buyer's way to start: python -I (no working folder on sys.path, no PYTHON* variables)."""
        return (str(self.root / "bin" / "python"), "-I")

    def install(self, wheel: Path) -> None:
        """pip install WHEEL into this venv; --ignore-installed: the same distribution seen through outer.pth (this
        test environment's) is neither taken for it nor uninstalled."""
        subprocess.run([str(self.root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--ignore-installed", "--disable-pip-version-check", str(wheel)], check=True, timeout=300)


def make_venv(folder: Path, *options: str, base: str = sys.executable) -> Venv:
    """`python -m venv OPTIONS FOLDER`; its site-packages reaches this environment's packages through `outer.pth`,
    plain paths (which run nothing), as pip's own path files do."""
    subprocess.run([base, "-m", "venv", *options, str(folder)], check=True, timeout=300)
    purelib = subprocess.run([str(folder / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    (Path(purelib) / "outer.pth").write_text("".join(f"{p}\n" for p in outer_folders()))
    return Venv(folder, Path(purelib))


def wheel(folder: Path, name: str, files: dict[str, bytes], entry_points: str = "", version: str = "1.0") -> Path:
    """A wheel as pip installs it: the files, and a .dist-info with METADATA, WHEEL, entry_points.txt and RECORD."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    record = "".join(f"{path},{foreign.record_hash(hashlib.sha256(data).digest())},{len(data)}\n"
                     for path, data in files.items())
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, data in files.items():
            archive.writestr(name_in, data)
        archive.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return path


def package_wheel(folder: Path, editable: bool) -> Path:
    """This package as its wheel: the package with its suites and contracts (pyproject's force-include), or, for an
    editable install, the path file hatchling's editable wheel holds, naming the checkout."""
    if editable:
        files = {"_editable_impl_pytest_gpuaccept.pth": f"{SOURCE}\n".encode()}
    else:
        files = {}
        for source, target in (("pytest_gpuaccept", "pytest_gpuaccept"), ("suites", "pytest_gpuaccept/suites"),
                               ("contracts", "pytest_gpuaccept/contracts")):
            for path in sorted((SOURCE / source).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    files[f"{target}/{path.relative_to(SOURCE / source).as_posix()}"] = path.read_bytes()
    entry_points = importlib.metadata.distribution("pytest-gpuaccept").read_text("entry_points.txt") or ""
    return wheel(folder, "pytest-gpuaccept", files, entry_points, version=pytest_gpuaccept.__version__)


def assert_accepted(run) -> None:
    assert run.json.get("foreign_code") is None, run.json.get("foreign_code")
    assert run.json["verdict"] == "accepted" and run.result.ret == 0


def named(run, *words: str) -> list[str]:
    """The foreign_code lines holding every word; the run must be rejected."""
    assert run.json["verdict"] == "rejected" and run.result.ret == 1
    lines = [line for line in run.json.get("foreign_code", []) if all(w in line for w in words)]
    assert lines, (words, run.json.get("foreign_code"))
    return lines


# ------------------------------------------------------------------ each way in, on the host it would fool

REWRITER = '''\
"""Every test report rewritten: failures become passes, each check's outcome too."""
import json

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        report.outcome, report.longrepr = "passed", None
        report.user_properties = [
            (k, json.dumps({**json.loads(v), "outcome": "passed", "message": "ok"}) if k == "gpuaccept_check" else v)
            for k, v in report.user_properties]
    return report
'''


@pytest.fixture(scope="module")
def rewriter_venv(tmp_path_factory) -> Venv:
    """A venv with a vendor's plugin installed by pip, loaded through its pytest11 entry point."""
    folder = tmp_path_factory.mktemp("rewriter")
    venv = make_venv(folder / "venv", "--without-pip")
    venv.install(wheel(folder, "vendor-reports", {"vendor_reports.py": REWRITER.encode()},
                       "[pytest11]\nvendor_reports = vendor_reports\n"))
    return venv


def test_an_entry_point_plugin_that_rewrites_every_report_is_named(accept, fake_tools, rewriter_venv):
    run = accept(OVERSOLD, H100, python=rewriter_venv.python)
    assert {c["outcome"] for c in run.checks("gpus.memory")} == {"passed"}  # what the plugin made of 85.5 < 100 GB
    line, = named(run, "pytest plugin 'vendor_reports'", "installed as vendor-reports==1.0, loaded through its pytest11 entry point")
    assert line.endswith("; it hooks pytest_runtest_makereport (a wrapper)")
    assert str(rewriter_venv.site / "vendor_reports.py") in line


JUDGE_PATCHES = """\
import pytest_gpuaccept.verdict as verdict

verdict.Verdict.judged = lambda self, ok, measured, message, details=None: self.passed(measured, "patched")
"""


def test_a_plugin_named_with_p_is_named(accept, pytester, fake_tools):
    pytester.makepyfile(vendorplugin=JUDGE_PATCHES)
    run = accept(OVERSOLD, H100, "-p", "vendorplugin")
    named(run, f"pytest plugin 'vendorplugin' ({pytester.path / 'vendorplugin.py'}) named with -p")


WEAKER = '''\
"""Hands the judges a weaker contract than the buyer's, whose SHA-256 the results still show."""
import pytest

from pytest_gpuaccept.contract import load_contract


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    result = yield
    if fixturedef.argname == "gpuaccept_contract":
        result = load_contract("weaker.yaml")
        fixturedef.cached_result = (result, *fixturedef.cached_result[1:])
    return result
'''


def test_a_module_in_pytest_plugins_that_weakens_the_contract_is_named(accept, pytester, fake_tools, monkeypatch):
    pytester.makepyfile(vendorweaker=WEAKER)
    (pytester.path / "weaker.yaml").write_text(CONTRACT.replace("{count: 8}", "{count: 8, memory: '80 GB'}"))
    monkeypatch.setenv("PYTEST_PLUGINS", "vendorweaker")
    run = accept(OVERSOLD, H100)
    assert {c["outcome"] for c in run.checks("gpus.memory")} == {"passed"}  # judged against 80 GB, not 100
    assert run.json["contract"]["sha256"] == sha256(pytester.path / "vendor.yaml")
    line, = named(run, "pytest plugin 'vendorweaker'", "named in PYTEST_PLUGINS")
    assert line.endswith("; it hooks pytest_fixture_setup (a wrapper)")


def own_tests(pytester, suite: Path) -> tuple[str, ...]:
    """One's own test folder and the shipped suites (where the judging run's Python finds them: the installed
    package's, which is not this checkout's in CI), judged from the folder pytest runs in (its ini file, so that the
    checkout's pyproject.toml, an ancestor of the suites in a checkout, is not read)."""
    suites = subprocess.run([sys.executable, "-I", "-c", "from pytest_gpuaccept.plugin import suites_dir; print(suites_dir())"],
                            check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    return "-c", str(pytester.makeini("[pytest]\n")), str(suite), suites


def test_a_conftest_loaded_with_test_paths_is_named(accept, pytester, fake_tools):
    suite = pytester.mkdir("mine")
    (suite / "conftest.py").write_text(JUDGE_PATCHES)
    (suite / "test_own.py").write_text("def test_mine():\n    pass\n")
    run = accept(OVERSOLD, H100, *own_tests(pytester, suite))
    named(run, f"conftest {suite / 'conftest.py'}, loaded because test paths were given")
    named(run, "module test_own", "listed by no installed distribution")


SPECIFIERS_ALWAYS_TRUE = ("import packaging.specifiers as s; "
                          "s.SpecifierSet.contains = lambda self, item, prereleases=None, installed=None: True\n")


def test_a_pth_file_that_runs_code_is_named_even_when_pip_installed_it(accept, fake_tools, tmp_path):
    """Installed is not allowed: the distribution's RECORD lists the .pth file with its SHA-256, and it is foreign."""
    venv = make_venv(tmp_path / "venv", "--without-pip")
    venv.install(wheel(tmp_path, "vendor-speedups", {"zz_vendor_speedups.pth": SPECIFIERS_ALWAYS_TRUE.encode()}))
    run = accept(NEWER_DRIVER, H100, python=venv.python)
    assert {c["outcome"] for c in run.checks("gpus.driver")} == {"passed"}  # 560.35.03 ">=570"
    named(run, f"{venv.site / 'zz_vendor_speedups.pth'}: a .pth file that runs code at every Python start: import packaging")


MONOTONIC = """\
import time

_real, _start = time.monotonic, time.monotonic()
time.monotonic = lambda: _start + (_real() - _start) * 50  # a canned log's wall time fits
"""


def test_a_sitecustomize_is_named(accept, fake_tools, tmp_path):
    venv = make_venv(tmp_path / "venv", "--without-pip")
    (venv.site / "sitecustomize.py").write_text(MONOTONIC)
    run = accept(CONTRACT, H100, python=venv.python)
    named(run, f"{venv.site / 'sitecustomize.py'}: a sitecustomize module, which Python runs at every start")
    named(run, f"module sitecustomize ({venv.site / 'sitecustomize.py'}): listed by no installed distribution")


SHADOW = """\
\"\"\"packaging, as the vendor's PYTHONPATH hands it over: the real one, with every specifier satisfied.\"\"\"
import os
import sys

sys.path.remove(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
del sys.modules["packaging"]
import packaging.specifiers  # the real one, which the import of this module returns

packaging.specifiers.SpecifierSet.contains = lambda self, item, prereleases=None, installed=None: True
"""


def test_pythonpath_is_named(accept, fake_tools, tmp_path, monkeypatch):
    shadows = tmp_path / "vendor-path"
    (shadows / "packaging").mkdir(parents=True)
    (shadows / "packaging" / "__init__.py").write_text(SHADOW)
    monkeypatch.setenv("PYTHONPATH", str(shadows))
    run = accept(NEWER_DRIVER, H100)
    assert {c["outcome"] for c in run.checks("gpus.driver")} == {"passed"}
    named(run, f"PYTHONPATH={str(shadows)!r} is set: Python may run or read code from elsewhere (unset it)")


INSTALLER = """\
import vendorhooks


def pytest_configure(config):
    config.pluginmanager.register(vendorhooks, "vendorhooks")
"""


def test_a_hook_wrapper_on_the_report_hooks_is_named_even_when_an_allowed_plugin_registers_it(accept, pytester, fake_tools):
    pytester.makepyfile(vendorinstaller=INSTALLER, vendorhooks=REWRITER)
    pinned = allowing(OVERSOLD, vendorinstaller=sha256(pytester.path / "vendorinstaller.py"))
    run = accept(pinned, H100, "-p", "vendorinstaller")
    assert {c["outcome"] for c in run.checks("gpus.memory")} == {"passed"}
    line, = named(run, "pytest plugin 'vendorhooks'", "registered by other code while pytest ran")
    assert line.endswith("; it hooks pytest_runtest_makereport (a wrapper)")
    assert not any("vendorinstaller" in line for line in run.json["foreign_code"])
    assert run.json["code_audit"]["allowed"] == [
        {"name": "vendorinstaller", "file": str(pytester.path / "vendorinstaller.py"),
         "sha256": sha256(pytester.path / "vendorinstaller.py")}]


# ------------------------------------------------------------------ allowed by the contract, with its SHA-256

HEADER = '''\
"""The buyer's own reporting plugin: one line in the header."""


def pytest_report_header(config):
    return "buyer's tooling 1.0"
'''


@pytest.fixture(scope="module")
def tooling_venv(tmp_path_factory) -> Venv:
    folder = tmp_path_factory.mktemp("tooling")
    venv = make_venv(folder / "venv", "--without-pip")
    venv.install(wheel(folder, "buyer-tooling", {"buyer_tooling.py": HEADER.encode()},
                       "[pytest11]\nbuyer_tooling = buyer_tooling\n"))
    return venv


def test_an_allowed_plugin_with_its_sha256_is_accepted_and_listed(accept, fake_tools, tooling_venv):
    plugin = tooling_venv.site / "buyer_tooling.py"
    run = accept(allowing(CONTRACT, buyer_tooling=sha256(plugin)), H100, python=tooling_venv.python)
    assert_accepted(run)
    assert "buyer's tooling 1.0" in run.result.outlines
    assert run.json["code_audit"]["allowed"] == [{"name": "buyer_tooling", "file": str(plugin), "sha256": sha256(plugin)}]
    assert any(p["file"] == str(plugin) and p["sha256"] == sha256(plugin) for p in run.json["plugins"])


def test_an_allowed_plugin_with_another_sha256_is_named(accept, fake_tools, tooling_venv):
    plugin = tooling_venv.site / "buyer_tooling.py"
    run = accept(allowing(CONTRACT, buyer_tooling="0" * 64), H100, python=tooling_venv.python)
    named(run, "pytest plugin 'buyer_tooling'", f"; its SHA-256 is {sha256(plugin)}, not the {'0' * 64} "
                                                "tools.allow_plugins gives 'buyer_tooling'")


def test_one_s_own_tests_and_conftest_run_when_allowed_by_their_paths(accept, pytester, fake_tools):
    suite = pytester.mkdir("mine")
    (suite / "conftest.py").write_text("# the buyer's own helpers\n")
    (suite / "test_own.py").write_text("def test_mine():\n    pass\n")
    pinned = allowing(CONTRACT, **{"mine.conftest": sha256(suite / "conftest.py"), "mine.test_own": sha256(suite / "test_own.py")})
    run = accept(pinned, H100, *own_tests(pytester, suite))
    assert_accepted(run)
    assert {a["name"] for a in run.json["code_audit"]["allowed"]} == {"mine.conftest", "mine.test_own"}


# ------------------------------------------------------------------ honest environments are accepted

def test_this_test_environment_started_with_python_i_is_accepted(accept, fake_tools):
    """The environment these tests run in: CI's fresh venv with the package installed by pip, or the development
    venv's editable install."""
    run = accept(CONTRACT, H100, python=(sys.executable, "-I"))
    assert_accepted(run)
    audit = run.json["code_audit"]
    assert audit["isolated"] is True and audit["python"] == sys.executable
    direct = json.loads(importlib.metadata.distribution("pytest-gpuaccept").read_text("direct_url.json") or "{}")
    editable = direct.get("dir_info", {}).get("editable", False)
    assert audit["this_package"].startswith("editable, from " if editable else "installed: pytest-gpuaccept==")
    for entry in audit["startup"]:  # every startup file listed, none foreign
        assert entry["what"] != "foreign" and len(entry["sha256"]) == 64


def test_a_fresh_venv_with_pip_and_setuptools_and_the_package_installed_by_pip_is_accepted(accept, fake_tools, tmp_path):
    venv = make_venv(tmp_path / "venv")  # with pip (and setuptools with its .pth, on Python 3.11 and before)
    venv.install(package_wheel(tmp_path, editable=False))
    run = accept(CONTRACT, H100, python=venv.python)
    assert_accepted(run)
    audit = run.json["code_audit"]
    assert audit["this_package"] == f"installed: pytest-gpuaccept=={pytest_gpuaccept.__version__} (its RECORD)"
    assert audit["modules"][f"pytest-gpuaccept=={pytest_gpuaccept.__version__}"] > 50
    precedence = venv.site / "distutils-precedence.pth"
    if precedence.exists():
        assert {"file": str(precedence), "sha256": sha256(precedence),
                "what": "setuptools' distutils-precedence.pth"} in audit["startup"]


def test_an_editable_install_is_accepted(accept, fake_tools, tmp_path):
    venv = make_venv(tmp_path / "venv", "--without-pip")
    venv.install(package_wheel(tmp_path, editable=True))
    run = accept(CONTRACT, H100, python=venv.python)
    assert_accepted(run)
    assert run.json["code_audit"]["this_package"] == (f"editable, from {SOURCE / 'pytest_gpuaccept'}/, "
                                                      f"{SOURCE / 'suites'}/")


DEBIAN_PYTHON = Path("/usr/bin/python3")


def _debian_python_reason() -> str:
    if not DEBIAN_PYTHON.exists() or not Path("/var/lib/dpkg/info").is_dir():
        return "this machine has no Debian python3 (/usr/bin/python3 with dpkg)"
    minor = subprocess.run([str(DEBIAN_PYTHON), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                           text=True, timeout=60).stdout.strip()
    if minor != str(sys.version_info[:2]):
        return f"Debian's python3 is {minor}, these tests run on {sys.version_info[:2]}: their packages are built for it"
    return ""


@pytest.mark.skipif(bool(_debian_python_reason()), reason=_debian_python_reason() or "-")
def test_debian_s_python3_with_its_own_pth_and_sitecustomize_is_accepted(accept, fake_tools, tmp_path):
    """Debian's python3 in a venv that includes the system's packages: python3-setuptools' distutils-precedence.pth
    and libpython3.X-minimal's sitecustomize (a configuration file, whose MD5 dpkg keeps) are recognised and
    listed; the standard library is checked against dpkg's MD5s. A .pth file no Debian package installed (one a
    machine's own tooling wrote) is still foreign, named."""
    venv = make_venv(tmp_path / "venv", "--without-pip", "--system-site-packages", base=str(DEBIAN_PYTHON))
    run = accept(CONTRACT, H100, python=venv.python)
    audit = run.json["code_audit"]
    assert audit["standard_library"] == "checked against dpkg's MD5s"
    listed = {entry["file"]: entry["what"] for entry in audit["startup"]}
    unowned = [f for f, what in listed.items() if what == "foreign"]
    for file in unowned:  # what nobody installed: dpkg owns none of them
        assert subprocess.run(["dpkg", "-S", file], capture_output=True, timeout=60).returncode != 0, file
    assert sorted(run.json.get("foreign_code", [])) == sorted(
        f"{file}: a .pth file that runs code at every Python start: {foreign.executable_lines(Path(file).read_text())[0][:160]}"
        for file in unowned)
    assert run.json["verdict"] == ("rejected" if unowned else "accepted")
    precedence = "/usr/lib/python3/dist-packages/distutils-precedence.pth"
    if Path(precedence).exists():
        assert listed[precedence] == "setuptools' distutils-precedence.pth"
    customize = [f for f in listed if f.endswith("/sitecustomize.py")]
    for file in customize:
        assert listed[file].startswith("vouched for by dpkg (libpython3."), listed[file]
        assert ", its configuration file /etc/python3." in listed[file]


# ------------------------------------------------------------------ the rules, on plain records

def test_a_pth_line_runs_only_when_it_starts_with_import_and_a_space_or_tab():
    text = "# a comment\n/opt/lib\nimport os\nimport\tsys\nimportlib\n  import x\n"
    assert foreign.executable_lines(text) == ["import os", "import\tsys"]
    assert foreign.path_lines(text, "/site") == ["/opt/lib", "/site/importlib", "/site/  import x"]


def test_the_standard_pth_files_are_recognised_by_their_exact_content_only():
    honest = (b"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; "
              b"enabled and __import__('_distutils_hack').add_shim(); ")
    files = [foreign.StartupFile("/s/distutils-precedence.pth", honest, "pth"),
             foreign.StartupFile("/s/other/distutils-precedence.pth", b"import vendor; vendor.patch()\n" + honest, "pth"),
             foreign.StartupFile("/s/paths.pth", b"/opt/lib\n", "pth")]
    findings, listed = foreign.startup_findings(files, {}, {})
    assert findings == ["/s/other/distutils-precedence.pth: a .pth file that runs code at every Python start: "
                        "import vendor; vendor.patch()"]
    assert [entry["what"] for entry in listed] == ["setuptools' distutils-precedence.pth", "foreign",
                                                    "adds folders to sys.path, runs nothing"]


def test_a_dependency_file_edited_in_place_is_not_vouched_for(tmp_path):
    module = tmp_path / "site-packages" / "lib" / "mod.py"
    module.parent.mkdir(parents=True)
    module.write_text("x = 1\n")
    text = (f"lib/mod.py,{foreign.record_hash(hashlib.sha256(b'x = 1' + bytes([10])).digest())},6\n"
            "lib/__pycache__/mod.cpython-311.pyc,,\n../../bin/lib-tool,sha256=x,1\n")
    assert foreign.parse_record('"a,b.py",sha256=y,1\n' + text) == {
        "a,b.py": "sha256=y", "lib/mod.py": text.split(",")[1], "lib/__pycache__/mod.cpython-311.pyc": "",
        "../../bin/lib-tool": "sha256=x"}
    installed = [foreign.Installed.of(str(module.parents[1]), "lib==1.0", text)]
    assert installed[0].recorded(str(tmp_path.parent / "bin" / "lib-tool")) == "sha256=x"  # a script, outside
    assert foreign.Files(installed, ()).vouch(str(module)) == ("lib==1.0", "")
    module.write_text("x = 2\n")
    edited = foreign.Files(installed, ())  # each file hashed once a process: the next process sees the edit
    assert edited.vouch(str(module)) == (None, "changed since lib==1.0 was installed (not the SHA-256 its RECORD lists)")
    assert edited.vouch(str(module.parent / "__pycache__" / "mod.cpython-311.pyc")) == (
        None, "lib==1.0's RECORD lists it without a SHA-256")
    assert edited.vouch(str(tmp_path / "elsewhere.py")) == (None, "listed by no installed distribution")
    # A top_level.txt that leaves the module out: its RECORD is not read for it, and nothing vouches for the file.
    module.write_text("x = 1\n")
    elsewhere = [foreign.Installed.of(str(module.parents[1]), "lib==1.0", text, tops=["other"])]
    assert foreign.Files(elsewhere, ()).vouch(str(module)) == (None, "listed by no installed distribution")


def test_the_standard_library_is_checked_against_dpkg_where_dpkg_keeps_it(tmp_path):
    stdlib = tmp_path / "stdlib"
    stdlib.mkdir()
    (stdlib / "os.py").write_text("# os\n")
    (stdlib / "json.py").write_text("# json, edited\n")
    (stdlib / "planted.py").write_text("# nobody's\n")
    dpkg = tmp_path / "dpkg"
    (dpkg / "info").mkdir(parents=True)
    md5 = hashlib.md5(b"# os\n").hexdigest()
    (dpkg / "info" / "libpython3.11-stdlib:amd64.md5sums").write_text(
        f"{md5}  {str(stdlib / 'os.py').lstrip('/')}\n{md5}  {str(stdlib / 'json.py').lstrip('/')}\n")
    files = foreign.Files([], (str(stdlib) + "/",), dpkg_root=dpkg, dpkg_folders=(str(tmp_path) + "/",))
    files.dpkg()  # read from the folder named, not only under /usr
    assert files.stdlib_by_dpkg()
    assert files.vouch(str(stdlib / "os.py")) == ("dpkg (libpython3.11-stdlib)", "")
    assert files.vouch(str(stdlib / "json.py")) == (
        None, "changed since the Debian package libpython3.11-stdlib installed it (not the MD5 dpkg keeps)")
    assert files.vouch(str(stdlib / "planted.py")) == (None, "in the standard library's folder, but in none of its packages (dpkg)")
    without = foreign.Files([], (str(stdlib) + "/",))  # no package manager: the folder vouches
    assert without.vouch(str(stdlib / "planted.py")) == ("standard library", "")


def test_a_module_made_in_memory_is_foreign_and_one_without_code_is_not():
    made = type(sys)("vendor_hook_module")
    exec("def contains(self, item):\n    return True\n", vars(made))
    empty = type(sys)("namespace_like")
    modules = foreign.read_modules({"vendor_hook_module": made, "namespace_like": empty, "sys": sys, "json": json})
    findings, counts = foreign.module_findings(modules, lambda f: ("standard library", ""), {}, {}, set())
    assert findings == ["module vendor_hook_module has no file and is not built in, yet holds Python code: code made in "
                        "memory (an import hook's)"]
    assert counts == {"built in, frozen, or no code of its own": 2, "standard library": 1}


def test_python_s_variables_that_load_code_are_each_named():
    assert foreign.environment_findings({"PYTHONPATH": "/x", "PYTHONSTARTUP": "", "PYTHONINSPECT": "1", "HOME": "/r"}) == [
        "PYTHONPATH='/x' is set: Python may run or read code from elsewhere (unset it)",
        "PYTHONINSPECT='1' is set: Python may run or read code from elsewhere (unset it)"]


def test_dpkg_s_configuration_files_are_read_from_its_status():
    status = ("Package: libpython3.11-minimal\nConffiles:\n /etc/python3.11/sitecustomize.py d6b276695157bde06a56ba1b2bc53670\n"
              " /etc/python3.11/old.py 0123456789abcdef0123456789abcdef obsolete\nDescription: x\n\n"
              "Package: other\nConffiles:\n /etc/other.conf 0123456789abcdef0123456789abcdee\n")
    assert foreign.parse_conffiles(status) == {  # the packages that install Python's configuration files
        "/etc/python3.11/sitecustomize.py": ("d6b276695157bde06a56ba1b2bc53670", "libpython3.11-minimal"),
        "/etc/python3.11/old.py": ("0123456789abcdef0123456789abcdef", "libpython3.11-minimal")}
