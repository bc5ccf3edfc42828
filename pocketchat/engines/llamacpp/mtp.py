"""MTP drafts: the multi-token-prediction block a Qwen3.5-family GGUF carries (`nextn`), run by
llama.cpp as a second context over the same model (`LLAMA_CONTEXT_TYPE_MTP`).

The block predicts the token after next from two things: a token and the target model's last
hidden state before it (`h_nextn`, the normed state the LM head reads). So the head follows the
target ("mirror"): after every decode of the target's sequence, the same tokens go through the
MTP context, each paired with the target's hidden state at the position before it (the first
with the state kept from the previous decode), which fills the block's own KV. To draft k
tokens after the last sampled one, the head decodes that token with the target's state at the
position before it, takes the argmax, and goes on from its own hidden state (`draft`); the draft
positions are then removed from its KV, and the verifying decode mirrors them again with the
target's states (llama.cpp's server does the same).

A cut of the target's state (a rejected draft, a new prompt that diverges) cuts the head's KV
at the same position (`cut`, or the next mirror); the state before the cut is kept from the
last decode when it holds that row, else the head starts that position from zeros (its drafts
are a little worse there; a draft is always verified, so the answer is the same). While the
policy has drafts off, the head pauses (`follow(False)`: following costs a few percent of a
step) and keeps only its input for the last `RING` positions; asked to draft again, or to
follow, it fills its KV from those (`_catch_up`) and attends to them alone. A gap it cannot
fill (a prompt restored from the prompt cache) starts it over at the restored position.

The hidden-state accessors are llama.cpp's staging API (`src/llama-ext.h`, C++ names): they
are looked up once in the loaded library, and a library without them has no MTP drafts.
"""

from __future__ import annotations

import ctypes
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

# llama-ext.h's staging functions, by their (Itanium C++) symbol names in libllama
_SET_NEXTN = "_Z26llama_set_embeddings_nextnP13llama_contextbb"
_GET_NEXTN = "_Z26llama_get_embeddings_nextnP13llama_context"
_GET_NEXTN_ITH = "_Z30llama_get_embeddings_nextn_ithP13llama_contexti"
KEEP_ROWS = 16  # rows of a decode's hidden states kept for a cut inside it (a verified draft)
RING = 64  # positions kept while paused, to catch the head up when drafts are tried again


@dataclass(frozen=True)
class Nextn:
    """The staging functions: switch a context's `h_nextn` output on, read its rows."""

    set: Any
    rows: Any
    row: Any


def nextn_api(llama_cpp: Any) -> Nextn | None:
    """The staging functions of the loaded libllama, or None where it lacks them."""
    lib = llama_cpp.llama_cpp._lib
    try:
        set_, rows, row = lib[_SET_NEXTN], lib[_GET_NEXTN], lib[_GET_NEXTN_ITH]
    except (AttributeError, KeyError):
        return None
    f32 = ctypes.POINTER(ctypes.c_float)
    set_.argtypes, set_.restype = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None
    rows.argtypes, rows.restype = [ctypes.c_void_p], f32
    row.argtypes, row.restype = [ctypes.c_void_p, ctypes.c_int32], f32
    return Nextn(set_, rows, row)


def mtp_layers(llama_cpp: Any, model: Any) -> int:
    """MTP blocks the loaded model holds (0: none, or loaded without them)."""
    return max(0, int(llama_cpp.llama_model_n_layer_nextn(model)))


class MtpHead:
    """The MTP context that follows one sequence (0) of a target context (module docstring)."""

    def __init__(self, llama_cpp: Any, api: Nextn, model: Any, target: Any, *, n_ctx: int,
                 n_batch: int, threads: int, threads_batch: int) -> None:
        lib = self._lib = llama_cpp
        self._api, self._target = api, target
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max = 1
        params.n_threads, params.n_threads_batch = threads, threads_batch
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        ctx = lib.llama_init_from_model(model, params)
        if not ctx:
            raise RuntimeError("llama.cpp could not make the MTP context")
        self.ctx = ctx
        self._mem = lib.llama_get_memory(ctx)
        self._batch = lib.llama_batch_ext_init(ctx)
        self.n_embd = int(lib.llama_model_n_embd_out(model))
        self._n_vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model)))
        api.set(target, True, False)  # every row of the target's decodes: the mirror pairs them
        api.set(ctx, True, True)
        self._pending = np.zeros(self.n_embd, np.float32)  # target's state at `next - 1`
        self._rows = np.zeros((0, self.n_embd), np.float32)  # the last decode's states
        self._rows_at = 0  # the position of _rows[0]
        self._end = 0  # the position after the target's last decode
        self._ring: deque[tuple[int, int, np.ndarray]] = deque(maxlen=RING)  # (pos, token, state before)
        self._pos = (ctypes.c_int32 * 1)()
        self.next = 0  # positions [.., next) are in the head's KV
        self.following = True
        self.steps = 0  # draft decodes run (for the figures)
        self.catch_ups = 0

    # -- following the target ------------------------------------------------------------
    def mirror(self, tokens: Sequence[int], pos0: int) -> bool:
        """The target just decoded `tokens` at `pos0`.. (batch rows 0..n-1): the same into the
        head, each with the target's state before it (while it follows; paused, only the last
        `RING` positions are kept for a catch-up). False when llama.cpp refused."""
        n = len(tokens)
        if n == 0:
            return True
        lib, api = self._lib, self._api
        prev = self._state_before(pos0).copy()
        h = np.ctypeslib.as_array(api.rows(self._target), shape=(n, self.n_embd))
        if self.following:
            self._cut_kv(pos0)
            if pos0 != self.next and not self._catch_up(pos0):  # a gap: start over there
                lib.llama_memory_seq_rm(self._mem, 0, -1, -1)
        self._remember(tokens, pos0, prev, h)
        self._pending = h[n - 1].copy()
        self._rows = h[-KEEP_ROWS:].copy()
        self._rows_at = pos0 + n - len(self._rows)
        self._end = pos0 + n
        if not self.following:
            return True
        lib.llama_batch_ext_clear(self._batch)
        for k, tok in enumerate(tokens):
            self._add(int(tok), pos0 + k, prev if k == 0 else h[k - 1], output=False)
        if not self._process():
            return False
        self.next = pos0 + n
        return True

    def follow(self, on: bool) -> None:
        """Follow every decode (drafts may come), or pause (the policy has drafts off: the head
        costs nothing then, and catches up from its last `RING` positions when asked again)."""
        self.following = on

    def cut(self, keep: int) -> None:
        """The target's sequence was cut to its first `keep` tokens."""
        if keep < self._end:
            self._pending = self._state_before(keep).copy()
            self._end = keep
            while self._ring and self._ring[-1][0] >= keep:
                self._ring.pop()
        self._cut_kv(keep)

    def _state_before(self, pos: int) -> np.ndarray:
        """The target's state at `pos - 1` (zeros where it is no longer known)."""
        if pos == self._end:
            return self._pending
        i = pos - 1 - self._rows_at
        return self._rows[i] if 0 <= i < len(self._rows) else np.zeros_like(self._pending)

    def _remember(self, tokens: Sequence[int], pos0: int, prev: np.ndarray, h: np.ndarray) -> None:
        ring = self._ring
        if ring and ring[-1][0] >= pos0:
            while ring and ring[-1][0] >= pos0:
                ring.pop()
        n = len(tokens)
        for k in range(max(0, n - RING), n):
            ring.append((pos0 + k, int(tokens[k]), prev if k == 0 else h[k - 1].copy()))

    def _cut_kv(self, keep: int) -> None:
        if keep < self.next:
            self._lib.llama_memory_seq_rm(self._mem, 0, keep, -1)
            self.next = keep

    def _catch_up(self, pos0: int) -> bool:
        """Fill the head's KV anew from the kept positions that end at `pos0` - 1."""
        entries = [e for e in self._ring if e[0] < pos0]
        if not entries or entries[-1][0] != pos0 - 1 or any(
                b[0] != a[0] + 1 for a, b in zip(entries, entries[1:], strict=False)):
            return False
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, -1, -1)
        self.next = 0
        lib.llama_batch_ext_clear(self._batch)
        for pos, tok, prev in entries:
            self._add(tok, pos, prev, output=False)
        if not self._process():
            return False
        self.next = pos0
        self.catch_ups += 1
        return True

    def _process(self) -> bool:
        lib = self._lib
        if int(lib.llama_process(self.ctx, lib.LLAMA_PROCESS_TYPE_DECODE, self._batch)) != 0:
            lib.llama_memory_seq_rm(self._mem, 0, -1, -1)
            self.next = 0
            return False
        return True

    def _add(self, token: int, pos: int, h: np.ndarray, *, output: bool) -> None:
        lib, b = self._lib, self._batch
        idx = lib.llama_batch_ext_add_token(b, 0, token)
        self._pos[0] = pos
        lib.llama_batch_ext_set_pos(b, idx, self._pos)
        data = h.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        lib.llama_batch_ext_set_embd_token(b, idx, lib.llama_embd(data, 1, self.n_embd))  # copied
        if output:
            lib.llama_batch_ext_set_output_logits(b, idx, True)

    # -- drafting ----------------------------------------------------------------------------
    def draft(self, last: int, pos0: int, k: int) -> list[int]:
        """Up to `k` tokens after `last` (sampled, to be fed at `pos0`): each the head's argmax,
        the next from the head's own state. [] when the head does not follow the target to
        `pos0` (then a plain step runs and the mirror catches up)."""
        if k <= 0 or self._end != pos0 or (self.next != pos0 and not self._catch_up(pos0)):
            return []  # (the target's state before pos0 is not the one kept)
        lib, api = self._lib, self._api
        out: list[int] = []
        h = self._pending
        token = int(last)
        for i in range(k):
            lib.llama_batch_ext_clear(self._batch)
            self._add(token, pos0 + i, h, output=True)
            if int(lib.llama_process(self.ctx, lib.LLAMA_PROCESS_TYPE_DECODE, self._batch)) != 0:
                break
            self.steps += 1
            logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, 0), shape=(self._n_vocab,))
            token = int(logits.argmax())
            out.append(token)
            if i + 1 < k:
                h = np.ctypeslib.as_array(api.row(self.ctx, 0), shape=(self.n_embd,)).copy()
        lib.llama_memory_seq_rm(self._mem, 0, pos0, -1)  # the verifying decode mirrors them again
        return out

    def close(self) -> None:
        lib = self._lib
        if self._batch is not None:
            lib.llama_batch_ext_free(self._batch)
            self._batch = None
        if self.ctx is not None:
            lib.llama_free(self.ctx)
            self.ctx = None


class MtpDrafter:
    """`draft.ngram.Drafter` over an `MtpHead`: it proposes the head's tokens after the sequence's
    last token (the one the step feeds), at the position the target's state reaches."""

    costly = True  # each drafted token is a decode of the head (the policy times it)

    def __init__(self, head: MtpHead) -> None:
        self.head = head
        self._tokens: list[int] = []

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def reset(self, tokens: Sequence[int]) -> None:
        self._tokens = [int(t) for t in tokens]

    def extend(self, tokens: Sequence[int]) -> None:
        self._tokens.extend(int(t) for t in tokens)

    def follow(self, on: bool) -> None:
        self.head.follow(on)

    def propose(self, k: int) -> list[int]:
        seq = self._tokens
        if not seq:
            return []
        return self.head.draft(seq[-1], len(seq) - 1, k)
