"""Flash attention on a CPU: llama.cpp's decode time per token with it on and off, after a short
and a long context, alternating (bare llama-cpp-python, the plan's threads and batch).

    python benchmarks/bench_flash.py [--model starter|PATH]
        [--contexts 64,2048] [--tokens 24] [--rounds 2] [--threads 2]

The plan's flash attention is the fit's (`select/fit.py`: on a GPU, off on a CPU), drafting
or not (`bench_context.py` measures it with drafts at long contexts). This prints what it
would cost on a CPU: per context, ms per decoded token with flash attention off and on, each
round's and the median, and on/off. For POCKET at full size write the synthetic first
(`python benchmarks/pocket_scale.py --write-only --out PATH`) and pass `--model PATH`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from rawdecode import decode_run  # noqa: E402


def decode_ms(path: Path, flash: bool, context: int, tokens: int, threads: int) -> float:
    """ms per token of `tokens` single-token decodes after `context` tokens of prompt."""
    import llama_cpp as lib

    from pocketchat.engines.llamacpp.load import new_llama

    n_batch = 512
    llm = new_llama(path, n_ctx=context + tokens + 16, n_batch=n_batch, n_ubatch=n_batch,
                    n_threads=threads, n_threads_batch=threads, flash_attn=flash, verbose=False)
    batch = lib.llama_batch_init(n_batch, 0, 1)
    n_vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(llm.model)))
    ids = [300 + (i * 7919) % max(n_vocab - 600, 1) for i in range(context + tokens)]

    def decode(part: list[int], pos: int) -> None:
        decode_run(lib, llm.ctx, batch, part, pos)

    try:
        for at in range(0, context, n_batch):
            decode(ids[at:min(at + n_batch, context)], at)
        lib.llama_synchronize(llm.ctx)
        began = time.perf_counter()
        for k in range(tokens):
            decode([ids[context + k]], context + k)
        lib.llama_synchronize(llm.ctx)
        return (time.perf_counter() - began) / tokens * 1000
    finally:
        lib.llama_batch_free(batch)
        llm.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="starter", help="starter or a .gguf path")
    p.add_argument("--contexts", default="64,2048", help="prompt tokens before the decodes")
    p.add_argument("--tokens", type=int, default=24, help="decodes timed at each context")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    from pocketchat.store.starter import starter_path

    path = starter_path() if a.model == "starter" else Path(a.model)
    contexts = [int(c) for c in a.contexts.split(",") if c.strip()]
    print(f"{path.name}: {a.threads} threads, {a.tokens} decodes after each context, "
          f"{a.rounds} rounds alternating off/on")
    ms: dict[tuple[int, bool], list[float]] = {}
    for _ in range(a.rounds):
        for context in contexts:
            for flash in (False, True):
                ms.setdefault((context, flash), []).append(
                    decode_ms(path, flash, context, a.tokens, a.threads))
    print(f"{'context':>8} {'off ms/tok':>11} {'on ms/tok':>10} {'on/off':>7}  rounds (off | on)")
    for context in contexts:
        off, on = ms[(context, False)], ms[(context, True)]
        m_off, m_on = statistics.median(off), statistics.median(on)
        rounds = " ".join(f"{x:.1f}" for x in off) + " | " + " ".join(f"{x:.1f}" for x in on)
        print(f"{context:>8} {m_off:>11.1f} {m_on:>10.1f} {m_on / m_off:>7.3f}  {rounds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
