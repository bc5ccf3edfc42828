"""llama.cpp's repacked copy of weights in the memory plan: which types, how much, and where
the plan shows it (inspect, --recommend)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from support import PROFILES
from pocketchat.select import catalog, estimate, fit, repack
from pocketchat.select.profile import load_profile
from pocketchat.types import HardwareProfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

X86_AVX2 = HardwareProfile(os="linux", arch="x86_64", cpu_flags=("avx", "avx2", "fma"), ram_total_bytes=32 << 30)


def test_repacked_types_follow_the_cpu():
    assert repack.repacked_types(X86_AVX2) == {repack.Q4_0, repack.Q4_K, repack.IQ4_NL, repack.MXFP4}
    avx512 = replace(X86_AVX2, cpu_flags=("avx2", "avx512f"))
    assert repack.Q2_K in repack.repacked_types(avx512) and repack.Q3_K not in repack.repacked_types(avx512)
    arm = HardwareProfile(os="linux", arch="arm64", cpu_flags=("dotprod", "neon"), ram_total_bytes=8 << 30)
    assert {repack.Q4_K, repack.Q6_K, repack.Q5_K} <= repack.repacked_types(arm)
    assert repack.repacked_types(replace(arm, cpu_flags=("neon",))) == frozenset()
    # pocketchat turns llama.cpp's extra buffer types off where AMX is offered
    assert repack.repacked_types(replace(avx512, cpu_flags=("avx2", "avx512f", "amx_int8"))) == frozenset()


@pytest.mark.parametrize("quant", ["Q2_K", "IQ1_M", "Q3_K_M", "Q4_K_M"])
def test_catalog_shares_are_llama_quants_rules_on_pockets_tensor_table(quant):
    import gguf
    import pocket_gguf as pg

    planned = pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, quant)
    sizes = {p.spec.name: (p.ggml_type, p.n_elements // gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(p.ggml_type)][0]
                           * gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(p.ggml_type)][1]) for p in planned}
    total = sum(b for _, b in sizes.values())
    shares: dict[int, float] = {}
    for name, (t, b) in sizes.items():
        if t != 0 and name != "token_embd.weight":
            shares[t] = shares.get(t, 0.0) + b / total
    assert shares.keys() == repack.POCKET_TYPE_SHARES[quant].keys()
    for t, share in shares.items():
        assert repack.POCKET_TYPE_SHARES[quant][t] == pytest.approx(share, abs=1e-4)


def test_the_copy_moves_memory_from_the_file_to_anonymous_not_more():
    q2k = catalog.get("POCKET-35B-Q2_K")
    plain = estimate.memory_need(q2k, 8192)
    avx2 = estimate.memory_need(q2k, 8192, repack=repack.repacked_types(X86_AVX2))
    avx512 = estimate.memory_need(q2k, 8192, repack=repack.repacked_types(replace(X86_AVX2, cpu_flags=("avx512f",))))
    assert plain.total == avx2.total == avx512.total  # the need to decode at full speed is the same
    assert plain.repacked == 0 and plain.anonymous == plain.total - plain.weights
    # AVX2: only the Q4_K attention (2%); AVX-512: Q2_K too, 56% of the build
    assert avx2.repacked == pytest.approx(0.0224 * q2k.size_bytes, rel=1e-3)
    assert avx512.repacked == pytest.approx((0.5646 + 0.0224) * q2k.size_bytes, rel=1e-3)
    assert avx512.anonymous == plain.anonymous + avx512.repacked and avx512.mapped == plain.weights - avx512.repacked
    assert avx512.resident == avx512.total + avx512.repacked  # RSS after a load shows the read pages too
    gpu = estimate.memory_need(q2k, 8192, on_gpu=True, repack=repack.repacked_types(X86_AVX2))
    assert gpu.repacked == 0


def test_recommend_shows_the_anonymous_part_of_a_cpu_plan():
    from pocketchat.select.report import format_recommendation

    rec = fit.plan(load_profile(PROFILES / "linux-24gb.json"), catalog.builds())
    best = rec.recommended
    assert best.build.id == "POCKET-35B-Q3_K_M" and best.plan.placement == "cpu"
    # Q3_K_M on AVX2: its Q4_K ffn_down and attention (36% of 16.8 GB) are repacked
    assert best.estimated_repacked_bytes == pytest.approx(0.3628 * best.build.size_bytes, rel=1e-3)
    assert best.estimated_memory_bytes - best.estimated_anonymous_bytes == (
        best.build.size_bytes - best.estimated_repacked_bytes)
    text = format_recommendation(rec)
    assert "6.1 GB of it llama.cpp's repacked copy of weights" in text
    js = best.to_json()
    assert js["estimated_anonymous_bytes"] == best.estimated_anonymous_bytes
    gpu = fit.plan(load_profile(PROFILES / "linux-h100-80gb.json"), catalog.builds()).recommended
    assert gpu.plan.placement == "gpu" and gpu.estimated_anonymous_bytes is None


@pytest.mark.slow
def test_repacked_bytes_match_llama_cpps_repack_buffer(tmp_path):
    """A small POCKET-shaped Q2_K file: the plan's repacked bytes are the CPU_REPACK buffer
    llama.cpp allocates on this machine, and inspect shows both parts."""
    import pocket_gguf as pg
    from pocketchat.engines.llamacpp.load import load_llama
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.select.probe import detect
    from pocketchat.types import LoadPlan

    path = pg.write_pocket(tmp_path / "p.gguf", shape=pg.shape_for(layers=4, experts=8), n_vocab=8192)
    info = check_gguf(path)
    need = estimate.need_from_facts(facts_of(info), 512,
                                    repack=repack.repacked_types(detect(measure_bandwidth=False)))
    loaded = load_llama(LoadPlan("llama.cpp", "cpu", 0, 512, 2, 2), path, info)
    try:
        buffers = [line for line in loaded.log if "CPU_REPACK model buffer size" in line]
    finally:
        loaded.llm.close()
    mib = float(buffers[0].split("=")[1].split()[0]) if buffers else 0.0
    assert need.repacked == pytest.approx(mib * 2**20, rel=0.002, abs=2**20)
    out = subprocess.run([sys.executable, "-m", "pocketchat", "inspect", str(path), "--json"],
                         capture_output=True, text=True, timeout=120, check=True)
    row = json.loads(out.stdout)["memory"][0]
    assert row["anonymous"] + row["mapped"] == row["total"] and row["repacked"] == need.repacked
