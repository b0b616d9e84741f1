"""Pictures: what is drawn comes from the database (counted artist by artist), and the CLI writes real files."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import duckdb
import layered_db
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

import traceview
from traceview import api, plot
from traceview.errors import UsageError


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Run A (scale 1) and run B (every time halved: exactly 2x faster per layer)."""
    folder = tmp_path_factory.mktemp("plot")
    a = layered_db.build(folder / "a.db", "baseline").path
    b = layered_db.build(folder / "b.db", "candidate", scale=0.5).path
    return a, b


def _scalar(db: Path, sql: str, params: list[object] | None = None) -> object:
    with traceview.connect(db) as con:
        return con.execute(sql, params or []).fetchall()[0][0]


def _activity_paths(figure: Figure) -> dict[str, int]:
    """Rectangles drawn per category: one path per activity in the `activity:CATEGORY` collections."""
    counts: dict[str, int] = {}
    for collection in figure.axes[0].collections:
        gid = collection.get_gid() or ""
        if gid.startswith("activity:"):
            category = gid.split(":", 1)[1]
            counts[category] = counts.get(category, 0) + len(collection.get_paths())
            assert to_hex(collection.get_facecolor()[0]) == plot.CATEGORY_COLORS[category].lower()
    return counts


def _patches(figure: Figure, prefix: str) -> list[object]:
    return [p for p in figure.axes[0].patches if (p.get_gid() or "").startswith(prefix)]


def test_timeline_draws_every_activity_of_the_default_step(dbs: tuple[Path, Path]) -> None:
    db, _ = dbs
    figure = api.figure(db, "timeline")
    # The default step is the median steady-state one by span (the earlier on a tie): step 0 is warm-up.
    step = _scalar(db, "SELECT min(step) FROM steps WHERE NOT warmup")
    assert step == 1
    with traceview.connect(db) as con:
        expected = dict(
            con.execute("SELECT category, count(*) FROM gpu_activity WHERE step = ? GROUP BY ALL", [step]).fetchall()
        )
        layers = con.execute(
            "SELECT l.layer, (l.start_ns - s.start_ns) / 1e3, (l.end_ns - l.start_ns) / 1e3 FROM layers l"
            " JOIN steps s USING (run_id, rank, step) WHERE step = ? ORDER BY layer",
            [step],
        ).fetchall()
    assert _activity_paths(figure) == expected
    assert sum(expected.values()) == layered_db.step_kernels(0).__len__()
    # One shaded span per layer instance, where the layers table puts it, each labelled L<n>.
    spans = sorted(_patches(figure, "layer:"), key=lambda p: p.get_x())
    assert [(int(p.get_gid().split(":")[1]), p.get_x(), p.get_width()) for p in spans] == [
        (layer, pytest.approx(start), pytest.approx(width)) for layer, start, width in layers
    ]
    labels = {t.get_text() for t in figure.axes[0].texts}
    assert {f"L{layer}" for layer, _, _ in layers} <= labels
    # Lanes: one per stream, then the exposed-comm strip.
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == [
        "GPU 0 · stream 7",
        "GPU 0 · stream 13",
        "exposed comm",
    ]


def test_exposed_comm_strip_adds_up_to_step_metrics(dbs: tuple[Path, Path]) -> None:
    db, _ = dbs
    figure = api.figure(db, "timeline", step=2)
    strips = [c for c in figure.axes[0].collections if c.get_gid() == "exposed_comm"]
    assert len(strips) == 1 and to_hex(strips[0].get_facecolor()[0]) == plot.EXPOSED_COLOR.lower()
    widths = [path.get_extents().width for path in strips[0].get_paths()]
    assert len(widths) == layered_db.LAYERS
    exposed = _scalar(db, "SELECT exposed_comm_us FROM step_metrics WHERE step = 2")
    assert sum(widths) == pytest.approx(exposed) == layered_db.LAYERS * layered_db.EXPECTED["exposed_comm_us"]


def test_timeline_of_some_layers(dbs: tuple[Path, Path]) -> None:
    db, _ = dbs
    figure = api.figure(db, "timeline", step=1, layers="1-2")
    assert sorted(p.get_gid() for p in _patches(figure, "layer:")) == ["layer:1", "layer:2"]
    # Exactly the activities of layers 1 and 2: the gap between layers holds no kernel.
    assert sum(_activity_paths(figure).values()) == 2 * layered_db.KERNELS_PER_LAYER
    span_us = 2 * layered_db.LAYER_US + layered_db.LAYER_GAP_US
    pad = span_us * plot.X_MARGIN
    assert figure.axes[0].get_xlim() == pytest.approx((-pad, span_us + pad))
    assert "layers L1–L2" in figure.axes[0].get_title()


def test_layers_bars_are_layer_metrics_medians(dbs: tuple[Path, Path]) -> None:
    db, _ = dbs
    figure = api.figure(db, "layers")
    expected = layered_db.EXPECTED
    parts = {
        "compute_only_us": expected["compute_us"] - expected["overlap_us"],
        "overlapped_comm_us": expected["overlap_us"],
        "exposed_comm_us": expected["exposed_comm_us"],
        "idle_us": expected["idle_us"],
    }
    assert sum(parts.values()) == expected["span_us"]
    for part, value in parts.items():
        bars = _patches(figure, f"bar:{part}")
        assert [b.get_height() for b in bars] == [pytest.approx(value)] * layered_db.LAYERS, part
    # The same medians straight from SQL, for one part, so the test does not only restate the builder.
    median = _scalar(
        db,
        "SELECT median(compute_us - overlap_us) FROM layer_metrics JOIN steps USING (run_id, rank, step)"
        " WHERE NOT warmup AND layer = 0",
    )
    assert _patches(figure, "bar:compute_only_us")[0].get_height() == pytest.approx(median)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == [f"L{i}" for i in range(layered_db.LAYERS)]
    assert "baseline" in figure.axes[0].get_title() and "annotation" in figure.axes[0].get_title()
    assert figure.axes[0].get_ylabel().startswith("µs")


def test_diff_bars_and_speedups(dbs: tuple[Path, Path]) -> None:
    a, b = dbs
    figure = api.figure(a, "diff", other=b)
    heights = {side: [p.get_height() for p in _patches(figure, f"diff:{side}")] for side in "ab"}
    assert heights["a"] == [pytest.approx(layered_db.LAYER_US)] * layered_db.LAYERS
    assert heights["b"] == [pytest.approx(layered_db.LAYER_US / 2)] * layered_db.LAYERS
    busy = {side: [p.get_height() for p in _patches(figure, f"busy:{side}")] for side in "ab"}
    assert busy == {
        "a": [pytest.approx(layered_db.EXPECTED["busy_us"])] * layered_db.LAYERS,
        "b": [pytest.approx(layered_db.EXPECTED["busy_us"] / 2)] * layered_db.LAYERS,
    }
    speedups = [t.get_text() for t in figure.axes[0].texts if t.get_gid() == "speedup"]
    assert speedups == ["2.00x / 2.00x"] * layered_db.LAYERS  # span / busy
    title = figure.axes[0].get_title()
    assert "baseline (A)" in title and "candidate (B)" in title
    legend = [t.get_text() for t in figure.subfigs[0].legends[0].get_texts()]
    assert legend == ["A span", "A busy", "B span", "B busy"]
    only = api.figure(a, "diff", other=b, layers="2-3")
    assert len(_patches(only, "diff:a")) == 2


def test_diff_waterfall_per_layer_steps_from_a_to_b(dbs: tuple[Path, Path]) -> None:
    """B is A at half the time scale: each layer's waterfall starts at A's span, its cause bars add up to minus half
    of it, and it ends at B's span."""
    a, b = dbs
    figure = api.figure(a, "diff", other=b)
    waterfalls = [ax for ax in figure.axes[1:] if ax.get_visible()]
    assert len(waterfalls) == layered_db.LAYERS
    for ax in waterfalls:
        bars = {p.get_gid(): p.get_height() for p in ax.patches}
        assert bars["waterfall:a"] == pytest.approx(layered_db.LAYER_US)
        assert bars["waterfall:b"] == pytest.approx(layered_db.LAYER_US / 2)
        causes = [h for gid, h in bars.items() if gid not in ("waterfall:a", "waterfall:b")]
        assert sum(causes) == pytest.approx(-layered_db.LAYER_US / 2)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def traceview_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("kind", ["timeline", "layers", "diff"])
def test_cli_writes_png_and_svg(kind: str, dbs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = dbs
    second = [b] if kind == "diff" else []
    png, svg = tmp_path / f"{kind}.png", tmp_path / f"{kind}.svg"
    for out in (png, svg):
        result = traceview_cli("plot", a, *second, "-o", out, "--kind", kind)
        assert result.returncode == 0, result.stderr
        assert result.stderr.strip() == f"wrote {out}"
    width, height = _png_size(png)
    expected = {"layers": height == 675, "timeline": 350 <= height <= 675, "diff": height > 675}  # diff: + waterfalls
    assert width == 1200 and expected[kind]
    assert png.stat().st_size > 15_000
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and len(text) > 20_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "out.gif"], "cannot tell the picture format"),
        (["-o", "out.png", "--step", "9"], "--step 9 selects no step on rank 0 — its steps are 0-2"),
        (["-o", "out.png", "--layers", "3-x"], "is not a layer range"),
        (["-o", "out.png", "--rank", "4"], "no rank 4 in the run"),
        (["-o", "out.png", "--kind", "diff"], "a diff needs two runs"),
        (["-o", "out.png", "--run", "nope"], "no run labelled 'nope'"),
    ],
)
def test_cli_errors_are_one_line(args: list[str], message: str, dbs: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = dbs
    args = [str(tmp_path / x) if x.startswith("out.") else x for x in args]
    result = traceview_cli("plot", a, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not list(tmp_path.iterdir())


def test_unsegmented_database_says_so(tmp_path: Path) -> None:
    db = tmp_path / "bare.db"
    con = duckdb.connect(str(db))
    traceview.db.create_schema(con)
    con.execute(
        "INSERT INTO runs (run_id, label, backend, source_path, source_sha256, source_bytes, traceview_version,"
        " ingested_at) VALUES (1, 'bare', 'kineto', 'x', 'x', 0, 'test', now())"
    )
    con.execute("INSERT INTO ranks (run_id, rank, source_file, rank_from) VALUES (1, 0, 'x', 'default')")
    con.close()
    with pytest.raises(traceview.DatabaseError, match="no steps"):
        api.figure(db, "timeline")
    with pytest.raises(UsageError, match="no layers to draw"):
        api.figure(db, "layers")
