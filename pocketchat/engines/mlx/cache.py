"""mlx-lm's per-layer prompt cache as the prefix cache's state (`prefix_cache.StateOps`).

Plain KV caches (llama-style models) are trimmed back to the shared prefix. Caches that
cannot be trimmed (the linear-attention `ArraysCache` layers of Qwen3.5 and POCKET) go
forward only: a checkpoint is a deep copy of every layer (KV included), so it stays usable
whatever the live cache does after it. The prompt cache across conversations parks the same
deep copies (`save_seq`/`load_seq`); its disk tier writes them as mlx-lm's own prompt-cache
file (`save_prompt_cache`'s safetensors bytes, `seq_payload`) and reads them back with
`load_prompt_cache` (`seq_from_payload`).

With several sequences decoded together (`batch.MlxBatch`), a state's layers may be lent to
the batch: the batch holds them merged with the others' while the sequence decodes. Reading
`layers` then takes them back (out of the batch), setting them drops the batch's row, and
every operation runs on the batch's MLX thread (`run`), where all MLX work of the sequences is
done. With one sequence there is no lender and `run` calls in place.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any, Callable


def _direct(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class MlxState:
    """The cache objects `mlx_lm` fills, for one conversation."""

    partial = False

    def __init__(self, model: Any, run: Callable[..., Any] | None = None) -> None:
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

        self._model = model
        self._make = make_prompt_cache
        self._run = run or _direct
        self._layers: list[Any] = self._run(make_prompt_cache, model)
        self.trimmable = bool(can_trim_prompt_cache(self._layers))
        self.length: Callable[[], int] = lambda: 0  # tokens held; set by the engine
        self.lender: Any = None  # the batch holding the live layers (batch.MlxBatch), or None

    @property
    def layers(self) -> list[Any]:
        """The per-layer caches (taken back from the batch first when it holds them)."""
        if self.lender is not None:
            self.lender.give_back(self)
        return self._layers

    @layers.setter
    def layers(self, value: list[Any]) -> None:
        if self.lender is not None:
            self.lender.drop(self)
        self._layers = value

    # -- the batch's side (batch.MlxBatch) ---------------------------------------------------

    def lend(self, batch: Any) -> list[Any]:
        """Hand the live layers to `batch` (which merges them); until taken back, it holds them."""
        layers, self._layers, self.lender = self._layers, [], batch
        return layers

    def receive(self, layers: list[Any] | None) -> None:
        """The batch gives the layers back (None: the batch failed, start from empty ones)."""
        self.lender = None
        self._layers = layers if layers is not None else self._make(self._model)

    # -- prefix_cache.StateOps ---------------------------------------------------------------

    def trim(self, n: int) -> bool:
        extra = self.length() - n
        if extra <= 0:
            return extra == 0
        if not self.trimmable:
            return False
        from mlx_lm.models.cache import trim_prompt_cache

        self._run(trim_prompt_cache, self.layers, extra)
        return True

    def snapshot(self) -> tuple[Any, int]:
        layers = self.layers
        return self._run(lambda: (copy.deepcopy(layers), self.nbytes(layers)))

    def restore(self, state: Any, n: int) -> None:
        self.layers = self._run(copy.deepcopy, state)  # the checkpoint stays for the next restart

    def clear(self) -> None:
        self.layers = self._run(self._make, self._model)

    # whole-sequence copies (prompt_cache.SeqOps): the same deep copies as a checkpoint
    def seq_bytes(self) -> int:
        return self.nbytes(self.layers)

    def save_seq(self) -> tuple[Any, int]:
        return self.snapshot()

    def load_seq(self, state: Any) -> bool:
        self.layers = self._run(copy.deepcopy, state)  # the parked copy stays usable
        return True

    # the disk tier (prompt_disk.DiskTier): mlx-lm's prompt-cache file as bytes
    def seq_format(self) -> str:
        import mlx_lm

        return f"mlx-lm {getattr(mlx_lm, '__version__', '?')} prompt cache"

    def seq_payload(self, state: Any) -> bytes:
        from mlx_lm.models.cache import save_prompt_cache

        def dump() -> bytes:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "state.safetensors"
                save_prompt_cache(str(path), state)
                return path.read_bytes()

        return self._run(dump)

    def seq_from_payload(self, payload: bytearray) -> Any:
        from mlx_lm.models.cache import load_prompt_cache

        def read() -> Any:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "state.safetensors"
                path.write_bytes(payload)
                return load_prompt_cache(str(path))

        return self._run(read)

    @staticmethod
    def nbytes(layers: list[Any]) -> int:
        total = 0
        for c in layers:
            try:
                total += int(c.nbytes)
            except (NotImplementedError, AttributeError, TypeError):
                pass
        return total
