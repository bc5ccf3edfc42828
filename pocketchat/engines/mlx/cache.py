"""mlx-lm's per-layer prompt cache as the prefix cache's state (`prefix_cache.StateOps`).

Plain KV caches (llama-style models) are trimmed back to the shared prefix. Caches that
cannot be trimmed (the linear-attention `ArraysCache` layers of Qwen3.5 and POCKET) go
forward only: a checkpoint is a deep copy of every layer (KV included), so it stays usable
whatever the live cache does after it. The prompt cache across conversations parks the same
deep copies (`save_seq`/`load_seq`).
"""

from __future__ import annotations

import copy
from typing import Any, Callable


class MlxState:
    """The cache objects `mlx_lm` fills, for one conversation."""

    partial = False

    def __init__(self, model: Any) -> None:
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

        self._model = model
        self._make = make_prompt_cache
        self.layers: list[Any] = make_prompt_cache(model)
        self.trimmable = bool(can_trim_prompt_cache(self.layers))
        self.length: Callable[[], int] = lambda: 0  # tokens held; set by the engine

    def trim(self, n: int) -> bool:
        extra = self.length() - n
        if extra <= 0:
            return extra == 0
        if not self.trimmable:
            return False
        from mlx_lm.models.cache import trim_prompt_cache

        trim_prompt_cache(self.layers, extra)
        return True

    def snapshot(self) -> tuple[Any, int]:
        return copy.deepcopy(self.layers), self.nbytes(self.layers)

    def restore(self, state: Any, n: int) -> None:
        self.layers = copy.deepcopy(state)  # the checkpoint stays for the next restart

    def clear(self) -> None:
        self.layers = self._make(self._model)

    # whole-sequence copies (prompt_cache.SeqOps): the same deep copies as a checkpoint
    def seq_bytes(self) -> int:
        return self.nbytes(self.layers)

    def save_seq(self) -> tuple[Any, int]:
        return self.snapshot()

    def load_seq(self, state: Any) -> bool:
        self.layers = copy.deepcopy(state)  # the parked copy stays usable
        return True

    @staticmethod
    def nbytes(layers: list[Any]) -> int:
        total = 0
        for c in layers:
            try:
                total += int(c.nbytes)
            except (NotImplementedError, AttributeError, TypeError):
                pass
        return total
