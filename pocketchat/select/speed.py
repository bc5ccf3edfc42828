"""Speed estimates for one build on one machine: decode (CPU, GPU, both, a pool) and prompt
reading. Pure functions over the build's bytes and the machine's figures: its copy bandwidth,
its kernel rates when the probe measured them (select/kernels.py), its GPU's bandwidth.
Every figure is an estimate; `measured.Calibration` corrects it with `bench`'s runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pocketchat.select import kernels as kern
from pocketchat.select.budget import Link
from pocketchat.select.catalog import bytes_per_token, expert_bytes
from pocketchat.select.estimate import ACTIVE_EXPERTS, POCKET_LAYERS, pocket_facts
from pocketchat.types import GPU, N_BATCH, Build, Helper, KernelProfile

# Speed. On the CPU a token takes the larger of its bytes over the bandwidth below and its
# bytes at this machine's measured kernel rates (select/kernels.py, when the probe measured
# them), plus its layers' time outside the products: `cpu_speed`. The bandwidth side: on many
# machines CPU decoding is bandwidth-bound: the published CPU figures (Xeon IQ1_M
# 27 tok/s, AMD mini-PC Q2_K 20 tok/s, M3 Pro CPU Q2_K 19.5 tok/s) all read about 20 GB/s of
# weights, roughly half a measured copy bandwidth (the probe copies with the machine's cores
# together, `bandwidth.measure_gbps`: on the 2-core dev machine 31 GB/s, where two threads
# decode the full-size POCKET Q2_K at 15 GB/s, 0.49; one core alone copies 22).
# What one core can read caps a plan with few threads. Apple's (M3 Pro CPU, 8 threads, Q2_K:
# 19.5 tok/s) is about 4 GB/s; an x86 core reads more: on the 2-core dev machine (AMD EPYC,
# Zen 4) one thread decodes the full-size POCKET Q2_K (1.47 GB a token) at 6.6 tok/s, 9.7 GB/s,
# with the other core busy, and at 8.2 tok/s, 12.0 GB/s, on a quiet machine, where two threads
# read 15 GB/s (benchmarks/pocket_scale.py); 8 GB/s a core is still a cautious figure (at 6 the
# estimate for two threads was 0.79 of the quiet measurement).
CPU_EFFICIENCY = 0.5
# With this machine's kernels measured, `cpu_speed` takes the whole bandwidth, a ceiling (the
# probe streams its weights from memory, so its rates already hold what reading them costs):
# a token cannot read its weights faster than the cores copy. Half of it was the bound that made the estimates
# 0.71 of `bench` on a 2-core AMD EPYC, whose kernels read Q2_K at 19 GB/s of its 31
# (benchmarks/RESULTS.md, "`--recommend`: speed estimates against `bench`").
CPU_GBPS_PER_CORE = 4.0
CPU_GBPS_PER_CORE_X86 = 8.0
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


def cpu_gbps(bandwidth_gbps: float | None, threads: int, arch: str | None = None) -> float:
    """Effective weight-reading rate of the CPU in GB/s (`arch`: the machine's, e.g. x86_64)."""
    measured = bandwidth_gbps or DEFAULT_CPU_GBPS
    per_core = CPU_GBPS_PER_CORE_X86 if arch in ("x86_64", "amd64", "AMD64") else CPU_GBPS_PER_CORE
    return min(measured * CPU_EFFICIENCY, max(threads, 1) * per_core)


def read_per_token(build: Build) -> float:
    """Bytes of weights one generated token reads: the header's active bytes; for a catalog
    build of a known quant, its tensor table's (`kernels.POCKET_TOKEN_BYTES`: the output and
    attention weights are of more bits than the experts, so a token reads 1.47 GB of the Q2_K
    build, not its size's share of active parameters, 1.12); else that share."""
    if build.facts is not None:
        return build.facts.active_bytes
    table = kern.pocket_token_bytes(build)
    return sum(table.values()) if table else bytes_per_token(build)


@dataclass(frozen=True)
class SpeedEstimate:
    """A decode speed estimate and what it is made of (seconds per token)."""

    tok_s: float
    memory_s: float = 0.0  # the weights a token reads over the memory bandwidth
    compute_s: float = 0.0  # the same weights at this machine's measured kernel rates (0: none)
    overhead_s: float = 0.0  # outside the products: the layers' other operations, the step
    threads: int = 0

    @property
    def bound(self) -> str:
        """"compute" or "bandwidth" when the kernels were measured; "" when not."""
        if self.compute_s <= 0:
            return ""
        return "compute" if self.compute_s > self.memory_s else "bandwidth"

    def why(self, bandwidth_gbps: float | None) -> str:
        """Which bound applies here, in words ("compute-bound here: 2 threads")."""
        if self.bound == "compute":
            n = self.threads
            return f"compute-bound here: {n} thread{'s' if n != 1 else ''}"
        if self.bound == "bandwidth":
            return (f"bandwidth-bound here: {bandwidth_gbps:.0f} GB/s" if bandwidth_gbps
                    else "bandwidth-bound here")
        return ""

    def with_parts(self, memory_s: float, compute_s: float, overhead_s: float) -> "SpeedEstimate":
        """The same threads with other parts (calibration): a token takes the larger of memory
        and compute, plus the overhead."""
        seconds = max(memory_s, compute_s) + overhead_s
        return SpeedEstimate(1.0 / seconds if seconds > 0 else self.tok_s, memory_s, compute_s,
                             overhead_s, self.threads)


def cpu_speed(build: Build, *, cpu_bandwidth_gbps: float | None, threads: int, arch: str | None = None,
              kernels: KernelProfile | None = None) -> SpeedEstimate:
    """Decoding on the CPU: the larger of the bytes over the bandwidth (the whole copy bandwidth,
    a ceiling, when the kernels were measured) and the bytes at this machine's kernel rates
    (`kernels`, the probe's), plus what a token does outside its products. Without kernel rates
    for this build's types, the bandwidth alone, at the share of it decoding reaches."""
    rates = kern.rates_at(kernels, threads)
    compute = kern.compute_seconds(build, rates)
    if compute is None:
        memory = read_per_token(build) / (cpu_gbps(cpu_bandwidth_gbps, threads, arch) * 1e9)
        return SpeedEstimate(1.0 / memory, memory, 0.0, 0.0, threads)
    memory = read_per_token(build) / ((cpu_bandwidth_gbps or DEFAULT_CPU_GBPS) * 1e9)
    overhead = kern.overhead_seconds(build, rates)
    return SpeedEstimate(1.0 / (max(memory, compute) + overhead), memory, compute, overhead, threads)


def prompt_speed(build: Build, *, cpu_bandwidth_gbps: float | None, threads: int,
                 kernels: KernelProfile | None, n_ubatch: int = N_BATCH) -> float | None:
    """Prompt tokens read per second on the CPU, at the start of a prompt: a token of a batch
    multiplies its weights at the probe's prompt rates (`kernels.prompt`) plus its layers' other
    operations, and each batch of `n_ubatch` tokens reads all the weights once. None without the
    prompt's rates for this build's types."""
    rates = kern.prompt_rates_at(kernels, threads)
    compute = kern.compute_seconds(build, rates, prompt=True)
    if compute is None:
        return None
    weights = build.facts.weight_bytes if build.facts is not None else build.size_bytes
    memory = weights / ((cpu_bandwidth_gbps or DEFAULT_CPU_GBPS) * 1e9) / max(n_ubatch, 1)
    seconds = compute + memory + kern.overhead_seconds(build, rates)
    return 1.0 / seconds


def decode_speed(
    build: Build,
    placement: str,
    *,
    cpu_bandwidth_gbps: float | None,
    threads: int,
    gpu: GPU | None = None,
    n_cpu_moe: int | None = None,
    arch: str | None = None,
    kernels: KernelProfile | None = None,
) -> SpeedEstimate:
    """Estimated generation speed and its parts.

    On the CPU: `cpu_speed` (with this machine's kernels when measured). With `gpu+cpu-experts`,
    the active experts of the first `n_cpu_moe` layers (None: all) are read from RAM by the CPU,
    everything else from VRAM. `arch`: the machine's CPU architecture.
    """
    if placement == "cpu" or gpu is None:
        return cpu_speed(build, cpu_bandwidth_gbps=cpu_bandwidth_gbps, threads=threads, arch=arch,
                         kernels=kernels)
    facts = build.facts
    per_token = read_per_token(build)
    cpu_rate = cpu_gbps(cpu_bandwidth_gbps, threads, arch) * 1e9
    apple = gpu.vendor == "apple"
    eff = APPLE_EFFICIENCY if apple else GPU_EFFICIENCY
    overhead = APPLE_OVERHEAD_S if apple else GPU_OVERHEAD_S
    gpu_rate = gpu_bandwidth_gbps(gpu) * 1e9 * eff
    if placement == "gpu":
        return SpeedEstimate(1.0 / (per_token / gpu_rate + overhead), threads=threads)
    # gpu+cpu-experts: active expert bytes of the layers in RAM come from RAM, the rest from VRAM.
    if facts is not None and facts.is_moe:
        layers = facts.expert_layers
        n = layers if n_cpu_moe is None else min(n_cpu_moe, layers)
        share = facts.expert_bytes_of_first(n) / max(facts.expert_bytes, 1)
        used = max(facts.expert_used_count, 1) / max(facts.expert_count, 1)
        active_experts = min(facts.expert_bytes * used * share, per_token)
    else:
        share = 1.0 if n_cpu_moe is None else min(n_cpu_moe / POCKET_LAYERS, 1.0)
        active_experts = min(expert_bytes(build) * ACTIVE_EXPERTS / max(build.n_experts, 1) * share,
                             per_token)
    shared = per_token - active_experts
    return SpeedEstimate(1.0 / (active_experts / cpu_rate + shared / gpu_rate + overhead), threads=threads)


def decode_tok_s(build: Build, placement: str, *, cpu_bandwidth_gbps: float | None, threads: int,
                 gpu: GPU | None = None, n_cpu_moe: int | None = None, arch: str | None = None,
                 kernels: KernelProfile | None = None) -> float:
    """Estimated generation speed in tokens per second (`decode_speed`'s figure)."""
    return decode_speed(build, placement, cpu_bandwidth_gbps=cpu_bandwidth_gbps, threads=threads, gpu=gpu,
                        n_cpu_moe=n_cpu_moe, arch=arch, kernels=kernels).tok_s


def pooled_tok_s(build: Build, cpu_bandwidth_gbps: float | None, helpers: Sequence[Helper],
                 layers: Sequence[int], *, threads: int, link: Link = Link()) -> float:
    """Decode speed over a pool: each device reads its share of the weights, plus the links.

    `layers`: this machine's first, then each helper's. A helper's memory bandwidth is its own
    figure when known, else taken to be this machine's.
    """
    facts = pocket_facts(build)
    n = max(sum(layers), 1)
    per_token = bytes_per_token(build)
    seconds = layers[0] / n * per_token / (cpu_gbps(cpu_bandwidth_gbps, threads) * 1e9)
    used = [i for i, k in enumerate(layers[1:]) if k > 0]
    for i in used:
        h = helpers[i]
        rate = cpu_gbps(h.memory_bandwidth_gbps or cpu_bandwidth_gbps, threads) * 1e9
        seconds += layers[i + 1] / n * per_token / rate
        seconds += link.seconds(h, hidden=facts.n_embd, vocab=facts.vocab_size, last=i == used[-1])
    return 1.0 / seconds
