"""The wait for the first word of an answer after a thought, in the chat in a real terminal.

    env PYTHONPATH=. .venv/bin/python benchmarks/bench_think_tmux.py \
        --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf [--threads 2] [--press-after 5]

`pocketchat --model M` (thinking on, this machine's default budget) runs in a tmux pane. A
question is typed and sent; the screen is read every 0.1 s for: the thought's folded title
("Thinking · N tokens · S s"), the title saying how the thought ended, and the first visible
character of the answer under it. Then a second question in a new chat, with Ctrl+T ("answer
now") pressed --press-after seconds after Enter. Prints for each: seconds from Enter to the
thought's title, to its end and to the answer's first word; the thought's tokens and the budget
(the status bar's "think N/B").

A model whose weights never close a thought (the synthetic POCKET's random ones) shows the
budget at work: the engine closes the thought when it reaches the budget.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from terminal import SIZE, Tmux, end_process  # noqa: E402

TITLE = re.compile(r"Thinking · ([\d,]+) tokens(?: · ([\d.]+) s)?( · ended [a-z ]+)?")
BUDGET = re.compile(r"think ([\d,]+)/([\d,]+)")
QUESTIONS = ("Why is the sky blue? Answer in two sentences.",
             "What makes a sunset red? Answer in two sentences.")


def answer_started(screen: str) -> bool:
    """Whether visible text follows the (last) thought's title in the chat log."""
    lines = screen.splitlines()
    at = max((i for i, line in enumerate(lines) if TITLE.search(line)), default=None)
    if at is None:
        return False
    for line in lines[at + 1:]:
        text = line.strip(" ▏▕│┃|█")
        if not text:
            continue
        # the prompt box, the status bar and the key bar close the log
        return not (BUDGET.search(line) or "tok/s" in line or line.lstrip().startswith(("^", "▔", "▁", "─", "╭", "┌")))
    return False


def one(tmux: Tmux, question: str, press_after: float | None, timeout: float) -> dict:
    tmux("send-keys", "-t", "app", "-l", question)
    sent = time.monotonic()
    tmux("send-keys", "-t", "app", "Enter")
    marks: dict = {}
    budget = None
    pressed = None
    while time.monotonic() - sent < timeout:
        screen = tmux.screen()
        now = time.monotonic() - sent
        if (b := BUDGET.search(screen)):
            budget = b.group(2)
        t = TITLE.search(screen)
        if t and "title" not in marks:
            marks["title"] = now
        if t and t.group(3) and "ended" not in marks:
            marks["ended"], marks["tokens"], marks["how"] = now, t.group(1), t.group(3).strip(" ·")
        if "title" in marks and answer_started(screen):
            marks["answer"] = now
            marks["screen"] = screen
            marks.setdefault("tokens", t.group(1) if t else "?")
            break
        if press_after is not None and pressed is None and now >= press_after:
            tmux("send-keys", "-t", "app", "C-t")
            pressed = now
        time.sleep(0.1)
    marks["budget"] = budget
    marks["pressed"] = pressed
    marks.setdefault("screen", tmux.screen())
    return marks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--press-after", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--think", default="on", help="--think for the chat (default: on)")
    ap.add_argument("--show", action="store_true", help="print the screen as each answer began")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="think-tmux-"))
    env = {"POCKETCHAT_DATA_DIR": str(home / "data"), "PYTHONPATH": str(REPO),
           "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color",
           **{k: v for k, v in os.environ.items() if k == "POCKETCHAT_CACHE_DIR"}}
    cmd = [sys.executable, "-m", "pocketchat", "--model", args.model, "--think", args.think]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    words = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    tmux = Tmux()
    tmux("new-session", "-d", "-s", "app", "-x", str(SIZE[0]), "-y", str(SIZE[1]),
         f"cd {shlex.quote(str(REPO))} && exec env {words} {shlex.join(cmd)}")
    pid = int(tmux("display-message", "-p", "-t", "app", "#{pane_pid}").strip())
    try:
        tmux.wait(lambda s: s[0] == "Ready", 600, "the model to load")
        rows = []
        for label, question, press in (("default budget", QUESTIONS[0], None),
                                       (f"Ctrl+T after {args.press_after:g} s", QUESTIONS[1],
                                        args.press_after)):
            if rows:
                tmux("send-keys", "-t", "app", "C-n")
                tmux.wait(lambda s: s[0] == "Ready" and s[2] == 0, 60, "a new chat")
            marks = one(tmux, question, press, args.timeout)
            rows.append((label, marks))
            if "answer" not in marks:
                print(f"{label}: no answer on screen after {args.timeout:.0f} s:\n{marks['screen']}")
                return 1
            tmux("send-keys", "-t", "app", "Escape")  # measured: the rest of the answer is not
            tmux.wait(lambda s: s[0] in ("Ready", "Stopped"), 120, "the answer to stop")
        print(f"{'':<22} {'title':>7} {'ended':>7} {'answer':>7}  thought")
        for label, m in rows:
            ended = f"{m['ended']:7.1f}" if "ended" in m else "      -"
            print(f"{label:<22} {m['title']:7.1f} {ended} {m['answer']:7.1f}  {m['tokens']} tokens"
                  f" of a budget of {m['budget'] or '?'} ({m.get('how', 'ended by itself')})")
        print("(seconds from Enter: the thought's title on screen, its end, the answer's first word)")
        if args.show:
            for label, m in rows:
                print(f"--- {label}: the screen when the answer began ---\n{m['screen']}")
    finally:
        try:
            tmux("send-keys", "-t", "app", "C-q")
            time.sleep(1.0)
        except RuntimeError:
            pass
        tmux.kill()
        end_process(pid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
