"""Where a picture's text lands: `text_problems(figure)` lists each visible text that runs outside the figure and
each two texts that overlap, measured with matplotlib's own text extents after the figure is laid out."""

from __future__ import annotations

import itertools

from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

EDGE_PX = 1.0  # anti-aliasing: a text may touch the edge by this much


def visible_texts(figure: Figure) -> list[Text]:
    """Every text drawn: titles, labels, tick labels, annotations, legend entries (not empty, not hidden)."""
    hidden = _not_drawn(figure)
    return [
        text
        for text in figure.findobj(Text)
        if text.get_text().strip() and text.get_visible() and id(text) not in hidden
    ]


def _not_drawn(figure: Figure) -> set[int]:
    """The texts matplotlib keeps but does not draw: those of a hidden axes, and the labels of ticks outside the
    axes' view."""
    hidden: set[int] = set()
    for ax in figure.axes:
        if not ax.get_visible():
            hidden.update(id(t) for t in ax.findobj(Text))
            continue
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    hidden.update((id(tick.label1), id(tick.label2)))
    return hidden


def text_problems(figure: Figure) -> list[str]:
    """One line per text outside the figure and per pair of texts that overlap (empty: the picture reads)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    boxes = [(text, text.get_window_extent(renderer)) for text in visible_texts(figure)]
    problems = [f"outside the figure: {_name(t)} at {_where(b)}" for t, b in boxes if not _inside(b, figure.bbox)]
    for (text_a, a), (text_b, b) in itertools.combinations(boxes, 2):
        if _overlap(a, b):
            problems.append(f"overlap: {_name(text_a)} at {_where(a)} and {_name(text_b)} at {_where(b)}")
    return problems


def _inside(box: Bbox, frame: Bbox) -> bool:
    return (
        box.x0 >= frame.x0 - EDGE_PX
        and box.y0 >= frame.y0 - EDGE_PX
        and box.x1 <= frame.x1 + EDGE_PX
        and box.y1 <= frame.y1 + EDGE_PX
    )


def _overlap(a: Bbox, b: Bbox) -> bool:
    """Overlapping by more than a pixel each way (boxes that only touch are apart)."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > EDGE_PX and min(a.y1, b.y1) - max(a.y0, b.y0) > EDGE_PX


def _name(text: Text) -> str:
    content = text.get_text().replace("\n", " / ")
    return repr(content if len(content) <= 60 else content[:57] + "...")


def _where(box: Bbox) -> str:
    return f"x {box.x0:.0f}-{box.x1:.0f}, y {box.y0:.0f}-{box.y1:.0f}"
