"""A tiny random-weight `qwen35moe` GGUF (POCKET's architecture) written with the `gguf` package.

Four layers: three Gated-DeltaNet (recurrent) layers and one full-attention layer (every 4th,
as in POCKET), eight routed experts (two active) plus a shared expert, a 64-wide model and the
byte-level vocabulary of `tinymoe`. About 1 MB; llama.cpp loads it and generates nonsense.
The architecture at any size (`Qwen35Shape`, `tensor_table`, `add_hparams`) is
`pocketchat/modelfile/qwen35.py`'s, re-exported here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from pocketchat.modelfile.qwen35 import Qwen35Shape, TensorSpec, add_hparams, tensor_table  # noqa: F401
from support.tinymoe import CHAT_TEMPLATE, add_tokenizer, byte_symbols, byte_vocab

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 16
N_LAYER = 4
FULL_ATTENTION_INTERVAL = 4
N_EXPERT = 8
N_EXPERT_USED = 2
N_FF_EXP = 32
N_FF_SHEXP = 32
N_CTX_TRAIN = 32768
# Gated DeltaNet: head dim (state size) 16, 2 key heads (groups), 4 value heads.
SSM_STATE = 16
SSM_GROUPS = 2
SSM_V_HEADS = 4
SSM_INNER = SSM_STATE * SSM_V_HEADS
SSM_CONV = 4


# Behaves like Qwen3.5/3.6's template where prompt reuse is concerned: earlier assistant turns
# are rendered without their reasoning; the generation prompt ends in `<think>\n` (thinking
# on) or `<think>\n\n</think>\n\n` (off).
QWEN35_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)

# Like Qwen3.6's template where reasoning is concerned (written for these tests): an assistant
# turn's reasoning is its `reasoning_content`, else the part of its content before `</think>`,
# trimmed; it is rendered as `<think>\nR\n</think>\n\n` before the content for the turns
# after the last user message, and for every turn with `preserve_thinking`; other turns show
# their content only. The generation prompt ends in `<think>\n` (thinking on) or
# `<think>\n\n</think>\n\n` (off).
QWEN36_TEMPLATE = (
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_query = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content or '' %}"
    "{%- set reasoning = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if (preserve_thinking is defined and preserve_thinking is true) "
    "or loop.index0 > ns.last_query %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning | trim + '\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)

# Like Qwen3.5/3.6's template where tools are concerned (written for these tests): the tools are
# listed as JSON lines inside <tools></tools> in the system turn with the XML call format; an
# assistant turn's tool_calls are rendered in that format (arguments iterated as an object, a
# non-string value as JSON); tool results are user turns wrapped in <tool_response>; the
# reasoning of the turns after the last user message is kept (`reasoning_content`), or of
# every turn with `preserve_thinking`.
QWEN35_TOOLS_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function reply with:\\n<tool_call>\\n<function=NAME>\\n"
    "<parameter=NAME>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{%- if not loop.first %}"
    "{{- '<|im_start|>system\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set content = m.content or '' %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if m.reasoning_content is defined and m.reasoning_content is not none and "
    "(loop.index0 > ns.last_user or preserve_thinking is defined and preserve_thinking) %}"
    "{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' }}{%- endif %}"
    "{{- content }}"
    "{%- if m.tool_calls %}{%- for call in m.tool_calls %}"
    "{%- if content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + call.function.name + '>\\n' }}"
    "{%- for key, value in call.function.arguments.items() %}"
    "{{- '<parameter=' + key + '>\\n' }}"
    "{%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}"
    "{{- '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)


# The real templates (`templates/README.md`): they refuse a conversation without a user query
# and a system message that is not first, which the simplified ones above accept.
TEMPLATES = Path(__file__).parent / "templates"
REAL_QWEN36_TEMPLATE = (TEMPLATES / "qwen3.6.jinja").read_text(encoding="utf-8")
REAL_QWEN35_TEMPLATE = (TEMPLATES / "qwen3.5.jinja").read_text(encoding="utf-8")
REAL_TEMPLATES = {"qwen3.5": REAL_QWEN35_TEMPLATE, "qwen3.6": REAL_QWEN36_TEMPLATE}


TINY = Qwen35Shape(
    n_embd=N_EMBD, n_head=N_HEAD, n_head_kv=N_HEAD_KV, head_dim=HEAD_DIM, n_layer=N_LAYER,
    full_attention_interval=FULL_ATTENTION_INTERVAL, n_expert=N_EXPERT, n_expert_used=N_EXPERT_USED,
    n_ff_exp=N_FF_EXP, n_ff_shexp=N_FF_SHEXP, n_ctx_train=N_CTX_TRAIN, ssm_state=SSM_STATE,
    ssm_groups=SSM_GROUPS, ssm_v_heads=SSM_V_HEADS, ssm_conv=SSM_CONV, rope_dims=8,
    rope_sections=(2, 1, 1, 0), rope_base=10000.0,
)


RESIDUAL_WRITERS = ("attn_output.weight", "ssm_out.weight", "ffn_down_exps.weight",
                    "ffn_down_shexp.weight")


def _never_write(name: str, data: np.ndarray, never: list[int]) -> None:
    """`write_tiny_qwen35moe(never=)`'s weights, in place: the constant dimension 0 and the
    rows that make `never` lose every time."""
    if name == "token_embd.weight":
        data[:, 0] = 1.0
    elif name == "output.weight":
        data[never, 0] = -1e5
    elif name.endswith(RESIDUAL_WRITERS):  # numpy's order: the output (residual) axis is -2
        data[..., 0, :] = 0.0


ASCII_TEXT = [0x0A, *range(0x20, 0x7F)]  # newline and the printable ASCII bytes


def write_tiny_qwen35moe(path: Path, *, seed: int = 0, n_layer: int = N_LAYER,
                         chat_template: str = CHAT_TEMPLATE, ascii_only: bool = False,
                         mtp: int = 0, never: tuple[str, ...] = ()) -> Path:
    """The tiny random-weight qwen35moe. `ascii_only`: its vocabulary is newline, the printable
    ASCII bytes (no merges), `<|im_start|>` (user-defined: written as text) and `<|im_end|>`
    (its only control token, end of text), so whatever it writes encodes back to the same
    tokens: a history rendered from its answers extends its state exactly. `<think>` and
    `</think>` are plain text there. `mtp`: MTP blocks after the trunk (Qwen3.5's draft head).
    `never`: tokens the model never writes (a thought it cannot end itself): the residual
    stream's first dimension is a constant 1 that no layer writes to, so after the final norm it
    is always positive, and these tokens' output rows weigh it by -1e5."""
    import gguf

    shape = replace(TINY, n_layer=n_layer, mtp=mtp)
    rng = np.random.default_rng(seed)
    symbols = byte_symbols()
    if ascii_only:
        words = [symbols[b] for b in ASCII_TEXT]
        tokens = words + ["<|im_start|>", "<|im_end|>"]
        token_types = [gguf.TokenType.NORMAL] * len(words) + [gguf.TokenType.USER_DEFINED,
                                                               gguf.TokenType.CONTROL]
        # llama.cpp wants merges; this one joins two bytes the vocabulary never holds
        merges, bos = [f"{symbols[0]} {symbols[1]}"], "<|im_start|>"
    else:
        (tokens, token_types, merges), bos = byte_vocab(), "<|endoftext|>"
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_name("tiny-qwen35moe-test")
    add_hparams(w, shape)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(w, tokens, token_types, merges, bos=bos, chat_template=chat_template)
    never_ids = [tokens.index(t) for t in never]
    for spec in tensor_table(shape, n_vocab):
        dims = tuple(reversed(spec.ne))  # numpy's order
        if spec.init == "normal":
            data = (rng.standard_normal(dims) * 0.2).astype(np.float32)
        else:
            data = np.full(dims, 1.0 if spec.init == "ones" else -1.0, dtype=np.float32)
        if never_ids:
            _never_write(spec.name, data, never_ids)
        w.add_tensor(spec.name, data)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


try:
    import pytest

    @pytest.fixture(scope="session")
    def tiny_qwen35moe(tmp_path_factory) -> Path:
        """The tiny qwen35moe GGUF, written once per session (import this name into a test module)."""
        return write_tiny_qwen35moe(tmp_path_factory.mktemp("tinyq35") / "tiny-qwen35moe.gguf")

    @pytest.fixture(scope="session")
    def tiny_qwen35(tmp_path_factory) -> Path:
        """The same with the Qwen3.5-like chat template (prompt reuse tests)."""
        return write_tiny_qwen35moe(tmp_path_factory.mktemp("tinyq35t") / "tiny-qwen35moe.gguf",
                                    chat_template=QWEN35_TEMPLATE)

    @pytest.fixture(scope="session")
    def tiny_qwen35_tools(tmp_path_factory) -> Path:
        """The same with the Qwen3.5-like template that renders tools (tool call tests)."""
        return write_tiny_qwen35moe(tmp_path_factory.mktemp("tinyq35tools") / "tiny-qwen35moe.gguf",
                                    chat_template=QWEN35_TOOLS_TEMPLATE)
    @pytest.fixture(scope="session")
    def tiny_qwen36_real(tmp_path_factory) -> Path:
        """The same with Qwen3.6's real chat template (POCKET's)."""
        return write_tiny_qwen35moe(tmp_path_factory.mktemp("tinyq36real") / "tiny-qwen35moe.gguf",
                                    chat_template=REAL_QWEN36_TEMPLATE)
except ImportError:  # used outside pytest
    pass
