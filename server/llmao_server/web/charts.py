"""Line charts drawn on the server: the template writes them as inline SVG.

No script and no chart library: a chart is a few polylines and their axis
labels, computed here as plain values and laid out by ``dashboard/chart.html``
(the page's Content-Security-Policy allows nothing else anyway). An unknown
figure breaks its line rather than dropping it to zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_number

WIDTH, HEIGHT = 560.0, 150.0
# Room for the value labels on the left and the time labels below.
LEFT, RIGHT, TOP, BOTTOM = 40.0, 8.0, 8.0, 20.0
TIME_TICKS = 4

Points = Sequence[tuple[float, float | None]]


@dataclass(frozen=True)
class Line:
    """One figure over time: its name (the legend, and its CSS class) and its segments."""

    name: str
    segments: tuple[str, ...]  # each an SVG polyline ``points`` value


@dataclass(frozen=True)
class Chart:
    width: float
    height: float
    lines: tuple[Line, ...]
    y_ticks: tuple[tuple[float, str], ...]  # (y, label)
    x_ticks: tuple[tuple[float, str], ...]  # (x, label)
    left: float = LEFT
    right_edge: float = WIDTH - RIGHT
    bottom_edge: float = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return not any(line.segments for line in self.lines)


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 × 10^n at or above ``value`` (at least 1): the axis top.

    In floats, so a figure near the largest float gets itself as the top
    rather than an overflow: one box's absurd figure must not take the page down.
    """
    if value <= 1:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power < math.inf:
            return step * power
    return float(value)


def plotted(value: float | None) -> float | None:
    """``value`` as a float the chart can place, or None (unknown) when it has none."""
    return float(value) if is_number(value) else None


def short_number(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def percent(value: float) -> str:
    """A ratio's label: ``50%``."""
    return f"{value:.0%}"


def segments(points: Points, x_of, y_of) -> tuple[str, ...]:
    """Polylines through the known points; an unknown one ends a segment."""
    runs: list[list[str]] = [[]]
    for at, value in points:
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(f"{x_of(at):.1f},{y_of(value):.1f}")
    # A lone point still shows: it is drawn as a segment to itself.
    return tuple(" ".join(run if len(run) > 1 else run * 2) for run in runs if run)


def line_chart(series: Mapping[str, Points], start: float, end: float,
               label: Callable[[float], str] = short_number) -> Chart:
    """The chart of ``series`` (name → (time, value) oldest first) from ``start`` to ``end``,
    its values labelled by ``label``."""
    series = {name: [(at, plotted(value)) for at, value in points]
              for name, points in series.items()}
    known = [value for points in series.values() for _, value in points if value is not None]
    top = nice_ceiling(max(known, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max(end - start, 1.0)

    def x_of(at: float) -> float:
        return LEFT + plot_w * min(max((at - start) / span, 0.0), 1.0)

    def y_of(value: float) -> float:
        return TOP + plot_h * (1 - min(max(value / top, 0.0), 1.0))

    lines = tuple(Line(name, segments(points, x_of, y_of)) for name, points in series.items())
    y_ticks = tuple((y_of(value), label(value)) for value in (0.0, top / 2, top))
    x_ticks = tuple((x_of(at), datetime.fromtimestamp(at, UTC).strftime("%H:%M"))
                    for at in (start + span * i / TIME_TICKS for i in range(TIME_TICKS + 1)))
    return Chart(WIDTH, HEIGHT, lines, y_ticks, x_ticks)
