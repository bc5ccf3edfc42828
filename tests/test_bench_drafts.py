"""`pocketchat bench` with drafts: a plan that drafts (`--draft auto|ngram`) gets, on its tg
rows and in --json, the tokens each step that verified a draft emitted and how many drafted
tokens were accepted; a plan without drafts keeps its table as it was. The rows from the
scripted engine (fast), and the CLI on the starter model (slow)."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys

import pytest
from support.scripted_engine import Reply, ScriptedEngine

from pocketchat.commands import bench
from pocketchat.engines.types import EngineInfo
from pocketchat.types import LoadPlan

STORY = " ".join(f"word{i}" for i in range(40))
INFO = EngineInfo(backend="llama.cpp", model="Scripted-1B", placement="CPU, 2 threads", n_ctx=4096)


def plan(draft: str) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=4096,
                    n_threads=2, n_threads_batch=2, draft=draft)


class Choice:
    label = "Scripted-1B"
    path = "/models/scripted.gguf"


def tg(per_step: float, reps: int = 2) -> bench.Result:
    engine = ScriptedEngine([Reply(STORY, draft_per_step=per_step)])
    return bench.bench_tg(engine, 40, reps, random.Random(1))


def test_tg_sums_the_draft_figures_of_its_runs():
    r = tg(2.5)
    # 40 tokens a run at 2.5 a step: 16 steps, 24 accepted, 64 drafted (the script drafts 4)
    assert (r.draft_steps, r.accepted, r.drafted) == (32, 48, 128)
    assert r.tokens_per_step == 2.5
    assert r.draft_cell() == "2.50/step (48/128 accepted)"
    assert tg(0.0).draft_cell() == "-" and tg(0.0).tokens_per_step == 0.0


def test_the_table_has_a_draft_column_only_when_the_plan_drafts():
    pp = bench.Result("pp512", 512, [900.0, 910.0])
    drafted = bench._table("Scripted-1B", 2**30, [(plan("ngram"), INFO, [pp, tg(2.5)])])
    head, _, pp_row, tg_row = drafted.splitlines()
    assert "| draft" in head
    assert pp_row.rstrip(" |").endswith("-")  # prompt reading verifies no drafts
    assert "2.50/step (48/128 accepted)" in tg_row
    plain = bench._table("Scripted-1B", 2**30, [(plan("off"), INFO, [pp, tg(0.0)])])
    assert "draft" not in plain


def test_json_tg_results_carry_the_draft_counts():
    args = argparse.Namespace(in_process=False)
    pp = bench.Result("pp512", 512, [900.0])
    data = bench._json(Choice(), 2**30, args, (plan("auto"), INFO, [pp, tg(2.5)]))
    assert data["draft"] == "auto"
    rows = {x["test"]: x for x in data["results"]}
    assert "draft" not in rows["pp512"]
    assert rows["tg40"]["draft"] == {"steps": 32, "drafted_tokens": 128, "accepted_tokens": 48,
                                     "tokens_per_step": 2.5}
    off = bench._json(Choice(), 2**30, args, (plan("off"), INFO, [pp, tg(0.0)]))
    assert off["draft"] == "off" and all("draft" not in x for x in off["results"])


@pytest.mark.slow
def test_bench_with_ngram_drafts_on_the_starter_reports_them():
    r = subprocess.run([sys.executable, "-m", "pocketchat", "bench", "--model", "starter",
                        "--draft", "ngram", "-p", "32", "-n", "96", "-r", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["draft"] == "ngram"
    row = next(x for x in data["results"] if x["test"] == "tg96")
    d = row["draft"]
    assert d["steps"] > 0 and d["drafted_tokens"] >= d["accepted_tokens"] >= 0
    assert d["tokens_per_step"] == round((d["accepted_tokens"] + d["steps"]) / d["steps"], 2)
    table = subprocess.run([sys.executable, "-m", "pocketchat", "bench", "--model", "starter",
                            "--draft", "ngram", "-p", "32", "-n", "96", "-r", "1"],
                           capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr
    tg_row = next(line for line in table.stdout.splitlines() if "tg96" in line)
    assert "/step (" in tg_row and "accepted)" in tg_row
