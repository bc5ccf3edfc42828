"""The recommendation for hand-made machines: the model card's cases and more."""

from __future__ import annotations

import pytest

from pocketchat.select import catalog, fit
from pocketchat.select.profile import load_profile

from support import PROFILES

# machine profile, lang, expected build, expected placement
CASES = [
    ("linux-16gb", "en", "POCKET-35B-IQ1_M", "cpu"),
    ("linux-20gb", "en", "POCKET-35B-Q2_K", "cpu"),
    ("linux-24gb", "en", "POCKET-35B-Q3_K_M", "cpu"),
    ("windows-24gb", "en", "POCKET-35B-Q3_K_M", "cpu"),
    ("linux-32gb", "en", "POCKET-35B-Q4_K_M", "cpu"),
    ("linux-64gb", "en", "POCKET-35B-Q4_K_M", "cpu"),
    ("mac-m3pro-18gb", "en", "POCKET-35B-Q2_K", "cpu"),
    ("mac-m3pro-18gb", "ko", "POCKET-KR-MLX", "gpu"),
    ("mac-m3max-36gb", "en", "POCKET-35B-Q4_K_M", "gpu"),
    ("linux-h100-80gb", "en", "POCKET-35B-Q4_K_M", "gpu"),
    ("linux-12gb-nvidia-32gb", "en", "POCKET-35B-Q4_K_M", "gpu+cpu-experts"),
    ("linux-24gb-nvidia-32gb", "en", "POCKET-35B-Q4_K_M", "gpu"),
    ("linux-amd-7900xtx-32gb", "en", "POCKET-35B-Q4_K_M", "gpu"),
    ("linux-amd-apu-32gb", "en", "POCKET-35B-Q4_K_M", "cpu"),
    ("linux-nvidia-cpu-only-llama", "en", "POCKET-35B-Q4_K_M", "cpu"),
    ("laptop-8gb", "en", "POCKET-EN-iPhone-mix", "cpu"),
    ("laptop-8gb", "ko", "POCKET-KR-IQ2_M", "cpu"),
    # 7.3 GB available: the phone build fits only with fewer checkpoints (test_plan_budget.py)
    ("laptop-8gb-7gb-free", "en", "POCKET-EN-iPhone-mix", "cpu"),
    ("linux-16gb", "ko", "POCKET-KR-160-Q2_K", "cpu"),
    ("linux-20gb", "ko", "POCKET-35B-Q2_K", "cpu"),
    ("linux-32gb-disk-nearly-full", "en", "POCKET-35B-IQ1_M", "cpu"),
    ("linux-32gb-busy-ram", "en", "POCKET-EN-PC-mix", "cpu"),
]


def recommend(name: str, lang: str = "en", **kw):
    return fit.plan(load_profile(PROFILES / f"{name}.json"), catalog.builds(), lang=lang, **kw)


@pytest.mark.parametrize("machine,lang,build,placement", CASES, ids=[f"{m}-{lang}" for m, lang, *_ in CASES])
def test_recommendation_table(machine, lang, build, placement):
    rec = recommend(machine, lang)
    assert rec.recommended is not None, [c.reason for c in rec.candidates]
    assert (rec.recommended.build.id, rec.recommended.plan.placement) == (build, placement)
    # The chosen plan must itself fit: its estimate is within the budget it was judged on.
    assert rec.recommended.fits and rec.recommended.eligible
    assert rec.recommended.reason


def test_at_least_fifteen_machines():
    assert len({m for m, *_ in CASES}) >= 15


def test_four_gb_board_fits_nothing_and_says_why():
    rec = recommend("board-4gb")
    assert rec.recommended is None
    assert all(not c.fits or not c.eligible for c in rec.candidates)
    smallest = min((c for c in rec.candidates if c.eligible), key=lambda c: c.estimated_memory_bytes)
    assert "needs" in smallest.reason and "GB" in smallest.reason


def test_full_gpu_offload_uses_all_layers_and_flash_attention():
    plan = recommend("linux-h100-80gb").recommended.plan
    assert plan.n_gpu_layers == -1 and plan.flash_attn and not plan.cpu_moe


def test_experts_on_cpu_plan_keeps_layers_on_gpu():
    """12 GB NVIDIA + Q4_K_M: the experts of the first N layers in RAM, the rest on the GPU."""
    from pocketchat.select import estimate as est
    from pocketchat.select.report import format_recommendation, llama_cpp_command

    profile = load_profile(PROFILES / "linux-12gb-nvidia-32gb.json")
    rec = fit.plan(profile, catalog.builds())
    best = rec.recommended
    plan = best.plan
    assert best.build.quant == "Q4_K_M" and plan.n_gpu_layers == -1
    assert not plan.cpu_moe and 0 < plan.n_cpu_moe < 40
    need = est.memory_need(best.build, plan.n_ctx, on_gpu=True)
    on_gpu, on_ram = est.split_experts(need, best.build, plan.n_cpu_moe)
    assert on_gpu <= fit.gpu_budget(fit.main_gpu(profile), profile)
    assert on_ram <= fit.cpu_budget(profile)
    # One layer fewer in RAM would not fit the GPU: N is the fewest.
    assert est.split_experts(need, best.build, plan.n_cpu_moe - 1)[0] > fit.gpu_budget(fit.main_gpu(profile), profile)
    n = plan.n_cpu_moe
    assert f"--n-cpu-moe {n}" in llama_cpp_command(best)
    assert f"experts of the first {n} layers on CPU" in format_recommendation(rec)
    # More VRAM, fewer expert layers in RAM; a small card keeps all of them there.
    assert recommend("linux-24gb-nvidia-32gb").recommended.plan.placement == "gpu"


def test_threads_are_physical_cores_capped_at_32():
    assert recommend("linux-16gb").recommended.plan.n_threads == 8
    assert recommend("linux-h100-80gb").recommended.plan.n_threads == 32


def test_english_never_gets_a_korean_build_and_korean_avoids_iq1m():
    for machine in ("laptop-8gb", "linux-16gb", "linux-32gb-busy-ram", "mac-m3pro-18gb"):
        assert recommend(machine, "en").recommended.build.language != "ko"
        ko = recommend(machine, "ko").recommended
        assert ko.build.quant != "IQ1_M" and ko.build.language != "en"


def test_mlx_is_not_offered_off_apple_unless_forced():
    rec = recommend("linux-16gb", "ko")
    mlx = next(c for c in rec.candidates if c.build.format == "mlx")
    assert not mlx.eligible and "Apple Silicon" in mlx.reason
    import json

    from pocketchat.select.profile import profile_from_json

    data = json.loads((PROFILES / "linux-16gb.json").read_text())
    assert "mlx-lm is not installed" in next(
        c.reason for c in recommend("linux-16gb", "ko", backend="mlx").candidates if c.build.format == "mlx"
    )
    data["backends"] = ["llama.cpp", "mlx"]
    forced = fit.plan(profile_from_json(data), catalog.builds(), lang="ko", backend="mlx")
    assert forced.recommended.build.id == "POCKET-KR-MLX"
    assert forced.recommended.plan.placement == "cpu"


def test_mac_q2k_over_metal_budget_is_said():
    rec = recommend("mac-m3pro-18gb")
    assert rec.recommended.plan.n_gpu_layers == 0
    q2 = rec.recommended
    assert "RAM" in q2.reason


def test_cpu_only_llama_with_gpu_gets_the_reinstall_line():
    rec = recommend("linux-nvidia-cpu-only-llama")
    assert any('CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall' in n for n in rec.notes)


def test_disk_too_small_is_the_reason_unless_already_downloaded():
    rec = recommend("linux-32gb-disk-nearly-full")
    q4 = next(c for c in rec.candidates if c.build.id == "POCKET-35B-Q4_K_M")
    assert not q4.fits and "disk" in q4.reason
    again = recommend("linux-32gb-disk-nearly-full", downloaded={"POCKET-35B-Q4_K_M"})
    assert again.recommended.build.id == "POCKET-35B-Q4_K_M"


def test_context_defaults_to_8192_and_shrinks_when_tight():
    assert recommend("linux-32gb").recommended.plan.n_ctx == 8192
    # Long context costs KV cache: at 262k the 16 GB box can no longer hold IQ1_M.
    big = recommend("linux-16gb", n_ctx=262144)
    iq1 = next(c for c in big.candidates if c.build.id == "POCKET-35B-IQ1_M")
    assert not iq1.fits and "262144" in iq1.reason
    assert recommend("linux-64gb", n_ctx=32768).recommended.plan.n_ctx == 32768


def test_ctx_shrinks_to_the_largest_that_fits():
    from pocketchat.select.profile import profile_from_json
    import json

    data = json.loads((PROFILES / "laptop-8gb.json").read_text())
    build = catalog.get("POCKET-EN-iPhone-mix")
    # Find an available-RAM figure where 8192 does not fit but a smaller context does.
    for avail_mib in range(6400, 7400, 16):
        data["ram_available_bytes"] = avail_mib * 1024**2
        prof = profile_from_json(data)
        if fit.choose_fit(build, prof, 8192, None) is None and fit.choose_fit(build, prof, 2048, None):
            ctx, chosen = fit.choose_ctx(build, prof, None, None)
            assert chosen is not None and 2048 <= ctx < 8192
            assert fit.choose_fit(build, prof, ctx, None) is not None
            return
    pytest.fail("no RAM figure exercised the context fallback")


def test_kv_cache_only_counts_full_attention_layers():
    from pocketchat.select import catalog
    from pocketchat.select.estimate import memory_need

    build = next(b for b in catalog.builds() if b.format == "gguf" and b.facts is None)
    kv_cache_bytes = lambda n_ctx: memory_need(build, n_ctx).kv_cache  # noqa: E731 - the offline fallback's
    assert kv_cache_bytes(8192) == 8192 * 20 * 1024  # ~20 KiB per token, ~0.16 GiB at 8K
    assert 4.9 < kv_cache_bytes(262144) / 1024**3 < 5.1


def test_bad_language_and_tiny_ctx_are_usage_errors():
    from pocketchat.errors import UsageError

    with pytest.raises(UsageError, match="--lang"):
        recommend("linux-16gb", "fr")
    with pytest.raises(UsageError):
        recommend("linux-16gb", n_ctx=10)


def test_faster_placement_wins_between_equal_quality():
    rec = recommend("linux-24gb-nvidia-32gb")
    assert rec.recommended.estimated_decode_tok_s > next(
        c for c in recommend("linux-32gb").candidates if c.build.id == "POCKET-35B-Q4_K_M"
    ).estimated_decode_tok_s


def test_local_file_plan_shrinks_context_then_refuses_with_figures():
    from pocketchat.errors import ModelTooLarge

    laptop = load_profile(PROFILES / "laptop-8gb.json")
    small = fit.plan_for_file(laptop, 100 * 1024**2, name="tiny.gguf")
    assert small.n_ctx == 8192 and small.placement == "cpu"
    with pytest.raises(ModelTooLarge, match=r"big.gguf needs about .* GB at 2048 context; only"):
        fit.plan_for_file(laptop, 20 * 1024**3, name="big.gguf")
    gpu_box = load_profile(PROFILES / "linux-24gb-nvidia-32gb.json")
    assert fit.plan_for_file(gpu_box, 5 * 1024**3, name="m.gguf").n_gpu_layers == -1


def _with_available(name: str, available: int):
    import json

    from pocketchat.select.profile import profile_from_json

    data = json.loads((PROFILES / f"{name}.json").read_text())
    return profile_from_json({**data, "ram_available_bytes": available})


def test_a_build_on_disk_is_kept_when_less_ram_is_free_for_a_moment():
    """The choice must not swing to a multi-GB download because other programs hold RAM for a
    moment: the build on disk stays while it fits at a smaller context or with fewer checkpoints."""
    whole = recommend("linux-20gb")
    assert whole.recommended.build.id == "POCKET-35B-Q2_K" and not whole.recommended.traded
    profile = next(p for p in (_with_available("linux-20gb", gb * 10**8) for gb in range(200, 80, -2))
                   if (r := fit.plan(p, catalog.builds())).recommended
                   and r.recommended.build.id != "POCKET-35B-Q2_K")
    busy = fit.plan(profile, catalog.builds())  # a fresh choice would download another build ...
    q2 = next(c for c in busy.candidates if c.build.id == "POCKET-35B-Q2_K")
    assert q2.fits and q2.traded  # ... though the Q2_K still fits, with less context or checkpoints
    kept = fit.plan(profile, catalog.builds(), downloaded={"POCKET-35B-Q2_K"})
    assert kept.recommended.build.id == "POCKET-35B-Q2_K"
    assert kept.recommended.gave_up


def test_a_better_build_not_on_disk_is_named_with_its_download():
    rec = recommend("linux-32gb", downloaded={"POCKET-35B-IQ1_M"})
    assert rec.recommended.build.id == "POCKET-35B-IQ1_M"
    assert "already downloaded. POCKET-35B-Q4_K_M would be better here" in rec.recommended.reason
    assert "`pocketchat download POCKET-35B-Q4_K_M`" in rec.recommended.reason


def test_a_build_on_disk_that_no_longer_fits_is_named():
    rec = recommend("linux-32gb-busy-ram", downloaded={"POCKET-35B-IQ1_M"})
    assert rec.recommended.build.id == "POCKET-EN-PC-mix"
    assert "On disk, POCKET-35B-IQ1_M does not fit the memory free now" in rec.recommended.reason


# -- this machine's kernels (select/kernels.py): two 2-core machines with scripted kernel rates --
# compute-bound: its kernels (measured on a 2-core Xeon with AMX) decode IQ1_M at 3 GB/s and
# Q2_K at 9-10, less than its 28.5 GB/s copy bandwidth feeds; bandwidth-bound: the same rates
# x4, so its memory (12 GB/s) is what limits every build.
KERNEL_MACHINES = ("linux-2core-compute-bound", "linux-2core-bandwidth-bound")


def _speeds(machine: str) -> dict[str, tuple[float, str]]:
    rec = recommend(machine)
    return {c.build.quant: (c.estimated_decode_tok_s, c.reason) for c in rec.candidates
            if c.build.id.startswith("POCKET-35B-") and c.fits}


def test_compute_bound_machine_ranks_the_smallest_file_slowest():
    """Where the kernels are the limit, IQ1_M's (more work per byte) make the smallest file the
    slowest: Q2_K > Q3_K_M > IQ1_M, as measured on such a machine (5.5, 4.8, 4.1 tok/s)."""
    s = _speeds("linux-2core-compute-bound")
    assert s["Q2_K"][0] > s["Q3_K_M"][0] > s["IQ1_M"][0]
    for quant in ("IQ1_M", "Q2_K", "Q3_K_M"):
        assert "compute-bound here: 2 threads" in s[quant][1]


def test_bandwidth_bound_machine_ranks_by_bytes_read():
    """Where memory is the limit, the order flips back to the bytes a token reads: IQ1_M first."""
    s = _speeds("linux-2core-bandwidth-bound")
    assert s["IQ1_M"][0] > s["Q2_K"][0] > s["Q3_K_M"][0]
    for quant in ("IQ1_M", "Q2_K", "Q3_K_M"):
        assert "bandwidth-bound here: 12 GB/s" in s[quant][1]


# Two machines measured (benchmarks/RESULTS.md, "`--recommend`: speed estimates against `bench`"):
# their kernel probe as `--probe --json` wrote it, and `bench -p 16 -n 64 -r 2` decode tok/s of
# the full-size synthetic builds at 2 threads; the EPYC's second run is `bench_recommend.py
# --full-size DIR --save-profile FILE`'s: its probe and its `bench -p 512 -n 64 -r 2`, a day later.
MEASURED = {"linux-2core-compute-bound": {"IQ1_M": 4.08, "Q2_K": 5.51, "Q3_K_M": 4.79},  # Xeon, AMX
            "linux-2core-amd-epyc": {"IQ1_M": 8.25, "Q2_K": 12.89, "Q3_K_M": 11.46},  # Zen 4
            "linux-2core-amd-epyc-second-run": {"IQ1_M": 8.19, "Q2_K": 11.41, "Q3_K_M": 11.11}}


@pytest.mark.parametrize("machine", sorted(MEASURED))
def test_estimates_on_measured_machines_are_within_20_percent_and_in_order(machine):
    s = _speeds(machine)
    measured = MEASURED[machine]
    for quant, tok_s in measured.items():
        assert 0.8 <= s[quant][0] / tok_s <= 1.2, (quant, s[quant][0], tok_s)
    assert sorted(measured, key=lambda q: -s[q][0]) == sorted(measured, key=lambda q: -measured[q])


def test_the_same_machine_without_kernels_estimates_from_bandwidth_alone():
    """No kernel rates (a replayed profile without them, or nothing measurable): the estimate is
    the bandwidth's, labelled as before, no bound named."""
    import json

    from pocketchat.select.profile import profile_from_json

    data = json.loads((PROFILES / "linux-2core-compute-bound.json").read_text())
    del data["kernels"]
    rec = fit.plan(profile_from_json(data), catalog.builds())
    q2 = next(c for c in rec.candidates if c.build.id == "POCKET-35B-Q2_K")
    assert q2.speed_source == "estimate" and "-bound here" not in q2.reason
    with_kernels = next(c for c in recommend("linux-2core-compute-bound").candidates if c.build.id == q2.build.id)
    assert with_kernels.estimated_decode_tok_s < q2.estimated_decode_tok_s  # the kernels are the limit


@pytest.mark.parametrize("machine", KERNEL_MACHINES)
def test_recommend_says_which_bound_applies(machine):
    from pocketchat.select.report import format_profile, format_recommendation

    rec = recommend(machine)
    text = format_recommendation(rec)
    word = "compute-bound here: 2 threads" if "compute" in machine else "bandwidth-bound here: 12 GB/s"
    assert word in text and "this machine's kernel speeds" in text
    shown = format_profile(rec.hardware)
    assert "Kernels:" in shown and "2 threads: Q2_K" in shown and "1 thread: Q2_K" in shown


def test_threads_per_build_from_the_kernels():
    """An 8-core machine whose memory (32 GB/s) feeds two of its fast cores: a bandwidth-bound
    build does not take every core; with slow kernels (compute-bound) every core pays and is taken."""
    import json

    from pocketchat.select.profile import profile_from_json

    data = json.loads((PROFILES / "linux-2core-bandwidth-bound.json").read_text())
    data.update(cpu_physical_cores=8, cpu_logical_cores=8, memory_bandwidth_gbps=32.0)
    data["kernels"]["threads"] = {"8": data["kernels"]["threads"]["2"]}  # as measured at 8
    fast = fit.plan(profile_from_json(data), catalog.builds())
    q2 = next(c for c in fast.candidates if c.build.id == "POCKET-35B-Q2_K")
    assert 4 <= q2.plan.n_threads < 8 and "bandwidth-bound" in q2.reason
    slow = json.loads((PROFILES / "linux-2core-compute-bound.json").read_text())
    slow.update(cpu_physical_cores=8, cpu_logical_cores=8, memory_bandwidth_gbps=64.0)
    slow["kernels"]["threads"] = {"8": slow["kernels"]["threads"]["2"]}
    q2 = next(c for c in fit.plan(profile_from_json(slow), catalog.builds()).candidates
              if c.build.id == "POCKET-35B-Q2_K")
    assert q2.plan.n_threads == 8 and "compute-bound here: 8 threads" in q2.reason
    assert fit.plan(profile_from_json(data), catalog.builds(), threads=8).recommended.plan.n_threads == 8


def test_a_busy_machine_starts_with_the_free_cores():
    """#34: the plan's starting threads leave out the cores other programs keep busy when the
    model loads (ggml's threads wait for the slowest at every operation); --threads wins."""
    import json

    from pocketchat.select import defaults
    from pocketchat.select.profile import profile_from_json

    data = json.loads((PROFILES / "linux-2core-compute-bound.json").read_text())
    for busy, want in ((None, 2), (0.3, 2), (0.6, 1), (1.0, 1), (2.0, 1)):
        profile = profile_from_json({**data, "cpu_busy_cores": busy})
        assert defaults.threads(profile) == want
        assert fit.plan(profile, catalog.builds()).recommended.plan.n_threads == want
    busy = profile_from_json({**data, "cpu_busy_cores": 1.0})
    assert fit.plan(busy, catalog.builds(), threads=2).recommended.plan.n_threads == 2
    eight = profile_from_json({**data, "cpu_physical_cores": 8, "cpu_logical_cores": 16, "cpu_busy_cores": 2.6})
    assert defaults.threads(eight) == 5
