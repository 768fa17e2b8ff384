"""Line charts as inline SVG, drawn on the server: no chart library, nothing to load."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 360, 90, 4


def human(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def line_chart(points: Sequence[tuple[int, float]], title: str, unit: str = "") -> str:
    """An SVG of ``(ms, value)`` points with the latest and the largest value in the title."""
    label = escape(title)
    if len(points) < 2:
        return (f'<figure class="chart"><figcaption>{label}: waiting for data</figcaption>'
                f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}"></svg></figure>')
    t0, t1 = points[0][0], points[-1][0]
    top = max(v for _, v in points)
    scale = top or 1.0
    span = max(t1 - t0, 1)
    coords = " ".join(
        f"{PAD + (t - t0) * (WIDTH - 2 * PAD) / span:.1f},{HEIGHT - PAD - v * (HEIGHT - 2 * PAD) / scale:.1f}"
        for t, v in points)
    latest = points[-1][1]
    return (f'<figure class="chart"><figcaption>{label}: <b>{human(latest)}{escape(unit)}</b>'
            f' <small>(max {human(top)}{escape(unit)}, {len(points)} points)</small></figcaption>'
            f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">'
            f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{coords}"/></svg></figure>')
