"""Generate large, realistic GPU profiler traces for benchmarks: Kineto JSON (.json / .json.gz) and nsys SQLite.

The traces model LLM decode on several ranks (tensor parallel): `ProfilerStep#N` steps, each made of
`model.layers.N` record_function ranges; inside a layer, ATen ops on the main CPU thread launch kernels
(`cudaLaunchKernel` for ATen kernels, `cuLaunchKernelEx` for cuBLAS nvjet GEMMs, `cuLaunchKernel` for
Triton) that run on a compute stream, and two all-reduces per layer run `ncclDevKernel_AllReduce_...` on
a communication stream. Event shapes and the pretty-printed layout follow a real H200 / PyTorch 2.11
trace (sample_traces/eager.pt.trace.json.gz): kernel args (grid, block, registers, correlation, ...),
`ac2g` flow events, `gpu_user_annotation`, metadata (`M`) events, `distributedInfo`. The nsys SQLite
copies the DDL and the small tables (enums, metadata, GPU info) of a real export (sample_traces/eager.sqlite)
and fills CUPTI_ACTIVITY_KIND_KERNEL / _RUNTIME / _MEMCPY, NVTX_EVENTS, StringIds, PROCESSES and
ThreadNames with the same model.

Everything streams: events are written one step at a time (a step is a few thousand events), so memory
stays bounded whatever the size.

    python bench/gen_traces.py kineto --size 1GB --ranks 2 --out /tmp/tv-bench/k1g          # rank-N.pt.trace.json
    python bench/gen_traces.py kineto --size 1GB --gzip --out /tmp/tv-bench/k1g-gz
    python bench/gen_traces.py nsys --size 1GB --ranks 2 --out /tmp/tv-bench/n1g.sqlite
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
NSYS_TEMPLATE = REPO / "sample_traces" / "eager.sqlite"

TS_BASE_NS = 5_111_046_000_000_000  # Kineto `ts` origin (µs in the file), as in the real sample
BASE_TIME_NS = 1_790_857_026_000_000_000
COMPUTE_STREAM = 7
COMM_STREAM = 23
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """'10MB' -> 10_000_000 (decimal units; KiB/MiB/GiB binary)."""
    text = text.strip().upper()
    digits = text.rstrip("KMGIB")
    return int(float(digits) * UNITS[text[len(digits) :]])


# ---------------------------------------------------------------------------------------------------------
# The workload model: kernels of one decode step of a Llama-like layer under tensor parallelism


@dataclass(frozen=True)
class KernelKind:
    """A GPU kernel as the trace names it, how it is launched, and its typical duration and shape."""

    name: str
    short: str
    api: str  # cudaLaunchKernel | cuLaunchKernelEx | cuLaunchKernel
    dur_ns: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    shared: int
    comm: bool = False


def _ew(functor: str) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, 3ul> >"
        f"(int, {functor}, std::array<char*, 3ul>)"
    )


K_EMBED = KernelKind(
    "void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, unsigned int, 2, 2, -2>"
    "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 "
    "const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, long)",
    "indexSelectSmallIndex",
    "cudaLaunchKernel",
    2_400,
    (8, 1, 1),
    (128, 1, 1),
    32,
    0,
)
K_NORM = KernelKind(
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
    "c10::BFloat16*)",
    "vectorized_layer_norm_kernel",
    "cudaLaunchKernel",
    3_100,
    (1, 1, 1),
    (256, 1, 1),
    40,
    0,
)
K_GEMM = KernelKind(
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
    "cuLaunchKernelEx",
    9_800,
    (64, 1, 4),
    (384, 1, 1),
    168,
    205_824,
)
K_SPLITK = KernelKind(
    "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, false, "
    "true, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, __nv_bfloat16 const*, "
    "__nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, "
    "void*, long, float*, int*)",
    "splitKreduce_kernel",
    "cudaLaunchKernel",
    2_200,
    (16, 1, 1),
    (32, 16, 1),
    30,
    0,
)
K_ROPE = KernelKind(
    _ew(
        "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
        "MulFunctor<float> >"
    ),
    "vectorized_elementwise_kernel",
    "cudaLaunchKernel",
    1_900,
    (4, 1, 1),
    (128, 1, 1),
    22,
    0,
)
K_ADD = KernelKind(
    _ew("at::native::CUDAFunctor_add<c10::BFloat16>"),
    "vectorized_elementwise_kernel",
    "cudaLaunchKernel",
    1_700,
    (2, 1, 1),
    (128, 1, 1),
    20,
    0,
)
K_ATTN = KernelKind(
    "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, "
    "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "flash_fwd_splitkv_kernel",
    "cudaLaunchKernel",
    14_500,
    (1, 8, 16),
    (128, 1, 1),
    255,
    49_152,
)
K_ATTN_COMBINE = KernelKind(
    "void pytorch_flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 4, false>"
    "(pytorch_flash::Flash_fwd_params)",
    "flash_fwd_splitkv_combine_kernel",
    "cudaLaunchKernel",
    2_600,
    (1, 1, 1),
    (128, 1, 1),
    64,
    0,
)
K_SILU = KernelKind(
    "triton_poi_fused_mul_silu_0",
    "triton_poi_fused_mul_silu_0",
    "cuLaunchKernel",
    2_300,
    (22, 1, 1),
    (128, 1, 1),
    24,
    0,
)
K_ALLREDUCE = KernelKind(
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    "cudaLaunchKernel",
    11_000,
    (2, 1, 1),
    (512, 1, 1),
    96,
    87_568,
    comm=True,
)
K_ARGMAX = KernelKind(
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>, "
    "unsigned int, long, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>, unsigned int, "
    "long, 4, 4>)",
    "reduce_kernel",
    "cudaLaunchKernel",
    8_200,
    (1, 1, 1),
    (32, 16, 1),
    32,
    16,
)

# One layer: (op name, child op names, kernels it launches)
LAYER_OPS: tuple[tuple[str, tuple[str, ...], tuple[KernelKind, ...]], ...] = (
    ("aten::rms_norm", ("aten::empty_like",), (K_NORM,)),
    ("aten::linear", ("aten::t", "aten::transpose", "aten::mm"), (K_GEMM, K_SPLITK)),
    ("aten::mul", (), (K_ROPE,)),
    ("aten::add", (), (K_ADD,)),
    ("aten::_scaled_dot_product_flash_attention", ("aten::_flash_attention_forward",), (K_ATTN, K_ATTN_COMBINE)),
    ("aten::linear", ("aten::t", "aten::transpose", "aten::mm"), (K_GEMM,)),
    ("record_param_comms", ("nccl:all_reduce",), (K_ALLREDUCE,)),
    ("aten::add", (), (K_ADD,)),
    ("aten::rms_norm", ("aten::empty_like",), (K_NORM,)),
    ("aten::linear", ("aten::t", "aten::transpose", "aten::mm"), (K_GEMM, K_SPLITK)),
    ("triton_poi_fused_mul_silu_0", (), (K_SILU,)),
    ("aten::linear", ("aten::t", "aten::transpose", "aten::mm"), (K_GEMM,)),
    ("record_param_comms", ("nccl:all_reduce",), (K_ALLREDUCE,)),
    ("aten::add", (), (K_ADD,)),
)
CBID = {"cudaLaunchKernel": 211, "cuLaunchKernelEx": 652, "cuLaunchKernel": 307, "cudaMemcpyAsync": 41}


# ---------------------------------------------------------------------------------------------------------
# Records: what happened, independent of the output format


@dataclass
class Range:
    cat: str  # user_annotation | cpu_op
    name: str
    start: int
    end: int
    ext: int


@dataclass
class Launch:
    api: str
    start: int
    end: int
    corr: int
    ext: int


@dataclass
class Gpu:
    kind: KernelKind | None  # None for a memcpy
    name: str
    start: int
    end: int
    stream: int
    corr: int
    ext: int
    nbytes: int = 0


@dataclass
class GpuRange:
    name: str
    start: int
    end: int
    stream: int
    ext: int


@dataclass
class RankModel:
    """The clock and counters of one rank while its steps are generated."""

    rank: int
    world: int
    layers: int
    seed: int
    pid: int = 0
    cpu: int = TS_BASE_NS
    gpu: dict[int, int] = field(default_factory=dict)
    corr: int = 7400
    ext: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.pid = 1100 + 37 * self.rank
        self.rng = random.Random(self.seed * 1000 + self.rank)
        self.cpu = TS_BASE_NS + self.rng.randrange(50_000)
        self.gpu = {COMPUTE_STREAM: self.cpu, COMM_STREAM: self.cpu}

    def _jitter(self, ns: int) -> int:
        return max(1, int(ns * (0.8 + 0.4 * self.rng.random())))

    def _next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def _launch(self, kind: KernelKind, out: list[Any]) -> Gpu:
        self.corr += 1
        start = self.cpu
        end = start + self._jitter(4_000 if kind.api == "cudaLaunchKernel" else 6_500)
        ext = self.ext
        out.append(Launch(kind.api, start, end, self.corr, ext))
        stream = COMM_STREAM if kind.comm else COMPUTE_STREAM
        if kind.comm:  # the collective waits for the compute stream
            self.gpu[COMM_STREAM] = max(self.gpu[COMM_STREAM], self.gpu[COMPUTE_STREAM])
        gstart = max(self.gpu[stream], end + self._jitter(2_500))
        gend = gstart + self._jitter(kind.dur_ns)
        self.gpu[stream] = gend
        if kind.comm:  # the next compute kernel waits for the collective
            self.gpu[COMPUTE_STREAM] = max(self.gpu[COMPUTE_STREAM], gend)
        self.cpu = end + self._jitter(1_000)
        kernel = Gpu(kind, kind.name, gstart, gend, stream, self.corr, ext)
        out.append(kernel)
        return kernel

    def _op(self, name: str, children: tuple[str, ...], kernels: tuple[KernelKind, ...], out: list[Any]) -> None:
        op = Range("cpu_op", name, self.cpu, 0, self._next_ext())
        out.append(op)
        self.cpu += self._jitter(3_000)
        for child in children:
            sub = Range("cpu_op", child, self.cpu, 0, self._next_ext())
            out.append(sub)
            self.cpu += self._jitter(2_500)
            if child in ("aten::mm", "aten::_flash_attention_forward", "nccl:all_reduce"):
                for kind in kernels:
                    self._launch(kind, out)
            sub.end = self.cpu + self._jitter(1_500)
            self.cpu = sub.end
        if not children:
            for kind in kernels:
                self._launch(kind, out)
        op.end = self.cpu + self._jitter(2_000)
        self.cpu = op.end + self._jitter(1_000)

    def step(self, number: int) -> list[Any]:
        """Every record of one ProfilerStep: embedding, the layers, the LM head and sampling."""
        out: list[Any] = []
        step = Range("user_annotation", f"ProfilerStep#{number}", self.cpu, 0, self._next_ext())
        out.append(step)
        self.cpu += self._jitter(20_000)
        self._op("aten::embedding", ("aten::index_select",), (K_EMBED,), out)
        for layer in range(self.layers):
            name = f"model.layers.{layer}"
            rng = Range("user_annotation", name, self.cpu, 0, self._next_ext())
            out.append(rng)
            first = len(out)
            self.cpu += self._jitter(2_000)
            for op_name, children, kernels in LAYER_OPS:
                self._op(op_name, children, kernels, out)
            rng.end = self.cpu + self._jitter(1_000)
            self.cpu = rng.end
            kernels_in = [r for r in out[first:] if isinstance(r, Gpu) and r.stream == COMPUTE_STREAM]
            if kernels_in:
                out.append(GpuRange(name, kernels_in[0].start, kernels_in[-1].end, COMPUTE_STREAM, rng.ext))
        self._op("aten::rms_norm", ("aten::empty_like",), (K_NORM,), out)
        self._op("aten::linear", ("aten::t", "aten::transpose", "aten::mm"), (K_GEMM,), out)
        self._op("aten::argmax", (), (K_ARGMAX,), out)
        # copy the token to the host, then wait for it
        self.corr += 1
        ext = self._next_ext()
        start = self.cpu
        out.append(Range("cpu_op", "aten::_local_scalar_dense", start, 0, ext))
        out.append(Launch("cudaMemcpyAsync", start + 500, start + 6_000, self.corr, ext))
        gstart = max(self.gpu[COMPUTE_STREAM], start + 8_000)
        gend = gstart + self._jitter(1_500)
        self.gpu[COMPUTE_STREAM] = gend
        out.append(Gpu(None, "Memcpy DtoH (Device -> Pinned)", gstart, gend, COMPUTE_STREAM, self.corr, ext, 8))
        self.cpu = max(self.cpu + 7_000, gend + 3_000)
        out[-3].end = self.cpu
        step.end = self.cpu + self._jitter(5_000)
        self.cpu = step.end + self._jitter(30_000)
        for stream in self.gpu:
            self.gpu[stream] = max(self.gpu[stream], self.cpu)
        return out


# ---------------------------------------------------------------------------------------------------------
# Kineto JSON


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _kineto_events(model: RankModel, record: Any) -> str:
    pid = model.pid
    if isinstance(record, Range):
        return (
            f'  {{\n    "ph": "X", "cat": "{record.cat}", "name": "{record.name}", "pid": {pid}, "tid": {pid},\n'
            f'    "ts": {_us(record.start)}, "dur": {_us(record.end - record.start)},\n'
            f'    "args": {{\n      "External id": {record.ext},"Record function id": 0, "Ev Idx": {record.ext - 1}\n'
            "    }\n  }"
        )
    if isinstance(record, Launch):
        cat = "cuda_runtime" if record.api.startswith("cuda") else "cuda_driver"
        return (
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{record.api}", "pid": {pid}, "tid": {pid},\n'
            f'    "ts": {_us(record.start)}, "dur": {_us(record.end - record.start)},\n'
            f'    "args": {{\n      "External id": {record.ext},      "cbid": {CBID[record.api]}, '
            f'"correlation": {record.corr}\n    }}\n  }},\n'
            f'  {{\n    "ph": "s", "id": {record.corr}, "pid": {pid}, "tid": {pid}, "ts": {_us(record.start)},\n'
            '    "cat": "ac2g", "name": "ac2g"\n  }'
        )
    if isinstance(record, GpuRange):
        return (
            f'  {{\n    "ph": "X", "cat": "gpu_user_annotation", "name": "{record.name}", "pid": {model.rank}, '
            f'"tid": {record.stream},\n    "ts": {_us(record.start)}, "dur": {_us(record.end - record.start)},\n'
            f'    "args": {{\n      "External id": {record.ext}\n    }}\n  }}'
        )
    assert isinstance(record, Gpu)
    head = (
        f'  {{\n    "ph": "X", "cat": "{"kernel" if record.kind else "gpu_memcpy"}", "name": "{record.name}", '
        f'"pid": {model.rank}, "tid": {record.stream},\n'
        f'    "ts": {_us(record.start)}, "dur": {_us(record.end - record.start)},\n    "args": {{\n'
    )
    flow = (
        f'  {{\n    "ph": "f", "id": {record.corr}, "pid": {model.rank}, "tid": {record.stream}, '
        f'"ts": {_us(record.start)},\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
    )
    common = (
        f'      "External id": {record.ext},      "queued": 0, "device": {model.rank}, "context": 1,'
        f'      "stream": {record.stream}, "correlation": {record.corr},'
    )
    kind = record.kind
    if kind is None:
        return (
            f'{head}{common}      "bytes": {record.nbytes}, "memory bandwidth (GB/s)": 0.005333\n    }}\n  }},\n{flow}'
        )
    comm = ""
    if kind.comm:
        n = 4096 * (1 + model.rng.randrange(4))
        ranks = json.dumps(list(range(model.world)))
        comm = (
            f',      "Collective name": "allreduce", "In msg nelems": {n}, "Out msg nelems": {n}, '
            f'"Group size": {model.world}, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", '
            f'"Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "{ranks}"'
        )
    return (
        f'{head}{common}      "registers per thread": {kind.registers},      "shared memory": {kind.shared},'
        f'      "blocks per SM": 0.060606,      "warps per SM": 0.242424,'
        f'      "grid": [{kind.grid[0]}, {kind.grid[1]}, {kind.grid[2]}],'
        f'      "block": [{kind.block[0]}, {kind.block[1]}, {kind.block[2]}],'
        f'      "est. achieved occupancy %": 0{comm}\n    }}\n  }},\n{flow}'
    )


def _kineto_header(model: RankModel) -> str:
    device = {
        "id": model.rank,
        "name": "NVIDIA H200",
        "totalGlobalMem": 150109880320,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
    }
    distributed = {
        "backend": "nccl",
        "rank": model.rank,
        "world_size": model.world,
        "pg_count": 1,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": model.world,
                "ranks": list(range(model.world)),
            }
        ],
        "nccl_version": "2.27.5",
    }
    return (
        '\n  {\n    "schemaVersion": 1,\n    "deviceProperties": [\n    '
        + json.dumps(device)
        + '\n    ],\n  "distributedInfo": '
        + json.dumps(distributed)
        + ',\n      "cuda_driver_version": 13000,\n      "cuda_runtime_version": 13000,\n'
        '      "cupti_version": 130001,\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {BASE_TIME_NS},\n  "traceEvents": [\n'
    )


def _kineto_footer(model: RankModel, first_ns: int) -> str:
    pid, gpu = model.pid, model.rank
    meta = [
        ("process_name", pid, 0, '"name": "python3"'),
        ("process_labels", pid, 0, '"labels": "CPU"'),
        ("process_name", gpu, 0, '"name": "python3"'),
        ("process_labels", gpu, 0, f'"labels": "GPU {gpu}"'),
        ("thread_name", gpu, COMPUTE_STREAM, f'"name": "stream {COMPUTE_STREAM} "'),
        ("thread_name", gpu, COMM_STREAM, f'"name": "stream {COMM_STREAM} "'),
        ("thread_name", pid, pid, f'"name": "thread {pid} (python3)"'),
    ]
    events = [
        f'  {{\n    "name": "{name}", "ph": "M", "ts": {_us(first_ns)}, "pid": {p}, "tid": {t},\n'
        f'    "args": {{\n      {args}\n    }}\n  }}'
        for name, p, t, args in meta
    ]
    events.append(
        f'  {{\n    "ph": "X", "cat": "Trace", "ts": {_us(first_ns)}, "dur": {_us(model.cpu - first_ns)},\n'
        '    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
        '    "args": {\n      "Op count": 0\n    }\n  }'
    )
    events.append(
        '  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
        f'    "pid": "", "tid": "", "ts": {_us(model.cpu)}\n  }}'
    )
    return ",\n".join(events) + f'\n  ],\n  "traceName": "rank-{model.rank}.pt.trace.json"\n}}\n'


def write_kineto(
    path: Path, size: int, rank: int = 0, world: int = 1, layers: int = 32, seed: int = 0, gzip_level: int = 0
) -> dict[str, int]:
    """Write one rank's trace of about `size` uncompressed bytes; gzip it when gzip_level > 0."""
    model = RankModel(rank, world, layers, seed)
    raw: IO[bytes] = gzip.open(path, "wb", compresslevel=gzip_level) if gzip_level else open(path, "wb")  # noqa: SIM115
    counts = {"bytes": 0, "events": 0, "kernels": 0, "steps": 0}
    with raw, io.TextIOWrapper(raw, encoding="utf-8", write_through=False) as out:
        text = _kineto_header(model)
        out.write(text)
        counts["bytes"] += len(text)
        first_ns = model.cpu
        separator = ""
        footer_room = 4096
        step = 0
        while counts["bytes"] + footer_room < size or step == 0:
            step += 1
            chunk = [_kineto_events(model, r) for r in model.step(step)]
            text = separator + ",\n".join(chunk)
            separator = ",\n"
            out.write(text)
            counts["bytes"] += len(text)
            counts["events"] += sum(c.count('"ph"') for c in chunk)
            counts["kernels"] += sum(c.count('"cat": "kernel"') for c in chunk)
        text = ",\n" + _kineto_footer(model, first_ns)
        out.write(text)
        counts["bytes"] += len(text)
        counts["events"] += text.count('"ph"')
        counts["steps"] = step
    return counts


# ---------------------------------------------------------------------------------------------------------
# nsys SQLite

ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "NVTX_EVENTS",
    "PROCESSES",
    "ThreadNames",
    "ProcessStreams",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_CUDA_CONTEXT_INFO",
    "TARGET_INFO_CUDA_STREAM",
    "TARGET_INFO_GPU",
)
NVTX_PUSH_POP = 59


def _global_pid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


class _Strings:
    """StringIds: the ids of the template plus new ones, inserted as they appear."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.ids = {value: i for i, value in con.execute("SELECT id, value FROM StringIds")}
        self.next = max(self.ids.values(), default=-1) + 1

    def __call__(self, value: str) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = self.next
            self.next += 1
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (found, value))
        return found


def _copy_template(con: sqlite3.Connection, template: Path) -> tuple[Any, ...] | None:
    """Create every table of the template, copy the rows of all but the activity tables; its GPU row."""
    src = sqlite3.connect(f"file:{template}?mode=ro", uri=True)
    for name, sql in src.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL"):
        con.execute(sql)
        if name in ACTIVITY_TABLES:
            continue
        rows = src.execute(f'SELECT * FROM "{name}"').fetchall()
        if rows:
            con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(rows[0]))})', rows)
    for sql in src.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"):
        con.execute(sql[0])
    gpu = src.execute("SELECT * FROM TARGET_INFO_GPU LIMIT 1").fetchall()
    src.close()
    return tuple(gpu[0]) if gpu else None


def write_nsys(path: Path, size: int, ranks: int = 2, layers: int = 32, seed: int = 0) -> dict[str, int]:
    """Write an nsys-like SQLite export of about `size` bytes: `ranks` processes, one GPU each."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    gpu_row = _copy_template(con, NSYS_TEMPLATE)
    strings = _Strings(con)
    models = [RankModel(r, ranks, layers, seed) for r in range(ranks)]
    for m in models:
        gpid = _global_pid(m.pid)
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid, m.pid, "python3"))
        con.execute("INSERT INTO ThreadNames VALUES (?, ?, ?)", (strings("python3"), 20, gpid | m.pid))
        con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?)", (m.rank, m.rank, m.pid))
        con.execute(
            "INSERT INTO TARGET_INFO_CUDA_CONTEXT_INFO VALUES (?, 0, 1, ?, ?, 1, 0, 0)", (COMPUTE_STREAM, m.pid, m.rank)
        )
        for stream in (COMPUTE_STREAM, COMM_STREAM):
            con.execute("INSERT INTO TARGET_INFO_CUDA_STREAM VALUES (?, 0, 1, ?, 1, 0, 2)", (stream, m.pid))
        if gpu_row:
            con.execute(
                f"INSERT INTO TARGET_INFO_GPU VALUES ({', '.join('?' * len(gpu_row))})",
                (gpu_row[0], m.rank, *gpu_row[2:]),
            )
    counts = {"kernels": 0, "runtime": 0, "nvtx": 0, "steps": 0, "events": 0}
    page = con.execute("PRAGMA page_size").fetchall()[0][0]
    grid_id = 1000
    step = 0
    while step == 0 or con.execute("PRAGMA page_count").fetchall()[0][0] * page < size:
        step += 1
        kernels: list[tuple[Any, ...]] = []
        runtime: list[tuple[Any, ...]] = []
        memcpy: list[tuple[Any, ...]] = []
        nvtx: list[tuple[Any, ...]] = []
        for m in models:
            gpid = _global_pid(m.pid)
            gtid = gpid | m.pid
            for r in m.step(step):
                if isinstance(r, Range):
                    text = r.name if r.cat == "user_annotation" else f"{r.name}, seq = {r.ext}, op_id = {r.ext}"
                    nvtx.append((r.start, r.end, NVTX_PUSH_POP, None, None, None, text, gtid, None, None, 0))
                elif isinstance(r, Launch):
                    name = {"cudaLaunchKernel": "cudaLaunchKernel_v7000", "cudaMemcpyAsync": "cudaMemcpyAsync_v3020"}
                    driver = not r.api.startswith("cuda")
                    runtime.append(
                        (r.start, r.end, 1 if driver else 0, gtid, r.corr, strings(name.get(r.api, r.api)), 0)
                    )
                elif isinstance(r, Gpu) and r.kind is not None:
                    k = r.kind
                    grid_id += 1
                    kernels.append(
                        (r.start, r.end, m.rank, 1, 0, r.stream, r.corr, gpid, strings(k.name), strings(k.short),
                         strings("_Z" + k.short), 1, 1, k.registers, *k.grid, *k.block, k.shared, 0, 0, 0, grid_id,
                         k.shared, None, 0)
                    )  # fmt: skip
                elif isinstance(r, Gpu):
                    memcpy.append((r.start, r.end, m.rank, 1, 0, r.stream, r.corr, gpid, r.nbytes, 2, None, 2, 3))
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * 28)})", kernels)
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
            "returnValue) VALUES (?, ?, ?, ?, ?, ?, ?)",
            runtime,
        )
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, greenContextId, streamId, "
            "correlationId, globalPid, bytes, copyKind, deprecatedSrcId, srcKind, dstKind) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            memcpy,
        )
        con.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, category, color, text, globalTid, endGlobalTid, "
            "textId, domainId) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            nvtx,
        )
        counts["kernels"] += len(kernels)
        counts["runtime"] += len(runtime)
        counts["nvtx"] += len(nvtx)
        counts["events"] += len(kernels) + len(runtime) + len(nvtx) + len(memcpy)
        if step % 20 == 0:
            con.commit()
    counts["steps"] = step
    # The template's session counts from 0 and lasts seconds; the events are on the target's clock: make the
    # session span them, else every range ends after the session's stop and reads as never closed.
    con.execute(
        "UPDATE ANALYSIS_DETAILS SET startTime = s.lo - 1000, stopTime = s.hi + 1000, duration = s.hi - s.lo + 2000 "
        'FROM (SELECT min(start) AS lo, max("end") AS hi FROM NVTX_EVENTS) s'
    )
    con.commit()
    con.close()
    counts["bytes"] = path.stat().st_size
    return counts


# ---------------------------------------------------------------------------------------------------------
# Command line


def kineto_files(out: Path, size: int, ranks: int, gzip_level: int, layers: int, seed: int) -> Iterator[Path]:
    """Write `ranks` files of size/ranks bytes each into directory `out`; yield their paths."""
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".pt.trace.json.gz" if gzip_level else ".pt.trace.json"
    for rank in range(ranks):
        path = out / f"rank-{rank}{suffix}"
        write_kineto(path, size // ranks, rank, ranks, layers, seed, gzip_level)
        yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["kineto", "nsys"])
    parser.add_argument("--size", default="100MB", help="total uncompressed size (Kineto) or file size (nsys)")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--gzip", action="store_true", help="Kineto: write .json.gz")
    parser.add_argument("--gzip-level", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="directory (kineto) or .sqlite file (nsys)")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    if args.kind == "kineto":
        level = args.gzip_level if args.gzip else 0
        for path in kineto_files(args.out, size, args.ranks, level, args.layers, args.seed):
            print(path)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        print(write_nsys(args.out, size, args.ranks, args.layers, args.seed), file=sys.stderr)
        print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
