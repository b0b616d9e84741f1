"""Kernel families: names that launch the same operation in another variant.

A serving engine's first layer opens with a plain RMSNorm (`vllm::rms_norm_kernel`, SGLang's
`add_rmsnorm_quant_kernel<..., false, ...>`) where every later layer opens with the same norm fused with the
previous layer's residual add (`fused_add_rms_norm_kernel`, `<..., true, ...>`). Period inference compares
kernels by name; the family lets it see that the first layer opens like the others, so its boundary is where the
layers' boundaries are.

A family is the function's name without what tells variants apart: its last two words (`rms_norm_kernel` and
`fused_add_rms_norm_kernel` share `norm_kernel`) and its first template argument that is not a number (the data
type, or the functor of an ATen elementwise kernel: an add and a copy are not one family). ATen wraps the functor of
its generic elementwise kernels in a launcher (`elementwise_kernel<128, 4, gpu_kernel_impl_nocast<BinaryFunctor<...,
MulFunctor<float>>>>`): there the operation is the innermost functor (`MulFunctor`) or the `..._kernel_cuda`
function the lambda comes from, not the launcher, which every such kernel names (a negation and a product were one
family). For an Itanium-mangled name (ROCm traces keep them) the function's identifier only. An Inductor kernel's
name lists the operations it fuses and ends with its number in its compiled graph (`triton_per_fused_add_mean_mul_
pow_rsqrt_6`): the number is where it runs, not what it does, and is left out.
"""

from __future__ import annotations

import re

from ..ingest.kernel_names import short_kernel_name

IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
FUNCTOR = re.compile(r"\w*Functor\w*|\w+_kernel_cuda\b")  # an ATen operation inside a launcher's arguments
LENGTH = re.compile(r"\d{1,9}")  # of a mangled identifier: a longer number is no length a name can have
CALL_SITE = re.compile(r"^(triton_[a-z]+_fused_\w*)_\d+$")  # Inductor's number of a kernel in its compiled graph


def kernel_family(name: str) -> str:
    """The family of a kernel name (see the module's docstring)."""
    if name.startswith("_Z"):
        return _words(_mangled_function(name))
    short = CALL_SITE.sub(r"\1", short_kernel_name(name))
    head = IDENTIFIER.match(short)
    if head is None:
        return short
    return _words(head.group(0)) + "|" + _first_named_argument(short[head.end() :])


def _words(identifier: str) -> str:
    return "_".join(identifier.split("_")[-2:])


def _mangled_function(name: str) -> str:
    """The last length-prefixed identifier of `_Z[N]<len><id>...` before its template or parameter list."""
    pos = 3 if name.startswith("_ZN") else 2
    last = name
    while digits := LENGTH.match(name, pos):  # read in place: a slice per identifier made this quadratic
        length = int(digits.group(0))
        pos = digits.end()
        last = name[pos : pos + length]
        pos += length
    return last


def _first_named_argument(rest: str) -> str:
    """The identifier of the first template argument that is not a number (empty without template arguments)."""
    if not rest.startswith("<"):
        return ""
    depth, start = 0, 1
    for i, ch in enumerate(rest):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if (ch == "," and depth == 1) or depth == 0:
            argument = rest[start:i].strip()
            found = IDENTIFIER.search(argument)
            if found and not argument[:1].isdigit():
                return _operation(argument, found.group(0))
            start = i + 1
            if depth == 0:
                break
    return ""


def _operation(argument: str, identifier: str) -> str:
    """The operation a template argument names: the identifier it opens with, or inside a template of ATen's
    (`gpu_kernel_impl_nocast<...>`, `BinaryFunctor<..., MulFunctor<float>>`) the innermost functor, else the
    `..._kernel_cuda` function whose lambda it launches."""
    if not argument[len(identifier) :].startswith("<"):
        return identifier
    operations = FUNCTOR.findall(argument)
    functors = [name for name in operations if "Functor" in name]
    return functors[-1] if functors else operations[0] if operations else identifier
