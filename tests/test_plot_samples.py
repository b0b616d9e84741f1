"""Pictures of the real H200 sample traces (8-layer MoE decoder, decode batch 1) show what the tables say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLES
from matplotlib.figure import Figure

import traceview
from traceview import api, plot

PATHS = ("eager", "compiled", "graph")


@pytest.fixture(scope="module")
def samples(ingested: Callable[[Path], Path]) -> dict[str, Path]:
    dbs = {}
    for name in PATHS:
        trace = SAMPLES / f"{name}.pt.trace.json.gz"
        if not trace.exists():
            pytest.skip(f"{trace} is missing")
        dbs[name] = ingested(trace)
        with traceview.connect(dbs[name]) as con:
            if con.execute("SELECT count(*) FROM layers").fetchall()[0][0] == 0:
                pytest.skip(f"segmentation found no layers in {trace.name}")
    return dbs


def _rows(db: Path, sql: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    with traceview.connect(db) as con:
        return con.execute(sql, params or []).fetchall()


def _drawn(figure: Figure, prefix: str) -> int:
    ax = figure.axes[0]
    return sum(len(c.get_paths()) for c in ax.collections if (c.get_gid() or "").startswith(prefix))


@pytest.mark.parametrize("name", PATHS)
def test_timeline_draws_each_activity_and_layer_of_the_step(name: str, samples: dict[str, Path]) -> None:
    db = samples[name]
    figure = api.figure(db, "timeline")
    # The default step is the median of the steady steps by span (the earlier of the two middle ones).
    steady = _rows(db, "SELECT step FROM steps WHERE NOT warmup ORDER BY end_ns - start_ns, step")
    step = steady[(len(steady) - 1) // 2][0]
    activities = _rows(db, "SELECT count(*) FROM gpu_activity WHERE step = ?", [step])[0][0]
    layers = [r[0] for r in _rows(db, "SELECT layer FROM layers WHERE step = ? ORDER BY start_ns", [step])]
    assert activities > 200
    assert _drawn(figure, "activity:") == activities
    drawn_layers = [p.get_gid() for p in figure.axes[0].patches if (p.get_gid() or "").startswith("layer:")]
    assert drawn_layers == [f"layer:{layer}" for layer in layers] and len(layers) >= 7
    # No communication in a single-GPU run: no exposed-comm strip.
    assert _drawn(figure, "exposed_comm") == 0
    assert f"step {step}" in figure.axes[0].get_title()


@pytest.mark.parametrize("name", PATHS)
def test_layers_bars_match_layer_metrics(name: str, samples: dict[str, Path]) -> None:
    db = samples[name]
    figure = api.figure(db, "layers")
    expected = _rows(
        db,
        "SELECT layer, median(compute_us - overlap_us), median(idle_us) FROM layer_metrics"
        " JOIN step_steady USING (run_id, rank, step) GROUP BY layer ORDER BY layer",
    )
    bars = {
        part: [p.get_height() for p in figure.axes[0].patches if p.get_gid() == f"bar:{part}"]
        for part in ("compute_only_us", "idle_us")
    }
    assert bars["compute_only_us"] == [pytest.approx(r[1]) for r in expected]
    assert bars["idle_us"] == [pytest.approx(r[2]) for r in expected]
    colors = {p.get_facecolor()[:3] for p in figure.axes[0].patches if p.get_gid() == "bar:compute_only_us"}
    assert len(colors) == 1


def test_diff_eager_vs_compiled(samples: dict[str, Path]) -> None:
    figure = api.figure(samples["eager"], "diff", other=samples["compiled"])
    medians = {}
    for side, name in (("a", "eager"), ("b", "compiled")):
        medians[side] = _rows(
            samples[name],
            "SELECT layer, median(span_us), median(busy_us) FROM layer_metrics"
            " JOIN step_steady USING (run_id, rank, step) GROUP BY layer ORDER BY layer",
        )
        drawn = {
            part: [p.get_height() for p in figure.axes[0].patches if p.get_gid() == f"{part}:{side}"]
            for part in ("diff", "busy")
        }
        assert drawn["diff"] == [pytest.approx(r[1]) for r in medians[side]]
        assert drawn["busy"] == [pytest.approx(r[2]) for r in medians[side]]
    speedups = [t.get_text() for t in figure.axes[0].texts if t.get_gid() == "speedup"]
    pairs = zip(medians["a"], medians["b"], strict=True)
    assert speedups == [f"{a[1] / b[1]:.2f}x / {a[2] / b[2]:.2f}x" for a, b in pairs]


def test_pictures_are_written(samples: dict[str, Path], tmp_path: Path) -> None:
    for kind, other in (("timeline", None), ("layers", None), ("diff", samples["graph"])):
        out = api.plot(samples["eager"], tmp_path / f"{kind}.png", kind, other=other)
        assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 20_000
    assert plot.image_format(out) == "png"


def test_report_names_the_method_of_each_run_and_the_layer_mismatch(samples: dict[str, Path], tmp_path: Path) -> None:
    page = api.report(samples["eager"], tmp_path / "r.html", other=samples["graph"]).read_text(encoding="utf-8")
    methods = {name: {r[0] for r in _rows(db, "SELECT DISTINCT method FROM layers")} for name, db in samples.items()}
    assert methods["eager"] == {"annotation"}
    for method in methods["eager"] | methods["graph"]:
        assert f"<td>{method}</td>" in page
    layers = {name: _rows(db, "SELECT count(DISTINCT layer) FROM layers")[0][0] for name, db in samples.items()}
    if layers["eager"] != layers["graph"]:
        assert "note: layer count differs" in page
    assert page.count('src="data:image/png;base64,') == 5
