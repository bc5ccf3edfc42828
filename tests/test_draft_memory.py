"""Drafts in the memory plan: on llama.cpp a hybrid model keeps `DRAFT_DEPTH` snapshots of each
sequence's recurrent state to roll a rejected draft back, so a plan that drafts counts them
(an attention-only model cuts its KV back and needs none; MLX runs no drafts); when memory is
short the ladder turns drafts off before it lowers the context or says nothing fits, and the
plan says so. Pure functions on hand-made facts, machines and the catalog; --recommend says
why an MLX plan runs no drafts."""

from __future__ import annotations

import json
from dataclasses import replace
from pocketchat import cli
from pocketchat.select import catalog, fit
from pocketchat.select import estimate as est
from pocketchat.select.budget import cpu_budget
from pocketchat.select.ladder import DEFAULT_CTX, Step, gave_up, ladder
from pocketchat.select.profile import load_profile, profile_from_json
from pocketchat.select.repack import repacked_types
from pocketchat.select.report import MLX_DRAFTS, format_recommendation
from pocketchat.modelfile.facts import ModelFacts
from pocketchat.types import DRAFT_DEPTH, LoadPlan

from support import PROFILES

STATE = 63 * 1000**2  # POCKET's recurrent state per sequence
Q2 = "POCKET-35B-Q2_K"


def facts(state: int) -> ModelFacts:
    return ModelFacts(arch="qwen35moe" if state else "llama", name="hand", file_bytes=2 * 10**9,
                      weight_bytes=2 * 10**9, block_count=8, context_length=32768, vocab_size=32000,
                      n_embd=1024, n_head=8, kv_layers=(3, 7), kv_heads=(2, 2), key_length=128,
                      value_length=128, recurrent_layers=(0, 1, 2, 4, 5, 6) if state else (),
                      recurrent_state_bytes=state)


def test_the_estimate_counts_drafting_snapshots_of_the_recurrent_state():
    plain = est.need_from_facts(facts(STATE), 4096)
    drafting = est.need_from_facts(facts(STATE), 4096, snapshots=DRAFT_DEPTH)
    assert drafting.snapshots == DRAFT_DEPTH * STATE == 252 * 1000**2
    assert drafting.total - plain.total == DRAFT_DEPTH * STATE
    assert drafting.per_sequence - plain.per_sequence == DRAFT_DEPTH * STATE  # per sequence
    assert drafting.anonymous - plain.anonymous == DRAFT_DEPTH * STATE
    assert drafting.host == plain.host  # held where the state is (the GPU when offloaded)
    # An attention-only model rolls a draft back by cutting its KV: nothing more.
    assert est.need_from_facts(facts(0), 4096, snapshots=DRAFT_DEPTH) == est.need_from_facts(facts(0), 4096)
    # A catalog build without its header: POCKET's state size.
    q2 = catalog.get(Q2)
    assert (est.memory_need(q2, 4096, snapshots=DRAFT_DEPTH).total
            - est.memory_need(q2, 4096).total) == DRAFT_DEPTH * est.RECURRENT_STATE_BYTES


def test_only_llama_cpp_hybrids_with_drafts_on_keep_snapshots():
    hybrid = est.build_from_facts(facts(STATE), "hybrid")
    assert fit.draft_snapshots(hybrid, "ngram") == fit.draft_snapshots(hybrid, "auto") == DRAFT_DEPTH
    assert fit.draft_snapshots(hybrid, "off") == 0
    assert fit.draft_snapshots(est.build_from_facts(facts(0), "attention"), "ngram") == 0
    assert fit.draft_snapshots(catalog.get(Q2), "auto") == DRAFT_DEPTH
    assert fit.draft_snapshots(catalog.get("POCKET-KR-MLX"), "ngram") == 0
    assert LoadPlan("llama.cpp", "cpu", 0, 4096, 1, 1).draft_depth == DRAFT_DEPTH


def test_the_ladder_trades_drafts_before_any_context():
    steps, _ = ladder(None, snapshots=DRAFT_DEPTH)
    assert steps[:3] == [Step(DEFAULT_CTX, snapshots=DRAFT_DEPTH), Step(DEFAULT_CTX), Step(6144)]
    assert [s for s in steps if s.snapshots] == [steps[0]]
    assert not steps[1].traded  # drafts off is no memory the build needs: it ranks as whole
    fixed, _ = ladder(3000, snapshots=DRAFT_DEPTH)
    assert fixed[:2] == [Step(3000, snapshots=DRAFT_DEPTH), Step(3000)]
    assert ladder(None)[0] == ladder(None, snapshots=0)[0]  # no drafts: the ladder as it was
    assert gave_up(steps[1], steps[0]) == (
        f"drafts (off: their {DRAFT_DEPTH} recurrent-state snapshots per sequence)",)
    assert gave_up(steps[2], steps[0])[0].startswith("drafts") and "context 6144" in gave_up(steps[2], steps[0])[1]


def machine_with_room(build, n_ctx: int, snapshots: int, extra: int = 0, head: bool = False):
    """linux-16gb with exactly the RAM this build needs on the CPU at this step (+ `extra`)."""
    data = json.loads((PROFILES / "linux-16gb.json").read_text())
    profile = profile_from_json(data)
    need = est.memory_need(build, n_ctx, snapshots=snapshots, repack=repacked_types(profile),
                           head=head)
    data["ram_available_bytes"] = profile.ram_available_bytes - cpu_budget(profile) + need.total + extra
    return profile_from_json(data)


def test_a_plan_with_room_keeps_drafts_and_counts_their_memory():
    q2 = catalog.get(Q2)
    profile = machine_with_room(q2, DEFAULT_CTX, DRAFT_DEPTH)
    cand = fit.judge(q2, profile, draft="ngram", forced=True)
    assert cand.plan.draft == "ngram" and cand.plan.n_ctx == DEFAULT_CTX and not cand.gave_up
    assert cand.estimated_memory_bytes == fit.judge(q2, profile, forced=True).estimated_memory_bytes \
        + DRAFT_DEPTH * est.RECURRENT_STATE_BYTES
    assert "drafts: ngram" in "\n".join(format_recommendation(fit.plan(profile, [q2], draft="ngram")).splitlines()[:3])


def test_short_memory_turns_drafts_off_before_the_context():
    q2 = catalog.get(Q2)
    profile = machine_with_room(q2, DEFAULT_CTX, 0)  # room for the plan without drafts only
    cand = fit.judge(q2, profile, draft="auto", forced=True)
    assert cand.fits and cand.plan.draft == "off" and cand.plan.n_ctx == DEFAULT_CTX
    assert not cand.traded and cand.plan.checkpoints == fit.judge(q2, profile, forced=True).plan.checkpoints
    assert cand.gave_up == (f"drafts (off: their {DRAFT_DEPTH} recurrent-state snapshots per sequence)",)
    assert any("drafts" in note for note in cand.plan.notes)  # the plan says what it gave up
    assert "gave up to fit: drafts" in format_recommendation(fit.plan(profile, [q2], draft="auto"))
    # Less still: the context goes too, with the drafts already off.
    tighter = machine_with_room(q2, 6144, 0)
    cand = fit.judge(q2, tighter, draft="auto", forced=True)
    assert cand.plan.draft == "off" and cand.plan.n_ctx == 6144
    # Without drafts asked for, the same machine plans as before.
    assert fit.judge(q2, profile, forced=True).plan.n_ctx == DEFAULT_CTX


def test_drafts_that_cost_no_memory_stay_on_when_the_context_is_lowered():
    attention = est.build_from_facts(facts(0), "attention")
    profile = machine_with_room(attention, 4096, 0)
    cand = fit.judge(attention, profile, draft="ngram", forced=True)
    assert cand.plan.n_ctx == 4096 and cand.plan.draft == "ngram"
    assert not any("drafts" in g for g in cand.gave_up)


def test_an_mlx_plan_runs_no_drafts_and_recommend_says_why(capsys):
    mac = load_profile(PROFILES / "mac-m3pro-18gb.json")
    rec = fit.plan(mac, catalog.builds(), lang="ko", backend="mlx", draft="ngram")
    best = rec.recommended
    assert best.build.format == "mlx" and best.plan.draft == "off" and not best.gave_up
    assert rec.to_json()["recommended"]["draft"] == "off"
    assert cli.main(["--recommend", "--hardware", str(PROFILES / "mac-m3pro-18gb.json"),
                     "--lang", "ko", "--backend", "mlx"]) == 0
    out = capsys.readouterr().out
    settings = out.split("\n\n")[0].splitlines()  # the plan's lines, before the table
    assert settings[0].startswith("Recommended: POCKET-KR-MLX")
    assert [line.strip() for line in settings if "drafts" in line] == [MLX_DRAFTS]
    assert "cannot be cut back" in MLX_DRAFTS and "llama.cpp" in MLX_DRAFTS
    # A llama.cpp plan drafts by default (auto: while it pays) and says so; off: no line.
    assert cli.main(["--recommend", "--hardware", str(PROFILES / "linux-16gb.json")]) == 0
    assert "  drafts: auto (up to 4 tokens a step)" in capsys.readouterr().out.split("\n\n")[0]
    assert cli.main(["--recommend", "--hardware", str(PROFILES / "linux-16gb.json"), "--draft", "off"]) == 0
    assert "drafts" not in capsys.readouterr().out.split("\n\n")[0]


def test_recommend_with_draft_on_a_tight_laptop_gives_drafts_up_first(capsys):
    laptop = PROFILES / "laptop-8gb-7gb-free.json"
    assert cli.main(["--recommend", "--hardware", str(laptop), "--draft", "ngram", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["recommended"]
    assert best["draft"] == "off" and best["gave_up"][0].startswith("drafts")
    # The rest it gave up is what it gives up without drafts.
    assert cli.main(["--recommend", "--hardware", str(laptop), "--draft", "off", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["recommended"]
    assert best["gave_up"][1:] == plain["gave_up"] and best["n_ctx"] == plain["n_ctx"]


def test_choose_model_carries_draft_into_the_plan_of_a_hybrid_file(tiny_qwen35, tmp_path):
    """--draft through the one chooser: kept where its snapshots fit, off (with a note) where
    only the plan without them does; never turned back on afterwards."""
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.select.repack import repacked_types

    facts = facts_of(check_gguf(tiny_qwen35))
    assert facts.recurrent_state_bytes > 0
    base = json.loads((PROFILES / "linux-16gb.json").read_text())
    profile = profile_from_json(base)
    need = est.memory_need(est.build_from_facts(facts, "tiny"), DEFAULT_CTX,
                           repack=repacked_types(profile)).total
    tight = tmp_path / "tight.json"
    tight.write_text(json.dumps(base | {"ram_available_bytes": profile.ram_available_bytes
                                        - cpu_budget(profile) + need}))
    roomy = choose_model(Selection(model=str(tiny_qwen35), draft="ngram",
                                   hardware=PROFILES / "linux-16gb.json", offline=True))
    assert roomy.plan.draft == "ngram" and roomy.plan.n_ctx == DEFAULT_CTX
    short = choose_model(Selection(model=str(tiny_qwen35), draft="ngram", hardware=tight, offline=True))
    assert short.plan.draft == "off" and short.plan.n_ctx == DEFAULT_CTX
    assert any("drafts" in note for note in short.plan.notes)
    assert choose_model(Selection(model=str(tiny_qwen35), hardware=tight, offline=True)).plan.draft == "off"


def test_a_gguf_with_an_mtp_block_counts_it_apart_from_the_trunk(tmp_path):
    """Qwen3.5's MTP block is one more block in the file (`nextn_predict_layers`): the trunk's
    layers are the others, and the plan counts the block's weights and KV only with drafts."""
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf
    from support.tinyqwen35 import N_LAYER, write_tiny_qwen35moe

    plain = facts_of(check_gguf(write_tiny_qwen35moe(tmp_path / "plain.gguf")))
    info = check_gguf(write_tiny_qwen35moe(tmp_path / "mtp.gguf", mtp=1))
    with_head = facts_of(info)
    assert info.block_count == N_LAYER + 1 and info.mtp_layers == 1
    assert with_head.block_count == plain.block_count == N_LAYER
    assert with_head.kv_layers == plain.kv_layers and with_head.recurrent_layers == plain.recurrent_layers
    assert with_head.expert_layer_bytes == plain.expert_layer_bytes
    assert with_head.active_type_bytes == plain.active_type_bytes  # a plain token never reads it
    assert with_head.mtp_bytes == with_head.weight_bytes - plain.weight_bytes > 0
    # K and V of the block's one attention layer per token
    assert with_head.mtp_kv_per_token == plain.kv_heads[0] * (plain.key_length + plain.value_length)
    off = est.need_from_facts(with_head, 4096)
    on = est.need_from_facts(with_head, 4096, snapshots=DRAFT_DEPTH, head=True)
    assert off == est.need_from_facts(plain, 4096)  # not loaded without drafts
    assert on.weights - off.weights == on.head_weights == with_head.mtp_bytes
    assert on.snapshots == DRAFT_DEPTH * with_head.recurrent_state_bytes
    assert on.head_kv == with_head.mtp_kv_per_token * 2 * est.effective_ctx(with_head, 4096)
    assert on.total - off.total == on.snapshots + on.head


HEAD = 310 * 1000**2  # POCKET Q2_K's MTP block


def mtp_facts() -> ModelFacts:
    return replace(facts(STATE), file_bytes=2 * 10**9 + HEAD, weight_bytes=2 * 10**9 + HEAD,
                   mtp_bytes=HEAD, mtp_kv_per_token=2 * (128 + 128))


def test_the_mtp_head_is_counted_only_by_the_drafts_that_load_it():
    """`--draft auto|mtp` load the block on one sequence; `ngram` never does: its plan counts
    the snapshots alone (it counted the 0.31 GB block too)."""
    build = est.build_from_facts(mtp_facts(), "mtp")
    profile = load_profile(PROFILES / "linux-16gb.json")
    mem = {d: fit.judge(build, profile, n_ctx=4096, draft=d, forced=True).estimated_memory_bytes
           for d in ("off", "ngram", "auto", "mtp")}
    head = HEAD + 2 * (128 + 128) * 2 * 4096
    assert mem["ngram"] == mem["off"] + DRAFT_DEPTH * STATE
    assert mem["auto"] == mem["mtp"] == mem["ngram"] + head
    assert fit.draft_head(build, "auto") and not fit.draft_head(build, "ngram")
    assert not fit.draft_head(est.build_from_facts(facts(STATE), "no block"), "auto")


def test_serve_counts_more_sequences_in_the_room_the_head_leaves():
    """`serve --parallel N` drafts by lookup only, so beside a second sequence the head is not
    loaded: its memory makes room for that sequence."""
    from pocketchat.select.budget import Budget
    from pocketchat.select.place import placements, sequences_that_fit

    build = est.build_from_facts(mtp_facts(), "mtp")
    step = Step(4096, snapshots=DRAFT_DEPTH, head=True)
    need = est.memory_need(build, 4096, snapshots=DRAFT_DEPTH, head=True)
    short = need.per_sequence - need.head // 2  # a second sequence fits only without the head
    profile = machine_with_room(build, 4096, DRAFT_DEPTH, extra=short, head=True)
    fits = next(f for f in placements(build, Budget.of(profile), step, None) if f.fits)
    assert sequences_that_fit(build, Budget.of(profile), step, fits) == 2
    no_head = Step(4096, snapshots=DRAFT_DEPTH)  # ngram: nothing to leave out
    assert sequences_that_fit(build, Budget.of(profile), no_head, fits) == 1


def test_inspect_judges_the_plan_with_the_drafts_the_chat_would_run(tiny_qwen35, capsys):
    """`inspect` plans as `pocketchat` does: drafts on by default (their memory counted), and
    `--draft off` as asked."""
    hw = str(PROFILES / "linux-16gb.json")
    plans = {}
    for extra in ([], ["--draft", "off"]):
        assert cli.main(["inspect", str(tiny_qwen35), "--hardware", hw, "--json", *extra]) == 0
        plans[tuple(extra)] = json.loads(capsys.readouterr().out)["plan"]
    assert plans[()]["draft"] == "auto" and plans[("--draft", "off")]["draft"] == "off"
