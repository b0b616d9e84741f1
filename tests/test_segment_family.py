"""Kernel families (segment/family.py): variants of one operation share a family, other operations do not."""

from __future__ import annotations

import pytest

from traceview.segment.family import kernel_family

MUL_BF16 = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
    "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >("
    "at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<"
    "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::"
    "{lambda(int)#1})"
)
SAME = [
    (  # vLLM: the first layer's norm and the fused add+norm of the others
        "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long, long)",
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
        "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, long)",
    ),
    (  # SGLang on ROCm, mangled: the same template with the residual flag off and on
        "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
        "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
    ),
    (  # ATen: a product of two tensors and of a tensor by a scalar, one operation behind two launchers
        MUL_BF16,
        "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<"
        "float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)",
    ),
    (  # Inductor: a dense layer's RMSNorm and a MoE layer's, the same fusion at another place in its graph
        "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        "triton_per_fused__to_copy__unsafe_view_add_mean_mul_pow_rsqrt_6",
    ),
]
OTHER = [
    (  # ATen elementwise kernels of different operations
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
        "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, "
        "std::array<char*, 2ul> >(int, float)",
    ),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int)", "rms_norm"),
    (  # the functor inside ATen's launcher, which every generic elementwise kernel names: a negation and a product
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
        "at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
        "{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::neg_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, "
        "at::native::gpu_kernel_impl_nocast<at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
        "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::neg_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1} const&)::"
        "{lambda(int)#1})",
        MUL_BF16,
    ),
    ("triton_poi_fused_mul_silu_7", "triton_poi_fused_add_7"),  # Inductor: other fusions, the same call-site number
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_variants_of_one_operation_share_a_family(a: str, b: str) -> None:
    assert kernel_family(a) == kernel_family(b)


@pytest.mark.parametrize(("a", "b"), OTHER)
def test_other_operations_do_not(a: str, b: str) -> None:
    assert kernel_family(a) != kernel_family(b)
