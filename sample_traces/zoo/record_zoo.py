"""Record the zoo on a GPU: every variant of zoo.py, bare and as an annotated twin, and the twin's labels for the bare
trace (run-length step/layer per kernel with a digest of the kernel names; truth.py, which never imports traceview).

Modes (each a fresh prompt of the same seed, so that bare and twin launch the same kernels):
  decode    eager decode through transformers' own generation inputs (`prepare_inputs_for_generation`, the model's
            own cache): a prompt (not recorded), then `--steps` decode forwards recorded
  prefill   one forward over a 64-token prompt
  graph     one eager decode step over a static KV cache captured into a CUDA graph and replayed per step (models
            whose cache cannot be static, or whose forward syncs with the host, cannot be captured: skipped)
  compiled  every decoder layer's forward through torch.compile (Inductor), then as decode
The bare trace is what a user hands to traceview: no layer or step annotation. Under the PyTorch profiler it is
recorded with the CUDA activities only (kernels, copies and the runtime calls that launch them; the CPU operator
events are what makes traces large, and traceview's layers do not read them); the twin with the CPU activities too,
for its annotations. Under nsys (`--profiler nsys`, one process per recording, see record.sh) the bare run has no
NVTX range.

Usage:
  python record_zoo.py --out DIR [--archs a,b] [--variants slug,slug] [--modes decode,prefill,graph] [--jobs 12]
  python record_zoo.py --out DIR --worker ARCH ...   (one architecture's variants in this process; used by the above)
Output: DIR/torch/SLUG_MODE_bare.pt.trace.json.gz, DIR/labels/SLUG_MODE.json, DIR/summary.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "corpus")]

import zoo  # noqa: E402
from record import BATCH, CACHE, PREFILL_PROMPT, PROMPT  # noqa: E402 - sample_traces/corpus/record.py: same inputs

BATCH = zoo.BATCH or BATCH

MODES = ("decode", "prefill", "graph", "compiled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--archs", default="")
    parser.add_argument("--variants", default="", help="slugs (arch_name) to record; default all")
    parser.add_argument("--modes", default="decode,prefill,graph")
    parser.add_argument("--profiler", choices=("torch", "nsys"), default="torch")
    parser.add_argument("--variant-only", choices=("bare", "twin", "both"), default="both")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--timeout", type=int, default=240, help="seconds for one architecture's worker")
    parser.add_argument("--deadline", type=int, default=540, help="seconds for the whole run")
    parser.add_argument("--worker", default="")
    parser.add_argument("--label-nsys", default="", help="SLUG_MODE: label nsys/SLUG_MODE_bare.sqlite from its twin")
    args = parser.parse_args()
    for sub in ("torch", "labels", "twins", "nsys"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    if args.label_nsys:
        label_nsys(args.out, args.label_nsys)
    elif args.worker:
        work(args.worker, args)
    else:
        dispatch(args)


def dispatch(args: argparse.Namespace) -> None:
    """One worker process per architecture, `--jobs` at a time, each killed at `--timeout` or the deadline."""
    end = time.time() + args.deadline
    archs = [a for a in zoo.architectures() if not args.archs or a in args.archs.split(",")]
    if args.variants:
        archs = [a for a in archs if any(s.startswith(a + "_") for s in args.variants.split(","))]
    queue, running = list(archs), {}
    while queue or running:
        if time.time() > end - 20:  # no new worker this close to the deadline
            queue.clear()
        while queue and len(running) < args.jobs:
            arch = queue.pop(0)
            cmd = [sys.executable, __file__, "--worker", arch, *_passed(args)]
            with (args.out / f"worker.{arch}.log").open("w") as log:  # the child keeps its own descriptor
                running[arch] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.time())
        for arch, (proc, began) in list(running.items()):
            late = time.time() - began > args.timeout or time.time() > end
            if proc.poll() is None and late:
                proc.kill()
                proc.wait()
                _summary(args.out, {"arch": arch, "status": "killed: out of time"})
            if proc.poll() is not None:
                del running[arch]
        time.sleep(0.5)


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        "--out", str(args.out), "--modes", args.modes, "--steps", str(args.steps), "--variants", args.variants,
        "--profiler", args.profiler, "--variant-only", args.variant_only,
    ]  # fmt: skip


def work(arch: str, args: argparse.Namespace) -> None:
    """Record every wanted variant of one architecture, each mode bare then twin, and label the bare trace."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    wanted = set(filter(None, args.variants.split(",")))
    for variant in zoo.variants(arch):
        if wanted and variant.slug not in wanted:
            continue
        for mode in args.modes.split(","):
            began = time.time()
            row = {"arch": arch, "variant": variant.name, "slug": variant.slug, "mode": mode}
            try:
                row.update(record_variant(variant, mode, args))
                row["status"] = row.get("status", "ok")
            except Exception as exc:  # one failure must not lose the others
                row["status"] = f"failed: {type(exc).__name__}: {exc}"[:400]
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize()
            row["seconds"] = round(time.time() - began, 1)
            _summary(args.out, row)
            torch.cuda.empty_cache()


def _summary(out: Path, row: dict) -> None:
    print(json.dumps(row), flush=True)
    with (out / "summary.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def record_variant(variant: zoo.Variant, mode: str, args: argparse.Namespace) -> dict:
    import torch
    from record import Annotations, Recorder  # sample_traces/corpus/record.py

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = zoo.build(variant, device)
    layers = zoo.decoder_layers(model)
    if mode == "compiled":
        _compile_layers(layers)
    name = f"{variant.slug}_{mode}"
    info: dict = {"layers": len(layers), "kinds": zoo.layer_kinds(model)}
    run = {"decode": _decode, "compiled": _decode, "prefill": _prefill, "graph": _graph}[mode]
    run(model, None, None, args)  # warm-up: allocator, cuBLAS heuristics, compilation, autotuning
    variants = ("bare", "twin") if args.variant_only == "both" else (args.variant_only,)
    for which in variants:
        rec = Recorder(args.profiler, args.out / ("torch" if which == "bare" else "twins"), cpu=which == "twin")
        twin = Annotations(model, layers) if which == "twin" else None
        try:
            info[f"tokens_{which}"] = run(model, rec, twin, args, f"{name}_{which}")
        finally:
            if twin:
                twin.remove()
    if args.profiler == "torch" and args.variant_only == "both":
        info.update(label(args.out, name))
    return info


def _compile_layers(layers: list) -> None:
    import torch

    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    for layer in layers:
        layer.forward = torch.compile(layer.forward, fullgraph=False)


def _prompt(length: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, zoo.VOCAB, (BATCH, length), generator=generator)


def _step_range(twin, name: str):
    return twin.step(name) if twin else contextlib.nullcontext()


def _recording(rec, name: str | None):
    return rec.record(name) if rec else contextlib.nullcontext()


def _decode(model, rec, twin, args: argparse.Namespace, name: str | None = None) -> list[int]:
    """A prompt, then `--steps` decode forwards through the model's own generation inputs; only the decode
    forwards are recorded (each in a `decode_step_N` range in the twin)."""
    import torch

    device = next(model.parameters()).device
    ids = _prompt(PROMPT, 1).to(device)
    with torch.no_grad():
        position = torch.arange(PROMPT, device=device)
        inputs = model.prepare_inputs_for_generation(
            ids, attention_mask=torch.ones_like(ids), cache_position=position, use_cache=True
        )
        out = model(**inputs)
        past = getattr(out, "past_key_values", None)
        with _recording(rec, name):
            for step in range(args.steps):
                with _step_range(twin, f"decode_step_{step}"):
                    ids = torch.cat([ids, out.logits[:, -1:].argmax(-1)], 1)
                    position = position[-1:] + 1
                    inputs = model.prepare_inputs_for_generation(
                        ids, past_key_values=past, attention_mask=torch.ones_like(ids), cache_position=position,
                        use_cache=True,
                    )  # fmt: skip
                    out = model(**inputs)
                    past = getattr(out, "past_key_values", None) or past
    return ids[:, -1].tolist()


def _prefill(model, rec, twin, args: argparse.Namespace, name: str | None = None) -> list[int]:
    import torch

    device = next(model.parameters()).device
    prompt = _prompt(PREFILL_PROMPT, 2).to(device)
    with torch.no_grad(), _recording(rec, name), _step_range(twin, "prefill_step_0"):
        out = model(input_ids=prompt, use_cache=False)
    return out.logits[:, -1].argmax(-1).tolist()


def _graph(model, rec, twin, args: argparse.Namespace, name: str | None = None) -> list[int]:
    """One decode step over a static cache captured into a CUDA graph (the twin captures inside its recording, with
    the hooks on), replayed `--steps` times."""
    import torch
    import transformers as tf

    device = next(model.parameters()).device
    cache = tf.StaticCache(config=model.config, max_cache_len=CACHE)
    prompt = _prompt(PROMPT, 1).to(device)
    ids = torch.zeros(BATCH, 1, dtype=torch.long, device=device)
    position = torch.zeros(1, dtype=torch.long, device=device)

    def step() -> None:
        out = model(
            input_ids=ids, past_key_values=cache, cache_position=position,
            position_ids=position.expand(BATCH, 1), use_cache=True,
        )  # fmt: skip
        ids.copy_(out.logits[:, -1:].argmax(-1))
        position.add_(1)

    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=cache, cache_position=torch.arange(PROMPT, device=device))
        ids.copy_(out.logits[:, -1:].argmax(-1))
        position.fill_(PROMPT)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if rec is None or twin is None:
            with torch.cuda.graph(graph):
                step()
            with _recording(rec, name):
                for _ in range(args.steps):
                    graph.replay()
        else:
            with rec.record(name):
                with twin.step("capture"), torch.cuda.graph(graph):
                    step()
                torch.cuda.synchronize()
                for index in range(args.steps):
                    with twin.step(f"decode_step_{index}"):
                        graph.replay()
    return ids[:, 0].tolist()


def label(out: Path, name: str) -> dict:
    """The twin's labels for the bare trace (truth.transfer), written run-length with a digest of the kernel names;
    the twin trace is then deleted (the labels are what the zoo keeps), or gzipped beside it with ZOO_KEEP_TWINS=1
    (to check the labels against it)."""
    import truth  # sample_traces/corpus/truth.py

    bare = out / "torch" / f"{name}_bare.pt.trace.json"
    twin = out / "twins" / f"{name}_twin.pt.trace.json"
    kernels = truth.transfer(truth.kineto_kernels(bare), truth.kineto_kernels(twin))
    labels = {"trace": bare.name + ".gz", **runs(kernels)}
    (out / "labels" / f"{name}.json").write_text(json.dumps(labels) + "\n")
    _gzip(bare)
    _gzip(twin) if os.environ.get("ZOO_KEEP_TWINS") == "1" else twin.unlink()
    steps = truth.per_step(kernels)
    return {"steps": len(steps), "layers_per_step": sorted({len(s["layers"]) for s in steps})}


def label_nsys(out: Path, name: str) -> None:
    """The nsys twin's labels for the nsys bare export (both exported to SQLite by record_nsys.sh)."""
    import truth

    bare, twin = out / "nsys" / f"{name}_bare.sqlite", out / "nsys" / f"{name}_twin.sqlite"
    kernels = truth.transfer(truth.nsys_kernels(bare), truth.nsys_kernels(twin))
    (out / "labels" / f"{name}.nsys.json").write_text(json.dumps({"trace": bare.name + ".xz", **runs(kernels)}) + "\n")
    steps = truth.per_step(kernels)
    layers = sorted({len(s["layers"]) for s in steps})
    _summary(out, {"slug": name, "profiler": "nsys", "steps": len(steps), "layers": layers})


def runs(kernels: list, key: Callable[[Any], tuple] = lambda k: (k.step, k.layer)) -> dict:
    """Run-length labels: [[step, layer, count], ...] (or [*key, count]) in GPU start order (None: outside), and the
    names' digest."""
    out: list[list] = []
    for k in kernels:
        if out and tuple(out[-1][:-1]) == key(k):
            out[-1][-1] += 1
        else:
            out.append([*key(k), 1])
    digest = hashlib.sha256("\n".join(k.name for k in kernels).encode()).hexdigest()
    return {"kernels": len(kernels), "names_sha256": digest, "runs": out}


def _gzip(path: Path) -> None:
    with path.open("rb") as src, gzip.open(f"{path}.gz", "wb", compresslevel=9) as dst:
        dst.write(src.read())
    os.unlink(path)


if __name__ == "__main__":
    main()
