"""Memory and speed estimates for one build at one context size. Pure functions.

The constants are the qwen35moe architecture (shared/pocket-builds.md) and calibrations
against the published speeds; every figure they produce is labelled an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketchat.select.catalog import bytes_per_token, expert_bytes
from pocketchat.types import GPU, MiB, Build

# KV cache at F16: only the 10 full-attention layers hold one:
# 10 layers x 2 KV heads x 256 head dim x 2 (K and V) x 2 bytes.
KV_BYTES_PER_TOKEN = 10 * 2 * 256 * 2 * 2
# Gated-DeltaNet recurrent state, per sequence.
RECURRENT_STATE_BYTES = 63 * 1000**2
# Compute buffers (logits for a 248k vocabulary at n_batch 512, attention scratch) and the
# runtime itself (worker process, llama.cpp context).
COMPUTE_BASE_BYTES = 300 * MiB
COMPUTE_PER_TOKEN_BYTES = 8 * 1024
RUNTIME_OVERHEAD_BYTES = 150 * MiB

ACTIVE_EXPERTS = 8

# Speed calibration. CPU decoding is bandwidth-bound: the published CPU figures (Xeon IQ1_M
# 27 tok/s, AMD mini-PC Q2_K 20 tok/s, M3 Pro CPU Q2_K 19.5 tok/s) all read about 20 GB/s of
# weights, roughly half a measured copy bandwidth; DESIGN.md's 75 tok/s for SmolLM2 (98 MB) on the
# 2-core dev machine reads
# 7.4 GB/s of a 14.3 GB/s copy figure (0.51), about 3.7 GB/s per core.
CPU_EFFICIENCY = 0.5
CPU_GBPS_PER_CORE = 4.0
DEFAULT_CPU_GBPS = 20.0
# GPU decoding of a small-expert MoE is partly launch-bound: a fixed cost per token plus the
# bytes at a fraction of the memory bandwidth (H100 NVL IQ1_M 197 tok/s; M3 Pro Metal 25.4).
GPU_EFFICIENCY = 0.5
GPU_OVERHEAD_S = 0.0045
APPLE_EFFICIENCY = 0.3
APPLE_OVERHEAD_S = 0.016

# Memory bandwidth of known GPUs in GB/s, matched by name; a fallback per vendor.
_GPU_GBPS = (
    ("h200", 4800.0), ("h100 nvl", 3900.0), ("h100", 3350.0), ("a100", 2000.0),
    ("l40", 864.0), ("a6000", 768.0), ("5090", 1790.0), ("4090", 1008.0), ("3090", 936.0),
    ("4080", 717.0), ("4070", 504.0), ("3080", 760.0), ("3070", 448.0), ("3060", 360.0),
    ("4060", 272.0), ("7900", 960.0), ("6900", 512.0), ("mi300", 5300.0), ("mi250", 3200.0),
    ("m4 max", 546.0), ("m3 max", 400.0), ("m2 max", 400.0), ("m1 max", 400.0),
    ("ultra", 800.0), ("m4 pro", 273.0), ("m3 pro", 150.0), ("m2 pro", 200.0),
    ("m1 pro", 200.0), ("m4", 120.0), ("m3", 100.0), ("m2", 100.0), ("m1", 68.0),
)
_VENDOR_GBPS = {"nvidia": 400.0, "amd": 400.0, "intel": 80.0, "apple": 100.0}


def gpu_bandwidth_gbps(gpu: GPU) -> float:
    """The GPU's memory bandwidth: its own figure, else a known one by name, else a guess."""
    if gpu.bandwidth_gbps:
        return gpu.bandwidth_gbps
    name = gpu.name.lower()
    for key, gbps in _GPU_GBPS:
        if key in name:
            return gbps
    return _VENDOR_GBPS.get(gpu.vendor, 100.0)


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes one build needs at one context, split by where they live."""

    weights: int
    kv_cache: int
    state: int
    compute: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.state + self.compute + self.overhead


def kv_cache_bytes(n_ctx: int, kv_bytes_per_token: int = KV_BYTES_PER_TOKEN) -> int:
    return n_ctx * kv_bytes_per_token


def memory_need(build: Build, n_ctx: int, *, kv_bytes_per_token: int = KV_BYTES_PER_TOKEN) -> MemoryNeed:
    """Weights + KV cache + recurrent state + compute buffers + runtime overhead."""
    return MemoryNeed(
        weights=build.size_bytes,
        kv_cache=kv_cache_bytes(n_ctx, kv_bytes_per_token),
        state=RECURRENT_STATE_BYTES if build.expert_fraction > 0 else 0,
        compute=COMPUTE_BASE_BYTES + n_ctx * COMPUTE_PER_TOKEN_BYTES,
        overhead=RUNTIME_OVERHEAD_BYTES,
    )


def split_experts(need: MemoryNeed, build: Build) -> tuple[int, int]:
    """(GPU bytes, RAM bytes) when the routed-expert tensors stay in RAM."""
    experts = int(expert_bytes(build))
    gpu = need.total - need.overhead - experts
    ram = experts + need.overhead + COMPUTE_BASE_BYTES // 2
    return gpu, ram


def cpu_gbps(bandwidth_gbps: float | None, threads: int) -> float:
    """Effective weight-reading rate of the CPU in GB/s."""
    measured = bandwidth_gbps or DEFAULT_CPU_GBPS
    return min(measured * CPU_EFFICIENCY, max(threads, 1) * CPU_GBPS_PER_CORE)


def decode_tok_s(
    build: Build,
    placement: str,
    *,
    cpu_bandwidth_gbps: float | None,
    threads: int,
    gpu: GPU | None = None,
) -> float:
    """Estimated generation speed in tokens per second."""
    per_token = bytes_per_token(build)
    cpu_rate = cpu_gbps(cpu_bandwidth_gbps, threads) * 1e9
    if placement == "cpu" or gpu is None:
        return cpu_rate / per_token
    apple = gpu.vendor == "apple"
    eff = APPLE_EFFICIENCY if apple else GPU_EFFICIENCY
    overhead = APPLE_OVERHEAD_S if apple else GPU_OVERHEAD_S
    gpu_rate = gpu_bandwidth_gbps(gpu) * 1e9 * eff
    if placement == "gpu":
        return 1.0 / (per_token / gpu_rate + overhead)
    # gpu+cpu-experts: active expert bytes come from RAM, the rest from VRAM.
    active_experts = min(expert_bytes(build) * ACTIVE_EXPERTS / max(build.n_experts, 1), per_token)
    shared = per_token - active_experts
    return 1.0 / (active_experts / cpu_rate + shared / gpu_rate + overhead)


def fmt_gb(n: float) -> str:
    """Bytes as GB with one decimal, the unit the model card uses."""
    return f"{n / 1e9:.1f} GB"

