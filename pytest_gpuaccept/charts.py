"""Small inline SVG line charts, heat maps and tables for the report: self-contained, no script, every text
escaped, integer coordinates and at most MAX_POINTS points a line (a run of 10 minutes must not make a report
of megabytes). Every colour a text is drawn in reads on its background at WCAG AA (tests/test_report_readable.py).
Clause modules draw their own report sections with these; nothing here knows a clause."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any, Sequence

from .i18n import DEFAULT, tr
from .units import human_bytes
from .untrusted import escaped

if TYPE_CHECKING:
    from .probes.nvml import GpuSeries

WIDTH, HEIGHT, PAD = 520, 170, 42
MAX_POINTS = 240  # per line: a bucket keeps its lowest and highest value, so a dip still shows
# Line colours, also the legend's text on the chart's white: each at least 4.5:1 on white (WCAG AA).
PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#1b7c83", "#d1242f", "#57606a")
TEXT = "#1f2328"  # the report's text colour: 15.8:1 on white
SECOND_LINE = "#6e7781"  # a second line of one measurement (in-place beside out-of-place): 4.55:1 on white
FAIL_RED = "#cf222e"  # a threshold and its label: 5.4:1 on white
MARKER_GREY = "#57606a"  # the warmup marker's label: 6.4:1 on white


def safe_text(text: str, limit: int | None = None) -> str:
    """Escape for HTML, make control bytes (ANSI escapes, NUL), bidi overrides and zero-width characters visible
    (untrusted.escaped), and bound the length."""
    cut = ""
    if limit is not None and len(text) > limit:
        cut = f"\n[... {len(text) - limit} more characters in the evidence file]"
        text = text[:limit]
    return html.escape(escaped(text, keep="\t\n\r") + cut)


OUTCOME_CLASS = {"passed": "gp", "failed": "gf", "not_measured": "gn"}  # their colours: the report's stylesheet


def _cell(value: Any) -> str:
    css = OUTCOME_CLASS.get(value) if isinstance(value, str) else None
    return (f"<td class={css}>" if css else "<td>") + safe_text(str(value))


def table(rows: Sequence[Sequence[Any]]) -> str:
    """A plain table (its look in the report's stylesheet, class gt): cells close themselves (HTML5); a cell that
    is an outcome (passed, failed, not_measured) takes its colour."""
    head, *body = rows
    cells = "".join(f"<th>{safe_text(str(c))}" for c in head)
    lines = "".join("<tr>" + "".join(_cell(c) for c in row) for row in body)
    return f"<table class=gt><tr>{cells}{lines}</table>"


def _thin(xs: Sequence[float], values: list[float]) -> tuple[Sequence[float], list[float]]:
    """At most MAX_POINTS points: consecutive buckets, each its lowest and its highest point in time order.

    A dip of one sample among thousands stays drawn. Each bucket's min() and max(), then their first places,
    each over all buckets at once (map): the points min() and max() with a key would pick, at a third of the
    cost (a run's report thins 32 lines of 400 points and more)."""
    count = len(values)
    if count <= MAX_POINTS:
        return xs, values
    size = math.ceil(count / (MAX_POINTS // 2))
    buckets = [values[start:start + size] for start in range(0, count, size)]
    lows, highs = list(map(min, buckets)), list(map(max, buckets))
    kept_x: list[float] = []
    kept_v: list[float] = []
    for start, low, high, at_low, at_high in zip(range(0, count, size), lows, highs, map(list.index, buckets, lows),
                                                 map(list.index, buckets, highs)):
        if at_low == at_high:
            kept_x.append(xs[start + at_low])
            kept_v.append(low)
        elif at_low < at_high:
            kept_x += (xs[start + at_low], xs[start + at_high])
            kept_v += (low, high)
        else:
            kept_x += (xs[start + at_high], xs[start + at_low])
            kept_v += (high, low)
    return kept_x, kept_v


def _level(xs: list[int], ys: list[int]) -> tuple[list[int], list[int]]:
    """The same line less the inner points of each level stretch: points in time order on one pixel row draw one
    segment through them all (a GPU held at 100 %, a pinned clock: most of a healthy load's samples)."""
    if len(ys) < 3:
        return xs, ys
    inner = [n for n, before, y, after in zip(range(1, len(ys) - 1), ys, ys[1:], ys[2:]) if not before == y == after]
    if len(inner) == len(ys) - 2:
        return xs, ys
    kept = [0, *inner, len(ys) - 1]
    return [xs[n] for n in kept], [ys[n] for n in kept]


def line_chart(title: str, xs: Sequence[float], lines: Sequence[tuple[str, Sequence[float | None], str]],
               unit: str, threshold: float | None = None, threshold_label: str = "", vline: float | None = None,
               vline_label: str = "", x_label: str = "t (s)", log2_x: bool = False, lang: str = DEFAULT) -> str:
    """One chart: each line a (label, values, colour); an optional horizontal threshold and vertical marker."""
    return multi_chart(title, [(label, xs, values, colour) for label, values, colour in lines], unit, threshold,
                       threshold_label, vline, vline_label, x_label, log2_x, lang)


def _known(label: str, xs: Sequence[float], values: Sequence[float | None], colour: str
           ) -> tuple[str, Sequence[float], list[float], str]:
    """A line's points with a value: a sample NVML did not answer is no point (its neighbours are joined), nor a
    value without its time (or a time without its value)."""
    known = [v for v in values if v is not None]
    if len(known) == len(values) == len(xs):
        return label, xs, known, colour
    pairs = [(x, v) for x, v in zip(xs, values) if v is not None]
    return label, [x for x, _v in pairs], [v for _x, v in pairs], colour


def multi_chart(title: str, lines: Sequence[tuple[str, Sequence[float], Sequence[float | None], str]], unit: str,
                threshold: float | None = None, threshold_label: str = "", vline: float | None = None,
                vline_label: str = "", x_label: str = "t (s)", log2_x: bool = False, lang: str = DEFAULT) -> str:
    """Lines with their own x values (label, xs, values, colour): e.g. one GPU each, sampled at its own times."""
    series = [_known(*line) for line in lines]
    drawn = [(xs, values) for _label, xs, values, _c in series if values]
    if not drawn:
        return f"<p>{html.escape(tr(lang, '{title}: no data', title=title))}</p>"
    tx = (lambda x: math.log2(x)) if log2_x else (lambda x: x)
    x_low, x_high = min(min(xs) for xs, _v in drawn), max(max(xs) for xs, _v in drawn)
    x_min, x_max = tx(x_low), tx(x_high)  # both transforms (log2, identity) keep the order
    y_low = min(min(values) for _x, values in drawn)
    y_high = max(max(values) for _x, values in drawn)
    if threshold is not None:
        y_low, y_high = min(y_low, threshold), max(y_high, threshold)
    y_min, y_max = min(0.0, y_low), y_high * 1.08 or 1.0
    x_span, y_span = (x_max - x_min) or 1.0, (y_max - y_min) or 1.0

    def px(x: float) -> int:
        return round(PAD + (tx(x) - x_min) / x_span * (WIDTH - 2 * PAD))

    def py(y: float) -> int:
        return round(HEIGHT - PAD / 2 - (y - y_min) / y_span * (HEIGHT - PAD))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width={WIDTH} height={HEIGHT} class=gc font-size=9>',
             f"<text x={PAD} y=12 font-size=11 font-weight=bold>{html.escape(title)}</text>",
             f"<text x=2 y={py(y_max) + 4}>{y_max:.4g} {html.escape(unit)}</text>",
             f"<text x=2 y={py(y_min)}>{y_min:.4g}</text>",
             f"<text x={PAD} y={HEIGHT - 2}>{_x_tick(x_low, log2_x)}</text>",
             f"<text x={WIDTH - PAD} y={HEIGHT - 2} text-anchor=end>{_x_tick(x_high, log2_x)} {html.escape(x_label)}</text>"]
    y_base = HEIGHT - PAD / 2
    # px and py with their factors taken once: a run's timelines are thousands of points
    x_scale, y_scale = (WIDTH - 2 * PAD) / x_span, (HEIGHT - PAD) / y_span
    for label, xs, values, colour in series:
        kept_x, kept_v = _thin(xs, values)
        if log2_x:
            kept_x = [math.log2(x) for x in kept_x]
        coords = " ".join(map("{},{}".format, *_level(
            [round(PAD + (x - x_min) * x_scale) for x in kept_x], [round(y_base - (v - y_min) * y_scale) for v in kept_v])))
        parts.append(f'<polyline fill=none stroke="{colour}" stroke-width=1.5 points="{coords}">'
                     f"<title>{html.escape(label)}</title></polyline>")
    if threshold is not None:
        y = py(threshold)
        parts.append(f'<line x1={PAD} x2={WIDTH - PAD} y1={y} y2={y} stroke="{FAIL_RED}" stroke-dasharray="4,3"/>'
                     f'<text x={WIDTH - PAD} y={y - 3} text-anchor=end fill="{FAIL_RED}">{html.escape(threshold_label)}</text>')
    if vline is not None and x_min <= tx(vline) <= x_max:
        x = px(vline)
        parts.append(f'<line x1={x} x2={x} y1={PAD // 2} y2={HEIGHT - PAD // 2} stroke="#888" stroke-dasharray="2,2"/>'
                     f'<text x={x + 3} y={PAD // 2 + 8} fill="{MARKER_GREY}">{html.escape(vline_label)}</text>')
    if len(series) > 1:
        keys = "".join(f'<tspan fill="{colour}"> {html.escape(label)}</tspan>' for label, _xs, _v, colour in series)
        parts.append(f"<text x={WIDTH - PAD} y=12 text-anchor=end>{keys}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _x_tick(x: float, sizes: bool) -> str:
    """A size axis reads 8 MiB ... 16 GiB; a time axis in plain numbers."""
    return human_bytes(x) if sizes else f"{x:.4g}"


def timeline_charts(timelines: Sequence[tuple[str, dict[str, Any], GpuSeries]], lang: str = DEFAULT) -> str:
    """Utilisation (with threshold and warmup), SM clock, power and temperature over the load: one chart each,
    a line per subject (GPU), so that eight GPUs are four charts, and the one that lags stands out. Each
    timeline is (label, its check's `timeline` details, the GPU's NVML samples)."""
    if not timelines:
        return ""
    first = timelines[0][1]
    warmup, threshold = first.get("warmup_s"), first.get("threshold")
    colours = [PALETTE[n % len(PALETTE)] for n in range(len(timelines))]
    times = [[s.t_s for s in series.samples] for _label, _t, series in timelines]  # shared by a GPU's four lines

    def lines(field: str) -> list[tuple[str, list[float], list[float | None], str]]:
        return [(label, xs, [getattr(s, field) for s in series.samples], colour)
                for (label, _t, series), xs, colour in zip(timelines, times, colours)]

    seconds = tr(lang, "t (s)")
    charts = [multi_chart(tr(lang, "GPU utilisation"), lines("util_percent"), "%", threshold,
                          tr(lang, "threshold {value} {unit}", value=f"{threshold:g}", unit="%")
                          if threshold is not None else "",
                          warmup, tr(lang, "warmup {seconds} s", seconds=f"{warmup:g}") if warmup is not None else "",
                          seconds, lang=lang)]
    for title, field, unit in ((tr(lang, "SM clock"), "sm_clock_mhz", "MHz"), (tr(lang, "power"), "power_w", "W"),
                               (tr(lang, "temperature"), "temp_c", "°C")):
        charts.append(multi_chart(title, lines(field), unit, vline=warmup, vline_label=tr(lang, "warmup"),
                                  x_label=seconds, lang=lang))
    return "".join(charts)


def busbw_chart(table: list[list[Any]], threshold: float, lang: str = DEFAULT) -> str:
    """busbw over message size (log scale) for one all_reduce run, out-of-place and in-place, and the threshold."""
    body = [row for row in table[1:] if isinstance(row[0], int) and row[0] > 0]
    xs = [row[0] for row in body]
    in_place = [row[2] if isinstance(row[2], (int, float)) else None for row in body]
    return line_chart(tr(lang, "all_reduce busbw over message size"), xs,
                      [(tr(lang, "out-of-place"), [row[1] for row in body], "#0969da"),
                       (tr(lang, "in-place"), in_place, SECOND_LINE)],
                      "GB/s", threshold, tr(lang, "threshold {value} {unit}", value=f"{threshold:g}", unit="GB/s"),
                      x_label=tr(lang, "message size (log scale)"), log2_x=True, lang=lang)


HEAT_TEXT = TEXT  # a heat map's numbers (the stylesheet's .gh td): at least 5.5:1 on the darkest green
HEAT_FAILED, HEAT_UNMEASURED, HEAT_DIAGONAL = "#f4b6b6", "#d0d0d0", "#eeeeee"


def heat_colour(value: float | None, top: float, outcome: str) -> str:
    """A cell's background: green, darker the higher its value (up to `top`); failed red, else grey."""
    if outcome == "passed" and value is not None:
        shade = int(235 - 120 * (value / top if top else 0))
        return f"rgb({shade},{min(255, shade + 40)},{shade})"
    return HEAT_FAILED if outcome == "failed" else HEAT_UNMEASURED


def heat_map(title: str, cells: dict[tuple[int, int], tuple[float | None, str]], unit: str,
             labels: Sequence[str] | None = None, legend: str = "row: from, column: to") -> str:
    """A GPU x GPU grid (row: from, column: to), each cell its value, shaded by it; failed red, unmeasured grey.
    `labels` names rows and columns (default GPU<i>); a pair that was not run is an empty cell."""
    if not cells:
        return ""
    size = max(max(pair) for pair in cells) + 1
    names = [html.escape(label) for label in labels] if labels is not None else [f"GPU{j}" for j in range(size)]
    values = [v for v, _outcome in cells.values() if v is not None]
    top = max(values) if values else 1.0
    head = "".join(f"<th>{names[j]}" for j in range(size))
    rows = []
    for i in range(size):
        tds = []
        for j in range(size):
            if i == j or (i, j) not in cells:
                tds.append(f'<td style="background:{HEAT_DIAGONAL}">—' if i == j else "<td>")
                continue
            value, outcome = cells[(i, j)]
            shown = "—" if value is None else f"{value:g}"
            tds.append(f'<td style="background:{heat_colour(value, top, outcome)}" '
                       f'title="{names[i]}->{names[j]}: {html.escape(outcome)}">{shown}')
        rows.append(f"<tr><th>{names[i]}{''.join(tds)}")
    return (f"<h4>{html.escape(title)} ({html.escape(unit)}; {html.escape(legend)})</h4>"
            f"<table class=gh><tr><th>{head}{''.join(rows)}</table>")
