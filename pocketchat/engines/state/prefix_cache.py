"""Prompt reuse for every backend: what the model's sequence state holds, and where to restart.

A chat turn's prompt is the previous conversation plus a new user message, so most of it is
already in the model's state. What can be kept depends on the state:

- attention KV caches (llama-style models) can be cut back to any length: keep the longest
  common prefix of the cached tokens and the new prompt;
- recurrent state (Gated-DeltaNet / Mamba layers: POCKET, Qwen3.5/3.6) only goes forward. A
  prompt that extends the cached tokens is reused; one that leaves them earlier (the template
  renders the previous answer without its reasoning, the user edited or regenerated a message)
  restarts from a *checkpoint*: a copy of the state taken at the end of a user message, before
  the generation prompt, where the next prompt can diverge. Hybrid models keep their attention
  KV in the live state and cut it back to the checkpoint's length after the restore.

`PrefixCache.tokens` are exactly the tokens the state holds, generated tokens as generated
(never re-tokenized text). Checkpoints are bounded in number and bytes (oldest go first).
The backend supplies the state operations (`StateOps`); `plan_reuse` is the pure decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, Sequence

from pocketchat.types import MAX_CHECKPOINT_BYTES, MAX_CHECKPOINTS

Source = Literal["live", "checkpoint", "fresh"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(frozen=True)
class Reuse:
    source: Source
    keep: int  # tokens of the state kept; the prompt is evaluated from here


def plan_reuse(cached: Sequence[int], prompt: Sequence[int], *, trimmable: bool,
               checkpoints: Sequence[Sequence[int]] = (), leave: int = 1) -> Reuse:
    """How much of the cached state `prompt` can start from.

    `leave` prompt tokens are always left to evaluate (the model must see the last one to
    predict the first answer token); `checkpoints` are token prefixes a state can be restored
    to, and the longest that is a prefix of the prompt wins.
    """
    limit = max(0, len(prompt) - leave)
    shared = min(common_prefix(cached, prompt), limit)
    if trimmable:
        return Reuse("live" if shared else "fresh", shared)
    if shared and shared == len(cached):
        return Reuse("live", shared)
    best = 0
    for ck in checkpoints:
        if best < len(ck) <= limit and common_prefix(ck, prompt) == len(ck):
            best = len(ck)
    return Reuse("checkpoint", best) if best else Reuse("fresh", 0)


class StateOps(Protocol):
    """What a backend can do with its sequence state."""

    trimmable: bool  # the live state can be cut back to any length
    partial: bool  # a checkpoint holds only the part that cannot be cut (needs the live KV)

    def trim(self, n: int) -> bool:
        """Cut the live state back to its first `n` tokens; False when it cannot."""

    def snapshot(self) -> tuple[Any, int]:
        """(a copy of the state's untrimmable part, its size in bytes)."""

    def restore(self, state: Any, n: int) -> None:
        """Bring the live state back to the snapshot `state` taken after `n` tokens."""

    def clear(self) -> None:
        """Empty the live state."""


@dataclass
class Checkpoint:
    tokens: tuple[int, ...]
    state: Any
    nbytes: int


class PrefixCache:
    """The live sequence state's tokens, its checkpoints, and the reuse decision applied."""

    def __init__(self, ops: StateOps, *, max_count: int = MAX_CHECKPOINTS,
                 max_bytes: int = MAX_CHECKPOINT_BYTES) -> None:
        self.ops = ops
        self.tokens: list[int] = []
        self.checkpoints: list[Checkpoint] = []
        self.max_count = max_count
        self.max_bytes = max_bytes

    @property
    def trimmable(self) -> bool:
        return self.ops.trimmable

    def prepare(self, prompt: Sequence[int], *, leave: int = 1) -> Reuse:
        """Bring the state to the longest usable prefix of `prompt`; return what was kept."""
        reuse = plan_reuse(self.tokens, prompt, trimmable=self.trimmable, leave=leave,
                           checkpoints=[c.tokens for c in self.checkpoints])
        if reuse.source == "live":
            if reuse.keep < len(self.tokens) and not self.ops.trim(reuse.keep):
                self.reset()
                return Reuse("fresh", 0)
            self._cut(reuse.keep)
        elif reuse.source == "checkpoint":
            ck = next(c for c in reversed(self.checkpoints) if len(c.tokens) == reuse.keep
                      and common_prefix(c.tokens, prompt) == reuse.keep)
            self.ops.restore(ck.state, reuse.keep)
            self._cut(reuse.keep)
        else:
            self.reset()
        return reuse

    def forget_after(self, n: int) -> None:
        """The state was cut to its first `n` tokens by other means (a rolled-back draft)."""
        self._cut(n)

    def _cut(self, n: int) -> None:
        del self.tokens[n:]
        if self.ops.partial:  # a partial checkpoint needs the live KV under it
            self.checkpoints = [c for c in self.checkpoints if len(c.tokens) <= n]

    def save_checkpoint(self) -> None:
        """Copy the state as it is now (after `self.tokens`), within the bounds."""
        if self.trimmable or not self.tokens or self.max_count <= 0:
            return
        key = tuple(self.tokens)
        self.checkpoints = [c for c in self.checkpoints if c.tokens != key]
        state, nbytes = self.ops.snapshot()
        if nbytes > self.max_bytes:
            return
        self.checkpoints.append(Checkpoint(key, state, nbytes))
        while (len(self.checkpoints) > self.max_count
               or sum(c.nbytes for c in self.checkpoints) > self.max_bytes):
            self.checkpoints.pop(0)

    @property
    def checkpoint_tokens(self) -> list[int] | None:
        """The newest checkpoint's tokens (None without one)."""
        return list(self.checkpoints[-1].tokens) if self.checkpoints else None

    def truncate(self, n: int) -> None:
        """After a failed or aborted evaluation: make the state hold at most its first `n`
        tokens, from a checkpoint when it cannot be cut, from scratch as the last resort."""
        n = min(n, len(self.tokens))
        if self.ops.trim(n):
            self._cut(n)
            return
        usable = [c for c in self.checkpoints if len(c.tokens) <= n
                  and common_prefix(c.tokens, self.tokens) == len(c.tokens)]
        if usable:
            ck = max(usable, key=lambda c: len(c.tokens))
            self.ops.restore(ck.state, len(ck.tokens))
            self._cut(len(ck.tokens))
        else:
            self.reset()

    def reset(self, *, keep_checkpoints: bool = False) -> None:
        self.ops.clear()
        self.tokens = []
        if not keep_checkpoints or self.ops.partial:
            self.checkpoints = []

    def nbytes(self) -> int:
        """Bytes held by the checkpoints."""
        return sum(c.nbytes for c in self.checkpoints)
