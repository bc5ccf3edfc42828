"""The MLX engine on the real mlx-lm (mlx[cpu] on Linux) with tiny models the tests write.

The engine contract (test_engine_contract.py) also runs against it; these tests cover what is
MLX's own: mlx-lm's figures in the stats, the prompt cache (trimmable and not), cancel during
the prompt, the context limit, thinking, the folder checks, the Metal budget, a missing mlx.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.mlx_fixture import CONTEXT, shared_model, write_tiny_llama
from pocketchat.errors import (
    BackendMissing,
    CorruptModel,
    EngineError,
    MetalBudgetExceeded,
    ModelNotFound,
    ModelTooLarge,
)
from pocketchat.engines.types import ChatOptions, Engine, Message
from pocketchat.engines.state.prefix_cache import Reuse, common_prefix, plan_reuse
from pocketchat.engines.mlx.model import check_metal_budget, kv_cache_bytes, suggested_wired_limit_mb
from pocketchat.types import GiB, LoadPlan, MiB

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

REPO = Path(__file__).resolve().parents[1]
GREEDY = ChatOptions(temperature=0.0, max_tokens=12, ignore_eos=True)
QUESTION = [Message("user", "Write a story about a dragon who learns to bake bread.")]


def plan(n_ctx: int = 1024, **kw) -> LoadPlan:
    return LoadPlan(**{"backend": "mlx", "placement": "cpu", "n_gpu_layers": 0, "n_ctx": n_ctx,
                       "n_threads": 2, "n_threads_batch": 2, **kw})


def engine(kind: str = "random", n_ctx: int = 1024, **kw):
    pytest.importorskip("mlx_lm")
    from pocketchat.engines.mlx.engine import MlxEngine

    return MlxEngine(plan(n_ctx, **kw), shared_model(kind), name=f"tiny-{kind}")


@pytest.fixture(scope="module")
def eng():
    e = engine()
    yield e
    e.close()


@pytest.fixture(scope="module")
def scripted():
    e = engine("scripted")
    yield e
    e.close()


def run(e, messages, options=None):
    chunks = list(e.chat(messages, options))
    assert chunks and all(c.finish_reason is None for c in chunks[:-1])
    return "".join(c.text for c in chunks), "".join(c.thinking for c in chunks), chunks[-1]


def prompt_tokens(e, messages, thinking=True, generation=True) -> list[int]:
    return e._encode(e.render(messages, thinking, generation=generation))


class NoTrimKVCache:
    """A KV cache that refuses to be trimmed, like the Gated-DeltaNet state of Qwen3.5/POCKET."""

    def __new__(cls):
        from mlx_lm.models.cache import KVCache

        class _NoTrim(KVCache):
            def is_trimmable(self):
                return False

            def trim(self, n):
                raise AssertionError("an untrimmable cache was trimmed")

        return _NoTrim()


@pytest.fixture
def untrimmable(monkeypatch):
    """An engine on the random model whose prompt cache cannot be trimmed."""
    pytest.importorskip("mlx_lm")
    import mlx_lm.models.cache as cache_mod

    monkeypatch.setattr(cache_mod, "make_prompt_cache",
                        lambda model, max_kv_size=None: [NoTrimKVCache() for _ in model.layers])
    e = engine()
    assert not e._cache.trimmable
    yield e
    e.close()


# -- loading and streaming ------------------------------------------------------------------


def test_loads_and_streams(eng):
    assert isinstance(eng, Engine)
    assert eng.info.backend == "mlx" and eng.info.model == "tiny-random"
    assert eng.info.n_ctx == 1024 and eng.info.placement == "CPU"
    chunks = list(eng.chat(QUESTION, ChatOptions(max_tokens=16, ignore_eos=True)))
    assert chunks[-1].finish_reason == "length"
    assert sum(1 for c in chunks if c.text) >= 3
    assert len("".join(c.text for c in chunks)) > 10


def test_n_ctx_is_capped_by_the_model(tmp_path):
    pytest.importorskip("mlx_lm")
    from pocketchat.engines.mlx.engine import MlxEngine

    e = MlxEngine(plan(CONTEXT * 4), shared_model())
    assert e.info.n_ctx == CONTEXT
    e.close()


def test_stats_are_the_token_loops_own_clock(eng):
    """The loop's one clock for every backend: tokens fed and seconds spent feeding, split at
    the first token (mlx-lm's own loop is not used: the base's token loop drives the model)."""
    started = time.perf_counter()
    msgs = [Message("user", "Once upon a time there was a lighthouse by the sea.")]
    _, _, final = run(eng, msgs, ChatOptions(max_tokens=20, ignore_eos=True))
    wall = time.perf_counter() - started
    s = final.stats
    assert final.finish_reason == "length"
    assert s.generated_tokens == 20  # every token of the answer, the last one fed after it
    assert s.prompt_length == len(prompt_tokens(eng, msgs))
    assert s.prompt_tokens == s.prompt_length - s.reused_tokens > 0  # evaluated: the rest
    assert s.decode_tok_s == pytest.approx(s.generated_tokens / s.decode_seconds)
    assert s.prompt_tok_s == pytest.approx(s.prompt_tokens / s.prompt_seconds)
    assert 0 < s.ttft_seconds < wall and s.prompt_seconds + s.decode_seconds <= wall
    assert s.peak_memory_bytes and s.peak_memory_bytes > 0
    assert s.context_used == len(prompt_tokens(eng, msgs)) + 20
    assert s.context_limit == 1024 and s.dropped_messages == 0


def test_stop_at_the_end_of_the_turn_and_ignore_eos(scripted):
    text, _, final = run(scripted, QUESTION, ChatOptions(temperature=0.0, max_tokens=30, thinking=False))
    assert (text, final.finish_reason) == ("Hello", "stop")
    assert final.stats.generated_tokens == 2  # "Hello" and <|im_end|>
    text, _, final = run(scripted, QUESTION, ChatOptions(temperature=0.0, max_tokens=6,
                                                         thinking=False, ignore_eos=True))
    assert final.finish_reason == "length" and final.stats.generated_tokens == 6
    assert text.startswith("Hello") and text != "Hello"


# -- thinking -------------------------------------------------------------------------------


def test_thinking_is_split_from_the_answer(scripted):
    text, thinking, final = run(scripted, QUESTION, ChatOptions(temperature=0.0, max_tokens=30))
    assert (text, thinking, final.finish_reason) == ("Hello", "hmm", "stop")


def test_thinking_off_reaches_the_template(scripted):
    text, thinking, final = run(scripted, QUESTION,
                                ChatOptions(temperature=0.0, max_tokens=30, thinking=False))
    assert (text, thinking, final.finish_reason) == ("Hello", "", "stop")
    rendered = scripted.render(QUESTION, False)
    assert rendered.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    answer = scripted.chat(QUESTION, ChatOptions(temperature=0.0, max_tokens=30, thinking=False))
    final = next(c for c in answer if c.finish_reason)  # read no further: before it settles
    answer.close()
    assert final.finish_reason == "stop"
    assert scripted._cache.tokens[: len(prompt_tokens(scripted, QUESTION, False))] == \
        prompt_tokens(scripted, QUESTION, False)


# -- the prompt cache -----------------------------------------------------------------------


def two_turns(e, first=QUESTION):
    a1, _, f1 = run(e, first, GREEDY)
    held = list(e._cache.tokens)  # the first prompt and the answer's tokens
    follow = [*first, Message("assistant", a1), Message("user", "And what happened next?")]
    a2, _, f2 = run(e, follow, GREEDY)
    return follow, f1, held, (a2, f2)


def fresh_answer(messages):
    e = engine()
    try:
        return run(e, messages, GREEDY)[0]
    finally:
        e.close()


def test_second_turn_processes_only_its_new_tokens_and_answers_the_same(eng):
    eng.cache.reset()
    follow, f1, held, (a2, f2) = two_turns(eng)
    whole = prompt_tokens(eng, follow)
    shared = common_prefix(held, whole)
    assert shared >= f1.stats.prompt_tokens == len(prompt_tokens(eng, QUESTION))
    assert f2.stats.prompt_tokens == len(whole) - shared  # exactly what the cache did not hold
    assert f2.stats.prompt_tokens < len(whole) // 2
    assert f2.stats.context_used == len(whole) + 12
    assert a2 == fresh_answer(follow)  # the cache changes the cost, never the answer


def test_regenerating_an_answer_reuses_all_but_one_prompt_token(eng):
    run(eng, QUESTION, GREEDY)
    a, _, final = run(eng, QUESTION, GREEDY)
    assert final.stats.prompt_tokens == 1
    assert a == fresh_answer(QUESTION)


def test_an_edited_conversation_keeps_only_the_shared_prefix(eng):
    run(eng, [Message("system", "You are terse."), *QUESTION], GREEDY)
    edited = [Message("system", "You are terse."), Message("user", "Say only: yes")]
    _, _, final = run(eng, edited, GREEDY)
    whole = prompt_tokens(eng, edited)
    shared = prompt_tokens(eng, edited[:1], generation=False)
    assert shared == whole[: len(shared)]
    assert len(shared) <= len(whole) - final.stats.prompt_tokens < len(whole)


def test_reuse_plan_table():
    p = [1, 2, 3, 4, 5]
    assert plan_reuse([], p, trimmable=True) == Reuse("fresh", 0)
    assert plan_reuse([1, 2, 3], p, trimmable=True) == Reuse("live", 3)
    assert plan_reuse([1, 2, 9, 9], p, trimmable=True) == Reuse("live", 2)
    assert plan_reuse(p + [6, 7], p, trimmable=True) == Reuse("live", 4)  # one token left
    assert plan_reuse([1, 2, 3], p, trimmable=False) == Reuse("live", 3)
    assert plan_reuse([1, 2, 9], p, trimmable=False) == Reuse("fresh", 0)
    assert plan_reuse([1, 2, 9], p, trimmable=False, checkpoints=[[1, 2]]) == Reuse("checkpoint", 2)
    assert plan_reuse([1, 7, 9], p, trimmable=False, checkpoints=[[1, 7]]) == Reuse("fresh", 0)
    assert plan_reuse(p, p, trimmable=False, checkpoints=[[1, 2, 3]]) == Reuse("checkpoint", 3)
    assert plan_reuse(p, p, trimmable=False, checkpoints=[p]) == Reuse("fresh", 0)


def test_untrimmable_cache_restarts_from_the_checkpoint(untrimmable):
    e = untrimmable
    follow, f1, held, (a2, f2) = two_turns(e)
    # the checkpoint sits where the first turn's user message ended
    checkpoint = prompt_tokens(e, QUESTION, generation=False)
    whole = prompt_tokens(e, follow)
    assert whole[: len(checkpoint)] == checkpoint
    assert f1.stats.prompt_tokens == len(prompt_tokens(e, QUESTION))
    if held == whole[: len(held)]:  # the answer re-tokenized the same: the cache just goes on
        assert f2.stats.prompt_tokens == len(whole) - len(held)
    else:
        assert f2.stats.prompt_tokens == len(whole) - len(checkpoint)
    assert a2 == fresh_answer(follow)
    # asking the same again restarts from the second turn's checkpoint
    for _ in range(2):  # twice: restoring must leave the checkpoint itself untouched
        a3, _, f3 = run(e, follow, GREEDY)
        assert f3.stats.prompt_tokens == len(whole) - len(prompt_tokens(e, follow, generation=False))
        assert a3 == a2


def test_pockets_hybrid_architecture_reuses_its_checkpoint(tmp_path):
    """qwen3_5_moe at toy size: DeltaNet state (ArraysCache) + KV layers, experts."""
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import write_tiny_qwen35_moe
    from pocketchat.engines.mlx.engine import MlxEngine

    folder = write_tiny_qwen35_moe(tmp_path / "hybrid")
    e = MlxEngine(plan(), folder)
    try:
        kinds = {type(c).__name__ for c in e.state.layers}
        assert kinds == {"ArraysCache", "KVCache"} and not e._cache.trimmable
        follow, f1, held, (a2, f2) = two_turns(e)
        whole = prompt_tokens(e, follow)
        checkpoint = prompt_tokens(e, QUESTION, generation=False)
        assert f2.stats.prompt_tokens in (len(whole) - len(held), len(whole) - len(checkpoint))
        assert f2.stats.prompt_tokens < len(whole)
        fresh = MlxEngine(plan(), folder)
        try:
            assert run(fresh, follow, GREEDY)[0] == a2
        finally:
            fresh.close()
    finally:
        e.close()


def test_untrimmable_cache_starts_over_when_the_start_changed(untrimmable):
    e = untrimmable
    run(e, QUESTION, GREEDY)
    other = [Message("user", "Say only: yes")]
    a, _, final = run(e, other, GREEDY)
    assert final.stats.prompt_tokens == len(prompt_tokens(e, other))
    assert a == fresh_answer(other)


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_stops_mid_answer_and_the_cache_stays_right(eng):
    seen, at = [], []
    for chunk in eng.chat(QUESTION, ChatOptions(max_tokens=500, ignore_eos=True)):
        seen.append(chunk)
        if len(seen) == 3:
            t = threading.Thread(target=lambda: (at.append(time.perf_counter()), eng.cancel()))
            t.start()
            t.join()
    ended = time.perf_counter()
    final = seen[-1]
    assert final.finish_reason == "cancelled" and ended - at[0] < 0.2
    assert 0 < final.stats.generated_tokens < 500
    answer = "".join(c.text for c in seen)
    follow = [*QUESTION, Message("assistant", answer), Message("user", "Go on.")]
    a2, _, f2 = run(eng, follow, GREEDY)
    assert f2.stats.prompt_tokens < len(prompt_tokens(eng, follow))
    assert a2 == fresh_answer(follow)


def test_cancel_during_a_long_prompt_stops_at_the_next_batch():
    """The prompt is read in pieces of n_batch (progress chunks between them): a cancel while it
    is read stops before the next piece, and what was processed is kept."""
    e = engine(n_ctx=CONTEXT, n_batch=32)
    long = [Message("user", "the river is long and wide and deep " * 60)]
    whole = prompt_tokens(e, long)
    assert len(whole) > 300
    chunks = []
    for chunk in e.chat(long, ChatOptions(max_tokens=8)):
        chunks.append(chunk)
        if chunk.progress is not None and chunk.progress.done >= 64:
            e.cancel()
    final = chunks[-1]
    assert [c.progress.done for c in chunks if c.progress is not None] == [0, 32, 64]
    assert final.finish_reason == "cancelled"
    assert final.stats.generated_tokens == 0 and final.stats.prompt_tokens == 64
    assert e._cache.tokens == whole[:64]  # what was processed is kept
    _, _, again = run(e, long, ChatOptions(max_tokens=4, ignore_eos=True))
    assert again.finish_reason == "length" and again.stats.prompt_tokens == len(whole) - 64
    e.close()


def test_an_abandoned_answer_leaves_the_cache_consistent(eng):
    chunks = eng.chat(QUESTION, ChatOptions(max_tokens=200, ignore_eos=True))
    seen = [next(chunks) for _ in range(4)]
    chunks.close()  # the caller stops reading (a UI that went away)
    answer = "".join(c.text for c in seen)
    follow = [*QUESTION, Message("assistant", answer), Message("user", "Go on.")]
    a2, _, f2 = run(eng, follow, GREEDY)
    assert f2.stats.prompt_tokens < len(prompt_tokens(eng, follow))
    assert a2 == fresh_answer(follow)


def test_a_failure_mid_answer_is_an_error_chunk_and_the_next_answer_starts_clean(eng, monkeypatch):
    real = eng._step_parts
    calls = [0]

    def failing(parts):
        calls[0] += 1
        if calls[0] == 4:
            raise RuntimeError("[metal] command buffer failed")
        return real(parts)

    monkeypatch.setattr(eng, "_step_parts", failing)
    _, _, final = run(eng, QUESTION, ChatOptions(max_tokens=50, ignore_eos=True))
    assert final.finish_reason == "error" and "command buffer failed" in final.error
    monkeypatch.setattr(eng, "_step_parts", real)
    _, _, after = run(eng, QUESTION, GREEDY)
    assert after.finish_reason == "length"
    assert after.stats.prompt_tokens == len(prompt_tokens(eng, QUESTION))  # nothing trusted


def test_cancel_with_nothing_in_flight_is_ignored(eng):
    eng.cancel()
    assert run(eng, QUESTION, ChatOptions(max_tokens=3, ignore_eos=True))[2].finish_reason == "length"


# -- the context limit ----------------------------------------------------------------------


def test_a_long_conversation_drops_old_turns_but_keeps_the_system_prompt():
    e = engine(n_ctx=256)
    history = [Message("system", "You are terse.")]
    for i in range(30):
        history += [Message("user", f"Fact {i}: the river is long."), Message("assistant", f"Noted {i}.")]
    history.append(Message("user", "Which facts do you remember?"))
    _, _, final = run(e, history, ChatOptions(max_tokens=8, ignore_eos=True))
    assert final.finish_reason == "length", final.error
    assert final.stats.dropped_messages > 0 and final.stats.dropped_messages % 2 == 0
    assert final.stats.context_used <= 256
    system = prompt_tokens(e, history[:1], generation=False)
    assert e._cache.tokens[: len(system)] == system
    kept = history[:1] + history[1 + final.stats.dropped_messages:]
    assert e._cache.tokens[: len(prompt_tokens(e, kept))] == prompt_tokens(e, kept)
    e.close()


def test_the_answer_ends_with_length_at_the_context_limit():
    e = engine(n_ctx=64)
    _, _, final = run(e, [Message("user", "Hello")], ChatOptions(ignore_eos=True))
    assert final.finish_reason == "length"
    assert final.stats.context_used == 64
    assert final.stats.generated_tokens == 64 - len(prompt_tokens(e, [Message("user", "Hello")]))
    e.close()


def test_a_message_too_long_is_an_error_chunk(eng):
    _, _, final = run(eng, [Message("user", "word " * 2000)], ChatOptions(max_tokens=8))
    assert final.finish_reason == "error" and "context" in final.error
    assert run(eng, QUESTION, ChatOptions(max_tokens=2, ignore_eos=True))[2].finish_reason == "length"


# -- folders that are not MLX models --------------------------------------------------------


def corrupt(tmp_path, how):
    folder = write_tiny_llama(tmp_path / "m")
    if how == "no config":
        (folder / "config.json").unlink()
    elif how == "bad config":
        (folder / "config.json").write_text("{not json")
    elif how == "no model_type":
        (folder / "config.json").write_text(json.dumps({"hidden_size": 64}))
    elif how == "no weights":
        (folder / "model.safetensors").unlink()
    elif how == "truncated weights":
        w = folder / "model.safetensors"
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    elif how == "not safetensors":
        (folder / "model.safetensors").write_bytes(b"<html>404</html>")
    elif how == "missing shard":
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    elif how == "no tokenizer":
        (folder / "tokenizer.json").unlink()
    elif how == "weights do not match":
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 3}))
    elif how == "a file":
        return folder / "model.safetensors"
    return folder


@pytest.mark.parametrize("how,words", [
    ("no config", "config.json"), ("bad config", "config.json"), ("no model_type", "model_type"),
    ("no weights", "safetensors"), ("truncated weights", "truncated"),
    ("not safetensors", "not a safetensors"), ("missing shard", "model-00002-of-00002"),
    ("no tokenizer", "tokenizer"), ("weights do not match", "not a loadable MLX model"),
    ("a file", "folder"),
])
def test_a_folder_that_is_not_an_mlx_model_is_corrupt(tmp_path, how, words):
    pytest.importorskip("mlx_lm")
    from pocketchat.engines.mlx.engine import MlxEngine

    with pytest.raises(CorruptModel) as info:
        MlxEngine(plan(), corrupt(tmp_path, how))
    assert words in info.value.message


def test_a_missing_folder_and_an_unknown_architecture(tmp_path):
    pytest.importorskip("mlx_lm")
    from pocketchat.engines.mlx.engine import MlxEngine

    with pytest.raises(ModelNotFound):
        MlxEngine(plan(), tmp_path / "nothing")
    folder = write_tiny_llama(tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "model_type": "qwen9_moe"}))
    with pytest.raises(EngineError) as info:
        MlxEngine(plan(), folder)
    assert "qwen9_moe" in info.value.message and "mlx-lm" in info.value.hint


# -- the Metal budget -----------------------------------------------------------------------

MB = MiB


@pytest.mark.parametrize("weights,kv,budget,total,refused,limit_mb", [
    (5 * GiB, 0, None, 18 * GiB, False, None),  # not a Metal device: nothing to check
    (int(5.1e9), 160 * MB, 12 * GiB, 18 * GiB, False, None),  # POCKET-KR-MLX on an 18 GB Mac
    (int(12.9e9), 160 * MB, int(11.5 * GiB), 18 * GiB, True, 13824),  # Q2_K on 18 GB: raise it
    (12 * GiB, 0, 12 * GiB, 18 * GiB, False, None),  # exactly at the budget
    (15 * GiB, 0, 10 * GiB, 16 * GiB, True, None),  # 16 GB Mac: no limit would leave macOS room
    (20 * GiB, 4 * GiB, 27 * GiB, 36 * GiB, False, None),
    (30 * GiB, 2 * GiB, 27 * GiB, 36 * GiB, True, None),  # 32+3.2 GiB > 36-4
    (30 * GiB, 0, 27 * GiB, None, True, 33792),  # total unknown: still suggest a limit
])
def test_metal_budget_table(weights, kv, budget, total, refused, limit_mb):
    if not refused:
        check_metal_budget(weights, kv, budget, total)
        return
    with pytest.raises(MetalBudgetExceeded) as info:
        check_metal_budget(weights, kv, budget, total)
    err = info.value
    assert isinstance(err, ModelTooLarge)
    assert err.need_bytes == weights + kv and err.budget_bytes == budget
    assert err.suggested_limit_mb == limit_mb
    assert f"{(weights + kv) / GiB:.1f} GiB" in err.message and f"{budget / GiB:.1f} GiB" in err.message
    if limit_mb:
        assert f"sudo sysctl iogpu.wired_limit_mb={limit_mb}" in err.hint
        assert limit_mb * MiB >= weights + kv + GiB
    else:
        assert "iogpu" not in err.hint and "smaller build" in err.hint


def test_suggested_limit_and_kv_estimate():
    assert suggested_wired_limit_mb(10 * GiB) == 11264  # + 1 GiB margin, 256 MB steps
    assert suggested_wired_limit_mb(20 * GiB) == 22528  # + 10 %
    pocket = {"num_hidden_layers": 40, "num_attention_heads": 16, "num_key_value_heads": 2,
              "head_dim": 256, "hidden_size": 2048, "full_attention_interval": 4}
    assert kv_cache_bytes(pocket, 8192) == 10 * 2 * 2 * 256 * 8192 * 2  # about 0.16 GiB
    assert kv_cache_bytes({"text_config": pocket}, 1) == 20 * 1024
    assert kv_cache_bytes({"model_type": "odd"}, 8192) == 0


def test_over_budget_on_metal_refuses_before_loading(monkeypatch):
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    import mlx_lm

    from pocketchat.engines.mlx.engine import MlxEngine

    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu)
    monkeypatch.setattr(mx.metal, "is_available", lambda: True)
    monkeypatch.setattr(mx, "device_info", lambda *a: {"max_recommended_working_set_size": 1000,
                                                       "memory_size": 8 * GiB})
    monkeypatch.setattr(mlx_lm, "load", lambda *a, **k: pytest.fail("loaded over the budget"))
    with pytest.raises(MetalBudgetExceeded) as info:
        MlxEngine(plan(placement="gpu"), shared_model())
    assert info.value.budget_bytes == 1000


# -- without mlx ----------------------------------------------------------------------------


def test_without_mlx_the_engine_is_backend_missing(monkeypatch):
    for name in ("mlx", "mlx.core", "mlx_lm", "mlx_lm.generate"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    from pocketchat.engines.mlx.engine import MlxEngine

    with pytest.raises(BackendMissing) as info:
        MlxEngine(plan(), shared_model())
    assert "pip install" in info.value.hint and "mlx" in info.value.hint


def test_pocketchat_imports_without_mlx():
    code = (
        "import sys\n"
        "for n in ('mlx', 'mlx.core', 'mlx_lm'): sys.modules[n] = None\n"
        "import pocketchat.engines.mlx.engine, pocketchat.engines.worker.parent, pocketchat.cli\n"
        "from pocketchat.engines.worker.child import make_backend\n"
        "from pocketchat.errors import BackendMissing\n"
        "from pocketchat.types import LoadPlan\n"
        f"p = LoadPlan('mlx', 'cpu', 0, 512, 2, 2)\n"
        "try:\n"
        f"    make_backend(p, __import__('pathlib').Path({str(shared_model())!r}), None)\n"
        "except BackendMissing as e:\n"
        "    print('missing:', e.hint)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "missing: Install it with: pip install" in out.stdout


# -- through the worker process -------------------------------------------------------------


@pytest.mark.slow
def test_mlx_runs_in_the_worker_process():
    pytest.importorskip("mlx_lm")
    from pocketchat.engines.worker.parent import WorkerEngine

    e = WorkerEngine(plan(512), shared_model("scripted"), name="tiny", timeout=120)
    try:
        assert e.info.backend == "mlx" and e.info.n_ctx == 512
        text, thinking, final = run(e, QUESTION, ChatOptions(temperature=0.0, max_tokens=20))
        assert (text, thinking, final.finish_reason) == ("Hello", "hmm", "stop")
        assert final.stats.generated_tokens == 5 and final.stats.decode_tok_s > 0
    finally:
        e.close()
