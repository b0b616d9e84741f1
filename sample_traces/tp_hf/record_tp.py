"""Record Hugging Face transformers models decoding with tensor parallelism, one process per GPU under torchrun.

Run as `python -m torch.distributed.run --nproc-per-node 2 record_tp.py --out DIR` (record_tp.sh does it, with nsys
too). The models, their configs, the decode loop, the annotated twin and the CUDA-graph capture are those of the
truth corpus (../corpus/record.py, imported, not copied): small configs, bf16, seeded random weights, 6 decoder
layers, decode batch 4 after a 16-token prompt over a static KV cache. What this script adds is the parallelism:

  llama, qwen3moe   eager / compiled / graph: transformers' own tensor parallelism. Rank 0 saves the seeded random
                    weights once (`save_pretrained`) and every rank loads them with
                    `from_pretrained(..., distributed_config=DistributedConfig(tp_plan="auto"))` (the non-deprecated
                    spelling of `tp_plan="auto"`; transformers 5.17 shards only in `from_pretrained`, not in
                    `from_config`). The model's `base_model_tp_plan` splits q/k/v and gate/up (and the experts'
                    packed gate_up) by columns and o/down by rows: one all-reduce after attention and one after the
                    MLP or MoE block of every layer, plus the LM head's all-gather after the layers.
                    `compiled`: each decoder layer through torch.compile; `graph`: the compiled layers and the rest
                    of one decode step captured into one CUDA graph (collectives included), replayed per step.
  llama             sp: PyTorch's DTensor tensor + sequence parallelism (torch.distributed.tensor.parallel) on each
                    decoder layer: the norms run on half the sequence each; an all-gather before attention and
                    before the MLP, a reduce-scatter after each, and an all-gather of the layer's output. Decoding
                    one token cannot be split along the sequence, so these steps are prefill forward passes
                    (batch 2, 64 tokens).
                    asynctp: the same model, each layer compiled with `torch._inductor.config._micro_pipeline_tp`
                    (async TP: Inductor fuses the all-gather/matmul and matmul/reduce-scatter pairs over symmetric
                    memory); CUDA only.

Each recording is made twice, in the same process, as in the corpus: `bare` (no annotation) and `twin` (a
`model.layers.N` record_function + NVTX range per decoder layer from forward hooks, a `decode_step_N` /
`prefill_step_N` range per step). The twin's ranges are the truth for the layers of the bare trace.

Outputs (`--out DIR`):
  --profiler torch   DIR/MODEL_MODE_VARIANT/rank-R.pt.trace.json.gz: one Kineto trace per rank in one folder per
                     recording, so `traceview ingest DIR/MODEL_MODE_VARIANT` reads it as one run of N ranks.
  --profiler nsys    every rank brackets the recorded steps with cudaProfilerStart/Stop (after a host barrier); run
                     one recording per process under `nsys profile --capture-range=cudaProfilerApi` (record_tp.sh).
  --profiler none    just runs.
  DIR/meta.PROFILER.jsonl: one row per recording (rank 0): status, steps, layers, every rank's last tokens.
  --weights DIR      where the seeded weights are saved (default OUT/weights; delete it afterwards).

World size 1 (dry runs, one GPU or the CPU with gloo): transformers applies no plan when tp_size is 1, so the
same plan is installed with its own `apply_tensor_parallelism` on a one-rank device mesh: the DTensor forward code
runs, its collectives span one rank. On the CPU only `eager` and `sp` run (no CUDA graph, no async TP).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))
import record  # ../corpus/record.py: configs, Annotations, Decoder, compile_layers, record_decode

MODELS = ("llama", "qwen3moe")
MODES = ("eager", "compiled", "graph", "sp", "asynctp")
TP_MODES = ("eager", "compiled", "graph")  # transformers' tp_plan="auto"
SP_MODES = ("sp", "asynctp")  # PyTorch DTensor sequence parallelism (dense llama only)
CUDA_ONLY = ("graph", "asynctp")
# the model each mode runs: modes with the same build share it (in this order)
BUILDS = {"eager": "tp", "compiled": "tp-compiled", "graph": "tp-compiled", "sp": "sp", "asynctp": "asynctp"}
SP_BATCH, SP_PROMPT = 2, record.PREFILL_PROMPT


def log(msg: str) -> None:
    rank = dist.get_rank() if dist.is_initialized() else "-"
    print(f"[record_tp {time.strftime('%H:%M:%S')} rank {rank}] {msg}", flush=True)


# --- process group ------------------------------------------------------------------------------------------------


def init_process_group(device: str) -> dist.ProcessGroup:
    """NCCL on GPUs (one per process, LOCAL_RANK), gloo on the CPU; returns a gloo group for host-side barriers
    (they launch no kernel, so they leave nothing in the traces)."""
    if device == "cuda":
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        return dist.new_group(backend="gloo")
    dist.init_process_group("gloo")
    return dist.group.WORLD


def tp_mesh(device: str) -> DeviceMesh:
    return init_device_mesh(device, (dist.get_world_size(),))


# --- models -------------------------------------------------------------------------------------------------------


def checkpoint(name: str, weights: Path, host_group: dist.ProcessGroup) -> Path:
    """The corpus model's seeded random weights, saved once by rank 0, so every rank loads them through
    transformers' own sharding loader."""
    path = weights / name
    if dist.get_rank() == 0 and not (path / "config.json").exists():
        record.build(name, "cpu").save_pretrained(path)
    dist.barrier(group=host_group)
    return path


def build_tp(path: Path, device: str):
    """transformers' tensor parallelism with the model's own plan (tp_plan="auto")."""
    import transformers as tf
    from transformers.distributed import DistributedConfig

    if dist.get_world_size() > 1:
        model = tf.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.bfloat16, distributed_config=DistributedConfig(tp_plan="auto")
        )
    else:  # transformers skips a plan of one rank: install it on a one-rank mesh so the same code runs
        from transformers.distributed.tensor_parallel import apply_tensor_parallelism

        model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device)
        model = apply_tensor_parallelism(model, tp_mesh(device))
    return model.eval()


def sequence_parallel_plan() -> dict:
    """PyTorch's tensor + sequence parallel styles for one transformers decoder layer (dense, Llama-style).

    The layer's input (replicated) is cut along the sequence (a local slice, no communication); the norms and the
    residual adds run on that half; attention and the MLP all-gather it first and reduce-scatter their output; the
    layer's output is all-gathered again for the next layer, which transformers calls with a replicated tensor."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    return {
        "": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True),
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": Shard(1)}, desired_input_kwarg_layouts={"hidden_states": Replicate()}
        ),
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
    }


def build_sp(path: Path, device: str):
    """The same weights, unsharded by transformers, then DTensor tensor + sequence parallelism on every layer."""
    import transformers as tf
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module

    model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()
    mesh = tp_mesh(device)
    gather_output = PrepareModuleOutput(
        output_layouts=(Shard(1),), desired_output_layouts=(Replicate(),), use_local_output=True
    )
    for layer in model.model.layers:
        parallelize_module(layer, mesh, sequence_parallel_plan())
        parallelize_module(layer, mesh, gather_output)
    return model


def enable_async_tp(device: str) -> None:
    """Async TP: Inductor's micro-pipeline pass, over symmetric memory on the TP group (multicast stays off)."""
    import torch._inductor.config
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    torch._inductor.config._micro_pipeline_tp = True
    enable_symm_mem_for_group(tp_mesh(device).get_group().group_name)


def prepare(name: str, mode: str, args: argparse.Namespace, host_group: dist.ProcessGroup):
    """The model for one mode: built from the saved weights, parallelized, compiled where the mode says."""
    path = checkpoint(name, args.weights, host_group)
    if mode in TP_MODES:
        model = build_tp(path, args.device)
    else:
        model = build_sp(path, args.device)
        if mode == "asynctp":
            enable_async_tp(args.device)
    if mode in ("compiled", "graph", "asynctp"):
        record.compile_layers(model)
    return model


# --- recording ----------------------------------------------------------------------------------------------------


class RankRecorder(record.Recorder):
    """The corpus recorder, one process per rank: every rank starts and ends each recording together (host
    barriers), and writes its own Kineto trace OUT/NAME/rank-R.pt.trace.json.gz."""

    def __init__(self, kind: str, out: Path, host_group: dist.ProcessGroup) -> None:
        super().__init__(kind, out)
        self.host_group = host_group

    @contextlib.contextmanager
    def record(self, name: str) -> Iterator[None]:
        record.sync()
        dist.barrier(group=self.host_group)
        if self.kind == "torch":
            with torch.profiler.profile(activities=self._activities()) as prof:
                yield
                record.sync()
            folder = self.out / name
            folder.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(folder / f"rank-{dist.get_rank()}.pt.trace.json.gz"))
        elif self.kind == "nsys":
            torch.cuda.profiler.start()
            yield
            record.sync()
            dist.barrier(group=self.host_group)
            torch.cuda.profiler.stop()
            time.sleep(1.0)  # nsys ends the capture asynchronously: launch nothing more until it has
        else:
            yield
            record.sync()
        dist.barrier(group=self.host_group)


def record_prefill_steps(model, variant: str, rec: RankRecorder, args: argparse.Namespace, name: str) -> dict:
    """`--steps` forward passes over one prompt (no KV cache), each a `prefill_step_N` range in the twin."""
    generator = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, record.VOCAB, (SP_BATCH, SP_PROMPT), generator=generator).to(args.device)
    with torch.no_grad():
        for _ in range(args.warmup):
            model(input_ids=prompt, use_cache=False)
    twin = record.Annotations(model) if variant == "twin" else None
    try:
        with rec.record(name), torch.no_grad():
            for index in range(args.steps):
                with twin.step(f"prefill_step_{index}") if twin else contextlib.nullcontext():
                    out = model(input_ids=prompt, use_cache=False)
        return {"tokens": out.logits[:, -1].argmax(-1).tolist()}
    finally:
        if twin:
            twin.remove()


def record_one(model, mode: str, variant: str, rec: RankRecorder, args: argparse.Namespace, name: str) -> dict:
    if mode in SP_MODES:
        return record_prefill_steps(model, variant, rec, args, name)
    return record.record_decode(model, mode, variant, rec, args, name)


def record_row(model, model_name: str, mode: str, variant: str, rec: RankRecorder, args: argparse.Namespace) -> dict:
    """Make one recording; its row of the meta file (a failure is recorded, not raised: the others go on)."""
    name, began = f"{model_name}_{mode}_{variant}", time.time()
    try:
        info, status = record_one(model, mode, variant, rec, args, name), "ok"
    except Exception as exc:
        info, status = {}, f"failed: {type(exc).__name__}: {exc}"[:500]
        record.sync_quietly()
    return {
        "name": name,
        "model": model_name,
        "mode": mode,
        "variant": variant,
        "profiler": args.profiler,
        "world_size": dist.get_world_size(),
        "steps": args.steps,
        "layers": record.LAYERS,
        "status": status,
        "seconds": round(time.time() - began, 1),
        **tokens_of_every_rank(info, rec.host_group),
    }


def tokens_of_every_rank(info: dict, host_group: dist.ProcessGroup) -> dict:
    """Every rank's last tokens (tensor parallelism must give each rank the same ones)."""
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, info.get("tokens"), group=host_group)
    return {"tokens_per_rank": gathered, "ranks_agree": all(t == gathered[0] for t in gathered)}


def free_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def skipped(model_name: str, mode: str, device: str) -> bool:
    return (mode in SP_MODES and model_name != "llama") or (mode in CUDA_ONLY and device != "cuda")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profiler", choices=("torch", "nsys", "none"), default="torch")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--variant", choices=("bare", "twin", "both"), default="both")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--weights", type=Path, help="where rank 0 saves the seeded weights (default OUT/weights)")
    args = parser.parse_args()
    args.weights = args.weights or args.out / "weights"
    args.out.mkdir(parents=True, exist_ok=True)
    host_group = init_process_group(args.device)
    rank, world = dist.get_rank(), dist.get_world_size()
    log(f"world size {world}, device {args.device}, torch {torch.__version__}")
    rec = RankRecorder(args.profiler, args.out, host_group)
    variants = ("bare", "twin") if args.variant == "both" else (args.variant,)
    for model_name in args.models.split(","):
        model, built = None, None
        for mode in args.modes.split(","):
            if skipped(model_name, mode, args.device):
                continue
            if BUILDS[mode] != built:  # graph replays the compiled model's layers
                model = None
                free_memory(args.device)
                model, built = prepare(model_name, mode, args, host_group), BUILDS[mode]
            for variant in variants:
                row = record_row(model, model_name, mode, variant, rec, args)
                log(json.dumps(row))
                if rank == 0:
                    with (args.out / f"meta.{args.profiler}.jsonl").open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
    dist.barrier(group=host_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
