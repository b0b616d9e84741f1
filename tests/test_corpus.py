"""Steps and layers on real model code and real serving engines, against truth that traceview does not compute.

The corpus (sample_traces/corpus/) holds transformers models run bare and as an annotated twin on an H200; its
truth.py derives the truth from the twin with the standard library. The engine traces (../shared/external/tracelens)
are a vLLM prefill with `nn.Module` scopes and an SGLang CUDA-graph decode whose truth is counted from the model's
structure. The bar is the issue's: steps and layers per step exact, at least 95% of layer instances with exactly
the true kernel count.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import traceview

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "sample_traces" / "corpus"
EXTERNAL = ROOT.parent / "shared" / "external" / "tracelens"
sys.path.insert(0, str(CORPUS))

import truth  # noqa: E402 - sample_traces/corpus/truth.py, standard library only

BARE = sorted(p.relative_to(CORPUS).as_posix() for p in truth.corpus_files(CORPUS))
# Known misses on the held-out models (sample_traces/corpus/README.md), strict: a fix shows as XPASS.
# Gemma 3 in generate() and prefill became exact when units of several layers were cut where layers meet
# (period.boundary_cuts) and the layers a unit leaves out were found from boundary to boundary; Gemma 3's CUDA graph
# when each whole replay holding layers became a forward pass (passes._replays_as_passes) and a unit of two identical
# layers and one of another kind was cut whatever the other opens with; GLM-4.5's dense first layer in generate()
# when the mixers' answer was held to the spans' kernels that a layer runs (mixers._layer_like), not the prologue.
HELD_OUT_MISSES: dict[str, str] = {}
CASES = [
    pytest.param(name, marks=pytest.mark.xfail(reason=HELD_OUT_MISSES[name], strict=True))
    if name in HELD_OUT_MISSES
    else name
    for name in BARE
]


def found_steps(database: Path) -> list[list[int]]:
    """Steps in time order, each the kernel counts of its layers in layer order."""
    with traceview.connect(database) as con:
        rows = con.execute(
            """SELECT list(l.kernels ORDER BY l.layer) FILTER (l.layer IS NOT NULL)
               FROM steps s LEFT JOIN layers l USING (run_id, rank, step) GROUP BY s.step ORDER BY s.step"""
        ).fetchall()
    return [list(r[0] or []) for r in rows]


def check(found: list[list[int]], true: list[dict]) -> None:
    assert len(found) == len(true), "steps"
    assert [len(f) for f in found] == [len(s["layers"]) for s in true], "layers per step"
    pairs = [(f, t) for got, step in zip(found, true, strict=True) for f, t in zip(got, step["layers"], strict=True)]
    exact = sum(f == t for f, t in pairs)
    assert exact >= 0.95 * len(pairs), f"{exact} of {len(pairs)} layer instances with the true kernel count"


def found_layers(database: Path) -> list[int | None]:
    """The layer of every kernel, in GPU time order."""
    with traceview.connect(database) as con:
        rows = con.execute("SELECT layer FROM gpu_activity WHERE kind = 'kernel' ORDER BY start_ns, activity_id")
        return [r[0] for r in rows.fetchall()]


@pytest.mark.parametrize("name", CASES)
def test_bare_corpus_trace_matches_its_annotated_twin(tmp_path: Path, name: str) -> None:
    """Counts (the issue's bar), then boundaries: every kernel in the layer its twin's annotation puts it in."""
    path = CORPUS / name
    traceview.ingest([truth.plain(path, tmp_path)], tmp_path / "run.db")
    check(found_steps(tmp_path / "run.db"), truth.truth(path))
    true_layers = [k.layer for k in truth.transfer(truth.kernels_of(path), truth.kernels_of(truth.twin_of(path)))]
    assert found_layers(tmp_path / "run.db") == true_layers


@pytest.mark.parametrize(
    "name", ["vllm_gptoss_b200_tp8_prefill_rank0.json.gz", "sglang_qwen3_8b_decode_bs32_mi300x.json.gz"]
)
def test_serving_engine_traces_have_their_true_steps_and_layers(tmp_path: Path, name: str) -> None:
    """Counts, then boundaries: every kernel in its true layer (the first layer opens with a plain norm, the others
    with a fused add+norm)."""
    path = EXTERNAL / name
    if not path.exists():
        pytest.skip("../shared/external is not beside this checkout")
    summary = traceview.ingest([path], tmp_path / "run.db")
    sglang = "sglang" in name
    kernels = [] if sglang else truth.kineto_kernels(path)
    check(
        found_steps(tmp_path / "run.db"),
        truth.qwen3_norm_truth(path) if sglang else truth.per_step(truth.one_step(kernels)),
    )
    assert summary.steps == 1
    true_layers = truth.qwen3_norm_layers(path) if sglang else [k.layer for k in kernels]
    assert found_layers(tmp_path / "run.db") == true_layers


def test_the_stray_kernel_before_the_sglang_step_is_left_out_and_said(tmp_path: Path) -> None:
    path = EXTERNAL / "sglang_qwen3_8b_decode_bs32_mi300x.json.gz"
    if not path.exists():
        pytest.skip("../shared/external is not beside this checkout")
    summary = traceview.ingest([path], tmp_path / "run.db")
    with traceview.connect(tmp_path / "run.db") as con:
        span_ms, outside = con.execute(
            """SELECT (s.end_ns - s.start_ns) / 1e6,
                      (SELECT count(*) FROM gpu_activity WHERE kind = 'kernel' AND step IS NULL) FROM steps s"""
        ).fetchall()[0]
        said = [
            d for (d,) in con.execute("SELECT description FROM ingest_stats WHERE name = 'segment.note'").fetchall()
        ]
    assert outside == 1 and span_ms < 20  # the arange kernel ran 463 ms before the forward pass
    assert any("1 kernel(s) outside every step" in n for n in said)  # fewer than a layer's kernels: a note
    assert not any("outside every step" in w for w in summary.warnings)
