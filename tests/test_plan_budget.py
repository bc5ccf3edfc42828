"""One planner over a budget: optional memory is traded before "nothing fits", and the plan says so.

The hand-made 8 GB laptop (8 GiB total, 7.3 GB available, 4 cores, no GPU) ran the 5.3 GB English
phone build until the estimate counted four recurrent-state checkpoints (0.25 GB at POCKET's size);
it must get that build again, with fewer checkpoints or a smaller context, and say what it gave up.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pocketchat import cli
from pocketchat.select import catalog, defaults, fit
from pocketchat.select import estimate as est
from pocketchat.select.budget import Budget, cpu_budget
from pocketchat.select.ladder import DEFAULT_CTX, MIN_CTX, Step, ladder
from pocketchat.select.profile import load_profile, profile_from_json
from pocketchat.select.report import format_recommendation
from pocketchat.types import MAX_CHECKPOINTS, GiB, Helper

from support import PROFILES
LAPTOP = PROFILES / "laptop-8gb-7gb-free.json"
PHONE_BUILD = "POCKET-EN-iPhone-mix"


def test_the_8gb_laptop_gets_the_english_phone_build_by_giving_up_optional_memory():
    profile = load_profile(LAPTOP)
    assert (profile.ram_total_bytes, profile.ram_available_bytes, profile.cpu_physical_cores) == (
        8 * GiB, 7_300_000_000, 4)
    build = catalog.get(PHONE_BUILD)
    # Not even the smallest context fits with every checkpoint kept: a trade is needed.
    assert fit.choose_fit(build, profile, MIN_CTX, None) is None

    rec = fit.plan(profile, catalog.builds())
    best = rec.recommended
    assert best is not None and best.build.id == PHONE_BUILD
    plan = best.plan
    assert plan.placement == "cpu" and plan.n_threads == 4
    assert plan.checkpoints < MAX_CHECKPOINTS or plan.n_ctx < DEFAULT_CTX
    # The plan's own settings fit the budget it was judged on.
    need = est.memory_need(build, plan.n_ctx, checkpoints=plan.checkpoints, n_batch=plan.n_batch)
    assert need.total <= cpu_budget(profile)
    # It says what it gave up: in the candidate, the plan's notes, the JSON and --recommend.
    assert best.traded and best.gave_up
    words = ", ".join(best.gave_up)
    assert f"{plan.checkpoints} prompt-cache checkpoint" in words and f"context {plan.n_ctx}" in words
    assert any(words in note for note in plan.notes)
    assert rec.to_json()["recommended"]["gave_up"] == list(best.gave_up)
    assert rec.to_json()["recommended"]["checkpoints"] == plan.checkpoints
    assert f"gave up to fit: {words}" in format_recommendation(rec)


def test_recommend_on_the_laptop_prints_what_the_plan_gave_up(capsys):
    assert cli.main(["--recommend", "--hardware", str(LAPTOP)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Recommended: {PHONE_BUILD}")
    gave = next(line for line in out.splitlines() if line.startswith("  gave up to fit: "))
    assert "checkpoint" in gave or "context" in gave


def test_korean_on_the_laptop_gets_the_korean_phone_build():
    rec = fit.plan(load_profile(LAPTOP), catalog.builds(), lang="ko")
    assert rec.recommended.build.id == "POCKET-KR-IQ2_M"


def test_a_build_that_fits_only_by_trading_ranks_after_one_that_fits_whole():
    """Q2_K fits this 16 GB box only with one checkpoint; IQ1_M fits with everything kept."""
    data = json.loads((PROFILES / "linux-16gb.json").read_text())
    q2 = catalog.get("POCKET-35B-Q2_K")
    profile = profile_from_json(data)
    need = est.memory_need(q2, DEFAULT_CTX, checkpoints=1).total
    data["ram_available_bytes"] = profile.ram_available_bytes - cpu_budget(profile) + need
    profile = profile_from_json(data)
    rec = fit.plan(profile, catalog.builds())
    q2c = next(c for c in rec.candidates if c.build.id == q2.id)
    assert q2c.fits and q2c.traded and q2c.plan.checkpoints == 1
    assert rec.recommended.build.id == "POCKET-35B-IQ1_M" and not rec.recommended.traded
    assert rec.recommended.plan.checkpoints == MAX_CHECKPOINTS


def test_the_ladder_trades_context_first_then_checkpoints_then_batches():
    steps, note = ladder(None)
    assert note is None and steps[0] == Step(DEFAULT_CTX)
    untraded = [s for s in steps if not s.traded]
    assert [s.n_ctx for s in untraded] == [8192, 6144, 4096, 3072, 2048]
    assert steps.index(Step(2048, 1)) < steps.index(Step(8192, 0)) < steps.index(Step(2048, 0, 256))
    assert steps[-1] == Step(2048, 0, 128)
    # A context the user fixed is kept; only the optional memory is traded around it.
    fixed, _ = ladder(3000)
    assert {s.n_ctx for s in fixed} == {3000}
    # Never more than the model was trained for.
    small, _ = ladder(None, 4096)
    assert max(s.n_ctx for s in small) == 4096


def test_a_pooled_plan_keeps_to_the_context_the_model_was_trained_for():
    profile = load_profile(PROFILES / "linux-16gb.json")
    helper = Helper("10.0.0.2:50052", 16 * GiB, 16 * GiB, reports_total_as_free=True,
                    rtt_seconds=0.4e-3, throughput_bytes_s=110e6)
    q4 = catalog.get("POCKET-35B-Q4_K_M")
    facts = replace(est.pocket_facts(q4), context_length=4096)
    cand = fit.judge(replace(q4, facts=facts), Budget(profile, (helper,)), forced=True)
    assert cand.plan is not None and cand.plan.rpc_servers == (helper.endpoint,)
    assert cand.plan.n_ctx == 4096


def test_file_plans_take_their_sampling_and_threads_from_the_one_owner():
    laptop = load_profile(LAPTOP)
    starter = fit.plan_for_file(laptop, 100 * 1024**2, name="s.gguf", starter=True)
    other = fit.plan_for_file(laptop, 100 * 1024**2, name="m.gguf")
    assert starter.sampling == defaults.sampling("starter") and starter.sampling.temperature == 0.2
    assert other.sampling == defaults.sampling("file") != starter.sampling
    assert starter.n_threads == defaults.threads(laptop) == 4
    assert fit.plan_for_file(laptop, 100 * 1024**2, threads=2).n_threads == 2


@pytest.mark.slow
@pytest.mark.parametrize("kept", [1, 0])
def test_the_engine_keeps_as_many_checkpoints_as_the_plan_says(tiny_qwen35, kept):
    """A plan that traded checkpoints down: the real engine on POCKET's architecture keeps no more."""
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048, n_threads=1,
                    n_threads_batch=1, checkpoints=kept)
    eng = LlamaCppEngine(plan, tiny_qwen35)
    try:
        messages: list[Message] = []
        for turn in range(3):
            messages.append(Message("user", f"Turn {turn}: say something short."))
            chunks = list(eng.chat(messages, ChatOptions(temperature=0, max_tokens=4, ignore_eos=True)))
            assert chunks[-1].finish_reason == "length", chunks[-1].error
            messages.append(Message("assistant", "".join(c.text for c in chunks) or "ok"))
        assert len(eng.cache.checkpoints) == kept
    finally:
        eng.close()


def test_inspect_says_what_the_plan_gave_up_on_a_tight_machine(tiny_qwen35, tmp_path, capsys):
    """A machine with just too little RAM for the model at 8192 with every checkpoint kept."""
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf

    facts = facts_of(check_gguf(tiny_qwen35))
    top = est.memory_need(est.build_from_facts(facts, "tiny"), DEFAULT_CTX).total
    data = json.loads(LAPTOP.read_text()) | {"ram_total_bytes": 2 * GiB, "ram_available_bytes": GiB + top - 1}
    hw = tmp_path / "tight.json"
    hw.write_text(json.dumps(data))
    assert cli.main(["inspect", str(tiny_qwen35), "--hardware", str(hw)]) == 0
    out = capsys.readouterr().out
    assert "on this machine: fits: CPU" in out
    gave = next(line for line in out.splitlines() if "gave up to fit:" in line)
    assert "(not 8192)" in gave or "(not 4)" in gave
