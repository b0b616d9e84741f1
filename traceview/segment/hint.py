"""The number of layers per forward pass, as the user knows it: `--layers N`, or a model's `config.json`.

Reads a Hugging Face style config (`num_hidden_layers`, or the same in `text_config` for a multimodal model;
`n_layer` / `num_layers` for older ones). Raises UsageError, one line, for a file that holds no layer count.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UsageError

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def layers_from_config(path: str | Path) -> int:
    """The layer count of a model config file."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(path, f"not a readable JSON model config ({error.__class__.__name__})", _REMEDY) from None
    for section in (config, config.get("text_config") if isinstance(config, dict) else None):
        if isinstance(section, dict):
            for key in LAYER_KEYS:
                value = section.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    raise UsageError(path, f"no layer count ({' / '.join(LAYER_KEYS)}) in the model config", _REMEDY)


_REMEDY = "pass the model's config.json, or give the count with --layers N"
