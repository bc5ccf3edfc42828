"""Memory and speed estimates for one build at one context size. Pure functions.

Every GGUF whose header was read (on disk, or over HTTP before a download) is estimated from
its own facts (`modelfile.facts.ModelFacts`): weights, the KV cache of the layers that hold
one, the recurrent state, compute buffers and the runtime. The POCKET constants below (the
qwen35moe architecture, shared/pocket-builds.md) are only the offline fallback for a catalog
build whose header is unknown. The runtime terms were measured (benchmarks/bench_memory.py:
peak RSS of a load plus one short answer); every figure is labelled an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketchat.modelfile.facts import ModelFacts
from pocketchat.modelfile.layers import full_attention_layers
from pocketchat.modelfile.qwen35 import POCKET, POCKET_VOCAB
from pocketchat.select.catalog import bytes_per_token, expert_bytes
from typing import Sequence

from pocketchat.select import kernels as kern
from pocketchat.select.budget import Link
from pocketchat.select.repack import pocket_type_bytes, repacked_bytes
from pocketchat.types import GPU, MAX_CHECKPOINTS, N_BATCH, Build, Helper, KernelProfile, MiB, checkpoint_bytes

# Gated-DeltaNet recurrent state, per sequence.
RECURRENT_STATE_BYTES = 63 * 1000**2
# Compute buffers (logits for a 248k vocabulary at n_batch 512, attention scratch) and the
# runtime itself (worker process, llama.cpp context).
COMPUTE_BASE_BYTES = 300 * MiB
COMPUTE_PER_TOKEN_BYTES = 8 * 1024
RUNTIME_OVERHEAD_BYTES = 150 * MiB

ACTIVE_EXPERTS = 8

# Measured on llama-cpp-python 0.3.36 (benchmarks/bench_memory.py): the worker process with
# Python and llama.cpp loaded, the vocabulary's tables (per token and per BPE merge), and the
# compute buffer a short answer touches (activations of one n_batch, attention over the context).
RUNTIME_BASE_BYTES = 58 * MiB
VOCAB_TOKEN_BYTES = 140
MERGE_BYTES = 250
COMPUTE_TOUCHED_BASE_BYTES = 4 * MiB
COMPUTE_TOUCHED_PER_CTX_BYTES = 160
ACTIVATION_BYTES_PER_EMBD = 40  # per batch token and model width
KV_PAD = 256  # llama.cpp pads the KV cache to a multiple of 256 cells
# Bytes per element of the KV cache types a plan may name.
KV_ELEM_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                 "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}  # fmt: skip
# POCKET (qwen35moe) for the offline fallback: its shape is modelfile/qwen35.py's.
POCKET_LAYERS = POCKET.n_layer

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


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes one build needs at one context, split by where they live."""

    weights: int  # the weights decoding reads (not the token embeddings: a row per token)
    kv_cache: int
    state: int
    compute: int
    overhead: int
    checkpoints: int = 0  # copies of the recurrent state the prompt cache keeps (RAM)
    repacked: int = 0  # of `weights`: held as llama.cpp's repacked copy, in anonymous memory
    cold: int = 0  # file pages a load maps and reads that decoding never reads again
    # copies of the recurrent state drafting keeps per sequence (llama.cpp's n_rs_seq), held
    # where the state is: a rejected draft is rolled back to one
    snapshots: int = 0
    # the MTP head drafts load (`types.runs_head`): its block's weights (of `weights`) and its
    # KV cache (one sequence's: more than one sequence runs without the head)
    head_weights: int = 0
    head_kv: int = 0

    @property
    def total(self) -> int:
        """What the load needs resident to decode at full speed."""
        return (self.weights + self.kv_cache + self.state + self.snapshots + self.compute
                + self.overhead + self.checkpoints + self.head_kv)

    @property
    def head(self) -> int:
        """What the MTP head takes, which a load of more than one sequence leaves out."""
        return self.head_weights + self.head_kv

    @property
    def per_sequence(self) -> int:
        """What each more sequence decoded at once (serve --parallel) adds: its KV cache at
        this context, its recurrent state (and drafting's snapshots of it) and its prompt
        cache's checkpoints."""
        return self.kv_cache + self.state + self.snapshots + self.checkpoints

    @property
    def host(self) -> int:
        """Bytes that stay in RAM wherever the model runs: the runtime and the checkpoints."""
        return self.overhead + self.checkpoints

    @property
    def anonymous(self) -> int:
        """The part that is anonymous memory (cannot be paged out without swap): the repacked
        weights, KV cache, recurrent state, compute buffers, runtime and checkpoints."""
        return self.total - self.mapped

    @property
    def mapped(self) -> int:
        """The part read from the file's mapping (page cache the kernel may drop and re-read)."""
        return self.weights - self.repacked

    @property
    def resident(self) -> int:
        """What the process's RSS shows after a load while memory is plentiful: the need plus
        the file pages the load read once (the repacked weights' own pages, the embeddings)."""
        return self.total + self.cold


def effective_ctx(facts: ModelFacts, n_ctx: int) -> int:
    """The context llama.cpp allocates: at most the trained one (as the loader asks), padded."""
    if facts.context_length:
        n_ctx = min(n_ctx, facts.context_length)
    return -(-n_ctx // KV_PAD) * KV_PAD


def runtime_bytes(facts: ModelFacts) -> int:
    """The worker process itself: interpreter, llama.cpp, the vocabulary's tables."""
    return RUNTIME_BASE_BYTES + facts.vocab_size * VOCAB_TOKEN_BYTES + facts.merge_count * MERGE_BYTES


def compute_bytes(facts: ModelFacts, n_ctx: int, *, on_gpu: bool, n_batch: int = N_BATCH) -> int:
    """Compute buffers: on a GPU the whole reserve (allocated up front), on the CPU what is touched."""
    activations = n_batch * facts.n_embd * ACTIVATION_BYTES_PER_EMBD
    if on_gpu:  # logits of one batch plus activations; flash attention keeps KQ small
        return n_batch * facts.vocab_size * 4 + activations + COMPUTE_BASE_BYTES // 4
    return COMPUTE_TOUCHED_BASE_BYTES + n_ctx * COMPUTE_TOUCHED_PER_CTX_BYTES + activations


def need_from_facts(facts: ModelFacts, n_ctx: int, *, on_gpu: bool = False, kv_type: str = "f16",
                    n_batch: int = N_BATCH, checkpoints: int = MAX_CHECKPOINTS,
                    repack: frozenset[int] = frozenset(), snapshots: int = 0,
                    head: bool = False) -> MemoryNeed:
    """Weights + KV cache + recurrent state + compute + runtime + `checkpoints` copies of the
    state, from the header's facts. `repack`: the ggml types llama.cpp repacks on this CPU
    (select/repack.py); on the CPU those weights become anonymous memory. `snapshots`: the
    state's copies drafting keeps (the plan's draft depth; 0: no drafts); `head`: whether the
    drafts load the model's MTP block (its weights and KV)."""
    ctx = effective_ctx(facts, n_ctx)
    elem = KV_ELEM_BYTES.get(kv_type.lower(), 2.0)
    repacked = 0 if on_gpu else repacked_bytes(facts.weight_type_bytes, repack)
    head_weights = facts.mtp_bytes if head else 0  # an MTP block loads only for its drafts
    return MemoryNeed(
        weights=facts.weight_bytes - facts.embedding_bytes - facts.mtp_bytes + head_weights,
        kv_cache=facts.kv_cache_bytes(ctx, elem),
        state=facts.recurrent_state_bytes,
        compute=compute_bytes(facts, ctx, on_gpu=on_gpu, n_batch=min(n_batch, ctx)),
        overhead=runtime_bytes(facts),
        checkpoints=checkpoint_bytes(facts.recurrent_state_bytes, checkpoints),
        repacked=repacked,
        cold=repacked + facts.embedding_bytes,
        snapshots=max(snapshots, 0) * facts.recurrent_state_bytes,
        head_weights=head_weights,
        head_kv=int(facts.mtp_kv_per_token * elem * ctx) if head else 0,
    )


def pocket_facts(build: Build) -> ModelFacts:
    """Facts for a catalog build whose header is unknown: POCKET's architecture and the card's sizes."""
    if build.facts is not None:
        return build.facts
    moe = build.expert_fraction > 0
    experts = int(build.size_bytes * build.expert_fraction) if moe else 0
    per_layer = experts // POCKET_LAYERS
    kv = full_attention_layers(POCKET.n_layer, POCKET.full_attention_interval)
    return ModelFacts(
        arch="qwen35moe" if moe else "unknown", name=build.id, file_bytes=build.size_bytes,
        weight_bytes=build.size_bytes, block_count=POCKET_LAYERS, context_length=POCKET.n_ctx_train,
        vocab_size=POCKET_VOCAB, n_embd=POCKET.n_embd, n_head=POCKET.n_head,
        kv_layers=kv, kv_heads=(POCKET.n_head_kv,) * len(kv), key_length=POCKET.head_dim,
        value_length=POCKET.head_dim,
        recurrent_layers=tuple(i for i in range(POCKET_LAYERS) if i not in kv) if moe else (),
        recurrent_state_bytes=RECURRENT_STATE_BYTES if moe else 0,
        expert_count=build.n_experts if moe else 0, expert_used_count=ACTIVE_EXPERTS if moe else 0,
        expert_layer_bytes=tuple((i, per_layer) for i in range(POCKET_LAYERS)) if moe else (),
        merge_count=POCKET_VOCAB if moe else 0,
    )


def build_from_facts(facts: ModelFacts, name: str, *, repo_id: str = "", filename: str | None = None,
                     quant: str = "?") -> Build:
    """A `Build` for a model outside the catalog, its estimates made from its header."""
    weights = max(facts.weight_bytes, 1)
    return Build(
        id=name, repo_id=repo_id, filename=filename, quant=quant, format="gguf",
        size_bytes=facts.file_bytes, bits_per_weight=0.0, language="multi",
        quality={"en": 1.0, "ko": 1.0}, total_params=1.0, active_params=facts.active_bytes / weights,
        expert_fraction=facts.expert_bytes / weights, n_experts=max(facts.expert_count, 1),
        facts=facts,
    )


def memory_need(build: Build, n_ctx: int, *, on_gpu: bool = False, checkpoints: int = MAX_CHECKPOINTS,
                n_batch: int = N_BATCH, repack: frozenset[int] = frozenset(),
                snapshots: int = 0, head: bool = False) -> MemoryNeed:
    """Weights + KV cache + recurrent state + compute buffers + runtime overhead + checkpoints
    (+ `snapshots` copies of the recurrent state for drafting: the draft depth, 0 without; +
    the MTP block where `head`: drafts load it).

    `n_batch` counts only with the header's facts: the offline fallback's compute figure is a
    measured constant. `repack`: the types llama.cpp repacks on this CPU (`repack.repacked_types`);
    without the header, a POCKET build's share of each type comes from its quant."""
    if build.facts is not None:
        return need_from_facts(build.facts, n_ctx, on_gpu=on_gpu, checkpoints=checkpoints, n_batch=n_batch,
                               repack=repack, snapshots=snapshots, head=head)
    state = RECURRENT_STATE_BYTES if build.expert_fraction > 0 else 0
    repacked = 0 if on_gpu else repacked_bytes(pocket_type_bytes(build.quant, build.size_bytes), repack)
    return MemoryNeed(
        weights=build.size_bytes,
        kv_cache=pocket_facts(build).kv_cache_bytes(n_ctx),
        state=state,
        compute=COMPUTE_BASE_BYTES + n_ctx * COMPUTE_PER_TOKEN_BYTES,
        overhead=RUNTIME_OVERHEAD_BYTES,
        checkpoints=checkpoint_bytes(state, checkpoints),
        repacked=repacked,
        cold=repacked,
        snapshots=max(snapshots, 0) * state,
    )


def expert_layer_count(build: Build) -> int:
    """Layers with routed experts (what --n-cpu-moe counts)."""
    return pocket_facts(build).expert_layers if build.expert_fraction > 0 or build.facts else 0


def split_experts(need: MemoryNeed, build: Build, n_cpu_moe: int | None = None) -> tuple[int, int]:
    """(GPU bytes, RAM bytes) when the routed experts of the first `n_cpu_moe` layers (None:
    every layer) stay in RAM and everything else is on the GPU."""
    facts = pocket_facts(build)
    layers = facts.expert_layers
    n = layers if n_cpu_moe is None else min(max(n_cpu_moe, 0), layers)
    if build.facts is not None:
        in_ram = facts.expert_bytes_of_first(n)
    else:
        in_ram = int(expert_bytes(build) * n / max(layers, 1))
    gpu = need.total - need.host - in_ram
    ram = in_ram + need.host + (COMPUTE_BASE_BYTES // 2 if in_ram else 0)
    return gpu, ram


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


def fmt_gb(n: float) -> str:
    """Bytes as GB with one decimal, the unit the model card uses."""
    return f"{n / 1e9:.1f} GB"

