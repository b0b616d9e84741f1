"""A kernel's short name: the one identity every backend and every output uses (`gpu_activity.short_name`).

Reads a full demangled name as Kineto (CUPTI's demangler) or nsys (`demangledName`, the EDG-style demangler)
writes it; returns the kernel's own name with the template arguments that select it, in one canonical
spelling. Both backends call `short_kernel_name` (through ingest/common.short_names_table), so the same kernel
recorded by the PyTorch profiler and by Nsight Systems gets the same short name, and `diff` lines kernels up
by it.

What is dropped: the return type, the namespaces, the parameter list (nsys writes it with template-parameter
placeholders, `(int, T2, T3)`, where Kineto writes the types), and inside template arguments the namespaces,
the parameter lists of enclosing functions and `::operator()() const` between lambdas. What is kept: the
template arguments, which tell apart e.g. the 17 `cutlass::Kernel<...>` GEMMs of a training step or the
`vectorized_elementwise_kernel<4, FillFunctor<float>, ...>` from the one of `CUDAFunctor_add<float>`. A kernel
that is not a template keeps its parameter list when there is one: overloads differ only there.

The two demanglers' spellings are folded into Kineto's: `<unnamed>` -> `(anonymous namespace)`,
`[lambda(int) (instance 1)]` -> `{lambda(int)#1}`, `(int)128` -> `128`, `(bool)1` -> `true`,
`(unsigned long)2` -> `2ul`, `const T` -> `T const`, `char *` -> `char*`, `> >` -> `>>`, and nsys's return type of
a function enclosing a lambda in a template argument dropped. A name CUPTI left mangled (`_ZN7cutlass13device_
kernel...`, which the GNU demangler rejects too) stays as it is: unique, but not the name nsys shows.
"""

from __future__ import annotations

import re

# Literal casts of nsys's demangler and the suffix Kineto's writes for the same value.
_LITERAL_SUFFIX = {
    "int": "",
    "unsigned int": "u",
    "long": "l",
    "unsigned long": "ul",
    "long long": "ll",
    "unsigned long long": "ull",
}
_CAST_LITERAL = re.compile(r"\((" + "|".join(map(re.escape, _LITERAL_SUFFIX)) + r")\)(-?\d+)\b")
_BOOL_LITERAL = re.compile(r"\(bool\)([01])\b")
_EDG_LAMBDA = re.compile(r"\[lambda(\((?:[^()]|\([^()]*\))*\)) \(instance (\d+)\)\]")
_SPACE_BEFORE_POINTER = re.compile(r"\s+(?=[*&])")
_CONST_FIRST = re.compile(r"\bconst ([A-Za-z_][\w:]*)(?=[\s*&,>)])")
_ANONYMOUS = "(anonymous namespace)"
_ANONYMOUS_TOKEN = "anonymous_namespace"
_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::(?=[A-Za-z_~])")
# nsys writes the return type of a function that encloses a lambda inside a template argument
# (`, bool CUDA_tensor_histogram<int>::{lambda(long)#2}`); Kineto does not.
_RETURN_TYPE_IN_ARGUMENT = re.compile(
    r"(?<=[<,])(\s*)(?:void|bool|char|int|long|float|double|auto|unsigned int|unsigned long)\s+"
    r"(?=[A-Za-z_][\w:]*(?:<[^()]*>)?(?:\(|::))"
)
_CALL_OPERATOR = re.compile(r"::operator\(\)(?=::)")


def short_kernel_name(name: str) -> str:
    """The kernel's short name (see the module's docstring); for a copy or set, its kind (`Memcpy HtoD (...)` ->
    `HtoD`, `Memset (Device)` -> `Memset`).

    `void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >
    (int, ...)` -> `vectorized_elementwise_kernel<4, FillFunctor<float>, array<char*, 1ul>>`.
    """
    if name.startswith(("Memcpy ", "Memset ")):
        return name.split("(", 1)[0].split()[-1]
    if not name.strip():
        return name
    text = canonical_spelling(name)
    head, params = _split_parameters(text)
    function = _after_last_top_level(_after_last_top_level(head, " "), "::")
    if "<" not in function and params:
        function += _compact(params)
    return _compact(function).replace(_ANONYMOUS_TOKEN, _ANONYMOUS) or name.strip()


def canonical_spelling(name: str) -> str:
    """`name` in Kineto's spelling, whichever demangler wrote it (see the module's docstring)."""
    text = name.replace("<unnamed>", _ANONYMOUS).replace("operator ()", "operator()")
    text = _EDG_LAMBDA.sub(r"{lambda\1#\2}", text)
    text = _CAST_LITERAL.sub(lambda m: m.group(2) + _LITERAL_SUFFIX[m.group(1)], text)
    text = _BOOL_LITERAL.sub(lambda m: "true" if m.group(1) == "1" else "false", text)
    text = _CONST_FIRST.sub(r"\1 const", text)
    text = _SPACE_BEFORE_POINTER.sub("", text)
    text = re.sub(r">\s+>", ">>", re.sub(r">\s+>", ">>", text))
    return re.sub(r"\s+", " ", text).strip().replace(_ANONYMOUS, _ANONYMOUS_TOKEN)


def _split_parameters(text: str) -> tuple[str, str]:
    """(everything before the top-level parameter list, the list with its parentheses); '' when there is none.

    The parameter list is the last top-level `( ... )`, after which only qualifiers (` const`) may follow.
    """
    depth, start = 0, -1
    for i, char in enumerate(text):
        if char in "<([{":
            if depth == 0 and char == "(":
                start = i
            depth += 1
        elif char in ">)]}":
            depth = max(depth - 1, 0)
            if depth == 0 and char == ")" and start > 0 and not text[i + 1 :].strip(" const&"):
                return text[:start].rstrip(), text[start : i + 1]
    return text, ""


def _after_last_top_level(text: str, separator: str) -> str:
    """What follows the last `separator` outside brackets: the qualified name after the return type
    (`void ns::f<int>`, " " -> `ns::f<int>`), or the name after the namespaces (`ns::f<X::Y>`, "::" -> `f<X::Y>`)."""
    depth, cut = 0, 0
    for i, char in enumerate(text):
        if char in "<([{":
            depth += 1
        elif char in ">)]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(separator, i):
            cut = i + len(separator)
    return text[cut:]


def _compact(text: str) -> str:
    """Inside template arguments: no namespaces, no return types, no parameter lists of enclosing functions."""
    text = _RETURN_TYPE_IN_ARGUMENT.sub(r"\1", text)
    text = _drop_enclosing_parameters(text)
    text = _CALL_OPERATOR.sub("", text)
    return _NAMESPACE.sub("", text)


def _drop_enclosing_parameters(text: str) -> str:
    """`f<int>(at::Tensor&, T2)::{lambda(float)#1}` -> `f<int>::{lambda(float)#1}` (a `(...)` followed by `::`)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "(" and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>)"):
            end = _closing(text, i)
            rest = text[end + 1 :]
            after = rest[len(" const") :] if rest.startswith(" const") else rest
            if end > 0 and after.startswith("::"):
                i = end + 1 + (len(rest) - len(after))
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _closing(text: str, start: int) -> int:
    """Index of the `)` closing the `(` at `start`, -1 when it never closes."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1
