"""Each chat turn evaluates only its new tokens, on POCKET's hybrid architecture and on an
attention-only model, in this process and in the worker, thinking on and off.

The tiny `qwen35moe` GGUF (tinyqwen35.py) has Gated-DeltaNet layers whose state cannot be cut
back, and a template that renders earlier answers without their reasoning, as Qwen3.5/3.6's
does: without checkpoints every turn would re-evaluate the whole conversation.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketchat.engines.llamacpp.engine import LlamaCppEngine
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.engines.worker.parent import WorkerEngine
from pocketchat.types import LoadPlan

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

TURNS = 4
SLACK = 16  # the bar: new message + generation prompt + 16


def plan(n_ctx: int = 2048) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=1, n_threads_batch=1)  # one thread: no spinning on a busy CI box


def user_message(turn: int) -> Message:
    return Message("user", f"Turn {turn}. Tell me about the number {turn * 17}, its digits "
                           f"and one fact about it, in a short sentence or two.")


def new_part(counter: LlamaCppEngine, messages: list[Message], thinking: bool) -> int:
    """Tokens of the new user message (with its role header) and the generation prompt."""
    whole = counter._encode(counter.render(messages, thinking))
    if len(messages) == 1:
        return len(whole)
    before = counter._encode(counter.render(messages[:-1], thinking, generation=False))
    return len(whole) - len(before)


def run_turns(engine, counter, thinking: bool, turns: int = TURNS, max_tokens: int = 12):
    """Chat `turns` turns as the app does (empty answers are not sent back); per-turn stats."""
    messages: list[Message] = []
    rows = []
    for turn in range(1, turns + 1):
        messages.append(user_message(turn))
        chunks = list(engine.chat(messages, ChatOptions(temperature=0, max_tokens=max_tokens,
                                                        thinking=thinking)))
        final = chunks[-1]
        assert final.finish_reason in ("stop", "length"), final.error
        rows.append((final.stats, new_part(counter, messages, thinking)))
        answer = "".join(c.text for c in chunks)
        if answer:
            messages.append(Message("assistant", answer))
    return rows


@pytest.fixture(scope="module")
def starter() -> Path:
    from pocketchat.store.starter import starter_path

    return starter_path()


@pytest.fixture(scope="module", params=["qwen35moe", "starter"])
def model(request, tiny_qwen35, starter) -> Path:
    return tiny_qwen35 if request.param == "qwen35moe" else starter


@pytest.fixture(scope="module")
def counter(model):
    eng = LlamaCppEngine(plan(), model)
    yield eng
    eng.close()


@pytest.mark.parametrize("where", ["in-process", "worker"])
@pytest.mark.parametrize("thinking", [True, False], ids=["thinking-on", "thinking-off"])
def test_from_turn_two_only_the_new_message_is_evaluated(model, counter, where, thinking):
    eng = LlamaCppEngine(plan(), model) if where == "in-process" else WorkerEngine(plan(), model)
    try:
        rows = run_turns(eng, counter, thinking)
    finally:
        eng.close()
    first = rows[0][0]
    assert first.reused_tokens == 0 and first.prompt_tokens == first.prompt_length
    for turn, (s, new) in enumerate(rows[1:], start=2):
        assert s.prompt_tokens + s.reused_tokens == s.prompt_length
        assert s.prompt_tokens <= new + SLACK, f"turn {turn} evaluated {s.prompt_tokens} of " \
            f"{s.prompt_length} prompt tokens; its new part is {new}"
    assert rows[-1][0].reused_tokens > rows[-1][0].prompt_length // 2


def test_hybrid_model_is_not_trimmable_and_keeps_bounded_checkpoints(tiny_qwen35):
    eng = LlamaCppEngine(plan(), tiny_qwen35)
    try:
        assert not eng.cache.trimmable
        eng.cache.max_count = 2
        run_turns(eng, eng, thinking=False, turns=4, max_tokens=4)
        assert len(eng.cache.checkpoints) == 2
        assert 0 < eng.cache.nbytes() <= eng.cache.max_bytes
        for ck in eng.cache.checkpoints:  # each is a prefix of what the state holds
            assert list(ck.tokens) == eng.cache.tokens[: len(ck.tokens)]
    finally:
        eng.close()


def greedy(eng, messages, thinking=False, n=16):
    chunks = list(eng.chat(messages, ChatOptions(temperature=0, max_tokens=n, ignore_eos=True,
                                                 thinking=thinking)))
    assert chunks[-1].finish_reason == "length", chunks[-1].error
    return "".join(c.text + c.thinking for c in chunks), chunks[-1].stats


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking-on", "thinking-off"])
def test_a_turn_after_a_checkpoint_restore_answers_as_a_fresh_engine(tiny_qwen35, thinking):
    """Regenerate (same messages) and edit (a changed last message) restart from checkpoints;
    the greedy answer is the one a fresh engine gives on the same messages."""
    eng = LlamaCppEngine(plan(), tiny_qwen35)
    try:
        messages = [user_message(1)]
        text, _ = greedy(eng, messages, thinking)
        messages += [Message("assistant", "Seventeen is prime."), user_message(2)]
        first, _ = greedy(eng, messages, thinking)
        again, s = greedy(eng, messages, thinking)  # regenerate: from the checkpoint
        assert s.reused_tokens > 0 and s.prompt_tokens < s.prompt_length
        edited = [*messages[:-1], Message("user", "Something else entirely, please.")]
        edit_text, s_edit = greedy(eng, edited, thinking)
        assert s_edit.reused_tokens > 0
    finally:
        eng.close()
    assert again == first
    for msgs, expect in ((messages, first), (edited, edit_text)):
        fresh = LlamaCppEngine(plan(), tiny_qwen35)
        try:
            assert greedy(fresh, msgs, thinking)[0] == expect
        finally:
            fresh.close()


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking-on", "thinking-off"])
def test_mlx_hybrid_model_evaluates_only_the_new_message(tmp_path_factory, thinking):
    """The toy qwen3_5_moe MLX model: DeltaNet state (ArraysCache) + KV layers, experts."""
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import write_tiny_qwen35_moe
    from pocketchat.engines.mlx.engine import MlxEngine

    folder = write_tiny_qwen35_moe(tmp_path_factory.mktemp("mlx") / "hybrid")
    eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                             n_threads=1, n_threads_batch=1), folder)
    try:
        assert not eng.cache.trimmable
        rows = run_turns(eng, eng, thinking)
    finally:
        eng.close()
    for turn, (s, new) in enumerate(rows[1:], start=2):
        assert s.prompt_tokens + s.reused_tokens == s.prompt_length
        assert s.prompt_tokens <= new + SLACK, f"turn {turn}: {s.prompt_tokens} > {new} + {SLACK}"


def test_the_status_bar_and_the_saved_conversation_show_the_reuse():
    from pocketchat import conversations
    from pocketchat.engines.types import Stats
    from pocketchat.ui.widgets import StatusBar, figures_from_stats

    stats = Stats(prompt_tokens=138, reused_tokens=3812, prompt_length=3950, generated_tokens=9,
                  context_limit=8192, context_used=3959)
    bar = StatusBar()
    bar.show(figures_from_stats(stats, "Ready", None, 8192, None))
    assert "cached 3,812/3,950" in bar.plain
    saved = conversations.stats_summary(stats)
    assert (saved["prompt_length"], saved["reused_tokens"], saved["prompt_tokens"]) == (3950, 3812, 138)
    bar.show(figures_from_stats(Stats(generated_tokens=1), "Ready", None, 8192, None))
    assert "cached" not in bar.plain  # an engine that does not report it shows nothing


def ten_turns(eng, thinking=False):
    messages: list[Message] = []
    for turn in range(1, 11):
        messages.append(user_message(turn))
        chunks = list(eng.chat(messages, ChatOptions(temperature=0, max_tokens=6, thinking=thinking)))
        assert chunks[-1].finish_reason in ("stop", "length"), chunks[-1].error
        answer = "".join(c.text for c in chunks)
        if answer:
            messages.append(Message("assistant", answer))
    return messages


@pytest.mark.parametrize("where", ["in-process", "worker"])
def test_continue_of_ten_turns_evaluates_only_the_new_message(tiny_qwen35, tmp_path, where):
    """The state saved beside the conversation is loaded by the next engine: its first turn
    evaluates only the new message; a state made with another context size is ignored."""
    state = tmp_path / "chat.state"
    first = LlamaCppEngine(plan(), tiny_qwen35)
    try:
        messages = ten_turns(first)
        assert first.save_state(state) > 0
    finally:
        first.close()
    messages.append(user_message(11))
    eng = LlamaCppEngine(plan(), tiny_qwen35) if where == "in-process" else WorkerEngine(plan(), tiny_qwen35)
    try:
        assert eng.load_state(state) is None
        final = list(eng.chat(messages, ChatOptions(temperature=0, max_tokens=4)))[-1]
        assert final.finish_reason in ("stop", "length"), final.error
        s = final.stats
        counter = LlamaCppEngine(plan(), tiny_qwen35)
        bound = new_part(counter, messages, True) + SLACK
        counter.close()
        assert s.prompt_tokens <= bound
        assert s.reused_tokens > s.prompt_length * 0.8
    finally:
        eng.close()
    other = LlamaCppEngine(plan(1024), tiny_qwen35)
    try:
        note = other.load_state(state)
        assert note and "context size" in note
    finally:
        other.close()


def test_mlx_saved_state_round_trips(tmp_path_factory):
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import write_tiny_qwen35_moe
    from pocketchat.engines.mlx.engine import MlxEngine

    folder = write_tiny_qwen35_moe(tmp_path_factory.mktemp("mlx") / "hybrid")
    mplan = LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=2048, n_threads=1,
                     n_threads_batch=1)
    state = tmp_path_factory.mktemp("state") / "chat.state"
    eng = MlxEngine(mplan, folder)
    try:
        messages = ten_turns(eng)
        assert eng.save_state(state) > 0
    finally:
        eng.close()
    messages.append(user_message(11))
    eng = MlxEngine(mplan, folder)
    try:
        assert eng.load_state(state) is None
        final = list(eng.chat(messages, ChatOptions(temperature=0, max_tokens=4)))[-1]
        assert final.stats.prompt_tokens <= new_part(eng, messages, True) + SLACK
    finally:
        eng.close()
