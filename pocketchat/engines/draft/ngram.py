"""Prompt-lookup drafts: the tokens that followed the latest earlier occurrence of the
sequence's last n tokens (n from `n_max` down to `n_min`).

Code edits, extraction, quoting and rewriting reuse long runs of the input; this drafter finds
them in the conversation itself (prompt + answer so far), at no model cost. The index maps each
n-gram to the position right after its latest occurrence that has a follower, updated as tokens
arrive (O(n_max) per token), so a proposal is a few dict look-ups, never a rescan.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable


@runtime_checkable
class Drafter(Protocol):
    """What the token loop asks of a drafter (n-gram here; an MTP head beside it)."""

    def reset(self, tokens: Sequence[int]) -> None:
        """Start over from `tokens` (the whole sequence the model's state holds)."""

    def extend(self, tokens: Sequence[int]) -> None:
        """`tokens` were appended to the sequence (accepted drafts, corrections, plain tokens)."""

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens likely to come next (empty: nothing worth verifying)."""


class NgramDrafter:
    """`Drafter` by prompt lookup over the sequence so far."""

    def __init__(self, n_max: int = 3, n_min: int = 1) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
        self.n_max = n_max
        self.n_min = n_min
        self._tokens: list[int] = []
        # n-gram (a tuple of n tokens) -> index of the token that followed its latest occurrence
        self._index: dict[tuple[int, ...], int] = {}
        self.last_match = 0  # n of the match behind the last proposal (0: none)

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def reset(self, tokens: Sequence[int]) -> None:
        self._tokens = []
        self._index = {}
        self.last_match = 0
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        seq, index, n_max = self._tokens, self._index, self.n_max
        for t in tokens:
            i = len(seq)  # t lands at i: every n-gram ending at i-1 now has a follower
            for n in range(self.n_min, min(n_max, i) + 1):
                index[tuple(seq[i - n:i])] = i
            seq.append(int(t))

    def _follow(self, seq: Sequence[int]) -> tuple[int, int]:
        """(start of the tokens that followed the longest match of `seq`'s tail, its n)."""
        for n in range(min(self.n_max, len(seq)), self.n_min - 1, -1):
            at = self._index.get(tuple(seq[len(seq) - n:]))
            if at is not None:
                return at, n
        return -1, 0

    def propose(self, k: int) -> list[int]:
        if k <= 0:
            return []
        seq = self._tokens
        at, self.last_match = self._follow(seq)
        if at < 0:
            return []
        out = list(seq[at:at + k])
        # a repeat that runs into the present (a loop, a list) continues by looking up again
        while 0 < len(out) < k:
            at, n = self._follow(seq[-self.n_max:] + out)
            if at < 0:
                break
            out.extend(seq[at:at + k - len(out)])
        return out
