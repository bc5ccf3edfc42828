"""Find the model's worker process under a pocketchat process (chat or server), to stop it."""

from __future__ import annotations

import time

import psutil


def worker_of(pid: int, timeout: float = 10.0) -> int:
    """The pid of the model's worker under process `pid`: its largest child (the model is in
    it), multiprocessing's resource tracker left out."""
    deadline = time.monotonic() + timeout
    while True:
        kids = [p for p in psutil.Process(pid).children(recursive=True)
                if "resource_tracker" not in " ".join(p.cmdline())]
        if kids:
            return max(kids, key=lambda p: p.memory_info().rss).pid
        if time.monotonic() > deadline:
            raise AssertionError(f"no worker process under {pid}")
        time.sleep(0.1)


def state(pid: int) -> str:
    """The process's state ("stopped", "running", ...), "gone" when it has ended."""
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"
