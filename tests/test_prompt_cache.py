"""The prompt cache across conversations as a pure structure (`engines/state/prompt_cache.py`):
least recently used out first, the byte budget never exceeded, the longest parked prefix wins,
entries only where the live state ends at a message boundary, and the live state parked before
another conversation's prompt replaces it. The state is a fake sequence that records the tokens
it holds, so a restore is checked by what the sequence then holds."""

from __future__ import annotations

import random

import pytest

from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.state.prompt_cache import PromptCache

BYTES_PER_TOKEN = 10


class FakeSeq:
    """A sequence state: the tokens it holds; a copy is those tokens, 10 bytes each. Hybrid
    (`trimmable=False`): it cannot be cut back, as a recurrent state cannot."""

    partial = False

    def __init__(self, *, trimmable: bool = True) -> None:
        self.trimmable = trimmable
        self.held: list[int] = []
        self.copies = 0

    # StateOps (the live sequence's own cache)
    def trim(self, n: int) -> bool:
        if not self.trimmable and n < len(self.held):
            return False
        del self.held[n:]
        return True

    def snapshot(self):
        return list(self.held), len(self.held) * BYTES_PER_TOKEN

    def restore(self, state, n: int) -> None:
        self.held = list(state)[:n]

    def clear(self) -> None:
        self.held = []

    # SeqOps (whole-sequence copies)
    def seq_bytes(self) -> int:
        return len(self.held) * BYTES_PER_TOKEN

    def save_seq(self):
        self.copies += 1
        return tuple(self.held), self.seq_bytes()

    def load_seq(self, state) -> bool:
        self.held = list(state)
        return True


def evaluate(live: PrefixCache, seq: FakeSeq, tokens) -> None:
    seq.held.extend(tokens)
    live.tokens.extend(tokens)


def answer(pc: PromptCache, live: PrefixCache, seq: FakeSeq, prompt, *, settled: bool = True):
    """One request as the engine runs it; (tokens reused, tokens evaluated)."""
    pc.prepare(live, prompt, at_boundary=settled)
    keep = live.prepare(prompt).keep
    assert seq.held == list(prompt[:keep])  # the sequence holds exactly what is reused
    evaluate(live, seq, prompt[keep:])
    return keep, len(prompt) - keep


def test_least_recently_used_goes_first():
    pc = PromptCache(300)
    for k in (1, 2, 3):
        assert pc.put([k] * 10, f"s{k}", 100)
    pc.touch([1] * 10)  # 1 was used: 2 is now the oldest
    assert pc.put([4] * 10, "s4", 100)
    assert [key[0] for key in pc.keys()] == [3, 1, 4]
    assert pc.nbytes == 300 and len(pc) == 3


def test_a_state_larger_than_the_budget_is_never_kept_and_evicts_nothing():
    pc = PromptCache(250)
    pc.put([1, 2], "a", 200)
    assert not pc.put([3, 4], "b", 251)
    assert pc.keys() == [(1, 2)] and pc.nbytes == 200


def test_a_big_state_is_not_even_copied_when_it_cannot_fit():
    pc = PromptCache(50)
    seq = FakeSeq()
    seq.held = list(range(10))  # 100 bytes
    assert not pc.park(seq, seq.held)
    assert seq.copies == 0 and len(pc) == 0


def test_the_budget_is_never_exceeded():
    rng = random.Random(7)
    pc = PromptCache(1000)
    for _ in range(500):
        n = rng.randint(1, 40)
        key = [rng.randint(0, 5) for _ in range(n)]
        pc.put(key, None, rng.randint(1, 1200), shared=rng.random() < 0.2)
        assert pc.nbytes <= pc.budget
        assert pc.nbytes == sum(e.nbytes for e in (pc.find(k) for k in pc.keys()))


def test_the_longest_parked_prefix_wins_and_only_a_prefix():
    pc = PromptCache(10_000)
    pc.put([1, 2, 3], "short", 30, shared=True)
    pc.put([1, 2, 3, 4, 5], "long", 50)
    pc.put([1, 2, 3, 9, 9, 9, 9], "other", 70)
    assert pc.find([1, 2, 3, 4, 5, 6]).state == "long"
    assert pc.find([1, 2, 3, 4, 7]).state == "short"
    assert pc.find([1, 2, 3, 4, 5, 6], limit=4).state == "short"  # one token left to evaluate
    assert pc.find([2, 3]) is None


def test_a_conversation_parked_further_on_replaces_its_entry_and_no_other():
    seq = FakeSeq(trimmable=False)
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    answer(pc, live, seq, [1, 1, 1])
    answer(pc, live, seq, [2, 2])  # parks (1, 1, 1)
    answer(pc, live, seq, [1, 1, 1, 3])  # parks (2, 2), continues from (1, 1, 1)
    answer(pc, live, seq, [1, 1])  # a third conversation, behind the first: parks (1, 1, 1, 3)
    assert pc.keys() == [(2, 2), (1, 1, 1, 3)]
    answer(pc, live, seq, [2, 2, 2])  # parks (1, 1): the first conversation's entry stays
    assert sorted(pc.keys()) == [(1, 1), (1, 1, 1, 3), (2, 2)]


def test_off_with_budget_zero():
    pc = PromptCache(0)
    seq = FakeSeq()
    live = PrefixCache(seq)
    evaluate(live, seq, [1, 2, 3])
    assert pc.prepare(live, [4, 5, 6], at_boundary=True) is None
    assert not pc.park(seq, [1, 2, 3]) and len(pc) == 0 and seq.copies == 0
    assert pc.status()["budget"] == 0


@pytest.mark.parametrize("trimmable", [True, False], ids=["attention", "hybrid"])
def test_interleaved_conversations_continue_from_their_parked_state(trimmable):
    seq = FakeSeq(trimmable=trimmable)
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    convs = {name: [base] * 5 for name, base in (("a", 100), ("b", 200), ("c", 300))}
    for rnd in range(4):
        for name, conv in convs.items():
            new = [base + rnd + 1 for base in (conv[0],)] * 3
            prompt = conv + new
            keep, evaluated = answer(pc, live, seq, prompt)
            if rnd:
                assert keep == len(conv) and evaluated == len(new), (rnd, name)
            conv.extend(new + [7, 7])  # the answer, settled into the state
            evaluate(live, seq, [7, 7])
    s = pc.status()
    assert s["hits"] == 9 and s["entries"] == 3 and s["bytes"] <= s["budget"]


def test_only_a_state_at_a_message_boundary_is_parked():
    seq = FakeSeq()
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    answer(pc, live, seq, [1, 1, 1, 1])
    answer(pc, live, seq, [2, 2, 2], settled=False)  # the last answer was cancelled midway
    assert len(pc) == 0
    answer(pc, live, seq, [3, 3, 3], settled=True)
    assert pc.keys() == [(2, 2, 2)]


def test_a_state_that_ends_mid_answer_is_parked_at_its_newest_checkpoint():
    seq = FakeSeq(trimmable=False)
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    answer(pc, live, seq, [1, 1, 1])
    live.save_checkpoint()  # the end of the user message
    evaluate(live, seq, [9, 9])  # the answer, cut off: never settled
    answer(pc, live, seq, [2, 2], settled=False)
    assert pc.keys() == [(1, 1, 1)]
    assert answer(pc, live, seq, [1, 1, 1, 5]) == (3, 1)


def test_a_live_state_that_the_prompt_extends_is_not_copied():
    seq = FakeSeq()
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    answer(pc, live, seq, [1, 2, 3])
    assert answer(pc, live, seq, [1, 2, 3, 4, 5]) == (3, 2)
    assert seq.copies == 0 and pc.status()["misses"] == 1  # only the first (empty) prompt


def test_a_shared_prefix_serves_a_new_conversation_and_stays():
    seq = FakeSeq(trimmable=False)
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    system = list(range(50))
    pc.prepare(live, system + [1, 1], at_boundary=True)
    live.prepare(system + [1, 1])
    evaluate(live, seq, system)  # as the engine does: up to the end of the system message,
    assert pc.park(seq, system, shared=True)  # parked there,
    evaluate(live, seq, [1, 1])  # then the rest
    assert answer(pc, live, seq, system + [2, 2, 2]) == (50, 3)
    assert answer(pc, live, seq, system + [3]) == (50, 1)
    assert (*system,) in pc.keys() and pc.status()["hits"] == 2


def test_a_restore_that_fails_starts_from_scratch():
    class Refusing(FakeSeq):
        def load_seq(self, state) -> bool:
            self.held = []
            return False

    seq = Refusing()
    live = PrefixCache(seq)
    pc = PromptCache(100_000)
    pc.put([5, 5, 5], (5, 5, 5), 30)
    evaluate(live, seq, [1, 2])
    assert answer(pc, live, seq, [5, 5, 5, 6]) == (0, 4)
    assert pc.status()["misses"] == 1 and pc.status()["hits"] == 0


@pytest.mark.parametrize("name", ["linux-16gb.json", "linux-64gb.json", "laptop-8gb-7gb-free.json",
                                  "mac-m3pro-18gb.json"])
def test_the_default_budget_is_a_quarter_of_the_ram_the_plan_leaves_free_at_most_8_gib(name):
    from support import PROFILES
    from pocketchat.select import catalog, fit
    from pocketchat.select.budget import cpu_budget
    from pocketchat.select.profile import load_profile
    from pocketchat.types import GiB

    profile = load_profile(PROFILES / name)
    chosen = fit.plan(profile, catalog.builds()).recommended
    assert chosen is not None and chosen.plan is not None
    free = max(cpu_budget(profile) - chosen.estimated_memory_bytes, 0)
    assert chosen.plan.prompt_cache_bytes == int(min(free * 0.25, 8 * GiB))
    assert 0 <= chosen.plan.prompt_cache_bytes <= 8 * GiB


def test_serve_refuses_a_negative_budget_with_what_to_do(capsys):
    from pocketchat import cli

    code = cli.main(["serve", "--offline", "--prompt-cache-mb", "-1"])
    err = capsys.readouterr().err
    assert code != 0 and "--prompt-cache-mb" in err and "0 turns it off" in err
