"""A bare llama.cpp token loop over one sequence, with and without drafts (tests and
benchmarks/bench_draft.py): llama-cpp-python's low-level calls only, so what it shows is
llama.cpp's, not pocketchat's loop (which wires the same parts: `engines/draft/`,
`engines/llamacpp/rollback.py`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from pocketchat.engines.draft.policy import DraftPolicy
from pocketchat.engines.draft.verify import accept
from pocketchat.engines.llamacpp.rollback import Rollback


class RawSeq:
    """Sequence 0 of a `Llama`'s context: decode a batch, read its logits."""

    def __init__(self, llm: Any, capacity: int = 512) -> None:
        import llama_cpp as lib

        self.lib = lib
        self.llm = llm
        self.ctx = llm._ctx.ctx
        self.model = llm._model.model
        self.mem = lib.llama_get_memory(self.ctx)
        self.n_vocab = lib.llama_n_vocab(lib.llama_model_get_vocab(self.model))
        self.capacity = capacity
        self.batch = lib.llama_batch_init(capacity, 0, 1)
        self.pos = 0  # positions the state holds

    def close(self) -> None:
        if self.batch is not None:
            self.lib.llama_batch_free(self.batch)
            self.batch = None

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.mem, True)
        self.pos = 0

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> None:
        """Append `tokens` at the state's end; logits at the last (or every) position."""
        b = self.batch
        for start in range(0, len(tokens), self.capacity):
            part = tokens[start:start + self.capacity]
            last = start + len(part) == len(tokens)
            b.n_tokens = len(part)
            for i, t in enumerate(part):
                b.token[i] = int(t)
                b.pos[i] = self.pos + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = 1 if (all_logits and last) or (last and i == len(part) - 1) else 0
            rc = self.lib.llama_decode(self.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            self.pos += len(part)

    def logits(self, i: int) -> np.ndarray:
        """The logits at batch index `i` of the last decode (-1: its last output)."""
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def argmax(self, i: int) -> int:
        return int(np.argmax(self.logits(i)))

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.lib.llama_model_get_vocab(self.model), token))


def _ended(seq: RawSeq, out: list[int], n: int, stop: bool) -> bool:
    return len(out) >= n or (stop and seq.is_eog(out[-1]))


def _cut(seq: RawSeq, out: list[int], n: int, stop: bool) -> list[int]:
    out = out[:n]
    if stop:
        for i, t in enumerate(out):
            if seq.is_eog(t):
                return out[:i + 1]
    return out


def plain_greedy(seq: RawSeq, prompt: Sequence[int], n: int, *, stop: bool = False,
                 times: list[float] | None = None) -> list[int]:
    """n tokens (fewer: up to an end-of-generation token with `stop`), one decode each (the
    first from the prompt's logits); each decode's seconds appended to `times`."""
    seq.clear()
    seq.decode(prompt)
    out = [seq.argmax(-1)]
    while not _ended(seq, out, n, stop):
        t0 = time.perf_counter()
        seq.decode([out[-1]])
        out.append(seq.argmax(-1))
        if times is not None:
            times.append(time.perf_counter() - t0)
    return out


@dataclass
class SpecRun:
    tokens: list[int]
    steps: int = 0  # decodes after the prompt
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0
    per_step: list[tuple[int, int, float]] = field(default_factory=list)  # (k, accepted, s)


def speculative_greedy(seq: RawSeq, rollback: Rollback, prompt: Sequence[int], n: int,
                       draft: Callable[[list[int], int], list[int]], k: int, *,
                       policy: DraftPolicy | None = None, stop: bool = False) -> SpecRun:
    """n tokens by greedy speculative decoding: `draft(tokens_so_far, k)` proposes, one batch
    verifies (logits at every position), `verify.accept` keeps, `rollback` takes the rest back.
    With `policy`, it picks how many of the proposed tokens to verify (0: a plain step) and
    learns from each step and from the drafts it did not verify."""
    seq.clear()
    seq.decode(prompt)
    history = list(prompt)
    out = [seq.argmax(-1)]
    run = SpecRun(out)
    shadows: list[tuple[int, list[int]]] = []  # (len(out) when proposed, proposal)
    t0 = time.perf_counter()
    while not _ended(seq, out, n, stop):
        proposal = draft(history + out, min(k, rollback.depth, n - len(out)))
        if policy is not None:
            chosen = policy.choose(len(proposal))
            if chosen == 0 and proposal:
                shadows.append((len(out), proposal))
            proposal = proposal[:chosen]
        start = seq.pos  # where out[-1] lands
        rollback.prepare(start)
        s0 = time.perf_counter()
        seq.decode([out[-1]] + proposal, all_logits=True)
        verdict = accept(proposal, seq.argmax)
        keep = start + 1 + verdict.accepted
        undo = rollback.roll_back(keep)
        seq.pos = undo.redo_from
        if undo.redo_from < keep:  # the snapshot kind: decode the kept tokens again
            redo = ([out[-1]] + proposal)[undo.redo_from - start:keep - start]
            seq.decode(redo)
        seconds = time.perf_counter() - s0
        run.per_step.append((len(proposal), verdict.accepted, seconds))
        out.extend(verdict.tokens)
        if policy is not None:
            policy.record(len(proposal), verdict.accepted, seconds)
            while shadows and len(out) - shadows[0][0] >= len(shadows[0][1]):
                at, proposal = shadows.pop(0)
                policy.shadow(proposal, out[at:at + len(proposal)])
        run.steps += 1
        run.drafted += len(proposal)
        run.accepted += verdict.accepted
    run.seconds = time.perf_counter() - t0
    run.tokens = _cut(seq, out, n, stop)
    return run
