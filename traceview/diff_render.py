"""`traceview diff` as one document that leads with the answer (table, csv or json): what the CLI prints.

Reads a diff.Diff (the pure comparison) and renders it with output.render; nothing here computes.
"""

from __future__ import annotations

import json

from . import diff as diff_stage
from . import why as why_stage
from .output import Format, printable, render
from .stepsel import steps_phrase

WIDTH = 160  # columns assumed when the output is not a terminal (names are cut to the width)


def diff_document(
    result: diff_stage.Diff,
    fmt: Format,
    by_rank: bool = False,
    kernels: diff_stage.KernelRows = diff_stage.KernelRows.changed,
    width: int = WIDTH,
) -> str:
    """The diff as one document that leads with the answer: headline, notes, why each layer changed (sentences,
    then the table of causes), the kernels that changed, then the per-layer (and per-rank) medians and the kernels
    whose time per step changed most."""
    if fmt is Format.json:
        return json.dumps(result.as_json(), indent=2, default=str)
    if fmt is Format.csv:
        return render(result.by_rank if by_rank else result.layers, fmt)
    summary = result.summary
    title = f"{summary['a']} → {summary['b']} ({steps_phrase(summary['phase'])})"
    parts = [printable(f"{title}: {summary['headline']}"), *[printable(f"note: {n}") for n in result.notes]]
    if result.why:
        parts.append("\n".join(printable(row["sentence"]) for row in result.why))
        why_title = "why, per layer: µs, B − A, means over instances; the causes add up to delta_us (residual_us)"
        parts.append(render(why_stage.display_why(result.why), fmt, title=why_title))
    parts.append(_render_kernels(result, fmt, kernels, width))
    parts.append(
        render(diff_stage.display_layers(result), fmt, title="per layer, A → B (medians across steps and ranks)")
    )
    if by_rank:
        title = "per layer and rank, A → B (medians across steps)"
        parts.append(render(diff_stage.display_ranks(result), fmt, title=title))
    top = diff_stage.display_top_changes(result, width)
    parts.append(render(top, fmt, title="top changes per step, by time"))
    return "\n\n".join(parts)


def _render_kernels(result: diff_stage.Diff, fmt: Format, kernels: diff_stage.KernelRows, width: int) -> str:
    layer = result.summary["representative_layer"]
    if kernels is diff_stage.KernelRows.all:
        title = f"kernel alignment, layer {layer} (one instance)"
        return render(diff_stage.display_alignment(result, width), fmt, title=title)
    if not result.changes:
        return printable(f"kernel alignment, layer {layer}: all {len(result.kernels)} kernels kept")
    title = f"kernels that changed, layer {layer} (one instance; --kernels all for every kernel)"
    return render(diff_stage.display_changes(result, width), fmt, title=title)
