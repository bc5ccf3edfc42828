"""Which layers of a hybrid model are full attention, and so hold a KV cache: one rule.

Hybrid models interleave recurrent layers (Gated DeltaNet, Mamba: a state of fixed size, no KV
cache per token) with full-attention ones. `qwen35moe` (POCKET, Qwen3.5) and Qwen3-Next put a
full-attention layer every `full_attention_interval` layers, counting from 1: of POCKET's 40
layers at the interval 4, layers 3, 7, ..., 39. The GGUF reader (`facts.py`), a Hugging Face
config (`hfconfig.py`: an MLX folder's) and POCKET's shape (`qwen35.py`) all ask here.
"""

from __future__ import annotations


def is_full_attention(layer: int, interval: int) -> bool:
    """Whether `layer` (from 0) is a full-attention layer at this interval (every layer: <= 1)."""
    return interval <= 1 or (layer + 1) % interval == 0


def full_attention_layers(n_layer: int, interval: int) -> tuple[int, ...]:
    """The full-attention layers of a model of `n_layer` layers at this interval."""
    return tuple(i for i in range(n_layer) if is_full_attention(i, interval))
