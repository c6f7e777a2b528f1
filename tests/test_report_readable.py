"""A report a first-time reader can read: every text colour of its stylesheet (pytest-html's own included) and
of its heat maps and charts at WCAG AA contrast on its background, the verdict header once per printed page,
and one root-cause line above the per-check lines when NVML, which every clause needs, could not start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import pytest_html
from conftest import DATA, nvml_recording

from pytest_gpuaccept import charts

AA_TEXT = 4.5  # WCAG 2.x AA, normal text (the report has no text large enough for the 3:1 of large text)
WHITE = "#ffffff"
PYTEST_HTML_CSS = (Path(pytest_html.__file__).parent / "resources" / "style.css").read_text()
P2P_LOG = DATA / "p2pBandwidthLatencyTest" / "h100_8gpu_full_p2p_writes_spreadsheet_quoted_no_trailing_spaces.txt"
P2P_CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 8
p2p:
  min_bandwidth: "366.30 GB/s"
  tool: p2pBandwidthLatencyTest
"""


def rgb(colour: str) -> tuple[int, int, int]:
    """#rgb, #rrggbb, rgb(r,g,b) and the named colours pytest-html uses, as 0-255 channels."""
    named = {"black": "#000000", "white": "#ffffff", "green": "#008000", "orange": "#ffa500", "red": "#ff0000"}
    colour = named.get(colour.strip().lower(), colour.strip())
    if colour.startswith("rgb("):
        r, g, b = (int(part) for part in colour[4:-1].split(","))
        return r, g, b
    hexa = colour.lstrip("#")
    hexa = "".join(c * 2 for c in hexa) if len(hexa) == 3 else hexa
    r, g, b = (int(hexa[i:i + 2], 16) for i in (0, 2, 4))
    return r, g, b


def contrast(text: str, background: str) -> float:
    """WCAG 2.x contrast ratio of two colours."""
    def luminance(colour: str) -> float:
        channels = [c / 255 for c in rgb(colour)]
        r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(text), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def rules(css: str) -> list[tuple[str, dict[str, str]]]:
    """(selector, declarations) of each plain rule, one per selector of a list; @-rules' own blocks left out
    (the print rules set no colour)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"@(page|media)[^{]*\{(?:[^{}]|\{[^{}]*\})*\}", "", css)  # @page and @media with their blocks
    found = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        declarations = {name.strip(): value.replace("!important", "").strip() for name, _, value in
                        (d.partition(":") for d in body.split(";")) if value.strip()}
        found += [(" ".join(s.split()), declarations) for s in selectors.split(",") if s.strip()]
    return found


def effective(css: list[tuple[str, dict[str, str]]]) -> dict[str, dict[str, str]]:
    """Each selector's colour and background, the later rule of the same selector winning (the cascade at equal
    specificity: the report's stylesheet follows pytest-html's in the page)."""
    result: dict[str, dict[str, str]] = {}
    for selector, declarations in css:
        for name in ("color", "background-color", "background"):
            if declarations.get(name, "none") not in ("none", "transparent"):  # none: the enclosing background
                result.setdefault(selector, {})["background-color" if name == "background" else name] = declarations[name]
    return result


def background_of(selector: str, styles: dict[str, dict[str, str]]) -> str:
    """The background a selector's text sits on: its own, else the nearest enclosing rule's (a selector it
    starts with), else the page's white."""
    enclosing = [s for s in styles if "background-color" in styles[s]
                 and (selector == s or selector.startswith((s + " ", s + ":", s + ".")))]
    return styles[max(enclosing, key=len)]["background-color"] if enclosing else WHITE


def test_every_text_colour_of_the_page_reads_at_wcag_aa(accept, fake_tools):
    """pytest-html's stylesheet and the report's, as the page has them, one after the other; every selector that
    sets a text colour, on its background; the verdict's own colours; the heat map's cells. pytest-html alone
    fails (its #999 body text is 2.8:1), so the report's overrides are what pass."""
    fake_tools.add("p2pBandwidthLatencyTest", P2P_LOG)
    run = accept(P2P_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    page = (run.path / "gpuaccept-report.html").read_text()
    emitted = "".join(re.findall(r"<style>(.*?)</style>", page, flags=re.S))
    assert "#environment-header, #environment { display: none; }" in emitted
    alone = effective(rules(PYTEST_HTML_CSS))
    assert contrast(alone["body"]["color"], WHITE) < AA_TEXT  # what a reader saw before
    styles = effective(rules(PYTEST_HTML_CSS) + rules(emitted))
    pairs = {(s, v["color"], background_of(s, styles)) for s, v in styles.items() if "color" in v}
    assert len(pairs) > 20
    weak = [(s, text, back, round(contrast(text, back), 2)) for s, text, back in pairs if contrast(text, back) < AA_TEXT]
    assert not weak
    inline = re.findall(r'style="[^"]*?(?<![-\w])color:\s*(#[0-9a-fA-F]{3,6})', page)  # the verdict's heading
    assert inline and all(contrast(c, WHITE) >= AA_TEXT for c in inline)
    cells = re.findall(r'<td style="background:([^";]+)"[^>]*>([^<]+)', page)
    heat_text = styles[".gh td"]["color"]
    assert len(cells) == 8 * 8 and all(contrast(heat_text, back) >= AA_TEXT for back, _label in cells)


@pytest.mark.parametrize("outcome", ["passed", "failed", "not_measured"])
def test_every_heat_map_cell_colour_holds_its_label_at_wcag_aa(outcome):
    """The heat map's numbers on each colour its cells can take (the darkest green is the highest value)."""
    for tenth in range(11):
        value = tenth / 10 * 400.0
        assert contrast(charts.HEAT_TEXT, charts.heat_colour(value, 400.0, outcome)) >= AA_TEXT
    assert contrast(charts.HEAT_TEXT, charts.HEAT_DIAGONAL) >= AA_TEXT


def test_every_chart_text_colour_reads_on_the_charts_white():
    """A chart's labels, its threshold's label and its legend (a line's colour is its legend's text colour)."""
    lines = [(f"GPU{n}", [float(n), 2.0, 3.0], colour) for n, colour in enumerate(charts.PALETTE)]
    svg = charts.line_chart("t", [0.0, 1.0, 2.0], lines, "%", threshold=1.5, threshold_label="threshold",
                            vline=1.0, vline_label="warmup")
    svg += charts.busbw_chart([["size (B)", "oop", "ip"], [8, 1.0, 1.0], [16, 2.0, 2.0]], 1.5)
    fills = set(re.findall(r'(?:<text|<tspan)[^>]*fill="([^"]+)"', svg))
    assert set(charts.PALETTE) <= fills and charts.SECOND_LINE in fills
    assert [f for f in fills if contrast(f, WHITE) < AA_TEXT] == []


def test_the_verdict_header_prints_once_per_page(accept, fake_tools):
    """One page margin box carries the header on every printed page; no element of the page repeats it (a
    position: fixed header printed it a second time on each page)."""
    fake_tools.add("p2pBandwidthLatencyTest", P2P_LOG)
    run = accept(P2P_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    page = (run.path / "gpuaccept-report.html").read_text()
    head = "REJECTED · V · "
    assert page.count("@top-center") == 1 and page.count(f'content: "{head}') == 1
    assert "gpuaccept-page-head" not in page and "position: fixed" not in page
    assert page.count('id="gpuaccept-verdict"') == 1 and page.count(head) == 1


NO_GPU_CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 2
  model: H100
"""


def test_without_nvml_the_root_cause_is_one_line_above_the_per_check_lines(accept):
    """On this machine NVML cannot start (no driver): the run says so once, with how many checks it left
    unmeasured, before pytest's failures; the report says it at the top of the verdict."""
    run = accept(NO_GPU_CONTRACT)
    error = run.json["host"].get("error")
    if not error:
        pytest.skip("NVML started here: this host has a driver")
    lines = run.result.outlines
    cause = [n for n, line in enumerate(lines) if line.startswith("gpuaccept: NVML could not start")]
    assert len(cause) == 1, lines
    unmeasured = [c for c in run.checks() if c["outcome"] == "not_measured" and error in c["message"]]
    assert len(unmeasured) >= 3
    assert lines[cause[0]].startswith(f"gpuaccept: {error}: {len(unmeasured)} checks not measured")
    per_check = [n for n, line in enumerate(lines) if "not measured: NVML could not start" in line
                 or line.startswith("FAILED ")]
    assert per_check and cause[0] < min(per_check)
    page = (run.path / "gpuaccept-report.html").read_text()
    assert page.count('id="gpuaccept-root-cause"') == 1
    assert page.index('id="gpuaccept-root-cause"') < page.index('id="gpuaccept-failures"')


def test_with_nvml_there_is_no_root_cause_line(accept):
    run = accept(NO_GPU_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    assert not any(line.startswith("gpuaccept: NVML") for line in run.result.outlines)
    assert 'id="gpuaccept-root-cause"' not in (run.path / "gpuaccept-report.html").read_text()
