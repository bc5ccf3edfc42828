"""bench_ui.py's real-terminal mode: `python -m pocketchat --model starter` in tmux, as a user runs it.

The app runs in a tmux pane (a real terminal: escape sequences written, parsed and drawn by
tmux). Each app answer is `--bench-tokens N` tokens (ignore EOS, seed 1: `pocketchat bench`'s
tg settings); its tok/s is read off the line under the answer when it ends ("512 tokens · 84.2
tok/s": the whole answer's decode rate, as `bench`'s tg figure is; the status bar's figure is
the last seconds', at the answer's longest context, which on a small model whose attention
grows with the context reads lower at the end than the answer's whole). Between app answers,
`pocketchat bench -n N -r 1` runs once on the same model, context and threads, so both see the
same load on the machine. The UI process's CPU time (all its threads, not the worker's) over
each answer, divided by the tokens, is its cost per generated token.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Write a long story about a lighthouse keeper and a storm."
STATUS = re.compile(r"^\s*(\w[\w ]*?)\s{2,}(\d+(?:\.\d+)?|–) tok/s\s.*?\s(\d+) tokens\s")
FOOTER = re.compile(r"(\d[\d,]*) tokens · (\d+(?:\.\d+)?) tok/s")
SIZE = (110, 32)


class Tmux:
    """One tmux server on a private socket (never the user's sessions)."""

    def __init__(self) -> None:
        self.socket = f"pocketchat-bench-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "app")

    def status(self) -> tuple[str, float | None, int] | None:
        """(state, tok/s, tokens) from the app's status bar, or None when not on screen."""
        for line in reversed(self.screen().splitlines()):
            m = STATUS.match(line)
            if m:
                speed = None if m.group(2) == "–" else float(m.group(2))
                return m.group(1).strip(), speed, int(m.group(3))
        return None

    def answer_rate(self) -> float | None:
        """The last answer's decode tok/s, from the line under it, or None when not on screen."""
        for line in reversed(self.screen().splitlines()):
            m = FOOTER.search(line)
            if m:
                return float(m.group(2))
        return None

    def wait(self, test, timeout: float, what: str, every: float = 0.5):
        deadline = time.monotonic() + timeout
        while True:
            value = self.status()
            if value is not None and test(value):
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; the screen:\n{self.screen()}")
            time.sleep(every)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=15)


def end_process(pid: int) -> None:
    """Make sure a process started in a pane is gone (a closed pane does not always end it)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        time.sleep(1.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Series:
    tokens: int
    bench: list[float] = field(default_factory=list)
    app: list[float] = field(default_factory=list)
    cpu_per_token: list[float] = field(default_factory=list)

    def row(self, label: str) -> str:
        b, a = statistics.median(self.bench), statistics.median(self.app)
        ms = statistics.median(self.cpu_per_token) * 1000
        runs = " ".join(f"{x:.0f}/{y:.0f}" for x, y in zip(self.app, self.bench, strict=False))
        paired = statistics.median(x / y for x, y in zip(self.app, self.bench, strict=False))
        return (f"{label:<28} {b:7.1f} {a:7.1f} {a / b:7.3f} {paired:7.3f} {ms:9.2f}"
                f"   app/bench per run: {runs}")


def bench_once(tokens: int, ctx: int, env: dict[str, str]) -> float:
    cmd = [sys.executable, "-m", "pocketchat", "bench", "--model", "starter", "--ctx", str(ctx),
           "-p", "16", "-n", str(tokens), "-r", "1", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"pocketchat bench failed: {done.stderr.strip()[-500:]}")
    results = json.loads(done.stdout)["results"]
    return next(float(r["tok_s"]) for r in results if str(r["test"]).startswith("tg"))


class TerminalApp:
    """The chat in a tmux pane; one answer of `tokens` tokens per `answer()`."""

    def __init__(self, tokens: int, ctx: int, env: dict[str, str], extra: list[str]) -> None:
        self.tokens = tokens
        self.tmux = Tmux()
        cmd = [sys.executable, "-m", "pocketchat", "--model", "starter", "--ctx", str(ctx),
               "--bench-tokens", str(tokens), *extra]
        env_words = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                             if k.startswith(("POCKETCHAT_", "HF_", "PYTHONPATH", "UI_")))
        line = f"cd {shlex.quote(str(REPO))} && exec env {env_words} {shlex.join(cmd)}"
        self.tmux("new-session", "-d", "-s", "app", "-x", str(SIZE[0]), "-y", str(SIZE[1]), line)
        self.pid = int(self.tmux("display-message", "-p", "-t", "app", "#{pane_pid}").strip())
        self.tmux.wait(lambda s: s[0] == "Ready", 180, "the model to load")

    def answer(self, expect: float = 0.0) -> tuple[float, float, float]:
        """(the answer's tok/s, the status bar's, UI CPU seconds per generated token) for one
        new answer.

        `expect`: about how long the answer takes (seconds); the screen is not read before 90%
        of it has passed, since each `tmux capture-pane` is a process of its own that takes CPU
        from the model while it decodes (the runs of `pocketchat bench` have no such reader).
        """
        self.tmux("send-keys", "-t", "app", "C-n")
        self.tmux.wait(lambda s: s[0] == "Ready" and s[2] == 0, 30, "a new chat")
        before = cpu_seconds(self.pid)
        self.tmux("send-keys", "-t", "app", "-l", PROMPT)
        self.tmux("send-keys", "-t", "app", "Enter")
        time.sleep(0.9 * expect)
        state = self.tmux.wait(lambda s: s[0] in ("Ready", "Stopped") and s[2] >= self.tokens,
                               120 + self.tokens, "the answer to end", every=0.5)
        used = cpu_seconds(self.pid) - before
        return self.tmux.answer_rate() or 0.0, state[1] or 0.0, used / max(1, state[2])

    def close(self) -> None:
        try:
            self.tmux("send-keys", "-t", "app", "C-q")
            time.sleep(1.0)
        except RuntimeError:
            pass
        self.tmux.kill()
        end_process(self.pid)


def measure(tokens: int, runs: int, ctx: int,
            variants: dict[str, list[str]]) -> dict[str, Series]:
    """Alternate `pocketchat bench` and one answer of each app variant (its extra arguments);
    round 0 warms up and is not counted."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    series = {label: Series(tokens) for label in variants}
    apps: dict[str, TerminalApp] = {}
    try:
        for label, extra in variants.items():
            apps[label] = TerminalApp(tokens, ctx, env, extra)
        for i in range(runs + 1):
            b = bench_once(tokens, ctx, env)
            for label, app in apps.items():
                a, _, cpu = app.answer(expect=tokens / b if b > 0 else 0.0)
                if i:
                    series[label].bench.append(b)
                    series[label].app.append(a)
                    series[label].cpu_per_token.append(cpu)
    finally:
        for app in apps.values():
            app.close()
    return series


HEADER = (f"{'tmux, 110x32':<28} {'bench':>7} {'app':>7} {'ratio':>7} {'paired':>7} {'UI ms/tok':>9}"
          "   (tok/s medians; ratio: of the medians, paired: median of each round's\n"
          f"{'':<28} app/bench; goal >= 0.95; UI ms/tok: the UI process's CPU over each whole answer)")
