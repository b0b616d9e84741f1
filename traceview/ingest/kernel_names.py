"""A kernel's short name: the one identity every backend and every output uses (`gpu_activity.short_name`).

Reads a full demangled name as Kineto (CUPTI's demangler) or nsys (`demangledName`, the EDG-style demangler)
writes it; returns the kernel's own name with the template arguments that select it, in one canonical
spelling. Both backends call `short_kernel_name` (through ingest/common.short_names_table), so the same kernel
recorded by the PyTorch profiler and by Nsight Systems gets the same short name, and `diff` lines kernels up
by it.

One rule: the kernel's own name and the template arguments that select it; never its parameter list. What is
dropped: the return type, the namespaces, the parameter list of every kernel, template or not (nsys writes it with
template-parameter placeholders, `(int, T2, T3)`, where Kineto writes the types; `spin_kernel(long)` ->
`spin_kernel`), and inside template arguments the namespaces, the parameter lists of enclosing functions and
`::operator()() const` between lambdas. What is kept: the template arguments, which tell apart e.g. the 17
`cutlass::Kernel<...>` GEMMs of a training step or the `vectorized_elementwise_kernel<4, FillFunctor<float>, ...>`
from the one of `CUDAFunctor_add<float>`. Two overloads of one non-template kernel share a short name (`name`
keeps them apart).

The two demanglers' spellings are folded into Kineto's: `<unnamed>` -> `(anonymous namespace)`,
`[lambda(int) (instance 1)]` -> `{lambda(int)#1}`, `(int)128` -> `128`, `(bool)1` -> `true`,
`(unsigned long)2` -> `2ul`, `const T` -> `T const`, `char *` -> `char*`, `> >` -> `>>`, and nsys's return type of
a function enclosing a lambda in a template argument dropped. A name left mangled (`_ZN5aiter24add_rmsnorm_quant_
kernelI...` in a ROCm trace) is demangled first, all of a run's names in one call (ingest/demangle.py); one the
system's demangler rejects too (`_ZN7cutlass13device_kernel...`) stays as it is: unique, but not the name nsys
shows.
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
_SPACE_BEFORE_POINTER = re.compile(r"(?<!\s)\s+(?=[*&])")  # from a run's first space only: linear
_CONST_FIRST = re.compile(r"\bconst ([A-Za-z_][\w:]*)(?=[\s*&,>)])")
_ANONYMOUS = "(anonymous namespace)"
_ANONYMOUS_TOKEN = "anonymous_namespace"
_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::(?=[A-Za-z_~])")
# A type word inside a template argument, before a name: a return type when a function name follows (see
# _drop_return_types).
_RETURN_TYPE_IN_ARGUMENT = re.compile(
    r"(?<=[<,])(\s*)(?:void|bool|char|int|long|float|double|auto|unsigned int|unsigned long)\s+(?=[A-Za-z_])"
)
_QUALIFIED_NAME = re.compile(r"[A-Za-z_][\w:]*")
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
    head, _ = _split_parameters(canonical_spelling(name))
    function = _after_last_top_level(_after_last_top_level(head, " "), "::")
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
    qualifiers = len(text.rstrip(" const&"))  # from here on, only qualifiers
    for i, char in enumerate(text):
        if char in "<([{":
            if depth == 0 and char == "(":
                start = i
            depth += 1
        elif char in ">)]}":
            depth = max(depth - 1, 0)
            if depth == 0 and char == ")" and start > 0 and i + 1 >= qualifiers:
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
    text = _drop_return_types(text)
    text = _drop_enclosing_parameters(text)
    text = _CALL_OPERATOR.sub("", text)
    return _NAMESPACE.sub("", text)


def _drop_return_types(text: str) -> str:
    """nsys writes the return type of a function that encloses a lambda inside a template argument
    (`, bool CUDA_tensor_histogram<int>::{lambda(long)#2}`); Kineto does not. A type word is dropped where a
    function name follows it: `name(`, `a::name`, or `name<...>` then `(` or `::`, no parenthesis inside `<...>`.

    Linear in the name's length: each name after a type word is read once, and where a `<...>` can end is found
    in one pass over the text (_template_before_call), made only when such a name needs it."""
    calls: set[int] | None = None

    def drop(match: re.Match[str]) -> str:
        nonlocal calls
        start = match.end()
        end = _QUALIFIED_NAME.match(text, start).end()  # type: ignore[union-attr]  # the pattern's lookahead
        if text.startswith("(", end) or text.find("::", start + 1, end) >= 0:
            return match.group(1)
        if text.startswith("<", end):
            calls = _template_before_call(text) if calls is None else calls
            if end in calls:
                return match.group(1)
        return match.group(0)

    return _RETURN_TYPE_IN_ARGUMENT.sub(drop, text)


def _template_before_call(text: str) -> set[int]:
    """Positions of the `<` after which, before any parenthesis, a `>` is followed by `(` or `::`."""
    found: set[int] = set()
    call_follows = False  # reading backwards: a `>(` or `>::` lies between here and the next parenthesis
    for i in range(len(text) - 1, -1, -1):
        if text[i] in "()":
            call_follows = False
        elif text[i] == ">" and text.startswith(("(", "::"), i + 1):
            call_follows = True
        elif text[i] == "<" and call_follows:
            found.add(i)
    return found


def _drop_enclosing_parameters(text: str) -> str:
    """`f<int>(at::Tensor&, T2)::{lambda(float)#1}` -> `f<int>::{lambda(float)#1}` (a `(...)` followed by `::`)."""
    closing = _closing_parentheses(text)
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "(" and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>)") and i in closing:
            after = closing[i] + 1
            after += len(" const") if text.startswith(" const", after) else 0
            if text.startswith("::", after):
                i = after
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _closing_parentheses(text: str) -> dict[int, int]:
    """Index of each `(` -> index of the `)` that closes it (one that never closes is absent), in one pass."""
    opened: list[int] = []
    closing: dict[int, int] = {}
    for i, char in enumerate(text):
        if char == "(":
            opened.append(i)
        elif char == ")" and opened:
            closing[opened.pop()] = i
    return closing
