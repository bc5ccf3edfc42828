"""Which drafted tokens the target model accepts.

After one batch that holds the last emitted token and the k drafted ones (logits at every
position), `accept` samples the target's token at position 0, 1, ... with the normal sampler
chain (greedy or not) and keeps the drafts while they agree; the first disagreement's sampled
token is the correction, and when all k agree the token sampled after the last one is a bonus.
A step therefore emits `accepted + 1` tokens, each one exactly as plain decoding would have
sampled it.

Why this keeps the model's distribution (drafts are deterministic: q is one-hot on the draft d).
The standard speculative-sampling rule accepts d with probability min(1, p(d)/q(d)) = p(d) and on
rejection samples from norm(max(0, p - q)) = p restricted to x != d, renormalized. Sampling
y ~ p and accepting iff y == d accepts with probability p(d), and given y != d, y has
probability p(y) / (1 - p(d)): the same law, so every emitted token is distributed as p.

Sampling is lazy and in order (position i is sampled only once the tokens before it are
accepted), so a sampler chain with state (penalties, a grammar, its RNG) sees exactly the
tokens plain decoding would have shown it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Verdict:
    """One verification step of `drafted` tokens: `accepted` kept, then `tokens` to append (the
    accepted drafts and the correction or bonus token: always `accepted + 1` of them)."""

    accepted: int
    tokens: list[int]
    drafted: int

    @property
    def rejected(self) -> int:
        """Drafted positions whose state must be rolled back."""
        return self.drafted - self.accepted


def accept(draft: Sequence[int], sample_at: Callable[[int], int]) -> Verdict:
    """Apply the rule: `sample_at(i)` is the target's token sampled from the logits at batch
    position i (i = 0 follows the last emitted token, i = j follows draft[j - 1])."""
    out: list[int] = []
    for i, d in enumerate(draft):
        y = int(sample_at(i))
        out.append(y)
        if y != int(d):
            return Verdict(i, out, len(draft))
    out.append(int(sample_at(len(draft))))
    return Verdict(len(draft), out, len(draft))
