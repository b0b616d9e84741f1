"""Kernel families (segment/family.py): variants of one operation share a family, other operations do not."""

from __future__ import annotations

import pytest

from traceview.segment.family import kernel_family

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
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_variants_of_one_operation_share_a_family(a: str, b: str) -> None:
    assert kernel_family(a) == kernel_family(b)


@pytest.mark.parametrize(("a", "b"), OTHER)
def test_other_operations_do_not(a: str, b: str) -> None:
    assert kernel_family(a) != kernel_family(b)
