"""The plan of `serve --parallel`: each more sequence costs its KV cache, recurrent state and
checkpoints; the default is what the memory left by the placement holds, at most 4."""

from __future__ import annotations

from dataclasses import replace

from pocketchat.select import catalog, fit
from pocketchat.select import estimate as est
from pocketchat.select.budget import Budget, cpu_budget
from pocketchat.select.ladder import Step
from pocketchat.select.place import MAX_PARALLEL, Fit, sequences_that_fit
from pocketchat.select.profile import load_profile

from support import PROFILES


def _pocket(build_id: str = "POCKET-35B-Q2_K"):
    return next(b for b in catalog.builds() if b.id == build_id)


def test_each_sequence_counts_its_kv_cache_recurrent_state_and_checkpoints():
    need = est.memory_need(_pocket(), 8192, checkpoints=3)
    assert need.state > 0 and need.checkpoints > 0  # POCKET is hybrid
    assert need.per_sequence == need.kv_cache + need.state + need.checkpoints
    assert est.memory_need(_pocket(), 16384, checkpoints=3).per_sequence > need.per_sequence


def test_the_default_is_what_the_room_left_holds_at_most_four():
    profile = load_profile(PROFILES / "linux-20gb.json")
    build, step = _pocket(), Step(8192, checkpoints=3)
    per = est.memory_need(build, 8192, checkpoints=3).per_sequence
    ram = cpu_budget(profile)

    def fitted(memory: int) -> int:
        placed = Fit("cpu", 0, False, memory, memory <= ram, "RAM")
        return sequences_that_fit(build, Budget.of(profile), step, placed)

    assert fitted(ram - per // 2) == 1
    assert fitted(ram - per - per // 2) == 2
    assert fitted(ram - 100 * per) == MAX_PARALLEL
    assert fitted(ram + 1) == 1  # does not fit: one


def test_serve_gets_several_the_chat_keeps_one_and_mlx_one():
    rec = fit.plan(load_profile(PROFILES / "linux-64gb.json"), catalog.builds(), lang="en")
    plan = rec.recommended.plan
    assert plan.parallel == 1 and plan.serve_parallel == MAX_PARALLEL
    # on 20 GB the prompt cache's share of the free RAM leaves room for fewer
    tight = fit.plan(load_profile(PROFILES / "linux-20gb.json"), catalog.builds(), lang="en")
    assert tight.recommended.plan.prompt_cache_bytes > 0
    assert 1 < tight.recommended.plan.serve_parallel < MAX_PARALLEL
    mac = fit.plan(load_profile(PROFILES / "mac-m3pro-18gb.json"), catalog.builds(), lang="ko")
    assert mac.recommended.build.format == "mlx" and mac.recommended.plan.serve_parallel == 1


def test_recommend_shows_the_answers_served_at_once():
    from pocketchat.select.report import format_recommendation

    rec = fit.plan(load_profile(PROFILES / "linux-64gb.json"), catalog.builds(), lang="en")
    text = format_recommendation(rec)
    assert f"serve: {MAX_PARALLEL} answers at once (--parallel)" in text
    one = replace(rec, recommended=replace(rec.recommended, plan=replace(
        rec.recommended.plan, serve_parallel=1)))
    assert "answers at once" not in format_recommendation(one)
