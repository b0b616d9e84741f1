"""Pictures: rows from plotdata.py (or a diff.Diff) -> matplotlib Figure. Only this module draws.

Reads and writes no database. Uses matplotlib's object-oriented API on the Agg canvas (no pyplot, no global
state), so figures can be made in threads and tests can inspect them. Every picture shares one palette:
GPU work is coloured by gpu_activity.category, exposed communication is red, idle time is light grey.

Artists that tests count carry a gid: `activity:CATEGORY` (one PolyCollection per lane and category, one path
per activity), `exposed_comm`, `layer:N` (the shaded span of layer N), `layer_label`, `bar:PART`, `span`, `diff:a`,
`diff:b` (span), `busy:a`, `busy:b`, `speedup`,
`waterfall:a`, `waterfall:CAUSE`, `waterfall:b` (the why waterfall of each layer).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import StrMethodFormatter
from matplotlib.transforms import blended_transform_factory

from .errors import UsageError
from .plotdata import LayerBreakdown, TimelineData
from .scratch import replacing
from .stepsel import steps_phrase

Row = dict[str, Any]

# One palette for every picture: the colour of each gpu_activity.category.
CATEGORY_COLORS = {"compute": "#4C72B0", "comm": "#DD8452", "memcpy": "#55A868", "memset": "#8172B3"}
OTHER_COLOR = "#7F7F7F"
EXPOSED_COLOR = "#C0392B"
IDLE_COLOR = "#D9D9D9"
LAYER_SHADES = ("#EEF1F6", "#DDE3EC")
RUN_COLORS = ("#8C8C8C", "#2A9D8F")  # run A, run B in the diff
FASTER_COLOR, SLOWER_COLOR = "#1E7B34", EXPOSED_COLOR
FIGSIZE = (12.0, 6.75)  # 16:9, readable on a slide
FONT = {"title": 15, "label": 13, "tick": 11, "legend": 11}
FORMATS = ("png", "svg", "pdf")
X_MARGIN = 0.005  # of the timeline window, on each side


def category_color(category: str) -> str:
    return CATEGORY_COLORS.get(category, OTHER_COLOR)


def _figure(height: float = FIGSIZE[1]) -> Figure:
    figure = Figure(figsize=(FIGSIZE[0], height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


TITLE_CHARS = 400  # a title line longer than this (a hostile label) is cut before it is wrapped
LABEL_GAP_PX = 4  # the least room between two labels of a row


def _fitted(figure: Figure, thin: Sequence[Sequence[Text]] = (), ticks: Sequence[Any] = ()) -> Figure:
    """`figure` laid out so that its text stays inside and apart: every title wrapped to the width it has (one
    line cut only when a single word is wider than the figure), then every row of labels in `thin` thinned to those
    that do not touch the one kept before them, and the x ticks of each axes of `ticks` thinned to every n-th."""
    figure.draw_without_rendering()
    for title in _titles(figure):
        _wrap_to_fit(figure, title)
    figure.draw_without_rendering()
    for texts in thin:
        _keep_apart(texts)
    for ax in ticks:
        _thin_ticks(ax)
    return figure


def _titles(figure: Figure) -> list[Text]:
    """Every axes title and the suptitle of the figure and of each of its subfigures, that hold text."""
    return [t for t in [*(ax.title for ax in figure.axes), *_suptitles(figure)] if t.get_text()]


def _suptitles(figure: Figure) -> list[Text]:
    """The suptitles of the figure and of its subfigures (matplotlib keeps no public list of them)."""
    parts = (figure, *figure.subfigs)
    return [part._suptitle for part in parts if getattr(part, "_suptitle", None) is not None]


def _wrap_to_fit(figure: Figure, title: Text) -> None:
    """Rewrap `title` at spaces so that, centred where it is, no line passes either edge of the figure."""
    box = title.get_window_extent()
    centre = (box.x0 + box.x1) / 2
    room = 2 * min(centre, figure.bbox.width - centre) - 2 * LABEL_GAP_PX
    renderer = figure.canvas.get_renderer()
    font = FontProperties(size=title.get_fontsize(), weight=title.get_fontweight())

    def width(line: str) -> float:
        return renderer.get_text_width_height_descent(line, font, ismath=False)[0]

    lines = [line[:TITLE_CHARS] for line in title.get_text().split("\n")]
    title.set_text("\n".join(wrapped for line in lines for wrapped in _wrap(line, width, room)))


def _wrap(line: str, width: Any, room: float) -> list[str]:
    """`line` cut at spaces into lines no wider than `room` (`width` measures a string); a word wider than `room`
    is cut where it must be."""
    out: list[str] = []
    current = ""
    for word in line.split(" "):
        candidate = f"{current} {word}" if current else word
        if width(candidate) <= room:
            current = candidate
            continue
        if current:
            out.append(current)
        current = word
        while len(current) > 1 and width(current) > room:
            cut = _longest_fitting(current, width, room)
            out.append(current[:cut])
            current = current[cut:]
    out.append(current)
    return out


def _longest_fitting(word: str, width: Any, room: float) -> int:
    """The length of the longest start of `word` no wider than `room` (at least one character): binary search."""
    lo, hi = 1, len(word)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if width(word[:mid]) <= room else (lo, mid - 1)
    return lo


def _keep_apart(texts: Sequence[Text]) -> None:
    """Hide each text (left to right) that would touch the last one kept: a row of labels never overprints."""
    kept = None
    for text in sorted(texts, key=lambda t: t.get_window_extent().x0):
        box = text.get_window_extent().expanded(1.0, 1.0).padded(LABEL_GAP_PX / 2)
        if kept is not None and box.overlaps(kept):
            text.set_visible(False)
        else:
            kept = box


def _thin_ticks(ax: Any) -> None:
    """Keep every n-th x tick, n the least at which no two kept labels touch (labels are thinned evenly)."""
    ticks, labels = list(ax.get_xticks()), ax.get_xticklabels()
    boxes = [label.get_window_extent().padded(LABEL_GAP_PX / 2) for label in labels]
    every = next(
        n for n in range(1, len(ticks) + 1) if not any(boxes[i].overlaps(boxes[i + n]) for i in range(len(boxes) - n))
    )
    if every > 1:
        ax.set_xticks(ticks[::every], [label.get_text() for label in labels][::every])


def _style(ax: Any, xlabel: str, ylabel: str) -> None:
    ax.set_xlabel(xlabel, fontsize=FONT["label"])
    ax.set_ylabel(ylabel, fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def timeline_figure(data: TimelineData) -> Figure:
    """One step of one rank: a lane per GPU stream, layers shaded and labelled, exposed comm as a red strip."""
    lanes = len(data.lanes)
    has_comm = any(a.category == "comm" for a in data.activities)
    rows = lanes + (1 if has_comm else 0)
    figure = _figure(max(3.5, min(FIGSIZE[1], 2.2 + 0.7 * rows)))
    ax = figure.subplots()
    label_at = blended_transform_factory(ax.transData, ax.transAxes)
    layer_labels = []
    for i, span in enumerate(sorted(data.layers, key=lambda s: s.start_us)):
        ax.axvspan(span.start_us, span.end_us, color=LAYER_SHADES[i % 2], zorder=0, lw=0, gid=f"layer:{span.layer}")
        label = ax.text(
            (span.start_us + span.end_us) / 2,
            1.01,
            f"L{span.layer}",
            transform=label_at,
            ha="center",
            va="bottom",
            fontsize=FONT["tick"],
            gid="layer_label",
        )
        layer_labels.append(label)
    for lane in range(lanes):
        by_category: dict[str, list[tuple[float, float]]] = {}
        for activity in data.activities:
            if activity.lane == lane:
                by_category.setdefault(activity.category, []).append((activity.start_us, activity.dur_us))
        for category, ranges in sorted(by_category.items()):
            color = category_color(category)
            ax.broken_barh(
                ranges,
                (lane - 0.35, 0.7),
                facecolors=color,
                edgecolors=color,
                linewidths=0.4,
                gid=f"activity:{category}",
            )
    if has_comm:
        strip = [(a, b - a) for a, b in data.exposed_comm]
        ax.broken_barh(
            strip, (lanes - 0.2, 0.4), facecolors=EXPOSED_COLOR, edgecolors=EXPOSED_COLOR, lw=0.4, gid="exposed_comm"
        )
    ax.set_yticks(range(rows), [lane.label for lane in data.lanes] + (["exposed comm"] if has_comm else []))
    ax.set_ylim(rows - 0.5, -0.5)
    pad = max(data.window_us, 1e-3) * X_MARGIN  # so that a kernel at either edge is not hidden by the axis
    ax.set_xlim(-pad, max(data.window_us, 1e-3) + pad)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    start = "step start" if data.window_start_ns == data.step.start_ns else f"start of L{data.layers[0].layer}"
    _style(ax, f"time since {start} (µs)", "")
    ax.set_title(_timeline_title(data), fontsize=FONT["title"], pad=24)
    present = sorted({a.category for a in data.activities}, key=_category_order)
    handles = [Patch(color=category_color(c), label=c) for c in present]
    if has_comm:
        handles.append(Patch(color=EXPOSED_COLOR, label="exposed comm (no compute running)"))
    if data.layers:
        handles.append(Patch(facecolor=LAYER_SHADES[1], edgecolor="#999999", label="layer span (shaded)"))
    figure.legend(
        handles=handles, loc="outside lower center", ncols=len(handles), fontsize=FONT["legend"], frameon=False
    )
    return _fitted(figure, thin=[layer_labels])


def _category_order(category: str) -> tuple[int, str]:
    order = list(CATEGORY_COLORS)
    return (order.index(category) if category in order else len(order), category)


def _timeline_title(data: TimelineData) -> str:
    step = data.step
    what = f"step {step.step}" + (f" ({step.phase}, {step.name})" if step.name else f" ({step.phase})")
    if data.layers and data.window_start_ns != step.start_ns:
        what += f", layers L{data.layers[0].layer}–L{data.layers[-1].layer}"
    methods = sorted({s.method for s in data.layers})
    layers = f"{len(data.layers)} layers by {'/'.join(methods)}" if methods else "no layers"
    return (
        f"{data.run} · rank {data.rank} · {what}\n"
        f"{layers}, {len(data.activities):,} GPU activities, {data.window_us:,.0f} µs"
    )


# Parts of a layer's time, bottom to top of the stacked bar: (field, legend text, colour, hatch).
_PARTS = (
    ("compute_only_us", "compute (no comm under it)", CATEGORY_COLORS["compute"], None),
    ("overlapped_comm_us", "comm overlapped by compute", CATEGORY_COLORS["comm"], "//"),
    ("exposed_comm_us", "exposed comm", EXPOSED_COLOR, None),
    ("idle_us", "idle (no kernel of the layer running)", IDLE_COLOR, None),
)


def layers_figure(rows: Sequence[LayerBreakdown], run: str, scope: str) -> Figure:
    """A stacked bar per layer index: compute, overlapped comm, exposed comm and idle time (medians, µs)."""
    if not rows:
        raise UsageError(run, "no layers to draw", "run `traceview layers` to see why segmentation found none")
    figure = _figure()
    ax = figure.subplots()
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for field, label, color, hatch in _PARTS:
        heights = [float(getattr(r, field) or 0.0) for r in rows]
        ax.bar(
            x,
            heights,
            0.7,
            bottom=bottom,
            color=color,
            hatch=hatch,
            edgecolor="white",
            lw=0.5,
            label=label,
            gid=f"bar:{field}",
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    small = len(rows) > SMALL_BARS
    spans = [
        ax.text(
            xi,
            top,
            f"{row.span_us:,.0f}",
            ha="center",
            va="bottom",
            fontsize=8 if small else FONT["tick"],
            rotation=90 if small else 0,
            gid="span",
        )
        for xi, row, top in zip(x, rows, bottom, strict=True)
    ]
    ax.set_xticks(x, [f"L{r.layer}" for r in rows])
    ax.set_ylim(0, max(bottom) * (1.25 if small else 1.12) or 1.0)
    instances = max(r.instances for r in rows)
    _style(ax, "layer", f"µs per layer instance (median of {instances})")
    methods = sorted({r.method for r in rows})
    ax.set_title(
        f"{run}: where the time of each layer goes ({scope}; layers by {'/'.join(methods)})\n"
        "numbers on top: median layer span, µs",
        fontsize=FONT["title"],
    )
    figure.legend(loc="outside lower center", ncols=4, fontsize=FONT["legend"], frameon=False)
    return _fitted(figure, thin=[spans], ticks=[ax])


def diff_figure(layers: Sequence[Row], summary: Row, why: Sequence[Row] = ()) -> Figure:
    """Per layer, the median span of run A and run B side by side, each with its busy time (the GPU work) drawn
    inside it, and B's speed-up over A by span and by busy time written on top; under it, with `why` rows
    (diff.Diff.why), a waterfall per layer: A's µs, each cause, B's µs."""
    if not layers:
        raise UsageError(None, "no layers to compare", "run `traceview diff` to see why")
    shown = _waterfall_layers(why)
    rows = math.ceil(len(shown) / WATERFALL_COLUMNS)
    figure = _figure(FIGSIZE[1] + WATERFALL_HEIGHT * rows)
    top, bottom = (
        figure.subfigures(2, 1, height_ratios=[FIGSIZE[1], WATERFALL_HEIGHT * rows]) if rows else (figure, None)
    )
    ax = top.subplots()
    speedups = _span_bars(ax, layers, summary)
    top.legend(loc="outside lower center", ncols=4, fontsize=FONT["legend"], frameon=False)
    if bottom is not None:
        axes = bottom.subplots(rows, min(WATERFALL_COLUMNS, len(shown)), squeeze=False).flat
        for waterfall_ax, row in zip(axes, shown, strict=False):
            _waterfall(waterfall_ax, row)
        for waterfall_ax in list(axes):
            waterfall_ax.set_visible(False)
        bottom.suptitle(
            "why, per layer: mean span of A, each cause (B − A), mean span of B (µs)", fontsize=FONT["label"]
        )
    return _fitted(figure, thin=[speedups], ticks=[ax])


WATERFALL_COLUMNS, WATERFALL_MAX, WATERFALL_HEIGHT = 4, 8, 3.4
SMALL_BARS = 16  # more bars than this: the numbers on top are small and turned upright


def _waterfall_layers(why: Sequence[Row]) -> list[Row]:
    """The layers that get a waterfall: all of them up to WATERFALL_MAX, else those whose span changed most."""
    if len(why) <= WATERFALL_MAX:
        return list(why)
    largest = sorted(why, key=lambda r: -abs(r["span_delta_us"]))[:WATERFALL_MAX]
    return sorted(largest, key=lambda r: r["layer"])


def _span_bars(ax: Any, layers: Sequence[Row], summary: Row) -> list[Text]:
    """A's and B's span per layer, each with its busy time inside; returns the speed-up texts written on top."""
    x = list(range(len(layers)))
    width = 0.4
    values = {
        f"{m}_{side}": [float(r.get(f"{m}_us_{side}") or 0.0) for r in layers]
        for m in ("span", "busy")
        for side in "ab"
    }
    for i, side in enumerate("ab"):  # the runs' labels are in the title: legend entries stay short
        at = [xi + (i - 0.5) * width for xi in x]
        color, name = RUN_COLORS[i], side.upper()
        ax.bar(at, values[f"span_{side}"], width, color=color, alpha=0.45, label=f"{name} span", gid=f"diff:{side}")
        ax.bar(at, values[f"busy_{side}"], width * 0.55, color=color, label=f"{name} busy", gid=f"busy:{side}")
    small = len(layers) > SMALL_BARS
    texts = []
    for xi, row, a, b in zip(x, layers, values["span_a"], values["span_b"], strict=True):
        ratio = row.get("speedup")
        text = _speedup_text(row, a, b)
        color = "#555555" if ratio is None else FASTER_COLOR if ratio >= 1 else SLOWER_COLOR
        texts.append(
            ax.text(
                xi,
                max(a, b),
                text,
                ha="center",
                va="bottom",
                color=color,
                fontsize=8 if small else FONT["tick"] - 1,
                fontweight="bold",
                rotation=90 if small else 0,
                gid="speedup",
            )
        )
    ax.set_xticks(x, [f"L{r['layer']}" for r in layers])
    ax.set_ylim(0, max([*values["span_a"], *values["span_b"]]) * (1.35 if small else 1.2) or 1.0)
    _style(ax, "layer", "µs per layer (median across steps and ranks)")
    ax.set_title(
        f"{summary['a']} (A) vs {summary['b']} (B), {steps_phrase(summary['phase'])}\n"
        f"{summary['headline']}\n"
        "pale bar: layer span; dark bar inside: busy (GPU work); on top: speed-up of B over A, span / busy",
        fontsize=FONT["title"],
    )
    return texts


def _speedup_text(row: Row, a: float, b: float) -> str:
    """`2.00x / 1.50x` (B's speed-up over A by span / by busy time), or which run alone has the layer."""
    span, busy_a, busy_b = row.get("speedup"), row.get("busy_us_a"), row.get("busy_us_b")
    if span is None:
        return "only in A" if a else "only in B" if b else "–"
    return f"{span:.2f}x / {busy_a / busy_b:.2f}x" if busy_a and busy_b else f"{span:.2f}x"


def _waterfall(ax: Any, row: Row) -> None:
    """A's mean span, then each non-zero cause as a step up (slower, red) or down (faster, green), then B's."""
    causes = [(name, value) for name, value in row["causes"].items() if value]
    labels = ["A", *[name.replace("kernels_", "").replace("_", " ") for name, _ in causes], "B"]
    level = row["span_a_us"]
    ax.bar(0, level, color=RUN_COLORS[0], gid="waterfall:a")
    for i, (name, value) in enumerate(causes, start=1):
        color = FASTER_COLOR if value < 0 else SLOWER_COLOR
        ax.bar(i, value, bottom=level, color=color, gid=f"waterfall:{name}")
        level += value
    ax.bar(len(causes) + 1, row["span_b_us"], color=RUN_COLORS[1], gid="waterfall:b")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title(f"L{row['layer']}: {row['span_a_us']:,.0f} → {row['span_b_us']:,.0f} µs", fontsize=FONT["tick"])
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def figure_content(figure: Figure) -> dict[str, Any]:
    """What `figure` says, whatever the fonts and the layout: its titles (line breaks as spaces), axis labels,
    legend entries and the texts it writes at data (shown or thinned away), and per artist gid the heights of its
    bars (4 significant digits) or how many activities it draws. Tick labels are left out: matplotlib picks the
    number ticks, and the layer ticks repeat the bars' layers. The README pictures keep it beside each PNG, so that
    a test sees when a picture no longer shows what would be drawn now."""
    texts = [" ".join(t.get_text().split()) for t in figure.findobj(Text) if t.get_gid() or _written(t, figure)]
    artists: dict[str, list[float]] = {}
    for artist in figure.findobj(lambda a: bool(a.get_gid()) and not isinstance(a, Text)):
        size = float(f"{artist.get_height():.4g}") if hasattr(artist, "get_height") else len(artist.get_paths())
        artists.setdefault(artist.get_gid(), []).append(size)
    return {"texts": sorted(t for t in texts if t), "artists": dict(sorted(artists.items()))}


def _written(text: Text, figure: Figure) -> bool:
    """Whether `text` is a title, an axis label or a legend entry of `figure`."""
    labels = [t for ax in figure.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
    labels += _suptitles(figure)
    labels += [entry for part in (figure, *figure.subfigs) for legend in part.legends for entry in legend.get_texts()]
    return any(text is label for label in labels)


def image_format(path: str | Path) -> str:
    """png, svg or pdf, from the file name."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise UsageError(
            path, f"cannot tell the picture format from {suffix or 'no suffix'!r}", "end -o with .png or .svg"
        )
    return suffix


def save(figure: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Write `figure` to `path` (format from its suffix) through a temporary file, so a failure leaves nothing."""
    path = Path(path)
    fmt = image_format(path)
    with replacing(path) as tmp:
        figure.savefig(tmp, format=fmt, dpi=dpi, metadata=_metadata(fmt))
    return path


def _metadata(fmt: str) -> dict[str, Any]:
    """No creation date in SVG/PDF, so the same data gives the same file."""
    return {"Date": None} if fmt in ("svg", "pdf") else {}


def png_bytes(figure: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (for embedding)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
