"""One self-contained HTML report of a run, or of two runs compared, to attach to a pull request or a chat.

Reads: one or two databases through plotdata.py (per-layer medians, steps, the timeline of one step) and diff.py.
Writes: nothing itself; `build_html` returns the page as text and api.report writes it. The page needs nothing
from outside: styles inline, pictures as base64 PNG, no scripts.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import plot, plotdata
from .diff import RunRef, compare
from .segment.report import layer_report
from .stepsel import steps_phrase
from .version import __version__
from .why import display_why

Row = dict[str, Any]
MAX_STEP_ROWS = 200
FOLD_ROWS = 20  # longer tables start folded (<details>)
# The comparison's per-layer columns shown first, the speed-up before the figures it is made of; every column of
# the table is folded away under it.
DIFF_LAYER_COLUMNS = ("layer", "speedup", "span_us_a", "span_us_b", "busy_us_a", "busy_us_b", "kernels_a", "kernels_b")

_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 1250px;
       color: #1f2328; padding: 0 1em; }
h1 { font-size: 1.7em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 0.2em; margin-top: 2em; }
.meta, .note { color: #57606a; }
.headline { font-size: 1.2em; font-weight: 600; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; }
th { background: #f6f8fa; text-align: left; }
td { max-width: 32em; overflow-wrap: anywhere; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.wide { overflow-x: auto; }
summary { cursor: pointer; font-weight: 600; margin: 0.6em 0; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
img { max-width: 100%; height: auto; border: 1px solid #d0d7de; margin: 0.4em 0 1em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em; margin: 0 0.25em 0 0.8em; }
"""


@dataclass(frozen=True)
class RunInput:
    """One run of the report: where it is, and what `traceview info` says of it."""

    ref: RunRef
    overview: Row
    data_loss: list[Row] = field(default_factory=list)


def build_html(a: RunInput, b: RunInput | None = None, generated: datetime | None = None) -> str:
    """The report page: the comparison first when there are two runs, then each run."""
    generated = generated or datetime.now(timezone.utc)
    title = a.ref.label if b is None else f"{a.ref.label} → {b.ref.label}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>traceview report: {_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>traceview report: {_e(title)}</h1>",
        f'<p class="meta">traceview {_e(__version__)}, {generated:%Y-%m-%d %H:%M} UTC. Times in µs; figures across '
        "steps are medians over steady-state (not warm-up) steps.</p>",
        _legend(),
    ]
    if b is not None:
        parts.append(_diff_section(a.ref, b.ref))
    for side, run in (("A", a), ("B", b)):
        if run is not None:
            parts.append(_run_section(run, side if b is not None else None))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _legend() -> str:
    items = [(c, color) for c, color in plot.CATEGORY_COLORS.items()]
    items += [("exposed comm", plot.EXPOSED_COLOR), ("idle", plot.IDLE_COLOR)]
    swatches = "".join(f'<span class="swatch" style="background:{color}"></span>{_e(name)}' for name, color in items)
    return f'<p class="meta">Colours in every picture:{swatches}</p>'


def _diff_section(a: RunRef, b: RunRef) -> str:
    result = compare(a, b)
    summary = result.summary
    figure = plot.diff_figure(result.layers, summary, result.why)
    parts = [
        '<section id="diff">',
        f"<h2>Comparison: {_e(a.label)} (A) → {_e(b.label)} (B), {_e(steps_phrase(summary['phase']))}</h2>",
        f'<p class="headline">{_e(summary["headline"])}</p>',
        *[f'<p class="note">note: {_e(n)}</p>' for n in result.notes],
        *[f'<p class="note">{_e(row["sentence"])}</p>' for row in result.why],
        _img(figure, f"span per layer, {a.label} vs {b.label}, and why each layer changed"),
        table(
            display_why(result.why), "why, per layer: µs, B − A, means over instances; the causes add up to delta_us"
        ),
        table(
            result.layers,
            "per layer (medians across steps and ranks; speedup = A span / B span)",
            columns=DIFF_LAYER_COLUMNS,
        ),
        table(result.changes, f"kernels that changed, layer {summary['representative_layer']} (one instance)"),
        table(result.kernels, f"kernel alignment, layer {summary['representative_layer']} (one instance)"),
        table(result.top_changes, "kernels whose time per step changed most"),
        "</section>",
    ]
    return "\n".join(parts)


def _run_section(run: RunInput, side: str | None) -> str:
    ref = run.ref
    anchor = f"run-{side or 'A'}"
    heading = f"Run {side}: {ref.label}" if side else f"Run {ref.label}"
    parts = [f'<section id="{anchor}">', f"<h2>{_e(heading)}</h2>", table([run.overview], "overview")]
    if run.data_loss:
        parts.append(table(run.data_loss, "data loss reported by ingest"))
    steps = plotdata.step_table(ref)
    if not steps:
        parts.append('<p class="note">No steps were found in this run, so it has no layers or timeline.</p>')
        parts.append("</section>")
        return "\n".join(parts)
    rows, scope = plotdata.layer_breakdown(ref)
    if rows:
        parts.append(f"<h3>Layers ({_e(scope)})</h3>")
        parts.append(_img(plot.layers_figure(rows, ref.label, scope), f"time inside each layer of {ref.label}"))
        per_layer = layer_report(ref.con, ref.run_id, ref.label).per_layer
        parts.append(table(per_layer, "per layer index (as `traceview layers`); method: how segmentation found it"))
    else:
        parts.append('<p class="note">No transformer layers were found in this run (see `traceview layers`).</p>')
    data = plotdata.timeline(ref)
    parts.append(f"<h3>Timeline of step {data.step.step} (rank {data.rank})</h3>")
    parts.append(_img(plot.timeline_figure(data), f"timeline of step {data.step.step} of {ref.label}"))
    caption = "steps (step_metrics)"
    if len(steps) > MAX_STEP_ROWS:
        caption += f"; the first {MAX_STEP_ROWS} of {len(steps)}"
    parts.append(table(steps[:MAX_STEP_ROWS], caption))
    parts.append("</section>")
    return "\n".join(parts)


def _img(figure: Any, alt: str) -> str:
    data = base64.b64encode(plot.png_bytes(figure)).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def table(rows: Sequence[Row], caption: str, fold_after: int = FOLD_ROWS, columns: Sequence[str] = ()) -> str:
    """An HTML table of `rows` (the columns of the first row), numbers right-aligned; folded when it is long. With
    `columns`, only those columns, in that order, and the table of every column folded away under it."""
    if not rows:
        return f'<p class="note">{_e(caption)}: none.</p>'
    if columns:
        every = _table(rows, list(rows[0]), "every column of the table above")
        shown = _table(rows, [c for c in columns if c in rows[0]], caption)
        return (
            _folded(shown, caption, len(rows), fold_after)
            + f"<details><summary>every column</summary>{every}</details>"
        )
    return _folded(_table(rows, list(rows[0]), caption), caption, len(rows), fold_after)


def _folded(html_table: str, caption: str, count: int, fold_after: int) -> str:
    if count <= fold_after:
        return html_table
    return f"<details><summary>{_e(caption)} ({count} rows)</summary>{html_table}</details>"


def _table(rows: Sequence[Row], names: Sequence[str], caption: str) -> str:
    numeric = {n: all(_is_number(r.get(n)) for r in rows if r.get(n) is not None) for n in names}
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{_e(_cell(row.get(n)))}</td>' if numeric[n] else f"<td>{_e(_cell(row.get(n)))}</td>"
            for n in names
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="wide"><table><caption>{_e(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)
