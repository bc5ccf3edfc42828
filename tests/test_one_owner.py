"""Decisions that were written in two or more places, now each in one: what a user sees of each.

The KV cache of a hybrid model, the sampling and batch defaults, what `POCKETCHAT_DEBUG=0`
means, the Metal device's facts on any mlx, and the text a stream holds back while a marker
may be starting.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from pocketchat import paths

# -- the KV cache of a hybrid model (qwen35moe): only its full-attention layers hold one --------

# Qwen3.5-35B-A3B's config.json as Hugging Face ships it (its language model nested), without
# `full_attention_interval`: mlx-lm then uses 4, as in the GGUF.
QWEN35_MOE_CONFIG = {
    "model_type": "qwen3_5_moe",
    "text_config": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 40, "num_attention_heads": 16,
                    "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048,
                    "max_position_embeddings": 262144},
}
POCKET_KV_PER_TOKEN = 10 * 2 * (256 + 256) * 2  # 10 full-attention layers, 2 KV heads, K and V, F16


def _pocket_build():
    from pocketchat.select import catalog

    return next(b for b in catalog.builds() if b.expert_fraction > 0 and b.facts is None)


def test_a_qwen35moe_plan_counts_the_kv_cache_of_its_full_attention_layers_only():
    from pocketchat.select.estimate import memory_need, pocket_facts

    build = _pocket_build()
    facts = pocket_facts(build)
    assert facts.kv_layers == tuple(range(3, 40, 4))
    assert set(facts.recurrent_layers).isdisjoint(facts.kv_layers) and len(facts.recurrent_layers) == 30
    assert memory_need(build, 8192).kv_cache == 8192 * POCKET_KV_PER_TOKEN


def test_the_mlx_build_of_pocket_counts_the_same_kv_cache_as_the_gguf_build():
    """Its config does not say the interval (mlx-lm's default, 4, applies): not 40 layers of KV."""
    from pocketchat.engines.mlx.model import kv_cache_bytes
    from pocketchat.select.estimate import memory_need

    assert kv_cache_bytes(QWEN35_MOE_CONFIG, 8192) == 8192 * POCKET_KV_PER_TOKEN
    assert kv_cache_bytes(QWEN35_MOE_CONFIG, 8192) == memory_need(_pocket_build(), 8192).kv_cache
    # the same when the config lists its layers' kinds, as Qwen3.5's does
    kinds = ["linear_attention"] * 3 + ["full_attention"]
    listed = {**QWEN35_MOE_CONFIG, "text_config": {**QWEN35_MOE_CONFIG["text_config"], "layer_types": kinds * 10}}
    assert kv_cache_bytes(listed, 8192) == 8192 * POCKET_KV_PER_TOKEN
    # a model that is not hybrid: every layer holds one
    dense = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 64}
    assert kv_cache_bytes(dense, 100) == 4 * 2 * 4 * 16 * 100 * 2


def test_a_qwen35moe_file_is_read_with_the_same_rule(tiny_qwen35moe):
    """The tiny qwen35moe GGUF (4 layers, one full-attention): from its tensors and from its
    metadata alone (a header read over HTTP before a download carries no tensor table here)."""
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.modelfile.layers import full_attention_layers
    from pocketchat.select.estimate import need_from_facts

    info = check_gguf(tiny_qwen35moe)
    for facts in (facts_of(info), facts_of(replace(info, tensors=[]))):
        assert facts.kv_layers == full_attention_layers(4, 4) == (3,)
        assert facts.recurrent_layers == (0, 1, 2)
    facts = facts_of(info)
    assert need_from_facts(facts, 4096).kv_cache == facts.kv_cache_bytes(4096) > 0


# -- sampling and batch defaults: written once ---------------------------------------------------


def test_a_request_without_sampling_on_a_plan_without_any_samples_as_pocket_does():
    from pocketchat.engines.answer.sampling import merge_sampling
    from pocketchat.engines.types import ChatOptions
    from pocketchat.select.defaults import sampling

    pocket = sampling("pocket")
    for defaults in (None, pocket):
        got = merge_sampling(defaults, ChatOptions())
        assert (got.temperature, got.top_p, got.top_k, got.min_p, got.repeat_penalty) == (
            pocket.temperature, pocket.top_p, pocket.top_k, pocket.min_p, pocket.repeat_penalty)
    assert merge_sampling(pocket, ChatOptions(temperature=0.1)).temperature == 0.1


def test_a_plan_reads_prompts_in_the_batch_its_memory_was_estimated_for():
    from pocketchat.select import ladder
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=4096, n_threads=2,
                    n_threads_batch=2)
    steps, _ = ladder.ladder(None)
    assert plan.n_batch == steps[0].n_batch == 512
    assert all(s.n_batch < plan.n_batch for s in steps if s.n_batch != plan.n_batch)


# -- POCKETCHAT_DEBUG: one reader --------------------------------------------------------------


@pytest.mark.parametrize("value, quiet", [("0", True), ("", True), ("no", True), ("1", False)])
def test_debug_0_is_not_debug_in_the_mlx_loader(monkeypatch, value, quiet):
    """Without debug, transformers is told to keep its notices off the chat's terminal."""
    pytest.importorskip("mlx_lm")
    from pocketchat.engines.mlx.model import import_mlx

    monkeypatch.setenv("POCKETCHAT_DEBUG", value)
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    paths.reset()
    try:
        import_mlx()
        assert (os.environ.get("TRANSFORMERS_VERBOSITY") == "error") is quiet
    finally:
        paths.reset()


# -- the Metal device's facts: one reader, any mlx -----------------------------------------------


@pytest.mark.parametrize("old_mlx", [False, True])
def test_the_probe_reads_the_metal_budget_on_any_mlx(monkeypatch, old_mlx):
    """mlx < 0.29 has only `mx.metal.device_info`; newer ones `mx.device_info`."""
    mx = pytest.importorskip("mlx.core")
    from pocketchat.select import probe
    from pocketchat.types import GiB

    info = lambda *a: {"max_recommended_working_set_size": 5 * GiB, "memory_size": 8 * GiB}  # noqa: E731
    if old_mlx:
        monkeypatch.delattr(mx, "device_info", raising=False)
        monkeypatch.setattr(mx.metal, "device_info", info, raising=False)
    else:
        monkeypatch.setattr(mx, "device_info", info, raising=False)
        monkeypatch.setattr(mx.metal, "device_info", lambda *a: pytest.fail("the old call"), raising=False)
    gpu = probe._apple_gpu(8 * GiB)
    assert gpu.vram_total_bytes == 5 * GiB  # not the guess without Metal (2/3 of 8 GiB)


# -- a marker split over deltas: held back, never leaked -------------------------------------------


def test_partial_suffix_is_the_longest_end_that_may_start_a_marker():
    from pocketchat.engines.answer.partial import partial_suffix

    assert partial_suffix("answer <thi", ("<think>",)) == 4
    assert partial_suffix("answer <think", ("<think>",)) == 6
    assert partial_suffix("answer <think>", ("<think>",)) == 0  # whole: the caller found it
    assert partial_suffix("answer", ("<think>",)) == 0
    assert partial_suffix("x\n\nUs", ("\n\nUser:", "STOP")) == 4
    assert partial_suffix("xST", ("\n\nUser:", "STOP")) == 2
    assert partial_suffix("", ("STOP",)) == partial_suffix("abc", ()) == partial_suffix("abc", ("",)) == 0


def _every_split(text: str):
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            yield [text[:i], text[i:j], text[j:]]


def test_a_marker_split_anywhere_is_found_by_every_stream():
    """The thinking split, the tool-call parser, the server's stop sequences and the paste guard
    give the same result for any cut of the same text as for the whole."""
    from pocketchat.engines.constrain.toolcalls import ToolCallParser
    from pocketchat.engines.answer.thinking import ThinkSplitter
    from pocketchat.server.reply import StopScanner
    from pocketchat.ui.pasteguard import PasteGuard

    def think(parts):
        s = ThinkSplitter()
        got = [s.feed(p) for p in parts] + [s.flush()]
        return "".join(a for a, _ in got), "".join(t for _, t in got)

    def tools(parts):
        p = ToolCallParser("json")
        got = [p.feed(x) for x in parts] + [p.flush()]
        return "".join(t for t, _ in got), [c.name for _, cs in got for c in cs]

    def stops(parts):
        s = StopScanner(["\n\nUser:", "STOP"])
        return "".join(s.feed(p) for p in parts) + s.flush(), s.matched

    def paste(parts):
        g = PasteGuard()
        return "".join(g.filter(p) for p in parts)

    cases = [(think, "<think>why</think>The answer."),
             (tools, 'Sure. <tool_call>{"name": "f", "arguments": {}}</tool_call>'),
             (stops, "Hi there\n\nUser: more"), (stops, "one STO two STOP three"),
             (paste, "\x1b[200~a\x1b[31mb\x1b[201~c")]
    for run, text in cases:
        whole = run([text])
        assert all(run(parts) == whole for parts in _every_split(text)), (run.__name__, text)
    assert think(["<think>why</think>The answer."]) == ("The answer.", "why")
    assert stops(["one STO two STOP three"]) == ("one STO two ", "STOP")


# -- bench's tables: one layout ---------------------------------------------------------------


def test_benchs_turn_tables_are_markdown_with_aligned_columns():
    from pocketchat.commands.turns import TurnRow, compare_table, table

    rows = [TurnRow("turn 1", 1200, 0, 1200, 0.85), TurnRow("turn 2 (a long name)", 40, 1180, 40, 0.05, 20)]
    for text in (table("starter", rows), compare_table("starter", {"cold": rows, "warm": rows})):
        lines = text.splitlines()
        assert len(lines) == 4 and len({len(line) for line in lines}) == 1  # every column lined up
        assert set(lines[1]) == {"|", "-"}
        assert lines[3].startswith("| starter | turn 2 (a long name) |")
    assert table("starter", rows).splitlines()[0].split("|")[1:-1] == [
        " model   ", " test                 ", " prompt ", " reused ", " evaluated ", " TTFT   "]
