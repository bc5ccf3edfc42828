"""Plain data that crosses the package boundaries: hardware, builds, plans, recommendations."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

GiB = 1024**3
MiB = 1024**2
GB = 1000**3

Vendor = Literal["nvidia", "amd", "intel", "apple"]
Placement = Literal["cpu", "gpu", "gpu+cpu-experts"]
Backend = Literal["llama.cpp", "mlx"]
Format = Literal["gguf", "mlx"]


@dataclass(frozen=True)
class GPU:
    """One GPU; for Apple Silicon `vram_total_bytes` is the Metal working-set budget."""

    vendor: Vendor
    name: str
    vram_total_bytes: int = 0
    vram_free_bytes: int = 0
    unified_memory: bool = False
    bandwidth_gbps: float | None = None


ROLES = ("expert", "dense")  # a weight's role in a token: a routed expert (MUL_MAT_ID) or dense


@dataclass(frozen=True)
class KernelRates:
    """What the kernel probe measured at one thread count: this machine's decode rate, in GB/s
    of weights, per ggml type name ("Q2_K", "IQ1_M" ...) and role ("expert", "dense"); the
    seconds a layer of each kind ("recurrent", "attention") spends outside its matrix
    products; and the rest of a decode step. The prompt's (`KernelProfile.prompt`): the same
    figures per token of a prompt's batch."""

    threads: int
    rates: tuple[tuple[str, str, float], ...] = ()
    layer_seconds: tuple[tuple[str, float], ...] = ()
    step_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        names = dict.fromkeys(t for t, _, _ in self.rates)
        return {"rates": {t: {ro: r for tt, ro, r in self.rates if tt == t} for t in names},
                "layer_s": dict(self.layer_seconds), "step_s": self.step_seconds}

    def rate(self, type_name: str, role: str) -> float | None:
        """GB/s of that type in that role; the other role's when only it was measured."""
        same = [r for t, ro, r in self.rates if t == type_name and ro == role]
        other = [r for t, _, r in self.rates if t == type_name]
        return (same or other or [None])[0]


@dataclass(frozen=True)
class KernelProfile:
    """The kernel probe's measurements (`select.kernels`), per thread count, and what they were
    measured with: the llama.cpp build (measured again when it changes). `prompt`: a prompt's
    batch at the most threads, per token of it (None: not measured)."""

    at: tuple[KernelRates, ...]
    build: str = ""
    seconds: float = 0.0  # how long the probe took
    measured_at: float = 0.0
    prompt: KernelRates | None = None

    def threads(self) -> tuple[int, ...]:
        return tuple(sorted(k.threads for k in self.at))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"build": self.build, "seconds": self.seconds, "measured_at": self.measured_at,
                                "threads": {str(k.threads): k.to_json() for k in self.at}}
        if self.prompt is not None:
            data["prompt"] = {"threads": self.prompt.threads, **self.prompt.to_json()}
        return data


@dataclass(frozen=True)
class HardwareProfile:
    """What the probe saw, or what a JSON file says a machine has."""

    os: str
    arch: str
    cpu_name: str = "unknown"
    cpu_physical_cores: int = 1
    cpu_logical_cores: int = 1
    cpu_flags: tuple[str, ...] = ()
    ram_total_bytes: int = 0
    ram_available_bytes: int = 0
    memory_bandwidth_gbps: float | None = None
    disk_free_bytes: int | None = None
    gpus: tuple[GPU, ...] = ()
    backends: tuple[str, ...] = ("llama.cpp",)
    llama_gpu_offload: bool | None = None
    llama_rpc: bool | None = None  # llama.cpp built with its RPC backend (pooling, --rpc)
    notes: tuple[str, ...] = ()
    # The kernel probe's rates (None: not measured, e.g. no llama.cpp, or a replayed machine
    # without them): speed estimates then come from the bandwidth alone.
    kernels: KernelProfile | None = None
    # Cores' worth of CPU other processes used when the probe looked (None: not looked).
    cpu_busy_cores: float | None = None

    @property
    def apple_silicon(self) -> bool:
        return self.os == "darwin" and self.arch == "arm64"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cpu_flags"] = list(self.cpu_flags)
        data["gpus"] = [asdict(g) for g in self.gpus]
        data["backends"] = list(self.backends)
        data["notes"] = list(self.notes)
        data["kernels"] = self.kernels.to_json() if self.kernels is not None else None
        return data


@dataclass(frozen=True)
class Build:
    """One downloadable model build: where it lives and what it costs."""

    id: str
    repo_id: str
    filename: str | None
    quant: str
    format: Format
    size_bytes: int
    bits_per_weight: float
    language: Literal["multi", "en", "ko"] = "multi"
    quality: dict[str, float] = field(default_factory=dict)
    total_params: float = 34.66e9
    active_params: float = 3.0e9
    expert_fraction: float = 0.943
    n_experts: int = 256
    description: str = ""
    verified: bool = True
    # What the file's header says (a modelfile.facts.ModelFacts, read from disk or over HTTP);
    # None: the catalog's constants. Typed loosely: types.py imports nothing of pocketchat.
    facts: Any = field(default=None, compare=False, repr=False)

    @property
    def backend(self) -> Backend:
        return "mlx" if self.format == "mlx" else "llama.cpp"


@dataclass(frozen=True)
class Sampling:
    """Sampling defaults for a model; a request may override any of them. The field defaults
    are POCKET's and the one place these numbers are written: `select/defaults.py` picks a
    Sampling per kind of model, and an engine falls back on `Sampling()` where a plan has none."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    repeat_penalty: float = 1.0


# Prompt tokens evaluated in one batch (llama.cpp's n_batch, MLX's prompt step) unless a plan
# trades it for memory (`select/ladder.py`): the plan's default, what the estimate counts, and a
# prompt's progress piece.
N_BATCH = 512

# Checkpoints of a recurrent state (hybrid models such as POCKET) that the engine's prompt
# cache keeps in RAM, and the memory estimate counts: at most this many, and this many bytes.
# A plan may keep fewer (`LoadPlan.checkpoints`) when memory is short; the engine keeps that many.
MAX_CHECKPOINTS = 4
MAX_CHECKPOINT_BYTES = 256 * 1024 * 1024  # POCKET's DeltaNet state is ~63 MB: four fit


# The most drafted tokens a step verifies (`--draft`): on a hybrid model llama.cpp keeps this
# many snapshots of each sequence's recurrent state to roll a rejected draft back (`n_rs_seq`),
# which the memory estimate counts (`select/estimate.py`) and the ladder trades first.
DRAFT_DEPTH = 4
# The drafts a plan runs unless `--draft` says otherwise: "auto" drafts only while its own
# figures say it pays on this machine, for this model and this text (engines/draft/policy.py).
DEFAULT_DRAFT = "auto"


def runs_head(draft: str, block_layers: int, sequences: int) -> bool:
    """Whether a model's MTP head is loaded and drafts: `--draft auto|mtp`, a GGUF with the
    block, one sequence (`serve --parallel N` drafts by lookup only). The load reads it
    (engines/llamacpp/load.py) and the memory estimate counts what it loads."""
    return draft in ("auto", "mtp") and block_layers > 0 and sequences <= 1


def checkpoint_bytes(recurrent_state_bytes: int, count: int = MAX_CHECKPOINTS) -> int:
    """RAM `count` checkpoints of a state of this size may take (0: no recurrent state)."""
    return min(max(count, 0) * max(recurrent_state_bytes, 0), MAX_CHECKPOINT_BYTES)


# The prompt cache across conversations (parked sequence states, `engines/state/prompt_cache.py`):
# by default this share of the RAM the plan leaves free, at most MAX_PROMPT_CACHE_BYTES (as
# llama.cpp's server's host cache); `serve --prompt-cache-mb` sets it, 0 turns it off.
PROMPT_CACHE_SHARE = 0.25
MAX_PROMPT_CACHE_BYTES = 8 * GiB
# Its disk tier (`engines/state/prompt_disk.py`): by default this share of the free disk, at most
# MAX_PROMPT_CACHE_DISK_BYTES, none when less than MIN_FREE_DISK_BYTES is free;
# `--prompt-cache-disk-mb` sets it, 0 turns it off.
PROMPT_CACHE_DISK_SHARE = 0.05
MAX_PROMPT_CACHE_DISK_BYTES = 8 * GiB
MIN_FREE_DISK_BYTES = 8 * GiB


@dataclass(frozen=True)
class LoadPlan:
    """How to load one build on one machine."""

    backend: Backend
    placement: Placement
    n_gpu_layers: int
    n_ctx: int
    n_threads: int
    n_threads_batch: int
    cpu_moe: bool = False
    n_cpu_moe: int = 0  # keep the experts of the first N layers in RAM (llama.cpp --n-cpu-moe N)
    flash_attn: bool = False
    use_mmap: bool = True
    kv_type: str = "f16"
    n_batch: int = N_BATCH
    checkpoints: int = MAX_CHECKPOINTS  # recurrent-state copies the prompt cache may keep
    parallel: int = 1  # sequences loaded and decoded together; each has n_ctx tokens
    serve_parallel: int = 1  # what `serve` loads by default: the sequences the memory holds
    prompt_cache_bytes: int = 0  # parked states of other conversations (0: off)
    # Drafted tokens verified in one step (`--draft`): "auto" drafts (with the model's MTP head
    # where it has one, else from the conversation) while it pays here (engines/draft/policy.py),
    # "ngram" and "mtp" draft always, "off" never. (`DEFAULT_DRAFT` is what commands ask for.)
    draft: str = "off"
    draft_depth: int = DRAFT_DEPTH  # the most drafted tokens a step verifies (recurrent snapshots kept)
    prompt_cache_disk_bytes: int = 0  # the same states on disk, across restarts (0: off)
    sampling: Sampling = field(default_factory=Sampling)
    notes: tuple[str, ...] = ()  # what the plan changed from the request, for the user
    # Pooling over llama.cpp's RPC backend: each helper's HOST:PORT and the transformer
    # layers it holds (the last ones, the output layer with the last helper); the rest stay here.
    rpc_servers: tuple[str, ...] = ()
    rpc_layers: tuple[int, ...] = ()
    n_layers: int = 0  # the model's layer count, when the plan splits it
    # The user fixed the thread count (--threads N): the engine keeps it; otherwise the count
    # follows a busy machine while the model runs (engines/llamacpp/threads.py).
    threads_pinned: bool = False

    def describe(self) -> str:
        if self.rpc_servers:
            here = max(self.n_layers - sum(self.rpc_layers), 0)
            parts = [f"{n} on {ep}" for ep, n in zip(self.rpc_servers, self.rpc_layers, strict=False)]
            return f"{here} layers here + " + " + ".join(parts) + f", {_threads(self.n_threads)}"
        if self.placement == "gpu":
            return "GPU, all layers"
        if self.placement == "gpu+cpu-experts":
            if self.n_cpu_moe and not self.cpu_moe:
                return (f"GPU + experts of the first {self.n_cpu_moe} layers on CPU, "
                        f"{_threads(self.n_threads)}")
            return f"GPU + experts on CPU, {_threads(self.n_threads)}"
        return f"CPU, {_threads(self.n_threads)}"


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


@dataclass(frozen=True)
class Helper:
    """Another machine lending its memory and compute over llama.cpp's RPC backend, as measured."""

    endpoint: str
    free_bytes: int
    total_bytes: int
    n_devices: int = 1
    rtt_seconds: float | None = None
    throughput_bytes_s: float | None = None
    # A CPU device reports all its RAM as free ("free system memory is ill-defined").
    reports_total_as_free: bool = False
    memory_bandwidth_gbps: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Split:
    """Layers per device of a pool (this machine first, then each helper) and the bytes each holds."""

    layers: tuple[int, ...]
    memory: tuple[int, ...]
    budgets: tuple[int, ...]
    fits: bool

    @property
    def helper_layers(self) -> tuple[int, ...]:
        return self.layers[1:]


@dataclass(frozen=True)
class Candidate:
    """One build judged against one budget (this machine, or this machine and helpers)."""

    build: Build
    fits: bool
    plan: LoadPlan | None
    estimated_memory_bytes: int
    estimated_decode_tok_s: float | None
    reason: str
    score: float = 0.0
    eligible: bool = True
    downloaded: bool = False
    speed_source: str = "estimate"  # or "measured", or a calibrated estimate
    # Prompt tokens read per second at the start of a prompt (None: not estimated: off the CPU,
    # or without the kernel probe's prompt figures), and where the figure came from
    estimated_prompt_tok_s: float | None = None
    prompt_source: str = "estimate"
    why_not: str = ""  # why the build is not offered here (backend, language), when it is not
    # What the plan gave up to fit (a smaller context, fewer checkpoints, smaller batches), for
    # the user; `traded`: it fits only by giving up optional memory, so it ranks after any
    # build that fits without (a smaller context alone is not a trade: the ladder's own steps).
    gave_up: tuple[str, ...] = ()
    traded: bool = False
    split: Split | None = None  # the layers over the pool, when the budget has helpers
    # On the CPU: the anonymous part of the memory (the rest is the file's mapping), and of it
    # llama.cpp's repacked copy of weights; None for other placements.
    estimated_anonymous_bytes: int | None = None
    estimated_repacked_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        b, p = self.build, self.plan
        return {
            "build": b.id,
            "repo_id": b.repo_id,
            "filename": b.filename,
            "quant": b.quant,
            "format": b.format,
            "backend": b.backend,
            "language": b.language,
            "size_bytes": b.size_bytes,
            "placement": p.placement if p else None,
            "n_gpu_layers": p.n_gpu_layers if p else None,
            "n_ctx": p.n_ctx if p else None,
            "n_threads": p.n_threads if p else None,
            "cpu_moe": p.cpu_moe if p else None,
            "n_cpu_moe": p.n_cpu_moe if p else None,
            "n_batch": p.n_batch if p else None,
            "checkpoints": p.checkpoints if p else None,
            "draft": p.draft if p else None,
            "estimated_memory_bytes": self.estimated_memory_bytes,
            "estimated_anonymous_bytes": self.estimated_anonymous_bytes,
            "estimated_repacked_bytes": self.estimated_repacked_bytes,
            "estimated_decode_tok_s": (
                round(self.estimated_decode_tok_s, 1)
                if self.estimated_decode_tok_s is not None
                else None
            ),
            "speed_source": self.speed_source,
            "estimated_prompt_tok_s": (round(self.estimated_prompt_tok_s, 1)
                                       if self.estimated_prompt_tok_s is not None else None),
            "prompt_source": self.prompt_source,
            "fits": self.fits,
            "eligible": self.eligible,
            "downloaded": self.downloaded,
            "reason": self.reason,
            "gave_up": list(self.gave_up),
        }


@dataclass(frozen=True)
class Recommendation:
    """The chosen candidate (or none) and every candidate with its reason."""

    hardware: HardwareProfile
    recommended: Candidate | None
    candidates: tuple[Candidate, ...]
    lang: str
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware.to_json(),
            "lang": self.lang,
            "recommended": self.recommended.to_json() if self.recommended else None,
            "candidates": [c.to_json() for c in self.candidates],
            "notes": list(self.notes),
        }
