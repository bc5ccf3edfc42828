"""Rolling back a partly accepted draft on real llama.cpp: POCKET's hybrid architecture (the tiny
`qwen35moe`: natively with n_rs_seq, and by snapshot without it) and the starter (attention
only: the KV cut). The tokens after a rollback are plain greedy decoding's, token for token;
and sampling through the verify rule on the starter's real logits keeps the model's
distribution."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pocketchat.engines.llamacpp.load import new_llama
from pocketchat.engines.llamacpp.rollback import Rollback
from pocketchat.engines.draft.ngram import NgramDrafter
from pocketchat.engines.draft.verify import accept
from pocketchat.errors import EngineError
from support.rawdecode import RawSeq, plain_greedy, speculative_greedy
from support.tinyqwen35 import tiny_qwen35moe  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

N = 32  # tokens generated


def corrupted(reference: list[int], rate: float, seed: int, vocab: int):
    """Drafts from the plain continuation, each token wrong with probability `rate`: partial
    acceptance at every depth."""
    rng = random.Random(seed)

    def draft(tokens: list[int], k: int) -> list[int]:
        out = []
        for t in reference[len(tokens) - prompt_len[0]:][:k]:
            out.append(t if rng.random() >= rate else (t + 1 + rng.randrange(vocab - 1)) % vocab)
        return out

    prompt_len = [0]
    return draft, prompt_len


def run_both(path, prompt, *, n_rs_seq: int, k: int, rate: float):
    llm = new_llama(path, n_ctx=512, n_batch=64, n_ubatch=64, n_threads=2, n_rs_seq=n_rs_seq,
                    flash_attn=True)
    seq = RawSeq(llm)
    try:
        plain = plain_greedy(seq, prompt, N)
        rollback = Rollback(seq.ctx, seq.model)
        draft, plen = corrupted(plain, rate, seed=k, vocab=seq.n_vocab)
        plen[0] = len(prompt)
        spec = speculative_greedy(seq, rollback, prompt, N, draft, k)
        return plain, spec, rollback
    finally:
        seq.close()
        llm.close()


@pytest.mark.parametrize("k", [2, 5, 8])
def test_native_rollback_on_the_hybrid_keeps_greedy_decoding(tiny_qwen35moe, k):
    prompt = list(range(40, 90))
    plain, spec, rollback = run_both(tiny_qwen35moe, prompt, n_rs_seq=8, k=k, rate=0.3)
    assert rollback.kind == "native" and rollback.depth == 8
    # drafts were partly accepted (not all, not none) and rolled back
    partial = [s for s in spec.per_step if 0 < s[1] < s[0]]
    assert partial and spec.accepted < spec.drafted
    assert spec.tokens == plain


def test_without_snapshots_the_hybrid_cannot_roll_back_natively(tiny_qwen35moe):
    """n_rs_seq 0: llama_memory_seq_rm refuses to cut a recurrent state (why the snapshot
    fallback exists)."""
    llm = new_llama(tiny_qwen35moe, n_ctx=256, n_batch=64, n_threads=2)
    seq = RawSeq(llm)
    try:
        seq.decode(list(range(40, 60)))
        seq.decode([1, 2, 3], all_logits=True)
        assert not seq.lib.llama_memory_seq_rm(seq.mem, 0, 21, -1)
        assert Rollback(seq.ctx, seq.model).kind == "snapshot"
    finally:
        seq.close()
        llm.close()


def test_native_rollback_is_bounded_by_n_rs_seq(tiny_qwen35moe):
    llm = new_llama(tiny_qwen35moe, n_ctx=256, n_batch=64, n_threads=2, n_rs_seq=2)
    seq = RawSeq(llm)
    try:
        rollback = Rollback(seq.ctx, seq.model)
        seq.decode(list(range(40, 60)))
        seq.decode([1, 2, 3, 4], all_logits=True)  # positions 20..23
        with pytest.raises(EngineError, match="deeper"):
            rollback.roll_back(21)  # 3 back: more than 2 snapshots
        rollback.roll_back(22)  # 2 back
        assert seq.lib.llama_memory_seq_pos_max(seq.mem, 0) == 21
    finally:
        seq.close()
        llm.close()


def test_snapshot_rollback_on_the_hybrid_keeps_greedy_decoding(tiny_qwen35moe):
    prompt = list(range(40, 90))
    plain, spec, rollback = run_both(tiny_qwen35moe, prompt, n_rs_seq=0, k=4, rate=0.3)
    assert rollback.kind == "snapshot"
    assert any(0 < s[1] < s[0] for s in spec.per_step)
    assert spec.tokens == plain


@pytest.mark.parametrize("k", [3, 8])
def test_kv_rollback_on_the_starter_keeps_greedy_decoding(starter_gguf, k):
    llm = new_llama(starter_gguf, n_ctx=512, n_batch=64, n_threads=2)
    prompt = llm.tokenize(b"The capital of France is Paris. The capital of Italy is")
    llm.close()
    plain, spec, rollback = run_both(starter_gguf, prompt, n_rs_seq=8, k=k, rate=0.3)
    assert rollback.kind == "kv"
    assert any(0 < s[1] < s[0] for s in spec.per_step)
    assert spec.tokens == plain


def test_ngram_drafts_on_the_starter_copy_text_and_keep_greedy_decoding(starter_gguf):
    """Real drafts on a copying task: accepted often, output unchanged."""
    llm = new_llama(starter_gguf, n_ctx=1024, n_batch=256, n_threads=2, flash_attn=True)
    text = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n")
    chat = ("<|im_start|>user\nRepeat this code exactly, then stop:\n" + text
            + "<|im_end|>\n<|im_start|>assistant\n")
    prompt = llm.tokenize(chat.encode(), special=True)
    seq = RawSeq(llm)
    try:
        plain = plain_greedy(seq, prompt, 40)
        drafter = NgramDrafter()

        def draft(tokens, k):
            drafter.reset(tokens)
            return drafter.propose(k)

        spec = speculative_greedy(seq, Rollback(seq.ctx, seq.model), prompt, 40, draft, 6)
    finally:
        seq.close()
        llm.close()
    assert spec.tokens == plain
    assert spec.accepted >= 10
    assert spec.steps < 40


def test_a_batch_gives_the_logits_of_one_token_decodes_with_flash_attention(starter_gguf):
    """What greedy equality rests on: with flash attention the logits of a verification batch
    are bit for bit those of decoding its tokens one at a time, here (a short context).
    Without flash attention, llama.cpp 0.3.36's CPU attention for one token and for several
    differ by up to ~1 logit on the starter and a near tie flipped at token 16; with it, the
    same happens past ~300 tokens of context on 2 threads (one-token attention splits the KV
    over the threads), never on 1 thread: measured, see benchmarks/bench_draft.py."""
    llm = new_llama(starter_gguf, n_ctx=512, n_batch=64, n_threads=2, flash_attn=True)
    seq = RawSeq(llm)
    try:
        prompt = llm.tokenize(b"The capital of France is Paris. The capital of Italy is")
        tokens = plain_greedy(seq, prompt, 24)
        seq.clear()
        seq.decode(prompt)
        single = [seq.logits(-1).copy()]
        for t in tokens[:-1]:
            seq.decode([t])
            single.append(seq.logits(-1).copy())
        seq.clear()
        seq.decode(prompt)
        batched = [seq.logits(-1).copy()]
        for i in range(0, len(tokens) - 1, 5):
            part = tokens[i:min(i + 5, len(tokens) - 1)]
            seq.decode(part, all_logits=True)
            batched += [seq.logits(j).copy() for j in range(len(part))]
        assert len(batched) == len(single)
        assert max(float(np.abs(a - b).max()) for a, b in zip(single, batched, strict=False)) == 0.0
    finally:
        seq.close()
        llm.close()


def _sampler(lib, seed: int):
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(40))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(1.0))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed))
    return chain


def test_verify_on_the_starters_real_logits_keeps_the_sampled_distribution(starter_gguf):
    """At a few positions of a real text: the joint law of (first token, second token when the
    first is the draft) under llama.cpp's sampler chain, plain (one decode per token) against
    speculative (one batch with the draft, the verify rule), by a chi-square test."""
    from test_draft import same_distribution

    llm = new_llama(starter_gguf, n_ctx=512, n_batch=64, n_threads=2)
    seq = RawSeq(llm)
    lib = seq.lib
    try:
        for j, text in enumerate([b"Once upon a time", b"The weather today is",
                                  b"def add(a, b):\n   "]):
            prompt = llm.tokenize(text)
            n = 3000
            # plain: sample the first token from the prompt's logits ...
            seq.clear()
            seq.decode(prompt)
            smpl = _sampler(lib, 100 + j)
            first = [lib.llama_sampler_sample(smpl, seq.ctx, -1) for _ in range(n)]
            d0 = max(set(first), key=first.count)  # the draft: the likeliest first token
            # ... and the second after the draft, from its own decode
            seq.decode([d0])
            hits = first.count(d0)
            second = iter([lib.llama_sampler_sample(smpl, seq.ctx, -1) for _ in range(hits)])
            plain = [(y, next(second) if y == d0 else None) for y in first]
            lib.llama_sampler_free(smpl)
            # speculative: one batch [prompt..., d0] with logits at the last two positions
            seq.clear()
            seq.decode(prompt[:-1])
            seq.decode([prompt[-1], d0], all_logits=True)
            smpl = _sampler(lib, 200 + j)
            spec = []
            for _ in range(n):
                v = accept([d0], lambda i: lib.llama_sampler_sample(smpl, seq.ctx, i))  # noqa: B023
                spec.append((v.tokens[0], v.tokens[1] if v.accepted else None))
            lib.llama_sampler_free(smpl)
            assert 0.05 < first.count(d0) / n < 0.95, "pick a text whose first token is uncertain"
            assert same_distribution(plain, spec), text
    finally:
        seq.close()
        llm.close()
