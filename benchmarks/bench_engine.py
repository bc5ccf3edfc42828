"""pocketchat's engine vs a bare llama-cpp-python loop vs llama-cpp-python's defaults, in one run.

    PYTHONPATH=. python benchmarks/bench_engine.py [--model FILE.gguf] [-n 128] [-p 512] [-r 3]

All three run the starter model (or --model) and are timed the same way, by the wall clock
as the consumer sees it: generation tok/s = tokens decoded after the first one appeared /
seconds from the first token to the last; prompt tok/s from llama.cpp's counters.
  pocketchat  WorkerEngine (child process, coalesced chunks over a pipe), the plan's settings
  bare        llama_cpp.Llama with the same settings, `for tok in llm.generate(...)`, same sampler
  defaults    llama_cpp.Llama(model_path) with its defaults (n_threads = cores // 2, n_ctx 512)
Goal: pocketchat / bare >= 0.98.  The engine's guards (engines/llamacpp/load.new_llama: the AMX
weight-buffer workaround, llama.cpp#20824) apply to all three, or the bare runs would crash there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pocketchat.engines.types import ChatOptions, Message  # noqa: E402
from pocketchat.types import LoadPlan  # noqa: E402

PROMPT = "Write a long story about a lighthouse keeper and the sea."


def plan_for(n_threads: int, n_ctx: int) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=n_threads, n_threads_batch=n_threads)


def pocketchat_once(eng, i: int, n_gen: int) -> float:
    first = None
    msgs = [Message("user", f"{i} {PROMPT}")]
    for chunk in eng.chat(msgs, ChatOptions(max_tokens=n_gen, ignore_eos=True, seed=1)):
        if first is None:
            first = time.perf_counter()
            first_tokens = chunk.stats.generated_tokens
        last = chunk
    end = time.perf_counter()
    # tokens decoded after the first chunk arrived (generated_tokens counts llama.cpp decodes)
    return (last.stats.generated_tokens - first_tokens) / (end - first)


def _llama(path: Path, **kwargs):
    """llama-cpp-python's own `Llama` with the engine's guards (AMX) and nothing else of ours."""
    from pocketchat.engines.llamacpp.load import new_llama

    return new_llama(path, **kwargs)


def bare_once(llm, i: int, n_gen: int, sampling) -> float:
    import llama_cpp

    text = f"<|im_start|>user\n{i} {PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
    n, first = 0, None
    for tok in llm.generate(tokens, top_k=sampling.top_k, top_p=sampling.top_p,
                            min_p=sampling.min_p, temp=sampling.temperature,
                            repeat_penalty=sampling.repeat_penalty):
        n += 1
        if first is None:
            first = time.perf_counter()
        if n >= n_gen:
            last = tok
            break
    llm.eval([last])  # pocketchat decodes the last token too: the same work
    llama_cpp.llama_synchronize(llm._ctx.ctx)
    return n / (time.perf_counter() - first)  # n decodes after the first token appeared


def fmt(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.fmean(xs):7.2f} ± {sd:5.2f}"


def main() -> int:
    from pocketchat.store.starter import starter_path
    from pocketchat.types import Sampling

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    path = args.model or starter_path()
    n_ctx = 2048
    plan = plan_for(args.threads, n_ctx)
    sampling = Sampling()  # LoadPlan's default sampling: the same for all three
    print(f"model {path.name}, tg{args.n_gen}, {args.repetitions} runs each, threads {args.threads}")

    from pocketchat.engines.worker.parent import WorkerEngine

    eng = WorkerEngine(plan, path)
    bare = _llama(path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=args.threads,
                  n_threads_batch=args.threads)
    default = _llama(path)
    runs: dict[str, list[float]] = {"pocketchat": [], "bare": [], "defaults": []}
    try:
        pocketchat_once(eng, -1, 8)  # warm-ups
        bare_once(bare, -1, 8, sampling)
        bare_once(default, -1, 8, sampling)
        for i in range(args.repetitions):  # interleaved, so drift in the machine's load is shared
            runs["pocketchat"].append(pocketchat_once(eng, i, args.n_gen))
            runs["bare"].append(bare_once(bare, i, args.n_gen, sampling))
            runs["defaults"].append(bare_once(default, i, min(args.n_gen, 400), sampling))
    finally:
        eng.close()
    rows = [("pocketchat (worker)", runs["pocketchat"]), ("bare (same settings)", runs["bare"]),
            (f"defaults (n_threads={default.n_threads})", runs["defaults"])]
    bare.close()
    default.close()

    base = statistics.median(rows[1][1])
    print(f"{'engine':28} {'mean ± sd tok/s':>16}  {'median':>7}  median ratio to bare")
    for name, xs in rows:
        med = statistics.median(xs)
        print(f"{name:28} {fmt(xs)}  {med:7.2f}  {med / base:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
