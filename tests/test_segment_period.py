"""Period inference on kernel-name sequences whose layers are known (segment/period.py, no database)."""

from __future__ import annotations

import itertools
import re
import time

import numpy as np
import pytest
from segment_fixtures import FRAMEWORKS, Model, framework_step, random_names

from traceview.segment import period, pipeline
from traceview.segment.family import kernel_family


def codes_of(names: list[str]) -> np.ndarray:
    vocabulary = {name: i for i, name in enumerate(dict.fromkeys(names))}
    return np.array([vocabulary[n] for n in names])


def true_counts(truth: list[int | None]) -> list[int]:
    counts: dict[int, int] = {}
    for layer in truth:
        if layer is not None:
            counts[layer] = counts.get(layer, 0) + 1
    return [counts[k] for k in sorted(counts)]


def true_starts(truth: list[int | None]) -> list[int]:
    return [truth.index(layer) for layer in sorted({t for t in truth if t is not None})]


MODELS = {
    "dense stack": Model(layers=6, moe=False),
    "moe stack": Model(layers=6),
    "one dense first layer": Model(layers=8, dense=1),
    "three dense first layers": Model(layers=8, dense=3),
    "moe expert loop varies per layer": Model(layers=8, expert_loop=True),
    "dense first + varying experts": Model(layers=8, dense=1, expert_loop=True, seed=3),
    "one extra kernel in some layers": Model(layers=8, extra_in=(2, 5)),
    "extra kernel in the first and last layer": Model(layers=8, extra_in=(0, 7)),
    "two layers only": Model(layers=2),
    "deep: 61 layers, 3 dense, varying experts, fused norms": Model(
        layers=61, dense=3, expert_loop=True, fused_norm=True, extra_in=(5, 17)
    ),
}


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
def test_layers_and_kernels_per_layer_are_found(model: Model) -> None:
    names, truth = model.step()
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert [span.end - span.start for span in fit.layers] == true_counts(truth)
    assert 0.5 <= fit.confidence <= 1


@pytest.mark.parametrize("model", [m for m in MODELS.values() if isinstance(m, Model) and not m.fused_norm], ids=str)
def test_boundaries_fall_where_the_layers_start(model: Model) -> None:
    names, truth = model.step()
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert [span.start for span in fit.layers] == true_starts(truth)


def test_fused_add_norm_straddling_layers_keeps_counts_and_shifts_boundary_by_one() -> None:
    # vLLM style: layer 0 opens with rms_norm, the others with fused_add_rms_norm (the previous layer's residual
    # add fused with this layer's norm); the final norm is fused_add_rms_norm too. Without names to tell a norm,
    # the repetition starts at the second kernel of layer 0: every layer keeps its count, boundaries shift by one.
    names, truth = Model(layers=8, fused_norm=True).step()
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert [s.end - s.start for s in fit.layers] == true_counts(truth)
    assert [s.start for s in fit.layers] == [start + 1 for start in true_starts(truth)]


def test_prologue_and_epilogue_stay_out_of_layers() -> None:
    names, truth = Model(layers=4).step()
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert fit.layers[0].start == truth.index(0)  # the embedding is before it
    assert fit.layers[-1].end == len(truth) - truth[::-1].index(3)  # the final norm, LM head, argmax after it


@pytest.mark.parametrize("seed", range(40))
def test_no_structure_gives_no_layers(seed: int) -> None:
    assert period.find_layers(codes_of(random_names(400, seed=seed))) is None


def test_too_short_or_constant_sequences() -> None:
    assert period.find_layers(np.array([1, 2, 3])) is None
    assert period.find_layers(np.array([], dtype=np.int64)) is None
    assert period.find_layers(np.zeros(50, dtype=np.int64)) is None


@pytest.mark.heavy  # a timing property on a million kernels
def test_a_step_of_a_million_kernels_is_solved_in_seconds() -> None:
    model = Model(layers=24_000, dense=3, expert_loop=True)
    names, truth = model.step()
    codes = codes_of(names)
    assert len(codes) > 1_000_000
    started = time.perf_counter()
    fit = period.find_layers(codes)
    elapsed = time.perf_counter() - started
    assert fit is not None and len(fit.layers) == 24_000
    assert [s.end - s.start for s in fit.layers[:50]] == true_counts(truth)[:50]
    assert elapsed < 20, elapsed


@pytest.mark.parametrize("kind", FRAMEWORKS)
def test_layer_shapes_of_other_frameworks(kind: str) -> None:
    names, truth = framework_step(kind)
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert [s.end - s.start for s in fit.layers] == true_counts(truth)
    shift = 1 if kind.startswith("vllm") else 0  # the fused add+norm straddles (see the test above)
    assert [s.start for s in fit.layers] == [start + shift for start in true_starts(truth)]


def test_layers_alike_only_by_family_are_found_from_their_families() -> None:
    """A MoE layer whose experts' loop runs one GEMM per expert hit, cuBLAS choosing each GEMM's tile variant by the
    tokens that expert got: no two layers of a step run the same kernels by name (Aria under torch.compile). By
    family (the variants of one GEMM are one) every layer is alike; the layers are found from the families when the
    names give none."""
    rng = np.random.default_rng(3)
    tiles = ["gemm_64x8_NNT", "gemm_64x16_NNT", "gemm_128x16_NNT", "gemm_64x24_NNT"]
    layers = [["norm", "qkv", "attention", "o_proj", "norm2", "router", "topk", *rng.choice(tiles, 6), "add"]
              for _ in range(8)]  # fmt: skip
    names = ["embed", *[k for layer in layers for k in layer], "final_norm", "lm_head"]
    assert len({tuple(layer) for layer in layers}) == 8
    families = codes_of(["gemm_NNT" if name.startswith("gemm_") else name for name in names])
    assert period.find_layers(codes_of(names)) is None
    fit = period.find_layers(codes_of(names), families=families)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == [(1 + 14 * i, 15 + 14 * i) for i in range(8)]


def test_a_first_layer_opening_with_a_variant_of_the_others_norm_is_cut_where_they_are() -> None:
    # vLLM: layer 0 opens with rms_norm, the others with fused_add_rms_norm; kernel families tell they are variants
    names, truth = Model(layers=8, fused_norm=True).step()
    families = np.array([{"rms_norm": 0, "fused_add_rms_norm": 0}.get(n, 1 + i) for i, n in enumerate(names)])
    fit = period.find_layers(codes_of(names), families=families)
    assert fit is not None
    assert [s.start for s in fit.layers] == true_starts(truth)
    assert [s.end - s.start for s in fit.layers] == true_counts(truth)


VLLM_RMS_NORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long, long)"
VLLM_FUSED_NORM = "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, long)"


def test_a_first_layer_opening_with_a_variant_of_the_others_norm_that_its_qk_norms_run_is_cut_where_they_are() -> None:
    """vLLM Qwen3 eager: layer 0 opens with the plain RMSNorm, the others with the norm fused with the residual add,
    and every layer's QK norms run the plain one too: the variant still tells where layers open (a limit on how many
    kernels of that family a unit may run, tried for Gemma 3n, cut this first layer one kernel late). Real names, so
    the families are family.py's."""

    def layer(index: int) -> list[str]:
        norm = VLLM_RMS_NORM if index == 0 else VLLM_FUSED_NORM
        return [norm, "qkv", VLLM_RMS_NORM, VLLM_RMS_NORM, "rope", "attention", "o_proj", VLLM_FUSED_NORM, "mlp"]

    names = ["embedding", *(kernel for index in range(8) for kernel in layer(index)), VLLM_FUSED_NORM, "lm_head"]
    ids: dict[str, int] = {}
    families = np.array([ids.setdefault(kernel_family(name), len(ids)) for name in names])
    fit = period.find_layers(codes_of(names), families=families, whole_pass=True)
    assert fit is not None
    assert [(s.start, s.end) for s in fit.layers] == [(1 + 9 * i, 10 + 9 * i) for i in range(8)]


@pytest.mark.parametrize("kinds", [("conv", "conv", "attention"), ("sliding", "sliding", "sliding", "full")])
def test_a_unit_of_several_layers_of_one_kind_then_one_of_another_is_split_into_its_layers(
    kinds: tuple[str, ...],
) -> None:
    """LFM2 (two convolution layers, one attention layer) and Gemma-like units (sliding-window layers, then a full
    one): the layers differ in size, so the unit is cut after each repeat of its opening block."""
    body = {
        "conv": ["in_proj", "conv1d", "gate", "out_proj", "add"],
        "sliding": ["q", "k", "v", "rope", "swa", "o", "add"],
        "full": ["q", "k", "v", "rope", "mask", "sdpa", "softmax", "o", "add"],
        "attention": ["qkv", "q_norm", "k_norm", "rope", "sdpa", "o", "add"],
    }
    mlp = ["norm_pow", "norm_mean", "norm_rsqrt", "norm_mul", "w1", "w3", "silu_mul", "w2", "add"]
    opening = ["norm_pow", "norm_mean", "norm_rsqrt", "norm_mul"]
    layers = [opening + body[k] + (["extra_a", "extra_b"] if k in ("attention", "full") else []) + mlp for k in kinds]
    names = ["embed", "scale"]
    truth: list[int | None] = [None, None]
    for repeat in range(4):
        for i, layer in enumerate(layers):
            names += layer
            truth += [repeat * len(kinds) + i] * len(layer)
    names += ["final_norm", "lm_head", "argmax"]
    truth += [None] * 3
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert [s.end - s.start for s in fit.layers] == true_counts(truth)
    assert [s.start for s in fit.layers] == true_starts(truth)


def test_a_layer_with_one_kernel_more_before_the_anchor_still_opens_at_its_norm() -> None:
    """Gemma 3: two sliding-window layers, then a full-attention layer with one kernel more early on (its mask), so
    the anchor of every third layer sits one kernel later; each layer opens with a 10-kernel norm, like the final
    norm of the epilogue. Every layer must still start at its norm."""
    norm = [f"norm_{i}" for i in range(10)]
    # generic kernels (one GEMM name, one elementwise name) until the attention: the first kernel that tells a
    # layer's place, and so the anchor, comes after the mask
    sliding = [*norm, "gemm", "gemm", "gemm", "ew", "ew", "ew", "attention", "gemm", "ew", "add", *norm, "up"]
    sliding += ["up", "gelu_mul", "down", "ew", "add"]
    full = [*sliding[:12], "ew", *sliding[12:]]
    names, truth = ["embed", "scale", "cast"], [None, None, None]
    for i, layer in enumerate([sliding, sliding, full] * 3):
        names += layer
        truth += [i] * len(layer)
    names += [*norm, "lm_head"]
    truth += [None] * 11
    fit = period.find_layers(codes_of(names))
    assert fit is not None
    assert [s.start for s in fit.layers] == true_starts(truth)
    assert [s.end - s.start for s in fit.layers] == true_counts(truth)


def test_a_unit_of_two_identical_layers_and_one_that_opens_otherwise_is_cut() -> None:
    """Gemma 3 compiled per layer in a CUDA graph: two sliding-window layers (22 kernels, Inductor runs one of them
    before the norm) and a full-attention layer of 19 that opens with its norm: the unit's third layer opens with
    another kernel, and its blocks are longer than a third of the unit."""
    sliding = ["hoisted", "norm", *[f"s{i}" for i in range(20)]]
    full = ["norm_full", *[f"f{i}" for i in range(18)]]
    unit = codes_of(sliding + sliding + full)
    assert period._repeated_opening_cuts(unit) == [22, 44]


def test_a_layers_own_norm_and_projection_blocks_are_not_layers() -> None:
    """Qwen3 at batch 1 in float16: the input norm, the q norm and the k norm each run before a GEMM of one kernel,
    so the layer opens with three identical blocks and one longer block (attention and MLP) follows; the blocks
    close with the GEMM the last block also runs inside it, not with the residual add that closes the layer."""
    norm = ["cast", "pow", "mean", "add_eps", "rsqrt", "mul", "to_half", "mul_weight"]
    block = [*norm, "gemm"]
    rest = [*[f"a{i}" for i in range(9)], "gemm", "residual_add", *norm, "gemm", "silu", "gemm", "mul", "gemm"]
    unit = codes_of(block * 3 + [*rest, "residual_add"])
    assert period._repeated_opening_cuts(unit) is None
    conv = [*norm, "conv", "conv_out", "residual_add", *norm, "gemm", "silu", "gemm", "residual_add"]
    attention = [*norm, *[f"a{i}" for i in range(10)], "residual_add", *norm, "gemm", "silu", "gemm", "residual_add"]
    assert period._repeated_opening_cuts(codes_of(conv * 2 + attention)) == [23, 46]  # layers: they close alike


def test_a_unit_cutting_through_a_run_of_one_kernel_opens_no_layer() -> None:
    """A unit found in a phase that starts inside an expert loop's run of one GEMM: its boundary context is that
    kernel three times, which every kernel of the run matches; it marks no layer boundary (4,477 one-kernel layers
    on Qwen3.5-MoE at batch 1 before)."""
    unit = codes_of(["gemm"] * 3 + [f"k{i}" for i in range(40)] + ["gemm"] * 30)
    assert period.boundary_cuts(unit) is None


def test_dense_layers_found_half_a_layer_late_are_moved_to_whole_copies() -> None:
    """Three identical dense layers (an attention half of 5 kernels, an MLP half of 7) before the MoE ones, found
    as AX-K1's were at batch 1 (their MLP half opens as their attention half): an attention half, an MLP half and
    the next attention half, then an MLP half and a whole layer. Moving each boundary to make a copy of another
    such layer, until nothing moves, gives the three layers (one pass gives the last one only)."""
    dense = [f"d{i}" for i in range(12)]
    moe = [f"m{i}" for i in range(30)]
    codes = codes_of(["embed", *dense * 3, *moe * 2, "head"])
    spans = [(1, 6), (6, 18), (18, 37), (37, 67), (67, 97)]
    found = period._whole_copies(codes, [period.LayerSpan(a, b, 1.0) for a, b in spans], 30)
    assert [(s.start, s.end) for s in found] == [(1, 13), (13, 25), (25, 37), (37, 67), (67, 97)]


def test_a_steps_layers_found_out_of_phase_move_to_open_as_the_other_steps_layers_do() -> None:
    """JetMoE decode in float16 at batch 1: its attention routes each token through a loop whose length changes
    layer by layer, and in one step of four the repeating unit was found out of phase, every layer opening at its
    query projection (25 kernels late) and the last holding the final norm. Each layer moves to the nearest place
    where the other steps' layers' opening (their norm) runs, the last ends where their closing block does; a step
    already in phase, or that never runs that opening, stays."""
    norm = [f"norm_{i}" for i in range(8)]
    names, starts = ["embed", "pos"], []
    for routed, experts in ((6, 2), (8, 3), (7, 1), (9, 2), (6, 3)):
        starts.append(len(names))
        names += [*norm, "qkv", *["route"] * routed, "attn", "o", "add", *norm, *["expert"] * experts]
        names += ["gate", "up", "down", "add"]
    closing = len(names)
    names += [*norm, "head"]
    codes = codes_of(names)
    found = [(a + 8, b + 8) for a, b in itertools.pairwise(starts)] + [(starts[-1] + 8, len(codes))]
    fit = period._fit_of(period.dense(codes), found)
    opening = codes[starts[0] : starts[0] + 12]
    ending = codes[closing - 4 : closing]
    moved = period.in_phase_with(codes, fit, opening, ending)
    assert moved is not None
    assert [(s.start, s.end) for s in moved.layers] == list(itertools.pairwise([*starts, closing]))
    assert period.in_phase_with(codes, moved, opening, ending) is moved
    assert period.in_phase_with(codes, fit, np.full(12, -1), ending) is fit  # an opening the step never runs


def test_the_last_layer_closes_with_the_block_the_others_close_with() -> None:
    """AX-K1 decode in float16 at batch 1: three dense layers, then MoE layers that close with a norm and a residual
    add after their experts' add; the unit left that block between the layers (each layer runs up to the next one),
    and the last layer ended at the experts' add, the block taken for the final norm (which has no residual add
    after it). The last layer runs on to the end of the block most layers close with; dense layers and a pass
    whose final norm follows a whole layer are left as they are."""
    norm = ["copy", "pow", "mean", "add_eps", "rsqrt", "mul", "cast", "mul_w"]
    attention = [*norm, "qkv", "rope", "attention", "o_proj", "add"]
    dense = [*attention, *norm, "gate_up", "silu", "down", "add"]

    def moe(experts: int) -> list[str]:
        return [*attention, *norm, "router", "topk", *["expert"] * experts, "combine", "add_experts"]

    layers = [dense] * 3 + [moe(n) for n in (2, 4, 3, 5, 1, 3)]
    names = ["embed"]
    spans = []
    for layer in layers:
        spans.append((len(names), len(names) + len(layer)))
        names += [*layer, *([*norm, "add"] if layer is not dense else [])]
    closing = len(names)
    names += [*norm, "lm_head"]
    codes = codes_of(names)
    fit = period._fit_of(period.dense(codes), spans)
    found = period.with_closing_block(codes, fit)
    assert found is not None and (found.layers[-1].start, found.layers[-1].end) == (spans[-1][0], closing)
    whole = [*spans[:-1], (spans[-1][0], closing)]
    assert period.with_closing_block(codes, period._fit_of(period.dense(codes), whole)).layers[-1].end == closing
    dense_only = codes_of(["embed", *dense * 6, *norm, "lm_head"])
    fit = period._fit_of(period.dense(dense_only), [(1 + 25 * i, 26 + 25 * i) for i in range(6)])
    assert period.with_closing_block(dense_only, fit) is fit


def test_a_runs_last_compiled_moe_layer_ends_as_the_others_close() -> None:
    """DeepSeek-V2 compiled per layer at batch 1: each MoE graph runs a GEMM per expert hit, so no two graphs are
    alike kernel for kernel, and the run's end, found for the common unit, cut the last graph short of its last
    experts (or ran it into the eager final norm). It ends after the last kernel that closes the other graphs and
    runs nowhere else in them; an extern GEMM, which runs all through a layer and in the LM head, closes nothing."""

    def graph(experts: int) -> list[str]:
        return ["t_norm_0", "gemm", "t_attn_1", "gemm", "t_route_2", *["expert_gemm"] * experts, "t_combine_3"]

    graphs = [graph(n) for n in (2, 4, 3, 5)]
    codes = codes_of(["embed", *[k for g in graphs for k in g], "final_norm", "gemm"])
    starts = np.cumsum([1, *[len(g) for g in graphs]]).tolist()
    marks = set(starts[:-1])
    spans = list(itertools.pairwise(starts))
    for found_end in (starts[-1] - 3, starts[-1] + 1):
        cut = [*spans[:-1], (starts[-2], found_end)]
        assert period._ends_as_copies(codes, cut, marks)[-1] == (starts[-2], starts[-1])
    extern = codes_of(["embed", *[k for g in graphs for k in [*g[:-1], "gemm"]], "final_norm", "gemm"])
    assert period._ends_as_copies(extern, [*spans[:-1], (starts[-2], starts[-1] - 3)], marks)[-1][1] == starts[-1] - 3


def test_a_runs_last_compiled_graph_ends_after_its_last_inductor_kernel() -> None:
    """Cohere 2 MoE compiled per layer at batch 1: three sliding-attention MoE layers to one full-attention one, no
    two graphs alike kernel for kernel (a GEMM per expert hit). The last graph, a full-attention one, closes with a
    fused kernel the sliding graphs run inside them, so no closing kernel tells its end, and the run's end, found for
    the common unit, ran it one eager kernel into the final norm or cut its last kernel off. Every earlier graph
    ends with a kernel Inductor numbers: the last one ends after its own last such kernel."""

    def graph(experts: int, full: bool) -> list[str]:
        closing = ["t_softmax_5"] if full else ["t_softmax_5", "t_cat_6"]
        return ["t_norm_0", "gemm", "t_attn_1", "t_route_2", *["expert_gemm"] * experts, *closing]

    kinds = [False, False, False, True] * 2
    graphs = [graph(n, full) for n, full in zip((2, 4, 3, 5, 1, 3, 2, 4), kinds, strict=True)]
    names = ["embed", *[k for g in graphs for k in g], "copy", "mean", "rsqrt", "mul", "gemm"]
    codes = codes_of([name.rsplit("_", 1)[0] if name.startswith("t_") else name for name in names])
    numbered = np.array([name.startswith("t_") for name in names])
    starts = np.cumsum([1, *[len(g) for g in graphs]]).tolist()
    spans = list(itertools.pairwise(starts))
    for found_end in (starts[-1] - 1, starts[-1] + 1):
        cut = [*spans[:-1], (starts[-2], found_end)]
        assert period._ends_as_copies(codes, cut, set(starts[:-1]))[-1][1] == found_end  # the closers tell nothing
        assert period._ends_as_copies(codes, cut, set(starts[:-1]), numbered)[-1] == (starts[-2], starts[-1])


def test_a_graph_that_ends_before_the_next_graph_runs_to_it() -> None:
    """The last graph of one run of layers found (a MoE layer after dense ones) ended 2 kernels before the next run's
    first graph opens, and layers found as MoE layers' halves end mid-graph: inside a forward pass a graph runs until
    the next one opens. A gap longer than the graph found before it is left (eager work between passes)."""
    marks = {10, 20, 32, 60}
    assert period._to_next_graph([(10, 20), (20, 30), (32, 40)], marks) == [(10, 20), (20, 32), (32, 40)]
    halves = [(10, 20), (20, 26), (32, 46), (60, 70)]
    assert period._to_next_graph(halves, marks) == [(10, 20), (20, 32), (32, 60), (60, 70)]
    assert period._to_next_graph([(10, 20), (20, 25), (32, 40)], marks) == [(10, 20), (20, 25), (32, 40)]


def test_graphs_that_run_up_to_a_run_of_layers_found_are_layers() -> None:
    """DeepSeek-V3 compiled per layer: the dense first layer's graph and a MoE layer's graph longer than the unit
    (more experts hit) run before the first layer the unit found; both are layers, each no longer than two."""
    marks = np.array([30, 51, 107, 159])
    assert period._graph_before(marks, 107, 0, 54) == [30, 51]
    assert period._graph_before(marks, 107, 40, 54) == [51]
    assert period._graph_before(np.array([10, 107]), 107, 0, 40) == []


def test_compiled_layers_of_many_lengths_are_their_graphs() -> None:
    """No period need fit MoE layers compiled one by one whose expert loops run a GEMM per expert hit, each GEMM's
    tile variant picked by the tokens its expert got (a dense first layer, then MoE layers of six lengths): each
    compiled graph is a layer, the last ending as the others close; graphs that share no kernels are no layers."""
    attention = ["t_norm_0", "gemm", *[f"attention_{i}" for i in range(12)], "gemm"]
    layers = [[*attention, "t_mlp_2", "gemm", "t_add_3"]]
    for experts in (2, 4, 3, 5, 1, 6, 2, 4):
        layers.append([*attention, "t_route_2", *[f"gemm_{experts}_{i}" for i in range(experts)], "t_out_3"])
    names = ["embed", *[k for layer in layers for k in layer], "final_norm", "gemm"]
    codes = codes_of(names)
    families = codes_of([re.sub(r"_\d+_\d+$", "", name) for name in names])  # a GEMM's tile variants: one family
    starts = np.cumsum([1, *[len(layer) for layer in layers]]).tolist()
    opens = np.zeros(len(codes), dtype=bool)
    opens[starts[:-1]] = True
    for fit in (
        period.find_layers(codes, families=families, opens=opens, whole_pass=True),
        period._graphs_alone(codes, opens, families, 8),
    ):
        assert fit is not None and fit.graphs
        assert [(s.start, s.end) for s in fit.layers] == list(itertools.pairwise(starts))
    unlike = codes_of(["embed", *[f"k{i}" for i in range(len(codes) - 3)], "final_norm", "gemm"])
    assert period._graphs_alone(unlike, opens, unlike, 8) is None


def test_a_compiled_graph_ends_after_its_last_numbered_kernel() -> None:
    """Graphs of layers compiled one by one end where Inductor's numbered kernels end, when most graphs end with one
    right before the next opens. DeepSeek-V2 with three dense layers: in one step the layers found (out of phase)
    ended mid-graph, 23 kernels into MoE graphs of 49, and each graph was left that short; it runs on to its last
    numbered kernel. A pass's last graph followed by eager glue ends before the glue; a graph whose own extern GEMM
    follows its last numbered kernel (a down projection that adds the residual) keeps it."""
    graphs = ["ttttttttg", "tttttttt", "tttttttt", "ttttggtttt", "tttttttt", "ttttttttt", "tttttttt", "ttttttt"]
    graphs += ["tttttttt" + "eeeeee", "tttt"]
    kinds = "".join(graphs)  # t: a kernel Inductor numbers; g: an extern GEMM; e: eager glue after the pass
    numbered = np.array([kind == "t" for kind in kinds])
    marks = np.cumsum([0, *[len(g) for g in graphs[:-1]]])
    whole = [(int(a), int(b)) for a, b in itertools.pairwise([*marks, len(kinds)])]
    found = [*whole[:4], (whole[4][0], whole[4][0] + 3), *whole[5:]]  # the fifth found short
    ended = period._ended_at_numbered(found, numbered, marks)
    assert ended == [*whole[:8], (whole[8][0], whole[8][1] - 6), whole[9]]
    assert period._ended_at_numbered(found, None, marks) == found
    assert period._ended_at_numbered(found, np.zeros(len(kinds), dtype=bool), marks) == found


def test_forward_passes_found_as_the_unit_of_compiled_layers_are_their_graphs() -> None:
    """AX-K1 compiled per layer at batch 1, no step annotation: MoE layers of many lengths repeat no unit, but whole
    forward passes nearly do, so the unit found over the trace was a pass (four "layers" of eight graphs each, one
    step). A unit that holds more graphs than a unit of layers of a few kinds is a pass: each graph is a layer,
    ended after its last kernel Inductor numbers, and the eager glue between passes (final norm, LM head, sampling,
    the next embedding) parts the passes."""
    attention = ["t_norm_0", "gemm", *[f"t_attention_{i}" for i in range(1, 6)], "gemm"]
    dense = [*attention, "t_mlp_6", "gemm", "t_add_7"]
    glue = ["norm_mean", "norm_rsqrt", "head_gemm", "argmax", "cat", "embed"]
    names, starts = ["embed"], []
    for experts in ((2, 4, 3, 5, 1, 6, 2), (3, 1, 4, 2, 5, 2, 3), (4, 2, 2, 6, 1, 3, 5), (1, 5, 3, 2, 4, 4, 2)):
        for layer in [dense, *[[*attention, "t_route_6", *["expert_gemm"] * n, "t_out_7"] for n in experts]]:
            starts.append((len(names), len(names) + len(layer)))
            names += layer
        names += glue
    codes = codes_of([name.rsplit("_", 1)[0] if name.startswith("t_") else name for name in names])
    numbered = np.array([name.startswith("t_") for name in names])
    opens = np.zeros(len(codes), dtype=bool)
    opens[[a for a, _ in starts]] = True
    assert period._passes_of_graphs([(1, 9 * 8), (9 * 8, 18 * 8)], np.flatnonzero(opens))
    assert not period._passes_of_graphs(starts, np.flatnonzero(opens))
    fit = period.find_layers(codes, opens=opens, numbered=numbered)
    assert fit is not None and fit.graphs and [(s.start, s.end) for s in fit.layers] == starts
    assert len(period.runs_of_spans(starts)) == 4


def test_layers_compiled_one_by_one_are_their_graphs() -> None:
    """DeepSeek-V3 compiled per layer: a dense layer, two MoE layers of one compiled variant (Inductor runs a kernel
    before their norm), five of another. The fit's cuts in the first variant are 4 kernels late; each layer is one
    compiled graph, which opens with the kernel Inductor numbers 0, so the layers are the graphs."""
    dense = [f"d{i}" for i in range(21)]
    variant = ["hoisted", "cat", "cast", "norm", "qkv", "qkv", *[f"a{i}" for i in range(38)]]
    common = ["norm", "qkv", *[f"b{i}" for i in range(42)]]
    layers = [dense, variant, variant, *[common] * 5]
    codes = codes_of(["embed", *[k for layer in layers for k in layer], "final_norm", "lm_head"])
    starts = np.cumsum([1, *[len(layer) for layer in layers]]).tolist()
    opens = np.zeros(len(codes), dtype=bool)
    opens[starts[:-1]] = True
    late = [starts[0], starts[1] + 4, starts[2] + 4, *starts[3:]]
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in itertools.pairwise(late)), 44, 0.9, 1.0)
    assert [(s.start, s.end) for s in period.by_graphs(codes, fit, opens).layers] == list(itertools.pairwise(starts))


def test_graphs_that_start_inside_the_layers_are_not_layers() -> None:
    """A model compiled whole and cut at its attention (vLLM's piecewise graphs): each graph starts after a layer's
    attention, so the layers found at their norms are kept."""
    layer = ["norm", "qkv", "rope", "attention", "o", "add", "norm2", "up", "act", "down", "add2"]
    names = ["embed", *layer * 6, "final_norm"]
    codes = codes_of(names)
    opens = np.array([name == "o" for name in names])
    spans = [(1 + i * len(layer), 1 + (i + 1) * len(layer)) for i in range(6)]
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in spans), len(layer), 0.9, 1.0)
    assert period.by_graphs(codes, fit, opens) is fit


@pytest.mark.parametrize("pieces", [5, 3])
def test_graphs_that_open_in_more_ways_than_a_unit_has_kinds_are_pieces_of_layers(pieces: int) -> None:
    """Aria compiled per layer: its MoE layer breaks the graph five times (routing, the experts' loop, the shared
    expert, the last add), so every layer is five graphs, each opening with its own kernel. Layers of a unit of
    several kinds open in at most MAX_GRAPH_KINDS ways: five ways are a layer's pieces, and the layers found in
    phase are kept. Three pieces could be three layers of kinds (a dense and two MoE kinds): taken as graphs."""
    graphs = [[f"open{g}", *[f"k{g}_{i}" for i in range(6)]] for g in range(pieces)]
    layer = [kernel for graph in graphs for kernel in graph]
    names = ["embed", *layer * 8, "final_norm", "lm_head"]
    codes = codes_of(names)
    opens = np.array([name.startswith("open") for name in names])
    spans = [(1 + i * len(layer), 1 + (i + 1) * len(layer)) for i in range(8)]
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in spans), len(layer), 0.9, 1.0)
    found = period.by_graphs(codes, fit, opens)
    assert (found is fit) == (pieces > period.MAX_GRAPH_KINDS)
    assert len(found.layers) == 8 if pieces > period.MAX_GRAPH_KINDS else 8 * pieces


@pytest.mark.parametrize("pairs", [1, 3])
def test_units_of_a_dense_and_a_moe_graph_found_out_of_phase_are_their_graphs(pairs: int) -> None:
    """GLM-4.5 with MoE every other layer compiled per layer: a unit of a dense and a MoE layer, found starting at
    the MoE layer's router, holds two graph openings: the graphs are the layers, whatever the phase, the first dense
    layer's and first MoE layer's graphs before the first unit found too. A unit of more graphs than MAX_NORMS
    (three such pairs: a whole forward pass, found over many) is not taken for layers."""
    dense = ["norm", "qkv", *[f"d{i}" for i in range(10)]]
    moe = ["norm", "qkv", *[f"a{i}" for i in range(6)], "router", *[f"e{i}" for i in range(12)]]
    layers = [dense, moe] * 12
    codes = codes_of(["embed", *[k for layer in layers for k in layer], "final_norm", "lm_head"])
    starts = np.cumsum([1, *[len(layer) for layer in layers]]).tolist()
    opens = np.zeros(len(codes), dtype=bool)
    opens[starts[:-1]] = True
    router = [a + len(dense) + 8 for a in starts[0 : -1 : 2 * pairs]]  # each unit from a MoE layer's router on
    unit = pairs * (len(dense) + len(moe))
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in itertools.pairwise(router)), unit, 0.9, 1.0)
    found = period.by_graphs(codes, fit, opens)
    assert (found.graphs, found.layers[0].start) == ((True, starts[0]) if pairs == 1 else (False, router[0]))


@pytest.mark.parametrize("compiled", [True, False])
def test_a_graph_that_ends_where_the_graph_layers_begin_is_a_layer(compiled: bool) -> None:
    """AFMoE with one dense layer, compiled layer by layer: the unit is the MoE layer, so the dense layer's graph
    is left before the first layer found. A compiled graph that ends where the run of graph layers begins is a
    layer of another kind; an eager prologue (no graph opening in it) stays out."""
    dense = ["norm", "qkv", *[f"d{i}" for i in range(8)]]
    moe = ["norm", "qkv", *[f"m{i}" for i in range(14)]]
    layers = [dense, *[moe] * 5]
    codes = codes_of(["embed", "rope", *[k for layer in layers for k in layer], "final_norm", "lm_head"])
    starts = np.cumsum([2, *[len(layer) for layer in layers]]).tolist()
    opens = np.zeros(len(codes), dtype=bool)
    opens[starts[int(not compiled) : -1]] = True  # eager: the dense layer is not a graph
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in itertools.pairwise(starts[1:])), 16, 0.9, 1.0)
    found = [(s.start, s.end) for s in period.by_graphs(codes, fit, opens).layers]
    assert found == list(itertools.pairwise(starts if compiled else starts[1:]))


def test_graphs_after_a_run_that_reach_into_the_next_run_are_taken_once() -> None:
    """Recurrent Gemma compiled per layer: two recurrent layers and an attention layer, the runs found holding the
    recurrent ones. The graphs taken after one run (copies of earlier graphs) reach into the next run, whose
    graphs are not taken again."""
    recurrent, attention = ["norm", *[f"r{i}" for i in range(9)]], ["norm", *[f"a{i}" for i in range(7)]]
    layers = [recurrent, recurrent, attention] * 3
    codes = codes_of(["embed", *[k for layer in layers for k in layer], "final_norm", "lm_head"])
    starts = np.cumsum([1, *[len(layer) for layer in layers]]).tolist()
    opens = np.zeros(len(codes), dtype=bool)
    opens[starts[:-1]] = True
    runs = [(starts[i], starts[i + 1]) for i in (0, 1, 3, 4, 6, 7)]  # the recurrent layers only
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in runs), 10, 0.9, 1.0)
    found = [(s.start, s.end) for s in period.by_graphs(codes, fit, opens).layers]
    assert found == list(itertools.pairwise(starts))


@pytest.mark.parametrize("glue", [True, False])
def test_a_graph_that_runs_on_into_the_glue_between_passes_ends_as_its_kind(glue: bool) -> None:
    """Granite hybrid compiled per layer, found over two passes: the last layer's graph runs on to the next
    pass's first graph, through the epilogue and the next prologue (eager kernels). A graph that is the only one
    of its kernels and opens as a kind other graphs are, kernel for kernel, ends where that kind ends; one that
    repeats another kind whole (no glue after it) is kept as it is."""
    mamba, attention = ["norm", *[f"m{i}" for i in range(9)]], ["norm", *[f"a{i}" for i in range(5)]]
    between = ["final_norm", "lm_head", "argmax", "embed", "rope"] if glue else []
    one_pass = [k for layer in [mamba, attention, mamba, attention] for k in layer]
    names = ["embed", "rope", *one_pass, *between, *one_pass]
    first = [2, 12, 18, 28]
    second = [len(one_pass) + len(between) + a for a in first]
    opens = np.zeros(len(names), dtype=bool)
    opens[[*first, *second]] = True
    graphs = list(itertools.pairwise([*first, *second, len(names)]))
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in graphs), 10, 0.9, 1.0)
    found = [(s.start, s.end) for s in period.by_graphs(codes_of(names), fit, opens).layers]
    assert found[3] == (28, 34)
    assert len(found) == 8


def test_a_graph_opens_where_inductor_numbers_restart() -> None:
    """Inductor numbers the kernels of each compiled graph from 0 and names a kernel whose code it already made
    (a second identical norm) like the first: that one is followed by later numbers, not by 1."""
    numbers = np.array([-1, 0, -1, 1, 2, 0, -1, 3, 0, 1, -1, 0])
    assert np.flatnonzero(period.graph_openings(numbers)).tolist() == [1, 8]


def test_a_graph_opens_at_the_extern_kernels_before_its_kernel_0() -> None:
    """Exaone 4 compiled layer by layer: a post-norm layer opens with its query projection, a cuBLAS kernel that
    Inductor does not number, run before the graph's kernel 0. Where graphs follow graphs with such a kernel
    between the last numbered kernel of one and kernel 0 of the next, every graph opens that many kernels early -
    the first after the eager prologue too."""
    graph = [-1, 0, 1, -1, 2]
    numbers = np.array([-1, -1, -1, *graph * 3, -1, -1])
    assert np.flatnonzero(period.graph_openings(numbers)).tolist() == [3, 8, 13]
    numbers = np.array([-1, -1, -1, *[0, 1, -1, 2] * 3, -1, -1])  # a graph that opens with kernel 0
    assert np.flatnonzero(period.graph_openings(numbers)).tolist() == [3, 7, 11]


def test_compiled_layers_at_the_end_of_a_run_are_copies_of_earlier_ones() -> None:
    """The run's end is found for its common unit: a last layer of a shorter kind (Cohere 2's full attention after
    sliding ones) ends where an earlier layer of its kind does, and a layer the run left out after it (Exaone-MoE's
    last, dense layer) is taken when it repeats an earlier graph exactly."""
    sliding = ["norm", *[f"s{i}" for i in range(16)]]
    full = ["norm", *[f"f{i}" for i in range(15)]]
    layers = [sliding, sliding, sliding, full] * 2 + [sliding]
    names = ["embed", *[k for layer in layers for k in layer], "final_norm", "lm_head"]
    starts = np.cumsum([1, *[len(layer) for layer in layers]]).tolist()
    opens = np.zeros(len(names), dtype=bool)
    opens[starts[:-1]] = True
    found = [*starts[:8], starts[8] + 1]  # the last full layer one kernel long, the last sliding one left out
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in itertools.pairwise(found)), 17, 0.9, 1.0)
    graphs = period.by_graphs(codes_of(names), fit, opens)
    assert [(s.start, s.end) for s in graphs.layers] == list(itertools.pairwise(starts))


def _pre_norm_step(layers: int, post_norm: bool = False) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """A step whose prologue ends with the embedding's position add, the same kernel as a layer's residual add
    (GPT-2, OPT): codes, norm flags, true layer spans. Pre-norm: norm, attention, add, norm, MLP, add; then the final
    norm. Post-norm: attention, add, norm, MLP, add, norm; no final norm."""
    norm, add, head = 1, 2, 9
    layer = [3, 4, 5, add, norm, 6, 7, add, norm] if post_norm else [norm, 3, 4, 5, add, norm, 6, 7, add]
    prologue, epilogue = [10, 11, add], ([head] if post_norm else [norm, head])
    codes = np.array(prologue + layer * layers + epilogue, dtype=np.int64)
    spans = [(len(prologue) + i * len(layer), len(prologue) + (i + 1) * len(layer)) for i in range(layers)]
    return codes, codes == norm, spans


def test_layers_open_at_their_norm_when_the_prologue_ends_like_a_layer() -> None:
    codes, norms, truth = _pre_norm_step(8)
    off_by_one = period.PeriodFit(tuple(period.LayerSpan(a - 1, b - 1, 1.0) for a, b in truth), 9, 0.9, 1.0)
    fit = period.at_norms(codes, off_by_one, norms)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_a_first_layer_found_late_opens_at_its_own_norm() -> None:
    codes, norms, truth = _pre_norm_step(8)
    late = [(truth[0][0] + 5, truth[0][1]), *truth[1:]]  # found from the norm of its channel mixer
    fit = period.at_norms(
        codes, period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in late), 9, 0.9, 1.0), norms
    )
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_a_first_layer_found_from_the_steps_first_kernel_opens_at_its_norm() -> None:
    """AX-K1 decode at batch 2: each step's layers were found two kernels late (at the eps add inside the input
    RMSNorm), and the first one from the step's first kernel, the embedding taken in. The later layers move to their
    norms, and the first opens at its own: what runs before it is the prologue."""
    norm, add = 1, 2
    plain, shared = [norm, 3, 4, 5, add, norm, 6, 7, add], [norm, 3, 4, 5, add, norm, 6, 8, add, norm, 7, add]
    layers = [plain, shared, plain, shared, plain, plain, shared, plain]  # a shared expert's add, then a norm
    codes = np.array([10, 11, 12, *[k for layer in layers for k in layer], norm, 9], dtype=np.int64)
    norms = codes == norm
    bounds = list(itertools.accumulate([3, *map(len, layers)]))
    truth = list(itertools.pairwise(bounds))
    late = [(0, truth[1][0] + 2), *[(a + 2, b + 2) for a, b in truth[1:]]]
    fit = period.at_norms(
        codes, period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in late), 9, 0.9, 1.0), norms
    )
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_post_norm_layers_that_end_with_their_norm_stay_as_found() -> None:
    codes, norms, truth = _pre_norm_step(8, post_norm=True)
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in truth), 9, 0.9, 1.0)
    assert period.at_norms(codes, found, norms) is found


def test_a_norm_opens_at_the_cast_that_mostly_comes_before_it() -> None:
    """A norm that computes in float32 casts its input first (OLMo's LayerNorm): where that norm's kernel mostly
    follows a cast, the cast opens the norm; a cast only before the first norm (the rotary embedding's, at the end
    of the prologue) does not."""
    cast, norm, other_norm, add, rope_cast = 1, 2, 3, 4, 1
    codes = np.array([9, rope_cast, cast, norm, 5, add, cast, norm, 6, add, rope_cast, other_norm, 7, add, other_norm])
    norms = np.isin(codes, [norm, other_norm])
    opens = period.norm_openings(codes, norms, codes == cast)
    assert np.flatnonzero(opens).tolist() == [2, 6, 11, 14]


def test_a_norm_after_a_cast_only_once_opens_at_itself() -> None:
    codes, norms, _ = _pre_norm_step(4)
    codes[2] = 12  # the prologue ends with a cast (of the rotary embedding's cos and sin), no residual-like add
    casts = codes == 12
    assert np.flatnonzero(period.norm_openings(codes, norms, casts)).tolist() == np.flatnonzero(norms).tolist()


@pytest.mark.parametrize("graphs", [False, True])
def test_a_layer_at_the_edge_that_repeats_a_found_one_is_a_layer(graphs: bool) -> None:
    """Three sliding-attention layers to one full (OLMo 3): the pass ends with a full layer, left out when the unit's
    phase puts it after the last whole unit; a layer right before the first or after the last that repeats a found
    layer kernel for kernel is a layer. The prologue and the epilogue, which repeat none, stay outside."""
    sliding, full = [1, 2, 3, 4, 5], [1, 2, 6, 7]
    layers = [sliding, sliding, sliding, full] * 3
    codes = np.array([10, 11, *[k for layer in layers for k in layer], 12, 13], dtype=np.int64)
    starts = np.cumsum([2, *[len(layer) for layer in layers]]).tolist()
    truth = list(itertools.pairwise(starts))
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in truth[1:-1]), 5, 0.9, 1.0, graphs=graphs)
    fit = period.with_edge_copies(codes, found)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth
    assert fit.graphs == graphs  # layers compiled one by one (Qwen2-MoE's first call: its first dense layer's graph)


def test_a_dense_layer_before_the_first_found_is_a_layer() -> None:
    """A dense first layer before MoE ones (DeepSeek-V3's and Kimi K2's shape, MiMo-V2-Flash) left in the prologue
    by the repeating unit: the stretch before the first layer that opens with a norm and holds as many norms as a
    layer does (the token mixer's and the channel mixer's) is a layer; the prologue keeps the embedding."""
    norm, add = 1, 2
    dense = [norm, 3, 4, add, norm, 5, 6, add]
    moe = [norm, 3, 4, add, norm, 7, 8, 9, 10, add]
    layers = [dense, *[moe] * 4]
    codes = np.array([20, 21, *[k for layer in layers for k in layer], norm, 22], dtype=np.int64)
    starts = np.cumsum([2, *[len(layer) for layer in layers]]).tolist()
    truth = list(itertools.pairwise(starts))
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in truth[1:]), 10, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_an_eager_rms_norm_opens_where_a_residual_add_comes_before_it() -> None:
    """An eager RMSNorm (cast to float32, x.pow(2), mean, ...) is a norm where a residual add comes just before it, or
    where it is the step's first (after the embedding); a QK norm right after a projection is none."""
    names = {
        1: "direct_copy_kernel_cuda",
        2: "pow_tensor_scalar_kernel",
        3: "ReduceOp<float, MeanOps<float>>",
        4: "CUDAFunctor_add<c10::BFloat16>",
        5: "nvjet_gemm",
        6: "embedding_gather",
    }
    norm = [1, 2, 3]
    codes = np.array([6, *norm, 5, *norm, 5, 4, *norm, 5, 4, *norm], dtype=np.int64)
    opens = pipeline.NormKernels.of(names).openings(codes)
    assert np.flatnonzero(opens).tolist() == [1, 10, 15]


def test_an_inductor_reduction_that_fuses_an_rms_norm_is_a_norm() -> None:
    """torch.compile fuses an RMSNorm (pow, mean, rsqrt, mul) into one reduction kernel named for its operations, the
    residual add too where it comes before; Inductor's pointwise kernels and its other reductions are no norms."""
    names = {
        1: "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt",
        2: "triton_red_fused__to_copy_mean_mul_pow_rsqrt",
        3: "triton_poi_fused__to_copy_add_mean",
        4: "triton_per_fused__softmax_exp_sum",
        5: "triton_poi_fused_mul_rsqrt_silu",
        6: "nvjet_gemm",
    }
    codes = np.array([2, 6, 5, 6, 1, 6, 4, 6, 3, 1], dtype=np.int64)
    opens = pipeline.NormKernels.of(names).openings(codes)
    assert np.flatnonzero(opens).tolist() == [0, 4, 9]


def test_layers_of_one_norm_each_are_the_stretches_between_norms() -> None:
    """Parallel blocks (Falcon, GPT-J: attention and MLP behind one norm): found out of phase by more than half a
    layer, with a stray "layer" holding the final norm, the layers are the stretches between consecutive norms up to
    the final norm."""
    norm, add = 1, 2
    layer = [norm, 3, 4, 5, 6, 7, 8, add]
    codes = np.array([10, 11, 12, *layer * 6, norm, 13], dtype=np.int64)
    truth = [(3 + 8 * i, 11 + 8 * i) for i in range(6)]
    off = [(a - 5, b - 5) for a, b in truth] + [(truth[-1][1] - 5, len(codes))]
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in off), 8, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_pre_norm_layers_found_half_a_layer_late_are_between_every_second_norm() -> None:
    """Gemma 2's prefill: pre-norm layers (two norms each) found about half a layer late, the last one reaching the
    step's end; moving them to their nearest norm (their channel mixer's) would not end before the final norm: the
    layers are the stretches between every second norm, counted back from the final norm."""
    norm, add = 1, 2
    layer = [norm, 3, 4, 5, 6, 7, 8, add, norm, 9, 10, 11, 12, 13, add]
    codes = np.array([20, 21, 22, *layer * 5, norm, 23], dtype=np.int64)
    truth = [(3 + 15 * i, 18 + 15 * i) for i in range(5)]
    late = [(a + 5, min(b + 5, len(codes))) for a, b in truth]
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in late), 15, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_post_norm_layers_found_out_of_phase_are_not_moved_to_every_second_norm() -> None:
    """OpenAI GPT: post-norm layers (attention, add, norm, MLP, add, norm) have no final norm, so the norms are two a
    layer and no more: the stretches between every second norm would open each layer with the last one's closing
    norm; the layers stay as found."""
    norm, add = 1, 2
    layer = [3, 4, 5, 6, 7, add, norm, 8, 9, 10, 11, 12, add, norm]
    codes = np.array([20, 21, 22, *layer * 5, 23], dtype=np.int64)
    truth = [(3 + 14 * i, 17 + 14 * i) for i in range(5)]
    late = [(a + 9, min(b + 9, len(codes))) for a, b in truth]
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in late), 14, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is found


def test_an_eager_rms_norm_after_the_residual_add_and_two_casts_opens_at_the_first_cast() -> None:
    """A Mamba block casts its input to the norm's dtype, then the RMSNorm casts it to float32: the residual add
    comes before two casts, and the layer opens with the first. A gated norm inside the mixer (after a
    multiplication, not an add) is no layer's input norm; the first block's input has one cast only (the
    embedding's output is in the norm's dtype)."""
    names = {
        1: "bfloat16_copy_kernel_cuda",
        2: "direct_copy_kernel_cuda",
        3: "pow_tensor_scalar_kernel",
        4: "ReduceOp<float, MeanOps<float>>",
        5: "CUDAFunctor_add<float>",
        6: "nvjet_gemm",
        7: "embedding_gather",
        8: "BinaryFunctor<MulFunctor<float>>",
    }
    block = [1, 2, 3, 4, 6, 8, 3, 4, 6, 5]  # cast, cast, norm, in_proj, gate, gated norm, out_proj, residual add
    codes = np.array([7, *block[1:], *block, *block, 3, 4, 6], dtype=np.int64)
    opens = pipeline.NormKernels.of(names).openings(codes)
    assert np.flatnonzero(opens).tolist() == [1, 10, 20, 30]


def test_a_loop_inside_every_layer_found_as_layers_gives_way_to_the_stretches_between_norms() -> None:
    """A prefill of Mamba's slow path: each layer runs its per-token scan (a few kernels per token) many times, and
    the period found is the scan's step, which holds no norm. The norms say where layers are: one a layer (the
    stretch after each norm runs the same kernels as the next one's) and the final norm."""
    norm, add, scan = 1, 2, [3, 4, 5]
    layer = [norm, 6, 7, *scan * 20, 8, add]
    codes = np.array([10, *layer * 4, norm, 11], dtype=np.int64)
    truth = [(1 + len(layer) * i, 1 + len(layer) * (i + 1)) for i in range(4)]
    scans = [(a + 3 + 3 * j, a + 6 + 3 * j) for a, _ in truth for j in range(20)]
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in scans), 3, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_layers_of_two_norms_each_are_found_from_the_norms_alone() -> None:
    """The same with two norms a layer (a token mixer's and a channel mixer's), and a norm of the embedding before
    the first layer's: the layers are between every second norm counted back from the final norm."""
    norm, add, scan = 1, 2, [3, 4]
    layer = [norm, 6, *scan * 10, add, norm, 7, 8, add]
    codes = np.array([10, norm, *layer * 3, norm, 11], dtype=np.int64)
    truth = [(2 + len(layer) * i, 2 + len(layer) * (i + 1)) for i in range(3)]
    scans = [(a + 2 + 2 * j, a + 4 + 2 * j) for a, _ in truth for j in range(10)]
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in scans), 2, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_the_anchor_of_a_passes_first_layer_after_the_glue_is_kept() -> None:
    """GPT-J decode: the anchor (the input norm) also runs as the final norm, fewer kernels than a layer before
    the next pass's first layer. Both sit among other kernels than the unit's, but the unit runs from the
    second: it is a layer's, the final norm a stray. An anchor that occurs twice in every layer keeps one
    occurrence a layer: the one among the unit's neighbours."""
    layer = [1, *range(10, 18)]
    glue = [1, 90, 91, 92]  # final norm, LM head, sampling, embedding
    codes = np.array([*layer * 3, *glue, *layer * 3, *glue], dtype=np.int64)
    marks = np.flatnonzero(codes == 1)
    kept = period._without_strays(codes, marks, np.array(layer))
    assert kept.tolist() == [0, 9, 18, 31, 40, 49, 58]  # the last final norm: no anchor near it
    twice = [1, 20, 21, 1, 22, 23, 24]  # the unit found between its two occurrences: 1, 20, 21
    codes = np.array([99, *twice * 4, 98], dtype=np.int64)
    marks = np.flatnonzero(codes == 1)
    assert period._without_strays(codes, marks, np.array([1, 22, 23, 24, 1, 20, 21])).tolist() == [4, 11, 18, 25]


@pytest.mark.parametrize("last", [9, 8])
def test_a_layer_of_another_matmul_variant_before_the_glue_ends_one_unit_on(last: int) -> None:
    """BioGPT decode: one step ran another cuBLAS kernel for every projection, so its last layer holds none of the
    unit's closing kernels and its segment runs on over the glue to the next pass's first layer. A segment over
    twice the unit with no closing of the unit's ends one unit on when the kernel there is the unit's last (the
    residual add); else (a sub-unit of a layer, whose next kernel is another) it stays for acceptance to judge."""
    unit = np.array([1, 10, 11, 12, 13, 9])
    variant = [1, 10, 11, 12, 14, last]  # the matmul right before the add is another kernel
    codes = np.array([*variant, 90, 91, 92, 93, 94, 95, 96, 1], dtype=np.int64)
    trimmed = period._trim(codes, np.array([[0, 14]]), unit)
    assert trimmed.tolist() == ([[0, 6]] if last == 9 else [[0, 14]])


@pytest.mark.parametrize("opens_like_a_layer", [True, False])
def test_a_block_found_after_a_whole_layer_that_opens_as_layers_do_opens_the_next(opens_like_a_layer: bool) -> None:
    """Zamba: every sixth Mamba layer runs the shared attention block first (a concatenation with the embedding,
    then its norm). The unit's phase put the block at the end of the layer before, which is then a Mamba layer
    whole plus the block: the block opens as layers open (their first kernel one kernel in) and goes to the next
    layer. A block that does not open so (a layer's own tail) stays."""
    mamba = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    block = [50, 1, 51, 52, 53, 54] if opens_like_a_layer else [50, 55, 51, 52, 53, 54]
    layers = [mamba, mamba, [*mamba, *block], mamba, mamba, [*mamba, *block], mamba, mamba]
    codes = np.array([90, *itertools.chain.from_iterable(layers), 91], dtype=np.int64)
    bounds = list(itertools.pairwise(itertools.accumulate([1, *map(len, layers)])))
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in bounds), 9, 0.9, 1.0)
    found = [(s.start, s.end) for s in period.with_blocks_before_their_layers(codes, fit).layers]
    moved = [(1, 10), (10, 19), (19, 28), (28, 43), (43, 52), (52, 61), (61, 76), (76, 85)]
    assert found == (moved if opens_like_a_layer else bounds)


@pytest.mark.parametrize("doubled", [True, False])
def test_a_norm_right_before_the_first_layers_norm_is_the_first_layers(doubled: bool) -> None:
    """RWKV: block 0 normalises the embedding (`ln0`) right before its input norm, which every block opens with.
    The first layer takes it: two norms back to back. Another kernel before the first layer stays before it."""
    layer = [1, 10, 11, 12, 13]
    codes = np.array([90, 1 if doubled else 91, *layer * 4, 92], dtype=np.int64)
    fit = period.PeriodFit(tuple(period.LayerSpan(2 + 5 * i, 7 + 5 * i, 1.0) for i in range(4)), 5, 0.9, 1.0)
    found = [(s.start, s.end) for s in period.with_doubled_opening(codes, fit).layers]
    assert found[0] == ((1, 7) if doubled else (2, 7))
    assert found[1:] == [(7, 12), (12, 17), (17, 22)]


def test_a_few_kernels_after_a_whole_layer_inside_the_pass_are_in_no_layer() -> None:
    """RWKV halves its hidden state after every sixth block, between two layer calls: the layer before is a whole
    layer plus that kernel, which is left out. A first layer's extra kernels (its own, as a first layer's cast)
    stay; so does a layer that is no other whole plus a few kernels."""
    layer = [1, 10, 11, 12, 13]
    layers = [[*layer, 5], layer, [*layer, 50], layer, layer]
    codes = np.array([90, *itertools.chain.from_iterable(layers), 92], dtype=np.int64)
    bounds = list(itertools.pairwise(itertools.accumulate([1, *map(len, layers)])))
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in bounds), 5, 0.9, 1.0)
    found = [(s.start, s.end) for s in period.without_kernels_between(codes, fit).layers]
    assert found == [(1, 7), (7, 12), (12, 17), (18, 23), (23, 28)]
    windows = [(s.start, end) for s, end in pipeline._windows(period.without_kernels_between(codes, fit).layers)]
    assert windows == [(1, 7), (7, 12), (12, 17), (18, 23), (23, 28)]  # the halving stays in no layer
    wide = (period.LayerSpan(0, 5, 1.0), period.LayerSpan(9, 14, 1.0))
    assert [(s.start, end) for s, end in pipeline._windows(wide)] == [(0, 9), (9, 14)]  # a part its unit left out


def test_a_last_layer_that_is_part_of_one_running_into_the_epilogue_is_out_of_phase() -> None:
    """ZAYA prefill: both halves of a layer open with the same norm, and the first layer lacks the router's add the
    others run, so the repetition's leftmost extension starts the layers at the second half's norm. That phase
    makes one layer more - a first half-layer and a last one that runs on through the final norm and LM head - than
    the phase of whole layers, and in a whole pass that last part does not count (the trace itself is in
    test_zoo). A whole unit that reaches the end still counts (RWKV's layers moved by a kernel between them)."""
    unit = 28
    whole = [period.LayerSpan(4 + unit * i, 4 + unit * (i + 1), 1.0) for i in range(8)]
    shifted = [period.LayerSpan(4, 16, 1.0), *(period.LayerSpan(16 + unit * i, 44 + unit * i, 1.0) for i in range(8))]
    codes = np.zeros(whole[-1].end + 10, dtype=np.int64)
    shifted[-1] = period.LayerSpan(shifted[-1].start, len(codes), 1.0)
    assert not period._ends_in_part(codes, whole, unit)
    assert period._ends_in_part(codes, shifted, unit)
    assert not period._ends_in_part(codes, [*shifted[:-1], period.LayerSpan(len(codes) - unit, len(codes), 1.0)], unit)


def test_a_layer_of_two_layers_of_another_kind_is_cut_where_they_meet() -> None:
    """DeepSeek-V4 prefill: three layers of one kind, then a unit of two layers of two other kinds. The first two
    layers, found as one, are cut where layers meet in them (the unit's boundary context: residual add, then the
    input norm), not at the unit's cut scaled to their length."""
    norm, add = [1, 2], [9]
    a = [*norm, 10, 11, 12, *add, *norm, 20, 21, *add]
    b = [*norm, 13, 14, 15, 16, *add, *norm, 22, 23, 24, *add]
    c = [*norm, 17, 18, *add, *norm, 20, 21, *add]
    codes = np.array([90, *a, *a, *(b + c) * 4, 91], dtype=np.int64)
    unit = len(b + c)
    spans = [period.LayerSpan(1, 1 + 2 * len(a), 1.0)]
    spans += [period.LayerSpan(1 + 2 * len(a) + unit * i, 1 + 2 * len(a) + unit * (i + 1), 1.0) for i in range(4)]
    fit = period.PeriodFit(tuple(spans), unit, 0.9, 1.0)
    found = [s.end - s.start for s in period.split_alternating(codes, fit).layers]
    assert found == [len(a), len(a), *[len(b), len(c)] * 4]


def test_a_unit_opening_inside_a_loop_of_two_kernels_opens_no_layer() -> None:
    """Qwen2-MoE decode at batch 2 in float32: each expert runs a split-K GEMM and its reduction, so the expert loop
    is a run of one pair of kernels. A unit found in a phase that starts inside that run had the boundary context
    (GEMM, reduction, GEMM), which marked every pair a layer (463 layers in one step); a context whose first kernel
    comes back as its third is a loop's, and no layer opens there (mixers.in_loop)."""
    norm = ["pow", "mean", "add_eps", "rsqrt", "mul", "mul_w"]
    layer = [*norm, "qkv", "attention", "o_proj", "add", *norm, "router", "topk", *["gemm", "reduce"] * 4, "add"]
    unit = codes_of([*layer[-5:], *layer[:-5]])  # a phase that opens two pairs before the loop's end
    assert period.mixers.in_loop(period._unit_context(unit))
    assert period.boundary_cuts(unit) is None
    whole = codes_of(layer)
    assert not period.mixers.in_loop(period._unit_context(whole))


def test_a_first_layer_found_short_by_the_block_every_later_layer_opens_with_is_in_phase() -> None:
    """Persimmon decode in float32: each layer runs LayerNorms at its input, on q and k, and before its MLP, so the
    post-attention norm's block opened every found layer as well as the input norm does; the first layer, which
    opens where the prologue ends, came out the MLP block short, and the last one's MLP block was left to the
    epilogue. Every boundary after the first layer's start moves on by that block. A first layer of another kind,
    shorter because it is dense, opens with the later ones' opening block and stays; so do layers in phase."""
    attention = ["ln", "qkv", "split", "ln", "view", "ln", "rope", "attention", "dense", "add"]
    mlp = ["ln", "fc1", "reduce", "relu", "pow", "fc2", "reduce", "add"]
    layer = [*attention, *mlp]
    names = ["embed", "arange", *layer * 6, "ln", "lm_head"]
    codes = codes_of(names)
    true = [(2 + 18 * i, 20 + 18 * i) for i in range(6)]
    late = [(2, 12), *[(12 + 18 * i, 30 + 18 * i) for i in range(5)]]  # each found layer opens with the MLP block
    moved = period.with_first_layer_whole(codes, period._fit_of(period.dense(codes), late))
    assert moved is not None and [(s.start, s.end) for s in moved.layers] == true
    in_phase = period._fit_of(period.dense(codes), true)
    assert period.with_first_layer_whole(codes, in_phase) is in_phase
    dense = ["ln", "qkv", "attention", "o_proj", "add", "ln", "up", "down", "add"]
    moe = [*dense[:5], "ln", "router", "topk", "expert", "expert", "combine", "add"]
    stack = codes_of(["embed", *dense, *moe * 5, "ln", "qkv", "lm_head"])
    spans = [(1, 10), *[(10 + 12 * i, 22 + 12 * i) for i in range(5)]]
    fit = period._fit_of(period.dense(stack), spans)
    assert period.with_first_layer_whole(stack, fit) is fit


def test_a_layer_that_is_two_known_kinds_back_to_back_is_two_layers() -> None:
    """AFMoE with three dense layers, decode: the first decode step runs a variant of the attention, and the last
    dense layer and the sliding-attention layer after it were found as one stretch (76 + 110 kernels); a later stage
    then took the dense layer out of it and gave the rest to the next MoE layer (228 kernels). A layer of a kind no
    other layer is that is, kernel for kernel, two layers of kinds other layers are, is those two layers."""
    dense = ["norm", "qkv", "attention", "o_proj", "add", "norm", "up", "down", "add"]
    sliding = ["norm", "qkv", "window", "o_proj", "add", "norm", "router", "expert", "combine", "add"]
    full = ["norm", "qkv", "attention", "o_proj", "add", "norm", "router", "expert", "expert", "combine", "add"]
    order = [dense, dense, dense, *[sliding, full, full] * 3]
    names = ["embed", *[k for layer in order for k in layer], "norm", "lm_head"]
    codes = codes_of(names)
    bounds = np.cumsum([1, *[len(layer) for layer in order]]).tolist()
    true = list(itertools.pairwise(bounds))
    merged = [*true[:2], (true[2][0], true[3][1]), *true[4:]]
    found = period._known_halves(codes, period._fit_of(period.dense(codes), merged))
    assert [(s.start, s.end) for s in found.layers] == true
    kept = period._fit_of(period.dense(codes), true)
    assert period._known_halves(codes, kept) is kept


def test_two_layers_cut_at_a_norm_inside_the_second_become_two_of_a_kind_a_third_is() -> None:
    """AX-K1 with three dense layers, decode at batch 2: the first two dense layers were found cut at the norm inside
    the second one's attention (53 and 83 kernels for 68 and 68), the third whole. The boundary between two layers
    each of a kind no other layer is moves to where both become the kind of another layer, here the third's."""
    dense = ["norm", "q_a", "q_norm", "q_b", "kv_a", "kv_norm", "attention", "o_proj", "add", "norm", "mlp", "add"]
    moe = [*dense[:9], "norm", "router", "expert", "combine", "add"]
    order = [dense] * 3 + [moe] * 4
    codes = codes_of(["embed", *[k for layer in order for k in layer], "norm", "lm_head"])
    bounds = np.cumsum([1, *[len(layer) for layer in order]]).tolist()
    true = list(itertools.pairwise(bounds))
    cut_at_norm = [(true[0][0], true[0][0] + 5), (true[0][0] + 5, true[1][1]), *true[2:]]
    found = period.with_known_cuts(codes, period._fit_of(period.dense(codes), cut_at_norm))
    assert found is not None and [(s.start, s.end) for s in found.layers] == true


def test_layers_found_opening_with_the_residual_add_of_the_layer_before_close_with_it() -> None:
    """HY-V4 decode (hyper-connections, a dense first layer, then MoE layers): a layer weighs its output and adds
    the residual streams (mul, add), then the next opens with a projection GEMM before its norm. The dense layer
    ends that way too, so the repeating unit extended two kernels back and every found layer opened with the layer
    before's (mul, add); the dense layer was left in the prologue. The block closes the layer before, and the
    dense layer is then found before the first (with_edge_layers), where the start of the later layers' opening
    block runs (every projection is the same GEMM and split-K reduction, so the layers' first two kernels run
    inside it too; its attention runs its own indexer). Layers in phase stay."""
    gemm = ["gemm", "split_k"]
    hc = [*gemm, "pow", "mean", "eps", "rsqrt", "mul", "sigmoid", "pow", "mean", "eps", "rsqrt"]
    attention = [*hc, *gemm, "attention", *gemm, "mul", "add"]
    own_indexer = [*attention[:14], "indexer", *attention[14:]]  # the first layer selects its own top-k tokens
    dense = [*own_indexer, *hc, *gemm, "silu", *gemm, "mul", "add"]
    moe = [*attention, *hc, "router", "topk", *gemm, "silu", *gemm, *gemm, "add", "mul", "add"]
    names = ["embed", "expand", *dense, *moe * 5, *gemm, "pow", "norm", "lm_head"]
    codes = codes_of(names)
    adds = np.array([name == "add" for name in names])
    bounds = np.cumsum([2, len(dense), *[len(moe)] * 5]).tolist()
    true = list(itertools.pairwise(bounds))
    early = [(a - 2, b - 2) for a, b in true[1:]]
    no_casts = np.zeros(len(names), dtype=bool)
    moved = period.with_residual_adds_closing(codes, period._fit_of(period.dense(codes), early), adds, no_casts)
    assert moved is not None and [(s.start, s.end) for s in moved.layers] == true
    in_phase = period._fit_of(period.dense(codes), true[1:])
    assert period.with_residual_adds_closing(codes, in_phase, adds, no_casts) is in_phase


def test_a_closing_block_in_float32_closes_the_layer_before_with_its_cast_back() -> None:
    """HY-V4 decode in float16 at batch 1: the hyper-connections weigh the layer's output and add the residual
    streams in float32 (cast, mul, cast, add), then cast the sum back to half precision, and the next layer opens
    with casts to float32 before its projection. Every found layer opened with the layer before's five closing
    kernels: the block, up to its add and the one cast right after it, closes the layer before; the next layer's own
    casts stay its own."""
    gemm = ["copy", "copy", "gemm", "split_k"]
    close = ["copy", "mul", "copy", "add", "to_half"]
    layer = [*gemm, "pow", "mean", "rsqrt", "mul", "attention", *gemm, *close]
    names = ["embed", "expand", *layer * 6, "pow", "norm", "lm_head"]
    codes = codes_of(names)
    adds = np.array([name == "add" for name in names])
    casts = np.array([name in ("copy", "to_half") for name in names])
    bounds = np.cumsum([2, *[len(layer)] * 6]).tolist()
    true = list(itertools.pairwise(bounds))
    early = [(a - len(close), b - len(close)) for a, b in true[1:]]
    moved = period.with_residual_adds_closing(codes, period._fit_of(period.dense(codes), early), adds, casts)
    assert moved is not None and [(s.start, s.end) for s in moved.layers[1:]] == true[1:]


@pytest.mark.parametrize("from_step_start", [False, True])
def test_moe_layers_found_late_by_two_offsets_open_at_their_norms_with_the_dense_layer_before(
    from_step_start: bool,
) -> None:
    """AX-K1 decode at batch 2: its MoE layers close with a norm and a residual add after their experts (three
    norms a layer), its dense first layer does not (two). In two steps the found layers opened inside the norm,
    the first MoE layer one kernel nearer it than the others, and the last one ran into the final norm; in one the
    dense layer was left in the prologue, in the other the first found layer ran from the step's first kernel.
    Each moves to its norm (the nearer one too), the last ends at the final norm, and the stretch before the first
    that holds a token mixer's and a channel mixer's norm is the dense layer."""
    norm, add = 1, 2
    dense = [norm, 3, 4, 5, add, norm, 6, 7, add]
    moe = [norm, 3, 4, 5, add, norm, 8, 9, 10, 9, 10, 11, norm, 12, add]
    layers = [dense, *[moe] * 7]
    codes = np.array([20, 21, 22, *[k for layer in layers for k in layer], norm, 23, 24], dtype=np.int64)
    starts = np.cumsum([3, *[len(layer) for layer in layers]]).tolist()
    truth = list(itertools.pairwise(starts))
    late = [0] * from_step_start + [starts[1] + 1, *(a + 2 for a in starts[2:-1]), starts[-1] + 1]
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in itertools.pairwise(late)), 15, 0.9, 1.0)
    fit = period.at_norms(codes, found, codes == norm)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth


def test_sandwich_norm_layers_found_a_half_out_of_phase_open_as_the_first_layer_does() -> None:
    """AFMoE prefill: a norm before and after each mixer (sandwich norms), so a phase that opens each layer at its
    channel mixer's norm also opens with a norm and closes with a residual add; the first (dense) layer's attention
    half was left before the first found layer, which ran kernels layers run. The layers open where the block the
    step's first norm opens with runs: longer than the norm itself, which opens both mixers. In phase: kept."""
    norm, add = [10, 11, 12, 13], 2
    projections = [3, 4, 5, 3, 4]  # each mixer opens with the same GEMMs (and split-K reductions)
    attention = [*norm, *projections, 15, 16, 17, 18, 19, 20, *norm, add]
    dense = [*attention, *norm, *projections, 6, 7, *norm, add]
    moe = [*attention, *norm, *projections, 8, 9, 8, 9, *norm, add]
    layers = [dense, *[moe] * 5]
    codes = np.array([20, 21, *[k for layer in layers for k in layer], *norm, 22], dtype=np.int64)
    opens = np.zeros(len(codes), dtype=bool)
    for at in np.flatnonzero(codes == norm[0]):
        opens[at] = at == 2 or codes[at - 1] == add  # an eager RMSNorm after the residual add (or the embedding)
    starts = np.cumsum([2, *[len(layer) for layer in layers]]).tolist()
    truth = list(itertools.pairwise(starts))
    half = [a + len(attention) for a in starts[:-1]]  # each opens at the channel mixer's norm; the last half is left
    found = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in itertools.pairwise(half)), 25, 0.9, 1.0)
    fit = period.at_norms(codes, found, opens)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == truth
    in_phase = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in truth), 25, 0.9, 1.0)
    assert period.at_norms(codes, in_phase, opens) is in_phase


def test_single_mixer_blocks_that_cannot_pair_into_layers_are_layers() -> None:
    """Nemotron 3's order of single-mixer blocks (Mamba, MoE, Mamba, MoE, Mamba, attention, MoE): each block is a
    norm after the residual add, one mixer and its add. The repeating unit paired the blocks and left the attention
    blocks out between its layers; no two classes of block kinds alternate (Mamba follows MoE and attention, which
    follows Mamba and precedes MoE), so each block is a layer. Jamba's layers (a Mamba or attention block, then an
    MLP or MoE block) do alternate two classes, and stay as found; so do layers alike that meet, three "blocks" each
    (a QK norm after the rotary embedding's add opens one), after dense layers of two (AX-K1's MoE layers close with
    a norm and a residual add after their experts)."""
    norm, add = 1, 2
    mamba, moe, attention, mlp = [norm, 3, 4, add], [norm, 5, 6, 5, add], [norm, 7, add], [norm, 8, 9, add]

    def stack(blocks: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int]]]:
        codes = np.array([20, 21, *[k for block in blocks for k in block], norm, 22], dtype=np.int64)
        opens = (codes == norm) & np.isin(np.roll(codes, 1), [add, 21])
        starts = np.cumsum([2, *[len(block) for block in blocks]]).tolist()
        return codes, opens, codes == add, list(itertools.pairwise(starts))

    codes, opens, adds, blocks = stack([mamba, moe, mamba, moe, mamba, attention, moe] * 4)
    paired = [(blocks[i][0], blocks[i + 1][1]) for i in range(0, len(blocks) - 1, 2) if i % 7 != 4]
    found = period._fit_of(period.dense(codes), paired)
    fit = period.as_single_mixer_blocks(codes, found, opens, adds)
    assert fit is not None and [(s.start, s.end) for s in fit.layers] == blocks
    codes, opens, adds, blocks = stack([mamba, mlp, mamba, moe, attention, mlp, mamba, moe] * 3)
    pairs = [(a, d) for (a, _), (_, d) in zip(blocks[::2], blocks[1::2], strict=True)]
    layers = period._fit_of(period.dense(codes), pairs)
    assert period.as_single_mixer_blocks(codes, layers, opens, adds) is layers
    qk_norm = [norm, 10, 11, add]  # a norm on q and k after the rotary embedding's add: a "block" of three a layer
    codes, opens, adds, blocks = stack([attention, qk_norm, mlp] * 4)
    triples = period._fit_of(period.dense(codes), [(blocks[i][0], blocks[i + 2][1]) for i in range(0, 12, 3)])
    assert period.as_single_mixer_blocks(codes, triples, opens, adds) is triples
    closing = [norm, 12, add]  # a MoE layer's norm and residual add after its experts: three "blocks" a MoE layer
    codes, opens, adds, blocks = stack([attention, mlp, attention, mlp, *[attention, moe, closing] * 4])
    starts = [blocks[i][0] for i in (0, 2, 4, 7, 10, 13)]
    dense_first = period._fit_of(period.dense(codes), list(itertools.pairwise([*starts, blocks[-1][1]])))
    assert period.as_single_mixer_blocks(codes, dense_first, opens, adds) is dense_first


def test_compiled_layers_found_adrift_of_their_graphs_are_the_graphs() -> None:
    """DeepSeek-V3 with a dense first layer compiled one layer at a time, at batch 1: each MoE layer runs a GEMM per
    expert its token hit, so the layers are of many lengths, and a unit found for them opens at offsets from the
    graph before that drift (16, 33, 49 kernels: the unit opened mid-layer). Layers found adrift of the graphs are the
    graphs; layers in phase with them, and graphs that cut each layer at one place (vLLM's, at the attention), are
    not adrift."""
    marks = np.array([30, 51, 103, 159, 213, 267, 321, 377])
    adrift = [(46, 84), (84, 136), (136, 208), (208, 262), (262, 316), (316, 372), (372, 422)]
    assert period._adrift_of_graphs(adrift, marks)
    in_phase = [(a + 1, b + 1) for a, b in itertools.pairwise([*marks.tolist(), 430])]
    assert not period._adrift_of_graphs(in_phase, marks)
    at_the_attention = [(a - 12, b - 12) for a, b in in_phase[1:]]
    assert not period._adrift_of_graphs(at_the_attention, marks)


def test_a_graph_after_a_run_that_runs_most_of_an_earlier_graphs_kernels_is_a_layer() -> None:
    """Nemotron-H compiled one layer at a time: the run of graphs found ended before a pass's last MoE layer, whose
    expert loop ran one GEMM fewer than any earlier layer's, so it repeats none exactly and was left out. A graph
    that opens where the run ends and shares most of its kernels with an earlier graph is a layer, ended after its
    last kernel Inductor numbers; eager glue after the run is not."""

    def graph(experts: int) -> list[str]:
        return ["t_norm_0", "gemm", "t_route_1", *["expert_gemm"] * experts, "t_out_2"]

    graphs = [graph(n) for n in (4, 4, 5, 4, 3)]
    glue = ["copy", "pow", "mean", "rsqrt", "mul", "head_gemm"]
    names = ["embed", *[k for g in graphs for k in g], *glue]
    codes = codes_of([name.rsplit("_", 1)[0] if name.startswith("t_") else name for name in names])
    numbered = np.array([name.startswith("t_") for name in names])
    starts = np.cumsum([1, *[len(g) for g in graphs]]).tolist()
    run = list(itertools.pairwise(starts[:-1]))  # the last graph left out
    assert period._ends_as_copies(codes, run, set(starts[:-1]), numbered) == list(itertools.pairwise(starts))
    unlike = codes_of([*names[: starts[-2]], *[f"glue_{i}" for i in range(len(names) - starts[-2])]])
    assert period._graph_like_earlier(unlike, run, {*starts[:-1]}, None) == 0


def test_a_fit_whose_layers_join_its_units_copies_counts_their_length() -> None:
    """GPT-BigCode prefill at batch 1: a layer of 11 kernels (LayerNorm, attention, add, LayerNorm, MLP, add) holds
    two halves alike at their ends, so a 6-kernel period fits too; its copies joined, its layers were the 11-kernel
    ones with a half layer first, and it won as the shorter period. A fit is ranked by its layers' length: the
    layers are the 11-kernel ones from the first norm."""
    layer = ["ln", "qkv_gemm", "sdpa", "out_gemm", "add", "ln", "fc_gemm", "gelu", "proj_gemm", "reduce", "add"]
    names = ["gather", "arange", "cat", "pos_gather", "add", *layer * 8, "ln", "head_gemm"]
    fit = period.find_layers(codes_of(names), whole_pass=True)
    assert fit is not None and {s.end - s.start for s in fit.layers} == {11}


def test_a_layer_cut_short_by_an_anchor_in_a_layer_of_another_kind_is_made_whole() -> None:
    """Granite-MoE-Hybrid prefill (three Mamba layers to one attention layer): the anchor kernel, in the MLP block
    both kinds run, also starts a "layer" inside the attention layer, which cut the Mamba layer before it in half
    (half a Mamba layer, then its other half with the attention layer, matching the unit at 0.58). A layer shorter
    than the unit, followed by one that matches it poorly, is one unit long where that stretch matches the unit
    nearly whole; the layer after keeps the rest. Two layers alike stay."""
    mamba = [*range(10, 40), *range(50, 60)]  # its mixer, then the MLP block
    attention = [*range(70, 80), *range(50, 60)]  # another mixer, the same MLP block
    codes = np.array([0, *mamba * 3, *attention, *mamba * 3, 1], dtype=np.int64)
    unit = np.array(mamba, dtype=np.int64)
    cut = 121 + 10 - 30  # the attention layer's MLP block (10 kernels in) read as a Mamba layer's (30 kernels in)
    bounds = [(1, 41), (41, 81), (81, cut), (cut, 141), (141, 181)]
    spans = [period.LayerSpan(a, b, 0.58 if a == cut else 1.0) for a, b in bounds]
    fixed = period._unit_long_before_other(codes, spans, unit)
    assert [(s.start, s.end) for s in fixed] == [(1, 41), (41, 81), (81, 121), (121, 141), (141, 181)]
    assert period._unit_long_before_other(codes, spans[:2], unit) == spans[:2]


def test_a_stack_ending_with_its_units_first_layer_keeps_it_whole_and_in_phase() -> None:
    """Gemma 2 with an odd layer count (sliding and full attention alternating) ends with a lone sliding layer, the
    unit's first half. A span shorter than the unit that runs as its start is cut at the unit's own cuts, not at
    them scaled to its length (which cut the lone layer in two); a phase whose unit-long layers are not one sequence
    of kernels (one of them opening with prologue kernels) gives way to one whose are, before coverage."""
    unit = np.arange(10, 30, dtype=np.int64)  # two layers: 12 kernels, then 8
    codes = np.concatenate([[1, 2], unit, unit, unit[:12], [90, 91]])
    whole, lone = period.LayerSpan(2, 22, 1.0), period.LayerSpan(42, 54, 1.0)
    assert period._prefix_cuts(codes, whole, lone, [12]) == []  # the lone first layer: no cut inside it
    assert period._prefix_cuts(codes, whole, period.LayerSpan(44, 54, 1.0), [12]) is None  # not the unit's start
    assert period._copies_alike(codes, [whole, period.LayerSpan(22, 42, 1.0), lone], 20)
    assert not period._copies_alike(codes, [period.LayerSpan(0, 20, 1.0), period.LayerSpan(22, 42, 1.0)], 20)
