"""Speculative decoding: one step per verify, the target's layers exact, the drafter's kernels told apart.

Real traces (sample_traces/spec/, recorded on an H200 by record_spec.py: transformers' model code, random weights,
labelled from an annotated twin by truth.py, which never imports traceview), checked kernel by kernel; the runs
traceview does not yet get right are strict expected failures with their cause. Synthetic traces whose answer is
known by construction cover the drafter's passes varying step by step.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
from kineto_builder import KinetoTrace
from labelled_cases import labelled_cases

import traceview

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "sample_traces" / "corpus"), str(ROOT / "bench")]

import spec_accuracy  # noqa: E402 - bench/spec_accuracy.py

SPEC = ROOT / "sample_traces" / "spec"
MISSES: dict[str, str] = {}  # every recorded run is exact
CASES = labelled_cases(SPEC, MISSES)


def test_the_speculative_traces_are_committed() -> None:
    assert len(CASES) == 11


@pytest.mark.parametrize(("labels", "trace"), CASES)
def test_steps_target_layers_and_drafter_are_exact(labels: Path, trace: Path) -> None:
    row = spec_accuracy.check_spec(labels, trace)
    assert row.exact, row


def _spec_trace(path: Path, drafts: list[int], target_layers: int = 6) -> Path:
    """Steps of a drafter's passes (3 prologue kernels, 2 layers of 6, 2 epilogue kernels; its GEMMs a drafter's
    shape) then the target's verify (the same kernels, `target_layers` layers); the host idles 50 µs between
    steps."""
    trace = KinetoTrace()

    def forward(layers: int, gemm: str) -> None:
        for name in ("embedding", "rotary", "mask"):
            trace.launch_kernel(name, dur_us=2)
        for _ in range(layers):
            for name in ("rms_norm", gemm, "attention", "add", "rms_norm_mlp", "mlp"):
                trace.launch_kernel(name, dur_us=3)
        for name in ("final_norm", "lm_head_argmax"):
            trace.launch_kernel(name, dur_us=2)

    for count in drafts:
        for _ in range(count):
            forward(2, "gemm_1x256")
        forward(target_layers, "gemm_8x256")
        trace.cpu_ts = trace.gpu_ts + 50  # the host prepares the next step: the GPU idles
    return trace.write(path)


@pytest.mark.parametrize("drafts", [[3, 3, 3, 3, 3], [4, 3, 2, 4, 1, 3]], ids=["constant", "varying"])
def test_a_synthetic_speculative_decode(tmp_path: Path, drafts: list[int]) -> None:
    database = tmp_path / "run.db"
    traceview.ingest([_spec_trace(tmp_path / "spec.json", drafts)], database)
    with traceview.connect(database) as con:
        steps = con.execute("SELECT draft_passes, layers, draft_kernels FROM step_metrics ORDER BY step").fetchall()
        roles = con.execute(
            "SELECT role, count(*) FILTER (layer IS NOT NULL) FROM gpu_activity GROUP BY role ORDER BY role"
        ).fetchall()
    assert [s[0] for s in steps] == drafts
    assert {s[1] for s in steps} == {6}
    # 3 + 2 * 6 + 2 kernels per pass; with one pass, its epilogue is not told from the target's prologue
    assert [s[2] for s in steps] == [17 * d if d > 1 else 15 for d in drafts]
    assert roles == [("draft", 0), ("target", 6 * 6 * len(drafts))]


def test_a_trace_without_a_drafter_has_no_roles(tmp_path: Path) -> None:
    database = tmp_path / "run.db"
    traceview.ingest([ROOT / "sample_traces" / "eager.pt.trace.json.gz"], database)
    with traceview.connect(database) as con:
        assert con.execute("SELECT count(*) FROM gpu_activity WHERE role IS NOT NULL").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM steps WHERE draft_passes IS NOT NULL").fetchall() == [(0,)]


def test_diff_compares_the_targets_layers_and_shows_the_drafter_beside(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    traceview.ingest([_spec_trace(tmp_path / "a.json", [3, 3, 3, 3])], a)
    traceview.ingest([_spec_trace(tmp_path / "b.json", [1, 1, 1, 1])], b)
    result = traceview.api.diff(a, b)
    assert result.summary["layers_per_step"] == [6, 6]
    assert [d["passes"] for d in result.summary["drafter_per_step"]] == [3, 1]
    assert any("the drafter per step (medians): 3 passes, 51 kernels" in n for n in result.notes)


NORM = ("norm_pow", "norm_mean", "norm_rsqrt", "norm_mul")


def _eager_spec_trace(
    path: Path,
    drafts: list[int],
    draft_layers: int = 2,
    after: bool = False,
    ann: bool = False,
    vllm: bool = False,
    eagle: bool = False,
    draft_norm: tuple[str, ...] = NORM,
    eagle1: bool = False,
) -> Path:
    """Steps of eager speculative decoding with pre-norm layers (a residual add, then the next norm): the drafter's
    passes of `draft_layers` layers, one token each, then the target's 6-layer verify of all the step's tokens (its
    GEMMs named by their token count, as shapes pick kernels); `after`: the drafter runs after the verify (MTP), its
    passes verified by the next step's. Every pass: embedding, layers, final norm, LM head, sampling, the host's
    bookkeeping. `ann`: layers annotated `model.layers.N` and `draft.layers.N`, steps `spec_step_N` (as
    sample_traces/spec/record_spec.py's annotated twin). `vllm`: vLLM v1's ranges, a step
    `execute_context_0(0)_generation_1(1)` holding the verify and the drafting `gpu_model_runner: draft`. `eagle`:
    the drafter's GEMMs are the verify's (an EAGLE-style head of the target's width whose shapes pick the same
    kernels: its layer runs the very kernels of a target layer). `draft_norm`: the drafter's norm kernels. `eagle1`:
    the drafter's prologue ends with EAGLE's fc (the embedding and the target's hidden state, concatenated) and its
    first layer has no input norm (EAGLE-1 heads leave it out)."""
    trace = KinetoTrace()

    def forward(layers: int, tokens: int, stack: str) -> None:
        eagle_head = eagle1 and stack == "draft"
        for name in ("embedding", "rotary_cos", "rotary_sin", *(["eagle_fc"] if eagle_head else [])):
            trace.launch_kernel(name, dur_us=2)
        norm = draft_norm if stack == "draft" else NORM
        for i in range(layers):
            with trace.cpu_range(f"{stack}.layers.{i}") if ann else contextlib.nullcontext():
                opening = () if eagle_head and i == 0 else norm
                for name in (*opening, f"gemm_qkv_{tokens}", "rope", "attention", f"gemm_o_{tokens}", "residual_add"):
                    trace.launch_kernel(name, dur_us=3)
                for name in (*norm, f"gemm_up_{tokens}", "silu", f"gemm_down_{tokens}", "residual_add"):
                    trace.launch_kernel(name, dur_us=3)
        for name in (*norm, "lm_head", "argmax", "cat_ids", "compare", "fill"):
            trace.launch_kernel(name, dur_us=1)

    def drafting(count: int) -> None:
        with trace.cpu_range("gpu_model_runner: draft") if vllm else contextlib.nullcontext():
            for _ in range(count):
                forward(draft_layers, count + 1 if eagle else 1, "draft")

    previous = 0
    for index, count in enumerate(drafts):
        step = "execute_context_0(0)_generation_1(1)" if vllm else f"spec_step_{index}"
        with trace.cpu_range(step) if vllm or ann else contextlib.nullcontext():
            drafting(0 if after else count)
            forward(6, (previous if after else count) + 1, "model")
            drafting(count if after else 0)
        previous = count
        trace.cpu_ts = trace.gpu_ts + 50  # the host prepares the next step: the GPU idles
    return trace.write(path)


def _steps_and_layers(database: Path) -> tuple[list[tuple[int, int, int]], list[tuple[str | None, int]]]:
    with traceview.connect(database) as con:
        steps = con.execute(
            """SELECT coalesce(s.draft_passes, 0), count(DISTINCT g.layer), count(g.layer)
               FROM steps s LEFT JOIN gpu_activity g ON g.run_id = s.run_id AND g.step = s.step AND g.kind = 'kernel'
               GROUP BY s.step, s.draft_passes ORDER BY s.step"""
        ).fetchall()
        roles = con.execute(
            "SELECT role, count(*) FILTER (layer IS NOT NULL) FROM gpu_activity GROUP BY role ORDER BY role"
        ).fetchall()
    return steps, roles


@pytest.mark.parametrize("drafts", [[4, 3, 2, 4, 1, 3, 0], [2, 2, 2, 2]], ids=["varying, down to none", "constant"])
def test_an_eager_speculative_decode_told_apart_by_its_glue(tmp_path: Path, drafts: list[int]) -> None:
    """Drafter and target run the same kernels (the drafter's passes differ only in layers per pass) and the host's
    bookkeeping between passes is the same after every pass: the passes are told apart where a layer opens with
    no residual add before it (mixers.passes_after_glue), the verify is the pass of the most layers."""
    database = tmp_path / "run.db"
    traceview.ingest([_eager_spec_trace(tmp_path / "spec.json", drafts)], database)
    steps, roles = _steps_and_layers(database)
    assert steps == [(d, 6, 6 * 17) for d in drafts]
    assert roles == [("draft", 0), ("target", 6 * 17 * len(drafts))]


def test_a_drafter_after_the_verify_drafts_for_the_next_step(tmp_path: Path) -> None:
    """MTP-style: one layer per draft pass, run after the verify; its passes belong to the step whose verify
    checks them, so the first step has none."""
    database = tmp_path / "run.db"
    traceview.ingest([_eager_spec_trace(tmp_path / "mtp.json", [2, 2, 2, 2, 2], draft_layers=1, after=True)], database)
    steps, _ = _steps_and_layers(database)
    assert [s[0] for s in steps] == [0, 2, 2, 2, 2]
    assert {s[1] for s in steps} == {6}


def test_annotated_layers_of_two_models(tmp_path: Path) -> None:
    """`draft.layers.N` and `model.layers.N` ranges, a `spec_step_N` range per step: the layers are the target's,
    numbered from 0 with their names, whichever model ran first; the drafter's annotated layers are its kernels,
    role draft, its passes counted in each annotated step."""
    database = tmp_path / "run.db"
    traceview.ingest([_eager_spec_trace(tmp_path / "spec.json", [3, 2, 1, 0], ann=True)], database)
    steps, roles = _steps_and_layers(database)
    assert steps == [(d, 6, 6 * 17) for d in [3, 2, 1, 0]]
    assert roles == [("draft", 0), ("target", 6 * 17 * 4)]
    with traceview.connect(database) as con:
        names = con.execute("SELECT DISTINCT layer, name, method FROM layers ORDER BY layer").fetchall()
    assert names == [(i, f"model.layers.{i}", "annotation") for i in range(6)]
    with traceview.connect(database) as con:
        assert {m for (m,) in con.execute("SELECT DISTINCT method FROM steps").fetchall()} == {"annotation"}


@pytest.mark.parametrize("drafts", [[3, 3, 3, 3], [1, 1, 1, 1]], ids=["three passes", "one pass"])
def test_vllm_drafting_ranges(tmp_path: Path, drafts: list[int]) -> None:
    """vLLM v1 steps: the verify, then the drafting range (EAGLE-style one-layer passes for the next step). The
    drafter's kernels are those launched in the range, its passes told apart by their glue; a lone one-layer pass
    (whose token mixer no other piece repeats) is found from the range alone."""
    database = tmp_path / "run.db"
    trace = _eager_spec_trace(tmp_path / "vllm.json", drafts, draft_layers=1, after=True, vllm=True)
    traceview.ingest([trace], database)
    steps, roles = _steps_and_layers(database)
    assert steps == [(d, 6, 6 * 17) for d in drafts]
    assert roles == [("draft", 0), ("target", 6 * 17 * len(drafts))]
    with traceview.connect(database) as con:
        assert {m for (m,) in con.execute("SELECT DISTINCT method FROM steps").fetchall()} == {"engine"}


@pytest.mark.parametrize("eagle", [False, True], ids=["draft model", "eagle head"])
@pytest.mark.parametrize("drafts", [[3, 3, 3, 3], [4, 3, 2, 4, 1, 3, 0]], ids=["constant", "varying, down to none"])
def test_a_one_layer_drafter_in_a_bare_trace(tmp_path: Path, drafts: list[int], eagle: bool) -> None:
    """A one-layer drafter before the verify, no annotation: its token mixer repeats no other piece (a draft model
    of other shapes) or is a target layer's (an EAGLE head of the target's width); its glue is found where its layer
    opens, the input norm with no residual add before it, after the LM head and sampling of the pass before."""
    database = tmp_path / "run.db"
    traceview.ingest([_eager_spec_trace(tmp_path / "spec.json", drafts, draft_layers=1, eagle=eagle)], database)
    steps, roles = _steps_and_layers(database)
    assert steps == [(d, 6, 6 * 17) for d in drafts]
    assert roles == [("draft", 0), ("target", 6 * 17 * len(drafts))]


OTHER_NORM = pytest.mark.xfail(
    strict=True,
    reason="known limit: a drafter of two layers whose norm kernels are not the target's (another norm implementation "
    "or dtype): the boundary context of the target's halves (residual add, then its norm) marks none of the "
    "drafter's, whose passes read as the glue between verifies (one context per trace; a context per model is not "
    "searched). A one-layer drafter is found since its pass, a few kernels longer than the glue between verifies, "
    "is cut where that glue comes back (passes._glue_inside)",
)


@pytest.mark.parametrize("draft_layers", [1, pytest.param(2, marks=OTHER_NORM)])
def test_a_drafter_whose_norm_is_not_the_targets(tmp_path: Path, draft_layers: int) -> None:
    database = tmp_path / "run.db"
    trace = _eager_spec_trace(tmp_path / "spec.json", [3] * 4, draft_layers, draft_norm=("fused_rms_norm",))
    traceview.ingest([trace], database)
    steps, _ = _steps_and_layers(database)
    assert steps == [(3, 6, 6 * 17)] * 4


def test_an_eagle1_head_in_vllms_drafting_range(tmp_path: Path) -> None:
    """vLLM's EAGLE-1 head (its first layer without an input norm, after an fc) in the drafting range: its passes
    are told apart by their glue, the first piece of the range being one (passes.drafter_passes)."""
    database = tmp_path / "run.db"
    trace = _eager_spec_trace(tmp_path / "vllm.json", [3] * 4, draft_layers=1, after=True, vllm=True, eagle1=True)
    traceview.ingest([trace], database)
    steps, roles = _steps_and_layers(database)
    assert steps == [(3, 6, 6 * 17)] * 4
    assert roles == [("draft", 0), ("target", 6 * 17 * 4)]


@pytest.mark.xfail(
    strict=True,
    reason="known limit: in a bare trace, an EAGLE-1 head's layer opens with no norm (its input norm is left out) and "
    "its token mixer repeats no other piece, so nothing marks where its glue ends; placing the opening after the "
    "glue's prologue kernels (a kernel of the trace's own prologue after one of its epilogue) cut the token mixers "
    "of graph_llama's drafter and of every DeepSeek-V3 run (6 of 11 exact)",
)
def test_a_bare_eagle1_head(tmp_path: Path) -> None:
    database = tmp_path / "run.db"
    trace = _eager_spec_trace(tmp_path / "spec.json", [3] * 4, draft_layers=1, after=True, eagle1=True)
    traceview.ingest([trace], database)
    steps, _ = _steps_and_layers(database)
    assert steps == [(0, 6, 6 * 17)] + [(3, 6, 6 * 17)] * 3
