"""Bar charts as inline SVG, drawn on the server: no chart library, no script, nothing from a CDN.

One bar per minute (an idle minute is a bar of height 0, so a chart of the last hour always has 60),
each carrying its minute and value as ``data-`` attributes and a ``<title>`` the browser shows on hover;
the vertical scale runs from 0 to a round number at or above the peak. Every text in the markup is
escaped (format_html); the colours come from the admin's CSS variables (dashboard.css).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

#: The drawing's size in SVG units; it scales to the width of its box (dashboard.css).
WIDTH, HEIGHT = 600, 150
#: Room for the scale's labels on the left and the minutes' labels below.
LEFT, BOTTOM, TOP = 40, 20, 10


def scale_top(peak: int) -> int:
    """The smallest of 1, 2, 5 times a power of ten at or above ``peak`` (1 for an idle hour)."""
    top = 1
    while True:
        for step in (1, 2, 5):
            if top * step >= peak:
                return top * step
        top *= 10


def minute_label(minute: int) -> str:
    """A Unix minute as local HH:MM."""
    return timezone.localtime(datetime.fromtimestamp(minute * 60, tz=timezone.get_current_timezone())).strftime("%H:%M")


def bar_chart(points: Sequence[tuple[int, int]], *, label: str, css_class: str) -> SafeString:
    """An SVG bar chart of (Unix minute, value) points, oldest first; ``label`` names what is counted."""
    top = scale_top(max((value for _, value in points), default=0))
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - BOTTOM - TOP
    slot = plot_width / max(len(points), 1)
    bars = []
    for index, (minute, value) in enumerate(points):
        height = plot_height * value / top
        bars.append(
            (
                f"{LEFT + index * slot + slot * 0.1:.1f}",
                f"{TOP + plot_height - height:.1f}",
                f"{slot * 0.8:.1f}",
                f"{height:.1f}",
                minute,
                value,
                minute_label(minute),
                value,
                label,
            )
        )
    total = sum(value for _, value in points)
    first = minute_label(points[0][0]) if points else ""
    last = minute_label(points[-1][0]) if points else ""
    return format_html(
        '<svg class="dashboard-chart {}" viewBox="0 0 {} {}" role="img" aria-label="{}: {} in {} minutes"'
        ' data-total="{}" data-bars="{}" xmlns="http://www.w3.org/2000/svg">'
        "<title>{}: {} in {} minutes</title>"
        '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"></line>'
        '<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"></line>'
        '<text class="scale" x="{}" y="{}" text-anchor="end">{}</text>'
        '<text class="scale" x="{}" y="{}" text-anchor="end">0</text>'
        '<text class="minute" x="{}" y="{}" text-anchor="start">{}</text>'
        '<text class="minute" x="{}" y="{}" text-anchor="end">{}</text>'
        "{}</svg>",
        css_class,
        WIDTH,
        HEIGHT,
        label,
        total,
        len(points),
        total,
        len(points),
        label,
        total,
        len(points),
        LEFT,
        TOP + plot_height,
        WIDTH,
        TOP + plot_height,
        LEFT,
        TOP,
        WIDTH,
        TOP,
        LEFT - 4,
        TOP + 4,
        top,
        LEFT - 4,
        TOP + plot_height,
        LEFT,
        HEIGHT - 4,
        first,
        WIDTH,
        HEIGHT - 4,
        last,
        format_html_join(
            "",
            '<rect class="bar" x="{}" y="{}" width="{}" height="{}" data-minute="{}" data-value="{}">'
            "<title>{}: {} {}</title></rect>",
            bars,
        ),
    )
