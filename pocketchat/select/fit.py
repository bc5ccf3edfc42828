"""Which build fits this machine, how to load it, and why: pure functions of plain data."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from pocketchat.errors import ModelTooLarge, UsageError
from pocketchat.select import estimate as est
from pocketchat.modelfile.facts import ModelFacts
from pocketchat.select.estimate import fmt_gb
from pocketchat.select.measured import Calibration
from pocketchat.types import GPU, GiB, Build, Candidate, HardwareProfile, LoadPlan, Recommendation, Sampling

# The one owner of the context size and thread count: every plan gets them from here.
DEFAULT_CTX = 8192
MIN_CTX = 2048  # the smallest context the plan picks on its own
SMALLEST_CTX = 256  # the smallest --ctx accepted at all
CTX_STEPS = (8192, 6144, 4096, 3072, 2048)
MAX_THREADS = 32
LANGS = ("en", "ko")
DISK_MARGIN_BYTES = 1 * GiB
GPU_RESERVE_BYTES = GiB // 2
# A native MLX build on the Apple GPU beats a CPU-only GGUF for Korean on Apple devices (the
# card's advice for iPhone/iPad/Mac); worth this many quality points in the ranking.
NATIVE_MLX_BONUS = 20.0
# Below this decode speed a build is too slow to chat with; it ranks below faster ones.
USABLE_TOK_S = 3.0
SLOW_PENALTY = 30.0


def ram_reserve(profile: HardwareProfile) -> int:
    """RAM kept free for the system and other programs: 15% of total, 1 to 4 GiB."""
    return int(min(max(profile.ram_total_bytes * 0.15, 1 * GiB), 4 * GiB))


def cpu_budget(profile: HardwareProfile) -> int:
    return max(profile.ram_available_bytes - ram_reserve(profile), 0)


def main_gpu(profile: HardwareProfile) -> GPU | None:
    """The GPU a model would be offloaded to: Apple's, else the discrete one with most VRAM."""
    for g in profile.gpus:
        if g.vendor == "apple":
            return g
    discrete = [g for g in profile.gpus if not g.unified_memory and g.vram_total_bytes > 0]
    return max(discrete, key=lambda g: g.vram_free_bytes or g.vram_total_bytes, default=None)


def gpu_budget(gpu: GPU, profile: HardwareProfile) -> int:
    """Bytes a model may use on the GPU: free VRAM less a reserve; Metal budget on Apple."""
    if gpu.vendor == "apple":
        # Unified memory: the Metal working-set budget, and no more than RAM can give.
        return min(gpu.vram_total_bytes, cpu_budget(profile))
    free = gpu.vram_free_bytes or gpu.vram_total_bytes
    return max(free - GPU_RESERVE_BYTES, 0)


def default_threads(profile: HardwareProfile) -> int:
    return max(1, min(profile.cpu_physical_cores or profile.cpu_logical_cores or 1, MAX_THREADS))


def check_request(*, lang: str = "en", n_ctx: int | None = None, threads: int | None = None) -> None:
    """UsageError for a language, context or thread count no plan can use."""
    if lang not in LANGS:
        raise UsageError(f"unknown --lang {lang!r}", hint="Use --lang en or --lang ko.")
    if n_ctx is not None and n_ctx < SMALLEST_CTX:
        raise UsageError(f"--ctx {n_ctx} is too small",
                         hint=f"Use at least {MIN_CTX} (or leave --ctx out to let pocketchat choose).")
    if threads is not None and not 1 <= threads <= 1024:
        raise UsageError(f"--threads {threads} cannot be used", hint="Give a number of CPU threads, 1 or more.")


def context_steps(requested: int | None, model_max: int | None = None) -> tuple[list[int], str | None]:
    """The contexts to try, best first, and a note when the request was lowered to the model's.

    The requested context alone when there is one; else 8192 and the smaller steps. Never more
    than the model was trained for (`model_max`, from its header, when known).
    """
    note = None
    if requested is not None:
        steps = [requested]
    else:
        steps = list(CTX_STEPS)
    if model_max:
        if requested is not None and requested > model_max:
            note = f"--ctx {requested} is more than the model was trained for; using {model_max}"
        steps = sorted({min(c, model_max) for c in steps}, reverse=True)
    return steps, note


@dataclass(frozen=True)
class Fit:
    """One way to place a build, and what it costs."""

    placement: str
    n_gpu_layers: int
    cpu_moe: bool
    memory: int  # total bytes the build needs
    fits: bool
    where: str  # human text: the budget it was measured against
    n_cpu_moe: int = 0  # expert layers kept in RAM (the first N); with cpu_moe, all of them


def placements(build: Build, profile: HardwareProfile, n_ctx: int, backend: str | None) -> list[Fit]:
    """Every placement worth trying, fastest first, each judged against its budget."""
    need = est.memory_need(build, n_ctx)
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
    offload_ok = profile.llama_gpu_offload is not False
    if gpu is not None and offload_ok:
        options += _gpu_options(build, profile, gpu, n_ctx, ram)
    options.append(Fit("cpu", 0, False, total, total <= ram,
                       f"{fmt_gb(ram)} of RAM free after a {fmt_gb(ram_reserve(profile))} reserve"))
    return options


def _gpu_options(build: Build, profile: HardwareProfile, gpu: GPU, n_ctx: int, ram: int) -> list[Fit]:
    """All layers on the GPU; else the fewest expert layers in RAM that make the rest fit."""
    budget = gpu_budget(gpu, profile)
    label = "Metal budget" if gpu.vendor == "apple" else f"free on the {gpu.name}"
    need = est.memory_need(build, n_ctx, on_gpu=True)
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


def choose_fit(build: Build, profile: HardwareProfile, n_ctx: int, backend: str | None) -> Fit | None:
    """The first (fastest) placement that fits, or None."""
    return next((f for f in placements(build, profile, n_ctx, backend) if f.fits), None)


def choose_ctx(build: Build, profile: HardwareProfile, backend: str | None,
               requested: int | None, model_max: int | None = None) -> tuple[int, Fit | None]:
    """The context: the requested one, else 8192 when it fits, else the largest that does.

    With no fit, the smallest context tried (the figures a refusal quotes)."""
    steps, _ = context_steps(requested, model_max)
    for n_ctx in steps:
        fit = choose_fit(build, profile, n_ctx, backend)
        if fit is not None:
            return n_ctx, fit
    return steps[-1], None


def make_plan(build: Build, fit: Fit, n_ctx: int, profile: HardwareProfile,
              sampling: Sampling | None = None, threads: int | None = None,
              notes: tuple[str, ...] = ()) -> LoadPlan:
    threads = threads or default_threads(profile)
    return LoadPlan(
        backend=build.backend,
        placement=fit.placement,  # type: ignore[arg-type]
        n_gpu_layers=fit.n_gpu_layers,
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        cpu_moe=fit.cpu_moe,
        n_cpu_moe=fit.n_cpu_moe,
        flash_attn=fit.placement != "cpu",
        sampling=sampling or Sampling(),
        notes=notes,
    )


def eligibility(build: Build, profile: HardwareProfile, lang: str, backend: str | None) -> str | None:
    """Why a build is not offered for this language and machine, or None when it is."""
    if build.quality.get(lang, 0.0) <= 0:
        other = "Korean-pruned" if build.language == "ko" else "English-pruned"
        return f"{other}: not offered for --lang {lang} (ask for it with --model {build.id})"
    if backend and build.backend != backend:
        return f"needs the {build.backend} backend (--backend {backend} was given)"
    if build.format == "mlx":
        if not profile.apple_silicon and backend != "mlx":
            return "MLX build: needs Apple Silicon (or --backend mlx to run it on the CPU)"
        if "mlx" not in profile.backends:
            return "MLX build: mlx-lm is not installed (pip install mlx-lm)"
    elif "llama.cpp" not in profile.backends:
        return "llama-cpp-python is not installed (pip install llama-cpp-python)"
    return None


def judge(build: Build, profile: HardwareProfile, *, lang: str = "en", n_ctx: int | None = None,
          backend: str | None = None, downloaded: bool = False, forced: bool = False,
          threads: int | None = None, speeds: Calibration | None = None) -> Candidate:
    """One build against one machine: does it fit, how to load it, and a one-line reason.

    `speeds`: this machine's measured runs (a measured figure, or calibrated estimates)."""
    why_not = None if forced else eligibility(build, profile, lang, backend)
    ctx, fit = choose_ctx(build, profile, backend, n_ctx)
    options = placements(build, profile, ctx, backend)
    memory = fit.memory if fit else (options[-1].memory if options else est.memory_need(build, ctx).total)
    disk_short = (
        not downloaded
        and profile.disk_free_bytes is not None
        and build.size_bytes + DISK_MARGIN_BYTES > profile.disk_free_bytes
    )
    plan = make_plan(build, fit, ctx, profile, threads=threads) if fit else None
    gpu = main_gpu(profile)
    speed = (
        est.decode_tok_s(build, fit.placement, cpu_bandwidth_gbps=profile.memory_bandwidth_gbps,
                         threads=threads or default_threads(profile), gpu=gpu,
                         n_cpu_moe=fit.n_cpu_moe or None)
        if fit else None
    )
    label = "estimate"
    if speed is not None and speeds is not None:
        speed, label = speeds.speed(build, fit.placement, speed)
    fits = fit is not None and not disk_short
    if fit is None:
        if not options:
            reason = why_not or "no way to run this build on this machine"
        else:
            best = options[-1]
            reason = f"needs {fmt_gb(best.memory)} at {ctx} context; only {best.where}"
    elif disk_short:
        reason = (f"needs {fmt_gb(build.size_bytes + DISK_MARGIN_BYTES)} of free disk to download; "
                  f"{fmt_gb(profile.disk_free_bytes or 0)} free")
    else:
        reason = f"fits: {fmt_gb(fit.memory)} of {fit.where}; ~{speed:.0f} tok/s ({label})"
        if lang == "ko" and build.quant == "IQ1_M":
            reason += "; IQ1_M hurts Korean about 2.8x more than English"
    if why_not:
        reason = f"{why_not}; {reason}" if fits else why_not
    score = build.quality.get(lang, 0.0)
    if fits and build.format == "mlx" and fit and fit.placement == "gpu" and lang == "ko":
        score += NATIVE_MLX_BONUS
    if speed is not None and speed < USABLE_TOK_S:
        score -= SLOW_PENALTY
        reason += "; too slow to chat comfortably"
    return Candidate(build=build, fits=fits, plan=plan, estimated_memory_bytes=memory,
                     estimated_decode_tok_s=speed, reason=reason, score=score,
                     eligible=why_not is None, downloaded=downloaded, speed_source=label)


def plan(profile: HardwareProfile, builds: Iterable[Build], *, lang: str = "en",
         n_ctx: int | None = None, backend: str | None = None, threads: int | None = None,
         downloaded: frozenset[str] | set[str] = frozenset(),
         speeds: Calibration | None = None) -> Recommendation:
    """Rank every build for this machine; the recommendation is the best-scoring one that fits."""
    check_request(lang=lang, n_ctx=n_ctx, threads=threads)
    cands = [judge(b, profile, lang=lang, n_ctx=n_ctx, backend=backend, threads=threads,
                   downloaded=b.id in downloaded, speeds=speeds)
             for b in builds]
    usable = [c for c in cands if c.fits and c.eligible]
    best = max(usable, key=lambda c: (c.score, c.estimated_decode_tok_s or 0.0), default=None)
    if best is not None:
        best = replace(best, reason=_why_best(best, usable))
        cands = [best if c.build.id == best.build.id else c for c in cands]
    ordered = sorted(cands, key=lambda c: (not c.eligible, not c.fits, -c.score))
    return Recommendation(hardware=profile, recommended=best, candidates=tuple(ordered), lang=lang,
                          notes=hardware_notes(profile))


def _why_best(best: Candidate, usable: list[Candidate]) -> str:
    others = [c for c in usable if c is not best]
    lead = "the best quality that fits"
    if best.build.format == "mlx" and best.plan and best.plan.placement == "gpu":
        lead = "the native MLX build, on the Apple GPU"
    if not others:
        lead = "the only build that fits"
    return f"{lead}; {best.reason}"


def hardware_notes(profile: HardwareProfile) -> tuple[str, ...]:
    """Advice about the machine itself: a GPU llama.cpp cannot use, an integrated GPU."""
    notes = list(profile.notes)
    gpu = main_gpu(profile)
    if gpu is not None and gpu.vendor in ("nvidia", "amd") and profile.llama_gpu_offload is False:
        flag = "-DGGML_CUDA=on" if gpu.vendor == "nvidia" else "-DGGML_HIP=on"
        notes.append(
            f"This machine has a {gpu.name} but the installed llama-cpp-python is CPU-only, so "
            f"the plan runs on the CPU. To use the GPU: "
            f'CMAKE_ARGS="{flag}" pip install --force-reinstall --no-cache-dir llama-cpp-python'
        )
    for g in profile.gpus:
        if g.unified_memory and g.vendor in ("amd", "intel"):
            notes.append(f"{g.name} shares system RAM: planning on the CPU (same memory bandwidth).")
    return tuple(notes)


def plan_for_file(profile: HardwareProfile, size_bytes: int, *, n_ctx: int | None = None,
                  backend: str = "llama.cpp", max_ctx: int | None = None,
                  sampling: Sampling | None = None, threads: int | None = None,
                  name: str = "model", facts: ModelFacts | None = None) -> LoadPlan:
    """A load plan for a model outside the catalog (a local file, the starter model);
    `max_ctx` is the context the model was trained for, when its header says; `facts`, the
    GGUF header's facts, make the estimate exact for this model."""
    check_request(n_ctx=n_ctx, threads=threads)
    if facts is not None and backend != "mlx":
        build = est.build_from_facts(facts, name, filename=name)
    else:
        build = Build(id=name, repo_id="", filename=name, quant="?", format="mlx" if backend == "mlx" else "gguf",
                      size_bytes=size_bytes, bits_per_weight=0.0, total_params=1.0, active_params=1.0,
                      expert_fraction=0.0, n_experts=1)
    steps, note = context_steps(n_ctx, max_ctx)
    for ctx in steps:
        fit = choose_fit(build, profile, ctx, backend)
        if fit is not None:
            return make_plan(build, fit, ctx, profile, sampling or Sampling(0.7, 0.9, 40, 0.05, 1.1),
                             threads=threads, notes=(note,) if note else ())
    options = placements(build, profile, steps[-1], backend)
    where = options[-1].where if options else "no backend can run it here"
    raise ModelTooLarge(
        f"{name} needs about {fmt_gb(est.memory_need(build, steps[-1]).total)} at {steps[-1]} "
        f"context; only {where}",
        hint="Close other programs, pass a smaller --ctx, or pick a smaller model "
             "(`pocketchat --recommend` lists the builds that fit).",
    )
