"""Long tables are laid out directly instead of by rich (which measures every cell): the text is the same."""

from __future__ import annotations

from pathlib import Path

from conftest import SAMPLES

import traceview
from traceview.output import RICH_MAX_ROWS, Format, _aligned_table, _rich_table, render


def test_long_tables_read_as_rich_lays_them_out(tmp_path: Path) -> None:
    database = tmp_path / "tp.db"
    traceview.ingest([SAMPLES / "tp" / "tp_default"], database)
    report = traceview.layers(database)
    rows = report.instances  # numbers, text, empty cells, one row per (rank, step, layer)
    names = list(rows[0])
    assert _aligned_table(rows, names, "per layer instance") == _rich_table(rows, names, "per layer instance")
    many = rows * (RICH_MAX_ROWS // len(rows) + 1)
    text = render(many, Format.table, title="many")
    assert len(text.splitlines()) == len(many) + 3
    assert text.splitlines()[:5] == _rich_table(many[:2], names, "many").splitlines()[:5]
