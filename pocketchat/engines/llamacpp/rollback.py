"""Taking back the rejected part of a verified draft: a sequence's state back to position p.

After a verification batch (the last emitted token and k drafted ones, positions p0..p0+k),
the loop keeps positions < p and removes the rest. How depends on the model's memory:

- `kv` (attention only, the starter): `llama_memory_seq_rm(mem, seq, p, -1)` cuts the KV cache;
  any depth.
- `native` (POCKET's hybrid `qwen35moe`, and `qwen35`): with `llama_context_params.n_rs_seq`
  = R > 0 llama.cpp keeps, per sequence, R + 1 rows of each recurrent layer's state and writes
  the state after each of the last R + 1 tokens of a batch into them (its ubatch split keeps a
  sequence's trailing R + 1 tokens together, `llama_memory_recurrent::init_batch`).
  `llama_memory_seq_rm(mem, seq, p, -1)` then moves the cell's position back and marks the
  row to continue from (`llama_memory_recurrent::seq_rm`: rollback = pos - (p - 1) must be in
  1..R, and a pending rollback is single-use: one between two decodes), and the hybrid memory
  cuts the attention KV after it. The next decode starts from that row. llama.cpp honours
  n_rs_seq only for the architectures `llm_arch_supports_rs_rollback` lists (QWEN35,
  QWEN35MOE in 0.3.36); elsewhere the context clamps it to 0 (`llama_n_rs_seq` says 0).
  Cost: R more copies of the recurrent state (POCKET: ~63 MB each). `new_llama(n_rs_seq=R)`
  asks for it.
- `snapshot` (any other recurrent or hybrid model, or n_rs_seq 0): the recurrent part is
  copied before the batch (`state.LlamaState.snapshot`, llama.cpp's partial sequence state),
  restored after it with the KV cut at p0, and the accepted tokens are decoded again: the loop
  re-decodes positions `redo_from`..p - 1.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ContextManager

from pocketchat.engines.llamacpp.state import SEQ, LlamaState
from pocketchat.errors import EngineError

# llama.cpp's allow-list for native recurrent rollback (llm_arch_supports_rs_rollback, 0.3.36)
NATIVE_ARCHES = frozenset({"qwen35", "qwen35moe"})


@dataclass(frozen=True)
class Undo:
    """What `Rollback.roll_back` did: the state now holds positions < `redo_from`; the loop
    decodes the kept tokens from `redo_from` up to the kept end again (none unless `snapshot`)."""

    redo_from: int


class Rollback:
    """Rolls sequence `seq` of a llama.cpp context back after a verification batch."""

    def __init__(self, ctx: Any, model: Any, seq: int = SEQ,
                 lock: ContextManager | None = None) -> None:
        state = self._state = LlamaState(ctx, model, seq, lock)  # snapshots, for "snapshot"
        self.seq = seq
        self._lib, self._mem, self._lock = state._lib, state._mem, state._lock
        recurrent = state.partial
        self.depth_native = int(self._lib.llama_n_rs_seq(ctx)) if recurrent else 0
        if not recurrent:
            self.kind = "kv"
        elif self.depth_native > 0:
            self.kind = "native"
        else:
            self.kind = "snapshot"
        self._saved: tuple[Any, int] | None = None  # (partial state, its position)

    @property
    def depth(self) -> int:
        """The most positions one rollback may take back (kv and snapshot: any)."""
        return self.depth_native if self.kind == "native" else sys.maxsize

    def prepare(self, pos: int) -> None:
        """Before a verification batch whose first token lands at `pos` (the state holds
        positions < pos): the snapshot kind copies the recurrent state here."""
        if self.kind == "snapshot":
            buf, _ = self._state.snapshot()
            self._saved = (buf, pos)

    def roll_back(self, keep: int) -> Undo:
        """Keep positions < `keep`, remove the rest of the sequence."""
        lib = self._lib
        if self.kind != "snapshot":
            with self._lock:
                top = int(lib.llama_memory_seq_pos_max(self._mem, self.seq))
                if keep > top:
                    return Undo(keep)  # everything was accepted
                if self.kind == "native" and top + 1 - keep > self.depth_native:
                    raise EngineError(f"a rollback of {top + 1 - keep} positions is deeper than "
                                      f"the {self.depth_native} recurrent snapshots kept")
                if not lib.llama_memory_seq_rm(self._mem, self.seq, keep, -1):
                    raise EngineError(f"llama.cpp could not roll sequence {self.seq} back to "
                                      f"position {keep} ({self.kind})")
            return Undo(keep)
        if self._saved is None:
            raise EngineError("a rollback without a snapshot taken before the batch")
        buf, pos = self._saved
        self._saved = None
        with self._lock:
            top = int(lib.llama_memory_seq_pos_max(self._mem, self.seq))
        if keep > top:
            return Undo(keep)
        self._state.restore(buf, pos)  # the recurrent part at pos, the KV cut there
        return Undo(pos)

