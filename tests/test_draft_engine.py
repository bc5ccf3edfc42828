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
from support.tinyqwen35 import tiny_qwen35moe, write_tiny_qwen35moe  # noqa: F401 - a fixture
from support.script_runtime import STEP_SECONDS

CODE = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}  # value {i}" for i in range(30))
COPY = [Message("user", "Repeat this code exactly, then stop:\n" + CODE)]
GREEDY = ChatOptions(temperature=0, max_tokens=160, thinking=False)


def plan(draft: str, n_ctx: int = 4096) -> LoadPlan:
    # threads pinned: on a busy machine the count would follow it, and a step's sums (hence a
    # near tie between two tokens) would change with it between the two loads compared
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=2, n_threads_batch=2, flash_attn=True, draft=draft,
                    threads_pinned=True)


def answer(path, draft: str, messages=COPY, options=GREEDY):
    eng = LlamaCppEngine(plan(draft), path)
    try:
        chunks = list(eng.chat(messages, options))
        return "".join(c.text for c in chunks), chunks[-1]
    finally:
        eng.close()


@pytest.mark.slow
def test_greedy_answers_with_drafts_are_those_without_on_the_starter(starter_gguf):
    # the first 40 tokens: further on the 135M model copies its own slips ("x * 4 + 5"), where
    # two tokens tie so closely that a verified batch's sums (not one token's) may pick the
    # other one on some CPUs (an AMD EPYC with AVX-512 did)
    short = ChatOptions(temperature=0, max_tokens=40, thinking=False)
    plain, p_final = answer(starter_gguf, "off", options=short)
    drafted, d_final = answer(starter_gguf, "ngram", options=short)
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


def scripted(script: str, mode: str, *drafters):
    from pocketchat.engines.draft.drafting import Drafting
    from support.script_runtime import END, ScriptEngine

    eng = ScriptEngine(script, n_ctx=2048)
    eng._drafting = Drafting(mode, {END}, depth=6, drafters=drafters, clock=eng.clock)
    for drafter in drafters:  # a costly drafter's drafting takes the modelled clock's time
        if isinstance(drafter, CostlyDrafter):
            drafter.engine = eng
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
    drafting.sources[0].drafter.propose = lambda k: [ord("#")] * k  # a drafter that is always wrong
    chunks = list(eng.chat([Message("user", prompt)], ChatOptions(max_tokens=300)))
    assert "".join(c.text for c in chunks) == script[:300]
    assert not drafting.sources[0].policy.enabled
    assert chunks[-1].stats.draft_steps < 40  # of 300 steps: off early, then rare probes


class CostlyDrafter:
    """A drafter that costs a decode per token (as the MTP head: a fifth of a step each, on the
    script engine's modelled clock): it records each k asked."""

    costly = True
    SECONDS = 0.2 * STEP_SECONDS

    def __init__(self, guess):
        self.tokens: list[int] = []
        self.asked: list[int] = []
        self.guess = guess
        self.engine = None  # the script engine whose clock its drafting takes time from

    def reset(self, tokens):
        self.tokens = list(tokens)

    def extend(self, tokens):
        self.tokens.extend(tokens)

    def propose(self, k):
        self.asked.append(k)
        if self.engine is not None:
            self.engine.charge(k * self.SECONDS)
        return self.guess(self.tokens, k)


def test_auto_asks_a_costly_drafter_only_for_the_tokens_it_verifies_and_probes_while_off():
    """Alone (as `--draft auto` would run a head with no lookup match): k is chosen before the
    drafter is asked, and once off, only the policy's rare probes ask it."""
    script = "".join(chr(0x4E00 + (i * 7919) % 5000) for i in range(400))
    drafter = CostlyDrafter(lambda seq, k: [ord("#")] * k)  # always wrong
    eng = scripted(script, "auto", drafter)
    chunks = list(eng.chat([Message("user", script[::-1][:60])], ChatOptions(max_tokens=300)))
    assert "".join(c.text for c in chunks) == script[:300]
    assert not eng._drafting.sources[0].policy.enabled
    s = chunks[-1].stats
    assert s.drafted_tokens == sum(drafter.asked)  # every token drafted was verified
    assert len(drafter.asked) < 40  # off early: then only the policy's probes draft at all


def test_a_costly_drafter_that_is_right_is_kept_and_the_text_is_the_same():
    script = "".join(chr(0x4E00 + (i * 7919) % 5000) for i in range(300))
    prompt = [Message("user", "go")]
    n_prompt = [0]

    def oracle(seq, k):  # the script's own next tokens after the one being fed
        at = len(seq) - n_prompt[0]
        return [ord(c) for c in script[at:at + k]]

    eng = scripted(script, "mtp", CostlyDrafter(oracle))
    n_prompt[0] = len(eng._encode(eng.render(prompt, True)))
    chunks = list(eng.chat(prompt, ChatOptions(max_tokens=200)))
    assert "".join(c.text for c in chunks) == script[:200]
    s = chunks[-1].stats
    assert s.accepted_tokens > 0.9 * s.drafted_tokens > 0


# -- MTP drafts: the draft head a Qwen3.5-family GGUF carries ------------------------------------


@pytest.fixture(scope="module")
def tiny_mtp(tmp_path_factory):
    """The tiny qwen35moe with one MTP block (as llama.cpp's converter writes Qwen3.5's)."""
    return write_tiny_qwen35moe(tmp_path_factory.mktemp("mtp") / "tiny-qwen35moe-mtp.gguf",
                                ascii_only=True, mtp=1)


ECHO = [Message("user", "abcabcabc abcabcabc " * 6)]
LONG = ChatOptions(temperature=0, max_tokens=120, ignore_eos=True)


@pytest.mark.slow
def test_greedy_answers_with_mtp_drafts_are_those_without(tiny_mtp):
    plain, _ = answer(tiny_mtp, "off", ECHO, LONG)
    for mode in ("mtp", "auto"):
        drafted, final = answer(tiny_mtp, mode, ECHO, LONG)
        assert drafted == plain, mode
        assert final.stats.draft_steps > 0 and final.stats.drafted_tokens > 0, mode


@pytest.mark.slow
def test_auto_drafts_with_the_mtp_head_where_the_model_carries_one(tiny_mtp, tiny_qwen35moe):
    with_head = LlamaCppEngine(plan("auto"), tiny_mtp)
    without = LlamaCppEngine(plan("auto"), tiny_qwen35moe)
    try:
        # prompt lookup first (free), the head where lookup has nothing that pays
        assert [s.costly for s in with_head._drafting.sources] == [False, True]
        assert with_head._mtp is not None
        assert [s.costly for s in without._drafting.sources] == [False] and without._mtp is None
    finally:
        with_head.close()
        without.close()


@pytest.mark.slow
def test_the_mtp_head_follows_the_target_through_rejected_drafts(tiny_mtp):
    """After an answer whose drafts were mostly rejected (random weights), the head drafts
    what a head that read the same tokens in one prompt drafts: its KV and the target's state
    it starts from were cut back with every rollback."""
    import numpy as np

    a = LlamaCppEngine(plan("mtp"), tiny_mtp)
    b = LlamaCppEngine(plan("mtp"), tiny_mtp)
    try:
        final = list(a.chat(ECHO, LONG))[-1]
        assert final.stats.drafted_tokens > final.stats.accepted_tokens + 50  # many rollbacks
        held = list(a.cache.tokens)
        assert a._mtp.next == len(held)
        b.feed(held)
        assert b._mtp.next == len(held)
        assert np.allclose(a._mtp._pending, b._mtp._pending, atol=1e-2)
        assert a._mtp.draft(held[-1], len(held), 4) == b._mtp.draft(held[-1], len(held), 4)
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_draft_mtp_on_a_model_without_the_head_says_what_to_do(tiny_qwen35moe):
    from pocketchat.errors import EngineError

    with pytest.raises(EngineError, match=r"no MTP block.*--draft ngram or auto"):
        LlamaCppEngine(plan("mtp"), tiny_qwen35moe)


@pytest.mark.slow
def test_the_cli_answers_with_mtp_drafts_and_says_what_to_do_without_the_head(tiny_mtp, tiny_qwen35moe):
    import subprocess
    import sys

    def run(path):
        return subprocess.run([sys.executable, "-m", "pocketchat", "-p", "Say hi.", "--model",
                               str(path), "--draft", "mtp", "--offline"],
                              capture_output=True, text=True, timeout=300)

    ok = run(tiny_mtp)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip()  # an answer
    refused = run(tiny_qwen35moe)
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "error: --draft mtp: this GGUF has no MTP block; use --draft ngram or auto"]


def test_auto_takes_lookup_drafts_first_and_the_costly_drafter_where_lookup_has_none():
    """The chat's `auto` with an MTP head: a repeat is drafted by prompt lookup (free); where
    the text has no earlier match the head drafts; each keeps its own acceptance."""
    from pocketchat.engines.draft.ngram import NgramDrafter

    unique = "".join(chr(0x4E00 + (i * 7919) % 5000) for i in range(120))
    script = unique + unique  # the second half repeats the first: lookup finds it
    prompt = [Message("user", "go")]
    n_prompt = [0]

    def oracle(seq, k):
        at = len(seq) - n_prompt[0]
        return [ord(c) for c in script[at:at + k]]

    head = CostlyDrafter(oracle)
    eng = scripted(script, "auto", NgramDrafter(), head)
    n_prompt[0] = len(eng._encode(eng.render(prompt, True)))
    lookup_steps = []
    real = eng._drafting._from

    def spy(src, seq, limit):
        out = real(src, seq, limit)
        if out and not src.costly:
            lookup_steps.append(len(seq) - n_prompt[0])
        return out

    eng._drafting._from = spy
    chunks = list(eng.chat(prompt, ChatOptions(max_tokens=240)))
    assert "".join(c.text for c in chunks) == script[:240]
    assert head.asked and min(lookup_steps) >= 120  # lookup only once the text repeats
    assert len(head.asked) > 10  # the head drafted the first half
    ngram, mtp = eng._drafting.sources
    assert ngram.policy.acceptance.observed > 0 and mtp.policy.acceptance.observed > 0


@pytest.mark.slow
def test_a_paused_head_decodes_nothing_and_catches_up_from_its_last_positions(tiny_mtp):
    """While `auto` has MTP drafts off the head rests (following costs a few percent of each
    step); asked to draft again, it refills its KV from the last positions it kept."""
    from pocketchat.engines.llamacpp.mtp import RING

    eng = LlamaCppEngine(plan("mtp"), tiny_mtp)
    try:
        head = eng._mtp
        first = eng._encode("abc " * 40)
        eng.feed(first)
        assert head.next == len(first)
        head.follow(False)
        more = eng._encode("xyz " * 40)
        for i in range(0, len(more), 7):  # prompt pieces and single tokens alike
            eng.feed(more[i:i + 7])
        n = len(first) + len(more)
        assert head.next == len(first) and head.steps == 0  # nothing decoded while paused
        drafts = head.draft(more[-1], n, 3)
        assert len(drafts) == 3 and head.catch_ups == 1
        assert head.next == n  # its KV holds the kept positions again (the drafts removed)
        mem = eng._lib.llama_get_memory(head.ctx)
        assert eng._lib.llama_memory_seq_pos_min(mem, 0) == n - RING
        head.follow(True)
        eng.feed([more[-1]])
        assert head.next == n + 1  # following again from there
        head.follow(False)
        eng.feed(more[:20])
        head.follow(True)  # resumed by the policy: the next decode catches it up first
        eng.feed(more[20:21])
        assert head.next == n + 22 and head.catch_ups == 2
        assert eng._lib.llama_memory_seq_pos_min(mem, 0) == n + 21 - RING
    finally:
        eng.close()
