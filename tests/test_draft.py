"""Speculative decoding's standalone parts: prompt-lookup drafts, the acceptance rule (it keeps
the model's distribution), and the policy that drafts only while it pays."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pocketchat.engines.draft.ngram import Drafter, NgramDrafter
from pocketchat.engines.draft.policy import (Acceptance, CostCurve, CostLearner, CostStore,
                                             DraftPolicy, best_k, expected_tokens, speedup)
from pocketchat.engines.draft.verify import Verdict, accept


# -- n-gram drafts --------------------------------------------------------------------------------

def naive_propose(seq: list[int], k: int, n_max: int = 3, n_min: int = 1) -> list[int]:
    """The definition, by rescanning: the latest earlier occurrence of the longest tail."""
    for n in range(min(n_max, len(seq) - 1), n_min - 1, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start:start + n] == tail:
                return seq[start + n:start + n + k]
    return []


def test_ngram_proposes_what_followed_the_latest_longest_match():
    d = NgramDrafter(n_max=3)
    assert isinstance(d, Drafter)
    # "1 2 3 4 5 ... 9 2 3 7 8 ... 1 2 3" -> the 3-gram "1 2 3" at the start wins over "2 3 7"
    d.reset([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3])
    assert d.propose(2) == [4, 5]
    assert d.last_match == 3
    d.extend([6])  # "3 6" never seen; "6" never seen: nothing
    assert d.propose(4) == []
    d.extend([2, 3])  # "6 2 3" unseen; "2 3" last seen before the 6
    assert d.propose(1) == [6]


def test_ngram_matches_the_rescanning_definition_on_random_text():
    rng = random.Random(5)
    for trial in range(30):
        seq = [rng.randrange(6) for _ in range(rng.randrange(2, 120))]
        d = NgramDrafter(n_max=3)
        d.reset(seq[:1])
        for t in seq[1:]:
            d.extend([t])
        k = rng.randrange(1, 9)
        want = naive_propose(seq, k)
        got = d.propose(k)
        # the drafter continues a repeat that runs into the present; the definition stops there
        assert got[:len(want)] == want, (trial, seq)
        if len(want) == k:
            assert got == want


def test_ngram_continues_a_repeating_pattern_to_k_tokens():
    d = NgramDrafter()
    d.reset([7, 1, 2, 1, 2, 1, 2])
    assert d.propose(5) == [1, 2, 1, 2, 1]


def test_ngram_reuses_a_copied_passage_token_for_token():
    # an edit task: the answer copies the input; once the copy starts, drafts are the input
    source = list(range(100, 160))
    d = NgramDrafter()
    d.reset([1, 2] + source + [3, 4])
    answer = source[:5]
    d.extend(answer)
    assert d.propose(8) == source[5:13]


def test_ngram_index_is_incremental_not_a_rescan():
    # 200k tokens indexed in well under the time a rescan per token would take (~n^2)
    import time

    d = NgramDrafter()
    rng = random.Random(0)
    t0 = time.perf_counter()
    d.reset([rng.randrange(50000) for _ in range(200_000)])
    for _ in range(2000):
        d.propose(8)
        d.extend([rng.randrange(50000)])
    assert time.perf_counter() - t0 < 20  # a rescan per token: 2000 x 200k x 3 compares


class CountingTokens(list):
    """A context that counts the tokens read out of it (by index, slice or iteration)."""

    read = 0

    def __getitem__(self, i):
        out = super().__getitem__(i)
        CountingTokens.read += len(out) if isinstance(i, slice) else 1
        return out

    def __iter__(self):
        CountingTokens.read += len(self)
        return super().__iter__()


def test_a_drafted_answer_reads_a_few_tokens_of_a_long_context_per_step_not_all_of_it():
    """The token loop's drafting step over a long conversation: what it reads of the context
    does not grow with the context (a copy of it per token would read all of it each time)."""
    from support.script_runtime import END, ScriptEngine

    from pocketchat.engines.draft.drafting import Drafting
    from pocketchat.engines.types import ChatOptions, Message

    script = "the cat sat on the mat; " * 8
    eng = ScriptEngine(script, n_ctx=8192)
    eng._drafting = Drafting("ngram", {END}, depth=4, clock=eng.clock)
    prompt = "".join(chr(0x4E00 + (i * 7919) % 5000) for i in range(4000))  # 4,000 tokens
    first = "".join(c.text for c in eng.chat([Message("user", prompt)], ChatOptions(max_tokens=150)))
    assert first == script[:150]
    eng.cache.tokens = context = CountingTokens(eng.cache.tokens)  # the next turn's context
    CountingTokens.read = 0
    chunks = list(eng.chat([Message("user", prompt), Message("assistant", first),
                            Message("user", "again")], ChatOptions(max_tokens=150)))
    assert eng.cache.tokens is context and len(context) > 4000  # the turn went on from it
    assert chunks[-1].stats.generated_tokens == 150 and chunks[-1].stats.draft_steps > 0
    # the turn compares its prompt with the context, once or twice; a read of the whole context
    # per token would be 150 of them
    assert CountingTokens.read < 3 * len(context)


@pytest.mark.parametrize("head,tail", [([], []), ([1, 2, 3], []), ([], [4]), ([1, 2, 3], [4, 5])])
def test_a_joined_sequence_reads_as_the_two_lists_one_after_the_other(head, tail):
    from pocketchat.engines.draft.drafting import Joined

    whole, joined = head + tail, Joined(head, tail)
    assert len(joined) == len(whole) and list(joined) == whole
    for a in range(-7, 8):
        for b in range(-7, 8):
            assert joined[a:b] == whole[a:b] and joined[a:b:-1] == whole[a:b:-1]
        if -len(whole) <= a < len(whole):
            assert joined[a] == whole[a]
        else:
            with pytest.raises(IndexError):
                joined[a]


def test_ngram_rejects_bad_bounds():
    with pytest.raises(ValueError):
        NgramDrafter(n_max=1, n_min=2)


# -- the acceptance rule --------------------------------------------------------------------------

def test_accept_keeps_agreeing_drafts_and_takes_the_first_disagreement():
    target = [5, 6, 9, 8, 1]
    v = accept([5, 6, 7, 8], lambda i: target[i])
    assert (v.accepted, v.tokens, v.drafted, v.rejected) == (2, [5, 6, 9], 4, 2)
    v = accept([5, 6, 9, 8], lambda i: target[i])
    assert (v.accepted, v.tokens, v.rejected) == (4, [5, 6, 9, 8, 1], 0)  # all: a bonus token
    v = accept([], lambda i: target[i])
    assert (v.accepted, v.tokens) == (0, [5])


def test_accept_samples_lazily_in_order():
    seen = []
    accept([1, 2, 3], lambda i: seen.append(i) or [1, 0, 0, 0][i])
    assert seen == [0, 1]  # position 2 is never sampled once 1 disagreed


# A small fixed "model": p(next | previous token) over 5 tokens, and drafters of every quality.
P = np.array([[0.50, 0.20, 0.15, 0.10, 0.05],
              [0.05, 0.60, 0.05, 0.25, 0.05],
              [0.30, 0.30, 0.10, 0.20, 0.10],
              [0.02, 0.03, 0.05, 0.10, 0.80],
              [0.25, 0.25, 0.25, 0.15, 0.10]])
LENGTH = 3


def plain_sequences(n: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    out = []
    for _ in range(n):
        prev, seq = 0, []
        for _ in range(LENGTH):
            prev = int(rng.choice(5, p=P[prev]))
            seq.append(prev)
        out.append(tuple(seq))
    return out


def speculative_sequences(n: int, rng: np.random.Generator, draft_of, rule=accept):
    out = []
    for _ in range(n):
        seq: list[int] = []
        while len(seq) < LENGTH:
            prev = seq[-1] if seq else 0
            draft = draft_of(prev, LENGTH - len(seq))
            context = [prev] + draft

            def sample_at(i: int) -> int:
                return int(rng.choice(5, p=P[context[i]]))  # noqa: B023 - used at once

            seq.extend(rule(draft, sample_at).tokens)
        out.append(tuple(seq[:LENGTH]))
    return out


def chi_square(a: list, b: list) -> tuple[float, int]:
    """Two-sample chi-square homogeneity statistic over the outcomes, and its degrees of freedom
    (outcomes seen fewer than 10 times in both samples are pooled into one)."""
    keys = sorted(set(a) | set(b))
    ca = {k: 0 for k in keys}
    cb = dict(ca)
    for x in a:
        ca[x] += 1
    for x in b:
        cb[x] += 1
    cells, rest = [], [0, 0]
    for k in keys:
        if ca[k] + cb[k] < 20:
            rest[0] += ca[k]
            rest[1] += cb[k]
        else:
            cells.append((ca[k], cb[k]))
    if sum(rest):
        cells.append(tuple(rest))
    na, nb = len(a), len(b)
    stat = 0.0
    for x, y in cells:
        tot = x + y
        ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    return stat, len(cells) - 1


def chi2_quantile_999(df: int) -> float:
    """The 0.999 quantile of chi-square(df) (Wilson-Hilferty; within 1% for df >= 3)."""
    z = 3.0902
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def same_distribution(a, b) -> bool:
    stat, df = chi_square(a, b)
    return stat < chi2_quantile_999(df)


DRAFTERS = {
    "greedy chain": lambda prev, k: _greedy(prev, k),
    "least likely chain": lambda prev, k: _worst(prev, k),
    "fixed": lambda prev, k: [3, 4, 0][:k],
}


def _greedy(prev: int, k: int) -> list[int]:
    out = []
    for _ in range(k):
        prev = int(np.argmax(P[prev]))
        out.append(prev)
    return out


def _worst(prev: int, k: int) -> list[int]:
    out = []
    for _ in range(k):
        prev = int(np.argmin(P[prev]))
        out.append(prev)
    return out


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_the_rule_keeps_the_model_distribution(name):
    rng = np.random.default_rng(11)
    n = 20000
    plain = plain_sequences(n, rng)
    spec = speculative_sequences(n, rng, DRAFTERS[name])
    assert same_distribution(plain, spec), chi_square(plain, spec)
    # and the total variation of each position's token is within sampling noise (~0.005)
    for pos in range(LENGTH):
        a = np.bincount([s[pos] for s in plain], minlength=5) / n
        b = np.bincount([s[pos] for s in spec], minlength=5) / n
        assert 0.5 * np.abs(a - b).sum() < 0.02


def test_the_check_catches_a_rule_that_biases_the_output():
    """The distribution test can fail: a rule that gives each draft a second chance (it is
    accepted when either of two samples agrees, raising the acceptance) changes the output."""

    def biased(draft, sample_at):
        out = []
        for i, d in enumerate(draft):
            y = sample_at(i)
            if y == d or sample_at(i) == d:
                out.append(d)
                continue
            out.append(y)
            return Verdict(i, out, len(draft))
        out.append(sample_at(len(draft)))
        return Verdict(len(draft), out, len(draft))

    rng = np.random.default_rng(3)
    plain = plain_sequences(20000, rng)
    spec = speculative_sequences(20000, rng, DRAFTERS["fixed"], rule=biased)
    assert not same_distribution(plain, spec)


# -- the policy -----------------------------------------------------------------------------------

def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


@pytest.mark.parametrize("a, slope, want_k", [
    (0.95, 0.05, 8),   # cheap verification, high acceptance: the longest draft
    (0.80, 0.20, 4),   # moderate: a few tokens
    (0.30, 0.50, 0),   # expensive and rarely right: none
    (0.0, 0.01, 0),    # never right: none, however cheap
])
def test_best_k_from_hand_made_cost_curves(a, slope, want_k):
    curve = CostCurve.linear(0.1, slope)
    k, gain = best_k(a, curve)
    assert k == want_k
    if want_k:
        assert gain == pytest.approx(max(speedup(a, j, curve) for j in range(1, 9)))
        assert gain > 1.0


def test_best_k_on_a_saturating_moe_curve():
    # a MoE: the dense part read once, the experts' union grows then saturates
    curve = CostCurve((1.0, 1.3, 1.5, 1.65, 1.75, 1.85, 1.95, 2.05, 2.15))
    assert best_k(0.9, curve)[0] == 8
    assert best_k(0.5, curve)[0] == 2
    assert best_k(0.2, curve)[0] == 0


def _policy(slope: float, **kw) -> DraftPolicy:
    costs = CostLearner()
    for k in range(9):
        for _ in range(3):
            costs.add(k, 0.1 * (1 + slope * k))
    return DraftPolicy(costs, **kw)


def test_a_stream_where_nothing_is_accepted_switches_off_within_a_few_steps():
    policy = _policy(0.15)
    steps = 0
    while policy.enabled:
        k = policy.choose(8)
        assert k > 0
        policy.record(k, 0, 0.1 * (1 + 0.15 * k))
        steps += 1
        assert steps <= 10, "still drafting after 10 steps that accepted nothing"
    # then mostly plain: at most a few probes in the next 2,000 steps
    probes = 0
    for _ in range(2000):
        k = policy.choose(8)
        if k:
            probes += 1
            policy.record(k, 0, 0.1 * (1 + 0.15 * k))
        else:
            policy.record(0, 0, 0.1)
    assert not policy.enabled
    assert 1 <= probes <= 8  # 64, 128, 256, 512, 1024, 1024 ... steps apart


def test_a_stream_that_is_mostly_accepted_stays_on_with_a_long_draft():
    policy = _policy(0.1)
    rng = random.Random(1)
    ks = []
    for _ in range(200):
        k = policy.choose(8)
        accepted = 0
        while accepted < k and rng.random() < 0.9:
            accepted += 1
        policy.record(k, accepted, 0.1 * (1 + 0.1 * k))
        ks.append(k)
    assert policy.enabled and policy.switches == 0
    assert min(ks[20:]) >= 3
    assert sorted(ks[20:])[len(ks[20:]) // 2] >= 7  # the median step drafts 7 or 8


def test_shadow_drafts_turn_it_back_on_without_paying_for_probes():
    policy = _policy(0.15)
    for _ in range(12):
        policy.record(policy.choose(8) or 1, 0, 0.115)
    assert not policy.enabled
    # the text turns repetitive: the drafts that were not verified turn out right
    for _ in range(10):
        assert policy.choose(8) == 0 or policy.enabled
        policy.shadow([1, 2, 3, 4], [1, 2, 3, 4])
        policy.record(0, 0, 0.1)
    assert policy.enabled
    assert policy.choose(8) > 0


def test_cost_learner_fills_unmeasured_k_from_a_line_through_the_measured():
    costs = CostLearner()
    assert costs.curve() is None
    for _ in range(5):
        costs.add(0, 0.10)
        costs.add(2, 0.14)
    curve = costs.curve()
    assert curve.seconds[0] == pytest.approx(0.10)
    assert curve.seconds[2] == pytest.approx(0.14)
    assert curve.seconds[4] == pytest.approx(0.18)  # 1 + 0.2 k
    assert curve.seconds[8] == pytest.approx(0.26)


def test_cost_figures_are_kept_per_machine_and_model(tmp_path):
    store = CostStore(tmp_path)
    key = CostStore.key("cpu-x|2|24GiB|", "POCKET-35B-Q2_K", 2)
    assert store.load(key).curve() is None
    learner = CostLearner()
    for k in range(3):
        for _ in range(3):
            learner.add(k, 0.2 + 0.05 * k)
    store.save(key, learner)
    store.save(CostStore.key("other", "m", 1), CostLearner())
    again = store.load(key)
    assert again.curve() == learner.curve()
    assert store.load(CostStore.key("cpu-x|2|24GiB|", "starter", 2)).curve() is None
    store.path.write_text("{not json")
    assert store.load(key).curve() is None  # a damaged file is no figures, not an error


def test_acceptance_follows_the_text():
    acc = Acceptance()
    for _ in range(30):
        acc.observe(4, 4)
    assert acc.rate > 0.95
    for _ in range(30):
        acc.observe(4, 0)
    assert acc.rate < 0.15


def test_a_noisy_figure_never_makes_a_draft_cheaper_than_a_plain_step():
    """Steps of a few microseconds (a fake runtime, a tiny model) measure noise: a verifying
    step timed faster than a plain one must not turn drafts on at zero acceptance."""
    from pocketchat.engines.draft.policy import CostLearner, DraftPolicy

    learner = CostLearner(4)
    for _ in range(5):
        learner.add(0, 2e-6)
        learner.add(3, 1e-6)  # faster than a plain step: noise
    curve = learner.curve()
    assert all(b > a for a, b in zip(curve.seconds, curve.seconds[1:], strict=False))
    policy = DraftPolicy(learner, k_max=4)
    for step in range(40):  # noqa: B007 - said below
        policy.record(3, 0, 1e-6)  # nothing ever accepted
        if not policy.enabled:
            break
    assert not policy.enabled and step < 30, step
