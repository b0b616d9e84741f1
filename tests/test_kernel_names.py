"""Kernel identity: one short name per kernel, the same from Kineto and from nsys, never shared by two kernels.

Truth comes from the traces themselves: the kernel names of each bundled trace read with json/sqlite3, and the
same kernel as the two demanglers spell it (CUPTI's in Kineto, nsys's `demangledName`), copied from the sample
traces recorded of one model and path (sample_traces/eager.pt.trace.json.gz and eager.sqlite).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import DATA, SAMPLES, plain
from kineto_builder import KinetoTrace

import traceview
from traceview.ingest import demangle as demangle_stage
from traceview.ingest.kernel_names import short_kernel_name

EXTERNAL = Path(__file__).parent.parent.parent / "shared" / "external"


@pytest.mark.parametrize(
    ("kineto", "nsys", "short"),
    [
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 2, false, false>"
            "(float*, float const*, int, int, int, bool const*, int, bool)",
            "void <unnamed>::softmax_warp_forward<float, float, float, (int)2, (bool)0, (bool)0>"
            "(T2 *, const T1 *, int, int, int, const bool *, int, bool)",
            "softmax_warp_forward<float, float, float, 2, false, false>",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)",
            "void at::native::vectorized_elementwise_kernel<(int)8, at::native::FillFunctor<c10::BFloat16>, "
            "std::array<char *, (unsigned long)1>>(int, T2, T3)",
            "vectorized_elementwise_kernel<8, FillFunctor<BFloat16>, array<char*, 1ul>>",
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor"
            "<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
            "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)"
            "::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float,"
            " at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor"
            "<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})",
            "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<"
            "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>"
            "(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)",
            "elementwise_kernel<128, 2, gpu_kernel_impl_nocast<BinaryFunctor<float, float, float, MulFunctor<float>>>"
            "::{lambda(int)#1}>",
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
            "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
            "std::array<char*, 2ul>, 4>(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&))",
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)"
            "::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::"
            "[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>, (int)4>(int, T1)",
            "unrolled_elementwise_kernel<direct_copy_kernel_cuda::{lambda()#3}::{lambda()#7}::{lambda(float)#1}, "
            "array<char*, 2ul>, 4>",
        ),
        (
            "void at::native::kernelHistogram1D<int, int, long, 1, 2, -1, (CUDAHistogramMemoryType)0, "
            "at::native::CUDA_tensor_histogram<int, int, false>::{lambda(long)#2}>(int*, long)",
            "void at::native::kernelHistogram1D<int, int, long, (int)1, (int)2, (int)-1, (CUDAHistogramMemoryType)0, "
            "bool at::native::CUDA_tensor_histogram<int, int, (bool)0>::[lambda(long) (instance 2)]>(T1 *, T3)",
            "kernelHistogram1D<int, int, long, 1, 2, -1, (CUDAHistogramMemoryType)0, "
            "CUDA_tensor_histogram<int, int, false>::{lambda(long)#2}>",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        ),
    ],
)
def test_both_demanglers_give_one_short_name(kineto: str, nsys: str, short: str) -> None:
    assert short_kernel_name(kineto) == short
    assert short_kernel_name(nsys) == short


@pytest.mark.parametrize(
    ("name", "short"),
    [
        # the template argument is what tells the 17 CUTLASS GEMMs of a training step apart
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_16x6_tn_align4>"
            "(cutlass_80_tensorop_s1688gemm_128x64_16x6_tn_align4::Params)",
            "Kernel<cutlass_80_tensorop_s1688gemm_128x64_16x6_tn_align4>",
        ),
        # a return type with template arguments of its own is not the kernel's name
        (
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, 7>(float const*)",
            "kernel<int, int, float, 7>",
        ),
        # one rule for parameter lists, template or not: dropped (overloads share a short name; `name` keeps both)
        ("find_long_segments(at::Accessor<int>, int)", "find_long_segments"),
        ("at::cuda::<unnamed>::spin_kernel(long)", "spin_kernel"),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        ("nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN", "nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN"),
        ("Memcpy DtoD (Device -> Device)", "DtoD"),
        ("Memset (Device)", "Memset"),
        ("", ""),
    ],
)
def test_short_names(name: str, short: str) -> None:
    assert short_kernel_name(name) == short


def _kineto_kernel_names(path: Path) -> set[str]:
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return {
        e.get("name", "") for e in events if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "kernel"
    }


def _nsys_kernel_names(path: Path) -> set[str]:
    with sqlite3.connect(path) as con:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchall():
            return set()
        rows = con.execute(
            """SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"""
        ).fetchall()
    return {r[0] for r in rows}


def _names(path: Path, scratch: Path) -> set[str]:
    """Kernel names of a bundled trace: Kineto JSON, or an nsys SQLite export (.sqlite.xz unpacked to `scratch`)."""
    if path.name.endswith(".json.gz"):
        return _kineto_kernel_names(path)
    return _nsys_kernel_names(plain(path, scratch))


def _bundled_traces() -> list[Path]:
    roots = [SAMPLES, DATA, EXTERNAL]
    patterns = ("*.json.gz", "*.sqlite", "*.sqlite.xz")
    return [p for root in roots if root.is_dir() for pattern in patterns for p in sorted(root.rglob(pattern))]


@pytest.mark.heavy
def test_no_two_kernels_of_a_bundled_trace_share_a_short_name(tmp_path: Path) -> None:
    traces = _bundled_traces()
    assert len(traces) > 60 and any("corpus" in p.parts for p in traces)
    shared = {}
    for path in traces:
        names = _names(path, tmp_path)
        by_short: dict[str, set[str]] = {}
        for name in names:
            by_short.setdefault(short_kernel_name(name), set()).add(name)
        shared.update({(path.name, short): full for short, full in by_short.items() if len(full) > 1})
    assert shared == {}


def test_kineto_and_nsys_recordings_of_one_path_diff_as_the_same_kernels(tmp_path: Path) -> None:
    traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], tmp_path / "kineto.db")
    traceview.ingest([SAMPLES / "eager.sqlite"], tmp_path / "nsys.db")
    result = traceview.api.diff(tmp_path / "kineto.db", tmp_path / "nsys.db")
    assert len(result.kernels) == 67
    assert {r["status"] for r in result.kernels} == {"kept"}


def test_kineto_and_nsys_twins_of_the_corpus_name_the_same_kernels(tmp_path: Path) -> None:
    """Every model and path of sample_traces/corpus recorded by both profilers: the same short names, except a
    kernel whose name CUPTI left mangled (the GNU demangler rejects it too; nsys demangles it)."""
    corpus = SAMPLES / "corpus"
    pairs = [
        (corpus / "torch" / p.name.replace(".sqlite.xz", ".pt.trace.json.gz"), p)
        for p in (corpus / "nsys").glob("*.xz")
    ]
    assert len(pairs) >= 10
    for kineto, nsys in pairs:
        from_kineto = {short_kernel_name(n) for n in _names(kineto, tmp_path) if not n.startswith("_Z")}
        mangled = {n for n in _names(kineto, tmp_path) if n.startswith("_Z")}
        from_nsys = {short_kernel_name(n) for n in _names(nsys, tmp_path)}
        assert from_kineto <= from_nsys, kineto.name
        assert len(from_nsys - from_kineto) == len(mangled), kineto.name


AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi8ELb0ELb1EEEvPT0_PKT_S5_PfS3_fii"
HAS_DEMANGLER = any(shutil.which(tool) for tool in demangle_stage.TOOLS)


@pytest.mark.skipif(not HAS_DEMANGLER, reason="no c++filt or llvm-cxxfilt installed")
def test_mangled_names_are_demangled_in_one_call_per_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ROCm trace's AMD kernels arrive mangled: every distinct one goes to the system's demangler in one call,
    however many kernels carry it; a name it cannot read stays as it was."""
    calls = []
    run = subprocess.run

    def counted(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(kwargs["input"])
        return run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(demangle_stage.subprocess, "run", counted)
    unreadable = "_ZN7cutlass13device_kernelIN3foo"
    trace = KinetoTrace()
    for _ in range(20):
        for name in (AITER, "_Z11spin_kernell", unreadable, "gemm"):
            trace.launch_kernel(name)
    db = tmp_path / "run.db"
    traceview.ingest([trace.write(tmp_path / "t.json")], db)
    with traceview.connect(db) as con:
        short = dict(con.execute("SELECT DISTINCT name, short_name FROM gpu_activity").fetchall())
    assert short == {
        AITER: "add_rmsnorm_quant_kernel<bfloat16_t, bfloat16_t, 256, 8, false, true>",
        "_Z11spin_kernell": "spin_kernel",
        unreadable: unreadable,
        "gemm": "gemm",
    }
    assert len(calls) == 1 and sorted(calls[0].split()) == sorted([AITER, "_Z11spin_kernell", unreadable])


def test_without_a_demangler_names_stay_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demangle_stage.shutil, "which", lambda _: None)
    assert demangle_stage.demangle([AITER]) == {}
    assert short_kernel_name(AITER) == AITER


def test_a_hostile_mangled_name_is_not_handed_to_the_demangler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Longer than any kernel name, or not a mangled name at all (a newline would split the batch): kept out."""
    monkeypatch.setattr(demangle_stage.subprocess, "run", lambda *a, **k: pytest.fail("called"))
    assert demangle_stage.demangle(["_Z" + "1a" * 500_000, "_Z3foov\n_Z3barv", "_Z has spaces"]) == {}
