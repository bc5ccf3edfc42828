"""Decode speed with a JSON schema enforced vs unconstrained, on the starter (llama.cpp).

Run: python benchmarks/bench_constrain.py [--runs 5] [--tokens 128] [--threads 2]
Loads the starter (SmolLM2-135M) in this process and answers the same question the two ways,
alternating (constrained first, then unconstrained, `--runs` times): unconstrained with
`ignore_eos` for exactly `--tokens` tokens; constrained with a JSON schema (an object with a
title and a `story` of at least 2000 characters, so the answer runs to the cap too). Prints each run's decode tok/s (llama.cpp's
own counters), the median of each, their ratio (goal: at least 0.9) and what the constraint
costs per token: llguidance filling the token mask and the mask applied to the logits
(`TokenControl.mask_seconds` / masked tokens; also in this thread's CPU time, which a busy
machine does not inflate).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 60},
                                           "story": {"type": "string", "minLength": 2000}},
          "required": ["title", "story"], "additionalProperties": False}
QUESTION = "Write a long story about a dragon who learns to bake bread, as JSON."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.store.starter import starter_path
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                    n_threads=args.threads, n_threads_batch=args.threads)
    engine = LlamaCppEngine(plan, starter_path(), name="starter")
    question = [Message("user", QUESTION)]
    free = ChatOptions(max_tokens=args.tokens, ignore_eos=True, temperature=0)
    schema = ChatOptions(max_tokens=args.tokens, temperature=0, response_format={
        "type": "json_schema", "json_schema": {"name": "story", "schema": SCHEMA}})
    for opts in (free, schema):  # warm up: the prompt cached, llguidance's tokenizer built
        list(engine.chat(question, opts))
    speeds: dict[str, list[float]] = {"json schema": [], "unconstrained": []}
    mask_ms: list[float] = []
    mask_cpu_ms: list[float] = []
    for run in range(args.runs):
        for label, opts in (("json schema", schema), ("unconstrained", free)):
            final = list(engine.chat(question, opts))[-1]
            s = final.stats
            speeds[label].append(s.decode_tok_s)
            extra = ""
            if opts is schema:
                control = engine._control
                per = control.mask_seconds / max(control.masked_tokens, 1) * 1000
                cpu = control.mask_cpu_seconds / max(control.masked_tokens, 1) * 1000
                mask_ms.append(per)
                mask_cpu_ms.append(cpu)
                extra = (f"  mask {per:.3f} ms/token wall, {cpu:.3f} ms CPU, over "
                         f"{control.masked_tokens} tokens")
            print(f"run {run + 1} {label:13s} {s.generated_tokens:4d} tokens "
                  f"{s.decode_tok_s:7.1f} tok/s ({final.finish_reason}){extra}")
    engine.close()
    med = {k: statistics.median(v) for k, v in speeds.items()}
    ratio = med["json schema"] / med["unconstrained"] if med["unconstrained"] else 0.0
    per_token = statistics.median(mask_ms)
    cpu_token = statistics.median(mask_cpu_ms)
    print(f"\nmedian decode: json schema {med['json schema']:.1f} tok/s, unconstrained "
          f"{med['unconstrained']:.1f} tok/s")
    print(f"ratio json schema / unconstrained: {ratio:.3f} (goal >= 0.9)")
    print(f"constraint cost: {per_token:.3f} ms per token wall, {cpu_token:.3f} ms CPU (medians), "
          f"{per_token / (1000 / med['unconstrained']) * 100:.1f}% of an unconstrained token's "
          f"{1000 / med['unconstrained']:.2f} ms")


if __name__ == "__main__":
    main()
