"""The facts a memory plan needs from a Hugging Face `config.json` (an MLX folder's).

Multimodal configs nest the language model in `text_config`. Which layers hold a KV cache: the
config's `layer_types` when it lists them, else its `full_attention_interval`, else the
interval its architecture uses without saying (mlx-lm's default for Qwen3.5 and Qwen3-Next:
4), else every layer (`layers.py` is the one rule).
"""

from __future__ import annotations

from typing import Any

from pocketchat.modelfile.facts import ModelFacts
from pocketchat.modelfile.layers import full_attention_layers

# Architectures that put a full-attention layer every N layers when the config does not say N.
HYBRID_INTERVAL = {"qwen3_next": 4, "qwen3_5": 4, "qwen3_5_moe": 4}
ATTENTION_TYPES = {"full_attention": False, "attention": False, "sliding_attention": True}  # -> slides


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (multimodal configs nest it in `text_config`)."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def config_facts(config: dict[str, Any], *, weight_bytes: int = 0, name: str = "") -> ModelFacts | None:
    """The facts of the model a config describes (None: it does not say its layers and heads)."""
    c = text_config(config)
    try:
        n_layer = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or int(c["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    kinds = c.get("layer_types")
    if isinstance(kinds, list) and len(kinds) >= n_layer:
        kv = tuple(i for i, k in enumerate(kinds[:n_layer]) if k in ATTENTION_TYPES)
        swa = tuple(i for i in kv if ATTENTION_TYPES[kinds[i]])
    else:
        kv, swa = full_attention_layers(n_layer, _interval(config, c)), ()
    window = c.get("sliding_window")
    ctx = c.get("max_position_embeddings")
    return ModelFacts(
        arch=str(config.get("model_type", "")), name=name, file_bytes=weight_bytes,
        weight_bytes=weight_bytes, block_count=n_layer,
        context_length=ctx if isinstance(ctx, int) and ctx > 0 else None,
        vocab_size=int(c.get("vocab_size") or 0), n_embd=int(c.get("hidden_size") or 0), n_head=heads,
        kv_layers=kv, kv_heads=(kv_heads,) * len(kv), key_length=head_dim, value_length=head_dim,
        swa_layers=swa, sliding_window=window if swa and isinstance(window, int) else 0,
        recurrent_layers=tuple(i for i in range(n_layer) if i not in kv),
    )


def _interval(config: dict[str, Any], c: dict[str, Any]) -> int:
    interval = c.get("full_attention_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        return interval
    kinds = (str(config.get("model_type", "")), str(c.get("model_type", "")).removesuffix("_text"))
    return next((HYBRID_INTERVAL[k] for k in kinds if k in HYBRID_INTERVAL), 1)
