"""The thought's budget in the token loop, on the tiny qwen35moe (POCKET's architecture) with a
Qwen3.6-like template: its random weights never end a thought by themselves, so only the loop
can. With a budget N the answer starts within N plus the closing's tokens; a length cap never
leaves the content empty; "answer now" ends the thought within a step; the closed thought is
what the model's own greedy continuation of the same tokens gives; and the next turn
evaluates only its new message. In process and through the worker (llama.cpp), and on MLX.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pocketchat.engines.llamacpp.engine import LlamaCppEngine
from pocketchat.engines.answer.loop import CLOSING_LINE
from pocketchat.engines.answer.render import closing_tokens
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.engines.worker.parent import WorkerEngine
from pocketchat.types import LoadPlan
from support.tinyqwen35 import QWEN36_TEMPLATE, write_tiny_qwen35moe

pytestmark = pytest.mark.slow

ASK = [Message("user", "Think about the sea, then say one word.")]


def plan(n_ctx: int = 1024) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=2, n_threads_batch=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_qwen35moe(tmp_path_factory.mktemp("budget") / "tiny-qwen36.gguf",
                                chat_template=QWEN36_TEMPLATE, ascii_only=True)


@pytest.fixture(scope="module")
def closing(model) -> int:
    eng = LlamaCppEngine(plan(), model)
    try:
        return len(closing_tokens(eng, CLOSING_LINE))
    finally:
        eng.close()


@pytest.fixture(params=["in-process", "worker"])
def engine(request, model):
    eng = LlamaCppEngine(plan(), model) if request.param == "in-process" else WorkerEngine(plan(), model)
    yield eng
    eng.close()


def answer(eng, messages, **options):
    chunks = list(eng.chat(messages, ChatOptions(temperature=0, **options)))
    return ("".join(c.text for c in chunks), "".join(c.thinking for c in chunks), chunks)


def test_the_answer_starts_within_the_budget_plus_the_closing(engine, closing):
    for budget in (8, 40):
        text, thought, chunks = answer(engine, ASK, thinking_budget=budget,
                                       max_tokens=budget + closing + 24)
        final = chunks[-1]
        assert final.stats.thinking_end == "budget"
        assert final.stats.thinking_tokens <= budget + closing
        assert thought.rstrip().endswith(CLOSING_LINE)  # the history carries the line
        assert text, "the answer follows the closed thought"
        first_answer = next(i for i, c in enumerate(chunks) if c.text)
        generated_before = sum(1 for c in chunks[:first_answer] if c.thinking)
        assert generated_before <= budget + 1  # one chunk per thought token at most


def test_a_length_cap_never_leaves_the_content_empty(engine, closing):
    for cap in (closing + 2, closing + 10, 200):
        text, _, chunks = answer(engine, ASK, max_tokens=cap)
        assert text, f"max_tokens={cap}: the thought ate the answer"
        # closed to leave the answer room, or where the model ended its turn inside it
        assert chunks[-1].stats.thinking_end in ("budget", "model")
        assert chunks[-1].stats.generated_tokens <= cap


def test_answer_now_ends_the_thought_within_one_step(engine):
    stream = engine.chat(ASK, ChatOptions(temperature=0, max_tokens=400))
    seen, asked_at = [], None
    for chunk in stream:
        seen.append(chunk)
        if asked_at is None and any(c.thinking for c in seen):  # at once: the tiny model is fast
            engine.end_thinking()
            asked_at = len(seen)
    final = seen[-1]
    assert final.stats.thinking_end == "user"
    assert "".join(c.text for c in seen)
    # the closing arrives at once: at most a few chunks (batched by the worker) after asking
    after = seen[asked_at:]
    first_text = next(i for i, c in enumerate(after) if c.text)
    assert first_text <= 3


def test_the_closed_thought_continues_as_the_model_itself_would(model, closing):
    """The greedy answer after a closed thought equals the model's greedy continuation of the
    same tokens given as a raw prompt (the closing is a prefill the loop wrote)."""
    eng = LlamaCppEngine(plan(), model)
    try:
        stream = eng.chat(ASK, ChatOptions(temperature=0, thinking_budget=12, max_tokens=60))
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            if chunk.finish_reason is not None:
                break  # before the settling: the cache holds the prompt and the answer
        text = "".join(c.text for c in chunks)
        held = list(eng.cache.tokens)
        close = closing_tokens(eng, CLOSING_LINE)
        at = next(i for i in range(len(held)) if held[i: i + len(close)] == close) + len(close)
        stream.close()
        again = list(eng.complete(held[:at], ChatOptions(temperature=0, max_tokens=20)))
        assert text and "".join(c.text for c in again)[: len(text)] == text[: 20]
    finally:
        eng.close()


@pytest.mark.parametrize("how", ["budget", "user"])
def test_after_a_closed_thought_the_next_turn_evaluates_only_its_new_message(model, how):
    eng = LlamaCppEngine(plan(), model)
    try:
        opts = ChatOptions(temperature=0, max_tokens=80,
                           thinking_budget=10 if how == "budget" else None)
        chunks = []
        for chunk in eng.chat(ASK, opts):
            chunks.append(chunk)
            if how == "user" and sum(1 for c in chunks if c.thinking) == 4:
                eng.end_thinking()
        assert chunks[-1].stats.thinking_end == how
        turn = Message("assistant", "".join(c.text for c in chunks),
                       reasoning="".join(c.thinking for c in chunks))
        follow = [*ASK, turn, Message("user", "And another word?")]
        whole = eng._encode(eng.render(follow, True))
        history = eng.history_tokens(follow[:-1], True)  # what the settled state holds
        assert whole[: len(history)] == history
        final = list(eng.chat(follow, ChatOptions(temperature=0, max_tokens=4)))[-1]
        assert final.stats.prompt_tokens == len(whole) - len(history)  # the new message only
        assert final.stats.prepared_tokens > 0  # the closed thought's turn was settled
    finally:
        eng.close()


def test_mlx_closes_the_thought_at_its_budget():
    """The same loop on MLX: the scripted model opens a thought and writes "hmm" in it; a
    budget of one token closes it there, before the model's own </think>."""
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from pocketchat.engines.mlx.engine import MlxEngine

    eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=512,
                             n_threads=2, n_threads_batch=2), shared_model("scripted"))
    try:
        close = len(closing_tokens(eng, CLOSING_LINE))
        chunks = list(eng.chat(ASK, ChatOptions(temperature=0, thinking_budget=1,
                                                max_tokens=close + 12)))
        final = chunks[-1]
        assert final.stats.thinking_end == "budget"
        assert final.stats.thinking_tokens == 1 + close
        assert "".join(c.thinking for c in chunks).startswith("hmm")
        assert CLOSING_LINE in "".join(c.thinking for c in chunks)
        free = list(eng.chat(ASK, ChatOptions(temperature=0, max_tokens=30)))[-1]
        assert free.stats.thinking_end == "model"  # no budget: the model closes it itself
    finally:
        eng.close()


def test_end_thinking_outside_a_thought_changes_nothing(model):
    eng = LlamaCppEngine(plan(), model)
    try:
        eng.end_thinking()  # nothing in flight
        text, thought, chunks = answer(eng, ASK, thinking=False, max_tokens=12)
        assert chunks[-1].stats.thinking_end == "" and not thought
        done = threading.Event()
        done.set()
    finally:
        eng.close()


def test_mlx_closes_a_thought_the_tiny_qwen35_moe_never_ends(tmp_path):
    """On MLX with POCKET's architecture family (the tiny `qwen3_5_moe`, a Qwen3.6-like template
    whose generation prompt opens the thought): its random weights never write `</think>`, so
    only the budget ends the thought; the answer follows within the budget plus the closing,
    and the next turn reads only its new message."""
    pytest.importorskip("mlx_lm")
    import json

    from support.mlx_fixture import write_tiny_qwen35_moe
    from pocketchat.engines.mlx.engine import MlxEngine

    folder = write_tiny_qwen35_moe(tmp_path / "tiny-qwen35-moe-mlx")
    config = folder / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "chat_template": QWEN36_TEMPLATE}))
    eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=1024,
                             n_threads=2, n_threads_batch=2), folder)
    try:
        close = len(closing_tokens(eng, CLOSING_LINE))
        budget = 12
        text, thought, chunks = answer(eng, ASK, thinking_budget=budget,
                                       max_tokens=budget + close + 16)
        final = chunks[-1]
        assert final.stats.thinking_end == "budget"
        assert final.stats.thinking_tokens <= budget + close
        assert thought.rstrip().endswith(CLOSING_LINE)
        assert final.stats.generated_tokens > final.stats.thinking_tokens  # the answer followed
        history = ASK + [Message("assistant", text, reasoning=thought)]
        follow = history + [Message("user", "And the sky?")]
        whole = eng._encode(eng.render(follow, True))
        held = eng.history_tokens(history, True)  # what the settled state holds
        assert whole[: len(held)] == held
        again = list(eng.chat(follow, ChatOptions(temperature=0, max_tokens=4,
                                                  thinking_budget=budget)))[-1]
        assert again.stats.prompt_tokens == len(whole) - len(held)  # the new message only
    finally:
        eng.close()
