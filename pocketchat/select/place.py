"""Where a build's bytes go within a budget, for one step of the ladder: pure functions.

Alone: all layers on the GPU; else the routed experts of the fewest layers in RAM that make the
rest fit (llama.cpp's --n-cpu-moe N); else the CPU. Pooled: this machine's RAM plus each
helper's memory, the layers split in proportion to what each can hold (llama.cpp's own rule).
Each `Fit` is judged against its budget and says in words what that budget was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pocketchat.select import estimate as est
from pocketchat.select.budget import Budget, cpu_budget, gpu_budget, main_gpu, ram_reserve
from pocketchat.select.estimate import fmt_gb
from pocketchat.select.ladder import Step
from pocketchat.select.repack import repacked_types
from pocketchat.types import GPU, Build, HardwareProfile, Split


@dataclass(frozen=True)
class Fit:
    """One way to place a build, and what it costs."""

    placement: str
    n_gpu_layers: int
    cpu_moe: bool
    memory: int  # total bytes the build needs
    fits: bool
    where: str  # human text: the budget it was measured against ("fits: X of <where>")
    n_cpu_moe: int = 0  # expert layers kept in RAM (the first N); with cpu_moe, all of them
    split: Split | None = None  # the layers over a pool
    short: str = ""  # human text when it does not fit ("needs X; <short>"); default "only <where>"
    # On the CPU: the part of `memory` that is anonymous (the rest is the file's mapping) and,
    # of it, llama.cpp's repacked copy of weights; None elsewhere.
    anonymous: int | None = None
    repacked: int | None = None

    @property
    def shortfall(self) -> str:
        return self.short or f"only {self.where}"


MAX_PARALLEL = 4  # serve's default at most (llama.cpp's server runs 4 slots by default)


def sequences_that_fit(build: Build, budget: Budget, step: Step, fit: Fit, *,
                       most: int = MAX_PARALLEL, taken: int = 0) -> int:
    """How many sequences `serve` decodes together by default with this placement: 1 plus
    those whose KV cache, recurrent state and checkpoints (`MemoryNeed.per_sequence`) fit in
    what the placement leaves of its budget (less `taken`: the prompt cache's RAM), at most
    `most`. One for an MLX build (its checkpoints copy the whole cache, KV included, and a
    batch pads each sequence's KV to the longest: not what this estimate counts; `--parallel N`
    batches it), a pool, and a placement split between a GPU and RAM (its GPU share is full)."""
    if budget.pooled or fit.split is not None or build.format == "mlx" or not fit.fits:
        return 1
    profile = budget.machine
    gpu = main_gpu(profile)
    if fit.placement == "cpu":
        room = cpu_budget(profile) - fit.memory - taken
    elif fit.placement == "gpu" and gpu is not None:
        room = gpu_budget(gpu, profile) - fit.memory
    else:
        return 1
    need = est.memory_need(build, step.n_ctx, checkpoints=step.checkpoints, n_batch=step.n_batch,
                           snapshots=step.snapshots, head=step.head)
    per = max(need.per_sequence, 1)
    more = (room + need.head) // per  # beside another sequence the MTP head is not loaded
    return max(1, min(most, 1 + more))


def placements(build: Build, budget: Budget, step: Step, backend: str | None) -> list[Fit]:
    """Every placement worth trying, fastest first, each judged against its budget."""
    if budget.pooled:
        return [pooled(build, budget, step)]
    profile = budget.machine
    need = est.memory_need(build, step.n_ctx, checkpoints=step.checkpoints, n_batch=step.n_batch,
                           snapshots=step.snapshots, head=step.head,
                           repack=repacked_types(profile))
    total = need.total
    gpu = main_gpu(profile)
    ram = cpu_budget(profile)
    options: list[Fit] = []
    if build.format == "mlx":
        if gpu is not None and gpu.vendor == "apple":
            options.append(Fit("gpu", -1, False, total, total <= gpu_budget(gpu, profile),
                               f"{fmt_gb(gpu_budget(gpu, profile))} Metal budget"))
        elif backend == "mlx":
            options.append(Fit("cpu", 0, False, total, total <= ram, f"{fmt_gb(ram)} RAM free"))
        return options
    if gpu is not None and profile.llama_gpu_offload is not False:
        options += _gpu_options(build, profile, gpu, step, ram)
    options.append(Fit("cpu", 0, False, total, total <= ram,
                       f"{fmt_gb(ram)} of RAM free after a {fmt_gb(ram_reserve(profile))} reserve",
                       anonymous=need.anonymous, repacked=need.repacked))
    return options


def _gpu_options(build: Build, profile: HardwareProfile, gpu: GPU, step: Step, ram: int) -> list[Fit]:
    """All layers on the GPU; else the fewest expert layers in RAM that make the rest fit."""
    budget = gpu_budget(gpu, profile)
    label = "Metal budget" if gpu.vendor == "apple" else f"free on the {gpu.name}"
    need = est.memory_need(build, step.n_ctx, on_gpu=True, checkpoints=step.checkpoints, n_batch=step.n_batch,
                           snapshots=step.snapshots, head=step.head)
    vram = need.total - need.host
    options = [Fit("gpu", -1, False, need.total, vram <= budget and need.host <= ram,
                   f"{fmt_gb(budget)} {label}")]
    layers = est.expert_layer_count(build)
    if gpu.vendor == "apple" or layers == 0 or options[0].fits:
        return options

    def split(n: int) -> Fit:
        on_gpu, on_ram = est.split_experts(need, build, n)
        where = (f"{fmt_gb(budget)} VRAM on the {gpu.name} ({fmt_gb(on_gpu)} used) + "
                 f"{fmt_gb(ram)} RAM ({fmt_gb(on_ram)} used)"
                 + ("" if n == layers else f"; the experts of {n} of {layers} layers in RAM"))
        return Fit("gpu+cpu-experts", -1, n == layers, on_gpu + on_ram, on_gpu <= budget and on_ram <= ram,
                   where, n_cpu_moe=n)

    # VRAM use falls as n grows: the first n whose GPU part fits (its RAM part is judged too).
    for n in range(1, layers + 1):
        if est.split_experts(need, build, n)[0] <= budget:
            return options + [split(n)]
    return options + [split(layers)]


def split_layers(need: est.MemoryNeed, n_layers: int, budgets: Sequence[int]) -> Split:
    """Layers per device in proportion to what each can hold after its fixed costs.

    This machine keeps the runtime, the checkpoints and a compute buffer; each helper a compute buffer.
    `fits` is False when the layers do not fit the pool (the split is then still proportional).
    """
    per_layer = (need.weights + need.kv_cache + need.state + need.snapshots) / max(n_layers, 1)
    fixed = [need.compute + need.host] + [need.compute] * (len(budgets) - 1)
    caps = [max(int((b - f) // per_layer), 0) if per_layer else n_layers for b, f in zip(budgets, fixed, strict=False)]
    total_cap = sum(caps)
    if total_cap == 0:
        layers = [n_layers] + [0] * (len(budgets) - 1)
    else:
        share = [n_layers * c / total_cap for c in caps]
        layers = [int(s) for s in share]
        by_rest = sorted(range(len(share)), key=lambda i: share[i] - layers[i], reverse=True)
        for i in by_rest[: n_layers - sum(layers)]:
            layers[i] += 1
    memory = [int(n * per_layer) + f for n, f in zip(layers, fixed, strict=False)]
    fits = total_cap >= n_layers and all(m <= b for m, b in zip(memory, budgets, strict=False))
    return Split(tuple(layers), tuple(memory), tuple(budgets), fits)


def pooled(build: Build, budget: Budget, step: Step) -> Fit:
    """This machine's RAM and the helpers' memory, the layers split between them."""
    need = est.memory_need(build, step.n_ctx, checkpoints=step.checkpoints, n_batch=step.n_batch,
                           snapshots=step.snapshots, head=step.head)
    budgets = budget.device_budgets()
    s = split_layers(need, est.pocket_facts(build).block_count, budgets)
    used = (f"the pool: {fmt_gb(s.memory[0])} here + " + " + ".join(fmt_gb(m) for m in s.memory[1:])
            + " on the helpers")
    holds = (f"the pool holds {fmt_gb(sum(budgets))} ({fmt_gb(budgets[0])} here + "
             + " + ".join(fmt_gb(b) for b in budgets[1:]) + " on the helpers)")
    return Fit("cpu", 0, False, need.total, s.fits, used, split=s, short=holds)
