"""Does the chat slow the model? Decode tok/s shown by the app vs the same engine headless.

Runs the starter model (SmolLM2-135M, llama.cpp in its worker process) with the same prompt,
settings and number of tokens (ignore_eos: exactly --tokens each time) twice:
  headless  engine.chat() iterated in a plain loop on a second engine (what `pocketchat
            bench` measures; its own figure is printed too when that command exists)
  app       the Textual app driven headless through run_test(): prompt typed, answer
            streamed into Markdown at the app's bounded rate; the tok/s read off the status bar
alternating one answer each, so both see the same load on the machine, and prints both
medians and their ratio (goal: app / headless >= 0.95).

The real-terminal mode (benchmarks/terminal.py) runs `python -m pocketchat --model starter`
in tmux as a user does, reads tok/s off its status bar, alternates with `pocketchat bench` on
the same settings, and measures the UI process's CPU per generated token; once with --tokens
and once with a long answer (--long, 1,500 tokens by default); each round answers once with the
UI at normal priority and once with its threads niced (--ui-nice, the chat's hidden flag).
benchmarks/ui_cost.py gives the UI's CPU per token apart from any model (scripted engine).

    PYTHONPATH=. python benchmarks/bench_ui.py [--mode all|pilot|tmux] [--runs 5] [--tokens 256]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_ui.py --runs 5 --tokens 256 --long 1500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

PROMPT = "Write a short story about a lighthouse keeper and a storm."
TOK_S = re.compile(r"(\d+(?:\.\d+)?) tok/s")


def choose(ctx: int):
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection

    args = Selection(model="starter", ctx=ctx, offline=True, yes=True)
    return choose_model(args)


def options(tokens: int):
    from pocketchat.engines.types import ChatOptions

    return ChatOptions(max_tokens=tokens, temperature=0.0, seed=1, thinking=False,
                       ignore_eos=True)


def headless_run(engine, tokens: int) -> float:
    from pocketchat.engines.types import Message

    last = None
    for chunk in engine.chat([Message("user", PROMPT)], options(tokens)):
        last = chunk
    return last.stats.decode_tok_s if last is not None else 0.0


def measure(choice, runs: int, tokens: int) -> tuple[list[float], list[float], list[float]]:
    """Alternate headless and in-app answers, so both see the same load on the machine."""
    from support.uitools import ready, send, status_text

    from pocketchat.engines import open_engine
    from pocketchat.ui.app import create_app
    from pocketchat.ui.streaming import CHUNK_INTERVAL

    base: list[float] = []
    shown: list[float] = []
    engine_said: list[float] = []

    async def scenario() -> None:
        plain = open_engine(choice.plan, choice.path, name=choice.name)
        app = create_app(lambda: open_engine(choice.plan, choice.path, name=choice.name,  # as the chat opens it
                                             chunk_interval=CHUNK_INTERVAL),
                         thinking=False, options=options(tokens))
        try:
            async with app.run_test(size=(110, 34)) as pilot:
                await ready(pilot, timeout=120)
                for i in range(runs + 1):  # run 0 warms both engines and is not counted
                    figure = await asyncio.to_thread(headless_run, plain, tokens)
                    await pilot.press("ctrl+n")
                    await send(pilot, PROMPT)
                    while app.stream is not None:  # a lazy wait: polling costs CPU too
                        await asyncio.sleep(0.2)
                    await pilot.pause()
                    if i == 0:
                        continue
                    base.append(figure)
                    match = TOK_S.search(status_text(app))
                    shown.append(float(match.group(1)) if match else 0.0)
                    engine_said.append(app.conversation.messages[-1].stats["decode_tok_s"])
        finally:
            plain.close()

    asyncio.run(scenario())
    return base, shown, engine_said


def pocketchat_bench(tokens: int, ctx: int) -> float | None:
    """`pocketchat bench --model starter`'s generation figure (tg<tokens>), same settings."""
    if not (REPO / "pocketchat" / "commands" / "bench.py").exists():
        return None
    cmd = [sys.executable, "-m", "pocketchat", "bench", "--model", "starter", "--ctx", str(ctx),
           "-n", str(tokens), "-r", "3", "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        results = json.loads(done.stdout)["results"]
        return next(float(r["tok_s"]) for r in results if str(r["test"]).startswith("tg"))
    except (subprocess.TimeoutExpired, OSError, ValueError, KeyError, StopIteration) as exc:
        print(f"(pocketchat bench gave no figure: {exc})")
        return None


def terminal_mode(a: argparse.Namespace) -> None:
    """The app in tmux vs `pocketchat bench`: a normal and a long answer (figures as they come)."""
    import terminal

    variants = {"app": ["--ui-nice", "0"]}
    for step in a.ui_nice:
        variants[f"app, UI nice +{step}"] = ["--ui-nice", str(step)]
    print(f"real terminal: the starter model, ctx {a.ctx}, {a.runs} runs (+1 warm-up); each round "
          f"`pocketchat bench -n N -r 1`, then one answer of each: {', '.join(variants)}", flush=True)
    print(terminal.HEADER, flush=True)
    long_ctx = max(a.ctx, a.long + 512)
    for tokens, runs, ctx in ((a.tokens, a.runs, a.ctx), (a.long, a.long_runs or a.runs, long_ctx)):
        if tokens > 0 and runs > 0:
            for label, series in terminal.measure(tokens, runs, ctx, variants).items():
                print(series.row(f"{tokens} tok, {label}"), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--skip-bench-command", action="store_true")
    p.add_argument("--mode", choices=["all", "pilot", "tmux"], default="all",
                   help="pilot: the app through run_test(); tmux: in a real terminal; all: both")
    p.add_argument("--long", type=int, default=1500, metavar="N",
                   help="tmux mode: tokens of the long answer (0: none; default 1500)")
    p.add_argument("--ui-nice", type=int, nargs="*", default=[10], metavar="N",
                   help="tmux mode: also an app whose UI threads are this much nicer (default 10;\n"
                        "none: --ui-nice with no value)")
    p.add_argument("--long-runs", type=int, default=None, metavar="N",
                   help="tmux mode: runs of the long answer (default: --runs)")
    p.add_argument("--threads", type=int, default=None,
                   help="model threads (default: the plan's, the physical cores); fewer than the\n"
                        "cores leaves one for the UI, which shows what the UI costs by itself")
    a = p.parse_args()
    os.environ.setdefault("POCKETCHAT_DATA_DIR", tempfile.mkdtemp(prefix="pocketchat-bench-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    t0 = time.monotonic()
    if a.mode in ("all", "tmux"):
        terminal_mode(a)
    if a.mode == "tmux":
        print(f"({time.monotonic() - t0:.0f} s)")
        return 0
    choice = choose(a.ctx)
    if a.threads:
        from dataclasses import replace

        choice = replace(choice, plan=replace(choice.plan, n_threads=a.threads, n_threads_batch=a.threads))
        a.skip_bench_command = True
    print(f"model {choice.name}; {choice.plan.describe()}; ctx {a.ctx}; "
          f"{a.tokens} tokens x {a.runs} runs (+1 warm-up each)")
    base, shown, engine_said = measure(choice, a.runs, a.tokens)
    bench = None if a.skip_bench_command else pocketchat_bench(a.tokens, a.ctx)
    h, s = statistics.median(base), statistics.median(shown)
    print(f"headless engine loop : {h:7.1f} tok/s  (runs: {', '.join(f'{x:.1f}' for x in base)})")
    if bench is not None:
        print(f"pocketchat bench     : {bench:7.1f} tok/s")
    print(f"shown in the app     : {s:7.1f} tok/s  (runs: {', '.join(f'{x:.1f}' for x in shown)})")
    print(f"engine's own figure  : {statistics.median(engine_said):7.1f} tok/s  (the same answers, as saved)")
    print(f"ratio app / headless : {s / h:7.3f}  (of the medians; goal >= 0.95)")
    paired = statistics.median(x / y for x, y in zip(shown, base, strict=False))
    print(f"paired               : {paired:7.3f}  (median of each round's app / headless)")
    if bench:
        print(f"ratio app / bench    : {s / bench:7.3f}")
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
