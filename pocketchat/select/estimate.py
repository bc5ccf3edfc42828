"""Memory estimates for one build at one context size (speed: `select/speed.py`). Pure functions.

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
from pocketchat.select.catalog import expert_bytes
from pocketchat.select.repack import pocket_type_bytes, repacked_bytes
from pocketchat.types import MAX_CHECKPOINTS, N_BATCH, Build, MiB, checkpoint_bytes

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


def fmt_gb(n: float) -> str:
    """Bytes as GB with one decimal, the unit the model card uses."""
    return f"{n / 1e9:.1f} GB"

