"""Drafts in the engine's token loop (`--draft`), on real llama.cpp: greedy answers are token for
token those of the same load without drafts, on the starter (attention: the KV is cut back) and
on the tiny qwen35moe (POCKET's hybrid: the recurrent state is rolled back natively, n_rs_seq);
drafts are verified and some rejected, and the stats count them. In the fast lane, the loop's
draft path over the scripted runtime: text unchanged, and `auto` going quiet when no draft is
ever accepted."""

from __future__ import annotations


import pytest

from pocketchat.engines.llamacpp.engine import LlamaCppEngine
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.types import LoadPlan
from support.tinyqwen35 import write_tiny_qwen35moe

CODE = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}  # value {i}" for i in range(30))
COPY = [Message("user", "Repeat this code exactly, then stop:\n" + CODE)]
GREEDY = ChatOptions(temperature=0, max_tokens=160, thinking=False)


def plan(draft: str, n_ctx: int = 4096) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=2, n_threads_batch=2, flash_attn=True, draft=draft)


def answer(path, draft: str, messages=COPY, options=GREEDY):
    eng = LlamaCppEngine(plan(draft), path)
    try:
        chunks = list(eng.chat(messages, options))
        return "".join(c.text for c in chunks), chunks[-1]
    finally:
        eng.close()


@pytest.mark.slow
def test_greedy_answers_with_drafts_are_those_without_on_the_starter(starter_gguf):
    plain, p_final = answer(starter_gguf, "off")
    drafted, d_final = answer(starter_gguf, "ngram")
    assert drafted == plain
    s = d_final.stats
    assert s.draft_steps > 0 and s.drafted_tokens > s.accepted_tokens > 0  # some kept, some not
    assert s.generated_tokens == p_final.stats.generated_tokens  # rejected drafts not counted
    assert p_final.stats.draft_steps == 0


@pytest.mark.slow
def test_greedy_answers_with_drafts_are_those_without_on_the_hybrid_model(tmp_path):
    path = write_tiny_qwen35moe(tmp_path / "tiny-qwen35moe.gguf", ascii_only=True)
    echo = [Message("user", "abcabcabc abcabcabc " * 6)]
    options = ChatOptions(temperature=0, max_tokens=120, ignore_eos=True)
    plain, _ = answer(path, "off", echo, options)
    drafted, final = answer(path, "ngram", echo, options)
    assert drafted == plain
    assert final.stats.draft_steps > 0 and final.stats.drafted_tokens > 0


@pytest.mark.slow
def test_the_next_turn_after_a_drafted_answer_reuses_the_state(starter_gguf):
    eng = LlamaCppEngine(plan("ngram"), starter_gguf)
    try:
        first = "".join(c.text for c in eng.chat(COPY, GREEDY))
        follow = [*COPY, Message("assistant", first), Message("user", "Thanks.")]
        final = list(eng.chat(follow, ChatOptions(temperature=0, max_tokens=8)))[-1]
        history = eng.history_tokens(follow[:-1], False)
        whole = eng._encode(eng.render(follow, False))
        assert final.stats.prompt_tokens == len(whole) - len(history)
    finally:
        eng.close()


# -- the fast lane: the loop's draft path over the scripted runtime ---------------------------------


def scripted(script: str, mode: str):
    from pocketchat.engines.draft.drafting import Drafting
    from support.script_runtime import END, ScriptEngine

    eng = ScriptEngine(script, n_ctx=2048)
    eng._drafting = Drafting(mode, {END}, depth=6)
    return eng


def test_drafted_steps_write_the_same_text_and_count_what_was_kept():
    script = "the cat sat on the mat; the cat sat on the hat; the cat sat on the mat."
    eng = scripted(script, "ngram")
    chunks = list(eng.chat([Message("user", script[:30])]))
    assert "".join(c.text for c in chunks) == script
    s = chunks[-1].stats
    assert s.draft_steps > 0 and s.accepted_tokens > 0
    assert s.generated_tokens == len(script) + 1  # the end token too; no rejected draft counted
    assert eng.cache.tokens == eng.ops.fed  # what was rolled back is gone from the state too


def test_auto_goes_quiet_when_no_draft_is_ever_accepted():
    script = "".join(chr(0x4E00 + (i * 7919) % 5000) for i in range(400))  # never repeats
    prompt = script[::-1][:60]
    eng = scripted(script, "auto")
    drafting = eng._drafting
    drafting.drafter.propose = lambda k: [ord("#")] * k  # a drafter that is always wrong
    chunks = list(eng.chat([Message("user", prompt)], ChatOptions(max_tokens=300)))
    assert "".join(c.text for c in chunks) == script[:300]
    assert not drafting.policy.enabled
    assert chunks[-1].stats.draft_steps < 40  # of 300 steps: off early, then rare probes
