"""After multiprocessing's resource tracker dies, Ctrl+R still restarts the engine
(it failed every time with "bad value(s) in fds_to_keep" inside the chat, when the worker was
spawned through multiprocessing; it is now launched as its own interpreter, which needs no
tracker: `process.launch`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parent

# Run in its own process: it kills that process's resource tracker.
SCRIPT = r'''
import asyncio, os, signal
from multiprocessing import resource_tracker

from support.engine_makers import llama_plan
from support.uitools import SIZE, answered, ready, screen_text, send, wait_for
from pocketchat.engines.worker.parent import WorkerEngine
from pocketchat.store.starter import starter_path
from pocketchat.ui.app import create_app


def factory():
    return WorkerEngine(llama_plan(512), starter_path())


async def scenario():
    app = create_app(factory, memory_probe=lambda: 1)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, timeout=120)
        first = app.engine
        tracker = resource_tracker._resource_tracker._pid
        os.kill(tracker, signal.SIGKILL)  # as the out-of-memory killer or a stray `kill` would
        os.waitpid(tracker, 0)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: (app.engine is not None and app.engine is not first)
                       or "Could not start" in screen_text(app), timeout=120, what="the restart")
        assert app.engine is not None, screen_text(app)
        await send(pilot, "Say hi.")
        await answered(pilot, timeout=120)
        print("RESTARTED", app.engine.pid != first.pid)


asyncio.run(scenario())
'''


def test_ctrl_r_restarts_the_engine_after_the_resource_tracker_died(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=400,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0 and "RESTARTED True" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert "fds_to_keep" not in done.stdout + done.stderr
