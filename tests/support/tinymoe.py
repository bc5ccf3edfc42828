"""A tiny random-weight Mixture-of-Experts GGUF (arch qwen3moe) written with the `gguf` package.

Two layers, four experts (two active), a 64-wide model and a byte-level BPE vocabulary of 256
byte tokens plus ChatML and <think> specials: about 1 MB, loads in llama.cpp in a blink and
generates (nonsense) text. Its expert tensors are named like POCKET's, `blk.N.ffn_up_exps`,
so the experts-on-CPU override has something to match.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 16
N_LAYER = 2
N_EXPERT = 4
N_EXPERT_USED = 2
N_FF_EXP = 32
N_CTX_TRAIN = 2048

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}"
)


def byte_symbols() -> list[str]:
    """The byte-level BPE alphabet: each byte as the printable character GPT-2 maps it to."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def byte_vocab() -> tuple[list[str], list[int], list[str]]:
    """The byte-level vocabulary: (tokens, token types, merges): the 256 bytes, two merges
    ("he", "ll"), `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (control) and the think tags
    (user-defined)."""
    import gguf

    tokens = byte_symbols() + ["he", "ll"] + SPECIALS
    types = [gguf.TokenType.NORMAL] * 258 + [gguf.TokenType.CONTROL] * 3 + [
        gguf.TokenType.USER_DEFINED] * 2
    return tokens, types, ["h e", "l l"]


def add_tokenizer(w, tokens: list[str], types: list[int], merges: list[str], *, bos: str,
                  chat_template: str) -> None:
    """A GPT-2-style tokenizer on a `gguf.GGUFWriter`: `bos` also pads, `<|im_end|>` ends."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(bos))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index(bos))
    w.add_add_bos_token(False)
    w.add_chat_template(chat_template)


def write_tiny_moe(path: Path, *, seed: int = 0, chat_template: str = CHAT_TEMPLATE) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    tokens, token_types, merges = byte_vocab()
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_name("tiny-moe-test")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF_EXP * N_EXPERT_USED)
    w.add_expert_feed_forward_length(N_FF_EXP)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_EXPERT_USED)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(w, tokens, token_types, merges, bos="<|endoftext|>", chat_template=chat_template)

    def t(name: str, *shape: int, scale: float = 0.2) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    t("token_embd.weight", n_vocab, N_EMBD)
    ones("output_norm.weight", N_EMBD)
    t("output.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", N_EMBD)
        t(p + "attn_q.weight", N_HEAD * HEAD_DIM, N_EMBD)
        t(p + "attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(p + "attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(p + "attn_output.weight", N_EMBD, N_HEAD * HEAD_DIM)
        ones(p + "attn_q_norm.weight", HEAD_DIM)
        ones(p + "attn_k_norm.weight", HEAD_DIM)
        ones(p + "ffn_norm.weight", N_EMBD)
        t(p + "ffn_gate_inp.weight", N_EXPERT, N_EMBD)
        t(p + "ffn_gate_exps.weight", N_EXPERT, N_FF_EXP, N_EMBD)
        t(p + "ffn_up_exps.weight", N_EXPERT, N_FF_EXP, N_EMBD)
        t(p + "ffn_down_exps.weight", N_EXPERT, N_EMBD, N_FF_EXP)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


try:
    import pytest

    @pytest.fixture(scope="session")
    def tiny_moe(tmp_path_factory) -> Path:
        """The tiny MoE GGUF, written once per session (import this name into a test module)."""
        return write_tiny_moe(tmp_path_factory.mktemp("tinymoe") / "tiny-moe.gguf")
except ImportError:  # used outside pytest
    pass
