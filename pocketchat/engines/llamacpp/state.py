"""llama.cpp's sequence state for the prefix cache: cut, snapshot, restore, save to a file.

Sequence `seq` of the context (0 unless the context serves several, see `engines.batcher`) holds
one conversation. An attention-only model's KV cache can be
cut back anywhere (`llama_memory_seq_rm`). A hybrid or recurrent model's cannot: a
checkpoint is the recurrent part of the state (`llama_state_seq_get_data_ext` with
`LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`, as llama.cpp's server takes its context checkpoints);
restoring it and removing the attention KV after its position gives the state at that point.
When several sequences share the context, `lock` (the batcher's) keeps these calls off a
decode running in another thread.
A whole-sequence copy (`save_seq`/`load_seq`: KV and recurrent parts, `llama_state_seq_get_data`)
is what the prompt cache across conversations parks (`prompt_cache.PromptCache`); its disk
tier writes the same bytes (`seq_payload`) and makes a copy of them again (`seq_from_payload`).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from pathlib import Path
from typing import Any, ContextManager, Sequence

from pocketchat.errors import EngineError

SEQ = 0  # the sequence of a context that serves one conversation


class LlamaState:
    """`prefix_cache.StateOps` on sequence `seq` of a llama.cpp context."""

    def __init__(self, ctx: Any, model: Any, seq: int = SEQ,
                 lock: ContextManager | None = None) -> None:
        lib = self._lib = sys.modules["llama_cpp"]
        self._ctx = ctx
        self.seq = seq
        self._lock: ContextManager = lock if lock is not None else contextlib.nullcontext()
        self._mem = lib.llama_get_memory(ctx)
        recurrent = bool(lib.llama_model_is_recurrent(model)) or bool(lib.llama_model_is_hybrid(model))
        self.trimmable = not recurrent
        self.partial = recurrent
        self._flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY

    def trim(self, n: int) -> bool:
        with self._lock:
            return bool(self._lib.llama_memory_seq_rm(self._mem, self.seq, n, -1))

    def snapshot(self) -> tuple[Any, int]:
        lib = self._lib
        with self._lock:
            size = lib.llama_state_seq_get_size_ext(self._ctx, self.seq, self._flags)
            buf = (ctypes.c_uint8 * size)()
            got = lib.llama_state_seq_get_data_ext(self._ctx, buf, size, self.seq, self._flags)
        if got != size:
            raise EngineError(f"llama.cpp wrote {got} of {size} bytes of a checkpoint")
        return buf, size

    def restore(self, state: Any, n: int) -> None:
        lib = self._lib
        with self._lock:
            if not lib.llama_state_seq_set_data_ext(self._ctx, state, len(state), self.seq,
                                                    self._flags):
                raise EngineError("llama.cpp could not restore a checkpoint")
            lib.llama_memory_seq_rm(self._mem, self.seq, n, -1)  # the KV after the checkpoint

    def clear(self) -> None:
        with self._lock:
            self._lib.llama_memory_seq_rm(self._mem, self.seq, -1, -1)

    def size(self) -> int:
        """The bytes of this sequence's whole state."""
        with self._lock:
            return int(self._lib.llama_state_seq_get_size(self._ctx, self.seq))

    # -- whole sequence state, in memory (prompt_cache.SeqOps) ----------------------------

    def seq_bytes(self) -> int:
        with self._lock:
            return int(self._lib.llama_state_seq_get_size(self._ctx, self.seq))

    def save_seq(self) -> tuple[Any, int]:
        lib = self._lib
        with self._lock:
            size = self.seq_bytes()
            buf = (ctypes.c_uint8 * size)()
            got = lib.llama_state_seq_get_data(self._ctx, buf, size, self.seq)
        if got != size:
            raise EngineError(f"llama.cpp wrote {got} of {size} bytes of a sequence state")
        return buf, size

    def load_seq(self, state: Any) -> bool:
        lib = self._lib
        with self._lock:
            lib.llama_memory_seq_rm(self._mem, self.seq, -1, -1)
            if lib.llama_state_seq_set_data(self._ctx, state, len(state), self.seq):
                return True
            lib.llama_memory_seq_rm(self._mem, self.seq, -1, -1)
        return False

    # -- whole sequence state as bytes on disk (prompt_disk.DiskTier) -----------------------

    def seq_format(self) -> str:
        return f"llama.cpp sequence state, llama-cpp-python {getattr(self._lib, '__version__', '?')}"

    @staticmethod
    def seq_payload(state: Any) -> Any:
        return state  # `save_seq`'s buffer: llama_state_seq_get_data's bytes

    @staticmethod
    def seq_from_payload(payload: bytearray) -> Any:
        return (ctypes.c_uint8 * len(payload)).from_buffer(payload)  # no copy

    # -- whole sequence state, to a file (--continue) ---------------------------------------

    def save_file(self, path: Path, tokens: Sequence[int]) -> int:
        """Write the whole sequence state and its tokens; return the bytes written (0: failed)."""
        arr = (self._lib.llama_token * len(tokens))(*tokens)
        with self._lock:
            return int(self._lib.llama_state_seq_save_file(self._ctx, str(path).encode(),
                                                            self.seq, arr, len(tokens)))

    def load_file(self, path: Path, capacity: int) -> list[int] | None:
        """Read a state written by `save_file`; its tokens, or None when it does not load."""
        lib = self._lib
        arr = (lib.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        self.clear()
        with self._lock:
            got = lib.llama_state_seq_load_file(self._ctx, str(path).encode(), self.seq, arr,
                                                capacity, ctypes.byref(count))
        if not got:
            self.clear()
            return None
        return list(arr[: count.value])
