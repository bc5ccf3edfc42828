"""A tiny random-weight `qwen35moe` GGUF (POCKET's architecture) written with the `gguf` package.

Four layers: three Gated-DeltaNet (recurrent) layers and one full-attention layer (every 4th,
as in POCKET), eight routed experts (two active) plus a shared expert, a 64-wide model and the
byte-level vocabulary of `tinymoe`. About 1 MB; llama.cpp loads it and generates nonsense.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tinymoe import CHAT_TEMPLATE, SPECIALS, byte_symbols
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


def write_tiny_qwen35moe(path: Path, *, seed: int = 0, n_layer: int = N_LAYER,
                         chat_template: str = CHAT_TEMPLATE) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    tokens = byte_symbols() + ["he", "ll"] + SPECIALS
    token_types = [gguf.TokenType.NORMAL] * 258 + [gguf.TokenType.CONTROL] * 3 + [
        gguf.TokenType.USER_DEFINED
    ] * 2
    n_vocab = len(tokens)
    arch = "qwen35moe"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-qwen35moe-test")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(N_FF_EXP * N_EXPERT_USED)
    w.add_expert_feed_forward_length(N_FF_EXP)
    w.add_expert_shared_feed_forward_length(N_FF_SHEXP)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(8)
    w.add_rope_dimension_sections([2, 1, 1, 0])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_EXPERT_USED)
    w.add_ssm_conv_kernel(SSM_CONV)
    w.add_ssm_inner_size(SSM_INNER)
    w.add_ssm_state_size(SSM_STATE)
    w.add_ssm_time_step_rank(SSM_V_HEADS)
    w.add_ssm_group_count(SSM_GROUPS)
    w.add_uint32(f"{arch}.full_attention_interval", FULL_ATTENTION_INTERVAL)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(["h e", "l l"])
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(chat_template)

    def t(name: str, *ne: int, scale: float = 0.2) -> None:  # ne in llama.cpp's order
        w.add_tensor(name, (rng.standard_normal(tuple(reversed(ne))) * scale).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    key_dim, value_dim = SSM_STATE * SSM_GROUPS, SSM_STATE * SSM_V_HEADS
    t("token_embd.weight", N_EMBD, n_vocab)
    ones("output_norm.weight", N_EMBD)
    t("output.weight", N_EMBD, n_vocab)
    for i in range(n_layer):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", N_EMBD)
        ones(p + "post_attention_norm.weight", N_EMBD)
        if (i + 1) % FULL_ATTENTION_INTERVAL == 0:
            t(p + "attn_q.weight", N_EMBD, HEAD_DIM * N_HEAD * 2)
            t(p + "attn_k.weight", N_EMBD, HEAD_DIM * N_HEAD_KV)
            t(p + "attn_v.weight", N_EMBD, HEAD_DIM * N_HEAD_KV)
            t(p + "attn_output.weight", HEAD_DIM * N_HEAD, N_EMBD)
            ones(p + "attn_q_norm.weight", HEAD_DIM)
            ones(p + "attn_k_norm.weight", HEAD_DIM)
        else:
            t(p + "attn_qkv.weight", N_EMBD, key_dim * 2 + value_dim)
            t(p + "attn_gate.weight", N_EMBD, value_dim)
            t(p + "ssm_conv1d.weight", SSM_CONV, key_dim * 2 + value_dim)
            t(p + "ssm_dt.bias", SSM_V_HEADS)
            w.add_tensor(p + "ssm_a", -np.ones(SSM_V_HEADS, dtype=np.float32))
            t(p + "ssm_beta.weight", N_EMBD, SSM_V_HEADS)
            t(p + "ssm_alpha.weight", N_EMBD, SSM_V_HEADS)
            ones(p + "ssm_norm.weight", SSM_STATE)
            t(p + "ssm_out.weight", value_dim, N_EMBD)
        t(p + "ffn_gate_inp.weight", N_EMBD, N_EXPERT)
        t(p + "ffn_gate_exps.weight", N_EMBD, N_FF_EXP, N_EXPERT)
        t(p + "ffn_up_exps.weight", N_EMBD, N_FF_EXP, N_EXPERT)
        t(p + "ffn_down_exps.weight", N_FF_EXP, N_EMBD, N_EXPERT)
        t(p + "ffn_gate_inp_shexp.weight", N_EMBD)
        t(p + "ffn_gate_shexp.weight", N_EMBD, N_FF_SHEXP)
        t(p + "ffn_up_shexp.weight", N_EMBD, N_FF_SHEXP)
        t(p + "ffn_down_shexp.weight", N_FF_SHEXP, N_EMBD)

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
except ImportError:  # used outside pytest
    pass
