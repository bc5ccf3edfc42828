"""Speed and memory estimates stay close to the published figures they are calibrated on."""

from __future__ import annotations

from pocketchat.select import catalog
from pocketchat.select.estimate import memory_need, split_experts
from pocketchat.select.speed import decode_tok_s
from pocketchat.types import GPU


def test_sparse_moe_reads_a_fraction_of_its_weights_per_token():
    iq1 = catalog.get("POCKET-35B-IQ1_M")
    # The card: about 0.66 GB read per token for the sparse MoE.
    assert 0.6e9 < catalog.bytes_per_token(iq1) < 0.8e9


def test_h100_estimate_is_near_the_published_speed():
    iq1 = catalog.get("POCKET-35B-IQ1_M")
    h100 = GPU("nvidia", "NVIDIA H100 NVL", 94 * 1024**3, 93 * 1024**3)
    tok_s = decode_tok_s(iq1, "gpu", cpu_bandwidth_gbps=100, threads=16, gpu=h100)
    assert 197 / 1.5 < tok_s < 197 * 1.5


def test_cpu_estimate_is_near_the_published_mini_pc_speed():
    q2 = catalog.get("POCKET-35B-Q2_K")
    tok_s = decode_tok_s(q2, "cpu", cpu_bandwidth_gbps=45, threads=12)
    assert 20 / 1.5 < tok_s < 20 * 1.5


def test_more_bandwidth_is_faster_and_fewer_cores_cap_it():
    q2 = catalog.get("POCKET-35B-Q2_K")
    slow = decode_tok_s(q2, "cpu", cpu_bandwidth_gbps=20, threads=8)
    fast = decode_tok_s(q2, "cpu", cpu_bandwidth_gbps=60, threads=8)
    capped = decode_tok_s(q2, "cpu", cpu_bandwidth_gbps=60, threads=1)
    assert slow < fast and capped < fast


def test_experts_on_cpu_puts_most_bytes_in_ram():
    q4 = catalog.get("POCKET-35B-Q4_K_M")
    need = memory_need(q4, 8192)
    gpu, ram = split_experts(need, q4)
    assert gpu < 3e9 and ram > 19e9
    assert gpu + ram < need.total + 1e9


def test_checkpoints_of_a_recurrent_state_are_counted_in_ram():
    """POCKET's prompt cache keeps up to 4 copies of its DeltaNet state in RAM: the estimate
    counts them (also when the model is on a GPU), an attention-only model has none."""
    from pocketchat.select import catalog
    from pocketchat.select.estimate import RECURRENT_STATE_BYTES, memory_need
    from pocketchat.types import MAX_CHECKPOINT_BYTES, checkpoint_bytes

    pocket = catalog.get("POCKET-35B-Q4_K_M")
    need = memory_need(pocket, 8192)
    assert need.checkpoints == min(4 * RECURRENT_STATE_BYTES, MAX_CHECKPOINT_BYTES) > 0
    assert need.total - need.checkpoints == (need.weights + need.kv_cache + need.state
                                            + need.compute + need.overhead)
    assert memory_need(pocket, 8192, on_gpu=True).host == need.overhead + need.checkpoints
    assert checkpoint_bytes(0) == 0 and checkpoint_bytes(10**9) == MAX_CHECKPOINT_BYTES


# -- the speed model with this machine's kernels (select/kernels.py) --------------------------


import pytest  # noqa: E402

from pocketchat.select import speed as spd  # noqa: E402
from pocketchat.select import kernels as kern  # noqa: E402
from pocketchat.types import KernelProfile, KernelRates  # noqa: E402


@pytest.mark.parametrize("quant", ["Q2_K", "IQ1_M", "Q3_K_M", "Q4_K_M"])
def test_token_bytes_per_type_are_llama_quants_rules_on_pockets_tensor_table(quant):
    """The catalog's bytes a token reads per (type, role) are those of POCKET's tensor table
    with llama.cpp's quantizer types (benchmarks/pocket_gguf.py writes the same file)."""
    import sys
    from pathlib import Path

    import gguf

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import pocket_gguf as pg

    got: dict[tuple[str, str], int] = {}
    for p in pg.tensor_types(pg.POCKET, pg.POCKET_VOCAB, quant):
        name = p.spec.name
        if name == "token_embd.weight" or len(p.spec.ne) < 2 or not name.endswith(".weight"):
            continue
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(p.ggml_type)]
        nbytes = p.n_elements // block * size
        role = "expert" if "_exps" in name else "output" if name == "output.weight" else "dense"
        if role == "expert":
            nbytes = nbytes * pg.POCKET.n_expert_used // pg.POCKET.n_expert
        key = (kern.type_name(p.ggml_type), role)
        got[key] = got.get(key, 0) + nbytes
    assert got == kern.POCKET_TOKEN_BYTES[quant]


def test_a_token_reads_the_tables_bytes_not_its_share_of_the_file():
    """Q2_K's output and attention weights are of more bits than its experts: a token reads
    1.47 GB (the full-size synthetic file's header says so too), not 12.9 GB x 3/34.66."""
    q2 = catalog.get("POCKET-35B-Q2_K")
    assert spd.read_per_token(q2) == pytest.approx(1.466e9, rel=0.01)
    assert catalog.bytes_per_token(q2) < 1.2e9
    pruned = catalog.get("POCKET-KR-160-Q2_K")  # fewer experts kept, the same 8 read per token
    assert spd.read_per_token(pruned) == spd.read_per_token(q2)


def _rates(threads: int, gbps: dict[str, float], layer_s: float = 0.0, step_s: float = 0.0) -> KernelRates:
    return KernelRates(threads, tuple((t, role, r) for t, r in gbps.items() for role in ("expert", "dense")),
                       (("recurrent", layer_s), ("attention", layer_s)), step_s)


def test_a_token_takes_the_larger_of_memory_and_compute_plus_the_overhead():
    q2 = catalog.get("POCKET-35B-Q2_K")
    table = kern.POCKET_TOKEN_BYTES["Q2_K"]
    slow = {"Q2_K": 5.0, "Q3_K": 5.0, "Q4_K": 5.0, "Q6_K": 5.0, "F32": 5.0}
    kernels = KernelProfile((_rates(2, slow, layer_s=0.001, step_s=0.002),))
    s = spd.cpu_speed(q2, cpu_bandwidth_gbps=40.0, threads=2, arch="x86_64", kernels=kernels)
    assert s.compute_s == pytest.approx(sum(table.values()) / 5e9)
    assert s.memory_s == pytest.approx(sum(table.values()) / 40e9)  # with kernels: the whole 40 GB/s
    assert s.overhead_s == pytest.approx(40 * 0.001 + 0.002)  # 30 DeltaNet + 10 attention layers
    assert s.tok_s == pytest.approx(1 / (s.compute_s + s.overhead_s))
    assert s.bound == "compute" and s.why(40.0) == "compute-bound here: 2 threads"
    fast = KernelProfile((_rates(2, {k: 100.0 for k in slow}),))
    b = spd.cpu_speed(q2, cpu_bandwidth_gbps=40.0, threads=2, arch="x86_64", kernels=fast)
    assert b.bound == "bandwidth" and b.tok_s == pytest.approx(1 / b.memory_s)
    assert b.why(40.0) == "bandwidth-bound here: 40 GB/s"
    plain = spd.cpu_speed(q2, cpu_bandwidth_gbps=40.0, threads=2, arch="x86_64")
    # without them, the share of the bandwidth decoding reaches: min(40 x 0.5, 2 x 8) GB/s
    assert plain.bound == "" and plain.tok_s == pytest.approx(16e9 / sum(table.values()))


def test_unmeasured_types_fall_back_to_the_bandwidth():
    """A build whose weights are mostly of types the probe did not measure (IQ2_M's IQ2_S, a
    mix) is estimated from the bandwidth alone; a small unmeasured share is priced at the mean."""
    q2 = catalog.get("POCKET-35B-Q2_K")
    some = _rates(2, {"Q2_K": 5.0})
    assert kern.compute_seconds(q2, some) is None  # Q3_K, Q4_K, Q6_K unmeasured: most of it
    nearly = _rates(2, {"Q2_K": 5.0, "Q3_K": 5.0, "Q4_K": 5.0, "Q6_K": 5.0})  # F32: 6% unmeasured
    assert kern.compute_seconds(q2, nearly) == pytest.approx(spd.read_per_token(q2) / 5e9)
    mix = catalog.get("POCKET-EN-PC-mix")
    assert kern.token_bytes(mix) is None and kern.compute_seconds(mix, nearly) is None


def test_rates_at_an_unmeasured_thread_count_scale_with_the_threads():
    kernels = KernelProfile((_rates(8, {"Q2_K": 16.0}, layer_s=0.002), _rates(4, {"Q2_K": 9.0}, layer_s=0.004)))
    assert kern.rates_at(kernels, 4).rate("Q2_K", "expert") == 9.0
    six = kern.rates_at(kernels, 6)  # as far from 4 as from 8: the larger count's, scaled
    assert six.rate("Q2_K", "dense") == pytest.approx(16.0 * 6 / 8)
    assert kern.rates_at(kernels, 5).rate("Q2_K", "dense") == pytest.approx(9.0 * 5 / 4)
    assert dict(kern.rates_at(kernels, 16).layer_seconds)["recurrent"] == pytest.approx(0.001)
    assert kern.rates_at(None, 4) is None
    assert kern.probe_threads(2) == [2, 1] and kern.probe_threads(1) == [1] and kern.probe_threads(16) == [16, 8]
