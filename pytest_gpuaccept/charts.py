"""Small inline SVG line charts for the report: self-contained, no script, every text escaped, integer
coordinates and at most MAX_POINTS points a line (a run of 10 minutes must not make a report of megabytes)."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

from .units import human_bytes

WIDTH, HEIGHT, PAD = 520, 170, 42
MAX_POINTS = 240  # per line: a bucket keeps its lowest and highest value, so a dip still shows
PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#d1242f", "#57606a")


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
               vline_label: str = "", x_label: str = "t (s)", log2_x: bool = False) -> str:
    """One chart: each line a (label, values, colour); an optional horizontal threshold and vertical marker."""
    return multi_chart(title, [(label, xs, values, colour) for label, values, colour in lines], unit, threshold,
                       threshold_label, vline, vline_label, x_label, log2_x)


def multi_chart(title: str, lines: Sequence[tuple[str, Sequence[float], Sequence[float | None], str]], unit: str,
                threshold: float | None = None, threshold_label: str = "", vline: float | None = None,
                vline_label: str = "", x_label: str = "t (s)", log2_x: bool = False) -> str:
    """Lines with their own x values (label, xs, values, colour): e.g. one GPU each, sampled at its own times."""
    series: list[tuple[str, Sequence[float], list[float], str]] = []
    for label, xs, values, colour in lines:
        known = [v for v in values if v is not None]  # a sample NVML did not answer: no point, neighbours joined
        if len(known) == len(values) == len(xs):
            series.append((label, xs, known, colour))
        else:  # what zip pairs: a value without its time (or a time without its value) is no point
            pairs = [(x, v) for x, v in zip(xs, values) if v is not None]
            series.append((label, [x for x, _v in pairs], [v for _x, v in pairs], colour))
    drawn = [(xs, values) for _label, xs, values, _c in series if values]
    if not drawn:
        return f"<p>{html.escape(title)}: no data</p>"
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
        parts.append(f'<line x1={PAD} x2={WIDTH - PAD} y1={y} y2={y} stroke="#cf222e" stroke-dasharray="4,3"/>'
                     f'<text x={WIDTH - PAD} y={y - 3} text-anchor=end fill="#cf222e">{html.escape(threshold_label)}</text>')
    if vline is not None and x_min <= tx(vline) <= x_max:
        x = px(vline)
        parts.append(f'<line x1={x} x2={x} y1={PAD // 2} y2={HEIGHT - PAD // 2} stroke="#888" stroke-dasharray="2,2"/>'
                     f'<text x={x + 3} y={PAD // 2 + 8} fill="#555">{html.escape(vline_label)}</text>')
    if len(series) > 1:
        keys = "".join(f'<tspan fill="{colour}"> {html.escape(label)}</tspan>' for label, _xs, _v, colour in series)
        parts.append(f"<text x={WIDTH - PAD} y=12 text-anchor=end>{keys}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _x_tick(x: float, sizes: bool) -> str:
    """A size axis reads 8 MiB ... 16 GiB; a time axis in plain numbers."""
    return human_bytes(x) if sizes else f"{x:.4g}"


def timeline_charts(timelines: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Utilisation (with threshold and warmup), SM clock, power and temperature over the load: one chart each,
    a line per subject (GPU), so that eight GPUs are four charts, and the one that lags stands out."""
    if not timelines:
        return ""
    first = timelines[0][1]
    warmup, threshold = first.get("warmup_s"), first.get("threshold")
    colours = [PALETTE[n % len(PALETTE)] for n in range(len(timelines))]

    times = [[r[0] for r in t["rows"]] for _label, t in timelines]  # each GPU's, shared by its four lines

    def lines(column: int) -> list[tuple[str, list[float], list[float | None], str]]:
        return [(label, xs, [r[column] for r in t["rows"]], colour)
                for (label, t), xs, colour in zip(timelines, times, colours)]

    charts = [multi_chart("GPU utilisation", lines(1), "%", threshold,
                          f"threshold {threshold:g} %" if threshold is not None else "",
                          warmup, f"warmup {warmup:g} s" if warmup is not None else "")]
    for title, column, unit in (("SM clock", 2, "MHz"), ("power", 3, "W"), ("temperature", 4, "°C")):
        charts.append(multi_chart(title, lines(column), unit, vline=warmup, vline_label="warmup"))
    return "".join(charts)


def busbw_chart(table: list[list[Any]], threshold: float) -> str:
    """busbw over message size (log scale) for one all_reduce run, out-of-place and in-place, and the threshold."""
    body = [row for row in table[1:] if isinstance(row[0], int) and row[0] > 0]
    xs = [row[0] for row in body]
    in_place = [row[2] if isinstance(row[2], (int, float)) else None for row in body]
    return line_chart("all_reduce busbw over message size", xs,
                      [("out-of-place", [row[1] for row in body], "#0969da"), ("in-place", in_place, "#8c959f")],
                      "GB/s", threshold, f"threshold {threshold:g} GB/s", x_label="message size (log scale)", log2_x=True)


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
                tds.append('<td style="background:#eee">—' if i == j else "<td>")
                continue
            value, outcome = cells[(i, j)]
            if outcome == "passed" and value is not None:
                shade = int(235 - 120 * (value / top if top else 0))
                colour = f"rgb({shade},{min(255, shade + 40)},{shade})"
            elif outcome == "failed":
                colour = "#f4b6b6"
            else:
                colour = "#d0d0d0"
            shown = "—" if value is None else f"{value:g}"
            tds.append(f'<td style="background:{colour}" title="{names[i]}->{names[j]}: {html.escape(outcome)}">{shown}')
        rows.append(f"<tr><th>{names[i]}{''.join(tds)}")
    return (f"<h4>{html.escape(title)} ({html.escape(unit)}; {html.escape(legend)})</h4>"
            f"<table class=gh><tr><th>{head}{''.join(rows)}</table>")
