"""--ui-nice: the UI's threads yield to the engine; an engine (re)started later keeps its priority."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="threads have their own nice value on Linux only")]

SCRIPT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from support.scripted_engine import Factory, ScriptedEngine
from support.uitools import make, ready, run
seen = []

class Recording(Factory):
    def __call__(self):
        seen.append(os.getpriority(os.PRIO_PROCESS, 0))  # what a worker spawned here inherits
        return super().__call__()

async def scenario():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    app, _, _ = make(factory=Recording(ScriptedEngine()), ui_nice=5)
    async with app.run_test() as pilot:
        await ready(pilot)
        ui = os.getpriority(os.PRIO_PROCESS, 0)
        await pilot.press("ctrl+r")
        await ready(pilot)
    print(json.dumps({"base": base, "ui": ui, "engine_starts": seen}))

run(scenario())
"""


def test_ui_nice_lowers_the_ui_but_not_the_engine_it_starts(tmp_path):
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)]),
           "POCKETCHAT_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tests)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    base = figures["base"]
    assert figures["ui"] == min(19, base + 5)
    assert figures["engine_starts"] == [base, base]  # the restart after lowering too
