"""One sequence's drafting as the token loop uses it: what to verify next (`propose`) and what
the step cost and kept (`record`), over a drafter and the self-measuring policy
(`policy.DraftPolicy`, its cost curve kept per machine, model and drafter in the cache folder).

Two drafters: prompt lookup (`ngram.NgramDrafter`, free: its proposal is made first and the
policy cuts it, and a proposal not verified still teaches the acceptance) and a model's MTP head
(`llamacpp.mtp.MtpDrafter`, `costly`: each token is a decode, so the policy picks k first and
the head drafts only that many; a step's time includes its drafting).

`--draft auto` drafts while the figures say it pays: by prompt lookup first, and with the MTP
head (where the model carries one) at the steps where lookup offers nothing that pays; `ngram`
and `mtp` draft with that drafter alone whenever it has a proposal (its policy still learns);
`off` never builds one of these.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
import time
from typing import Any, Callable, Collection, Iterator, Sequence

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


class Joined(SequenceABC):
    """`head` then `tail` read as one sequence, `head` (the whole context) not copied: a step
    reads the sequence's length and its last few tokens, so its cost does not grow with the
    context."""

    def __init__(self, head: Sequence[int], tail: Sequence[int]) -> None:
        self.head, self.tail = head, tail

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def __getitem__(self, i: Any) -> Any:
        n = len(self.head)
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return list(self)[i]
            return [*self.head[start:min(stop, n)], *self.tail[max(start - n, 0):max(stop - n, 0)]]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.head[i] if i < n else self.tail[i - n]

    def __iter__(self) -> Iterator[int]:
        yield from self.head
        yield from self.tail


@dataclass
class Source:
    """One drafter and its own policy (its cost curve, kept under `key`, and its acceptance)."""

    drafter: Drafter
    policy: DraftPolicy
    key: str
    shadow: tuple[int, list[int]] | None = None  # a free draft not verified: (at, tokens)

    @property
    def costly(self) -> bool:
        """Whether drafting a token costs a decode (the MTP head), not a look-up."""
        return bool(getattr(self.drafter, "costly", False))

    def sync(self, seq: Sequence[int]) -> None:
        """The drafter follows the sequence (reset when it was cut back or changed)."""
        known = self.drafter.tokens  # type: ignore[attr-defined]
        n = len(known)
        if n > len(seq) or (n and known[n - 1] != seq[n - 1]) or (n > 8 and known[n - 8] != seq[n - 8]):
            self.drafter.reset(seq)
        elif n < len(seq):
            self.drafter.extend(seq[n:])


@dataclass
class Drafting:
    """Drafts for one sequence (see the module docstring). `drafters` in the order they are
    asked (the free one first); each keeps its own figures."""

    mode: str  # "auto" | "ngram" | "mtp"
    ends: Collection[int]
    depth: int  # the most drafted tokens one step may verify
    store: CostStore | None = None
    key: str = ""
    drafters: Sequence[Drafter] = ()
    clock: Callable[[], float] = time.perf_counter  # a step's seconds, its drafting included
    sources: list[Source] = field(init=False)
    figures: DraftFigures = field(default_factory=DraftFigures)
    _last: Source | None = None  # the source of this step's draft
    _dirty: int = 0

    def __post_init__(self) -> None:
        self.sources = []
        for drafter in self.drafters or (NgramDrafter(),):
            key = f"{self.key}|mtp" if getattr(drafter, "costly", False) else self.key
            costs = self.store.load(key, self.depth) if self.store is not None else None
            self.sources.append(Source(drafter, DraftPolicy(costs, k_max=self.depth), key))

    @classmethod
    def for_model(cls, mode: str, ends: Collection[int], depth: int, model_path: str,
                  threads: int, cache_dir: object | None, head: Drafter | None = None,
                  ) -> "Drafting | None":
        """`head`: the model's MTP head where it runs one: `mtp` drafts with it alone, `auto`
        by prompt lookup first and with the head where lookup has nothing that pays."""
        if mode == "off" or depth <= 0:
            return None
        store = CostStore(cache_dir) if cache_dir is not None else None  # type: ignore[arg-type]
        key = CostStore.key(platform.node() or "machine", str(model_path), threads)
        drafters: list[Drafter] = []
        if mode in ("auto", "ngram"):
            drafters.append(NgramDrafter())
        if head is not None and mode in ("auto", "mtp"):
            drafters.append(head)
        return cls(mode, ends, depth, store, key, drafters) if drafters else None

    def begin(self) -> None:
        """A new answer: its figures start at zero."""
        self.figures = DraftFigures()

    def propose(self, seq: Sequence[int], limit: int) -> list[int]:
        """The drafted tokens to verify after `seq` (its last token is fed with them); [] for a
        plain step."""
        self._last = None
        limit = min(limit, self.depth)
        for src in self.sources:
            src.sync(seq)
            if src.shadow is not None:
                at, guess = src.shadow
                if len(seq) >= at + len(guess):
                    src.policy.shadow(guess, seq[at: at + len(guess)])
                    src.shadow = None
        for src in self.sources:
            drafts = self._from(src, seq, limit)
            if drafts:
                self._last = src
                return drafts
        return []

    def _from(self, src: Source, seq: Sequence[int], limit: int) -> list[int]:
        auto = self.mode == "auto"
        if limit <= 0 or (auto and not src.policy.costs.known):
            return []  # (auto: a plain step is measured first, to weigh drafts against)
        if src.costly and auto:
            limit = src.policy.choose(limit)  # each drafted token costs: decide k first
            if limit <= 0:
                return []
        proposal = src.drafter.propose(limit)
        for i, token in enumerate(proposal):  # a draft never runs past an end of text
            if token in self.ends:
                proposal = proposal[:i]
                break
        if not proposal:
            return []
        k = src.policy.choose(len(proposal)) if auto and not src.costly else len(proposal)
        if k <= 0:
            if src.shadow is None:
                src.shadow = (len(seq), proposal)
            return []
        return proposal[:k]

    def record(self, drafted: int, accepted: int, seconds: float) -> None:
        """A step ran: `drafted` tokens verified (0: plain), `accepted` kept, in `seconds`."""
        if drafted and self._last is not None:
            self._last.policy.record(drafted, accepted, seconds)
            self.figures.steps += 1
            self.figures.drafted += drafted
            self.figures.accepted += accepted
        else:  # a plain step: what every drafter weighs its drafts against
            for src in self.sources:
                src.policy.record(0, 0, seconds)
        for src in self.sources:  # a costly drafter rests while its drafts are off
            follow = getattr(src.drafter, "follow", None)
            if follow is not None:
                follow(self.mode != "auto" or src.policy.enabled)
        self._dirty += 1
        if self.store is not None and self._dirty >= 256:
            self.save()

    def save(self) -> None:
        """Keep the learned cost curve for the next run (errors only cost the figures)."""
        self._dirty = 0
        if self.store is not None:
            try:
                for src in self.sources:
                    self.store.save(src.key, src.policy.costs)
            except OSError:
                pass


def advance(engine: Any, tokens: Sequence[int], limit: int) -> list[tuple[int, Any]]:
    """Feed `tokens` and sample what follows: one token, or, with drafts (at most `limit`
    drafted tokens verified in the same step), the accepted drafts (fed) and the
    correction or bonus token (not fed), each with its logprob."""
    drafting = engine._drafting
    if drafting is None:
        return [engine.feed(tokens, sample=True)]
    began = drafting.clock()  # a step's time includes its drafting (an MTP head decodes)
    drafts = drafting.propose(Joined(engine.cache.tokens, tokens), limit) if limit > 0 else []
    if not drafts:
        out = [engine.feed(tokens, sample=True)]
        drafting.record(0, 0, drafting.clock() - began)
        return out
    out = verify(engine, tokens, drafts)
    drafting.record(len(drafts), len(out) - 1, drafting.clock() - began)
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
    return list(zip(verdict.tokens, logprobs, strict=False))
