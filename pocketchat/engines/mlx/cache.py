"""One prompt cache per conversation for the MLX engine: what to keep, what to process.

The cache holds the model's state after `tokens` (the previous prompt and the answer the model
wrote). A new turn's prompt usually starts with all of it, so only the new part is processed.
When it does not (the template re-renders the previous answer differently, the user edited or
regenerated a message), what can be kept depends on the cache:

- a trimmable cache (plain KV caches, llama-style models): trim it back to the common prefix;
- a cache that cannot be trimmed (linear-attention / recurrent state: Qwen3.5 and POCKET's
  Gated-DeltaNet layers): it can only go forward. So the engine also keeps one checkpoint,
  a copy taken where the conversation ended before the answer's generation prompt (the end
  of the last user message); the next turn restarts from there when it shares that prefix,
  and from scratch only when the conversation changed before it.

`plan_reuse` is the pure decision; `PromptCache` applies it to mlx-lm's cache objects.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal, Sequence

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
    keep: int  # tokens of the cache (or checkpoint) kept; the prompt is processed from here


def plan_reuse(cached: Sequence[int], prompt: Sequence[int], *, trimmable: bool,
               checkpoint: Sequence[int] | None = None) -> Reuse:
    """How much of the cached state a prompt can start from.

    At least one prompt token is always left to process (the model must see it to predict the
    first answer token), so a prompt equal to the cached tokens keeps all but the last.
    """
    limit = max(0, len(prompt) - 1)
    shared = min(common_prefix(cached, prompt), limit)
    if trimmable:
        return Reuse("live" if shared else "fresh", shared)
    if shared and shared == len(cached):
        return Reuse("live", shared)
    if checkpoint and len(checkpoint) <= limit and common_prefix(checkpoint, prompt) == len(checkpoint):
        return Reuse("checkpoint", len(checkpoint))
    return Reuse("fresh", 0)


class PromptCache:
    """mlx-lm's per-layer cache for one conversation, and the tokens it holds."""

    def __init__(self, model: Any) -> None:
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

        self._model = model
        self._make = make_prompt_cache
        self.layers: list[Any] = make_prompt_cache(model)
        self.trimmable = bool(can_trim_prompt_cache(self.layers))
        self.tokens: list[int] = []
        self._checkpoint: tuple[list[int], list[Any]] | None = None

    @property
    def checkpoint_tokens(self) -> list[int] | None:
        return self._checkpoint[0] if self._checkpoint else None

    def prepare(self, prompt: Sequence[int]) -> Reuse:
        """Bring the cache to the longest usable prefix of `prompt`; return what was kept."""
        reuse = plan_reuse(self.tokens, prompt, trimmable=self.trimmable,
                           checkpoint=self.checkpoint_tokens)
        if reuse.source == "live":
            extra = len(self.tokens) - reuse.keep
            if extra:
                from mlx_lm.models.cache import trim_prompt_cache

                trim_prompt_cache(self.layers, extra)
            del self.tokens[reuse.keep:]
        elif reuse.source == "checkpoint":
            assert self._checkpoint is not None
            tokens, layers = self._checkpoint
            self.layers = copy.deepcopy(layers)  # the checkpoint stays for the next restart
            self.tokens = list(tokens)
        else:
            self.reset(keep_checkpoint=False)
        return reuse

    def save_checkpoint(self) -> None:
        """Remember the current state (only useful for caches that cannot be trimmed)."""
        self._checkpoint = (list(self.tokens), copy.deepcopy(self.layers))

    def reset(self, *, keep_checkpoint: bool = False, hard: bool = False) -> None:
        """Empty the cache; `hard` makes new cache objects (after an error left them unknown)."""
        if self.trimmable and self.tokens and not hard:
            from mlx_lm.models.cache import trim_prompt_cache

            trim_prompt_cache(self.layers, len(self.tokens))  # keeps the allocated buffers
        else:
            self.layers = self._make(self._model)
        self.tokens = []
        if not keep_checkpoint:
            self._checkpoint = None

    def nbytes(self) -> int:
        total = 0
        for layers in (self.layers, self._checkpoint[1] if self._checkpoint else []):
            for c in layers:
                try:
                    total += int(c.nbytes)
                except (NotImplementedError, AttributeError, TypeError):
                    pass
        return total
