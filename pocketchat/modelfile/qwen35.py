"""The `qwen35moe` architecture (POCKET's) as data: its sizes, tensor table and GGUF keys.

What a writer of a synthetic `qwen35moe` GGUF needs, at any size: the kernel probe's one-layer-
per-type model, the tests' tiny model (tests/support/tinyqwen35.py) and the full-size synthetic
POCKET (benchmarks/pocket_gguf.py). Plain data and functions; `add_hparams` takes any object
with `gguf.GGUFWriter`'s methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pocketchat.modelfile.layers import is_full_attention


@dataclass(frozen=True)
class Qwen35Shape:
    """The sizes of a `qwen35moe` model: everything its tensor table and hparams follow from.

    The defaults are POCKET-35B's. `tensor_table` and `add_hparams` are the one description
    of the architecture's tensors and keys: the kernel probe's small model
    (engines/llamacpp/kernels.py), the tests' tiny one and benchmarks/pocket_gguf.py's full
    size all use them.
    """

    n_embd: int = 2048
    n_head: int = 16
    n_head_kv: int = 2
    head_dim: int = 256
    n_layer: int = 40
    full_attention_interval: int = 4
    n_expert: int = 256
    n_expert_used: int = 8
    n_ff_exp: int = 512
    n_ff_shexp: int = 512
    n_ctx_train: int = 262_144
    ssm_state: int = 128  # Gated DeltaNet head dim (keys and values)
    ssm_groups: int = 16  # key heads
    ssm_v_heads: int = 32  # value heads
    ssm_conv: int = 4
    rope_dims: int = 64
    rope_sections: tuple[int, int, int, int] = (11, 11, 10, 0)
    rope_base: float = 10_000_000.0
    mtp: int = 0  # multi-token-prediction blocks after the trunk (Qwen3.5's: 1; 0: none)

    @property
    def ssm_inner(self) -> int:
        return self.ssm_state * self.ssm_v_heads

    def is_full_attention(self, layer: int) -> bool:
        return is_full_attention(layer, self.full_attention_interval)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: its name, its dims in llama.cpp's order (ne), and how it starts:
    "normal" (random), "ones" (norm weights) or "neg_ones" (DeltaNet's A)."""

    name: str
    ne: tuple[int, ...]
    init: str = "normal"


POCKET = Qwen35Shape()  # POCKET-35B (shared/pocket-builds.md): Qwen3.5-35B-A3B's shape
POCKET_VOCAB = 248_320  # its vocabulary (Qwen3.5's)


def tensor_table(shape: Qwen35Shape, n_vocab: int) -> list[TensorSpec]:
    """Every tensor of a `qwen35moe` model of `shape`, in file order."""
    s, e = shape, shape.n_embd
    key_dim, value_dim = s.ssm_state * s.ssm_groups, s.ssm_inner
    out = [TensorSpec("token_embd.weight", (e, n_vocab)), TensorSpec("output_norm.weight", (e,), "ones"),
           TensorSpec("output.weight", (e, n_vocab))]
    for i in range(s.n_layer):
        p = f"blk.{i}."
        out += [TensorSpec(p + "attn_norm.weight", (e,), "ones"),
                TensorSpec(p + "post_attention_norm.weight", (e,), "ones")]
        if s.is_full_attention(i):
            out += _attention(s, p)
        else:
            out += [TensorSpec(p + "attn_qkv.weight", (e, key_dim * 2 + value_dim)),
                    TensorSpec(p + "attn_gate.weight", (e, value_dim)),
                    TensorSpec(p + "ssm_conv1d.weight", (s.ssm_conv, key_dim * 2 + value_dim)),
                    TensorSpec(p + "ssm_dt.bias", (s.ssm_v_heads,)),
                    TensorSpec(p + "ssm_a", (s.ssm_v_heads,), "neg_ones"),
                    TensorSpec(p + "ssm_beta.weight", (e, s.ssm_v_heads)),
                    TensorSpec(p + "ssm_alpha.weight", (e, s.ssm_v_heads)),
                    TensorSpec(p + "ssm_norm.weight", (s.ssm_state,), "ones"),
                    TensorSpec(p + "ssm_out.weight", (value_dim, e))]
        out += _experts(s, p)
    for i in range(s.n_layer, s.n_layer + s.mtp):
        out += _mtp_block(s, f"blk.{i}.")
    return out


def _attention(s: Qwen35Shape, p: str) -> list[TensorSpec]:
    """A full-attention layer's tensors (its query doubled: the output gate)."""
    e = s.n_embd
    return [TensorSpec(p + "attn_q.weight", (e, s.head_dim * s.n_head * 2)),
            TensorSpec(p + "attn_k.weight", (e, s.head_dim * s.n_head_kv)),
            TensorSpec(p + "attn_v.weight", (e, s.head_dim * s.n_head_kv)),
            TensorSpec(p + "attn_output.weight", (s.head_dim * s.n_head, e)),
            TensorSpec(p + "attn_q_norm.weight", (s.head_dim,), "ones"),
            TensorSpec(p + "attn_k_norm.weight", (s.head_dim,), "ones")]


def _experts(s: Qwen35Shape, p: str) -> list[TensorSpec]:
    """A layer's routed experts, their router, and the gated shared expert."""
    e = s.n_embd
    return [TensorSpec(p + "ffn_gate_inp.weight", (e, s.n_expert)),
            TensorSpec(p + "ffn_gate_exps.weight", (e, s.n_ff_exp, s.n_expert)),
            TensorSpec(p + "ffn_up_exps.weight", (e, s.n_ff_exp, s.n_expert)),
            TensorSpec(p + "ffn_down_exps.weight", (s.n_ff_exp, e, s.n_expert)),
            TensorSpec(p + "ffn_gate_inp_shexp.weight", (e,)),
            TensorSpec(p + "ffn_gate_shexp.weight", (e, s.n_ff_shexp)),
            TensorSpec(p + "ffn_up_shexp.weight", (e, s.n_ff_shexp)),
            TensorSpec(p + "ffn_down_shexp.weight", (s.n_ff_shexp, e))]


def _mtp_block(s: Qwen35Shape, p: str) -> list[TensorSpec]:
    """One MTP block (as llama.cpp's converter writes Qwen3.5's `mtp.*`): the embedding and
    the trunk's last hidden state, each normed, joined by `eh_proj`, then a full-attention
    block with the routed and shared experts; the trunk's `output` is its head."""
    e = s.n_embd
    return [TensorSpec(p + "nextn.eh_proj.weight", (2 * e, e)),
            TensorSpec(p + "nextn.enorm.weight", (e,), "ones"),
            TensorSpec(p + "nextn.hnorm.weight", (e,), "ones"),
            TensorSpec(p + "nextn.shared_head_norm.weight", (e,), "ones"),
            TensorSpec(p + "attn_norm.weight", (e,), "ones"),
            TensorSpec(p + "post_attention_norm.weight", (e,), "ones"),
            *_attention(s, p), *_experts(s, p)]


def add_hparams(w: Any, shape: Qwen35Shape) -> None:
    """The architecture's keys (sizes, attention, experts, DeltaNet) on a `gguf.GGUFWriter`."""
    s, arch = shape, "qwen35moe"
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer + s.mtp)  # llama.cpp counts the MTP blocks among the blocks
    w.add_feed_forward_length(s.n_ff_exp * s.n_expert_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_expert_shared_feed_forward_length(s.n_ff_shexp)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.rope_dims)
    w.add_rope_dimension_sections(list(s.rope_sections))
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_ssm_conv_kernel(s.ssm_conv)
    w.add_ssm_inner_size(s.ssm_inner)
    w.add_ssm_state_size(s.ssm_state)
    w.add_ssm_time_step_rank(s.ssm_v_heads)
    w.add_ssm_group_count(s.ssm_groups)
    w.add_uint32(f"{arch}.full_attention_interval", s.full_attention_interval)
    if s.mtp:
        w.add_uint32(f"{arch}.nextn_predict_layers", s.mtp)
