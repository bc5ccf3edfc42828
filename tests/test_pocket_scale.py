"""The synthetic POCKET writer (benchmarks/pocket_gguf.py): the full-size builds' tensor table
and sizes, and a small version of it written, read back and run by llama.cpp."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pocket_gguf as pg  # noqa: E402
from pocketchat.modelfile.facts import facts_of  # noqa: E402
from pocketchat.modelfile.gguf import check_gguf  # noqa: E402

GGML_NAMES = {0: "F32", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 16: "IQ2_XXS", 29: "IQ1_M"}
SMALL_VOCAB = 16_384


def _bytes(planned) -> int:
    import gguf

    total = 0
    for p in planned:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(p.ggml_type)]
        total += p.n_elements // block * size
    return total


def _types(planned) -> dict[str, str]:
    return {p.spec.name: GGML_NAMES[p.ggml_type] for p in planned}


def test_full_size_builds_weigh_what_the_card_says():
    # POCKET-35B-Q2_K.gguf is 12.9 GB and POCKET-35B-IQ1_M.gguf 8.24 GB (shared/pocket-builds.md);
    # the tensors alone, before the vocabulary, come within 1% of both.
    q2 = pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, "Q2_K")
    iq1 = pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, "IQ1_M")
    assert abs(_bytes(q2) - 12.9e9) < 0.01 * 12.9e9
    assert abs(_bytes(iq1) - 8.24e9) < 0.01 * 8.24e9
    # 40 blocks: 30 Gated DeltaNet, 10 full attention (every 4th), 256 experts of width 512
    names = [p.spec.name for p in q2]
    assert sum(n.endswith("attn_qkv.weight") for n in names) == 30
    assert sum(n.endswith("attn_q.weight") for n in names) == 10
    shapes = {p.spec.name: p.spec.ne for p in q2}
    assert shapes["blk.39.ffn_gate_exps.weight"] == (2048, 512, 256)
    assert shapes["token_embd.weight"] == (2048, 248_320)


def test_full_size_q2_k_types_follow_llama_quant():
    t = _types(pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, "Q2_K"))
    assert t["token_embd.weight"] == "Q2_K" and t["output.weight"] == "Q6_K"
    assert t["blk.0.ffn_gate_exps.weight"] == t["blk.0.ffn_up_exps.weight"] == "Q2_K"
    assert t["blk.0.ffn_down_exps.weight"] == t["blk.0.ffn_down_shexp.weight"] == "Q3_K"
    assert t["blk.0.attn_qkv.weight"] == t["blk.3.attn_v.weight"] == "Q4_K"
    assert t["blk.3.attn_output.weight"] == "Q3_K" and t["blk.3.attn_k.weight"] == "Q2_K"
    assert t["blk.0.ssm_out.weight"] == t["blk.0.attn_gate.weight"] == "Q2_K"
    assert t["blk.0.ffn_gate_inp.weight"] == t["blk.0.ssm_conv1d.weight"] == "F32"
    assert t["blk.0.attn_norm.weight"] == t["blk.0.ssm_a"] == "F32"


def test_full_size_iq1_m_types_follow_llama_quant():
    t = _types(pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, "IQ1_M"))
    assert t["token_embd.weight"] == "Q2_K" and t["output.weight"] == "Q5_K"
    assert t["blk.0.ffn_gate_exps.weight"] == "IQ1_M" and t["blk.3.attn_output.weight"] == "IQ2_XXS"
    assert t["blk.0.attn_qkv.weight"] == "Q4_K"
    # the first eighth of the 40 ffn_down tensors llama-quant counts (exps and shexp alike)
    downs = [n for n in t if "ffn_down" in n]
    assert [t[n] for n in downs[:5]] == ["Q2_K"] * 5 and {t[n] for n in downs[5:]} == {"IQ1_M"}


def test_unknown_quant_is_refused():
    with pytest.raises(ValueError, match="--quant must be one of"):
        pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, "Q5_K_S")


def test_vocabulary_is_a_byte_level_bpe_of_the_size_asked():
    tokens, types, merges = pg.bpe_vocab(4096, seed=0)
    assert len(tokens) == len(types) == 4096 and len(set(tokens)) == 4096
    assert tokens[-5:] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    made = tokens[256:-5]
    assert len(merges) == len(made) and all(m.replace(" ", "", 1) == tok for m, tok in zip(merges, made, strict=False))


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def small_q2k(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pocket") / "small-q2k.gguf"
    return pg.write_pocket(out, quant="Q2_K", shape=pg.shape_for(layers=4, experts=4),
                           n_vocab=SMALL_VOCAB, seed=0)


def _run(path: Path) -> np.ndarray:
    """llama.cpp (llama-cpp-python with the engine's guards) loads the file and evaluates a prompt;
    its last logits."""
    import llama_cpp

    from pocketchat.engines.llamacpp.load import new_llama

    llm = new_llama(path, n_ctx=256, n_threads=2, n_batch=64)
    try:
        def last_logits() -> np.ndarray:
            ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
            return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()

        llm.eval(llm.tokenize(b"river stone light paper window", add_bos=False))
        llm.eval([int(np.argmax(last_logits()))])  # and one decoded token
        return last_logits()
    finally:
        llm.close()


@pytest.mark.slow
def test_small_q2_k_is_read_and_run_by_llama_cpp(small_q2k):
    info = check_gguf(small_q2k)  # every tensor's range inside the file, the header whole
    want = pg.tensor_types(pg.shape_for(layers=4, experts=4), SMALL_VOCAB, "Q2_K")
    got = {t.name: (t.shape, GGML_NAMES[t.type]) for t in info.tensors}
    assert got == {p.spec.name: (p.spec.ne, GGML_NAMES[p.ggml_type]) for p in want}
    f = facts_of(info)
    assert f.arch == "qwen35moe" and f.kv_layers == (3,) and f.recurrent_layers == (0, 1, 2)
    assert f.vocab_size == SMALL_VOCAB and f.expert_count == 4 and f.expert_layers == 4
    assert f.merge_count == SMALL_VOCAB - 256 - 5
    logits = _run(small_q2k)
    assert logits.shape == (SMALL_VOCAB,) and np.isfinite(logits).all() and logits.std() > 0


@pytest.mark.slow
def test_small_write_is_deterministic(small_q2k, tmp_path):
    again = pg.write_pocket(tmp_path / "again.gguf", quant="Q2_K", shape=pg.shape_for(layers=4, experts=4),
                            n_vocab=SMALL_VOCAB, seed=0)
    assert _sha(again) == _sha(small_q2k)
    assert not (tmp_path / "again.gguf.partial").exists()


@pytest.mark.slow
def test_small_iq1_m_is_run_by_llama_cpp(tmp_path):
    path = pg.write_pocket(tmp_path / "small-iq1m.gguf", quant="IQ1_M", shape=pg.shape_for(layers=8, experts=2),
                           n_vocab=SMALL_VOCAB, seed=1)
    types = {t.name: GGML_NAMES[t.type] for t in check_gguf(path).tensors}
    assert types["blk.0.ffn_down_exps.weight"] == "Q2_K" and types["blk.1.ffn_down_exps.weight"] == "IQ1_M"
    assert types["blk.3.attn_output.weight"] == "IQ2_XXS" and types["output.weight"] == "Q5_K"
    logits = _run(path)
    assert np.isfinite(logits).all() and logits.std() > 0
