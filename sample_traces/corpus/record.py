"""Record the truth corpus: Hugging Face transformers models (built from a config, random weights) decoding on a GPU,
each run twice - bare (what a user hands to traceview: no layer annotations) and as an annotated twin (a forward
pre/post hook on every decoder layer opens a record_function and an NVTX range; step ranges around every forward).

The twin runs the same model on the same inputs in the same process right after the bare run, so both launch the
same kernels in the same order (checked by truth.py); the twin's annotations are the truth for the bare trace.

Models (small configs, bf16, seeded random weights; the model code is transformers' own):
  llama      LlamaForCausalLM, dense, 6 layers
  qwen3moe   Qwen3MoeForCausalLM, 6 MoE layers (8 experts, top 2)
  deepseekv3 DeepseekV3ForCausalLM, MLA attention, 2 dense layers then 4 MoE layers (first_k_dense_replace=2),
             the architecture of Kimi K2/K3
  gptoss     GptOssForCausalLM, 6 layers alternating sliding-window and full attention, MoE
  mixtral    MixtralForCausalLM, 6 MoE layers with transformers' eager expert loop (kernels vary with routing)
Held out (recorded on 2026-12-01 after the segmentation was written, to measure it on model code it was not
tuned on; eager, prefill, generate and graph, PyTorch profiler only):
  qwen2moe   Qwen2MoeForCausalLM, 6 MoE layers with a gated shared expert
  glm4moe    Glm4MoeForCausalLM (GLM-4.5), 1 dense layer then 5 MoE layers, sigmoid routing, shared expert
  gemma3     Gemma3ForCausalLM (text), layers 2 sliding-window : 1 full attention, four norms per layer
  phi3       Phi3ForCausalLM, fused qkv and gate_up projections
  lfm2       Lfm2ForCausalLM (Liquid), hybrid: 2 short-convolution layers : 1 attention layer

Modes:
  eager      plain eager decode with a static KV cache, `--steps` decode steps
  compiled   every decoder layer's forward compiled by torch.compile (Inductor, Triton kernels)
  graph      the compiled layers and the rest of one decode step captured into one CUDA graph, replayed per step
             (the twin captures with the hooks on; the capture is inside the twin's recorded range)
  prefill    one forward pass over a prompt (one step)
  generate   `model.generate()` (dynamic cache): a prefill then decode steps, transformers' own loop
  ro         the whole forward compiled as transformers' generate does it (`mode="reduce-overhead"`, fullgraph: CUDA
             graphs by Inductor's cudagraph trees); bare only - Inductor fuses across layer boundaries, so no twin
             has the same kernels (its truth is the number of steps and layers)

Usage: python record.py --out DIR --profiler torch|nsys|none [--models ...] [--modes ...] [--variant bare|twin|both]
Under nsys run one process per (model, mode, variant) with --capture-range=cudaProfilerApi: the recorded range is
bracketed by cudaProfilerStart/Stop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

MODELS = ("llama", "qwen3moe", "deepseekv3", "gptoss", "mixtral")
HELD_OUT = ("qwen2moe", "glm4moe", "gemma3", "phi3", "lfm2")
MODES = ("eager", "prefill", "generate", "compiled", "graph", "ro")
# transformers' eager expert loop syncs with the host (nonzero) and cannot be captured or compiled whole
SKIP = {"mixtral": {"compiled", "graph", "ro"}, "qwen3moe": {"ro"}, "gptoss": {"ro"}}
LAYERS = 6
BATCH = 4
PROMPT = 16
PREFILL_PROMPT = 64
CACHE = 64
VOCAB = 2048


def config(name: str):
    """A small config of each model family; the model code is transformers' own."""
    import transformers as tf

    common = dict(
        vocab_size=VOCAB,
        hidden_size=256,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        torch_dtype="bfloat16",
    )
    # Qwen-style MoE on every layer; DeepSeek-style routing (grouped top-k, shared expert) after dense first layers
    qwen_moe = dict(
        moe_intermediate_size=256, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[]
    )
    deepseek_moe = dict(
        intermediate_size=768,
        moe_intermediate_size=256,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
    )
    if name == "llama":
        return tf.LlamaConfig(intermediate_size=768, **common)
    if name == "qwen3moe":
        return tf.Qwen3MoeConfig(intermediate_size=512, head_dim=64, **qwen_moe, **common)
    if name == "deepseekv3":
        return tf.DeepseekV3Config(
            first_k_dense_replace=2,
            kv_lora_rank=64,
            q_lora_rank=96,
            qk_rope_head_dim=32,
            qk_nope_head_dim=32,
            v_head_dim=64,
            **deepseek_moe,
            **{**common, "num_key_value_heads": 4},
        )
    if name == "gptoss":
        return tf.GptOssConfig(
            intermediate_size=256, num_local_experts=8, num_experts_per_tok=2, head_dim=64, sliding_window=8, **common
        )
    if name == "qwen2moe":
        return tf.Qwen2MoeConfig(intermediate_size=512, shared_expert_intermediate_size=512, **qwen_moe, **common)
    if name == "glm4moe":
        return tf.Glm4MoeConfig(first_k_dense_replace=1, head_dim=64, **deepseek_moe, **common)
    if name == "gemma3":
        kinds = ["sliding_attention", "sliding_attention", "full_attention"] * (LAYERS // 3)
        return tf.Gemma3TextConfig(intermediate_size=768, head_dim=64, sliding_window=8, layer_types=kinds, **common)
    if name == "phi3":
        return tf.Phi3Config(intermediate_size=768, pad_token_id=0, **common)
    if name == "lfm2":
        kinds = ["conv", "conv", "full_attention"] * (LAYERS // 3)
        return tf.Lfm2Config(intermediate_size=768, layer_types=kinds, **common)
    if name == "mixtral":
        return tf.MixtralConfig(
            intermediate_size=256, num_local_experts=8, num_experts_per_tok=2, experts_implementation="eager", **common
        )
    raise ValueError(name)


def build(name: str, device: str):
    import transformers as tf

    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config(name), torch_dtype=torch.bfloat16)
    return model.to(device).eval()


class Annotations:
    """The twin's annotations: per decoder layer a record_function and an NVTX range, opened by a forward pre-hook
    and closed by a forward hook; `step(name)` brackets one forward pass the same way."""

    def __init__(
        self, model: torch.nn.Module, layers: list[torch.nn.Module] | None = None, prefix: str = "model.layers"
    ) -> None:
        self.handles: list[torch.utils.hooks.RemovableHandle] = []
        self.open: list[torch.autograd.profiler.record_function] = []
        for index, layer in enumerate(model.model.layers if layers is None else layers):
            name = f"{prefix}.{index}"
            self.handles.append(layer.register_forward_pre_hook(lambda *_, n=name: self._push(n)))
            self.handles.append(layer.register_forward_hook(lambda *_, n=name: self._pop()))

    def _push(self, name: str) -> None:
        record = torch.autograd.profiler.record_function(name)
        record.__enter__()
        self.open.append(record)
        if torch.cuda.is_available():
            torch.cuda.nvtx.range_push(name)

    def _pop(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.nvtx.range_pop()
        self.open.pop().__exit__(None, None, None)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._push(name)
        try:
            yield
        finally:
            self._pop()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class Decoder:
    """One decode step at a time over a static KV cache, with device-side inputs (so a step can be captured)."""

    def __init__(self, model: torch.nn.Module, device: str) -> None:
        import transformers as tf

        self.model = model
        self.cache = tf.StaticCache(config=model.config, max_cache_len=CACHE)
        generator = torch.Generator().manual_seed(1)
        prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=generator).to(device)
        self.ids = torch.zeros(BATCH, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        with torch.no_grad():
            out = model(
                input_ids=prompt,
                past_key_values=self.cache,
                cache_position=torch.arange(PROMPT, device=device),
                use_cache=True,
            )
        self.ids.copy_(out.logits[:, -1:].argmax(-1))
        self.position.fill_(PROMPT)

    def step(self) -> None:
        with torch.no_grad():
            out = self.model(
                input_ids=self.ids,
                past_key_values=self.cache,
                cache_position=self.position,
                position_ids=self.position.expand(BATCH, 1),
                use_cache=True,
            )
            self.ids.copy_(out.logits[:, -1:].argmax(-1))
            self.position.add_(1)


def compile_layers(model: torch.nn.Module) -> None:
    """Regional compilation: each decoder layer's forward through Inductor; hooks stay outside the compiled code.

    Each layer recompiles (its index is a constant), for the prompt and the decode shapes: with dynamo's default
    limit of 8 compilations per code object the later layers silently ran eager, so the limit is raised."""
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    for layer in model.model.layers:
        layer.forward = torch.compile(layer.forward, fullgraph=False)


def compile_whole(model: torch.nn.Module) -> None:
    """The whole forward, as transformers' generate compiles it for a static cache."""
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)


class Recorder:
    """The profiler around the recorded steps: torch.profiler (Kineto), nsys (cudaProfilerStart/Stop) or none."""

    def __init__(self, kind: str, out: Path, cpu: bool = True) -> None:
        self.kind = kind
        self.out = out
        self.cpu = cpu  # False: CUDA activities only (kernels, copies and the runtime calls that launch them)
        if kind == "torch" and torch.cuda.is_available():
            # Kineto must be initialised before a CUDA graph is captured (pytorch/pytorch#75504)
            with torch.profiler.profile(activities=self._activities()):
                pass

    def _activities(self) -> list[torch.profiler.ProfilerActivity]:
        acts = [torch.profiler.ProfilerActivity.CPU] if self.cpu or not torch.cuda.is_available() else []
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        return acts

    @contextlib.contextmanager
    def record(self, name: str) -> Iterator[None]:
        sync()
        if self.kind == "torch":
            with torch.profiler.profile(activities=self._activities()) as prof:
                yield
                sync()
            prof.export_chrome_trace(str(self.out / f"{name}.pt.trace.json"))
        elif self.kind == "nsys":
            torch.cuda.profiler.start()
            yield
            sync()
            torch.cuda.profiler.stop()
        else:
            yield
            sync()


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_steps(step: Callable[[], None], steps: int, twin: Annotations | None) -> None:
    for index in range(steps):
        with twin.step(f"decode_step_{index}") if twin else contextlib.nullcontext():
            step()


def record_decode(model, mode: str, variant: str, rec: Recorder, args: argparse.Namespace, name: str) -> dict:
    """eager / compiled / graph: warm up, then the recorded decode steps."""
    decoder = Decoder(model, args.device)
    twin = Annotations(model) if variant == "twin" else None
    try:
        if mode == "graph":
            return _record_graph(decoder, twin, rec, args, name)
        for _ in range(args.warmup + (mode == "ro")):  # cudagraph trees: warm-up, record, then replays
            decoder.step()
        with rec.record(name):
            run_steps(decoder.step, args.steps, twin)
        return {"tokens": decoder.ids[:, 0].tolist()}
    finally:
        if twin:
            twin.remove()


def _record_graph(
    decoder: Decoder, twin: Annotations | None, rec: Recorder, args: argparse.Namespace, name: str
) -> dict:
    """Warm up on a side stream, capture one step into a CUDA graph, replay it per step. The twin captures inside
    its recorded range with the hooks on (capture-time launches and graph nodes carry the layer ranges); the bare
    run captures before its range, as a serving engine does at start-up."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(args.warmup):
            decoder.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()

    def capture() -> None:
        with twin.step("capture") if twin else contextlib.nullcontext(), torch.cuda.graph(graph):
            decoder.step()

    if twin is None:
        capture()
        with rec.record(name):
            run_steps(graph.replay, args.steps, None)
    else:
        with rec.record(name):
            capture()
            sync()
            run_steps(graph.replay, args.steps, twin)
    return {"tokens": decoder.ids[:, 0].tolist()}


def record_prefill(model, variant: str, rec: Recorder, args: argparse.Namespace, name: str) -> dict:
    generator = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, VOCAB, (2, PREFILL_PROMPT), generator=generator).to(args.device)
    with torch.no_grad():
        model(input_ids=prompt)  # warm-up
    twin = Annotations(model) if variant == "twin" else None
    try:
        step = twin.step("prefill_step_0") if twin else contextlib.nullcontext()
        with rec.record(name), torch.no_grad(), step:
            out = model(input_ids=prompt)
        return {"tokens": out.logits[:, -1].argmax(-1).tolist()}
    finally:
        if twin:
            twin.remove()


def record_generate(model, variant: str, rec: Recorder, args: argparse.Namespace, name: str) -> dict:
    """transformers' own generate loop (greedy, dynamic cache): one prefill and `--steps` decode forwards."""
    generator = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=generator).to(args.device)
    kwargs = dict(
        max_new_tokens=args.steps + 1,
        min_new_tokens=args.steps + 1,
        do_sample=False,
        attention_mask=torch.ones_like(prompt),
        pad_token_id=0,
    )
    with torch.no_grad():
        model.generate(prompt, **kwargs)  # warm-up
    twin = Annotations(model) if variant == "twin" else None
    handles = []
    if twin:
        count = iter(range(10**6))
        steps: list[torch.autograd.profiler.record_function] = []

        def open_step(*_: object) -> None:
            steps.append(twin.step(f"forward_step_{next(count)}"))
            steps[-1].__enter__()

        def close_step(*_: object) -> None:
            steps.pop().__exit__(None, None, None)

        handles = [model.register_forward_pre_hook(open_step), model.register_forward_hook(close_step)]
    try:
        with rec.record(name), torch.no_grad():
            out = model.generate(prompt, **kwargs)
        return {"tokens": out[:, -1].tolist()}
    finally:
        for handle in handles:
            handle.remove()
        if twin:
            twin.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profiler", choices=("torch", "nsys", "none"), default="torch")
    parser.add_argument("--models", default=",".join(MODELS), help=f"held out: {','.join(HELD_OUT)}")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--variant", choices=("bare", "twin", "both"), default="both")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.profiler, args.out)
    variants = ("bare", "twin") if args.variant == "both" else (args.variant,)
    meta_path = args.out / f"meta.{args.profiler}.jsonl"
    for model_name in args.models.split(","):
        model, state = build(model_name, args.device), "eager"
        for mode in args.modes.split(","):
            if mode in SKIP.get(model_name, ()) or (mode in ("graph", "ro") and args.device == "cpu"):
                continue
            if mode in ("compiled", "graph") and state != "layers":
                model, state = build(model_name, args.device), "layers"
                compile_layers(model)
            if mode == "ro":
                model, state = build(model_name, args.device), "whole"
                compile_whole(model)
            for variant in variants:
                if mode == "ro" and variant == "twin":
                    continue
                name = f"{model_name}_{mode}_{variant}"
                began = time.time()
                try:
                    if mode in ("eager", "compiled", "graph", "ro"):
                        info = record_decode(model, mode, variant, rec, args, name)
                    elif mode == "prefill":
                        info = record_prefill(model, variant, rec, args, name)
                    else:
                        info = record_generate(model, variant, rec, args, name)
                    status = "ok"
                except Exception as exc:  # one failed recording must not lose the others
                    info, status = {}, f"failed: {type(exc).__name__}: {exc}"[:500]
                    sync_quietly()
                row = {
                    "name": name,
                    "model": model_name,
                    "mode": mode,
                    "variant": variant,
                    "profiler": args.profiler,
                    "steps": 1 if mode == "prefill" else args.steps + (1 if mode == "generate" else 0),
                    "layers": LAYERS,
                    "status": status,
                    "seconds": round(time.time() - began, 1),
                    **info,
                }
                print(json.dumps(row), flush=True)
                with meta_path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def sync_quietly() -> None:
    with contextlib.suppress(Exception):
        sync()


if __name__ == "__main__":
    sys.exit(main())
