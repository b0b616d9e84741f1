#!/usr/bin/env python3
"""Record tensor-parallel (TP=2) sample traces of generate.py's MoE decoder, with NCCL all-reduces.

One process per GPU (``torch.multiprocessing.spawn``), NCCL.  The model, its seeded weights and the decode
loop come from ``generate.py`` (imported, not copied); each rank builds the full model from the same seed and
keeps its shard:

* attention: 4 of the 8 heads per rank (q/k/v rows, o-proj columns, the KV cache of those heads); the o-proj
  output is a partial sum, all-reduced;
* layer 0's dense SwiGLU MLP: half of the intermediate dim (2048 -> 1024) per rank; all-reduced;
* MoE layers: the routed experts' intermediate dim halved (512 -> 256 per expert); the routed output is a
  partial sum, all-reduced.  The router is replicated, and so is the small shared expert (intermediate 512),
  which each rank computes in full: its output needs no all-reduce and is added after it.
* embedding, final norm and LM head are replicated.

So each decoder layer runs two all-reduces (bf16, 1 x 1024 elements = 2 KiB): after attention and after the
MLP/MoE block.  Two paths, the same model and the same kernels:

* ``tp_default``  ``dist.all_reduce(t)`` (synchronous): the compute stream waits for every all-reduce before it
                  goes on, so all communication is exposed.
* ``tp_overlap``  in the MoE layers the routed experts' all-reduce is issued with ``async_op=True`` (NCCL's own
                  stream), the shared expert is computed on the compute stream meanwhile, then ``work.wait()``
                  and the add.  Attention's and layer 0's all-reduces stay synchronous (at decode batch 1
                  nothing independent of them is left to compute).  Same operations on the same values in the
                  same order as tp_default, so the tokens are bit-identical (checked at the end).

Host head start (``--head-start-ms``, on CUDA): eager decode at batch 1 is bound by the Python host (tens of
us per op under a profiler, 1-5 us per kernel), so the GPU would run each kernel as soon as it is launched and
an all-reduce would finish before the host got to launch the next chunk: nothing could overlap.  Each step
therefore starts with one ``torch.cuda._sleep`` spin kernel (ATen ``spin_kernel``, outside the layers, default
40 ms, more than the host needs to launch a step) while the host queues the whole step behind it; the step
then runs on the GPU back to back, as under a CUDA graph or a fast serving loop.  ``--head-start-ms 0`` turns
it off.  (Spins of 76-86 ms, tried first, made the first all-reduces after them take 100-300 us on both ranks
at once in every step; after 41 ms that happened once in 8 (step, rank) pairs.)

Annotations as in generate.py: ``record_function`` + NVTX ``model.layers.N`` per layer, NVTX
``decode_step_N`` per step, ``ProfilerStep#N`` under the PyTorch profiler.

Outputs (``--out DIR``):

* ``--profiler torch``: ``DIR/<path>/rank-<r>.pt.trace.json.gz`` (one Kineto trace per rank; the profiler
  writes ``distributedInfo`` with the rank since the process group exists) for every path, one process per rank.
* ``--profiler nsys``: brackets the measured steps of one path with ``cudaProfilerStart/Stop`` on every rank
  (after a host barrier); run under ``nsys profile --capture-range=cudaProfilerApi`` (see generate_tp.sh).
* ``--profiler none``: just runs.
* ``DIR/meta.tp.<profiler>.json``: config, arguments, NCCL version, tokens per path.

CPU smoke test (gloo, world size 2)::

    python sample_traces/generate_tp.py --device cpu --profiler none --out /tmp/tp --layers 2 --vocab 512
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate as g1  # the one-GPU generator: model, decoder, profiler helpers

PATHS = ("tp_default", "tp_overlap")


def log(msg: str) -> None:
    rank = dist.get_rank() if dist.is_initialized() else "-"
    print(f"[generate_tp {time.strftime('%H:%M:%S')} rank {rank}] {msg}", flush=True)


# ----------------------------------------------------------------------------
# Sharding (in place, on the full CPU model; forward methods stay generate.py's)
# ----------------------------------------------------------------------------


def _linear(weight: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    lin.weight = nn.Parameter(weight.contiguous().clone())
    return lin


def _part(n: int, rank: int, world: int) -> slice:
    assert n % world == 0, f"{n} is not divisible by the world size {world}"
    k = n // world
    return slice(rank * k, (rank + 1) * k)


def shard_attention(a: g1.Attention, rank: int, world: int) -> None:
    """Keep this rank's heads; Attention.forward then returns this rank's partial o-proj output."""
    heads = _part(a.n_heads, rank, world)
    cols = slice(heads.start * a.head_dim, heads.stop * a.head_dim)
    a.q_proj = _linear(a.q_proj.weight[cols])
    a.k_proj = _linear(a.k_proj.weight[cols])
    a.v_proj = _linear(a.v_proj.weight[cols])
    a.o_proj = _linear(a.o_proj.weight[:, cols])
    a.k_cache = a.k_cache[:, heads].contiguous().clone()
    a.v_cache = a.v_cache[:, heads].contiguous().clone()
    a.n_heads = heads.stop - heads.start


def shard_swiglu(m: g1.SwiGLU, rank: int, world: int) -> None:
    """Keep this rank's part of the intermediate dim; forward then returns a partial sum."""
    part = _part(m.gate_proj.weight.shape[0], rank, world)
    m.gate_proj = _linear(m.gate_proj.weight[part])
    m.up_proj = _linear(m.up_proj.weight[part])
    m.down_proj = _linear(m.down_proj.weight[:, part])


def shard_moe(m: g1.MoE, rank: int, world: int) -> None:
    """Routed experts: this rank's part of each expert's intermediate dim (routed() returns a partial sum).
    Router and shared expert: replicated."""
    part = _part(m.w_gate.shape[2], rank, world)
    m.w_gate = nn.Parameter(m.w_gate.data[:, :, part].contiguous().clone())
    m.w_up = nn.Parameter(m.w_up.data[:, :, part].contiguous().clone())
    m.w_down = nn.Parameter(m.w_down.data[:, part, :].contiguous().clone())


class TPDecoderLayer(g1.DecoderLayer):
    """generate.DecoderLayer with the all-reduces; instances are re-classed in place (names stay model.layers.N)."""

    overlap: bool = False

    def forward(self, x, pos):
        h = self.self_attn(self.input_layernorm(x), pos)
        dist.all_reduce(h)  # attention: partial o-proj sums
        x = x + h
        hn = self.post_attention_layernorm(x)
        if isinstance(self.mlp, g1.MoE):
            r = self.mlp.routed(hn)
            if self.overlap:
                work = dist.all_reduce(r, async_op=True)  # on NCCL's stream, while the shared expert runs
                s = self.mlp.shared_expert(hn)
                work.wait()  # the compute stream waits; the host does not
            else:
                dist.all_reduce(r)
                s = self.mlp.shared_expert(hn)
            y = r + s
        else:
            y = self.mlp(hn)
            dist.all_reduce(y)  # dense MLP: partial down-proj sums
        return x + y


def build_tp(args, device: torch.device, rank: int, world: int) -> g1.MoEForCausalLM:
    """The full seeded model of generate.py (built on the CPU), sharded for this rank, then moved to device."""
    lm = g1.build(args, torch.device("cpu"))
    for layer in lm.model.layers:
        shard_attention(layer.self_attn, rank, world)
        if isinstance(layer.mlp, g1.MoE):
            shard_moe(layer.mlp, rank, world)
        else:
            shard_swiglu(layer.mlp, rank, world)
        layer.__class__ = TPDecoderLayer
    return lm.to(device)


def set_path(lm: g1.MoEForCausalLM, path: str) -> None:
    for layer in lm.model.layers:
        layer.overlap = path == "tp_overlap"


# ----------------------------------------------------------------------------
# Host head start
# ----------------------------------------------------------------------------


def spin_cycles_per_ms() -> float:
    """GPU clock cycles per millisecond as torch.cuda._sleep counts them (measured with CUDA events)."""
    n = 20_000_000
    torch.cuda._sleep(n // 10)  # warm-up
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(n)
    e1.record()
    torch.cuda.synchronize()
    return n / e0.elapsed_time(e1)


def max_over_ranks(value: float, group) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


# ----------------------------------------------------------------------------
# Worker
# ----------------------------------------------------------------------------


def prepare(path: str, lm, dec: g1.Decoder, args, state: dict):
    """Warm up one path; return run_one() (one annotated decode step, with the head start spin if any)."""
    set_path(lm, path)
    dec.reset()
    cuda = state["cuda"]
    host_s = 0.0
    for _ in range(args.warmup):
        g1.sync()
        dist.barrier(group=state["host_group"])
        t0 = time.perf_counter()
        dec.step(annotate=True)
        host_s = time.perf_counter() - t0  # host time of the last warm-up step (the launches only)
        g1.sync()
    spin = 0
    host_ms = max_over_ranks(host_s * 1e3, state["host_group"])
    state.setdefault("head_start", {})[path] = dict(warmup_host_ms=round(host_ms, 3), spin_ms=args.head_start_ms)
    log(f"{path}: warm-up step host time {host_ms:.2f} ms (max over ranks); head start {args.head_start_ms} ms")
    if cuda and args.head_start_ms > 0:
        spin = int(args.head_start_ms * state["cycles_per_ms"])

    def run_one():
        if spin:
            torch.cuda._sleep(spin)
        dec.step(annotate=True)

    return run_one


def record_nsys(path: str, run_one, args, state: dict) -> None:
    """Like generate.record_nsys, with host barriers so that both ranks start and stop together."""
    g1.sync()
    dist.barrier(group=state["host_group"])
    torch.cuda.profiler.start()
    for n in range(args.steps):
        with g1.nvtx_step(n):
            run_one()
        g1.sync()
    dist.barrier(group=state["host_group"])
    torch.cuda.profiler.stop()
    time.sleep(1.0)  # nsys ends the capture asynchronously: launch nothing more until it has
    dist.barrier(group=state["host_group"])
    log(f"{path}: {args.steps} steps recorded between cudaProfilerStart/Stop")


def tokens(dec: g1.Decoder, n: int) -> list[int]:
    """n unannotated, unprofiled decode steps from a reset; the greedy tokens."""
    dec.reset()
    out = []
    for _ in range(n):
        out.append(int(dec.step(annotate=False).item()))
    return out


def worker(rank: int, args) -> None:
    world = args.world_size
    cuda = args.device == "cuda"
    if args.vocab:  # spawned processes import generate.py afresh
        g1.CONFIG["vocab"] = args.vocab
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    if cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
        host_group = dist.new_group(backend="gloo")  # CPU-only barriers: no kernel in the traces
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
        host_group = dist.group.WORLD
    g1._USE_CUDA = cuda
    state: dict = {"cuda": cuda, "host_group": host_group}
    if cuda:
        state["cycles_per_ms"] = spin_cycles_per_ms()
        log(f"{torch.cuda.get_device_name(device)}; torch._sleep: {state['cycles_per_ms'] / 1e3:.0f} cycles/us")
    paths = args.paths
    meta = dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        nccl=".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        device=torch.cuda.get_device_name(device) if cuda else "cpu",
        config=g1.CONFIG,
        layers=args.layers,
        world_size=world,
        warmup=args.warmup,
        steps=args.steps,
        head_start_ms=args.head_start_ms,
        seed=args.seed,
        argv=sys.argv,
        runs={},
    )
    with torch.no_grad():
        lm = build_tp(args, device, rank, world)
        dec = g1.Decoder(lm, device)
        # the process group's communicators are set up here, outside any recorded range
        t = torch.ones(1, device=device)
        dist.all_reduce(t)
        g1.sync()
        for path in paths:
            run_one = prepare(path, lm, dec, args, state)
            if args.profiler == "torch":
                out = os.path.join(args.out, path)
                os.makedirs(out, exist_ok=True)
                g1.record_torch(f"rank-{rank}", run_one, args, out)
            elif args.profiler == "nsys":
                record_nsys(path, run_one, args, state)
            else:
                for n in range(args.steps):
                    with g1.nvtx_step(n):
                        run_one()
                    g1.sync()
            meta["runs"][path] = dict(last_token=int(dec.tok.item()), last_pos=int(dec.pos.item()))
            log(f"{path}: last token {int(dec.tok.item())}, pos {int(dec.pos.item())}")
        # tokens of every path from a reset, unprofiled: the paths must agree token for token
        n_check = args.warmup + 1 + args.steps
        seqs = {}
        for path in paths:
            set_path(lm, path)
            seqs[path] = tokens(dec, n_check)
        same = all(s == seqs[paths[0]] for s in seqs.values())
        gathered: list = [None] * world
        dist.all_gather_object(gathered, seqs, group=host_group)
        same_ranks = all(g == gathered[0] for g in gathered)
        meta["tokens"] = seqs
        meta["tokens_agree_across_paths"] = same
        meta["tokens_agree_across_ranks"] = same_ranks
        log(f"tokens ({n_check} steps): {seqs}; paths agree: {same}; ranks agree: {same_ranks}")
        if rank == 0 and args.check_single:
            ref = g1.Decoder(g1.build(args, device), device)  # the unsharded model, one GPU
            meta["tokens_single_gpu"] = tokens(ref, n_check)
            log(f"unsharded model on one device: {meta['tokens_single_gpu']}")
        meta["head_start_per_path"] = state.get("head_start")
    if rank == 0:
        meta_file = os.path.join(args.out, f"meta.tp.{args.profiler}.json")
        if os.path.exists(meta_file):  # nsys runs one path per process: merge
            with open(meta_file) as f:
                old = json.load(f)
            for key in ("runs", "tokens", "head_start_per_path"):
                meta[key] = {**old.get(key, {}), **meta[key]}
            meta["tokens_agree_across_paths"] = len({tuple(t) for t in meta["tokens"].values()}) == 1
        with open(meta_file, "w") as f:
            json.dump(meta, f, indent=1, default=str)
    dist.barrier(group=host_group)
    dist.destroy_process_group()
    if not (same and same_ranks):
        raise SystemExit(f"rank {rank}: tokens differ between paths or ranks")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--profiler", choices=["torch", "nsys", "none"], default="torch")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps before the measured ones")
    p.add_argument("--steps", type=int, default=4, help="measured decode steps")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=None, help="override CONFIG['vocab'] (CPU smoke tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--head-start-ms", type=float, default=40.0, help="GPU spin at the start of each step (0: none)")
    p.add_argument("--check-single", action="store_true", help="also decode with the unsharded model on rank 0")
    args = p.parse_args(argv)
    args.paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    for x in args.paths:
        if x not in PATHS:
            p.error(f"unknown path {x!r}")
    if args.profiler == "nsys" and len(args.paths) > 1:
        p.error("--profiler nsys records one path per process")
    if args.vocab:
        g1.CONFIG["vocab"] = args.vocab
    if args.device == "cuda" and torch.cuda.device_count() < args.world_size:
        p.error(f"{args.world_size} GPUs needed, {torch.cuda.device_count()} found")
    args.compile_mode = "default"  # read by nothing here; generate.build takes the same args object
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(worker, args=(args,), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
