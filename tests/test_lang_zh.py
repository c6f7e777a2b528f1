"""`--gpuaccept-lang zh-CN`: the report, the terminal's verdict lines, doctor and verify in Simplified Chinese (issue 43).
Every English template the package says through i18n.tr has a translation with the same fields; the catalog uses the
glossary's terms (docs/glossary-zh-CN.md); the report of a SIMULATED 8-GPU run printed to PDF by Chromium embeds a CJK
font and shows no missing glyph (.notdef), and says 模拟 (SIMULATED) on every page; the results JSON stays English."""

from __future__ import annotations

import ast
import importlib
import json
import re
import shutil
import string
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from builders import signer_run

import pytest_gpuaccept
from pytest_gpuaccept import doctor, i18n
from pytest_gpuaccept.clauses import registry
from pytest_gpuaccept.doctor import HINTS, Need, project_source, render, torch_requirement
from pytest_gpuaccept.report.page import banner
from pytest_gpuaccept.report.results import Results
from pytest_gpuaccept.verdict import Check, Outcome

# Its tests share a module fixture (one whole run): one worker builds it once (test.sh: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_lang_zh")

PACKAGE = Path(pytest_gpuaccept.__file__).parent
DOCS = PACKAGE.parent / "docs"
ZH = "zh-CN"
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000"]
VERDICTS = ("ACCEPTED", "REJECTED")
# tr() calls whose template is computed: what each can be (a new one fails the test below until it is listed here)
DYNAMIC = {"results.verdict.upper()": VERDICTS, "recomputed.verdict.upper()": VERDICTS,
           "shown(recomputed.recorded_verdict, 40).upper()": VERDICTS, "template@doctor.py": tuple(HINTS.values()),
           "clause.doc": tuple(clause.doc for clause in registry.CLAUSES)}


def _loop_values(tree: ast.AST) -> dict[str, list[str]]:
    """Names bound by `for x in ("a", "b")` (or tuples of tuples): the strings each can be."""
    values: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.For, ast.comprehension)) or not isinstance(node.iter, ast.Tuple):
            continue
        targets = [node.target] if isinstance(node.target, ast.Name) else list(getattr(node.target, "elts", []))
        for i, target in enumerate(targets):
            for item in node.iter.elts:
                value = item if isinstance(node.target, ast.Name) else (
                    item.elts[i] if isinstance(item, ast.Tuple) and i < len(item.elts) else None)
                if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    values.setdefault(target.id, []).append(value.value)
    return values


def _constants(node: ast.AST) -> list[str] | None:
    """A literal string, or each branch of `"a" if c else "b"`; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _constants(node.body), _constants(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def _parameter_values(tree: ast.AST, name: str) -> list[str]:
    """Where `name` is a parameter of a function of the file: the literals its calls pass for it."""
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        params = [a.arg for a in func.args.args]
        if name not in params:
            continue
        position = params.index(name)
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == func.name:
                args = [k.value for k in call.keywords if k.arg == name]
                args += call.args[position:position + 1]
                found += [s for a in args for s in _constants(a) or []]
    return found


def templates(path: Path, module: object) -> tuple[list[str], list[str]]:
    """Every template a module passes to tr(lang, template, ...), and the expressions that could not be resolved."""
    tree = ast.parse(path.read_text())
    loops = _loop_values(tree)
    assigned: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = _constants(node.value)
            if values is not None:
                assigned.setdefault(node.targets[0].id, []).extend(values)
    found, unresolved = [], []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tr"
                and len(node.args) >= 2):
            continue
        arg = node.args[1]
        values = _constants(arg)
        if values is None and isinstance(arg, ast.Name):
            constant = getattr(module, arg.id, None)
            values = (loops.get(arg.id, []) + assigned.get(arg.id, []) + ([constant] if isinstance(constant, str) else [])
                      + _parameter_values(tree, arg.id)) or None
        if values is None and isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name):
            table = getattr(module, arg.value.id, None)  # a module's table of templates: KINDS[rejected], FIRST[outcome]
            items = list(table.values()) if isinstance(table, dict) else list(table) if isinstance(table, (tuple, list)) else []
            values = [item for item in items if isinstance(item, str)] or None
        if values is None:
            key = ast.unparse(arg) if not isinstance(arg, ast.Name) else f"{arg.id}@{path.name}"
            values = list(DYNAMIC.get(key, ()))
            if not values:
                unresolved.append(f"{path.name}:{node.lineno}: tr(lang, {ast.unparse(arg)})")
        found += values
    return found, unresolved


def translated_modules() -> list[Path]:
    """Every module of the package that says something through i18n.tr."""
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "i18n.py" and "i18n import" in p.read_text()
                  and re.search(r"\btr\(", p.read_text()))


def every_template() -> list[str]:
    found, unresolved = [], []
    for path in translated_modules():
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        more, missed = templates(path, importlib.import_module(name))
        found += more
        unresolved += missed
    assert unresolved == []
    return list(dict.fromkeys(found))


def fields(template: str) -> set[str]:
    return {name for _text, name, _spec, _conv in string.Formatter().parse(template) if name is not None}


def test_every_english_template_the_buyer_reads_has_a_chinese_one_with_the_same_fields():
    """The report, the terminal's verdict lines, doctor and verify: none left in English, none losing a figure."""
    modules = {p.name for p in translated_modules()}
    assert {"page.py", "details.py", "table.py", "charts.py", "hooks.py", "doctor.py", "verifier.py"} <= modules
    found = every_template()
    assert len(found) > 150
    assert i18n.missing(ZH, found) == []
    catalog = i18n.catalog(ZH)
    assert [k for k, v in catalog.items() if fields(k) != fields(v)] == []
    assert sorted(k for k, v in catalog.items() if k == v) == ["CUDA {version}", "SHA-256"]  # the same in both


def glossary() -> list[tuple[str, str]]:
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| [^|]+ \| [^|]+ \|$", (DOCS / "glossary-zh-CN.md").read_text(), re.M)
    return [(en, zh) for en, zh in rows if en != "English" and not en.startswith("---")]


def test_the_catalog_says_each_term_as_the_glossary_does():
    """Wherever a glossary term is in an English template (its fields aside), its translation uses the glossary's
    Chinese word: 验收, 通过/不通过, 合格/不合格, 未测量, 模拟 (SIMULATED), 合同, 证据包, 校验..."""
    terms = glossary()
    assert ("interconnect", "卡间互联") in terms and ("memory bandwidth", "显存带宽") in terms
    assert ("node-to-node network bandwidth", "节点间网络带宽") in terms and ("acceptance", "验收") in terms
    wrong, used = [], set()
    for english, chinese in i18n.catalog(ZH).items():
        words = re.sub(r"\{[^}]*\}", " ", english)
        for term, word in terms:
            if re.search(rf"\b{re.escape(term)}", words, re.I):
                used.add(term)
                if word not in chinese:
                    wrong.append(f"{term} -> {word}: {english!r} -> {chinese!r}")
    assert wrong == []
    assert len(used) >= 15, used


def test_a_language_that_is_not_there_is_a_usage_error(pytester):
    result = pytester.runpytest_inprocess("--contract", "h100-sxm5-8gpu", "--gpuaccept-lang=fr", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --gpuaccept-lang fr: expected one of en, zh-CN" in result.stderr.str()


def test_doctor_says_how_to_get_pytorch_from_what_exists_in_chinese():
    """No index has `pytest-gpuaccept[torch]` (and anyone could register the name): doctor names PyTorch's own
    requirement and this project's folder or wheel."""
    contract = type("C", (), {"path": "h100.yaml"})()
    torch, nvsmi = Need("torch", "python", doctor._hints()["torch"], ["compute"]), Need("nvidia-smi", "tool", "", ["nvlink"])
    nvsmi.found = "/usr/bin/nvidia-smi"
    english = render([torch, nvsmi], contract)  # type: ignore[arg-type]
    assert f"get it: pip install '{torch_requirement()}' (a CUDA build of PyTorch" in english
    assert f"pip install '{project_source()}[torch]'" in english and "pytest-gpuaccept[torch]" not in english
    assert torch_requirement() == "torch>=2.1" and Path(project_source(), "pyproject.toml").is_file()
    chinese = render([torch, nvsmi], contract, ZH)  # type: ignore[arg-type]
    assert chinese.splitlines() == [
        "pytest-gpuaccept 预检 (doctor)：h100.yaml", "",
        "  缺少       torch                      以下条款需要：compute",
        f"           获取方法：pip install 'torch>=2.1'（CUDA 版 PyTorch：https://pytorch.org/get-started/locally/）；"
        f"或从本项目的安装来源安装其附加依赖：pip install '{project_source()}[torch]'",
        "  具备       nvidia-smi                 /usr/bin/nvidia-smi  [nvlink]", "",
        "2 项中缺少 1 项：现在运行会将 compute 判为未测量，验收不通过"]
    assert doctor.HINTS is HINTS


def _results(**fields) -> Results:
    checks = [Check("gpus.count", "host", Outcome.PASSED, 8, "GPUs", "8", "8 GPUs"),
              Check("memory_bandwidth", "GPU0", Outcome.NOT_MEASURED, None, "GB/s", ">= 2512.5", "not measured: no tool")]
    contract = {"vendor": "Example GPU Cloud", "reference": "SLA-1", "path": "/c.yaml", "sha256": "ab" * 32}
    host = {"hostname": "vm", "gpus": [], "driver": None}
    return Results("rejected", False, "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00", contract, host,
                   checks, **fields)


@pytest.mark.parametrize("fields", [
    {"mode": "simulated", "contract_warnings": ["the tools ran as root"], "foreign_code": ["a.py"],
     "foreign_evidence": ["x.txt"], "sources": {"nvml": "rec.json"}},
    {"mode": "replay", "recorded": {"mode": "simulated", "host": "h1", "started": "2026"}, "replayed_from": "/b",
     "cluster_node": "n1"},
], ids=["simulated-with-warnings", "replay-of-a-node"])
def test_the_report_s_own_words_are_all_chinese(fields, monkeypatch):
    """Every template the page asks for, on these paths too (warnings, replay, a cluster's node), is in the catalog."""
    asked: list[str] = []
    table = i18n.catalog(ZH)

    class Recording(dict):
        def get(self, key, default=None):
            asked.append(key)
            return table.get(key, default)

    monkeypatch.setattr(i18n, "catalog", lambda lang: Recording() if lang == ZH else {})
    page = banner(_results(**fields), None, "0" * 64, lang=ZH)
    assert asked and [t for t in asked if t not in table] == []
    assert '<h2 style="color:#cf222e;margin:0">REJECTED</h2><p style="color:#cf222e;font-size:1.5em;font-weight:bold;' \
           'margin:0">验收结论：不通过</p>' in page  # verify reads the English word of the heading, in every language
    assert "运行不完整 (INCOMPLETE)" in page
    assert "vm; 未读到 GPU; 驱动版本未读到; CUDA 版本未读到" in page
    assert "未测量，要求值 &gt;= 2512.5 GB/s" in page


@pytest.fixture(scope="module")
def zh_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The full H100 preset on an 8-GPU fake host, SIMULATED, in zh-CN (253 checks, about 15 s)."""
    folder = tmp_path_factory.mktemp("zh") / "run"
    return folder, signer_run(folder, f"--gpuaccept-lang={ZH}")


def test_the_terminal_ends_in_chinese_and_the_results_stay_english(zh_run):
    folder, done = zh_run
    assert "gpuaccept：不通过 (REJECTED)：152 项合格，1 项不合格，100 项未测量" in done.stdout
    preflight = next(line for line in done.stdout.splitlines() if line.startswith("gpuaccept 预检：缺少 "))  # doctor's
    assert "torch (compute)" in preflight and preflight.endswith("：这些条款将无法测量，判为未测量。获取方法：对这份合同运行 "
                                                                   f"`python -m pytest_gpuaccept doctor --contract {folder / 'vendor.yaml'}`")
    assert f"gpuaccept 报告：{folder / 'gpuaccept-report.html'}" in done.stdout
    results = json.loads((folder / "gpuaccept-results.json").read_text())
    assert (results["verdict"], results["mode"]) == ("rejected", "simulated")
    assert set(results["checks"][0]) >= {"clause", "subject", "outcome", "measured", "unit", "required", "message"}
    assert not re.search(r"[\u4e00-\u9fff]", json.dumps(results, ensure_ascii=False))


def _notdef_glyphs(pdf: bytes) -> int:
    """Glyphs drawn as .notdef (the tofu box: GID 0) in the PDF's text. Chromium embeds each font as a Type0 (CID,
    Identity-H) font whose strings are 2-byte glyph IDs: a character no installed font has is drawn as <0000>."""
    kinds = {m.group(1): m.group(2) for m in re.finditer(rb"(\d+) 0 obj\s*<<\s*/Type\s*/Font\s*/Subtype\s*/(\w+)", pdf)}
    shown = re.compile(rb"/F(\d+)\s+[\d.]+\s+Tf|<([0-9A-Fa-f]*)>\s*Tj|\[([^\]]*)\]\s*TJ")
    count = 0
    for stream in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", pdf, re.S):
        try:
            text = zlib.decompress(stream.group(1))
        except zlib.error:
            continue
        font = None
        for m in shown.finditer(text):
            if m.group(1) is not None:
                font = kinds.get(m.group(1))
            elif font == b"Type0":
                glyphs = m.group(2) if m.group(2) is not None else b"".join(re.findall(rb"<([0-9A-Fa-f]*)>", m.group(3)))
                count += sum(glyphs[i:i + 4] == b"0000" for i in range(0, len(glyphs), 4))
    return count


def test_notdef_glyphs_are_found_where_no_font_has_the_character(tmp_path):
    """The check below, shown to see tofu: U+0800 (Samaritan) is in no font test.sh installs."""
    chromium = _chromium()
    page = tmp_path / "tofu.html"
    page.write_text("<html><meta charset=utf-8><p>abc 模拟</p><p>&#x0800;</p></html>")
    pdf = tmp_path / "tofu.pdf"
    subprocess.run([chromium, *HEADLESS, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri()],
                   capture_output=True, timeout=180, check=False)
    assert _notdef_glyphs(pdf.read_bytes()) == 1


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None or shutil.which("pdftotext") is None:
        pytest.skip("no Chromium or pdftotext here to print the report and read it back (test.sh installs both)")
    if not subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout.strip():
        pytest.fail("no font with Chinese glyphs is installed: test.sh installs fonts-wqy-microhei")
    return found


def test_the_chinese_report_prints_with_a_cjk_font_no_missing_glyph_and_the_mode_on_every_page(zh_run):
    folder, _done = zh_run
    pdf = folder / "report.pdf"
    subprocess.run([_chromium(), *HEADLESS, "--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                    (folder / "gpuaccept-report.html").as_uri()], capture_output=True, timeout=180, check=False)
    data = pdf.read_bytes()
    fonts = {name.decode() for name in re.findall(rb"/BaseFont\s*/[A-Z]{6}\+([\w-]+)", data)}
    assert fonts & {"WenQuanYiMicroHei", "NotoSansCJKsc-Regular", "NotoSerifCJKsc-Regular", "DroidSansFallbackFull"}, fonts
    assert _notdef_glyphs(data) == 0
    pages = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                           check=True).stdout.rstrip("\f\n").split("\f")
    head, mode = "不通过 (REJECTED) · Example GPU Cloud · SLA-2026-0042", "模拟 (SIMULATED)"
    assert len(pages) > 1 and [n for n, text in enumerate(pages, 1) if head not in text or mode not in text] == []
    first = re.sub(r"\s+", " ", pages[0])
    for said in ("REJECTED 验收结论：不通过", "模拟 (SIMULATED)：NVML 读数来自录制文件，而非本主机的驱动", "共 253 项检查：152 项合格，1 项不合格，100 项未测量。",
                 "主机 trial-h100-sheet; 8x NVIDIA H100 80GB HBM3; 驱动 595.71.05; CUDA 13.2", "未合格（101 项）"):
        assert said in first, said
    # none of the report's own English words is left (the words of a check's message and of other sections aside)
    page = (folder / "gpuaccept-report.html").read_text()
    own = page[page.index('<div id="gpuaccept-verdict"'):page.index("<h3>按条款汇总</h3>")]
    english = [t for t in i18n.catalog(ZH) if not fields(t) and len(t.split()) >= 2 and t in own]
    assert english == []


def test_verify_speaks_chinese(zh_run):
    """verify re-judges the bundle in a process of its own and says what it verified, in Chinese."""
    folder, _done = zh_run
    done = subprocess.run([sys.executable, "-I", "-m", "pytest_gpuaccept", "verify", str(folder), "--gpuaccept-lang", ZH],
                          capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    assert lines[0] == f"校验 (verify) {folder}", done.stdout
    assert lines[1].startswith("模式：模拟 (SIMULATED)（NVML 读数来自录制文件，不是实测主机）；读数来源：")
    assert lines[2].startswith("判定所依据的合同：证据包中的 ")
    assert lines[3].startswith("主机（来自原始证据，重新判定）：trial-h100-sheet，驱动 595.71.05，8 个 GPU：GPU0 ")
    assert lines[4] == ("在校验机器上依据原始证据重新计算的验收结论：不通过 (REJECTED)，共 253 项检查，与证据包中的结果一致"
                        "（不通过 (REJECTED)）")
    assert lines[5].startswith("校验通过 (OK)：每个文件都与清单一致；清单 SHA-256 ") and done.returncode == 0


def test_verify_on_a_folder_that_is_no_bundle_says_so_in_chinese(tmp_path):
    done = subprocess.run([sys.executable, "-I", "-m", "pytest_gpuaccept", "verify", str(tmp_path), "--gpuaccept-lang", ZH],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, f"校验 (verify) {tmp_path}：不是证据包：其中没有 gpuaccept-evidence 目录；"
                                                 "证据包是报告所在的目录（gpuaccept-report.html 与 gpuaccept-evidence/ 并列），或其证据目录\n")
