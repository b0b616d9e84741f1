"""Layers from where their mixers open (segment/mixers.py), on kernel sequences whose answer is known by construction.

Codes stand for kernel names. Every layer opens with its input norm N and ends with a residual add R; in a pre-norm
layer the channel mixer sits behind a norm of its own, so the boundary context (R, then N) also marks the middle of
each layer, and the final norm after the last one. Between two forward passes lies the glue: the final norm and LM
head of one, the sampling and embedding of the next.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from traceview.segment import mixers, passes, period

N, R = [1, 2, 3], [9]
ATTENTION = [*N, 10, 11, 12, 13, *R]
LINEAR = [*N, 14, 15, 16, 17, 18, *R]  # a linear-attention token mixer
MLP = [*N, 20, 21, 22, *R]
MOE = [*N, 30, 31, 32, 33, 34, 35, *R]
SHORT = [*N, 40, *R]  # a token mixer much shorter than the others (a layer of another kind a third their size)
LONG_MOE = [*N, *range(50, 80), *R]
PROLOGUE, EPILOGUE = [100, 101, 102, 103, 104], [*N, 200, 201]  # embedding; final norm, LM head, sampling

STACKS = {
    "dense first": [ATTENTION + MLP] + [ATTENTION + MOE] * 7,
    "three dense first": [ATTENTION + MLP] * 3 + [ATTENTION + MOE] * 5,
    "MoE every other layer": [ATTENTION + MLP, ATTENTION + MOE] * 4,
    "three linear to one full": ([LINEAR + MLP] * 3 + [ATTENTION + MLP]) * 3,
    "a short layer every fourth, long MoE": ([ATTENTION + LONG_MOE] * 3 + [SHORT + LONG_MOE]) * 2,
}


def trace(layers: list[list[int]], passes_: int) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """Codes of `passes_` forward passes of `layers`, and the true layers of each pass."""
    out: list[int] = []
    truth = []
    for _ in range(passes_):
        out += PROLOGUE
        bounds = list(itertools.accumulate([len(out), *map(len, layers)]))
        truth.append(list(itertools.pairwise(bounds)))
        out += [c for layer in layers for c in layer] + EPILOGUE
    return np.array(out, dtype=np.int64), truth


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("count", [1, 3])
def test_every_layer_of_every_pass_is_found_from_its_halves(stack: str, count: int) -> None:
    codes, truth = trace(STACKS[stack], count)
    found = passes._runs(codes, {})
    assert mixers.forward_passes(codes, found.spans) == truth


@pytest.mark.parametrize("stack", STACKS)
def test_the_steps_of_a_bare_trace_are_its_forward_passes(stack: str) -> None:
    codes, truth = trace(STACKS[stack], 3)
    n = len(codes)
    result = passes.find_passes(codes, np.arange(n) * 10, np.arange(n) * 10 + 5, np.full(n, -1))
    assert result.steps == 3
    for step, layers in enumerate(truth):
        assert set(result.step_of[layers[0][0] : layers[-1][1]]) == {step}


@pytest.mark.parametrize("stack", STACKS)
def test_one_forward_pass_is_cut_into_its_layers(stack: str) -> None:
    codes, truth = trace(STACKS[stack], 1)
    fit = period.find_layers(codes)
    assert fit is not None
    assert [(s.start, s.end) for s in fit.layers] == truth[0]


def test_whole_layers_back_to_back_are_each_a_layer() -> None:
    """Parallel blocks: one norm per layer, so the context marks layer starts (not the final norm: the LM head
    follows it, not the layer's first GEMM)."""
    layer = [*N, 40, 41, 42, 43, *R]
    codes, truth = trace([layer] * 6, 3)
    spans = [span for layers in truth for span in layers]
    assert mixers.forward_passes(codes, spans) == truth


def test_a_unit_of_layers_from_end_to_end_is_left_to_the_period() -> None:
    """Layers with no prologue or epilogue (one unit of a 3:1 stack): an odd number of marks, no answer."""
    unit = codes_of([LINEAR + MLP] * 3 + [ATTENTION + MLP])
    spans = [(0, len(unit))]
    assert mixers.forward_passes(np.concatenate([unit, unit]), [*spans, (len(unit), 2 * len(unit))]) is None


@pytest.mark.xfail(
    strict=True,
    reason="known limit: from a context up to 8 kernels away from the given span's start, the two channel mixers "
    "side by side read as whole layers back to back (8 half-size layers); on the zoo, requiring most neighbours "
    "alike for whole layers lost 3 exact runs for 1",
)
def test_halves_that_swap_roles_are_no_answer() -> None:
    """A piece that is a token mixer in one place and a channel mixer in another: the pairing is not a layer's."""
    codes, _ = trace([ATTENTION + MLP, MLP + ATTENTION, ATTENTION + MLP, ATTENTION + MLP], 1)
    assert mixers.forward_passes(codes, [(len(PROLOGUE), len(codes) - len(EPILOGUE))]) is None


def codes_of(layers: list[list[int]]) -> np.ndarray:
    return np.array([c for layer in layers for c in layer], dtype=np.int64)


@pytest.mark.parametrize("stack", ["dense first", "three linear to one full"])
@pytest.mark.parametrize("first_only", [[], [150, 151, 152]])
def test_steps_part_between_an_epilogue_and_the_next_prologue_when_the_gpu_never_idles_longer(
    stack: str, first_only: list[int]
) -> None:
    """A host-bound trace waits as long before every kernel, so no idle gap tells where a step ends: the glue
    between two passes is as long as the trace's own epilogue and prologue together, and is cut between them; when
    the first step also runs kernels of its own first (`first_only`: building the mask once), where the glue stops
    opening like the trace's epilogue and starts ending like its prologue."""
    codes, truth = trace(STACKS[stack], 3)
    codes = np.concatenate([np.array(first_only, dtype=np.int64), codes])
    truth = [[(a + len(first_only), b + len(first_only)) for a, b in layers] for layers in truth]
    n = len(codes)
    result = passes.find_passes(codes, np.arange(n) * 10, np.arange(n) * 10 + 5, np.full(n, -1))
    for step, layers in enumerate(truth):
        prologue = range(layers[0][0] - len(PROLOGUE), layers[0][0])
        epilogue = range(layers[-1][1], layers[-1][1] + len(EPILOGUE))
        assert {int(result.step_of[i]) for i in [*prologue, *epilogue]} == {step}


@pytest.mark.parametrize("shift", [-7, -3, 3, 7])
def test_layers_found_several_kernels_out_of_phase_are_put_back_in_phase(shift: int) -> None:
    """A repeating unit found some kernels early or late (a conv block at a layer's end taken for the next one's
    start) still tells where the layers open: the boundary context is looked for up to 8 kernels around its starts."""
    codes, truth = trace(STACKS["MoE every other layer"], 3)
    spans = [(a + shift, b + shift) for layers in truth for a, b in layers]
    assert mixers.forward_passes(codes, spans) == truth


def test_passes_of_a_drafter_and_a_target_are_told_apart_by_their_glue() -> None:
    """Speculative decoding: a 2-layer drafter's passes and a 6-layer target's, the same kernels (dense first, then
    MoE), the glue after the drafter's passes another than after the target's (the host's bookkeeping). Each pass
    opens with a token mixer that no residual add precedes: the piece before it, ending with a copy of a token
    mixer, is the glue, and every pass's layers are found, whatever their number."""
    drafter, target = [ATTENTION + MLP] * 2, [ATTENTION + MLP] + [ATTENTION + MOE] * 5
    out: list[int] = []
    truth = []
    for layers, glue in [(drafter, [300]), (drafter, [300]), (target, [301, 302]), (drafter, [300]), (target, [301])]:
        out += PROLOGUE
        bounds = list(itertools.accumulate([len(out), *map(len, layers)]))
        truth.append(list(itertools.pairwise(bounds)))
        out += [c for layer in layers for c in layer] + EPILOGUE + glue
    codes = np.array(out, dtype=np.int64)
    context = (R[-1], N[0], N[1])
    assert context in mixers.frequent_contexts(codes)
    assert mixers.passes_after_glue(codes, context) == truth
    assert mixers.passes_after_glue(codes, (N[0], N[1], N[2])) is None  # marks inside the norm: every layer opens


def test_a_prefill_whose_odd_layers_repeat_is_one_forward_pass() -> None:
    """One pass of layers of two kinds (a full-attention layer, then three sliding ones, four times): the
    stretches between the runs of sliding layers are the full-attention layers, which hold neither the trace's
    first kernel (the embedding) nor its last (the LM head), so they are no glue between passes."""
    full = [1, 2, 3, 4, 5, 6, 7, 8]
    sliding = [1, 2, 9, 4, 10, 6, 7, 8, 11, 12]
    codes = np.array([20, 21, 22] + (full + sliding * 3) * 4 + [1, 2, 23], dtype=np.int64)
    times = np.arange(len(codes), dtype=np.int64) * 1000
    found = passes.find_passes(codes, times, times + 500, np.full(len(codes), -1, dtype=np.int64))
    assert found.steps == 1


def test_runs_of_a_loop_inside_every_layer_are_not_forward_passes() -> None:
    """A prefill of Mamba's slow path: each layer's per-token scan repeats more than any layer, so its runs look
    like passes; the stretches between them are many scan steps long and hold none of them, and their last kernel
    (a copy) is also the trace's: they are the layers' own work around the loop, and the trace is one pass."""
    copy, norm, add, scan = 1, 2, 3, [4, 5, 6]
    layer = [norm, 7, 8, 9, *scan * 30, 10, copy, add]
    codes = np.array([20, *layer * 4, norm, 21, copy], dtype=np.int64)
    times = np.arange(len(codes), dtype=np.int64) * 1000
    found = passes.find_passes(codes, times, times + 500, np.full(len(codes), -1, dtype=np.int64))
    assert found.steps == 1


def test_a_stall_before_a_pass_shorter_than_the_pass_keeps_the_prologue_in_the_step() -> None:
    """A stall before the first GEMM (cuBLAS loading its kernel) leaves a long idle gap early in a prefill: what
    comes before it is the prologue, not a stray, when the gap is shorter than the pass; a gap longer than the pass
    (a kernel run long before the profiled work) still leaves what is before it out of every step."""
    layer = [1, 2, 3, 4, 5, 6, 7, 8]
    codes = np.array([20, 21, 22, 23, *layer * 8, 24, 25], dtype=np.int64)
    times = np.arange(len(codes), dtype=np.int64) * 1000
    for stall, kept in ((20_000, 4), (200_000, 2)):
        late = times + np.where(np.arange(len(codes)) >= 2, stall, 0)
        found = passes.find_passes(codes, late, late + 500, np.full(len(codes), -1, dtype=np.int64))
        assert (found.step_of == 0).sum() == len(codes) - 4 + kept


@pytest.mark.parametrize(("gap", "joined"), [([30, 31], True), ([30, 900], False)])
def test_runs_a_few_layer_kernels_apart_are_one_run(gap: list[int], joined: bool) -> None:
    """Exaone-MoE with MoE every other layer: one MoE kind runs a few kernels more than the unit the period found, so
    those kernels are left between its layers. A stretch shorter than half a layer whose kernels all run in the
    layers joins the runs around it; one holding a kernel no layer runs (the LM head between two passes) does not."""
    layer = list(range(10, 40))
    codes = np.array([*layer, *layer, *gap, *layer, *layer], dtype=np.int64)
    found = [(0, 30), (30, 60), (62, 92), (92, 122)]
    runs = passes._across_layer_gaps(codes, found, [[0, 60, 30, 2], [62, 122, 92, 2]], 30)
    assert runs == ([[0, 122, 92, 4]] if joined else [[0, 60, 30, 2], [62, 122, 92, 2]])


@pytest.mark.parametrize("second", [1, 2])
def test_runs_a_layer_of_another_kind_apart_are_one_run_unless_they_are_alike(second: int) -> None:
    """AFMoE prefill with one dense layer: the unit is a sliding-window layer, and the full-attention layer after
    every three is left between runs of one, two or three layers. A stretch that opens and closes as the layers do,
    of kernels they run, joins runs of different lengths; runs that hold as many layers may be passes, and the
    stretch their glue (a later check asks whether it holds the trace's first or last kernel)."""
    sliding, full = [1, *range(10, 27), 9], [1, *range(10, 20), 9]
    codes = np.array([*sliding * 2, *full, *sliding * second], dtype=np.int64)
    found = [(0, 19), (19, 38), *[(50 + 19 * i, 69 + 19 * i) for i in range(second)]]
    runs = [[0, 38, 19, 2], [50, 50 + 19 * second, 31 + 19 * second, second]]
    joined = passes._across_layer_gaps(codes, found, runs, 19)
    assert joined == ([[0, 69, 50, 3]] if second == 1 else runs)


def test_the_step_boundary_is_where_the_glue_runs_as_the_traces_own_epilogue_and_prologue() -> None:
    """Exaone-MoE decode: the last layer found ends before the epilogue, but a last layer cut short makes the
    boundary searched from a typical layer after its start, past the next prologue's first kernels. When the
    kernels from the last layer's end are the trace's own epilogue and prologue (as many, or running as they do),
    the boundary is between them; else it is searched from a typical layer on."""
    opening, closing = np.array([90, 91, 92, 93]), np.array([80])
    codes = np.array([*range(10, 20), 80, 90, 91, 92, 93, *range(10, 20)], dtype=np.int64)
    assert passes._boundary_range(codes, 10, 13, 15, (opening, closing)) == (11, 11)
    other = np.array([*range(10, 20), 70, 71, 72, 73, 74, 75, *range(10, 20)], dtype=np.int64)  # no such glue
    assert passes._boundary_range(other, 10, 13, 16, (opening, closing)) == (13, 16)


@pytest.mark.parametrize("glue", [False, True])
def test_runs_of_one_pass_that_a_layer_of_another_kind_parts_are_joined(glue: bool) -> None:
    """HY-V4 prefill: a block that every fourth layer runs more (a sparse-attention indexer) parts the runs of the
    unit's layers, 1, 3 and 3 of them, and the last layer found swallows the epilogue. The stretches hold neither
    the trace's first kernel nor its last (the LM head, which no whole layer runs): one pass. When they hold the
    epilogue and the next prologue, they are glue between passes and the runs stay apart."""
    layer, indexer = list(range(10, 30)), [70, 71, 72, 73, 74, 75]
    part = [98, 99, *PROLOGUE] if glue else indexer
    codes = np.array([*PROLOGUE, *layer, *part, *layer * 3, *part, *layer * 3, 98, 99], dtype=np.int64)
    starts = [5, 25 + len(part), 85 + 2 * len(part)]
    runs = [(5, 25), (starts[1], starts[1] + 60), (starts[2], len(codes))]
    found = passes._Runs(runs, [5, starts[1] + 40, starts[2] + 40], [1, 3, 3], 20, [])
    joined = passes._across_pass_insides(codes, found, np.full(len(codes), -1))
    assert joined.runs == (runs if glue else [(5, len(codes))])
    assert joined.counts == ([1, 3, 3] if glue else [7])


def test_alike_runs_parted_inside_passes_and_between_them_join_only_inside() -> None:
    """Exaone 4 compiled: three sliding-window layers to one full, each pass's runs two layers long (the unit is
    two sliding layers), parted by the other two layers inside a pass and by the glue between passes. The runs
    are alike, but only the glue holds the trace's own ends (the embedding's first kernel, the LM head): the runs
    join inside each pass, and the passes stay two."""
    pair, other, glue = list(range(10, 30)), list(range(40, 60)), [98, 99, *PROLOGUE]
    one = [*pair, *other, *pair, *other]
    codes = np.array([*PROLOGUE, *one, *glue, *one, 98, 99], dtype=np.int64)
    second = 5 + len(one) + len(glue)
    runs = [(5, 25), (45, 65), (second, second + 20), (second + 40, second + 60)]
    found = passes._Runs(runs, [a + 10 for a, _ in runs], [2, 2, 2, 2], 10, [])
    joined = passes._across_pass_insides(codes, found, np.full(len(codes), -1))
    assert joined.runs == [(5, 65), (second, second + 60)]


@pytest.mark.parametrize("glue_holds_an_end", [True, False])
def test_glue_that_a_passs_last_layer_swallowed_is_cut_out_where_it_holds_the_traces_ends(
    glue_holds_an_end: bool,
) -> None:
    """Mamba-2 decode: the epilogue and the next prologue (13 kernels against a layer's 103) sit inside each pass's
    last layer, so the layers run back to back across passes: one run. The block after a whole layer holds the
    trace's first kernel (the previous step's sampling, which no layer runs): glue, cut out of the span. A block
    holding neither end is a layer's own."""
    layer, sampling = list(range(10, 30)), 99
    glue = [1, 2, sampling, 3] if glue_holds_an_end else [1, 2, 4, 3]
    codes = np.array([sampling, 5, *layer * 2, *glue, *layer * 2, 1, 2, 6], dtype=np.int64)
    found = [(2, 22), (22, 46), (46, 66), (66, 86)]
    assert passes._ends_inside(codes, found) == ({1: (42, 46)} if glue_holds_an_end else {})


@pytest.mark.parametrize("stack", ["dense first", "three linear to one full"])
@pytest.mark.parametrize("count", [3, 6])
def test_passes_whose_attention_changes_as_the_cache_grows_are_each_a_step(stack: str, count: int) -> None:
    """A decode step's attention kernel depends on the cache's length, so from pass to pass the glue (the final norm
    and LM head, the next embedding, the next first token mixer) holds other kernels: with more than three passes its
    own kernels are run by as many contents as a layer's, yet every pass is still a step."""
    codes, truth = trace(STACKS[stack], count)
    for step, layers in enumerate(truth):  # attention's kernel 13 becomes another kernel in every pass
        lo, hi = layers[0][0], layers[-1][1]
        codes[lo:hi][codes[lo:hi] == 13] = 1000 + step
    n = len(codes)
    result = passes.find_passes(codes, np.arange(n) * 10, np.arange(n) * 10 + 5, np.full(n, -1))
    assert result.steps == count
    for step, layers in enumerate(truth):
        assert set(result.step_of[layers[0][0] : layers[-1][1]]) == {step}


def test_passes_whose_layers_grow_step_by_step_open_as_the_trace_does() -> None:
    """A recurrent layer's slow path scans a state that grows with the sequence: each pass's layers run two kernels
    more than the pass before's, so no repeating unit fits every pass and the glue between passes is a few kernels
    against a layer's dozens. Every pass opens with the trace's first kernel (the embedding), which no layer runs:
    each of those openings starts a step."""
    out: list[int] = []
    starts = []
    for step in range(6):
        layer = [*N, 10, *[60, 61] * (6 + step), 13, *R, *MLP]
        starts.append(len(out))
        out += PROLOGUE + layer * 8 + EPILOGUE
    codes = np.array(out, dtype=np.int64)
    n = len(codes)
    result = passes.find_passes(codes, np.arange(n) * 10, np.arange(n) * 10 + 5, np.full(n, -1))
    assert result.steps == 6
    assert result.step_of.tolist() == (np.searchsorted(starts, np.arange(n), side="right") - 1).tolist()


def test_a_drafters_passes_are_parted_by_the_same_glue_each_time() -> None:
    """DeepSeek-V3 with three dense layers compiled per layer, at batch 1: the unit found is the MoE layers'
    attention half, so the step's runs are the dense layers (with the first half) and then one half per MoE layer,
    parted by the rest of each MoE layer - which looked like a drafter's six one-layer passes and a verify. Between
    a drafter's passes lie its sampling and next embedding, the same kernels each time; the rest of MoE layers whose
    expert loops differ are not."""
    half, moe_rest, embedding, sampling = list(range(10, 30)), list(range(40, 52)), [40, 41], [50, 51]
    runs, codes = [(2, 82)], [*embedding, *half * 4]
    for experts in (2, 4, 3, 5):
        gap = [*moe_rest, *range(60, 60 + experts)]
        start = len(codes) + len(gap)
        codes += [*gap, *half]
        runs.append((start, start + len(half)))
    found = passes._Runs(runs, [b - 20 for _, b in runs], [4, 1, 1, 1, 1], 20, [])
    assert not passes._whole_passes(np.array([*codes, *sampling], dtype=np.int64), found)
    same = [*embedding, *half * 4]
    for _ in range(4):
        same += [*moe_rest, *half]
    starts = [82 + (len(moe_rest) + 20) * i + len(moe_rest) for i in range(4)]
    found = passes._Runs([(2, 82), *[(s, s + 20) for s in starts]], [62, *starts], [4, 1, 1, 1, 1], 20, [])
    assert passes._whole_passes(np.array([*same, *sampling], dtype=np.int64), found)


def test_a_moe_layer_between_two_runs_whose_expert_gemm_is_the_lm_heads_is_no_glue() -> None:
    """DeepSeek-V3.2 with MoE every other layer, decode at batch 1 in float16: a MoE layer of an unusual length left
    two runs of layers (4 and 8) in a step, and one of its expert GEMMs is the LM head's tile variant, a kernel of
    the step's own epilogue that no layer found runs. The step was read as a drafter's pass and a verify (13 layers
    found as 5). Glue between two passes holds at least OWN_IN_GLUE kinds of the step's own kernels (the LM head,
    sampling, the next embedding)."""
    embedding, head, sampling, layer = [1, 2], [90], [91, 92], list(range(10, 30))
    moe = [40, *layer[:6], 41, 90, 42, 43]  # an expert GEMM of the LM head's kernel
    codes = [*embedding, *layer * 4, *moe, *layer * 8, 3, *head, *sampling]
    second = 2 + 80 + len(moe)
    found = passes._Runs([(2, 82), (second, second + 160)], [62, second + 140], [4, 8], 20, [])
    assert not passes._whole_passes(np.array(codes, dtype=np.int64), found)
    glue = [3, *head, *sampling, *embedding]  # a pass's LM head and sampling, the next pass's embedding
    codes = [*embedding, *layer * 4, *glue, *layer * 8, 3, *head, *sampling]
    second = 2 + 80 + len(glue)
    found = passes._Runs([(2, 82), (second, second + 160)], [62, second + 140], [4, 8], 20, [])
    assert passes._whole_passes(np.array(codes, dtype=np.int64), found)


def test_an_instance_that_opens_with_its_embedding_is_a_forward_pass() -> None:
    """AX-K1 decode at batch 2: MoE layers of many lengths repeat no unit, whole passes nearly do, and the layers
    found inside one pass filled it, its embedding in the dense first layer and its LM head in the last: read as a
    unit of eight layers of several kinds, the four steps were one step of eight half-pass "layers". An instance
    that opens with a kernel none of its later layers opens with is a forward pass; a unit of layers opens with a
    layer's norm, as its other layers do."""
    pass_ = np.array(PROLOGUE + ATTENTION + MLP + (ATTENTION + MOE) * 7 + EPILOGUE, dtype=np.int64)
    starts = [0, len(PROLOGUE + ATTENTION + MLP)]
    starts += [starts[-1] + len(ATTENTION + MOE) * i for i in range(1, 8)]
    filled = period._fit_of(pass_, list(itertools.pairwise([*starts, len(pass_)])))
    assert passes._opens_otherwise(pass_, filled)
    unit = codes_of([LINEAR + MLP] * 3 + [ATTENTION + MLP])
    bounds = list(itertools.accumulate([0, *[len(LINEAR + MLP)] * 3, len(ATTENTION + MLP)]))
    assert not passes._opens_otherwise(unit, period._fit_of(unit, list(itertools.pairwise(bounds))))


def test_a_verify_whose_run_goes_on_past_it_is_part_of_a_pass() -> None:
    """AFMoE with three dense layers, decode at batch 2: the routing between MoE layers' expert loops, which holds
    kernels of the step's own prologue (gathers, index arithmetic), parted a "verify" of four layers from nineteen
    one-layer "passes" after it, while the repeating unit found all twenty layers in one run. A run of more layers than
    the verify that goes on past it by a layer is one forward pass; a drafter's one-layer passes that join the
    verify's run before it end where the verify does."""
    verify = [(60 + 73 * i, 133 + 73 * i) for i in range(4)]
    after = [[(367 + 118 * i, 470 + 118 * i)] for i in range(19)]
    found = passes._Runs([(288, 2638)], [2530], [20], 117, [])
    assert passes._run_past([verify, *after], [4, *[1] * 19], found)
    drafts = [[(3 + 29 * i, 20 + 29 * i)] for i in range(4)]
    target = [(119 + 17 * i, 136 + 17 * i) for i in range(6)]
    joined = passes._Runs([(0, 230)], [204], [10], 17, [])
    assert not passes._run_past([*drafts, target], [1, 1, 1, 1, 6], joined)


def test_a_layer_of_another_kind_that_shares_the_prologues_rotary_kernel_is_no_glue() -> None:
    """Qwen3-Next prefill (three linear-attention layers to one full one, float32, batch 2) with 19 layers, its last
    unit incomplete: a run of kernels inside each full-attention layer, among them the rotary kernel the prologue
    also runs and no linear-attention layer does, parted the one forward pass into "passes" of 4 and 5 layers, read
    as a drafter's and verifies (3 steps and 625 kernels outside every step for one pass). Glue between two passes
    holds a kernel of the step's own prologue and one of its epilogue (the LM head or sampling, and the next
    embedding)."""
    embedding, rotary, head = [100, 101], [105], [3, 200, 201]  # final norm, LM head, sampling
    layer, core = list(range(10, 30)), [*rotary, 40, 41, 42]  # a linear-attention layer; full attention's core

    def spans(first: int, count: int) -> list[tuple[int, int]]:
        return [(first + 20 * i, first + 20 * (i + 1)) for i in range(count)]

    for glue, glued in ((core, False), ([*head, *embedding], True)):
        codes = np.array([*embedding, *rotary, *layer * 4, *glue, *layer * 5, *glue, *layer * 4, *head], dtype=np.int64)
        second = 3 + 80 + len(glue)
        third = second + 100 + len(glue)
        assert passes._glued(codes, [spans(3, 4), spans(second, 5), spans(third, 4)]) is glued
