"""A tiny random-weight llama-style MLX model folder, written from scratch for the tests.

`write_tiny_llama(folder)` writes what an MLX repo on the Hub holds:
- config.json: model_type llama, 64 wide, 2 layers, 4 query / 2 KV heads;
- model.safetensors: float32 weights under the Hugging Face llama names (about 0.3 MB);
- tokenizer.json: a byte-level BPE trained with the `tokenizers` library on a few sentences,
  with ChatML and <think> special tokens; tokenizer_config.json with a Qwen3-style ChatML
  template that knows `enable_thinking`.

`scripted=True` makes a model whose answer is known in advance: attention and MLP outputs are
zero, so the next token depends only on the current one, and the output matrix maps each
token of SCRIPT to the next (greedy decoding follows the chain). The generation prompt ends
with a newline, so the model answers `<think>hmm</think>Hello<|im_end|>` with thinking on,
and after the template's empty think block (`</think>\\n\\n`) just `Hello<|im_end|>`.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
CONTEXT = 4096
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- set c = m['content'] -%}"
    "{%- if '</think>' in c -%}{%- set c = c.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' + c + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}"
)

CORPUS = [
    "Hello! How can I help you today?",
    "hmm, let me think about that. hmm hmm hmm",
    "Write a story about a dragon who learns to bake bread.",
    "The river is long and wide and deep. Noted fact, the river is long, wide and deep.",
    "Name three colours of the rainbow, please, and say why you like them.",
    "Question: which facts do you remember? You are terse. Say only: yes",
    "Once upon a time there was a small village by the sea, with a lighthouse and a market.",
    "\n\n", "\n", " \n\n", "Hello\n\nHello\n",
]

# (from, to): greedy decoding follows these steps in the scripted model.
SCRIPT = [("\n", "<think>"), ("<think>", "hmm"), ("hmm", "</think>"), ("</think>", "Hello"),
          ("\n\n", "Hello"), ("Hello", "<|im_end|>")]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, min_frequency=1,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tok


def _single_id(tok, text: str) -> int:
    ids = tok.encode(text, add_special_tokens=False).ids
    assert len(ids) == 1, f"{text!r} is {len(ids)} tokens in the fixture vocabulary"
    return ids[0]


def write_tiny_llama(folder: Path, *, scripted: bool = False, seed: int = 0) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    im_end = tok.token_to_id("<|im_end|>")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": CONTEXT,
        "chat_template": CHAT_TEMPLATE,
    }, indent=1))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": CONTEXT,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "eos_token_id": im_end,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hd = HIDDEN // HEADS
    embed = w(vocab, HIDDEN, scale=1.0)
    head = w(vocab, HIDDEN, scale=0.2)
    # Random text should look like text: special and non-ASCII byte tokens are rarely chosen.
    rare = [i for t, i in tok.get_vocab().items()
            if t in SPECIALS or any(ord(ch) > 0x7E or ch in "ĊĠĉ" for ch in t) and len(t) == 1]
    head[rare] *= 0.05
    out = 0.0 if scripted else 1.0
    tensors = {"model.embed_tokens.weight": embed, "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": w(HEADS * hd, HIDDEN, scale=0.1),
            p + "self_attn.k_proj.weight": w(KV_HEADS * hd, HIDDEN, scale=0.1),
            p + "self_attn.v_proj.weight": w(KV_HEADS * hd, HIDDEN, scale=0.1),
            p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * hd, scale=0.1) * out,
            p + "mlp.gate_proj.weight": w(INTERMEDIATE, HIDDEN, scale=0.1),
            p + "mlp.up_proj.weight": w(INTERMEDIATE, HIDDEN, scale=0.1),
            p + "mlp.down_proj.weight": w(HIDDEN, INTERMEDIATE, scale=0.1) * out,
            p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
            p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
        })
    if scripted:
        head = w(vocab, HIDDEN, scale=0.01)
        for src, dst in SCRIPT:
            a = tok.token_to_id(src) if src in SPECIALS else _single_id(tok, src)
            b = tok.token_to_id(dst) if dst in SPECIALS else _single_id(tok, dst)
            head[b] += 10.0 * embed[a] / np.linalg.norm(embed[a])
    tensors["lm_head.weight"] = head
    from safetensors.numpy import save_file

    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "mlx"})
    return folder


_shared: dict[str, Path] = {}


def shared_model(kind: str = "random") -> Path:
    """One folder per kind for the whole test session (the makers have no tmp_path)."""
    if kind not in _shared:
        root = Path(tempfile.mkdtemp(prefix=f"pocketchat-mlx-{kind}-"))
        atexit.register(shutil.rmtree, root, True)
        _shared[kind] = write_tiny_llama(root / f"tiny-llama-{kind}", scripted=kind == "scripted")
    return _shared[kind]


def write_tiny_qwen35_moe(folder: Path, *, seed: int = 0) -> Path:
    """POCKET's architecture family at toy size: model_type qwen3_5_moe, Gated-DeltaNet layers
    with a full-attention layer every second one, 4 experts (2 active) and a shared expert.

    Its linear-attention state cannot be trimmed, so it exercises the engine's checkpoints.
    The weights are mlx-lm's own initialisation (this one needs mlx to be written).
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    folder = write_tiny_llama(folder, seed=seed)
    vocab = json.loads((folder / "config.json").read_text())
    config = {
        "model_type": "qwen3_5_moe",
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "eos_token_id": vocab["eos_token_id"],
        "text_config": {
            "model_type": "qwen3_5_moe_text", "hidden_size": HIDDEN, "intermediate_size": 128,
            "num_hidden_layers": 4, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "head_dim": HIDDEN // HEADS, "vocab_size": vocab["vocab_size"],
            "max_position_embeddings": CONTEXT, "full_attention_interval": 2,
            "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32, "tie_word_embeddings": False,
            "rms_norm_eps": 1e-6,
        },
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder
