"""Layers of different kinds in one stack, on kernel sequences whose answer is known by construction.

Codes stand for kernel names. Every layer opens with its input norm N and ends with a residual add R; in a pre-norm
layer the channel mixer sits behind a norm of its own, so the boundary context (R, then N) also marks the middle
of each layer: the pieces between marks are halves.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from traceview.errors import UsageError
from traceview.segment import period, pipeline
from traceview.segment.hint import layers_from_config

N, R = [1, 2, 3], [9]
ATTENTION = [*N, 10, 11, 12, 13, *R]  # a token-mixing half
LINEAR = [*N, 14, 15, 16, 17, 18, *R]  # a linear-attention token mixer
MLP = [*N, 20, 21, 22, *R]  # a dense channel-mixing half
MOE = [*N, 30, 31, 32, 33, 34, 35, *R]  # a MoE channel-mixing half
DENSE_LAYER, MOE_LAYER = ATTENTION + MLP, ATTENTION + MOE
PROLOGUE, EPILOGUE = list(range(100, 112)), [*N, 200, 201]  # embedding and rotary; final norm, LM head


def codes(*parts: list[int]) -> np.ndarray:
    return np.array([c for part in parts for c in part], dtype=np.int64)


def lengths(fit: period.PeriodFit | None) -> list[int]:
    assert fit is not None
    return [s.end - s.start for s in sorted(fit.layers, key=lambda s: s.start)]


def test_a_unit_of_a_dense_and_a_moe_layer_is_cut_between_them() -> None:
    assert period.boundary_cuts(codes(DENSE_LAYER, MOE_LAYER)) == [len(DENSE_LAYER)]


def test_one_pre_norm_layer_is_not_cut_at_its_middle_norm() -> None:
    assert period.boundary_cuts(codes(DENSE_LAYER)) is None


def test_three_linear_layers_and_a_full_one_are_four_layers() -> None:
    linear = LINEAR + MLP
    assert period.boundary_cuts(codes(linear, linear, linear, DENSE_LAYER)) == [len(linear) * k for k in (1, 2, 3)]


def test_identical_neighbours_without_a_middle_norm_are_each_a_layer() -> None:
    """Post-norm or parallel layers: the context marks only layer starts; two identical pieces in a row are layers."""
    layer = [*N, 40, 41, 42, *R]
    other = [*N, 43, 44, *R]
    assert period.boundary_cuts(codes(layer, layer, layer, other)) == [7, 14, 21]


@pytest.mark.parametrize("dense", [1, 3])
def test_dense_layers_before_moe_layers_are_layers(dense: int) -> None:
    """DeepSeek-V3 / Kimi K2's shape: the lone dense first layer is a layer, not part of the prologue."""
    sequence = codes(PROLOGUE, *[DENSE_LAYER] * dense, *[MOE_LAYER] * 7, EPILOGUE)
    assert lengths(period.find_layers(sequence)) == [len(DENSE_LAYER)] * dense + [len(MOE_LAYER)] * 7


def test_a_dense_first_layer_whose_kernels_the_moe_layers_run_is_not_a_poor_match() -> None:
    """MiMo-V2-Flash's shape: the dense first layer runs, several times over, a GEMM that each MoE layer runs once
    beside its many expert kernels. Against the MoE unit its kernels match as a multiset at 13 of 17 (0.76, under
    the poor-match line), though every one of them is a kernel the found layers run: a layer of another kind is as
    sure as that share, as an edge layer is, so correct dense-first runs raise no poor-match warning."""
    moe_half = [*N, 20, *range(30, 44), *R]
    dense_half = [*N, 20, 20, 20, 20, 20, *R]
    sequence = codes(PROLOGUE, ATTENTION, dense_half, *[ATTENTION + moe_half] * 7, EPILOGUE)
    fit = period.find_layers(sequence)
    assert lengths(fit) == [len(ATTENTION + dense_half)] + [len(ATTENTION + moe_half)] * 7
    assert fit is not None and min(s.confidence for s in fit.layers) >= pipeline.LOW_CONFIDENCE


def test_a_layer_count_splits_units_left_whole() -> None:
    unit = DENSE_LAYER + MOE_LAYER
    sequence = codes(PROLOGUE, *[unit] * 4, EPILOGUE)
    start = len(PROLOGUE)
    fit = period.PeriodFit(
        tuple(period.LayerSpan(start + i * len(unit), start + (i + 1) * len(unit), 1.0) for i in range(4)),
        len(unit),
        0.9,
        1.0,
    )
    assert lengths(period.toward_count(sequence, fit, 8)) == [len(DENSE_LAYER), len(MOE_LAYER)] * 4
    assert period.toward_count(sequence, fit, 4) is fit


def test_a_layer_holding_two_layers_is_doubted_and_one_layer_is_not() -> None:
    assert period.holds_repeat(codes(DENSE_LAYER, MOE_LAYER))
    assert not period.holds_repeat(codes(DENSE_LAYER))


def test_a_short_layer_whose_second_norm_repeats_its_opening_is_not_doubted() -> None:
    """Llama prefill at batch 1 in float16: an eager RMSNorm is 8 kernels, and the channel mixer's norm and the GEMM
    after it (alike at small sizes) repeat the layer's opening for 9 kernels, a quarter of its 38: one layer, whose
    own norms repeat (NORM_REPEAT). Two such layers left as one repeat far more."""
    norm = [100, 101, 102, 103, 104, 105, 106, 107]
    attention = [*norm, 110, 110, 110, *range(111, 122), 126, 127]
    layer = [*attention, *norm, 110, 130, 131, 132, 133, 127]
    assert len(layer) == 38 and not period.holds_repeat(np.array(layer))
    assert period.holds_repeat(np.array([*layer, *attention, *norm, 140, 141, 142, 127]))


def test_a_layer_that_is_another_and_a_block_beside_it_is_doubted() -> None:
    """Zamba's shared attention block before some Mamba layers: one kind of found layer is another kind whole plus
    a block; a dense and a MoE layer share their attention half only, and are not doubted."""
    shared = [*N, 50, 51, 52, 53, *R]
    assert period.extends_another([codes(DENSE_LAYER), codes(shared, DENSE_LAYER)])
    assert period.extends_another([codes(DENSE_LAYER, shared), codes(DENSE_LAYER)])
    assert not period.extends_another([codes(DENSE_LAYER), codes(MOE_LAYER)])
    assert not period.extends_another([codes(DENSE_LAYER), codes(DENSE_LAYER, [60, 61])])  # a few kernels more


@pytest.mark.parametrize(("block", "is_layer"), [(LINEAR + MLP, True), ([*N, 50, 51, 52, 53, 54, 55, 70], False)])
def test_a_layer_like_stretch_between_found_layers_is_a_layer(block: list[int], is_layer: bool) -> None:
    """AFMoE's prefill: three sliding-window layers, then a full-attention one the unit's period steps over. A
    stretch that opens and closes like the layers (norm, residual add) is a layer; one that closes otherwise (a
    shared block whose output feeds the next layer's input) is not."""
    sequence = codes(PROLOGUE, *([DENSE_LAYER] * 3 + [block]) * 3, EPILOGUE)
    starts = [len(PROLOGUE) + unit * (3 * len(DENSE_LAYER) + len(block)) + i * len(DENSE_LAYER)
              for unit in range(3) for i in range(3)]  # fmt: skip
    spans = [(a, a + len(DENSE_LAYER)) for a in starts]
    fit = period.PeriodFit(tuple(period.LayerSpan(a, b, 1.0) for a, b in spans), len(DENSE_LAYER), 0.8, 1.0)
    found = lengths(period.with_gaps_as_layers(sequence, fit))
    layers_between = [len(block)] if is_layer else []
    assert found == ([len(DENSE_LAYER)] * 3 + layers_between) * 2 + [len(DENSE_LAYER)] * 3


def spans_of(lengths_: list[int], start: int = 0) -> period.PeriodFit:
    bounds = np.cumsum([start, *lengths_])
    layers = tuple(period.LayerSpan(int(a), int(b), 1.0) for a, b in itertools.pairwise(bounds))
    return period.PeriodFit(layers, int(np.median(lengths_)), 0.9, 1.0)


@pytest.mark.parametrize("known", [True, False])
def test_a_boundary_between_two_odd_layers_moves_to_where_both_are_known_kinds(known: bool) -> None:
    """AFMoE with three dense layers: the boundary after the last dense layer was placed inside the first MoE
    layer (a dense layer with the MoE layer's attention half, then its MoE half alone). Moved where both are kinds
    other layers are kernel for kernel; left where the pieces are kinds no other layer is."""
    other = DENSE_LAYER if known else [*N, 40, 41, *R]  # the layers before: dense ones, or another kind
    sequence = codes(PROLOGUE, other, other, DENSE_LAYER, MOE_LAYER, MOE_LAYER, MOE_LAYER, EPILOGUE)
    cut = len(DENSE_LAYER) + len(ATTENTION)  # inside the first MoE layer, after its attention half
    found = [len(other), len(other), cut, len(MOE_LAYER) - len(ATTENTION), len(MOE_LAYER), len(MOE_LAYER)]
    fixed = [len(other), len(other), len(DENSE_LAYER), len(MOE_LAYER), len(MOE_LAYER), len(MOE_LAYER)]
    assert lengths(period.with_known_cuts(sequence, spans_of(found, len(PROLOGUE)))) == (fixed if known else found)


def test_the_layer_count_comes_from_a_model_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 61}}))
    assert layers_from_config(tmp_path / "config.json") == 61
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 7168}))
    with pytest.raises(UsageError, match="no layer count"):
        layers_from_config(tmp_path / "bad.json")


def test_a_config_that_disagrees_with_layers_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 8}))
    done = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "segment", str(tmp_path / "none.db"), "--layers", "7",
         "--model-config", str(tmp_path / "config.json")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "num_hidden_layers is 8, --layers says 7" in done.stderr
