"""The prompt cache across conversations in each real engine, in this process: conversations
that take turns continue from their parked state (only the new message is evaluated, the
stats say so), and the answers are token for token those of an engine without the cache (a
parked state is the state it was, KV and recurrent parts alike). Engines: llama.cpp on the
tiny `qwen35moe` (hybrid: the state cannot be cut back) and on the starter (attention only),
MLX on its tiny llama. Also: the worker forwards `status()`, and a budget too small for one
state keeps nothing."""

from __future__ import annotations

import pytest

from pocketchat.engines.types import ChatOptions, Message
from pocketchat.types import LoadPlan

pytestmark = pytest.mark.slow

SLACK = 32  # role headers and the generation prompt (the server test keeps the 64)
GREEDY = ChatOptions(temperature=0, max_tokens=6, ignore_eos=True, thinking=False)
BUDGET = 64 * 1024**2


def llama_plan(budget: int) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                    n_threads=1, n_threads_batch=1, prompt_cache_bytes=budget)


@pytest.fixture(scope="module")
def tiny_qwen35(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35

    return tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("pc") / "q35.gguf",
                                           chat_template=tinyqwen35.QWEN35_TEMPLATE)


def qwen35(path, budget: int):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    return LlamaCppEngine(llama_plan(budget), path, name="tiny-qwen35moe")


def starter(budget: int):
    pytest.importorskip("llama_cpp")
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.store.starter import starter_path

    return LlamaCppEngine(llama_plan(budget), starter_path(), name="starter")


def mlx(budget: int):
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from pocketchat.engines.mlx.engine import MlxEngine

    return MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                              n_threads=1, n_threads_batch=1, prompt_cache_bytes=budget),
                     shared_model(), name="tiny-llama")


def take_turns(engine, rounds: int = 3, options: ChatOptions = GREEDY):
    """Two conversations in turn; per request: (answer, stats, new message's tokens)."""
    convs = [[Message("system", "You help with bread.")], []]
    rows = []
    for rnd in range(rounds):
        for i, messages in enumerate(convs):
            messages.append(Message("user", f"Conversation {i}, question {rnd}: and then?"))
            chunks = list(engine.chat(messages, options))
            final = chunks[-1]
            assert final.finish_reason == "length", final.error
            text = "".join(c.text for c in chunks)
            new = len(messages[-1].content.encode())  # its tokens: at most its bytes
            rows.append((text, final.stats, new))
            messages.append(Message("assistant", text))
    return rows


def check(make, budget: int = BUDGET):
    on, off = make(budget), make(0)
    try:
        cached, plain = take_turns(on), take_turns(off)
        status = on.status()["cache"]
    finally:
        on.close()
        off.close()
    assert [t for t, _, _ in cached] == [t for t, _, _ in plain]  # same answers, token for token
    for _, stats, new in cached[2:]:
        assert stats.evaluated_tokens <= new + SLACK, stats
        assert stats.reused_tokens == stats.prompt_length - stats.evaluated_tokens
    assert sum(s.evaluated_tokens for _, s, _ in cached[2:]) < sum(
        s.evaluated_tokens for _, s, _ in plain[2:])
    assert status["hits"] == 4 and 0 < status["bytes"] <= status["budget"], status
    return status


@pytest.fixture(scope="module", params=["qwen3.5", "qwen3.6"])
def real_qwen(request, tmp_path_factory):
    """The tiny qwen35moe with each of POCKET's real chat templates (support/templates)."""
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35

    return tinyqwen35.write_tiny_qwen35moe(
        tmp_path_factory.mktemp("pcreal") / "q35.gguf",
        chat_template=tinyqwen35.REAL_TEMPLATES[request.param])


def test_hybrid_llama_cpp(tiny_qwen35):
    check(lambda budget: qwen35(tiny_qwen35, budget))


def test_hybrid_llama_cpp_with_the_real_templates(real_qwen):
    """Qwen3.5/3.6's own templates refuse a conversation without a user query: the shared
    system prompt is still found (rendered with probe user messages) and kept."""
    check(lambda budget: qwen35(real_qwen, budget))


def test_attention_only_llama_cpp():
    check(starter)


def test_mlx():
    check(mlx)


def test_hybrid_with_answers_that_are_all_reasoning(tiny_qwen35):
    """Thinking on: the tiny model never closes its reasoning, so no answer is settled; each
    conversation is parked at its newest checkpoint (the end of its last user message)."""
    all_reasoning(tiny_qwen35)


def test_answers_that_are_all_reasoning_with_the_real_templates(real_qwen):
    """The same with Qwen3.5/3.6's own templates (an earlier turn's reasoning is rendered
    only after the last user query there)."""
    all_reasoning(real_qwen)


def all_reasoning(model) -> None:
    thinking = ChatOptions(temperature=0, max_tokens=6, ignore_eos=True, thinking=True)
    results = []
    for budget in (BUDGET, 0):
        engine = qwen35(model, budget)
        try:
            results.append(take_turns(engine, options=thinking))
        finally:
            engine.close()
    cached, plain = results
    assert [s.evaluated_tokens for _, s, _ in cached[:2]] == [s.evaluated_tokens for _, s, _ in plain[:2]]
    for _, stats, new in cached[2:]:
        assert stats.evaluated_tokens <= new + 2 * SLACK, stats  # + the empty assistant turn
    assert sum(s.evaluated_tokens for _, s, _ in cached[2:]) * 2 < sum(
        s.evaluated_tokens for _, s, _ in plain[2:])


def test_a_budget_smaller_than_one_state_keeps_nothing_and_loses_nothing(tiny_qwen35):
    engine = qwen35(tiny_qwen35, 1024)  # one parked state of this model is ~100 KB
    try:
        rows = take_turns(engine, rounds=2)
        status = engine.status()["cache"]
    finally:
        engine.close()
    assert status["entries"] == 0 and status["bytes"] == 0 and status["hits"] == 0
    assert all(stats.reused_tokens == 0 for _, stats, _ in rows[2:])  # the truth: re-read


def test_the_worker_forwards_status(tiny_qwen35):
    from pocketchat.engines.worker.parent import WorkerEngine

    engine = WorkerEngine(llama_plan(BUDGET), tiny_qwen35, name="tiny-qwen35moe")
    try:
        take_turns(engine, rounds=2)
        status = engine.status()
    finally:
        engine.close()
    assert status["cache"]["hits"] == 2 and status["cache"]["budget"] == BUDGET, status
