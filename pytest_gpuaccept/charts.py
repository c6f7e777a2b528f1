"""Small inline SVG line charts for the report: self-contained, no script, every text escaped."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

from .units import human_bytes

WIDTH, HEIGHT, PAD = 520, 170, 42


def line_chart(title: str, xs: Sequence[float], lines: Sequence[tuple[str, Sequence[float | None], str]],
               unit: str, threshold: float | None = None, threshold_label: str = "", vline: float | None = None,
               vline_label: str = "", x_label: str = "t (s)", log2_x: bool = False) -> str:
    """One chart: each line a (label, values, colour); an optional horizontal threshold and vertical marker."""
    points = [(x, v) for _label, values, _c in lines for x, v in zip(xs, values) if v is not None]
    if not points:
        return f"<p>{html.escape(title)}: no data</p>"
    tx = (lambda x: math.log2(x)) if log2_x else (lambda x: x)
    x_min, x_max = min(tx(x) for x in xs), max(tx(x) for x in xs)
    y_values = [v for _x, v in points] + ([threshold] if threshold is not None else [])
    y_min, y_max = min(0.0, min(y_values)), max(y_values) * 1.08 or 1.0
    x_span, y_span = (x_max - x_min) or 1.0, (y_max - y_min) or 1.0

    def px(x: float) -> float:
        return PAD + (tx(x) - x_min) / x_span * (WIDTH - 2 * PAD)

    def py(y: float) -> float:
        return HEIGHT - PAD / 2 - (y - y_min) / y_span * (HEIGHT - PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'style="background:#fff;border:1px solid #ddd;margin:4px">',
             f'<text x="{PAD}" y="12" font-size="11" font-weight="bold">{html.escape(title)}</text>',
             f'<text x="2" y="{py(y_max) + 4:.1f}" font-size="9">{y_max:.4g} {html.escape(unit)}</text>',
             f'<text x="2" y="{py(y_min):.1f}" font-size="9">{y_min:.4g}</text>',
             f'<text x="{PAD}" y="{HEIGHT - 2}" font-size="9">{_x_tick(min(xs), log2_x)}</text>',
             f'<text x="{WIDTH - PAD}" y="{HEIGHT - 2}" font-size="9" text-anchor="end">'
             f'{_x_tick(max(xs), log2_x)} {html.escape(x_label)}</text>']
    for label, values, colour in lines:
        coords = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, values) if v is not None)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}">'
                     f"<title>{html.escape(label)}</title></polyline>")
    if threshold is not None:
        y = py(threshold)
        parts.append(f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y:.1f}" y2="{y:.1f}" stroke="#cf222e" '
                     f'stroke-dasharray="4,3"/><text x="{WIDTH - PAD}" y="{y - 3:.1f}" font-size="9" '
                     f'text-anchor="end" fill="#cf222e">{html.escape(threshold_label)}</text>')
    if vline is not None and x_min <= tx(vline) <= x_max:
        x = px(vline)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD / 2}" y2="{HEIGHT - PAD / 2}" stroke="#888" '
                     f'stroke-dasharray="2,2"/><text x="{x + 3:.1f}" y="{PAD / 2 + 8}" font-size="9" '
                     f'fill="#555">{html.escape(vline_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _x_tick(x: float, sizes: bool) -> str:
    """A size axis reads 8 MiB ... 16 GiB; a time axis in plain numbers."""
    return human_bytes(x) if sizes else f"{x:.4g}"


def timeline_charts(timeline: dict[str, Any]) -> str:
    """Utilisation (with threshold and warmup), SM clock, power and temperature of one GPU over the load."""
    rows = timeline["rows"]
    xs = [r[0] for r in rows]
    warmup = timeline.get("warmup_s")
    threshold = timeline.get("threshold")
    charts = [line_chart("GPU utilisation", xs, [("utilisation %", [r[1] for r in rows], "#0969da")], "%",
                         threshold, f"threshold {threshold:g} %" if threshold is not None else "",
                         warmup, f"warmup {warmup:g} s" if warmup is not None else "")]
    for title, column, unit, colour in (("SM clock", 2, "MHz", "#8250df"), ("power", 3, "W", "#bf8700"),
                                        ("temperature", 4, "°C", "#cf222e")):
        charts.append(line_chart(title, xs, [(title, [r[column] for r in rows], colour)], unit, vline=warmup,
                                 vline_label="warmup"))
    return "".join(charts)


def busbw_chart(table: list[list[Any]], threshold: float) -> str:
    """busbw over message size (log scale) for one all_reduce run, out-of-place and in-place, and the threshold."""
    body = [row for row in table[1:] if isinstance(row[0], int) and row[0] > 0]
    xs = [row[0] for row in body]
    in_place = [row[2] if isinstance(row[2], (int, float)) else None for row in body]
    return line_chart("all_reduce busbw over message size", xs,
                      [("out-of-place", [row[1] for row in body], "#0969da"), ("in-place", in_place, "#8c959f")],
                      "GB/s", threshold, f"threshold {threshold:g} GB/s", x_label="message size (log scale)", log2_x=True)


def heat_map(title: str, cells: dict[tuple[int, int], tuple[float | None, str]], unit: str) -> str:
    """A GPU x GPU grid (row: from, column: to), each cell its value, shaded by it; failed red, unmeasured grey."""
    if not cells:
        return ""
    size = max(max(pair) for pair in cells) + 1
    values = [v for v, _outcome in cells.values() if v is not None]
    top = max(values) if values else 1.0
    style = "padding:2px 6px;text-align:right;font-size:11px;border:1px solid #fff"
    head = "".join(f'<th style="{style}">GPU{j}</th>' for j in range(size))
    rows = []
    for i in range(size):
        tds = []
        for j in range(size):
            value, outcome = cells.get((i, j), (None, ""))
            if i == j:
                tds.append(f'<td style="{style};background:#eee">—</td>')
                continue
            if outcome == "passed" and value is not None:
                shade = int(235 - 120 * (value / top if top else 0))
                colour = f"rgb({shade},{min(255, shade + 40)},{shade})"
            elif outcome == "failed":
                colour = "#f4b6b6"
            else:
                colour = "#d0d0d0"
            shown = "—" if value is None else f"{value:g}"
            tds.append(f'<td style="{style};background:{colour}" title="GPU{i}->GPU{j}: {outcome}">{shown}</td>')
        rows.append(f'<tr><th style="{style}">GPU{i}</th>{"".join(tds)}</tr>')
    return (f'<h4>{html.escape(title)} ({html.escape(unit)}; row: from, column: to)</h4>'
            f'<table style="border-collapse:collapse"><tr><th></th>{head}</tr>{"".join(rows)}</table>')
