"""The Engine contract, run against every engine in engine_makers.MAKERS on a real model."""

from __future__ import annotations

import threading
import time

import pytest

from support.engine_makers import MAKERS
from pocketchat.engines.types import ChatOptions, Engine, Message

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

N_CTX = 512
QUESTION = [Message("user", "Write a story about a dragon who learns to bake bread.")]


@pytest.fixture(scope="module", params=MAKERS)
def engine(request):
    eng = request.param(N_CTX)
    yield eng
    eng.close()


_counter = iter(range(10**6))


def fresh() -> list[Message]:
    """A question no earlier test asked, so nothing of it is in the KV cache."""
    return [Message("user", f"Question {next(_counter)}: write a story about a dragon who bakes.")]


def collect(chunks):
    chunks = list(chunks)
    assert chunks, "no chunks at all"
    assert all(c.finish_reason is None for c in chunks[:-1]), "finish_reason before the end"
    return chunks, chunks[-1]


def test_is_an_engine(engine):
    assert isinstance(engine, Engine)
    assert engine.info.n_ctx == N_CTX
    assert engine.info.backend and engine.info.model


def test_text_streams_in_several_chunks(engine):
    chunks, final = collect(engine.chat(QUESTION, ChatOptions(max_tokens=24, ignore_eos=True, seed=3)))
    assert final.finish_reason == "length"
    text = "".join(c.text for c in chunks)
    assert len(text.strip()) > 10
    assert sum(1 for c in chunks if c.text) >= 2, "the answer arrived in one piece, not streamed"


def test_stats_are_positive_and_consistent(engine):
    started = time.perf_counter()
    chunks, final = collect(engine.chat(fresh(), ChatOptions(max_tokens=16, ignore_eos=True)))
    wall = time.perf_counter() - started
    s = final.stats
    assert s.generated_tokens == 16  # every token of the answer, counted by the runtime
    assert s.prompt_tokens > 5 and s.prompt_seconds > 0  # part of the template prefix may be cached
    assert s.decode_seconds > 0
    assert s.decode_tok_s == pytest.approx(s.generated_tokens / s.decode_seconds)
    assert s.prompt_tok_s == pytest.approx(s.prompt_tokens / s.prompt_seconds)
    assert s.ttft_seconds is not None and 0 < s.ttft_seconds < wall
    assert s.prompt_seconds + s.decode_seconds <= wall + 0.05  # counters, not invented
    assert s.context_limit == N_CTX
    assert s.prompt_tokens + s.generated_tokens - 1 <= s.context_used <= N_CTX
    assert s.dropped_messages == 0
    # figures in the middle of the answer never run ahead of the final ones
    for c in chunks[:-1]:
        assert c.stats.generated_tokens <= s.generated_tokens


def test_stop_when_the_model_ends(engine):
    _, final = collect(engine.chat([Message("user", "Say only: yes")], ChatOptions(max_tokens=64, seed=1)))
    assert final.finish_reason in ("stop", "length")


def test_cancel_stops_mid_answer_within_200ms(engine):
    options = ChatOptions(max_tokens=400, ignore_eos=True)
    seen, cancelled_at = [], []
    for chunk in engine.chat(QUESTION, options):
        seen.append(chunk)
        if len(seen) == 2 and not cancelled_at:
            t = threading.Thread(target=lambda: (cancelled_at.append(time.perf_counter()), engine.cancel()))
            t.start()
            t.join()
        if chunk.finish_reason:
            ended = time.perf_counter()
    final = seen[-1]
    assert final.finish_reason == "cancelled"
    assert ended - cancelled_at[0] < 0.2
    assert 0 < final.stats.generated_tokens < 400


def test_cancel_with_nothing_in_flight_does_not_cancel_the_next_answer(engine):
    engine.cancel()
    _, final = collect(engine.chat(QUESTION, ChatOptions(max_tokens=8, ignore_eos=True)))
    assert final.finish_reason == "length"


def test_conversation_longer_than_the_context_keeps_working(engine):
    history = [Message("system", "You are terse.")]
    for i in range(40):
        history += [Message("user", f"Fact number {i}: the {i}th river is long and wide and deep."),
                    Message("assistant", f"Noted fact {i}, the river is long, wide and deep.")]
    history.append(Message("user", "Which facts do you remember?"))
    before = list(history)
    _, final = collect(engine.chat(history, ChatOptions(max_tokens=16)))
    assert final.finish_reason in ("stop", "length"), final.error
    assert final.stats.dropped_messages > 0
    assert final.stats.dropped_messages % 2 == 0  # whole turns
    assert final.stats.context_used <= N_CTX
    assert history == before  # the caller's list is untouched


def test_a_message_too_long_for_the_context_is_a_clear_error_not_a_crash(engine):
    huge = [Message("user", "word " * 3000)]
    _, final = collect(engine.chat(huge, ChatOptions(max_tokens=8)))
    assert final.finish_reason == "error"
    assert "context" in final.error and "tokens" in final.error
    _, after = collect(engine.chat(QUESTION, ChatOptions(max_tokens=4, ignore_eos=True)))
    assert after.finish_reason == "length"


def test_thinking_off_and_overrides_are_accepted(engine):
    _, final = collect(engine.chat(QUESTION, ChatOptions(max_tokens=6, thinking=False, temperature=0.0,
                                                         top_p=1.0, top_k=1, ignore_eos=True)))
    assert final.finish_reason == "length"


def test_same_seed_same_answer(engine):
    opts = ChatOptions(max_tokens=12, seed=42, temperature=0.9, ignore_eos=True)
    a = "".join(c.text for c in engine.chat(QUESTION, opts))
    b = "".join(c.text for c in engine.chat(QUESTION, opts))
    assert a == b


def test_second_turn_reuses_the_cached_prefix(engine):
    first = [Message("user", "Name three colours of the rainbow, please, and say why you like them.")]
    chunks, final = collect(engine.chat(first, ChatOptions(max_tokens=8, ignore_eos=True)))
    answer = "".join(c.text for c in chunks)
    follow = first + [Message("assistant", answer), Message("user", "And one more?")]
    _, final2 = collect(engine.chat(follow, ChatOptions(max_tokens=4, ignore_eos=True)))
    # only the new part of the prompt was evaluated
    assert final2.stats.prompt_tokens < final.stats.prompt_tokens
    assert final2.stats.context_used > final.stats.context_used
