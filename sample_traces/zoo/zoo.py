"""The zoo: every decoder-only causal-LM architecture of the installed transformers, built from a small random config.

For each architecture (`architectures()`), `variants(name)` gives the configs to record: the architecture's own
default layer pattern at a realistic depth (at least four repeats of its longest repeating unit of layer kinds), and
the heterogeneous options its config has: dense layers before MoE ones (`first_k_dense_replace` 1 and 3, or the
equivalent `mlp_layer_types` / `num_dense_layers` / `moe_layer_start_index`), MoE every other layer
(`interleave_moe_layer_step`, `decoder_sparse_step`, `mlp_only_layers`), and attention patterns (`layer_types`:
sliding / full / linear / chunked, hybrid SSM blocks). Sizes are tiny (hidden 256, 8 experts, vocabulary 2048); the
model code is transformers' own, with seeded random weights, nothing downloaded.

Nothing here imports traceview. Used by record.py on a GPU; `python zoo.py` lists the variants and checks that each
builds and decodes on the CPU.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from dataclasses import dataclass, field

# A held-out recording of other sizes and depths (a measurement on configs segmentation was not tuned on):
# ZOO_SCALE=2 doubles every width and head count (head sizes stay), ZOO_REPEATS sets the depth.
SCALE = int(os.environ.get("ZOO_SCALE", "1"))
HIDDEN = 256 * SCALE
VOCAB = 2048
MIN_LAYERS = 8
REPEATS = int(os.environ.get("ZOO_REPEATS", "4"))  # repeats of the longest unit of layer kinds per forward pass
# ZOO_DTYPE (a torch dtype's name) and ZOO_BATCH (sequences per forward pass, record.py's BATCH otherwise) vary the
# kernels further: another dtype and batch make cuBLAS and the attention backends pick other kernels.
DTYPE = os.environ.get("ZOO_DTYPE", "bfloat16")
BATCH = int(os.environ["ZOO_BATCH"]) if "ZOO_BATCH" in os.environ else None

# Not decoder-only causal LMs: bidirectional encoders used as decoders, encoder-decoder decoders, audio/vision models,
# models whose "causal LM" is another objective (permutation, LSH, byte-level patching).
EXCLUDED = {
    "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
    "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod",
    "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp", "pegasus", "plbart",
    "prophetnet", "trocr", "whisper", "musicgen", "musicgen_melody", "moshi", "xlm", "xlnet", "reformer", "blt",
    "git", "cpmant", "gpt-sw3", "modernbert-decoder",
}  # fmt: skip

# Tiny sizes, set where the default config has the attribute (names of the configs' own).
SIZES = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "intermediate_size": 512 * SCALE,
    "intermediate_size_mlp": 512 * SCALE,
    "ffn_hidden_size": 512 * SCALE,
    "dense_intermediate_size": 512 * SCALE,
    "prefix_dense_intermediate_size": 512 * SCALE,
    "moe_intermediate_size": 256 * SCALE,
    "expert_ffn_hidden_size": 256 * SCALE,
    "shared_expert_intermediate_size": 256 * SCALE,
    "moe_shared_expert_intermediate_size": 256 * SCALE,
    "num_attention_heads": 4 * SCALE,
    "num_key_value_heads": 2 * SCALE,
    "head_dim": 64,
    "kv_lora_rank": 64 * SCALE,
    "q_lora_rank": 96 * SCALE,
    "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 32,
    "qk_head_dim": 64,
    "v_head_dim": 64,
    "num_experts": 8,
    "n_routed_experts": 8,
    "num_local_experts": 8,
    "moe_num_experts": 8,
    "num_experts_per_tok": 2,
    "num_experts_per_token": 2,
    "moe_topk": 2,
    "moe_k": 2,
    "top_k_experts": 2,
    "n_group": 1,
    "topk_group": 1,
    "num_expert_group": 1,
    "max_position_embeddings": 256,
    "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": 64,
    "num_nextn_predict_layers": 0,
    "index_n_heads": 4,
    "index_head_dim": 64,
    "index_topk": 16,
    "mamba_n_heads": 8 * SCALE,
    "mamba_d_head": 64,
    "mamba_d_state": 16,
    "mamba_n_groups": 1,
    "mamba_chunk_size": 16,
    "chunk_size": 16,
}
# Set even where the default is None (None there means "the model's own default", not "absent").
EVEN_IF_NONE = {"num_experts_per_tok", "n_routed_experts", "n_group", "topk_group", "head_dim"}


# What an architecture's own validation needs beside the tiny sizes.
FIXES: dict[str, dict] = {
    "mamba2": {"num_heads": 8 * SCALE},
    "zaya": {"num_experts_per_tok": 1},
}


@dataclass(frozen=True)
class Variant:
    """One config to record: the architecture, a short name, and the attributes set on its default config."""

    arch: str
    name: str
    overrides: dict = field(default_factory=dict, hash=False)
    note: str = ""

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_]+", "_", f"{self.arch}_{self.name}").strip("_")


def architectures() -> dict[str, str]:
    """model_type -> causal-LM class name, decoder-only architectures only."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return {
        k: v
        for k, v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()
        if k not in EXCLUDED and "ForConditionalGeneration" not in v and "Assistant" not in v
    }


def config_class(arch: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[arch]


def _quiet():
    """transformers' config and model warnings are not what the recording prints."""
    import transformers

    transformers.logging.set_verbosity_error()
    return contextlib.redirect_stderr(io.StringIO())


def probe(arch: str, **overrides):
    """The architecture's default config made tiny, with `overrides` (`num_hidden_layers` among them)."""
    cls = config_class(arch)
    with _quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = cls()
        keys = set(default.to_dict())
        sizes = {
            k: v for k, v in SIZES.items() if k in keys and (getattr(default, k, None) is not None or k in EVEN_IF_NONE)
        }
        if "qk_rope_head_dim" in keys:  # multi-head latent attention: the rotary part is the head_dim, no GQA
            sizes["head_dim"] = SIZES["qk_rope_head_dim"]
            sizes["num_key_value_heads"] = SIZES["num_attention_heads"]
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if isinstance(getattr(default, key, None), int):
                sizes[key] = min(getattr(default, key), VOCAB - 1)
        if getattr(default, "sliding_window", None):
            sizes["sliding_window"] = 8
        for key in ("attention_window_size", "sliding_window_size", "attention_chunk_size", "window_size"):
            if isinstance(getattr(default, key, None), int):
                sizes[key] = 8
        return cls(**{**sizes, **FIXES.get(arch, {}), **overrides})


def per_layer_lists(cfg) -> dict[str, list]:
    """The config's attributes that hold one value per layer (not lists of layer indices, which are as long when
    every layer is listed)."""
    n = cfg.num_hidden_layers
    return {
        k: v
        for k, v in cfg.to_dict().items()
        if isinstance(v, list) and len(v) == n and k != "intermediate_size" and v != list(range(n))
    }


def unit_of(values: list) -> tuple[int, int]:
    """(prefix, period): the fewest leading layers (at most 3) after which `values` repeats with the shortest period."""
    best = (0, len(values))
    for prefix in range(0, 4):
        rest = values[prefix:]
        for period in range(1, max(1, len(rest) // 2) + 1):
            if all(rest[i] == rest[i % period] for i in range(len(rest))):
                if prefix + period < sum(best):
                    best = (prefix, period)
                break
    return best


def depth(prefix: int, period: int) -> int:
    """A realistic depth: the prefix, then at least REPEATS repeats of the unit, and MIN_LAYERS at least."""
    return max(MIN_LAYERS, prefix + REPEATS * period)


def natural_unit(arch: str) -> tuple[int, int]:
    """(prefix, period) of the architecture's own layer pattern (its per-layer lists at 24 layers)."""
    cfg = probe(arch, num_hidden_layers=24)
    prefix, period = 0, 1
    for key, value in cfg.to_dict().items():  # Jamba's attn_layer_period, expert_layer_period
        if key.endswith("_layer_period") and isinstance(value, int) and value > 1:
            period = _lcm(period, value)
    for values in per_layer_lists(cfg).values():
        p, q = unit_of([str(v) for v in values])
        prefix, period = max(prefix, p), _lcm(period, q)
    return prefix, min(period, 8)


def _lcm(a: int, b: int) -> int:
    import math

    return a * b // math.gcd(a, b)


# Hybrid layer patterns set through knobs that are not per-layer lists of the default config (the model's own names).
HYBRIDS: dict[str, list[tuple[str, dict, int]]] = {
    "lfm2": [("conv2_attn1", {"layer_types": ["conv", "conv", "full_attention"]}, 3)],
    "granitemoehybrid": [("mamba3_attn1", {"layer_types": ["mamba", "mamba", "mamba", "attention"]}, 4)],
    "bamba": [("mamba3_attn1", {"attn_layer_indices": [3]}, 4)],
    "nemotron_h": [
        ("mamba_mlp_attn", {"layers_block_type": ["mamba", "mlp", "mamba", "mlp", "attention", "mlp"]}, 6),
        ("mamba_moe_attn", {"layers_block_type": ["mamba", "moe", "mamba", "moe", "attention", "moe"]}, 6),
        # Nemotron 3's own order: an attention block right after a Mamba block (single-mixer blocks do not pair)
        ("memem_attn_moe", {"layers_block_type": ["mamba", "moe", "mamba", "moe", "mamba", "attention", "moe"]}, 7),
    ],
    "qwen2": [
        ("sliding_full", {"use_sliding_window": True, "layer_types": ["sliding_attention", "full_attention"]}, 2)
    ],
}


def _tiled(pattern: list, layers: int) -> list:
    return [pattern[i % len(pattern)] for i in range(layers)]


def _expand(overrides: dict, layers: int) -> dict:
    """Per-layer patterns (lists shorter than the depth) tiled to the depth; index lists (attn_layer_indices) to
    every period."""
    out = {}
    for key, value in overrides.items():
        if key == "attn_layer_indices":
            period = 4
            out[key] = [i for i in range(layers) if i % period in value]
        elif isinstance(value, list) and value and not isinstance(value[0], int) and len(value) != layers:
            out[key] = value[:layers] if len(value) > layers else _tiled(value, layers)
        else:
            out[key] = value
    return out


def variants(arch: str) -> list[Variant]:
    """The configs recorded for one architecture: its own pattern, then the heterogeneous options it has."""
    prefix, period = natural_unit(arch)
    own = probe(arch, num_hidden_layers=24)
    keys = set(own.to_dict())
    has_dense = "mlp_layer_types" in keys and "dense" in str(own.mlp_layer_types) + _dense_option(arch)
    note = f"own pattern, unit {prefix}+{period}"
    out = [Variant(arch, "default", {"num_hidden_layers": depth(prefix, period)}, note)]

    def add(name: str, overrides: dict, unit: int, lead: int = 0, own: bool = False) -> None:
        """`own`: the overrides replace the pattern the natural unit came from."""
        layers = depth(lead, unit) if own else depth(max(prefix, lead), _lcm(period, unit))
        out.append(Variant(arch, name, {"num_hidden_layers": layers, **_expand(overrides, layers)}))

    if "first_k_dense_replace" in keys:
        for k in (1, 3):
            add(f"dense{k}", {"first_k_dense_replace": k, **_mlp_types(keys, k)}, 1, k)
    elif has_dense:
        for k in (1, 3):
            add(f"dense{k}", _mlp_types(keys, k), 1, k)
    for key in ("num_dense_layers", "moe_layer_start_index"):
        if key in keys:
            for k in (1, 3):
                add(f"dense{k}", {key: k}, 1, k)
    if has_dense:
        add("moe_every_2", {"mlp_layer_types": ["dense", "sparse"], **_no_dense_first(keys)}, 2)
    for key, value in (("decoder_sparse_step", 2), ("interleave_moe_layer_step", 2), ("moe_layer_interval", 2)):
        if key in keys:
            add("moe_every_2", {key: value, **({"moe_layers": None} if key == "interleave_moe_layer_step" else {})}, 2)
    if "mlp_only_layers" in keys:
        add("mlp_only_0", {"mlp_only_layers": [0]}, 1, 1)
    for name, overrides, unit in HYBRIDS.get(arch, []):
        add(name, overrides, unit, own=True)
    return out


def _dense_option(arch: str) -> str:
    return "dense" if arch in {"laguna", "hy_v3", "kimi_linear", "exaone_moe", "mimo_v2_flash"} else ""


def _mlp_types(keys: set, k: int) -> dict:
    """mlp_layer_types for k dense layers first (cut to the depth by _expand), where the config has them."""
    if "mlp_layer_types" not in keys:
        return {}
    return {"mlp_layer_types": ["dense"] * k + ["sparse"] * 64}


def _no_dense_first(keys: set) -> dict:
    return {"first_k_dense_replace": 0} if "first_k_dense_replace" in keys else {}


def build(variant: Variant, device: str = "cpu", dtype=None):
    """The model of one variant, seeded random weights, in eval mode."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    dtype = dtype or getattr(torch, DTYPE)
    cfg = probe(variant.arch, **variant.overrides)
    with _quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tf.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.to(device).eval()


def decoder_layers(model) -> list:
    """The decoder layers: the longest ModuleList whose length is the config's layer count (children of one or a few
    classes)."""
    import torch

    n = model.config.get_text_config().num_hidden_layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if not lists:
        raise LookupError(f"no ModuleList of {n} layers")
    return list(lists[0])


def layer_kinds(model) -> list[str]:
    """The class name of each decoder layer, with its mixers' class names where they differ between layers."""
    layers = decoder_layers(model)
    out = []
    for layer in layers:
        parts = [type(layer).__name__]
        for child_name, child in layer.named_children():
            if "norm" not in child_name.lower():
                parts.append(f"{child_name}={type(child).__name__}")
        out.append(" ".join(parts))
    return out


def main() -> None:
    import resource
    import time

    import torch

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a default size left huge fails, not the machine
    only = sys.argv[1:] or None
    ok = failed = 0
    for arch in architectures():
        if only and arch not in only:
            continue
        try:
            found = variants(arch)
        except Exception as exc:
            print(f"{arch}: no variants: {type(exc).__name__}: {str(exc)[:200]}")
            failed += 1
            continue
        for v in found:
            began = time.time()
            try:
                model = build(v, "cpu", torch.float32)
                kinds = layer_kinds(model)
                ids = torch.randint(0, VOCAB, (2, 8))
                with torch.no_grad():
                    out = model(input_ids=ids, use_cache=True)
                    out = model(input_ids=ids[:, :1], past_key_values=out.past_key_values, use_cache=True)
                distinct = sorted(set(kinds))
                print(f"ok {v.slug}: {len(kinds)} layers, {len(distinct)} kinds, {time.time() - began:.1f}s")
                ok += 1
            except Exception as exc:
                print(f"FAIL {v.slug}: {type(exc).__name__}: {str(exc)[:300]}")
                failed += 1
    print(f"{ok} ok, {failed} failed")


if __name__ == "__main__":
    main()
