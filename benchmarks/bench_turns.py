"""Ten chat turns, pocketchat against llama-cpp-python's own `create_chat_completion`.

On the tiny random-weight `qwen35moe` GGUF (POCKET's hybrid architecture, tests/support/tinyqwen35.py)
and on the starter model (SmolLM2-135M, attention only): the same conversation (user messages
of about 150 tokens, greedy answers capped at 32 tokens; pocketchat's answers are the history
both are sent), thinking on (the templates' default). Turns alternate between the two, so the
machine's load hits both alike. Per turn: tokens evaluated before the first answer token
(llama.cpp's own counters) and the time to first token, and the runtime's floor: the time bare
llama.cpp (or mlx-lm) takes to evaluate the same new tokens at the same position (the attention over a
longer context makes every turn a little slower; that part is the model's, not pocketchat's).

The toy `qwen3_5_moe` MLX model (mlx-lm on the CPU) runs the same ten turns, pocketchat only.

    python benchmarks/bench_turns.py [--turns 10] [--threads 2] [--repeat 3] [--json]
                                     [--only qwen35moe|starter|mlx]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from pocketchat.commands.bench import WORDS  # noqa: E402
from pocketchat.engines.llamacpp.engine import LlamaCppEngine  # noqa: E402
from pocketchat.engines.answer.render import plan_prompt  # noqa: E402
from pocketchat.engines.llamacpp.load import new_llama  # noqa: E402
from pocketchat.engines.types import ChatOptions, Message  # noqa: E402
from pocketchat.types import LoadPlan  # noqa: E402

ANSWER = 32


def _counted(perf) -> tuple[int, float]:
    """(tokens, milliseconds) llama.cpp evaluated since its last reset (each count is at
    least 1 in its report, so a count whose time is zero is really zero)."""
    n = (perf.n_p_eval if perf.t_p_eval_ms > 0 else 0) + (perf.n_eval if perf.t_eval_ms > 0 else 0)
    return n, perf.t_p_eval_ms + perf.t_eval_ms


def user_text(rng: random.Random, k: int, n_words: int) -> str:
    return f"Message {k}: " + " ".join(rng.choice(WORDS) for _ in range(n_words))


OPTIONS = ChatOptions(temperature=0.0, max_tokens=ANSWER)


def pocketchat_turn(eng: LlamaCppEngine, messages: list[Message]) -> tuple[str, int, float, list[int]]:
    prompt = plan_prompt(eng, tuple(messages), OPTIONS).tokens
    text, final = [], None
    for final in eng.chat(messages, OPTIONS):
        text.append(final.text)
    assert final is not None and final.finish_reason in ("stop", "length"), final and final.error
    return "".join(text), final.stats.evaluated_tokens, final.stats.ttft_seconds or 0.0, prompt


def floor_seconds(llm, prompt: list[int], evaluated: int, tries: int = 3) -> float:
    """llama.cpp alone: the time to evaluate the last `evaluated` tokens of `prompt` after the
    rest (at the same position, so attention over the same context), and sample one token;
    the best of `tries`."""
    best = float("inf")
    for _ in range(tries):
        llm.reset()
        llm._ctx.kv_cache_clear()
        llm.eval(prompt[: len(prompt) - evaluated])
        started = time.perf_counter()
        llm.eval(prompt[len(prompt) - evaluated:])
        llm.sample(temp=0.0)
        best = min(best, time.perf_counter() - started)
    return best


def llama_cpp_turn(llm, messages: list[Message]) -> tuple[int, float]:
    import llama_cpp

    llama_cpp.llama_perf_context_reset(llm.ctx)
    started = time.perf_counter()
    evaluated, ttft = 0, 0.0
    stream = llm.create_chat_completion([{"role": m.role, "content": m.content} for m in messages],
                                        max_tokens=ANSWER, temperature=0.0, stream=True)
    for chunk in stream:
        if not ttft and chunk["choices"] and chunk["choices"][0]["delta"].get("content") is not None:
            ttft = time.perf_counter() - started
            evaluated = _counted(llama_cpp.llama_perf_context(llm.ctx))[0]
    return evaluated, ttft


def bench_model(name: str, path: Path, turns: int, threads: int) -> list[dict]:
    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=4096,
                    n_threads=threads, n_threads_batch=threads)
    eng = LlamaCppEngine(plan, path, name=name)
    llm = new_llama(path, n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_gpu_layers=0)
    bare = new_llama(path, n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_gpu_layers=0)
    rng = random.Random(7)
    per_word = 1.5 if name == "starter" else 6.5  # byte-level vocabulary: ~6.5 tokens a word
    messages: list[Message] = []
    rows = []
    try:
        for k in range(1, turns + 1):
            messages.append(Message("user", user_text(rng, k, round(150 / per_word))))
            answer, ev_pc, ttft_pc, prompt = pocketchat_turn(eng, messages)
            floor = floor_seconds(bare, prompt, ev_pc)
            ev_lcp, ttft_lcp = llama_cpp_turn(llm, messages)
            rows.append({"model": name, "turn": k, "pocketchat_evaluated": ev_pc,
                         "pocketchat_ttft_s": round(ttft_pc, 4), "floor_s": round(floor, 4),
                         "llama_cpp_evaluated": ev_lcp, "llama_cpp_ttft_s": round(ttft_lcp, 4)})
            if answer:
                messages.append(Message("assistant", answer))
    finally:
        eng.close()
        llm.close()
        bare.close()
    return rows


def bench_mlx(turns: int, threads: int) -> list[dict]:
    """The toy `qwen3_5_moe` MLX model (DeltaNet state + KV layers + experts): pocketchat only."""
    from support.mlx_fixture import write_tiny_qwen35_moe
    from pocketchat.engines.mlx.engine import MlxEngine

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_tiny_qwen35_moe(Path(tmp) / "hybrid")
        eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=4096,
                                 n_threads=threads, n_threads_batch=threads), folder)
        rng = random.Random(7)
        messages: list[Message] = []
        rows = []
        try:
            for k in range(1, turns + 1):
                messages.append(Message("user", user_text(rng, k, 30)))
                answer, evaluated, ttft, prompt = pocketchat_turn(eng, messages)
                floor = mlx_floor_seconds(eng._model, prompt, evaluated)
                rows.append({"model": "mlx qwen3_5_moe", "turn": k, "pocketchat_evaluated": evaluated,
                             "pocketchat_ttft_s": round(ttft, 4), "floor_s": round(floor, 4),
                             "llama_cpp_evaluated": None, "llama_cpp_ttft_s": None})
                if answer:
                    messages.append(Message("assistant", answer))
        finally:
            eng.close()
    return rows


def mlx_floor_seconds(model, prompt: list[int], evaluated: int, tries: int = 3, step: int = 512) -> float:
    """mlx-lm alone: the same new tokens after the same context, one forward pass and argmax."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    best = float("inf")
    head, rest = prompt[: len(prompt) - evaluated], prompt[len(prompt) - evaluated:]
    for _ in range(tries):
        cache = make_prompt_cache(model)
        for i in range(0, len(head), step):
            model(mx.array([head[i: i + step]]), cache=cache)
            mx.eval([c.state for c in cache])
        started = time.perf_counter()
        logits = model(mx.array([rest]), cache=cache)
        mx.eval(mx.argmax(logits[:, -1, :], axis=-1))
        best = min(best, time.perf_counter() - started)
    return best


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def table(rows: list[dict]) -> str:
    head = ["model", "turn", "pocketchat eval", "pocketchat TTFT", "runtime floor",
            "llama-cpp-python eval", "llama-cpp-python TTFT"]
    body = [[r["model"], str(r["turn"]), str(r["pocketchat_evaluated"]), _ms(r["pocketchat_ttft_s"]),
             _ms(r["floor_s"]), str(r["llama_cpp_evaluated"] or "-"), _ms(r["llama_cpp_ttft_s"])]
            for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *(line(b) for b in body)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=("qwen35moe", "starter", "mlx"))
    ap.add_argument("--repeat", type=int, default=3,
                    help="run the conversation this many times; each figure is the median")
    args = ap.parse_args()
    from pocketchat.store.starter import starter_path
    from support.tinyqwen35 import QWEN35_TEMPLATE, write_tiny_qwen35moe

    with tempfile.TemporaryDirectory() as tmp:
        models = {"qwen35moe": write_tiny_qwen35moe(Path(tmp) / "tiny-qwen35moe.gguf", chat_template=QWEN35_TEMPLATE),
                  "starter": starter_path()}
        runs: list[list[dict]] = []
        for _ in range(max(args.repeat, 1)):
            rows = []
            for name, path in models.items():
                if args.only in (None, name):
                    rows += bench_model(name, path, args.turns, args.threads)
            if args.only in (None, "mlx"):
                try:
                    rows += bench_mlx(args.turns, args.threads)
                except ImportError as exc:
                    print(f"(the MLX rows are left out: {exc})", file=sys.stderr)
            runs.append(rows)
    rows = medians(runs)
    print(json.dumps(rows, indent=2) if args.json else table(rows) + "\n\n" + growth(rows))
    return 0


def medians(runs: list[list[dict]]) -> list[dict]:
    """Per model and turn, the median of each figure over the runs (None stays None)."""
    import statistics

    out = []
    for i, first in enumerate(runs[0]):
        row = dict(first)
        for key, value in first.items():
            if key not in ("model", "turn") and value is not None:
                row[key] = statistics.median(run[i][key] for run in runs)
        out.append(row)
    return out


def growth(rows: list[dict]) -> str:
    """TTFT of the last turn over turn 2's, for pocketchat and for llama.cpp's own floor."""
    out = []
    for name in dict.fromkeys(r["model"] for r in rows):
        by = {r["turn"]: r for r in rows if r["model"] == name}
        last = max(by)
        if 2 in by and last > 2:
            pc = by[last]["pocketchat_ttft_s"] / max(by[2]["pocketchat_ttft_s"], 1e-9)
            line = f"{name}: TTFT turn {last} / turn 2 = {pc:.2f}"
            if by[2]["floor_s"] and by[last]["floor_s"]:
                fl = by[last]["floor_s"] / max(by[2]["floor_s"], 1e-9)
                line += f" (the bare runtime's floor for the same tokens at the same positions: {fl:.2f})"
            out.append(line)
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
