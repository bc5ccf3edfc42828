"""The facts a memory plan needs, read from a GGUF header: plain data for any architecture.

`facts_of(info)` turns a walked header (`gguf.check_gguf` on a local file, `gguf.read_header`
on the first bytes of a remote one) into `ModelFacts`: which layers hold a KV cache and how
wide it is, which hold a recurrent state and how large it is, and how many bytes each kind of
tensor takes (the routed experts of every layer, and the rest).

Layers are classified from the tensors first (a layer with `ssm_*` / `time_mix_*` /
`shortconv` tensors is recurrent; one with attention tensors outside a recurrent layer holds
KV), then from the metadata (`full_attention_interval`, per-layer `head_count_kv`), so a new
architecture built from known parts is read right without a table of architectures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pocketchat.modelfile.gguf import EXPERT_TENSOR, GGUFInfo
from pocketchat.modelfile.layers import is_full_attention

_LAYER = re.compile(r"^blk\.(\d+)\.")
_RECURRENT_TENSOR = re.compile(r"^blk\.\d+\.(ssm_|time_mix_|shortconv)")
_ATTN_TENSOR = re.compile(r"^blk\.\d+\.attn_(k|qkv|kv_a_mqa|k_b)\.weight$")
# Layer periods llama.cpp sets in code for sliding-window models whose files carry none.
_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gemma3n": 5}
F32 = 4


@dataclass(frozen=True)
class ModelFacts:
    """What one GGUF holds, as a memory plan sees it."""

    arch: str
    name: str
    file_bytes: int
    weight_bytes: int
    block_count: int
    context_length: int | None
    vocab_size: int
    n_embd: int
    n_head: int
    kv_layers: tuple[int, ...]  # layers that hold a KV cache
    kv_heads: tuple[int, ...]  # KV heads of each layer in kv_layers
    key_length: int
    value_length: int
    swa_layers: tuple[int, ...] = ()  # the kv_layers that attend within a sliding window
    sliding_window: int = 0
    recurrent_layers: tuple[int, ...] = ()
    recurrent_state_bytes: int = 0  # per sequence, all recurrent layers together
    expert_count: int = 0
    expert_used_count: int = 0
    expert_layer_bytes: tuple[tuple[int, int], ...] = ()  # (layer, routed expert bytes)
    header_bytes: int = 0
    merge_count: int = 0
    # (ggml type, bytes) of the 2-D and 3-D weights a matrix product reads whole, rows a
    # multiple of 8 (what llama.cpp's CPU backend may repack; select/repack.py says which types)
    weight_type_bytes: tuple[tuple[int, int], ...] = ()
    embedding_bytes: int = 0  # token embeddings beside an output matrix: one row read per token
    # (ggml type, role, bytes) of the weights one generated token reads: "expert" for the
    # routed experts (the used share of them), "output" for the output matrix (a prompt's tokens
    # but its last skip it), "dense" for the other matrices (select/kernels.py prices each at
    # this machine's measured rate)
    active_type_bytes: tuple[tuple[int, str, int], ...] = ()
    # a multi-token-prediction block after the trunk (Qwen3.5's draft head): its blocks, the
    # bytes of its tensors (read only when drafts load it), its KV per token
    mtp_layers: int = 0
    mtp_bytes: int = 0
    mtp_kv_per_token: int = 0  # elements (K and V) per token of its KV cache

    @property
    def expert_bytes(self) -> int:
        """Bytes of every routed-expert tensor."""
        return sum(b for _, b in self.expert_layer_bytes)

    @property
    def other_bytes(self) -> int:
        """Bytes of everything but the routed experts (attention, shared expert, embeddings)."""
        return self.weight_bytes - self.expert_bytes

    @property
    def is_moe(self) -> bool:
        return self.expert_bytes > 0

    @property
    def active_bytes(self) -> int:
        """Weight bytes read per generated token: the non-expert weights plus the active experts
        (of the token embeddings beside an output matrix, only a row: left out)."""
        if not self.is_moe or self.expert_count <= 0:
            return self.weight_bytes - self.embedding_bytes
        used = min(max(self.expert_used_count, 1), self.expert_count)
        return self.other_bytes - self.embedding_bytes + self.expert_bytes * used // self.expert_count

    def kv_bytes_per_token(self, elem_bytes: float = 2.0, *, n_ctx: int | None = None,
                           swa_full: bool = True) -> float:
        """KV cache bytes per context token (F16 by default).

        With `swa_full=False` and an `n_ctx`, sliding-window layers hold only their window.
        """
        per = 0.0
        for layer, heads in zip(self.kv_layers, self.kv_heads, strict=False):
            width = heads * (self.key_length + self.value_length) * elem_bytes
            if not swa_full and n_ctx and self.sliding_window and layer in self.swa_layers:
                width *= min(1.0, self.sliding_window / n_ctx)
            per += width
        return per

    def kv_cache_bytes(self, n_ctx: int, elem_bytes: float = 2.0) -> int:
        """The KV cache at `n_ctx` tokens (F16 by default): only the layers that hold one (a
        hybrid model's recurrent layers hold none; `layers.py` says which are full attention)."""
        return int(self.kv_bytes_per_token(elem_bytes) * max(0, n_ctx))

    def expert_bytes_of_first(self, n_layers: int) -> int:
        """Routed-expert bytes of the first `n_layers` layers (what `--n-cpu-moe N` keeps in RAM)."""
        return sum(b for layer, b in self.expert_layer_bytes if layer < n_layers)

    @property
    def expert_layers(self) -> int:
        return len(self.expert_layer_bytes)


def _num(meta: dict[str, Any], key: str, default: int = 0) -> int:
    v = meta.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _per_layer(info: GGUFInfo, key: str, n_layer: int, default: int) -> list[int]:
    """A value that may be one number or one per layer."""
    arr = info.arrays.get(key)
    if arr is not None and len(arr) >= n_layer:
        return [int(x) for x in arr[:n_layer]]
    return [_num(info.metadata, key, default)] * n_layer


def _layer_kinds(info: GGUFInfo, n_layer: int, kv_heads: list[int]) -> tuple[list[int], list[int]]:
    """(recurrent layers, KV layers), from the tensors, then the metadata."""
    arch, meta = info.arch, info.metadata
    recurrent: set[int] = set()
    attention: set[int] = set()
    for t in info.tensors:
        m = _LAYER.match(t.name)
        if not m or int(m.group(1)) >= n_layer:
            continue
        if _RECURRENT_TENSOR.match(t.name):
            recurrent.add(int(m.group(1)))
        elif _ATTN_TENSOR.match(t.name):
            attention.add(int(m.group(1)))
    if not info.tensors:  # a header without tensor infos: the metadata alone
        arr = info.arrays.get(f"{arch}.attention.recurrent_layers")
        interval = _num(meta, f"{arch}.full_attention_interval")
        if arr is not None:
            recurrent = {i for i, r in enumerate(arr[:n_layer]) if r}
        elif interval > 0:
            recurrent = {i for i in range(n_layer) if not is_full_attention(i, interval)}
        elif f"{arch}.ssm.state_size" in meta or f"{arch}.wkv.head_size" in meta:
            recurrent = {i for i in range(n_layer) if kv_heads[i] == 0}
        attention = set(range(n_layer))
    kv = [i for i in sorted(attention - recurrent) if kv_heads[i] > 0]
    return sorted(recurrent), kv


def _recurrent_state(meta: dict[str, Any], arch: str, n_embd: int, n_head: int) -> int:
    """Bytes of one layer's recurrent state (conv + SSM / WKV), F32, as llama.cpp sizes it."""
    head_size = _num(meta, f"{arch}.wkv.head_size")
    if head_size:  # RWKV
        return (_num(meta, f"{arch}.token_shift_count", 2) * n_embd + n_embd * head_size) * F32
    conv = _num(meta, f"{arch}.ssm.conv_kernel")
    inner = _num(meta, f"{arch}.ssm.inner_size")
    state = _num(meta, f"{arch}.ssm.state_size")
    groups = _num(meta, f"{arch}.ssm.group_count")
    shortconv = _num(meta, f"{arch}.shortconv.l_cache")
    if shortconv:  # LFM2
        return n_embd * (shortconv - 1) * F32
    r = max(conv - 1, 0) * (inner + 2 * groups * state)
    return (r + state * inner) * F32


def _swa_layers(info: GGUFInfo, kv: list[int], n_layer: int) -> tuple[int, ...]:
    arch = info.arch
    window = _num(info.metadata, f"{arch}.attention.sliding_window")
    if not window:
        return ()
    pattern = info.arrays.get(f"{arch}.attention.sliding_window_pattern")
    if pattern is not None:
        return tuple(i for i in kv if i < len(pattern) and pattern[i])
    period = _num(info.metadata, f"{arch}.attention.sliding_window_pattern", _SWA_PERIOD.get(arch, 0))
    if period <= 1:
        return tuple(kv)  # every layer slides (e.g. Mistral's early models)
    return tuple(i for i in kv if (i + 1) % period)


def facts_of(info: GGUFInfo) -> ModelFacts:
    """The plan's facts from a walked GGUF header."""
    arch, meta = info.arch, info.metadata
    n_layer = (info.block_count or 0) - info.mtp_layers  # the trunk: MTP blocks are counted apart
    n_embd = _num(meta, f"{arch}.embedding_length")
    heads = _per_layer(info, f"{arch}.attention.head_count", n_layer, 0)
    n_head = max(heads, default=0)
    kv_heads = _per_layer(info, f"{arch}.attention.head_count_kv", n_layer, n_head)
    default_head = n_embd // n_head if n_head else 0
    key_length = _num(meta, f"{arch}.attention.key_length", default_head)
    value_length = _num(meta, f"{arch}.attention.value_length", default_head)
    recurrent, kv = _layer_kinds(info, n_layer, kv_heads)
    experts: dict[int, int] = {}
    mtp_bytes = 0
    for t in info.tensors:
        m = _LAYER.match(t.name)
        if m and int(m.group(1)) >= n_layer:
            mtp_bytes += t.nbytes
        elif m and EXPERT_TENSOR.search(t.name):
            layer = int(m.group(1))
            experts[layer] = experts.get(layer, 0) + t.nbytes
    mtp_heads = kv_heads[-1] if info.mtp_layers and kv_heads else 0
    embedding, by_type = _weight_types(info)
    return ModelFacts(
        arch=arch,
        name=info.name,
        file_bytes=info.size_bytes,
        weight_bytes=info.tensor_bytes,
        block_count=n_layer,
        context_length=info.context_length,
        vocab_size=info.vocab_size or _num(meta, f"{arch}.vocab_size"),
        n_embd=n_embd,
        n_head=n_head,
        kv_layers=tuple(kv),
        kv_heads=tuple(kv_heads[i] for i in kv),
        key_length=key_length,
        value_length=value_length,
        swa_layers=_swa_layers(info, kv, n_layer),
        sliding_window=_num(meta, f"{arch}.attention.sliding_window"),
        recurrent_layers=tuple(recurrent),
        recurrent_state_bytes=len(recurrent) * _recurrent_state(meta, arch, n_embd, n_head),
        expert_count=info.expert_count,
        expert_used_count=info.expert_used_count,
        expert_layer_bytes=tuple(sorted(experts.items())),
        header_bytes=info.header_bytes,
        merge_count=info.merge_count,
        weight_type_bytes=tuple(sorted(by_type.items())),
        embedding_bytes=embedding,
        active_type_bytes=_active_types(info, n_layer),
        mtp_layers=info.mtp_layers,
        mtp_bytes=mtp_bytes,
        mtp_kv_per_token=info.mtp_layers * mtp_heads * (key_length + value_length),
    )


def _weight_types(info: GGUFInfo) -> tuple[int, dict[int, int]]:
    """(token embedding bytes read by row, {ggml type: bytes} of the matrix weights)."""
    tied = not any(t.name == "output.weight" for t in info.tensors)
    embedding, by_type = 0, {}
    for t in info.tensors:
        if len(t.shape) < 2 or not t.name.endswith(".weight"):
            continue
        if t.name == "token_embd.weight" and not tied:  # tied: also the output matrix
            embedding += t.nbytes
        elif t.shape[1] % 8 == 0:
            by_type[t.type] = by_type.get(t.type, 0) + t.nbytes
    return embedding, by_type


def _active_types(info: GGUFInfo, n_layer: int) -> tuple[tuple[int, str, int], ...]:
    """(type, role, bytes) of the matrices one generated token reads (the token embeddings,
    a row lookup, left out unless they are also the output matrix; an MTP block after the
    `n_layer` trunk layers, read only by drafts, left out)."""
    tied = not any(t.name == "output.weight" for t in info.tensors)
    count, used = info.expert_count, info.expert_used_count
    out: dict[tuple[int, str], int] = {}
    for t in info.tensors:
        if len(t.shape) < 2 or not t.name.endswith(".weight") or (t.name == "token_embd.weight" and not tied):
            continue
        if (m := _LAYER.match(t.name)) and int(m.group(1)) >= n_layer:
            continue
        if EXPERT_TENSOR.search(t.name) and count > 0:
            key, nbytes = (t.type, "expert"), t.nbytes * min(max(used, 1), count) // count
        elif t.name == "output.weight" or t.name == "token_embd.weight":  # (the latter: tied)
            key, nbytes = (t.type, "output"), t.nbytes
        else:
            key, nbytes = (t.type, "dense"), t.nbytes
        out[key] = out.get(key, 0) + nbytes
    return tuple((t, role, b) for (t, role), b in sorted(out.items()))
