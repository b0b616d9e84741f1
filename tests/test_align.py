"""traceview.align: each status on a constructed pair of kernel sequences whose answer is known."""

from __future__ import annotations

from traceview.align import Status, align, fused_operations, identity, words

GEMM = "nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN"
NORM = "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0"
MUL = "elementwise_kernel<128, 4, gpu_kernel_impl_nocast<BinaryFunctor<BFloat16, BFloat16, MulFunctor<float>>>>"
ADD = "vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>, array<char*, 2ul>>"
RSQRT = "vectorized_elementwise_kernel<4, rsqrt_kernel_cuda::{lambda(float)#1}, array<char*, 2ul>>"
POW = "vectorized_elementwise_kernel<4, pow_tensor_scalar_kernel_impl<float, float>, array<char*, 2ul>>"
MEAN = "reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float, float, float>, unsigned int, float, 4, 4>>"
ROPE = "triton_poi_fused_add_cat_index_select_mul_neg_1"
SDPA = "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0"


def statuses(a: list[str], b: list[str]) -> list[tuple[str, str | None, str | None]]:
    """(status, A kernel, B kernel) in the alignment's order."""
    return [
        (r.status.value, a[r.a] if r.a is not None else None, b[r.b] if r.b is not None else None)
        for r in align([identity(n) for n in a], [identity(n) for n in b])
    ]


def test_identical_sequences_are_all_kept() -> None:
    layer = [NORM, GEMM, GEMM, ROPE, SDPA, GEMM]
    assert statuses(layer, layer) == [("kept", n, n) for n in layer]


def test_triton_kernel_numbers_do_not_matter() -> None:
    assert statuses([GEMM, "triton_poi_fused_mul_silu_9"], [GEMM, "triton_poi_fused_mul_silu_3"])[1][0] == "kept"


def test_a_gemm_that_changes_place_is_moved_not_fused_away() -> None:
    """The README's case: the q/k/v GEMM runs in both, five times a layer; in B the rope kernel runs before the third.
    Nothing is fused, removed or added: one kernel of each identity changed place."""
    a = [NORM, GEMM, GEMM, GEMM, ROPE, SDPA, GEMM, NORM, GEMM]
    b = [NORM, GEMM, GEMM, ROPE, GEMM, SDPA, GEMM, NORM, GEMM]
    result = statuses(a, b)
    assert status_counts(result) == {"kept": 8, "moved": 1}
    assert sum(1 for s, ka, kb in result if ka == GEMM and kb == GEMM) == 5


def status_counts(rows: list[tuple[str, str | None, str | None]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status, _, _ in rows:
        counts[status] = counts.get(status, 0) + 1
    return counts


def test_eager_kernels_are_fused_into_the_triton_kernel_named_after_them() -> None:
    a = [GEMM, POW, MEAN, ADD, RSQRT, MUL, GEMM]
    b = [GEMM, NORM, GEMM]
    result = statuses(a, b)
    assert result[0] == ("kept", GEMM, GEMM) and result[-1] == ("kept", GEMM, GEMM)
    assert result[1:-1] == [("fused", n, NORM) for n in (POW, MEAN, ADD, RSQRT, MUL)]


def test_a_kernel_not_named_after_what_it_does_fuses_nothing() -> None:
    result = statuses([GEMM, MUL, ADD, GEMM], [GEMM, "my_custom_decoder_kernel", GEMM])
    assert sorted(s for s, _, _ in result[1:-1]) == ["added", "removed", "removed"]


def test_one_kernel_for_one_is_replaced() -> None:
    a = [GEMM, "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", SDPA]
    b = [GEMM, "cutlass_90_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x3_tn_align8", SDPA]
    assert statuses(a, b)[1] == ("replaced", a[1], b[1])
    # a fused kernel that covers one kernel of A stands in for it: a replacement too
    assert statuses([GEMM, MUL, SDPA], [GEMM, "triton_poi_fused_mul_0", SDPA])[1][0] == "replaced"


def test_removed_and_added_kernels() -> None:
    a = [NORM, GEMM, ROPE, SDPA, GEMM]
    b = [NORM, GEMM, SDPA, GEMM]
    expected = [("kept", NORM, NORM), ("kept", GEMM, GEMM), ("removed", ROPE, None), ("kept", SDPA, SDPA)]
    assert statuses(a, b) == [*expected, ("kept", GEMM, GEMM)]
    assert ("added", None, ROPE) in statuses(b, a)


def test_every_kernel_appears_once() -> None:
    a = [NORM, GEMM, MUL, ADD, GEMM, POW, SDPA, MUL]
    b = [GEMM, NORM, "triton_poi_fused_add_mul_2", SDPA, GEMM, "other_kernel"]
    records = align([identity(n) for n in a], [identity(n) for n in b])
    assert sorted(r.a for r in records if r.a is not None) == list(range(len(a)))
    assert sorted({r.b for r in records if r.b is not None}) == list(range(len(b)))
    assert {r.status for r in records} <= set(Status)


def test_operation_words() -> None:
    assert words(ADD) == {"add"}
    assert words(MEAN) == {"reduce", "mean"}
    assert fused_operations("triton_per_fused__to_copy_add_mean_1") == {"to", "copy", "add", "mean"}
    assert fused_operations(identity("triton_poi_fused_mul_silu_9")) == {"mul", "silu"}
    assert fused_operations(GEMM) == set()
