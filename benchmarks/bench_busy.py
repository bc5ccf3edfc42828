"""Decode speed on a busy machine: pocketchat's adapting threads against fixed counts (issue #34).

For each model (the starter, and the full-size synthetic POCKET when given), in one run:
1. pocketchat through the worker (`bench`'s and the chat's path), the plan's threads adapting:
   decode tok/s quiet, beside 1 and beside 2 busy processes, with the thread moves it reported;
   then a busy process that stops: the seconds until the count is back at the plan's;
2. a bare llama-cpp-python loop (llama_decode of one token, argmax), loaded with the same
   settings (pocketchat's loader, so the same weight buffers), at each fixed thread count
   from 1 to the plan's, in the same three conditions: the best of them is the best fixed
   count in hindsight.
The busy processes are `while True` loops of their own (bounded: each stops by itself after
`--busy-limit` seconds, and is stopped when its part ends). One model is loaded at a time.
Speeds are llama.cpp's own decode counters (as `bench`). Run it alone on the machine:

    python benchmarks/bench_busy.py \
        --model starter --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

_root = str(Path(__file__).resolve().parents[1])
if _root not in sys.path:
    sys.path.insert(0, _root)

BUSY_CODE = """import time
end = time.monotonic() + {limit}
while True:
    if time.monotonic() > end:
        break
"""


class Busy:
    """`n` busy processes while inside (each a bounded `while True` loop)."""

    def __init__(self, n: int, limit: float) -> None:
        self.n, self.limit = n, limit
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Busy":
        self.start()
        return self

    def start(self) -> None:
        code = BUSY_CODE.format(limit=self.limit)
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(0.3)  # scheduled before the measurement starts

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []

    def __exit__(self, *exc) -> None:
        self.stop()


def answer(engine, tokens: int, seen: list | None = None):
    """One answer of exactly `tokens` tokens; its last chunk. `seen` gets (time, threads,
    recent tok/s, note) of each chunk."""
    from pocketchat.engines.types import ChatOptions, Message

    last = None
    msg = Message("user", f"{time.time_ns() % 10**9} Write a long story about a lighthouse.")
    for chunk in engine.chat([msg], ChatOptions(max_tokens=tokens, ignore_eos=True, seed=1)):
        last = chunk
        if seen is not None:
            s = chunk.stats
            seen.append((time.monotonic(), s.threads, s.recent_tok_s, s.threads_note))
    if last is None or last.finish_reason == "error":
        raise SystemExit(f"the answer failed: {last.error if last else 'no output'}")
    return last


def pocketchat_part(plan, path: Path, name: str, tokens: int, limit: float) -> dict:
    """Through the worker: quiet, beside 1 and 2 busy processes; then a busy process that stops."""
    from pocketchat.engines import open_engine

    engine = open_engine(plan, path, name=name)
    out: dict = {}
    try:
        answer(engine, tokens)  # warm-up (as long as the bare loop's: the same pages touched)
        for busy in (0, 1, 2):
            seen: list = []
            with Busy(busy, limit):
                last = answer(engine, tokens, seen)
            notes = []
            for _, _, _, note in seen:
                if note and (not notes or notes[-1] != note):
                    notes.append(note)
            out[busy] = {"tok_s": last.stats.decode_tok_s, "threads_end": last.stats.threads,
                         "moves": notes}
            print(f"  pocketchat, {busy} busy: {last.stats.decode_tok_s:.2f} tok/s "
                  f"(threads at the end {last.stats.threads}; {'; '.join(notes) or 'no moves'})",
                  flush=True)
        answer(engine, max(4, tokens // 4))  # quiet again: the count goes back up
        out["stop"] = stop_part(engine, plan.n_threads, limit)
    finally:
        engine.close()
    return out


def stop_part(engine, full: int, limit: float) -> dict:
    """A busy process starts mid-answer and stops once the count went down: seconds until the
    count is back at `full` (from the stop), and the recent tok/s shown along the way."""

    from pocketchat.engines.types import ChatOptions, Message

    seen: list = []
    busy = Busy(1, limit)
    marks: dict = {}
    stop_after = 6.0  # seconds beside the busy process

    def watch(chunk) -> None:
        now = time.monotonic()
        s = chunk.stats
        seen.append((now, s.threads, s.recent_tok_s, s.threads_note))
        if "busy" not in marks and len(seen) > 3:
            busy.start()
            marks["busy"] = time.monotonic()
        elif "stop" not in marks and "busy" in marks and now - marks["busy"] >= stop_after:
            busy.stop()
            marks["stop"] = time.monotonic()
        elif "stop" in marks and "back" not in marks and s.threads == full:
            marks["back"] = now

    msg = Message("user", "Write a very long story about a lighthouse keeper.")
    stream = engine.chat([msg], ChatOptions(max_tokens=100000, ignore_eos=True, seed=1))
    deadline = None
    try:
        for chunk in stream:
            watch(chunk)
            if "back" in marks and deadline is None:
                deadline = marks["back"] + 2.0
            if "stop" in marks and time.monotonic() - marks["stop"] > 30.0:
                break  # not back within 30 s: give up
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        busy.stop()
        engine.cancel()
        for _ in stream:  # the answer ends (cancelled)
            pass
    lowest = min((t for _, t, _, _ in seen if "busy" in marks), default=full)
    back = marks["back"] - marks["stop"] if "back" in marks and "stop" in marks else None
    t0 = seen[0][0] if seen else 0.0
    trace = [(round(t - t0, 2), n, round(r, 2)) for t, n, r, _ in seen]
    print(f"  pocketchat, a busy process for {stop_after:.0f} s mid-answer: down to {lowest} "
          f"thread(s); back to {full} "
          + (f"{back:.1f} s after it stopped" if back is not None else "NOT within 30 s"),
          flush=True)
    return {"lowest": lowest, "back_seconds": back, "busy_at": marks.get("busy", t0) - t0,
            "stop_at": marks.get("stop", t0) - t0, "trace": trace}


def bare_part(plan, path: Path, tokens: int, limit: float) -> dict:
    """The bare loop at each fixed count, in each condition: {busy: {threads: tok/s}}."""
    import llama_cpp as lib
    import numpy as np

    from pocketchat.engines.llamacpp.load import load_llama
    from pocketchat.modelfile import gguf

    llm = load_llama(plan, path, gguf.check_gguf(path)).llm
    ctx, n_vocab = llm.ctx, llm.n_vocab()
    batch = lib.llama_batch_init(1, 0, 1)
    rng = np.random.default_rng(0)

    def decode(tok: int, pos: int) -> None:
        batch.token[0], batch.pos[0], batch.n_seq_id[0] = tok, pos, 1
        batch.seq_id[0][0], batch.logits[0], batch.n_tokens = 0, 1, 1
        if lib.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    def loop(threads: int) -> float:
        lib.llama_set_n_threads(ctx, threads, threads)
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        pos = 0
        for t in rng.integers(300, n_vocab - 16, 4):
            decode(int(t), pos)
            pos += 1
        lib.llama_synchronize(ctx)
        lib.llama_perf_context_reset(ctx)
        for _ in range(tokens):
            logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            decode(int(np.argmax(logits)), pos)
            pos += 1
        lib.llama_synchronize(ctx)
        p = lib.llama_perf_context(ctx)
        return p.n_eval / (p.t_eval_ms / 1000)

    out: dict = {}
    try:
        loop(plan.n_threads)  # warm-up
        for busy in (0, 1, 2):
            out[busy] = {}
            with Busy(busy, limit):
                for threads in range(plan.n_threads, 0, -1):
                    out[busy][threads] = loop(threads)
            print(f"  bare loop, {busy} busy: " + ", ".join(
                f"{n} thread{'s' if n > 1 else ''} {v:.2f}" for n, v in sorted(out[busy].items())),
                flush=True)
    finally:
        lib.llama_batch_free(batch)
        llm.close()
    return out


def chat_part(spec: str, full: int, limit: float, busy_at: float = 15.0, busy_for: float = 40.0,
              after: float = 25.0) -> dict:
    """The real chat in tmux: one long answer; a busy process from `busy_at` s for `busy_for` s;
    the status bar read every second (its tok/s and its thread note)."""
    import os
    import re
    import shlex
    import uuid

    sock = f"bench-busy-{uuid.uuid4().hex[:8]}"

    def tmux(*a: str) -> str:
        return subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", *a], capture_output=True,
                              text=True, timeout=15).stdout

    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    env.update(TERM="xterm-256color", PYTHONPATH=_root, HF_HUB_OFFLINE="1")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    line = (f"env -i {exports} {shlex.quote(sys.executable)} -m pocketchat --offline --no-think "
            f"--model {shlex.quote(spec)}; sleep 5")
    tmux("new-session", "-d", "-s", "b", "-x", "160", "-y", "30", line)
    speed = re.compile(r"(\d+\.\d) tok/s")
    rows = []
    busy = Busy(1, limit)
    try:
        deadline = time.monotonic() + 600
        while "Ready" not in tmux("capture-pane", "-p", "-t", "b"):
            if time.monotonic() > deadline:
                raise SystemExit("the chat did not load")
            time.sleep(0.5)
        tmux("send-keys", "-t", "b", "-l", "Write a very long story about a lighthouse keeper.")
        tmux("send-keys", "-t", "b", "Enter")
        t0 = time.monotonic()
        state = "quiet"
        while time.monotonic() - t0 < busy_at + busy_for + after:
            t = time.monotonic() - t0
            if state == "quiet" and t >= busy_at:
                busy.start()
                state = "busy"
            elif state == "busy" and t >= busy_at + busy_for:
                busy.stop()
                state = "after"
            bar = [x for x in tmux("capture-pane", "-p", "-t", "b").splitlines() if "TTFT" in x]
            m = speed.search(bar[-1]) if bar else None
            note = re.search(r"\d+ of \d+ threads: [a-z ]+", bar[-1]) if bar else None
            rows.append((round(t, 1), state, float(m.group(1)) if m else 0.0,
                         note.group(0).strip() if note else ""))
            time.sleep(1.0)
    finally:
        busy.stop()
        tmux("kill-server")
    for state in ("quiet", "busy", "after"):
        shown = [r[2] for r in rows if r[1] == state and r[2] > 0]
        print(f"  chat, {state}: status bar {min(shown, default=0):.1f}-{max(shown, default=0):.1f}"
              f" tok/s, median {sorted(shown)[len(shown) // 2] if shown else 0:.1f}; notes: "
              + "; ".join(sorted({r[3] for r in rows if r[1] == state and r[3]})), flush=True)
    return {"rows": rows, "busy_at": busy_at, "busy_for": busy_for}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], metavar="X",
                    help="a model spec (starter, a .gguf path); repeat (default: starter)")
    ap.add_argument("--tokens", type=int, default=0,
                    help="tokens per measurement (default: 128 for the starter, 32 otherwise)")
    ap.add_argument("--busy-limit", type=float, default=300.0,
                    help="seconds after which a busy process stops by itself (default 300)")
    ap.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    ap.add_argument("--chat", action="store_true",
                    help="only the real chat in tmux: a busy process mid-answer, the status "
                         "bar read every second")
    args = ap.parse_args()
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection

    figures = {}
    for spec in args.model or ["starter"]:
        choice = choose_model(Selection(model=spec, offline=True))
        plan = choice.plan
        tokens = args.tokens or (128 if choice.starter else 32)
        if args.chat:
            print(f"{choice.label}: the chat in tmux", flush=True)
            figures[choice.label] = {"chat": chat_part(spec, plan.n_threads, args.busy_limit)}
            continue
        print(f"{choice.label}: plan {plan.describe()}, {tokens} tokens per figure", flush=True)
        pc = pocketchat_part(plan, choice.path, choice.label, tokens, args.busy_limit)
        bare = bare_part(plan, choice.path, tokens, args.busy_limit)
        rows = []
        for busy in (0, 1, 2):
            best_n, best = max(bare[busy].items(), key=lambda kv: kv[1])
            at_plan = bare[busy][plan.n_threads]
            ours = pc[busy]["tok_s"]
            rows.append({"busy": busy, "pocketchat": ours, "bare_plan": at_plan,
                         "bare": bare[busy], "best_threads": best_n, "best": best,
                         "vs_best": ours / best, "vs_bare_plan": ours / at_plan,
                         "moves": pc[busy]["moves"]})
        figures[choice.label] = {"plan_threads": plan.n_threads, "tokens": tokens, "rows": rows,
                                 "stop": pc["stop"]}
        print(f"\n{choice.label} decode tok/s (plan: {plan.n_threads} threads)")
        print("| busy | pocketchat | bare @plan | " + " | ".join(
            f"bare @{n}" for n in range(1, plan.n_threads + 1))
              + " | best fixed | vs best | vs bare @plan |")
        print("|---" * (6 + plan.n_threads) + "|")
        for r in rows:
            print(f"| {r['busy']} | {r['pocketchat']:.2f} | {r['bare_plan']:.2f} | "
                  + " | ".join(f"{r['bare'][n]:.2f}" for n in range(1, plan.n_threads + 1))
                  + f" | {r['best']:.2f} ({r['best_threads']}) | {r['vs_best']:.2f} | "
                    f"{r['vs_bare_plan']:.2f} |")
        stop = pc["stop"]
        back = stop["back_seconds"]
        print(f"busy process stopped mid-answer: back to {plan.n_threads} threads "
              + (f"in {back:.1f} s" if back is not None else "not within 30 s") + "\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
