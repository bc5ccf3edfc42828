"""One sequence's drafting as the token loop uses it: what to verify next (`propose`) and what
the step cost and kept (`record`), over a drafter and the self-measuring policy
(`policy.DraftPolicy`, its cost curve kept per machine, model and drafter in the cache folder).

Two drafters: prompt lookup (`ngram.NgramDrafter`, free: its proposal is made first and the
policy cuts it, and a proposal not verified still teaches the acceptance) and a model's MTP head
(`llamacpp.mtp.MtpDrafter`, `costly`: each token is a decode, so the policy picks k first and
the head drafts only that many; a step's time includes its drafting).

`--draft auto` drafts while the figures say it pays (with the MTP head where the model carries
one, else by prompt lookup); `ngram` and `mtp` draft whenever the drafter has a proposal (the
policy still learns); `off` never builds one of these.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
import time
from typing import Any, Collection, Sequence

from pocketchat.engines.draft.ngram import Drafter, NgramDrafter
from pocketchat.engines.draft.policy import CostStore, DraftPolicy
from pocketchat.engines.draft.verify import accept
from pocketchat.engines.types import tokens_per_step


@dataclass
class DraftFigures:
    """What drafting did over one answer (for the stats and `bench`)."""

    steps: int = 0  # steps that verified a draft
    drafted: int = 0
    accepted: int = 0

    @property
    def per_step(self) -> float:
        """Tokens emitted per verifying step (accepted drafts + the correction)."""
        return tokens_per_step(self.steps, self.accepted)


@dataclass
class Drafting:
    """Drafts for one sequence (see the module docstring)."""

    mode: str  # "auto" | "ngram" | "mtp"
    ends: Collection[int]
    depth: int  # the most drafted tokens one step may verify
    store: CostStore | None = None
    key: str = ""
    drafter: Drafter = field(default_factory=NgramDrafter)
    policy: DraftPolicy = field(init=False)
    figures: DraftFigures = field(default_factory=DraftFigures)
    _shadow: tuple[int, list[int]] | None = None
    _dirty: int = 0

    def __post_init__(self) -> None:
        costs = self.store.load(self.key, self.depth) if self.store is not None else None
        self.policy = DraftPolicy(costs, k_max=self.depth)

    @classmethod
    def for_model(cls, mode: str, ends: Collection[int], depth: int, model_path: str,
                  threads: int, cache_dir: object | None, drafter: Drafter | None = None,
                  ) -> "Drafting | None":
        """`drafter`: the model's MTP head where it runs one (its costs are kept apart)."""
        if mode == "off" or depth <= 0:
            return None
        store = CostStore(cache_dir) if cache_dir is not None else None  # type: ignore[arg-type]
        key = CostStore.key(platform.node() or "machine", str(model_path), threads)
        if drafter is None:
            return cls(mode, ends, depth, store, key)
        return cls(mode, ends, depth, store, f"{key}|mtp", drafter)

    @property
    def costly(self) -> bool:
        """Whether drafting a token costs a decode (the MTP head), not a look-up."""
        return bool(getattr(self.drafter, "costly", False))

    def begin(self) -> None:
        """A new answer: its figures start at zero."""
        self.figures = DraftFigures()

    def _sync(self, seq: Sequence[int]) -> None:
        """The drafter's index follows the sequence (reset when it was cut back or changed)."""
        known = self.drafter.tokens
        n = len(known)
        if n > len(seq) or (n and known[n - 1] != seq[n - 1]) or (n > 8 and known[n - 8] != seq[n - 8]):
            self.drafter.reset(seq)
        elif n < len(seq):
            self.drafter.extend(seq[n:])

    def propose(self, seq: Sequence[int], limit: int) -> list[int]:
        """The drafted tokens to verify after `seq` (its last token is fed with them); [] for a
        plain step."""
        self._sync(seq)
        if self._shadow is not None:
            at, guess = self._shadow
            if len(seq) >= at + len(guess):
                self.policy.shadow(guess, seq[at: at + len(guess)])
                self._shadow = None
        limit = min(limit, self.depth)
        if limit <= 0 or (self.mode == "auto" and not self.policy.costs.known):
            return []  # (auto: a plain step is measured first, to weigh drafts against)
        if self.costly and self.mode == "auto":
            limit = self.policy.choose(limit)  # each drafted token costs: decide k first
            if limit <= 0:
                return []
        proposal = self.drafter.propose(limit)
        for i, token in enumerate(proposal):  # a draft never runs past an end of text
            if token in self.ends:
                proposal = proposal[:i]
                break
        if not proposal:
            return []
        k = len(proposal) if self.mode != "auto" or self.costly else self.policy.choose(len(proposal))
        if k <= 0:
            if self._shadow is None:
                self._shadow = (len(seq), proposal)
            return []
        return proposal[:k]

    def record(self, drafted: int, accepted: int, seconds: float) -> None:
        """A step ran: `drafted` tokens verified (0: plain), `accepted` kept, in `seconds`."""
        self.policy.record(drafted, accepted, seconds)
        if drafted:
            self.figures.steps += 1
            self.figures.drafted += drafted
            self.figures.accepted += accepted
        self._dirty += 1
        if self.store is not None and self._dirty >= 256:
            self.save()

    def save(self) -> None:
        """Keep the learned cost curve for the next run (errors only cost the figures)."""
        self._dirty = 0
        if self.store is not None:
            try:
                self.store.save(self.key, self.policy.costs)
            except OSError:
                pass


def advance(engine: Any, tokens: Sequence[int], limit: int) -> list[tuple[int, Any]]:
    """Feed `tokens` and sample what follows: one token, or, with drafts (at most `limit`
    drafted tokens verified in the same step), the accepted drafts (fed) and the
    correction or bonus token (not fed), each with its logprob."""
    drafting = engine._drafting
    began = time.perf_counter()  # a step's time includes its drafting (an MTP head decodes)
    drafts = (drafting.propose([*engine.cache.tokens, *tokens], limit)
              if drafting is not None and limit > 0 else [])
    if not drafts:
        out = [engine.feed(tokens, sample=True)]
        if drafting is not None:
            drafting.record(0, 0, time.perf_counter() - began)
        return out
    out = verify(engine, tokens, drafts)
    drafting.record(len(drafts), len(out) - 1, time.perf_counter() - began)  # type: ignore[union-attr]
    return out

def verify(engine: Any, tokens: Sequence[int], drafts: Sequence[int]) -> list[tuple[int, Any]]:
    """Feed `tokens` and `drafts` in one step, sampling in order at each drafted position
    while the model agrees (`draft.verify.accept`); the rejected drafts are rolled back.
    The accepted drafts and the correction (or bonus) token, with their logprobs."""
    drafted, logprobs = list(drafts), []

    def check(last: int) -> Any:
        first = last - len(drafted)

        def at(i: int) -> int:
            token, logprob = engine._sample_at(first + i)
            logprobs.append(logprob)
            return token

        return accept(drafted, at)

    base = len(engine.cache.tokens)
    engine._before_draft(base)
    verdict = engine.feed([*tokens, *drafted], sample=check, logits=len(drafted) + 1)
    keep = base + len(tokens) + verdict.accepted
    if keep < len(engine.cache.tokens):
        engine._meter.fed -= len(engine.cache.tokens) - keep  # rejected: never part of the answer
        engine._roll_back(keep)
    return list(zip(verdict.tokens, logprobs))
