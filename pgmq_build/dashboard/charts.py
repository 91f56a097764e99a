"""Server-rendered SVG charts: a line chart with axes, tick labels and a legend, and a
sparkline. Pure functions from numbers to markup; the values come from the sampler."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# One colour per kind of series, shared by every chart so a reader (and the browser tests,
# which look for these pixels in screenshots) can tell them apart.
COLOURS = {
    "depth": "#1f6fd1",
    "in_flight": "#9b3fc8",
    "oldest_age": "#d8412f",
    "sent": "#1f9d55",
    "consumed": "#e8890c",
}

Point = tuple[float, float | None]  # (unix time, value); None leaves a gap in the line


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    points: Sequence[Point]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above value (an axis maximum people can read)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * exp >= value * (1 - 1e-9):
            return step * exp
    return 10 * exp  # pragma: no cover - the loop always returns


def fmt_number(value: float) -> str:
    """Tick labels: 0, 2.5, 40, 1.2k, 3M."""
    if value == 0:
        return "0"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def gapped(points: Sequence[Point], longest: float) -> list[Point]:
    """`points` with a break (a None) between two samples more than `longest` seconds apart: a
    time the sampler could not measure (a database outage) is drawn as a gap, not as a line."""
    out: list[Point] = []
    for p in points:
        if out and p[0] - out[-1][0] > longest:
            out.append((out[-1][0], None))
        out.append(p)
    return out


def _segments(points: Sequence[Point]) -> list[list[tuple[float, float]]]:
    """Runs of points without a None value."""
    runs: list[list[tuple[float, float]]] = [[]]
    for t, v in points:
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((t, v))
    return [r for r in runs if r]


def line_chart(series: Sequence[Series], *, title: str, y_label: str, width: int = 400,
               height: int = 220, now: float | None = None) -> Markup:
    """An SVG line chart: y from 0 to a round maximum with 5 labelled ticks, x the sample times
    (clock labels), a legend. With fewer than two samples it says it is still collecting."""
    left, right, top, bottom = 58, 12, 30, 38
    pw, ph = width - left - right, height - top - bottom
    values = [v for s in series for _, v in s.points if v is not None]
    times = [t for s in series for t, _ in s.points]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
           f"<title>{escape(title)}</title>",
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#ccc"/>']
    # Legend along the top, one swatch per series.
    x = left
    for s in series:
        out.append(f'<rect x="{x}" y="9" width="14" height="4" fill="{s.colour}"/>'
                   f'<text x="{x + 18}" y="15" class="legend">{escape(s.label)}</text>')
        x += 26 + 7 * len(s.label)
    out.append(f'<text x="{left - 44}" y="{top + ph / 2:.1f}" class="axis-label" text-anchor="middle" '
               f'transform="rotate(-90 {left - 44} {top + ph / 2:.1f})">{escape(y_label)}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" class="axis-label" '
               f'text-anchor="middle">time</text>')
    if len(set(times)) < 2:
        out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" text-anchor="middle" '
                   f'class="empty">collecting samples…</text></svg>')
        return Markup("".join(out))
    t0, t1 = min(times), max(times)
    ymax = 4 * nice_ceiling(max(values, default=0) / 4)  # four round steps

    def sx(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * pw

    def sy(v: float) -> float:
        return top + ph - (v / ymax) * ph

    for i in range(5):  # horizontal grid lines with value labels
        v = ymax * i / 4
        y = sy(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
                   f"{fmt_number(v)}</text>")
    span = t1 - t0
    clock = "%H:%M" if span >= 600 else "%H:%M:%S"
    for i in range(4):  # time ticks (four fit a 400-px chart without crowding)
        t = t0 + span * i / 3
        x = sx(t)
        anchor = "start" if i == 0 else "end" if i == 3 else "middle"
        out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="#888"/>'
                   f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="{anchor}" class="tick">'
                   f"{time.strftime(clock, time.localtime(t))}</text>")
    for s in series:
        for run in _segments(s.points):
            pts = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in run)
            if len(run) == 1:  # a lone sample between gaps: a dot, or it would not show
                out.append(f'<circle cx="{sx(run[0][0]):.1f}" cy="{sy(run[0][1]):.1f}" r="2.5" '
                           f'fill="{s.colour}"/>')
            else:
                out.append(f'<polyline points="{pts}" fill="none" stroke="{s.colour}" '
                           f'stroke-width="2.5" stroke-linejoin="round"/>')
    out.append("</svg>")
    return Markup("".join(out))


def sparkline(points: Sequence[Point], colour: str = COLOURS["depth"], width: int = 110,
              height: int = 26, top: float | None = None) -> Markup:
    """A small line without axes for table rows; empty (a dash) with fewer than two samples.
    `top`: the value at the top edge, shared by every row of a table, on a log scale
    (log10(1 + v)) so that rows compare and a small queue is not a flat line; None: this line's
    own maximum, linear."""
    runs = _segments(points)
    if sum(len(r) for r in runs) < 2:
        return Markup('<span class="muted">–</span>')
    ts = [t for r in runs for t, _ in r]
    t0, t1 = min(ts), max(ts)
    if top is None:
        ymax = max(v for r in runs for _, v in r) or 1.0

        def scale(v: float) -> float:
            return v / ymax
    else:
        log_top = math.log10(1 + max(top, 1))

        def scale(v: float) -> float:
            return min(1.0, math.log10(1 + max(v, 0)) / log_top)
    pad = 2

    def xy(t: float, v: float) -> str:
        x = pad + (t - t0) / ((t1 - t0) or 1) * (width - 2 * pad)
        y = height - pad - scale(v) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    lines = "".join(f'<polyline points="{" ".join(xy(t, v) for t, v in r)}" fill="none" '
                    f'stroke="{colour}" stroke-width="1.8"/>' for r in runs)
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{width}" '
                  f'height="{height}" viewBox="0 0 {width} {height}">{lines}</svg>')
