"""Issue 26: figures are rounded once, in the SQL library (query figures.precision), for every consumer: `diff` and
`query` wrote raw doubles (`245.05599999999998`, `kernels 48.0`) to CSV and JSON while `layers` rounded, and Spark
and traceview rounded the same median differently (155.055 against 155.054)."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import SAMPLES

import traceview

# A number with more than 3 decimals (a binary double's tail), or a whole count printed as a float.
RAW = re.compile(r"^-?\d+\.\d{4,}$")


def cli(*args: object) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def pair(ingested: Callable[[Path], Path]) -> tuple[Path, Path]:
    return ingested(SAMPLES / "eager.pt.trace.json.gz"), ingested(SAMPLES / "compiled.pt.trace.json.gz")


def numbers(value: object) -> Iterator[object]:
    """Every number in a JSON document."""
    if isinstance(value, dict):
        for item in value.values():
            yield from numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def test_a_median_ending_in_half_a_nanosecond_rounds_away_from_zero(pair: tuple[Path, Path]) -> None:
    """155.0545 µs is 155.05449999... as a double: rounding the microseconds gave 155.054, Spark's HALF_UP 155.055.
    Medians on whole ns round the exact half alike in both."""
    with traceview.connect(pair[0]) as con:
        rows = con.execute(
            """SELECT _median_us(us), _median_count(n), _pct(1, 3), _spread_us(us)
               FROM (VALUES (155.054::DOUBLE, 47), (155.055, 48), (155.054, 48), (155.055, 49)) AS t (us, n)"""
        ).fetchall()
    assert rows == [(155.055, 48, 33.33, 0.001)]


def test_diff_csv_and_json_hold_no_raw_doubles(pair: tuple[Path, Path]) -> None:
    a, b = pair
    table = list(csv.DictReader(io.StringIO(cli("diff", a, b, "-f", "csv"))))
    cells = [(column, value) for row in table for column, value in row.items()]
    assert [c for c in cells if RAW.match(c[1])] == []
    assert all(re.fullmatch(r"\d+", row[k]) for row in table for k in ("kernels_a", "kernels_b"))
    document = json.loads(cli("diff", a, b, "-f", "json"))
    assert [n for n in numbers(document) if RAW.match(repr(n))] == []
    assert all(isinstance(n, int) for n in document["summary"]["kernels_per_layer"])


@pytest.mark.parametrize("name", ["layers.summary", "layers.kernels", "kernels.top", "layers.launch_overhead"])
def test_query_csv_holds_no_raw_doubles(pair: tuple[Path, Path], name: str) -> None:
    table = list(csv.DictReader(io.StringIO(cli("query", pair[0], name, "-f", "csv"))))
    assert table
    assert [(k, v) for row in table for k, v in row.items() if RAW.match(v)] == []


def test_the_precision_is_a_view_of_the_library(pair: tuple[Path, Path]) -> None:
    table = list(csv.DictReader(io.StringIO(cli("query", pair[0], "figure_precision", "-f", "csv"))))
    assert {row["unit"]: int(row["decimals"]) for row in table} == {"us": 3, "pct": 2, "count": 0}
