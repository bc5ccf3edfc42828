"""Speed and memory estimates stay close to the published figures they are calibrated on."""

from __future__ import annotations

from pocketchat.select import catalog
from pocketchat.select.estimate import decode_tok_s, memory_need, split_experts
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
