"""Which build fits this machine (or this machine and helpers), how to load it, and why.

The one judge, rank and reason path: `judge(build, budget)` walks the ladder (`ladder.py`: the
context, then the optional memory traded) over the placements of the budget (`place.py`) and
words the reason; `rank` picks the best; `plan` does both for the catalog; `plan_for_file` for
one model outside it. Pure functions of plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from pocketchat.errors import ModelTooLarge, UsageError
from pocketchat.modelfile.facts import ModelFacts
from pocketchat.select import defaults
from pocketchat.select import estimate as est
from pocketchat.select import speed as spd
from pocketchat.select.budget import Budget, cpu_budget, gpu_budget, main_gpu, ram_reserve
from pocketchat.select.estimate import fmt_gb
from pocketchat.select.ladder import (CTX_STEPS, DEFAULT_CTX, MIN_CTX, SMALLEST_CTX, Step,
                                      context_steps, gave_up, ladder)
from pocketchat.select.measured import Calibration
from pocketchat.select.place import Fit, placements, sequences_that_fit
from pocketchat.types import (DRAFT_DEPTH, MAX_PROMPT_CACHE_BYTES, MAX_PROMPT_CACHE_DISK_BYTES,
                              MIN_FREE_DISK_BYTES, N_BATCH, PROMPT_CACHE_DISK_SHARE, PROMPT_CACHE_SHARE,
                              Build, Candidate, HardwareProfile, LoadPlan, Recommendation,
                              Sampling, runs_head)

__all__ = [
    "CTX_STEPS", "DEFAULT_CTX", "MIN_CTX", "SMALLEST_CTX", "Budget", "Choice", "Fit", "check_request",
    "choose", "choose_ctx", "choose_fit", "context_steps", "cpu_budget", "default_threads",
    "eligibility", "estimate_speed", "gpu_budget", "judge", "main_gpu", "make_plan", "placements", "plan",
    "plan_for_file", "plan_threads", "prompt_cache_budget", "prompt_cache_disk_budget",
    "ram_reserve", "rank",
]

LANGS = ("en", "ko")
DISK_MARGIN_BYTES = 1 * 1024**3
# A native MLX build on the Apple GPU beats a CPU-only GGUF for Korean on Apple devices (the
# card's advice for iPhone/iPad/Mac); worth this many quality points in the ranking.
NATIVE_MLX_BONUS = 20.0
# Below this decode speed a build is too slow to chat with; it ranks below faster ones.
USABLE_TOK_S = 3.0
SLOW_PENALTY = 30.0


def default_threads(profile: HardwareProfile) -> int:
    """The threads a plan on this machine uses by default (`defaults.threads`)."""
    return defaults.threads(profile)


def check_request(*, lang: str = "en", n_ctx: int | None = None, threads: int | None = None) -> None:
    """UsageError for a language, context or thread count no plan can use."""
    if lang not in LANGS:
        raise UsageError(f"unknown --lang {lang!r}", hint="Use --lang en or --lang ko.")
    if n_ctx is not None and n_ctx < SMALLEST_CTX:
        raise UsageError(f"--ctx {n_ctx} is too small",
                         hint=f"Use at least {MIN_CTX} (or leave --ctx out to let pocketchat choose).")
    if threads is not None and not 1 <= threads <= 1024:
        raise UsageError(f"--threads {threads} cannot be used", hint="Give a number of CPU threads, 1 or more.")


def threads_note(profile: HardwareProfile, requested: int | None) -> str | None:
    """The line said when --threads asks for more threads than the machine has, else None:
    the count asked is run (an experiment the user chose), up to `defaults.thread_ceiling`."""
    have = profile.cpu_logical_cores or profile.cpu_physical_cores
    if not requested or not have or requested <= have:
        return None
    used = defaults.threads(profile, requested)
    runs = "" if used == requested else (
        f"; running {used}, {defaults.OVERSUBSCRIBE} per CPU thread at most")
    return (f"--threads {requested}: this machine has {have} CPU threads, and more threads than "
            f"cores slow every step{runs} (leave --threads out to let pocketchat choose)")


@dataclass(frozen=True)
class Choice:
    """The first step of the ladder that fits a budget (else the last one tried), and its fit."""

    step: Step
    fit: Fit | None
    tried: list[Fit]  # the placements at `step` (their reasons when nothing fits)
    top: Step  # the ladder's best step: what `step` gave up against
    note: str | None = None  # the requested context was lowered to the model's


def draft_snapshots(build: Build, draft: str = "off") -> int:
    """The recurrent-state copies per sequence that drafts (`--draft`) make this build keep:
    the draft depth on llama.cpp for a model with a recurrent state (its rollback), else 0 (no
    drafts; an attention-only model cuts its KV back; MLX runs no drafts)."""
    if draft == "off" or build.format == "mlx":
        return 0
    return DRAFT_DEPTH if est.pocket_facts(build).recurrent_state_bytes > 0 else 0


def draft_head(build: Build, draft: str = "off") -> bool:
    """Whether drafts (`--draft`) load this build's MTP head on one sequence (llama.cpp, a
    GGUF with the block: `types.runs_head`); more sequences leave it out (`sequences_that_fit`)."""
    block = 1 if build.facts is not None and build.facts.mtp_bytes > 0 else 0
    return build.format != "mlx" and runs_head(draft, block, 1)


def plan_draft(build: Build, step: Step, draft: str = "off") -> str:
    """The drafts a plan at this step runs: those asked for, but off on MLX (its hybrid cache
    cannot be cut back to a draft's accepted part) and where the step traded their snapshots."""
    if build.format == "mlx" or ((draft_snapshots(build, draft) or draft_head(build, draft))
                                 and not step.drafts):
        return "off"
    return draft


def choose(build: Build, budget: Budget | HardwareProfile, backend: str | None,
           requested: int | None = None, model_max: int | None = None, draft: str = "off") -> Choice:
    """Walk the ladder: the first step with a placement that fits, the fastest such placement."""
    budget = Budget.of(budget)
    if model_max is None and build.facts is not None:
        model_max = build.facts.context_length
    steps, note = ladder(requested, model_max, snapshots=draft_snapshots(build, draft),
                         head=draft_head(build, draft))
    for step in steps:
        tried = placements(build, budget, step, backend)
        found = next((f for f in tried if f.fits), None)
        if found is not None:
            return Choice(step, found, tried, steps[0], note)
    return Choice(steps[-1], None, tried, steps[0], note)


def choose_fit(build: Build, profile: HardwareProfile, n_ctx: int, backend: str | None) -> Fit | None:
    """The first (fastest) placement that fits at this context with nothing traded, or None."""
    return next((f for f in placements(build, Budget.of(profile), Step(n_ctx), backend) if f.fits), None)


def choose_ctx(build: Build, profile: HardwareProfile, backend: str | None,
               requested: int | None, model_max: int | None = None) -> tuple[int, Fit | None]:
    """The context `choose` settles on, and its placement (None: nothing fits)."""
    c = choose(build, profile, backend, requested, model_max)
    return c.step.n_ctx, c.fit


def prompt_cache_budget(budget: Budget, fit: Fit) -> int:
    """The default budget of the prompt cache across conversations: a share of the RAM this
    machine has left once the placement's memory is counted in it, within a cap."""
    free = cpu_budget(budget.machine) - fit.memory
    return int(min(max(free, 0) * PROMPT_CACHE_SHARE, MAX_PROMPT_CACHE_BYTES))


def prompt_cache_disk_budget(free_bytes: int | None) -> int:
    """The default budget of the prompt cache's disk tier: a share of the free disk, within a
    cap; none when the disk is nearly full or its free space is unknown."""
    if free_bytes is None or free_bytes < MIN_FREE_DISK_BYTES:
        return 0
    return int(min(free_bytes * PROMPT_CACHE_DISK_SHARE, MAX_PROMPT_CACHE_DISK_BYTES))


def make_plan(build: Build, fit: Fit, step: Step | int, budget: Budget | HardwareProfile,
              sampling: Sampling | None = None, threads: int | None = None,
              notes: tuple[str, ...] = (), draft: str = "off") -> LoadPlan:
    """The load plan for a placement at a step of the ladder (pooled: the helpers' layers too);
    `threads`: --threads, else the count `plan_threads` picks for this build; `draft`: the
    drafts asked for, off on MLX and where the step gave up their snapshots."""
    budget = Budget.of(budget)
    step = step if isinstance(step, Step) else Step(step)
    n = plan_threads(build, fit, budget, threads)
    plan = LoadPlan(
        backend=build.backend,
        placement=fit.placement,  # type: ignore[arg-type]
        n_gpu_layers=fit.n_gpu_layers,
        n_ctx=step.n_ctx,
        n_threads=n,
        n_threads_batch=n,
        cpu_moe=fit.cpu_moe,
        n_cpu_moe=fit.n_cpu_moe,
        flash_attn=fit.placement != "cpu",
        n_batch=step.n_batch,
        checkpoints=step.checkpoints,
        prompt_cache_bytes=prompt_cache_budget(budget, fit),
        prompt_cache_disk_bytes=prompt_cache_disk_budget(budget.machine.disk_free_bytes),
        sampling=sampling or defaults.sampling("pocket"),
        notes=notes,
        draft=plan_draft(build, step, draft),
    )
    if fit.split is None:
        return replace(plan, serve_parallel=sequences_that_fit(build, budget, step, fit,
                                                               taken=plan.prompt_cache_bytes))
    # Pooled: the helpers hold the last layers on their RPC devices (the output layer goes along).
    n_layers = sum(fit.split.layers)
    used = [(h.endpoint, k) for h, k in zip(budget.helpers, fit.split.helper_layers, strict=False) if k > 0]
    if not used:
        return replace(plan, n_layers=n_layers)
    return replace(plan, placement="cpu", n_gpu_layers=sum(k for _, k in used) + 1, cpu_moe=False,
                   flash_attn=False, rpc_servers=tuple(e for e, _ in used),
                   rpc_layers=tuple(k for _, k in used), n_layers=n_layers)


def eligibility(build: Build, budget: Budget | HardwareProfile, lang: str, backend: str | None) -> str | None:
    """Why a build is not offered for this language and budget, or None when it is."""
    budget = Budget.of(budget)
    profile = budget.machine
    if build.quality.get(lang, 0.0) <= 0:
        other = "Korean-pruned" if build.language == "ko" else "English-pruned"
        return f"{other}: not offered for --lang {lang} (ask for it with --model {build.id})"
    if backend and build.backend != backend:
        return f"needs the {build.backend} backend (--backend {backend} was given)"
    if build.format == "mlx":
        if budget.pooled:
            return "MLX build: llama.cpp's RPC backend pools GGUF builds only"
        if not profile.apple_silicon and backend != "mlx":
            return "MLX build: needs Apple Silicon (or --backend mlx to run it on the CPU)"
        if "mlx" not in profile.backends:
            return "MLX build: mlx-lm is not installed (pip install mlx-lm)"
    elif "llama.cpp" not in profile.backends:
        return "llama-cpp-python is not installed (pip install llama-cpp-python)"
    return None


def estimate_speed(build: Build, profile: HardwareProfile, placement: str, threads: int,
                   n_cpu_moe: int | None = None) -> spd.SpeedEstimate:
    """The uncalibrated speed estimate of a build placed so on this machine, with its parts."""
    return spd.decode_speed(build, placement, cpu_bandwidth_gbps=profile.memory_bandwidth_gbps,
                            threads=threads, gpu=main_gpu(profile), n_cpu_moe=n_cpu_moe or None,
                            arch=profile.arch, kernels=profile.kernels)


def estimate_prompt_speed(build: Build, profile: HardwareProfile, placement: str, threads: int,
                          n_ubatch: int = N_BATCH) -> float | None:
    """The uncalibrated prompt speed (tok/s) of a build on this CPU; None off the CPU or without
    the probe's prompt figures."""
    if placement != "cpu":
        return None
    return spd.prompt_speed(build, cpu_bandwidth_gbps=profile.memory_bandwidth_gbps, threads=threads,
                            kernels=profile.kernels, n_ubatch=n_ubatch)


def plan_threads(build: Build, fit: Fit, budget: Budget | HardwareProfile, requested: int | None = None) -> int:
    """The threads a plan uses: --threads; else, on the CPU with the kernels measured, the
    count up to the free cores (`defaults.threads`) this build is estimated fastest at
    (a bandwidth-bound build may not need them all); else the free cores."""
    budget = Budget.of(budget)
    profile = budget.machine
    most = defaults.threads(profile, requested)
    if requested or fit.split is not None or fit.placement != "cpu" or profile.kernels is None:
        return most
    return defaults.best_threads(most, lambda n: estimate_speed(build, profile, "cpu", n).tok_s)


def _speed(build: Build, budget: Budget, fit: Fit, threads: int,
           speeds: Calibration | None) -> tuple[float, str, str]:
    """Estimated decode speed of a placement, its label (measured, calibrated, estimate), and
    which bound applies here ("compute-bound here: 2 threads"; "" when not known)."""
    profile = budget.machine
    if fit.split is not None:  # the link model prices the pool; bench records speak of one machine
        return spd.pooled_tok_s(build, profile.memory_bandwidth_gbps, budget.helpers, fit.split.layers,
                                threads=threads, link=budget.link), "estimate", ""
    speed = estimate_speed(build, profile, fit.placement, threads, fit.n_cpu_moe)
    why = speed.why(profile.memory_bandwidth_gbps)
    if speeds is None:
        return speed.tok_s, "estimate", why
    figure, label = speeds.speed(build, fit.placement, speed)
    return figure, label, why


def judge(build: Build, budget: Budget | HardwareProfile, *, lang: str = "en", n_ctx: int | None = None,
          backend: str | None = None, downloaded: bool = False, forced: bool = False,
          threads: int | None = None, speeds: Calibration | None = None,
          model_max: int | None = None, sampling: Sampling | None = None,
          draft: str = "off") -> Candidate:
    """One build against one budget: does it fit, how to load it, what it gave up, and why.

    `speeds`: this machine's measured runs (a measured figure, or calibrated estimates);
    `model_max`: the context the model was trained for (default: its header's, when known);
    `forced`: the user named it, so it is judged even when not offered for this language;
    `draft`: the drafts asked for (`--draft`), traded before the context when memory is short."""
    budget = Budget.of(budget)
    profile = budget.machine
    if budget.pooled:
        backend = "llama.cpp"
    why_not = None if forced else eligibility(build, budget, lang, backend)
    c = choose(build, budget, backend, n_ctx, model_max, draft)
    fit = c.fit
    memory = fit.memory if fit else (c.tried[-1].memory if c.tried else est.memory_need(build, c.step.n_ctx).total)
    disk_short = (
        not downloaded
        and profile.disk_free_bytes is not None
        and build.size_bytes + DISK_MARGIN_BYTES > profile.disk_free_bytes
    )
    lost = gave_up(c.step, c.top, recurrent=est.memory_need(build, c.step.n_ctx).state > 0) if fit else ()
    plan = None
    if fit is not None:
        notes = tuple(n for n in (c.note, _gave_up_note(lost), threads_note(profile, threads)) if n)
        plan = make_plan(build, fit, c.step, budget, sampling=sampling, threads=threads, notes=notes,
                         draft=draft)
    n_threads = plan.n_threads if plan is not None else defaults.threads(profile, threads)
    speed, label, bound = _speed(build, budget, fit, n_threads, speeds) if fit else (None, "estimate", "")
    prompt, prompt_label = None, "estimate"
    if fit is not None and fit.split is None and plan is not None:
        prompt = estimate_prompt_speed(build, profile, fit.placement, plan.n_threads_batch, plan.n_batch)
        if speeds is not None:
            prompt, prompt_label = speeds.prompt_speed(build, fit.placement, prompt)
    fits = fit is not None and not disk_short
    if fit is None:
        best = c.tried[-1] if c.tried else None
        reason = (why_not or "no way to run this build on this machine") if best is None else (
            f"needs about {fmt_gb(best.memory)} at {c.step.n_ctx} context; {best.shortfall}")
    elif disk_short:
        reason = (f"needs {fmt_gb(build.size_bytes + DISK_MARGIN_BYTES)} of free disk to download; "
                  f"{fmt_gb(profile.disk_free_bytes or 0)} free")
    else:
        figure = f"{speed:.1f}" if fit.split is not None else f"{speed:.0f}"
        reason = f"fits: {fmt_gb(fit.memory)} of {fit.where}; ~{figure} tok/s ({label})"
        if bound:
            reason += f"; {bound}"
        if lost:
            reason += f"; gives up {', '.join(lost)}"
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
                     eligible=why_not is None, why_not=why_not or "", downloaded=downloaded,
                     speed_source=label, estimated_prompt_tok_s=prompt, prompt_source=prompt_label,
                     gave_up=lost, traded=fit is not None and c.step.traded,
                     split=fit.split if fit else (c.tried[-1].split if c.tried else None),
                     estimated_anonymous_bytes=fit.anonymous if fit else None,
                     estimated_repacked_bytes=fit.repacked if fit else None)


def _gave_up_note(lost: tuple[str, ...]) -> str | None:
    return f"to fit in memory the plan gives up {', '.join(lost)}" if lost else None


def rank(budget: Budget | HardwareProfile, cands: Iterable[Candidate], lang: str) -> Recommendation:
    """The best candidate that fits and is offered, each with its reason, best first.

    A build already on disk comes first (a moment of less free RAM must not turn into a
    multi-GB download; the reason names the better build to download); then quality for the
    language, then speed; a build that fits only by trading optional memory (context,
    checkpoints, batch size) ranks after every build that fits without."""
    budget = Budget.of(budget)
    cands = list(cands)
    usable = [c for c in cands if c.fits and c.eligible]
    order = lambda c: (not c.traded, c.score, c.estimated_decode_tok_s or 0.0)  # noqa: E731
    best = max(usable, key=lambda c: (c.downloaded, *order(c)), default=None)
    if best is not None:
        best = replace(best, reason=_why_best(best, usable))
        better = max(usable, key=order)
        if better is not best and best.downloaded and not better.downloaded:
            best = replace(best, reason=f"{best.reason}; already downloaded. {better.build.id} "
                           f"would be better here ({fmt_gb(better.build.size_bytes)} to download: "
                           f"`pocketchat download {better.build.id}`)")
        on_disk = [c for c in cands if c.downloaded and c.eligible and not c.fits]
        if not best.downloaded and on_disk:
            names = ", ".join(c.build.id for c in on_disk)
            best = replace(best, reason=f"{best.reason}. On disk, {names} does not fit the memory "
                           "free now: close other programs to run it without a download")
        cands = [best if c.build.id == best.build.id else c for c in cands]
    ordered = sorted(cands, key=lambda c: (not c.eligible, not c.fits, c.traded, -c.score))
    return Recommendation(hardware=budget.machine, recommended=best, candidates=tuple(ordered), lang=lang,
                          notes=hardware_notes(budget.machine))


def plan(profile: Budget | HardwareProfile, builds: Iterable[Build], *, lang: str = "en",
         n_ctx: int | None = None, backend: str | None = None, threads: int | None = None,
         downloaded: frozenset[str] | set[str] = frozenset(),
         speeds: Calibration | None = None, draft: str = "off") -> Recommendation:
    """Rank every build for this budget; the recommendation is the best-scoring one that fits."""
    check_request(lang=lang, n_ctx=n_ctx, threads=threads)
    return rank(profile, (judge(b, profile, lang=lang, n_ctx=n_ctx, backend=backend, threads=threads,
                                downloaded=b.id in downloaded, speeds=speeds, draft=draft)
                          for b in builds), lang)


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


def file_build(size_bytes: int, *, backend: str = "llama.cpp", name: str = "model",
               facts: ModelFacts | None = None) -> Build:
    """The `Build` the planner judges for a model outside the catalog: from its header's facts
    when known, else its size alone."""
    if facts is not None and backend != "mlx":
        return est.build_from_facts(facts, name, filename=name)
    return Build(id=name, repo_id="", filename=name, quant="?", format="mlx" if backend == "mlx" else "gguf",
                 size_bytes=size_bytes, bits_per_weight=0.0, total_params=1.0, active_params=1.0,
                 expert_fraction=0.0, n_experts=1)


def plan_for_file(budget: Budget | HardwareProfile, size_bytes: int, *, n_ctx: int | None = None,
                  backend: str = "llama.cpp", max_ctx: int | None = None, starter: bool = False,
                  threads: int | None = None, name: str = "model",
                  facts: ModelFacts | None = None, draft: str = "off") -> LoadPlan:
    """A load plan for a model outside the catalog (a local file, the starter model), judged
    like a catalog build; `max_ctx` is the context the model was trained for, when its header
    says; `facts`, the GGUF header's facts, make the estimate exact for this model."""
    check_request(n_ctx=n_ctx, threads=threads)
    build = file_build(size_bytes, backend=backend, name=name, facts=facts)
    cand = judge(build, budget, n_ctx=n_ctx, backend=backend, downloaded=True, forced=True,
                 threads=threads, model_max=max_ctx, draft=draft,
                 sampling=defaults.sampling("starter" if starter else "file"))
    if cand.plan is None:
        raise ModelTooLarge(
            f"{name} {cand.reason}",
            hint="Close other programs, pass a smaller --ctx, or pick a smaller model "
                 "(`pocketchat --recommend` lists the builds that fit).",
        )
    return cand.plan
