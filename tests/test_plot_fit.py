"""Pictures read: no text runs outside the figure and no two labels overlap (tests/picture_checks.py measures it),
for every kind of picture, on a 61-layer run with labels as long as engines write them, on the committed 2-GPU
TP sample, and on the engine traces beside the checkout (../shared/external/tracelens, skipped when absent)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import layered_db
import pytest
from conftest import SAMPLES
from matplotlib.figure import Figure
from picture_checks import text_problems

import traceview
from traceview import api

LONG_LABEL = "vllm_gptoss_b200_tp8_prefill_rank0_with_a_run_label_as_long_as_an_engine_writes_it"
LONG_STEP = "execute_context_1(888_788544)_generation_0(0)" * 3
MANY_LAYERS = 61
ENGINE_TRACES = Path(__file__).parent.parent.parent / "shared" / "external" / "tracelens"
KINDS = ("timeline", "layers", "diff")


@pytest.fixture(scope="module")
def many_layers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Runs A and B (B 2x faster) of 61 layers, with long run labels and long step names."""
    folder = tmp_path_factory.mktemp("fit")
    a = layered_db.build(folder / "a.db", LONG_LABEL, layers=MANY_LAYERS).path
    b = layered_db.build(folder / "b.db", LONG_LABEL + "_candidate", scale=0.5, layers=MANY_LAYERS).path
    for path in (a, b):
        with duckdb.connect(str(path)) as con:
            con.execute("UPDATE steps SET name = ? || step", [LONG_STEP])
    return a, b


def _figures(a: Path, b: Path, layers: str) -> list[tuple[str, Figure]]:
    """Each kind of picture of A (and B), and the timeline of layers `layers`."""
    figures = [(kind, api.figure(a, kind, other=b)) for kind in KINDS]
    return [*figures, (f"timeline of layers {layers}", api.figure(a, "timeline", layers=layers))]


def assert_reads(figures: list[tuple[str, Figure]]) -> None:
    problems = [f"{name}: {problem}" for name, figure in figures for problem in text_problems(figure)]
    assert not problems, "\n".join(problems)


def test_a_picture_of_61_layers_with_long_labels_reads(many_layers: tuple[Path, Path]) -> None:
    assert_reads(_figures(*many_layers, "20-40"))


def test_the_checker_sees_overprinted_labels(many_layers: tuple[Path, Path]) -> None:
    """Every layer label shown again (as before thinning): the check finds them overlapping."""
    figure = api.figure(many_layers[0], "timeline")
    for text in figure.axes[0].texts:
        text.set_visible(True)
    assert any(p.startswith("overlap: 'L") for p in text_problems(figure))
    figure.axes[0].set_title("x" * 400)
    assert any(p.startswith("outside the figure: 'xxx") for p in text_problems(figure))


def test_the_tp_sample_reads(ingested: Callable[[Path], Path]) -> None:
    db = ingested(SAMPLES / "tp" / "tp_default")
    assert_reads(_figures(db, db, "2-5"))


@pytest.mark.skipif(not ENGINE_TRACES.is_dir(), reason="../shared/external is not beside this checkout")
def test_engine_traces_read(tmp_path: Path) -> None:
    dbs = []
    for trace in sorted(ENGINE_TRACES.glob("*.json.gz")):
        dbs.append(tmp_path / f"{trace.name}.db")
        traceview.ingest([trace], dbs[-1])
    assert_reads([(kind, api.figure(db, kind)) for db in dbs for kind in ("timeline", "layers")])
    assert_reads([("diff", api.figure(dbs[0], "diff", other=dbs[1]))])
