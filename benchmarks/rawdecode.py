"""One llama_decode of a token run on sequence 0, logits for its last token only: the bare
loop that the benchmarks time the engine against (bench_overhead's `Bare`, bench_flash)."""

from __future__ import annotations

from typing import Any, Sequence


def decode_run(lib: Any, ctx: Any, batch: Any, tokens: Sequence[int], pos: int) -> None:
    """Decode `tokens` at positions pos.. in one batch (at most the batch's size)."""
    for j, tok in enumerate(tokens):
        batch.token[j], batch.pos[j], batch.n_seq_id[j] = tok, pos + j, 1
        batch.seq_id[j][0], batch.logits[j] = 0, 0
    batch.logits[len(tokens) - 1] = 1
    batch.n_tokens = len(tokens)
    if lib.llama_decode(ctx, batch) != 0:
        raise RuntimeError("llama_decode failed")
