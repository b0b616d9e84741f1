"""Record speculative decoding on a GPU, bare and as an annotated twin, and label the bare trace from the twin.

Each scenario decodes with a drafter that proposes tokens and a target that verifies them, with transformers' own
model code (small configs, seeded random weights, no download):
  assist_llama       generate(assistant_model=...): 8-layer Llama target, 2-layer Llama drafter, 7 drafts a step
  assist_llama_1layer  the same with a 1-layer Llama drafter of half the target's width (other GEMM shapes)
  assist_qwen3moe    8-layer Qwen3-MoE target, 2-layer Llama drafter, the heuristic schedule (7 drafts, one less
                     after every rejection: the drafts per step change step by step)
  assist_deepseek    DeepSeek-V3 target (MLA, one dense layer then 7 MoE layers), 2-layer Llama drafter, 5 drafts
  early_exit_llama   self-speculative (LayerSkip): the drafter is the target's own first 2 layers
                     (generate(assistant_early_exit=2)), 5 drafts a step
  mtp_deepseek       DeepSeek-V3 with multi-token-prediction layers (num_nextn_predict_layers=2, transformers'
                     MTPCandidateGenerator, generate(use_mtp=True)); the MTP weights are random like the rest
  graph_llama        a vLLM-style loop over static caches, both models captured into CUDA graphs: per step the
                     drafter's one-token graph is replayed 7 times, then the target's 8-token verify graph once
                     (acceptance computed on the GPU, no host sync)
  graph_deepseek     the same with the DeepSeek-V3 target
  graph_eagle_llama  graph_llama with a 1-layer drafter of the target's width (as vLLM's EAGLE heads: the kernels of
                     a target layer), bare as a user records it without vLLM's ranges
With random weights the drafts are almost never accepted, so every step adds about one token: `--steps` steps.

The twin's annotations (the truth; the bare run has none, as a user's trace):
  spec_step_N        from the first draft forward of an iteration to the end of the target's verify forward
  draft_pass_K       one forward pass of the drafter (K counts within the step)
  model.layers.N     a target layer; draft.layers.N a layer of a separate drafter, mtp.layers.N an MTP layer (the
                     self-speculative drafter's layers keep their model.layers.N name: draft_pass_K says the role)
  capture_draft / capture_verify, replay_draft / replay_verify: CUDA graph captures and replays (truth.py maps the
                     i-th kernel of a replay to the i-th launch of the capture of the same graph)

Usage:
  python record_spec.py --out DIR [--scenarios a,b] [--profiler torch|nsys] [--variant bare|twin|both]
  (under nsys: one process per scenario and variant, see record_spec.sh)
Output: DIR/torch/NAME_bare.pt.trace.json.gz, DIR/labels/NAME.json (labels: [step, layer, draft_pass, count]).
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

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "corpus"), str(HERE.parent / "zoo")]

from record import BATCH, PROMPT, VOCAB, Annotations, Recorder, config, sync  # noqa: E402

SCENARIOS = (
    "assist_llama",
    "assist_llama_1layer",
    "assist_qwen3moe",
    "assist_deepseek",
    "early_exit_llama",
    "mtp_deepseek",
    "graph_llama",
    "graph_deepseek",
    "graph_eagle_llama",
)
TARGET_LAYERS = 8
DRAFT_LAYERS = 2
NARROW = {"hidden_size": 128, "intermediate_size": 384}  # a 1-layer drafter's width: half the target's
CACHE = 192


def drafter_model(scenario: str, device: str) -> torch.nn.Module:
    """The separate drafter: a 2-layer Llama of the target's width; 1 layer of half its width for *_1layer; 1 layer
    of its width for *_eagle_* (an EAGLE-style head: the same kernels as a target layer)."""
    if scenario.endswith("_1layer"):
        return build("llama", 1, device, **NARROW)
    return build("llama", 1 if "_eagle_" in scenario else DRAFT_LAYERS, device)


def build(name: str, layers: int, device: str, **extra: object) -> torch.nn.Module:
    """transformers' model for a corpus config (record.config), at `layers` layers, DeepSeek-V3 with one dense
    layer first (Kimi K2's shape)."""
    import transformers as tf

    base = config(name).to_dict()
    for derived in ("layer_types", "mlp_layer_types"):
        base.pop(derived, None)
    if name == "deepseekv3":
        extra = {"first_k_dense_replace": 1, **extra}
    cfg = type(config(name)).from_dict({**base, "num_hidden_layers": layers, **extra})
    torch.manual_seed(0 if layers == TARGET_LAYERS else 1)
    return tf.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).to(device).eval()


class SpecAnnotations:
    """The twin's ranges for speculative decoding: steps, draft passes, and the layers of both models."""

    def __init__(self, target: torch.nn.Module, draft_layers: list[torch.nn.Module], prefix: str) -> None:
        self.layers = Annotations(target)
        self.draft = Annotations(target, draft_layers, prefix=prefix) if draft_layers else None
        self.step_index = 0
        self.pass_index = 0
        self.in_step = False

    def open_step(self) -> None:
        if not self.in_step:
            self.layers._push(f"spec_step_{self.step_index}")
            self.in_step, self.pass_index = True, 0

    def close_step(self) -> None:
        if self.in_step:
            self.layers._pop()
            self.in_step, self.step_index = False, self.step_index + 1

    @contextlib.contextmanager
    def draft_pass(self) -> Iterator[None]:
        with self.layers.step(f"draft_pass_{self.pass_index}"):
            yield
        self.pass_index += 1

    def remove(self) -> None:
        self.layers.remove()
        if self.draft:
            self.draft.remove()


# --- transformers' assisted generation ----------------------------------------------------------------------------


@contextlib.contextmanager
def hooked_generation(target: torch.nn.Module, twin: SpecAnnotations | None, draft_module: torch.nn.Module | None):
    """Twin ranges inside generate(): a step opens when the candidate generator is asked for drafts and closes when
    the target's verify forward ends; every forward of `draft_module` (or of the target while drafting, for early
    exit) is a draft pass."""
    if twin is None:
        yield
        return
    from transformers.generation import candidate_generator as cg

    drafting = [False]
    originals = {cls: cls.get_candidates for cls in _generator_classes(cg)}

    def wrap(original: Callable) -> Callable:
        def get_candidates(self, *args, **kwargs):
            outer = not drafting[0]
            if outer:
                twin.open_step()
                drafting[0] = True
            try:
                return original(self, *args, **kwargs)
            finally:
                drafting[0] = drafting[0] and not outer

        return get_candidates

    passes: list[contextlib.AbstractContextManager] = []

    def pre(*_: object) -> None:
        if drafting[0]:
            passes.append(twin.draft_pass())
            passes[-1].__enter__()

    def post(*_: object) -> None:
        if passes and drafting[0]:
            passes.pop().__exit__(None, None, None)
        elif not drafting[0]:
            twin.close_step()

    handles = [target.register_forward_pre_hook(pre), target.register_forward_hook(post)]
    if draft_module is not None:
        handles += [draft_module.register_forward_pre_hook(pre), draft_module.register_forward_hook(post)]
    for cls, original in originals.items():
        cls.get_candidates = wrap(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.get_candidates = original
        for handle in handles:
            handle.remove()


def _generator_classes(cg) -> list[type]:
    return [cg.AssistedCandidateGenerator, cg.EarlyExitCandidateGenerator, cg.MTPCandidateGenerator]


def random_mtp_weights() -> None:
    """MtpModel.from_pretrained reads the MTP weights from the target's checkpoint; these models have none (random
    weights, no download), so the MTP layers keep their random initialisation."""
    from transformers import modeling_layers as ml

    def from_main_model(cls, main_model, device_map=None, **_: object):
        layers = main_model.config.get_text_config().num_mtp_layers
        torch.manual_seed(2)  # the bare run and its twin draft with the same MTP weights
        model = cls(main_model, layers).to(torch.bfloat16)
        return model.to(next(iter(device_map.values()))) if device_map else model

    ml.MtpModel.from_pretrained = classmethod(from_main_model)


def assisted(scenario: str, device: str) -> tuple[torch.nn.Module, dict, Callable[[], tuple]]:
    """The target, the generate() arguments of the scenario, and what the twin annotates of the drafter: its
    layers, their name prefix and the module whose forward is one draft pass."""
    target_arch = {"assist_qwen3moe": "qwen3moe", "assist_deepseek": "deepseekv3"}
    target_arch |= {name: "llama" for name in ("assist_llama", "assist_llama_1layer")}
    if scenario in target_arch:
        target = build(target_arch[scenario], TARGET_LAYERS, device)
        draft = drafter_model(scenario, device)
        schedule = "heuristic" if scenario == "assist_qwen3moe" else "constant"
        _draft_tokens(draft, 5 if scenario == "assist_deepseek" else 7, schedule)
        return target, {"assistant_model": draft}, lambda: (list(draft.model.layers), "draft.layers", draft)
    if scenario == "early_exit_llama":
        target = build("llama", TARGET_LAYERS, device)
        _draft_tokens(target, 5, "constant")  # the assistant is the target itself
        return target, {"assistant_early_exit": 2}, lambda: ([], "", None)
    random_mtp_weights()
    target = build("deepseekv3", TARGET_LAYERS, device, num_nextn_predict_layers=2)
    return target, {"use_mtp": True}, lambda: ([], "mtp.layers", None)


def _draft_tokens(assistant: torch.nn.Module, tokens: int, schedule: str) -> None:
    """Drafts per step are read from the assistant's own generation config; the confidence threshold (which
    stops drafting early when the drafter is unsure, as random weights always are) is switched off."""
    assistant.generation_config.num_assistant_tokens = tokens
    assistant.generation_config.num_assistant_tokens_schedule = schedule
    assistant.generation_config.assistant_confidence_threshold = 0.0


def record_assisted(scenario: str, rec: Recorder | None, variant: str, args: argparse.Namespace) -> dict:
    target, kwargs, drafter = assisted(scenario, args.device)
    generator = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=generator).to(args.device)
    kwargs |= dict(
        max_new_tokens=args.steps, min_new_tokens=args.steps, do_sample=False,
        attention_mask=torch.ones_like(prompt), pad_token_id=0,
    )  # fmt: skip
    with torch.no_grad():
        target.generate(prompt, **kwargs)  # warm-up
    layers, prefix, draft_module = drafter()
    twin = SpecAnnotations(target, layers, prefix) if variant == "twin" else None
    mtp = _annotate_mtp(twin) if twin and scenario.startswith("mtp") else contextlib.nullcontext()
    try:
        with mtp, hooked_generation(target, twin, draft_module), _recording(rec, args.name), torch.no_grad():
            out = target.generate(prompt, **kwargs)
        return {"tokens": out[0, PROMPT:].tolist(), "steps": twin.step_index if twin else None}
    finally:
        if twin:
            twin.remove()


@contextlib.contextmanager
def _annotate_mtp(twin: SpecAnnotations) -> Iterator[None]:
    """Each MTP layer's forward is one draft pass (one drafted token) and the layer mtp.layers.N."""
    from transformers import modeling_layers as ml

    original = ml.MtpModel.__init__
    handles: list = []

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        for index, layer in enumerate(self.layers):
            name = f"mtp.layers.{index}"
            passes: list = []

            def pre(*_: object, n: str = name, p: list = passes) -> None:
                p.append(twin.draft_pass())
                p[-1].__enter__()
                twin.layers._push(n)

            def post(*_: object, p: list = passes) -> None:
                twin.layers._pop()
                p.pop().__exit__(None, None, None)

            handles.extend([layer.register_forward_pre_hook(pre), layer.register_forward_hook(post)])

    ml.MtpModel.__init__ = init
    try:
        yield
    finally:
        ml.MtpModel.__init__ = original
        for handle in handles:
            handle.remove()


# --- a vLLM-style loop with CUDA graphs ---------------------------------------------------------------------------


class GraphSpeculator:
    """Draft K tokens one graph replay at a time, verify them in one graph replay of the target; the accepted count
    moves both caches' positions on the GPU (static shapes, no host sync)."""

    def __init__(self, target: torch.nn.Module, draft: torch.nn.Module, drafts: int, device: str) -> None:
        import transformers as tf

        self.target, self.draft, self.k = target, draft, drafts
        self.target_cache = tf.StaticCache(config=target.config, max_cache_len=CACHE)
        self.draft_cache = tf.StaticCache(config=draft.config, max_cache_len=CACHE)
        self.last = torch.zeros(BATCH, 1, dtype=torch.long, device=device)
        self.proposals = torch.zeros(BATCH, drafts, dtype=torch.long, device=device)
        self.base = torch.full((1,), PROMPT, dtype=torch.long, device=device)  # first position the step writes
        self.k_index = torch.zeros(1, dtype=torch.long, device=device)
        self.offsets = torch.arange(drafts + 1, device=device)
        prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)
        with torch.no_grad():
            positions = torch.arange(PROMPT, device=device)
            target(input_ids=prompt, past_key_values=self.target_cache, cache_position=positions)
            out = draft(input_ids=prompt, past_key_values=self.draft_cache, cache_position=positions)
        self.last.copy_(out.logits[:, -1:].argmax(-1))

    def draft_step(self) -> None:
        position = self.base + self.k_index
        before = self.proposals.gather(1, (self.k_index - 1).clamp(min=0).expand(BATCH, 1))[:, 0]
        previous = torch.where(self.k_index == 0, self.last[:, 0], before)  # the token the last pass proposed
        out = self.draft(
            input_ids=previous[:, None], past_key_values=self.draft_cache, cache_position=position,
            position_ids=position.expand(BATCH, 1), use_cache=True,
        )  # fmt: skip
        self.proposals.scatter_(1, self.k_index.expand(BATCH, 1), out.logits[:, -1:].argmax(-1))
        self.k_index.add_(1)

    def verify_step(self) -> None:
        positions = self.base + self.offsets
        ids = torch.cat([self.last, self.proposals], 1)
        out = self.target(
            input_ids=ids, past_key_values=self.target_cache, cache_position=positions,
            position_ids=positions.expand(BATCH, -1), use_cache=True,
        )  # fmt: skip
        predicted = out.logits.argmax(-1)
        accepted = (predicted[:, :-1] == self.proposals).int().cumprod(1).sum(1).min()
        self.last.copy_(predicted.gather(1, accepted.view(1, 1).expand(BATCH, 1)))
        self.base.add_(accepted + 1)
        self.k_index.zero_()


def graph_models(scenario: str, device: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    target = build("deepseekv3" if scenario == "graph_deepseek" else "llama", TARGET_LAYERS, device)
    return target, drafter_model(scenario, device)


def record_graph(scenario: str, rec: Recorder | None, variant: str, args: argparse.Namespace) -> dict:
    """Warm up on a side stream, capture both graphs (the twin inside its recorded range, with the hooks on, as
    the zoo's graph mode does), then `--steps` steps of 7 draft replays and one verify replay."""
    target, draft = graph_models(scenario, args.device)
    spec = GraphSpeculator(target, draft, 7, args.device)
    twin = SpecAnnotations(target, list(draft.model.layers), "draft.layers") if variant == "twin" else None
    draft_graph, verify_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            spec.draft_step()
            spec.verify_step()
        torch.cuda.current_stream().wait_stream(side)

        def capture() -> None:
            with _range(twin, "capture_draft"), torch.cuda.graph(draft_graph):
                spec.draft_step()
            with _range(twin, "capture_verify"), torch.cuda.graph(verify_graph):
                spec.verify_step()

        def steps() -> None:
            for _ in range(args.steps):
                if twin:
                    twin.open_step()
                for _ in range(spec.k):
                    with twin.draft_pass() if twin else contextlib.nullcontext(), _range(twin, "replay_draft"):
                        draft_graph.replay()
                with _range(twin, "replay_verify"):
                    verify_graph.replay()
                if twin:
                    twin.close_step()

        try:
            if twin is None:
                capture()
                with _recording(rec, args.name):
                    steps()
            else:
                with _recording(rec, args.name):
                    capture()
                    sync()
                    steps()
        finally:
            if twin:
                twin.remove()
    return {"tokens": spec.last[:, 0].tolist(), "position": int(spec.base)}


def _range(twin: SpecAnnotations | None, name: str) -> contextlib.AbstractContextManager:
    return twin.layers.step(name) if twin else contextlib.nullcontext()


def _recording(rec: Recorder | None, name: str) -> contextlib.AbstractContextManager:
    return rec.record(name) if rec else contextlib.nullcontext()


# --- labels ---------------------------------------------------------------------------------------------------------


def label(out: Path, name: str, profiler: str) -> dict:
    """The twin's labels for the bare trace, run-length ([step, layer, draft_pass, count]) with a digest of the
    kernel names."""
    import truth  # sample_traces/corpus/truth.py: the standard library only, never traceview
    from record_zoo import _gzip, runs

    if profiler == "torch":
        bare, twin = out / "torch" / f"{name}_bare.pt.trace.json", out / "twins" / f"{name}_twin.pt.trace.json"
    else:
        bare, twin = out / "nsys" / f"{name}_bare.sqlite", out / "nsys" / f"{name}_twin.sqlite"
    kernels = truth.transfer(truth.kernels_of(bare), truth.kernels_of(twin))
    labels = runs(kernels, key=lambda k: (k.step, k.layer, k.draft))
    suffix = "" if profiler == "torch" else ".nsys"
    trace = bare.name + (".gz" if profiler == "torch" else ".xz")
    (out / "labels" / f"{name}{suffix}.json").write_text(json.dumps({"trace": trace, **labels}) + "\n")
    if profiler == "torch":
        _gzip(bare)
        twin.unlink()
    steps = truth.per_step(kernels)
    return {
        "steps": len(steps),
        "target_layers_per_step": sorted({len(s["layers"]) for s in steps}),
        "draft_passes_per_step": [len(s.get("draft_passes", [])) for s in steps],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--profiler", choices=("torch", "nsys", "none"), default="torch")
    parser.add_argument("--variant", choices=("bare", "twin", "both"), default="both")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--label", default="", help="NAME: label nsys/NAME_bare.sqlite from its twin and exit")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    for sub in ("torch", "twins", "labels", "nsys"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    if args.label:
        print(json.dumps({"name": args.label, **label(args.out, args.label, "nsys")}))
        return
    variants = ("bare", "twin") if args.variant == "both" else (args.variant,)
    for scenario in args.scenarios.split(","):
        row: dict = {"scenario": scenario, "profiler": args.profiler}
        began = time.time()
        try:
            for variant in variants:
                folder = "torch" if variant == "bare" else "twins"
                rec = Recorder(args.profiler, args.out / folder, cpu=variant == "twin")
                args.name = f"{scenario}_{variant}"
                run = record_graph if scenario.startswith("graph") else record_assisted
                row[variant] = run(scenario, rec, variant, args)
            if args.profiler == "torch" and args.variant == "both":
                row.update(label(args.out, scenario, "torch"))
            row["status"] = "ok"
        except Exception as exc:  # one failed scenario must not lose the others
            row["status"] = f"failed: {type(exc).__name__}: {exc}"[:500]
            with contextlib.suppress(Exception):
                sync()
        row["seconds"] = round(time.time() - began, 1)
        print(json.dumps(row), flush=True)
        with (args.out / "summary.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
