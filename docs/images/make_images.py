"""Draws the README pictures from the sample traces (and one real multi-stream trace with NCCL kernels), and writes
beside each PNG what it says (NAME.json: traceview.plot.figure_content), which tests/test_docs_images.py compares
with what the same traces draw now:

    python docs/images/make_images.py      (from any folder, with traceview installed)
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from matplotlib.figure import Figure

import traceview
from traceview import api, plot

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "images"
TRACES = {
    "eager": ROOT / "sample_traces" / "eager.pt.trace.json.gz",
    "compiled": ROOT / "sample_traces" / "compiled.pt.trace.json.gz",
    "graph": ROOT / "sample_traces" / "graph.pt.trace.json.gz",
    "nccl": ROOT / "tests" / "data" / "hta" / "nccl_parser_config" / "nccl_data.json.gz",
}
# Picture name -> (kind, run, run B or None, options of api.figure).
PICTURES: dict[str, tuple[str, str, str | None, dict[str, str]]] = {
    "diff-eager-compiled": ("diff", "eager", "compiled", {}),
    "timeline-compiled-layers-2-3": ("timeline", "compiled", None, {"layers": "2-3"}),
    "layers-graph": ("layers", "graph", None, {}),
    "timeline-nccl": ("timeline", "nccl", None, {}),
}


def figures(database: Callable[[Path], Path]) -> Iterator[tuple[str, Figure]]:
    """Each README picture by name, drawn from the databases `database(trace)` returns."""
    for name, (kind, run, other, options) in PICTURES.items():
        b = database(TRACES[other]) if other else None
        yield name, api.figure(database(TRACES[run]), kind, other=b, **options)


def content_text(figure: Figure) -> str:
    """What the picture says, as written beside it (NAME.json)."""
    return json.dumps(plot.figure_content(figure), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:

        def database(trace: Path) -> Path:
            path = Path(tmp) / f"{trace.name}.db"
            if not path.exists():
                traceview.ingest([trace], path)
            return path

        for name, figure in figures(database):
            plot.save(figure, OUT / f"{name}.png")
            (OUT / f"{name}.json").write_text(content_text(figure))
            print(f"wrote {OUT / name}.png and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
