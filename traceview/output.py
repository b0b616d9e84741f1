"""The only renderer: rows (a list of dicts with the same keys) -> table, csv, json or markdown text.

Data goes to stdout; the CLI sends progress and warnings to stderr. Every string here may come from a trace or
the command line (kernel names, labels, device and file names), so nothing is read as rich markup (cells are
rich Text) and nothing reaches the terminal that it would act on: `printable` shows control characters (ESC
sequences, C1 controls, newlines, bidi overrides) and invalid Unicode as visible escapes such as `\\x1b`. JSON
stays exact (json.dumps escapes them itself); csv, markdown and table cells are printable, one line each.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from enum import Enum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


class Format(str, Enum):
    """Output formats every command accepts with --format."""

    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


Row = dict[str, Any]
RICH_MAX_ROWS = 500  # longer tables are laid out by _aligned_table


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_SHOWN_AS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# What a terminal acts on or cannot print: C0 controls, DEL, C1 controls (0x9b is CSI, 0x9d OSC), the bidi
# controls of "trojan source" spoofing, the line and paragraph separators, and lone surrogates (undecodable
# bytes of a file name, or a JSON escape like "\ud800"), which cannot be written as UTF-8.
_UNPRINTABLE = [*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), 0x2028, 0x2029]
_UNPRINTABLE += [*range(0x2066, 0x206A), *range(0xD800, 0xE000)]
_ESCAPES = {code: _SHOWN_AS.get(chr(code), _escape(code)) for code in _UNPRINTABLE}


def _character_class(codes: list[int]) -> str:
    """A regex character class of `codes`, each run of consecutive codes as one range (a class of the 2,127 single
    characters took ~40 ms to compile, at every command's start)."""
    runs: list[list[int]] = []
    for code in sorted(codes):
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "[" + "".join(re.escape(chr(lo)) + (f"-{re.escape(chr(hi))}" if hi > lo else "") for lo, hi in runs) + "]"


_ANY_UNPRINTABLE = re.compile(_character_class(_UNPRINTABLE))


def printable(text: str) -> str:
    """`text` on one line with nothing a terminal would act on: each such character shown as an escape (\\x1b,
    \\n, \\u202e). Printable text comes back unchanged, so applying it twice changes nothing."""
    # The search is ~10x faster than translate, and almost every string needs nothing.
    return text.translate(_ESCAPES) if _ANY_UNPRINTABLE.search(text) else text


def printable_lines(text: str) -> str:
    """`printable` for each line of `text`, kept on its own line (a document of several lines)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def render(rows: Sequence[Row], fmt: Format, title: str | None = None, columns: Sequence[str] | None = None) -> str:
    """Render `rows` in `fmt`. `columns` fixes the order (and the header when there are no rows)."""
    names = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if fmt is Format.json:
        return json.dumps([{k: _plain(r.get(k)) for k in names} for r in rows], indent=2)
    if fmt is Format.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([printable(name) for name in names])
        writer.writerows([[_csv_cell(r.get(k)) for k in names] for r in rows])
        return buffer.getvalue().rstrip("\n")
    if fmt is Format.markdown:
        lines = [f"**{printable(title)}**", ""] if title else []
        lines.append("| " + " | ".join(_markdown_cell(name) for name in names) + " |")
        lines.append("|" + "|".join(" ---: " if _numeric(rows, k) else " --- " for k in names) + "|")
        lines += ["| " + " | ".join(_markdown_cell(_cell(r.get(k))) for k in names) + " |" for r in rows]
        return "\n".join(lines)
    if len(rows) > RICH_MAX_ROWS:
        return _aligned_table(rows, names, title)
    return _rich_table(rows, names, title)


def _aligned_table(rows: Sequence[Row], names: list[str], title: str | None) -> str:
    """The layout _rich_table gives (without folding wide cells), laid out directly: rich measures every cell,
    ~0.6 ms a row, 4.5 s for the 7,816 steps of a large run."""
    cells = [[_cell(r.get(k)) for k in names] for r in rows]
    names = [printable(name) for name in names]
    widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(names)]
    right = [_numeric(rows, name) for name in names]

    def line(values: list[str], separator: str) -> str:
        justified = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return (" " + separator.join(justified)).rstrip()

    lines = [printable(title)] if title else []
    lines += [line(names, " ┃ "), "╇".join("━" * (w + 2) for w in widths)]
    lines += [line(row, " │ ") for row in cells]
    return "\n".join(lines)


def _rich_table(rows: Sequence[Row], names: list[str], title: str | None) -> str:
    """Laid out by rich; every string is a Text, so that `[/b]` in a kernel name is text, not markup."""
    table = Table(
        title=Text(printable(title)) if title else None, title_justify="left", show_edge=False, header_style="bold"
    )
    for name in names:
        justify = "right" if _numeric(rows, name) else "left"
        table.add_column(Text(printable(name)), justify=justify, overflow="fold")
    for row in rows:
        table.add_row(*[Text(_cell(row.get(k))) for k in names])
    console = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()).strip("\n")


def _numeric(rows: Sequence[Row], name: str) -> bool:
    values = [r.get(name) for r in rows if r.get(name) is not None]
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _cell(value: Any) -> str:
    """A value as printable text for the table and markdown formats."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    return printable(str(value))


def _markdown_cell(text: str) -> str:
    """A cell that cannot end the cell early: `|` escaped as markdown wants."""
    return text.replace("|", "\\|")


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ";".join(_csv_cell(v) for v in value)
    return printable(str(value))


def _plain(value: Any) -> Any:
    """JSON-safe value: tuples to lists, NaN to null, other objects to text."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
