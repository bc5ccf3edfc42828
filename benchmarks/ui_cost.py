"""What the chat's UI costs per token, in a real terminal, whatever the model and the machine's load.

The app runs in a tmux pane (110x32) on the tests' scripted engine, which yields a Markdown
answer (paragraphs, a list, a fenced code block, repeated) at a fixed rate (default 100 tok/s).
The UI process's CPU time over the answer, divided by its tokens, is the UI's cost per token:
it should not grow with the answer (50 tokens vs 2,000). CPU time is counted, not wall time,
so the figure holds on a busy machine where tok/s figures do not.

    PYTHONPATH=. python benchmarks/ui_cost.py [--tokens 50 2000] [--rate 100] [--runs 3]
    PYTHONPATH=. python benchmarks/ui_cost.py --serve N RATE   (inside the pane: the app itself)
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).parent))

BLOCKS = [
    "The keeper climbed the stairs as the storm rolled in from the west, counting the steps "
    "the way his father had taught him, one for every ship the light had brought home safely "
    "through the long winter nights when the sea rose higher than the rocks below.",
    "- check the lamp and trim the wick\n- wind the clockwork that turns the lens\n"
    "- write the hour and the weather in the log",
    "```python\ndef beam(angle: float, speed: float) -> float:\n    \"\"\"Where the light points.\"\"\"\n"
    "    return (angle + speed * 0.5) % 360.0\n\n\nfor step in range(12):\n"
    "    print(step, beam(step * 30.0, 2.0))\n```",
    "By midnight the waves broke over the gallery, and the **light** kept turning, *patient* "
    "as ever, while the keeper wrote `all well` in the log and listened to the wind.",
]


def answer_text(tokens: int) -> str:
    """Markdown of about `tokens` scripted tokens (words), blocks repeated."""
    from support.scripted_engine import tokens as split

    parts: list[str] = []
    count = 0
    while count < tokens:
        block = BLOCKS[len(parts) % len(BLOCKS)]
        parts.append(block)
        count += len(split(block + "\n\n"))
    text = "\n\n".join(parts)
    return "".join(split(text)[:tokens])


def serve(tokens: int, rate: float) -> None:
    """Run the chat app on a scripted engine that answers `tokens` tokens at `rate` a second."""
    from support.scripted_engine import Factory, Reply, ScriptedEngine

    from pocketchat.ui.app import create_app

    engine = ScriptedEngine([Reply(answer_text(tokens))], delay=1.0 / rate,
                            seconds_per_token=1.0 / rate)
    create_app(Factory(engine), thinking=False).run()


def measure(tokens: int, rate: float, runs: int) -> list[float]:
    """UI CPU milliseconds per token, one figure per answer (a fresh chat each time)."""
    import terminal

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env_words = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                         if k.startswith(("POCKETCHAT_", "HF_", "PYTHONPATH", "UI_")))
    from support.scripted_engine import tokens as split

    expected = len(split(answer_text(tokens)))
    tmux = terminal.Tmux()
    line = (f"cd {shlex.quote(str(REPO))} && exec env {env_words} {shlex.quote(sys.executable)} "
            f"benchmarks/ui_cost.py --serve {tokens} {rate}")
    tmux("new-session", "-d", "-s", "app", "-x", str(terminal.SIZE[0]),
         "-y", str(terminal.SIZE[1]), line)
    pid = int(tmux("display-message", "-p", "-t", "app", "#{pane_pid}").strip())
    try:
        tmux.wait(lambda s: s[0] == "Ready", 60, "the app to start")
        figures = []
        for _ in range(runs):
            tmux("send-keys", "-t", "app", "C-n")
            tmux.wait(lambda s: s[0] == "Ready" and s[2] == 0, 30, "a new chat")
            before = terminal.cpu_seconds(pid)
            tmux("send-keys", "-t", "app", "-l", "Tell me a story")
            tmux("send-keys", "-t", "app", "Enter")
            done = tmux.wait(lambda s: s[0] == "Ready" and s[2] >= expected,
                             60 + 3 * tokens / rate, "the answer to end", every=1.0)
            figures.append((terminal.cpu_seconds(pid) - before) / done[2] * 1000)
        return figures
    finally:
        tmux.kill()
        terminal.end_process(pid)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=[50, 2000])
    p.add_argument("--rate", type=float, default=100.0, help="scripted tokens a second")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--serve", type=float, nargs=2, metavar=("TOKENS", "RATE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    import tempfile

    os.environ.setdefault("POCKETCHAT_DATA_DIR", tempfile.mkdtemp(prefix="pocketchat-uicost-"))
    if a.serve:
        serve(int(a.serve[0]), a.serve[1])
        return 0
    print(f"UI CPU per token, scripted engine at {a.rate:.0f} tok/s, tmux 110x32, {a.runs} runs each")
    for tokens in a.tokens:
        t0 = time.monotonic()
        ms = measure(tokens, a.rate, a.runs)
        print(f"{tokens:6d} tokens: {statistics.median(ms):6.2f} ms/token  "
              f"(runs: {', '.join(f'{x:.2f}' for x in ms)}; {time.monotonic() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
