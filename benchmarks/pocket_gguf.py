"""A full-size synthetic POCKET GGUF: `qwen35moe` with POCKET-35B's shape and a build's tensor types.

The shape (40 blocks, a full-attention layer every 4th and Gated DeltaNet otherwise, 256 routed
experts of width 512 plus the shared expert, hidden 2048, vocabulary 248,320) is
`tests/support/tinyqwen35.py`'s `Qwen35Shape` at POCKET's sizes; its tensor table and hparams come from
the same functions the tiny test model uses. Each tensor gets the type llama.cpp's quantizer
(`llama-quant.cpp` of the llama.cpp that llama-cpp-python 0.3.36 vendors) gives it for the
build's file type and this architecture:

- Q2_K: experts' gate/up and everything else Q2_K; `ffn_down*` and `attn_output` Q3_K;
  `attn_v` and the DeltaNet's fused `attn_qkv` Q4_K (16 query heads over 2 KV heads);
  `output` Q6_K; norms, routers and `ssm_conv1d` stay F32 as the converter writes them.
- IQ1_M: IQ1_M, with `token_embd` Q2_K, `output` Q5_K, `attn_v`/`attn_qkv` Q4_K, the first
  eighth of the `ffn_down*` tensors Q2_K, `attn_output` IQ2_XXS.

The bytes: random normal weights quantized by ggml's own `ggml_quantize_chunk` (the libggml
llama-cpp-python ships, through `pocketchat.rpc.ggml`) into a pool of blocks per type; each
tensor is that pool's blocks drawn at random (seeded), so every block is one ggml made and
the file is deterministic. The IQ types get a uniform importance matrix (all ones): ggml needs
one for IQ2_XXS, and llama.cpp's own tool wants one for IQ1_M; a uniform one quantizes as if
every column mattered alike. Tensors are written one at a time (the largest, `output`, is
0.4 GB), so the 13 GB model never sits in memory.

The vocabulary is a real byte-level BPE: the 256 byte symbols, merges of letter pairs and then
of random pairs of earlier tokens (each merge makes the next token, at most 16 characters), and
Qwen's special tokens at the end; text tokenizes into it as into any BPE vocabulary.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (str(REPO), str(REPO / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from support.tinymoe import SPECIALS, add_tokenizer, byte_symbols  # noqa: E402
from support.tinyqwen35 import QWEN35_TEMPLATE, Qwen35Shape, TensorSpec, add_hparams, tensor_table  # noqa: E402

from pocketchat.modelfile.qwen35 import POCKET, POCKET_VOCAB  # noqa: E402,F401 - POCKET-35B's shape
QUANTS = ("Q2_K", "IQ1_M", "Q3_K_M", "Q4_K_M")
# ggml_type numbers (gguf.GGMLQuantizationType) and llama_ftype numbers (gguf.LlamaFileType).
F32, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ1_M = 0, 10, 11, 12, 13, 14, 16, 29
FILE_TYPE = {"Q2_K": 10, "IQ1_M": 31, "Q3_K_M": 12, "Q4_K_M": 15}
BASE_TYPE = {"Q2_K": Q2_K, "IQ1_M": IQ1_M, "Q3_K_M": Q3_K, "Q4_K_M": Q4_K}
NEEDS_IMATRIX = (IQ1_M, IQ2_XXS)
WEIGHT_STD = 0.02  # of the random weights before quantizing
POOL_BLOCKS = 1 << 14  # blocks quantized per type; tensors draw from these
POOL_ROW = 4096  # elements per row handed to the quantizer


@dataclass(frozen=True)
class Planned:
    """One tensor of the file: what it is, and the ggml type it is written in."""

    spec: TensorSpec
    ggml_type: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.spec.ne))


def shape_for(layers: int | None = None, experts: int | None = None, mtp: int = 0) -> Qwen35Shape:
    """POCKET's shape, or a smaller one with fewer layers and/or routed experts (tests); `mtp`:
    with that many MTP blocks after the trunk (Qwen3.5's draft head, as the converter keeps it)."""
    shape = replace(POCKET, mtp=mtp)
    if layers is not None:
        shape = replace(shape, n_layer=layers)
    if experts is not None:
        shape = replace(shape, n_expert=experts, n_expert_used=min(shape.n_expert_used, experts))
    if shape.n_layer < 1 or shape.n_expert < 1:
        raise ValueError("--layers and --experts must be at least 1")
    return shape


def _kept_f32(name: str, ne: tuple[int, ...]) -> bool:
    """What llama.cpp's quantizer leaves as the converter wrote it (F32 here)."""
    return (len(ne) < 2 or not name.endswith("weight") or name.endswith("_norm.weight")
            or "ffn_gate_inp.weight" in name or "ssm_conv1d" in name)


def _more_bits(i: int, n: int) -> bool:
    """llama-quant's use_more_bits: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_types(shape: Qwen35Shape, n_vocab: int, quant: str) -> list[Planned]:
    """Every tensor with the type llama.cpp's quantizer picks for `quant` (see the docstring)."""
    if quant not in QUANTS:
        raise ValueError(f"--quant must be one of {', '.join(QUANTS)}, not {quant!r}")
    base = BASE_TYPE[quant]
    gqa_or_moe = shape.n_head // max(shape.n_head_kv, 1) >= 4 or shape.n_expert >= 4
    n_layer = shape.n_layer
    table = tensor_table(shape, n_vocab)
    n_attn_v = sum("attn_v.weight" in t.name or "attn_qkv.weight" in t.name for t in table)
    i_ffn_down = i_attn_v = 0
    out = []
    for spec in table:
        name = spec.name
        if _kept_f32(name, spec.ne):
            out.append(Planned(spec, F32))
            continue
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        t = base
        if name == "output.weight":
            t = Q5_K if quant == "IQ1_M" else Q6_K
        elif name == "token_embd.weight":
            t = Q2_K if quant in ("Q2_K", "IQ1_M") else base
        elif "attn_v.weight" in name or "attn_qkv.weight" in name:
            if quant == "Q3_K_M":
                t = Q5_K if i_attn_v < 2 else Q4_K
            elif quant == "Q4_K_M":
                t = Q6_K if _more_bits(i_attn_v, n_attn_v) else Q4_K
            else:
                t = Q4_K if gqa_or_moe else (Q2_K if quant == "IQ1_M" else Q3_K)
            i_attn_v += 1
        elif "ffn_down" in name:
            if quant == "Q2_K":
                t = Q3_K
            elif quant == "IQ1_M":
                t = Q2_K if i_ffn_down < n_layer // 8 else IQ1_M
            elif quant == "Q3_K_M":
                t = Q5_K if layer < n_layer // 16 else Q4_K
            elif quant == "Q4_K_M":
                t = Q6_K if _more_bits(layer, n_layer) else Q4_K
            i_ffn_down += 1
        elif "attn_output.weight" in name:
            t = {"IQ1_M": IQ2_XXS, "Q2_K": Q3_K, "Q3_K_M": Q4_K}.get(quant, base)
        if spec.ne[0] % 256:  # every K and IQ type here has 256-element blocks
            raise ValueError(f"{name}: {spec.ne[0]} columns is not a multiple of 256")
        out.append(Planned(spec, t))
    return out


def bpe_vocab(n_vocab: int, seed: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): a byte-level BPE vocabulary of exactly `n_vocab` tokens."""
    import gguf

    specials = SPECIALS
    n_normal = n_vocab - len(specials)
    tokens = byte_symbols()
    if n_normal < len(tokens):
        raise ValueError(f"a vocabulary needs at least {len(tokens) + len(specials)} tokens")
    seen = set(tokens)
    merges: list[str] = []

    def merge(a: str, b: str) -> None:
        if a + b not in seen and len(tokens) < n_normal:
            seen.add(a + b)
            tokens.append(a + b)
            merges.append(f"{a} {b}")

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    for a in ["Ġ", *letters]:  # "Ġ" is the space's byte symbol
        for b in letters:
            merge(a, b)
    rng = np.random.default_rng(seed)
    short = [t for t in tokens if len(t) <= 4]  # the right half of a merge; tokens stay <= 16 long
    while len(tokens) < n_normal:
        i, j = rng.integers(0, 1 << 30, 2)
        a, b = tokens[int(i) % len(tokens)], short[int(j) % len(short)]
        if len(a) + len(b) > 16:
            a = short[int(i) % len(short)]
        before = len(tokens)
        merge(a, b)
        if len(tokens) > before and len(tokens[-1]) <= 4:
            short.append(tokens[-1])
    types = [int(gguf.TokenType.NORMAL)] * n_normal + [int(gguf.TokenType.CONTROL)] * 3 + [
        int(gguf.TokenType.USER_DEFINED)] * (len(specials) - 3)
    return tokens + specials, types, merges


class BlockPool:
    """Quantized blocks per ggml type, made by ggml's quantizer from seeded random weights."""

    def __init__(self, seed: int, blocks: int = POOL_BLOCKS) -> None:
        from pocketchat.rpc.ggml import binding

        self.ggml = binding()
        self.seed = seed
        self.blocks = blocks
        self._pools: dict[int, np.ndarray] = {}

    def block_bytes(self, ggml_type: int) -> int:
        return self.ggml.row_bytes(ggml_type, 256)

    def pool(self, ggml_type: int) -> np.ndarray:
        """(blocks, bytes per block) uint8: every row one valid block of that type."""
        if ggml_type not in self._pools:
            rng = np.random.default_rng([self.seed, ggml_type])
            rows = (rng.standard_normal((self.blocks * 256 // POOL_ROW, POOL_ROW)) * WEIGHT_STD
                    ).astype(np.float32)
            imatrix = np.ones(POOL_ROW, np.float32) if ggml_type in NEEDS_IMATRIX else None
            raw = self.ggml.quantize(ggml_type, rows, imatrix)
            self._pools[ggml_type] = np.frombuffer(raw, np.uint8).reshape(self.blocks, -1)
        return self._pools[ggml_type]

    def tensor(self, ggml_type: int, n_elements: int, rng: np.random.Generator) -> np.ndarray:
        """The bytes of one tensor: pool blocks drawn at random."""
        pool = self.pool(ggml_type)
        idx = rng.integers(0, self.blocks, n_elements // 256)
        return pool[idx].reshape(-1)


def _f32_data(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    dims = tuple(reversed(spec.ne))
    if spec.init == "ones":
        return np.ones(dims, np.float32)
    if spec.init == "neg_ones":
        return -np.ones(dims, np.float32)
    return (rng.standard_normal(dims) * WEIGHT_STD).astype(np.float32)


def write_pocket(path: Path, *, quant: str = "Q2_K", shape: Qwen35Shape = POCKET,
                 n_vocab: int = POCKET_VOCAB, seed: int = 0,
                 progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the synthetic model to `path` (through `path.partial`, renamed when complete)."""
    import gguf

    planned = tensor_types(shape, n_vocab, quant)
    blocks = BlockPool(seed)
    tmp = path.with_name(path.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), "qwen35moe")
    w.add_name(f"POCKET-35B-{quant}{'-MTP' if shape.mtp else ''} synthetic (random weights)")
    add_hparams(w, shape)
    w.add_file_type(FILE_TYPE[quant])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges = bpe_vocab(n_vocab, seed)
    add_tokenizer(w, tokens, types, merges, bos="<|endoftext|>", chat_template=QWEN35_TEMPLATE)
    for p in planned:
        dims = tuple(reversed(p.spec.ne))
        if p.ggml_type == F32:
            w.add_tensor_info(p.spec.name, dims, np.dtype(np.float32), p.n_elements * 4)
        else:
            nbytes = p.n_elements // 256 * blocks.block_bytes(p.ggml_type)
            byte_dims = (*dims[:-1], dims[-1] // 256 * blocks.block_bytes(p.ggml_type))
            w.add_tensor_info(p.spec.name, byte_dims, np.dtype(np.uint8), nbytes,
                              raw_dtype=gguf.GGMLQuantizationType(p.ggml_type))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = sum(p.n_elements for p in planned)
    done = 0
    for i, p in enumerate(planned):
        rng = np.random.default_rng([seed, i])
        if p.ggml_type == F32:
            data = _f32_data(p.spec, rng)
        else:
            data = blocks.tensor(p.ggml_type, p.n_elements, rng)
        w.write_tensor_data(data)
        del data
        done += p.n_elements
        if progress is not None:
            progress(done, total)
    w.close()
    os.replace(tmp, path)
    return path
