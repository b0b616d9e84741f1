#!/usr/bin/env python3
"""Record sample GPU traces of a small mixture-of-experts decoder at decode batch 1.

The model is a DeepSeek-like toy: token embedding, ``--layers`` decoder layers in
``model.layers`` (layer 0 a dense SwiGLU MLP, the others a top-2-of-4 MoE block
plus a shared expert), final RMSNorm, LM head and greedy argmax.  Weights are
seeded random numbers; the output tokens mean nothing.  One decode step is one
token.

Three execution paths:

* ``eager``    plain eager PyTorch; each layer call wrapped in
               ``record_function("model.layers.N")`` and an NVTX range of the
               same name, each step in an NVTX range ``decode_step_N`` (and, under
               the PyTorch profiler, ``ProfilerStep#N``).
* ``compiled`` each decoder layer compiled separately with ``torch.compile``
               (Inductor, fused Triton kernels), called from the same Python
               loop with the same per-layer annotations.
* ``graph``    the same compiled per-layer code for a whole step captured once
               into a ``torch.cuda.CUDAGraph`` and replayed each step; only the
               step-level ranges exist (annotations inside a graph do not fire
               on replay).

Profilers (one per process, since CUPTI allows one subscriber):

* ``--profiler torch``  writes ``<path>.pt.trace.json.gz`` (Kineto chrome trace)
* ``--profiler nsys``   brackets the measured steps with
                        ``torch.cuda.profiler.start()/stop()``; run it under
                        ``nsys profile --capture-range=cudaProfilerApi``, one
                        path per process (see generate.sh).
* ``--profiler none``   just runs the steps (a smoke test).

Usage::

    python sample_traces/generate.py --out DIR [--paths eager,compiled,graph] \
        [--profiler torch|nsys|none] [--warmup 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------

CONFIG = dict(
    vocab=32000,
    hidden=1024,
    heads=8,
    max_len=512,  # static KV-cache length
    dense_inter=2048,  # layer 0's dense SwiGLU MLP
    experts=4,
    top_k=2,
    expert_inter=512,
    shared_inter=512,
    rope_theta=10000.0,
    eps=1e-6,
)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Multi-head attention over a preallocated static KV cache (batch 1)."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden"]
        self.n_heads = cfg["heads"]
        self.head_dim = h // self.n_heads
        self.max_len = cfg["max_len"]
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        shape = (1, self.n_heads, self.max_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        t = torch.arange(self.max_len).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("rope_cos", emb.cos(), persistent=False)
        self.register_buffer("rope_sin", emb.sin(), persistent=False)
        self.register_buffer("positions", torch.arange(self.max_len), persistent=False)

    def forward(self, x, pos):
        # x: [T=1, hidden]; pos: [1] int64 on device (no host sync anywhere)
        T = x.shape[0]
        q = self.q_proj(x).view(1, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(1, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(1, T, self.n_heads, self.head_dim).transpose(1, 2)
        cos = self.rope_cos.index_select(0, pos).to(x.dtype)  # [1, D]
        sin = self.rope_sin.index_select(0, pos).to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # append to the cache at position `pos` (static shapes)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        mask = (self.positions <= pos).view(1, 1, 1, self.max_len)
        o = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        o = o.transpose(1, 2).reshape(T, self.n_heads * self.head_dim)
        return self.o_proj(o)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Top-k routed experts with static shapes: gather the selected experts'
    weights by the top-k indices and use bmm (no data-dependent control flow,
    no host syncs), plus an always-on shared expert."""

    def __init__(self, cfg):
        super().__init__()
        h, e, i = cfg["hidden"], cfg["experts"], cfg["expert_inter"]
        self.top_k = cfg["top_k"]
        self.gate = nn.Linear(h, e, bias=False)  # router
        s = 1.0 / math.sqrt(h)
        self.w_gate = nn.Parameter(torch.randn(e, h, i) * s)
        self.w_up = nn.Parameter(torch.randn(e, h, i) * s)
        self.w_down = nn.Parameter(torch.randn(e, i, h) / math.sqrt(i))
        self.shared_expert = SwiGLU(h, cfg["shared_inter"])

    def forward(self, x):
        return self.routed(x) + self.shared_expert(x)

    def routed(self, x):
        """The routed experts' output (without the shared expert)."""
        T, H = x.shape
        k = self.top_k
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        topw, topi = torch.topk(probs, k, dim=-1)  # [T, k]
        topw = (topw / topw.sum(-1, keepdim=True)).to(x.dtype)
        sel = topi.reshape(-1)  # [T*k]
        wg = self.w_gate.index_select(0, sel)  # [T*k, H, I]
        wu = self.w_up.index_select(0, sel)
        wd = self.w_down.index_select(0, sel)  # [T*k, I, H]
        xe = x.repeat_interleave(k, dim=0).unsqueeze(1)  # [T*k, 1, H]
        hgl = F.silu(torch.bmm(xe, wg)) * torch.bmm(xe, wu)  # [T*k, 1, I]
        y = torch.bmm(hgl, wd).view(T, k, H)
        return (y * topw.unsqueeze(-1)).sum(1)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, dense: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden"], cfg["eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden"], cfg["eps"])
        self.mlp = SwiGLU(cfg["hidden"], cfg["dense_inter"]) if dense else MoE(cfg)

    def forward(self, x, pos):
        x = x + self.self_attn(self.input_layernorm(x), pos)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class Model(nn.Module):
    def __init__(self, cfg, n_layers: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["hidden"])
        self.layers = nn.ModuleList([DecoderLayer(cfg, dense=(i == 0)) for i in range(n_layers)])
        self.norm = RMSNorm(cfg["hidden"], cfg["eps"])


class MoEForCausalLM(nn.Module):
    """Module names: model.embed_tokens, model.layers.0 ... model.layers.N-1,
    model.norm, lm_head."""

    def __init__(self, cfg, n_layers: int):
        super().__init__()
        self.model = Model(cfg, n_layers)
        self.lm_head = nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)


# ----------------------------------------------------------------------------
# Decode step
# ----------------------------------------------------------------------------


class Decoder:
    """Holds static input buffers (token, position) so that one step can be
    captured into a CUDA graph and replayed; the step writes the next token and
    position back into the same buffers."""

    def __init__(self, lm: MoEForCausalLM, device):
        self.lm = lm
        self.tok = torch.zeros(1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)

    def reset(self, first_token: int = 1):
        self.tok.fill_(first_token)
        self.pos.zero_()

    def step(self, annotate: bool = True):
        m = self.lm.model
        x = m.embed_tokens(self.tok)  # [1, hidden]
        for i, layer in enumerate(m.layers):
            if annotate:
                name = f"model.layers.{i}"
                nvtx_push(name)
                with torch.profiler.record_function(name):
                    x = layer(x, self.pos)
                nvtx_pop()
            else:
                x = layer(x, self.pos)
        x = m.norm(x)
        logits = self.lm.lm_head(x)
        nxt = torch.argmax(logits, dim=-1)  # greedy sampling, stays on device
        self.tok.copy_(nxt)
        self.pos.add_(1)
        return nxt


def build(args, device):
    torch.manual_seed(args.seed)
    lm = MoEForCausalLM(CONFIG, args.layers)
    # random init scaled so activations stay finite in bf16
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                continue
            if p.dim() == 2 and "w_" not in name:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    lm = lm.to(device=device, dtype=torch.bfloat16).eval()
    return lm


# ----------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------


_USE_CUDA = True


def nvtx_push(name):
    if _USE_CUDA:
        torch.cuda.nvtx.range_push(name)


def nvtx_pop():
    if _USE_CUDA:
        torch.cuda.nvtx.range_pop()


def sync():
    if _USE_CUDA:
        torch.cuda.synchronize()


def log(msg):
    print(f"[generate {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def nvtx_step(n):
    return _NvtxRange(f"decode_step_{n}")


class _NvtxRange:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        nvtx_push(self.name)

    def __exit__(self, *exc):
        nvtx_pop()


def prepare_path(path, args, device):
    """Return (decoder, run_one_step) for one execution path, warmed up."""
    lm = build(args, device)
    dec = Decoder(lm, device)
    dec.reset()
    if path in ("compiled", "graph"):
        for layer in lm.model.layers:
            # nn.Module.compile() compiles in place, so module names stay
            # model.layers.N (torch.compile(layer) would add "_orig_mod").
            layer.compile(mode=args.compile_mode, fullgraph=True)
    if path in ("eager", "compiled"):
        t0 = time.time()
        for _ in range(args.warmup):
            dec.step(annotate=True)
        sync()
        log(f"{path}: {args.warmup} warm-up steps in {time.time() - t0:.1f}s")

        def run_one():
            dec.step(annotate=True)

        return dec, run_one

    assert path == "graph"
    if args.profiler == "torch":
        # Kineto must be initialised before a CUDA graph is captured, or the
        # replayed kernels can go missing / error (pytorch/pytorch#75504).
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ):
            pass
    t0 = time.time()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(max(args.warmup, 3)):  # compile + autotune outside the graph
            dec.step(annotate=False)
    torch.cuda.current_stream().wait_stream(s)
    sync()
    log(f"graph: side-stream warm-up in {time.time() - t0:.1f}s")
    dec.reset()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dec.step(annotate=False)
    sync()
    dec.reset()
    for _ in range(args.warmup):  # warm-up replays
        g.replay()
    sync()
    log(f"graph: captured one step; {args.warmup} warm-up replays done")
    dec._graph = g  # keep alive

    def run_one():
        g.replay()

    return dec, run_one


def record_torch(path, run_one, args, out_dir):
    from torch.profiler import ProfilerActivity, profile, schedule

    trace_json = os.path.join(out_dir, f"{path}.pt.trace.json")
    sched = schedule(wait=0, warmup=1, active=args.steps, repeat=1)
    done = {}

    def on_ready(prof):
        prof.export_chrome_trace(trace_json)
        done["ok"] = True

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=sched,
        on_trace_ready=on_ready,
        record_shapes=False,
    ) as prof:
        for n in range(1 + args.steps):
            with nvtx_step(n):
                run_one()
            sync()
            prof.step()
    assert done.get("ok"), "profiler trace was not written"
    gz = trace_json + ".gz"
    with open(trace_json, "rb") as fi, gzip.open(gz, "wb", compresslevel=9) as fo:
        shutil.copyfileobj(fi, fo)
    os.remove(trace_json)
    log(f"{path}: wrote {gz} ({os.path.getsize(gz)} bytes)")


def record_nsys(path, run_one, args):
    sync()
    torch.cuda.profiler.start()
    for n in range(args.steps):
        with nvtx_step(n):
            run_one()
        sync()
    torch.cuda.profiler.stop()
    log(f"{path}: {args.steps} steps recorded between cudaProfilerStart/Stop")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--paths", default="eager,compiled,graph")
    p.add_argument("--profiler", choices=["torch", "nsys", "none"], default="torch")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps before the measured ones")
    p.add_argument("--steps", type=int, default=5, help="measured decode steps")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--compile-mode", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--world-size", type=int, default=1, help="only 1 (tensor parallelism: generate_tp.py)")
    args = p.parse_args(argv)
    if args.world_size != 1:
        p.error("--world-size other than 1: use sample_traces/generate_tp.py")
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    for x in paths:
        if x not in ("eager", "compiled", "graph"):
            p.error(f"unknown path {x!r}")
    if args.profiler == "nsys" and len(paths) > 1:
        log("warning: with --capture-range-end=stop nsys records only the first path")
    os.makedirs(args.out, exist_ok=True)
    device = torch.device(args.device)
    global _USE_CUDA
    _USE_CUDA = device.type == "cuda"
    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    torch._dynamo.config.accumulated_cache_size_limit = max(512, torch._dynamo.config.accumulated_cache_size_limit)

    meta_file = os.path.join(args.out, f"meta.{args.profiler}.json")
    meta = dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        config=CONFIG,
        layers=args.layers,
        warmup=args.warmup,
        steps=args.steps,
        compile_mode=args.compile_mode,
        seed=args.seed,
        runs={},
    )
    if os.path.exists(meta_file):  # nsys runs one path per process: merge
        with open(meta_file) as f:
            meta["runs"] = json.load(f).get("runs", {})
    if device.type == "cuda":
        meta["device"] = torch.cuda.get_device_name(device)
    try:
        import triton

        meta["triton"] = triton.__version__
    except Exception:  # pragma: no cover
        pass

    with torch.no_grad():
        for path in paths:
            dec, run_one = prepare_path(path, args, device)
            if args.profiler == "torch":
                record_torch(path, run_one, args, args.out)
            elif args.profiler == "nsys":
                record_nsys(path, run_one, args)
            else:
                for n in range(args.steps):
                    with nvtx_step(n):
                        run_one()
                sync()
            meta["runs"][path] = dict(argv=sys.argv, last_token=int(dec.tok.item()), last_pos=int(dec.pos.item()))
            log(f"{path}: last token {int(dec.tok.item())}, pos {int(dec.pos.item())}")
            del dec, run_one
            (torch.cuda.empty_cache() if _USE_CUDA else None)
    with open(meta_file, "w") as f:
        json.dump(meta, f, indent=1, default=str)


if __name__ == "__main__":
    main()
