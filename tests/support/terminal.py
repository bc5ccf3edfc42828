"""The real CLI in a real terminal: a private tmux server, the command line that starts
pocketchat in a pane with this test's environment, and the starter chat loaded in one."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from support import REPO


class Tmux:
    """One tmux server on a private socket, so the test never touches the user's sessions."""

    def __init__(self) -> None:
        self.socket = f"pocketchat-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=15)
        if check and done.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {done.stderr}")
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "e2e")

    def wait_for(self, condition, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if condition(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")
            time.sleep(0.2)

    def kill(self) -> None:
        self("kill-server", check=False)


def command(tmp_path: Path, args: str, extra_env: dict[str, str] | None = None) -> tuple[str, Path]:
    exit_file = tmp_path / "exit-code"
    env = {var: os.environ[var] for var in ("POCKETCHAT_DATA_DIR", "POCKETCHAT_CACHE_DIR",
                                            "POCKETCHAT_CONFIG_DIR", "HF_HOME",
                                            "HF_HUB_CACHE", "HF_ENDPOINT", "PATH", "HOME")
           if var in os.environ}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), TERM="xterm-256color")
    env.update(extra_env or {})
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    pid_file = tmp_path / "pid"
    command = (f"cd {shlex.quote(str(REPO))} && env -i {exports} sh -c 'echo $$ > {pid_file}; exec "
               f"{shlex.quote(sys.executable)} -m pocketchat {args}'; "
               f"echo $? > {shlex.quote(str(exit_file))}; sleep 60")
    return command, exit_file


def wait_file(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return path.exists()


def ready(s: str) -> bool:
    return "ctx " in s and "Ready" in s


@contextmanager
def starter_chat(tmp_path: Path, extra: str = "", size: tuple[int, int] = (110, 34)
                 ) -> Iterator[tuple[Tmux, Path]]:
    """The chat on the starter model (and `extra` arguments) in a tmux pane of `size` columns
    and rows, loaded; (tmux, the exit-code file)."""
    pytest.importorskip("llama_cpp")
    line, exit_file = command(tmp_path, f"--model starter --no-think {extra}".strip())
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", str(size[0]), "-y", str(size[1]), line)
        tmux.wait_for(ready, 90, "the starter model to load")
        yield tmux, exit_file
    finally:
        tmux.kill()


def scripted_chat(tmp_path: Path, reply: dict, size: tuple[int, int]) -> tuple[Tmux, Path]:
    """The real chat app in a tmux pane on a scripted engine whose reply is `reply`
    (`support.uitools.run_scripted_chat`'s spec: text, thinking, delay...); (tmux, exit file)."""
    import json

    spec = tmp_path / "reply.json"
    spec.write_text(json.dumps(reply))
    exit_file = tmp_path / "exit-code"
    env = {var: os.environ[var] for var in ("POCKETCHAT_DATA_DIR", "POCKETCHAT_CACHE_DIR", "HOME", "PATH")
           if var in os.environ}
    env.update(PYTHONPATH=f"{REPO}:{REPO / 'tests'}", TERM="xterm-256color")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    code = f"from support.uitools import run_scripted_chat; run_scripted_chat({str(spec)!r})"
    line = (f"cd {shlex.quote(str(REPO))} && env -i {exports} {shlex.quote(sys.executable)} -c "
            f"{shlex.quote(code)}; echo $? > {shlex.quote(str(exit_file))}; sleep 60")
    tmux = Tmux()
    tmux("new-session", "-d", "-s", "e2e", "-x", str(size[0]), "-y", str(size[1]), line)
    return tmux, exit_file
