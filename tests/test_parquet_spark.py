"""The README's Spark commands, run as written with a local pyspark on a two-rank export: per layer kernels, busy,
comm and exposed comm, and the overlap per rank, equal what `traceview layers` and `traceview overlap` print.

Skipped where pyspark (the optional extra `spark`) or a Java runtime is missing; a heavy case (Spark starts in
~30 s), run by CI's heavy step, which installs the extra.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLES

import traceview
from traceview import sqllib

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (java on PATH or JAVA_HOME)", allow_module_level=True)

pytestmark = pytest.mark.heavy
README = Path(__file__).parent.parent / "README.md"
TWO_RANKS = SAMPLES / "tp" / "tp_overlap"


def readme_block(marker: str) -> str:
    """The first fenced code block after `<!-- marker` in the README."""
    text = README.read_text()
    match = re.search(rf"<!-- {re.escape(marker)}\b[^\n]*-->\n```\w+\n(.*?)\n```", text, re.S)
    assert match, f"README has no block marked {marker}"
    return match.group(1)


@pytest.fixture(scope="module")
def spark_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, object]]]]:
    """The README's setup run in a folder holding `dataset/` (a local path, as written), then its two queries."""
    folder = tmp_path_factory.mktemp("spark")
    traceview.ingest([TWO_RANKS], folder / "run.db")
    traceview.api.export_parquet(folder / "run.db", folder / "dataset")
    namespace: dict[str, object] = {}
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        exec(readme_block("spark-setup"), namespace)  # the README's own code, run as a user would
        spark = namespace["spark"]
        results = {
            name: [row.asDict() for row in spark.sql(readme_block(f"spark-{name}")).collect()]  # type: ignore[attr-defined]
            for name in ("layers", "overlap")
        }
        spark.stop()  # type: ignore[attr-defined]
    finally:
        os.chdir(cwd)
    return folder / "run.db", results


def test_spark_layers_equal_traceview_layers(spark_run: tuple[Path, dict[str, list[dict[str, object]]]]) -> None:
    db, results = spark_run
    printed = traceview.api.layers(db).per_layer
    assert len(printed) == 8
    from_spark = results["layers"]
    assert [r["layer"] for r in from_spark] == [r["layer"] for r in printed]
    for spark_row, row in zip(from_spark, printed, strict=True):
        assert spark_row["label"] == "tp_overlap"
        for key in ("instances", "kernels", "span_us", "busy_us", "comm_us", "exposed_comm_us"):
            # both round to 0.001 µs; a median ending in 5 at the 4th decimal may round either way (Spark rounds
            # the decimal text half up, DuckDB the binary double)
            assert float(spark_row[key]) == pytest.approx(float(row[key]), abs=1.001e-3), (row["layer"], key)
    assert any(float(r["exposed_comm_us"]) > 0 for r in from_spark)


def test_spark_overlap_equals_traceview_overlap(spark_run: tuple[Path, dict[str, list[dict[str, object]]]]) -> None:
    db, results = spark_run
    with traceview.connect(db) as con:
        printed = sqllib.overlap(con)
    assert [r["rank"] for r in results["overlap"]] == [r["rank"] for r in printed] == [0, 1]
    for spark_row, row in zip(results["overlap"], printed, strict=True):
        for key in ("kernels", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct"):
            assert float(spark_row[key]) == pytest.approx(float(row[key]), abs=1e-6), key
