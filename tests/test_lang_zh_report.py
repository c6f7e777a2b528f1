"""The demo's report in zh-CN has no untranslated string (issue 43): every word of the page that is not data is
Chinese, in our parts, pytest-html's and each row's; the judges' messages are kept as the original evidence, labelled
(lang="en"); printed to PDF by Chromium it has no missing glyph. An ACCEPTED and a REJECTED demo, run once each."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from test_lang_zh import HEADLESS, ZH, _chromium, _notdef_glyphs

from pytest_gpuaccept import i18n
from pytest_gpuaccept.clauses import cluster, registry
from pytest_gpuaccept.cluster import summary
from pytest_gpuaccept.report.results import Results, verdict_line
from pytest_gpuaccept.verdict import Check, Outcome

# Its tests share a module fixture (one whole run): one worker builds it once (test.sh: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_lang_zh_report")

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
# Kept in every language (the glossary: figures, units, clause keys, subjects, paths, digests and the tools' own words
# stay as they are): product, interface and tool names and the abbreviations the Chinese text uses beside its words.
TERMS = {"NVIDIA", "NVML", "NVLink", "NVLinks", "NVSwitch", "CUDA", "PCIe", "PCI", "UUID", "MIG", "ECC", "GEMM", "DCGM",
         "Xid", "NVRM", "sysfs", "CPU", "GPU", "GPUs", "HBM", "TFLOPS", "SM", "CE", "P2P", "HW", "AER", "SHA", "JSON",
         "MPI", "NCCL", "NVLS", "MNNVL", "IMEX", "READY", "Gres", "Kubernetes", "Ready", "cordon", "pod", "rank",
         "PyTorch", "DDP", "gloo", "rail", "all", "clique", "fabric", "Pass", "Fail", "Warn", "Skip", "RDMA", "SSH",
         "ib_write_bw", "iperf3", "nvbandwidth", "p2pBandwidthLatencyTest", "nccl", "tests", "all_reduce", "busbw",
         "out", "of", "place", "INFO", "NCCL_DEBUG", "NCCL_ALGO", "Ring", "ethtool", "IFACE", "state", "completed",
         "status", "success", "port_xmit_data", "port_rcv_data", "mlx5_i", "mlx5", "hw_counters", "counters",
         "statistics", "aer_dev_", "device_local_copy", "host_to_device", "device_to_host_memcpy_ce", "pytest", "html",
         "gpuaccept", "verify", "doctor", "schedule", "py", "schedule.py", "CRC", "NVL", "sxm", "pcie", "nvl",
         "superchip", "nvidia", "smi", "topo", "nvlink", "NV", "max", "ms", "GB", "MB", "MHz", "links", "ok", "OK",
         "LIVE", "REPLAY", "SIMULATED", "INCOMPLETE", "ACCEPTED", "REJECTED", "ID", "SHA-256", "conftest", "pytest-html"}
# Results values that are words the page must say in the language (never taken for data).
WORDS_NOT_DATA = {"outcome", "verdict", "mode", "complete"}
# The judges' words: shown only as the original, labelled (lang="en"), never taken for data.
ORIGINALS = {"message", "unconfirmed"}


class Visible(HTMLParser):
    """A page's text as a reader sees it: no script, style or raw output (<pre>), nor the judges' originals
    (an element with lang="en"); pytest-html's templates are kept (their words show when a filter leaves no row)."""

    SKIPPED = ("script", "style", "pre")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []
        self.text: list[str] = []
        self.blob = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if named.get("data-jsonblob"):
            self.blob = named["data-jsonblob"] or ""
        if tag in ("br", "img", "input", "meta", "link", "hr", "source"):
            return
        self.stack.append(tag in self.SKIPPED or named.get("lang") == "en")

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("br", "img", "input", "meta", "link", "hr", "source") and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not any(self.stack) and data.strip():
            self.text.append(data.strip())


def visible(fragment: str) -> list[str]:
    parser = Visible()
    parser.feed(fragment)
    parser.close()
    return parser.text


def page_text(page: str) -> list[str]:
    """The page's own text and, from pytest-html's rows (drawn from its JSON), each row's cells but the test id and
    clause key, and its detail."""
    parser = Visible()
    parser.feed(page)
    text = list(parser.text)
    blob = pytest_html_data(page)
    for runs in blob["tests"].values():
        for run in runs:
            cells = [c for c in run["resultsTableRow"] if "col-testId" not in c and "col-clause" not in c]
            text += [t for cell in cells for t in visible(cell)] + visible(run.get("log", ""))
    return text


def pytest_html_data(page: str) -> dict[str, Any]:
    """pytest-html's rows and environment, as the page carries them (its JSON, in one attribute)."""
    parser = Visible()
    parser.feed(page)
    return dict(json.loads(html.unescape(parser.blob)))


def _strings(value: Any, key: str = "") -> list[str]:
    if isinstance(value, str):
        return [] if key in WORDS_NOT_DATA | ORIGINALS else [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in ORIGINALS for s in _strings(k) + _strings(v, str(k))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, key)]
    return []


def english_left(folder: Path) -> list[str]:
    """The page's English once data is taken out: what the results file carries (messages, required values, units,
    host, tools and their notes, the contract's warnings: English in every language), clause keys, subjects, paths,
    digests, figures, code (`...`), and an English word beside its Chinese (`通过 (ACCEPTED)`)."""
    results = json.loads((folder / "gpuaccept-results.json").read_text())
    page = (folder / "gpuaccept-report.html").read_text()
    environment = pytest_html_data(page)["environment"]  # pytest-metadata's, shown in the auditor's environment too
    data = ({s for s in _strings(results) if len(s) > 1} | set(registry.ALL_CLAUSES) | set(environment)
            | {v if isinstance(v, str) else json.dumps(v) for v in environment.values()})
    datum = re.compile("|".join(rf"(?<![\w.-]){re.escape(d)}(?![\w-])" for d in sorted(data, key=len, reverse=True)))
    left = []
    for text in page_text(page):
        text = datum.sub(" ", text)
        text = re.sub(r"`[^`]*`", " ", text)  # a contract key or a command, as code
        text = re.sub(rf"({CJK.pattern})\s*\([A-Za-z ]+\)", r"\1", text)  # 通过 (ACCEPTED), 重放 (replay)
        text = re.sub(r"\S*[/\\]\S*|\S+\.(?:txt|json|yaml|html)\b|\b[0-9a-f]{12,}\b|GPU\d+(?:-(?:>)?GPU\d+)?", " ", text)
        words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9_.\-']*[A-Za-z0-9]|[A-Za-z]{2,}", CJK.sub(" ", text))
                 if w not in TERMS and not re.fullmatch(r"[A-Z]?\d.*|[A-Z][A-Z0-9]*\d[A-Z0-9]*|v\d[\d.]*", w)]
        if words:
            left.append(" ".join(words))
    return sorted(set(left))


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """The demo's ACCEPTED and REJECTED runs in zh-CN, each into a folder of its own (about 3 s each)."""
    root = tmp_path_factory.mktemp("zh-demo")
    found = {}
    for name, extra in (("accepted", []), ("rejected", ["--rejected"])):
        done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "demo", str(root / name), "--gpuaccept-lang", ZH,
                               *extra], capture_output=True, text=True, timeout=300)
        assert (root / name / "gpuaccept-report.html").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
        found[name] = (root / name, done.stdout)
    return found


@pytest.mark.parametrize("name", ["accepted", "rejected"])
def test_the_demo_s_report_in_chinese_has_no_english_but_data_and_the_labelled_originals(demos, name):
    folder, _said = demos[name]
    assert english_left(folder) == []


def test_the_words_this_test_takes_for_data_are_data(demos):
    """The check above is shown to see English: our heading said in English, and a judge's message unlabelled."""
    folder, _said = demos["rejected"]
    page = (folder / "gpuaccept-report.html").read_text()
    spoiled = folder.parent / "spoiled"
    spoiled.mkdir(exist_ok=True)
    (spoiled / "gpuaccept-results.json").write_text((folder / "gpuaccept-results.json").read_text())
    (spoiled / "gpuaccept-report.html").write_text(
        page.replace(i18n.tr(ZH, "Pairs"), "Pairs", 1).replace('<span lang="en" class="gpuaccept-original">', "<span>", 1)
        .replace(i18n.tr(ZH, "Summary"), "Summary", 1))
    left = english_left(spoiled)
    assert "Pairs" in left and "Summary" in left and len(left) >= 3, left


def test_each_row_says_what_its_clause_checks_and_labels_the_judge_s_message_as_the_original(demos):
    folder, _said = demos["rejected"]
    page = (folder / "gpuaccept-report.html").read_text()
    blob = json.loads(html.unescape(re.search(r"data-jsonblob='([^']*)'", page).group(1)))  # type: ignore[union-attr]
    row = blob["tests"]["test_gpus.py::test_gpu_form_factor[GPU7]"][0]
    assert row["result"] == "Failed"  # pytest-html's own word: its filters and colours read it
    assert row["resultsTableRow"][0] == '<td class="col-result" data-gpuaccept-outcome="failed">不合格</td>'
    assert row["log"].startswith(
        "<b>条款检查内容：</b> 每个 GPU 的 PCI 设备 ID 所对应的形态（sxm、pcie、nvl、superchip），而非其名称\n"
        '<b>检查信息（原文）：</b> <span lang="en" class="gpuaccept-original">GPU7 is PCI device 0x2331, a H100 PCIe '
        "(pcie), not sxm as contracted")
    assert '<span class="failed">11 不合格或未测量 (Failed),</span>' in page and "<h2>摘要</h2>" in page
    assert re.search(r'<p class="run-count">50 项测试，耗时 \d+ ms。</p>', page)


def test_the_terminal_s_last_line_is_the_verdict_in_chinese_with_its_english_word(demos):
    for name, word in (("accepted", "通过 (ACCEPTED)"), ("rejected", "不通过 (REJECTED)")):
        _folder, said = demos[name]
        line = f"gpuaccept 验收结论：{word} [模拟 (SIMULATED)：NVML 读数来自录制文件，而非本主机的驱动]"
        assert any(shown.endswith(f"| {line}") for shown in said.splitlines()), said[-2000:]


@pytest.mark.parametrize(("fields", "english", "chinese"), [
    ({"complete": False, "cluster_node": "n1"}, "gpuaccept verdict: REJECTED (INCOMPLETE) [NODE n1 of a cluster "
     "contract: its own sections only, not the cluster's verdict]", "gpuaccept 验收结论：不通过 (REJECTED)（运行不完整 "
     "(INCOMPLETE)） [集群合同中的节点 n1：仅其自身各节，不是集群的验收结论]"),
], ids=["incomplete-node"])
def test_the_verdict_line_of_an_incomplete_node_in_both_languages(fields, english, chinese):
    check = Check("gpus.count", "host", Outcome.PASSED, 8, "GPUs", "8", "8 GPUs")
    results = Results("rejected", True, "2026", "2026", {"vendor": "V", "reference": "", "path": "/c", "sha256": "0" * 64},
                      {"hostname": "h", "gpus": [], "driver": None}, [check], mode="live")
    for key, value in fields.items():
        setattr(results, key, value)
    assert (verdict_line(results), verdict_line(results, ZH)) == (english, chinese)


def test_the_rejected_demo_s_chinese_report_prints_with_no_missing_glyph(demos):
    folder, _said = demos["rejected"]
    pdf = folder.parent / "rejected.pdf"
    subprocess.run([_chromium(), *HEADLESS, "--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                    (folder / "gpuaccept-report.html").as_uri()], capture_output=True, timeout=180, check=False)
    assert _notdef_glyphs(pdf.read_bytes()) == 0


def test_the_cluster_s_node_grid_says_its_own_words_in_chinese(monkeypatch):
    """The grid cluster/summary.py draws (52 nodes: one with a failure, 50 open rows, one folded) in the report's
    language; in English it is as summary.py drew it."""
    row = {"cluster.pairs": {Outcome.PASSED: 3, Outcome.FAILED: 0, Outcome.NOT_MEASURED: 0}}
    grid = {f"n{i:04d}": {k: dict(v) for k, v in row.items()} for i in range(52)}
    grid["n0007"]["cluster.pairs"][Outcome.FAILED] = 1
    drawn = summary.node_grid_html(grid)
    monkeypatch.setattr(summary, "render", lambda checks, nodes_clause: drawn)
    assert cluster.REPORT.render([], "en") == drawn
    chinese = cluster.REPORT.render([], ZH)
    assert chinese == (drawn.replace("<h3>Nodes (52: 1 with checks that did not pass)</h3>",
                                     "<h3>节点（共 52 个，其中 1 个有未合格的检查）</h3>")
                       .replace("<th>node<th>", "<th>节点<th>")
                       .replace("<summary>2 more nodes, every check passed</summary>", "<summary>另有 2 个节点，全部检查合格</summary>"))
    assert chinese != drawn
