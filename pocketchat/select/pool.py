"""Pooling this machine with helpers over llama.cpp's RPC backend: pure functions of plain data.

llama.cpp splits a model by layers: the first ones stay here (CPU), the last ones (and the
output layer, with the last helper) go to the helpers' devices, each with the KV cache of its
layers. This module decides the split from each machine's memory budget, estimates the speed
with the link's measured round-trip time and throughput, and says whether pooling pays:

- `budget(helper)`: what a helper can hold (its free memory less the same reserve as here; a
  CPU helper reports all its RAM as free, so 85% of it counts as available, as for a profile).
- `split(...)`: layers per device, proportional to what each can hold (llama.cpp's own rule).
- `judge_pooled(build, ...)`: one build over the pool -> `PooledCandidate`.
- `advise(...)`: the best build alone vs the best pooled, with a verdict (`PoolAdvice`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from pocketchat.select import estimate as est
from pocketchat.select import fit
from pocketchat.select.catalog import bytes_per_token
from pocketchat.select.estimate import fmt_gb
from pocketchat.types import Build, Helper, HardwareProfile, LoadPlan, Recommendation

# qwen35moe (shared/pocket-builds.md): 40 layers, hidden 2048, vocab 248,320.
POCKET_LAYERS = 40
POCKET_HIDDEN = 2048
POCKET_VOCAB = 248_320
CPU_REPORTED_AVAILABLE = 0.85  # a CPU helper reports total RAM as free; count this share
# Per generated token and helper, the RPC client waits on about this many round trips
# (the activations in, the graph computed, the result read back).
ROUND_TRIPS_PER_TOKEN = 2
DEFAULT_THROUGHPUT = 100e6  # bytes/s when the link was not measured (about gigabit Ethernet)
DEFAULT_RTT = 0.5e-3
# Same build pooled: it must be this much faster than alone to be worth a second machine.
FASTER_ENOUGH = 1.10


def helper_reserve(total: int) -> int:
    """Memory left to the helper's system: 15% of its total, 1 to 4 GiB (as here)."""
    return fit.ram_reserve(HardwareProfile(os="linux", arch="x86_64", ram_total_bytes=total))


def budget(helper: Helper) -> int:
    """Bytes a helper may hold: its free memory (85% of RAM for a CPU device) less a reserve."""
    free = helper.free_bytes
    if helper.reports_total_as_free:
        free = int(helper.total_bytes * CPU_REPORTED_AVAILABLE)
    return max(free - helper_reserve(helper.total_bytes), 0)


@dataclass(frozen=True)
class Split:
    """Layers per device (this machine first, then each helper) and the bytes each holds."""

    layers: tuple[int, ...]
    memory: tuple[int, ...]
    budgets: tuple[int, ...]
    fits: bool

    @property
    def helper_layers(self) -> tuple[int, ...]:
        return self.layers[1:]


def split(need: est.MemoryNeed, n_layers: int, budgets: Sequence[int]) -> Split:
    """Layers per device in proportion to what each can hold after its fixed costs.

    This machine keeps the runtime, the checkpoints and a compute buffer; each helper a compute buffer.
    `fits` is False when the layers do not fit the pool (the split is then still proportional).
    """
    per_layer = (need.weights + need.kv_cache + need.state) / max(n_layers, 1)
    fixed = [need.compute + need.host] + [need.compute] * (len(budgets) - 1)
    caps = [max(int((b - f) // per_layer), 0) if per_layer else n_layers for b, f in zip(budgets, fixed)]
    total_cap = sum(caps)
    if total_cap == 0:
        layers = [n_layers] + [0] * (len(budgets) - 1)
    else:
        share = [n_layers * c / total_cap for c in caps]
        layers = [int(s) for s in share]
        by_rest = sorted(range(len(share)), key=lambda i: share[i] - layers[i], reverse=True)
        for i in by_rest[: n_layers - sum(layers)]:
            layers[i] += 1
    memory = [int(n * per_layer) + f for n, f in zip(layers, fixed)]
    fits = total_cap >= n_layers and all(m <= b for m, b in zip(memory, budgets))
    return Split(tuple(layers), tuple(memory), tuple(budgets), fits)


def link_seconds(helper: Helper, *, hidden: int, vocab: int, last: bool) -> float:
    """Network time per generated token for one helper: round trips plus the bytes it moves."""
    rtt = helper.rtt_seconds if helper.rtt_seconds is not None else DEFAULT_RTT
    rate = helper.throughput_bytes_s or DEFAULT_THROUGHPUT
    moved = hidden * 4 * 2 + (vocab * 4 if last else 0)  # activations in and out; logits from the last
    return ROUND_TRIPS_PER_TOKEN * rtt + moved / rate


def pooled_tok_s(build: Build, profile: HardwareProfile, helpers: Sequence[Helper], layers: Sequence[int],
                 *, hidden: int = POCKET_HIDDEN, vocab: int = POCKET_VOCAB,
                 threads: int | None = None) -> float:
    """Estimated decode speed: each device reads its share of the weights, plus the links.

    A helper's memory bandwidth is its own figure when known, else taken to be this machine's.
    """
    n = max(sum(layers), 1)
    per_token = bytes_per_token(build)
    threads = threads or fit.default_threads(profile)
    here = est.cpu_gbps(profile.memory_bandwidth_gbps, threads) * 1e9
    seconds = layers[0] / n * per_token / here
    used = [i for i, k in enumerate(layers[1:]) if k > 0]
    for i in used:
        h = helpers[i]
        rate = est.cpu_gbps(h.memory_bandwidth_gbps or profile.memory_bandwidth_gbps, threads) * 1e9
        seconds += layers[i + 1] / n * per_token / rate
        seconds += link_seconds(h, hidden=hidden, vocab=vocab, last=i == used[-1])
    return 1.0 / seconds


@dataclass(frozen=True)
class PooledCandidate:
    """One build over the pool: the split, the plan, the speed and why."""

    build: Build
    fits: bool
    plan: LoadPlan | None
    split: Split
    estimated_decode_tok_s: float | None
    reason: str
    score: float = 0.0
    eligible: bool = True

    def where(self, helpers: Sequence[Helper]) -> str:
        parts = [f"{self.split.layers[0]} layers here ({fmt_gb(self.split.memory[0])})"]
        for h, n, m in zip(helpers, self.split.helper_layers, self.split.memory[1:]):
            parts.append(f"{n} on {h.endpoint} ({fmt_gb(m)})")
        return ", ".join(parts)


def pooled_plan(plan: LoadPlan, helpers: Sequence[Helper], layers: Sequence[int], n_layers: int) -> LoadPlan:
    """`plan` with the helpers' layers on their RPC devices (the output layer goes along)."""
    used = [(h.endpoint, n) for h, n in zip(helpers, layers[1:]) if n > 0]
    if not used:
        return replace(plan, n_layers=n_layers)
    on_helpers = sum(n for _, n in used)
    return replace(plan, placement="cpu", n_gpu_layers=on_helpers + 1, cpu_moe=False, flash_attn=False,
                   rpc_servers=tuple(e for e, _ in used), rpc_layers=tuple(n for _, n in used),
                   n_layers=n_layers)


def judge_pooled(build: Build, profile: HardwareProfile, helpers: Sequence[Helper], *,
                 lang: str = "en", n_ctx: int | None = None, n_layers: int = POCKET_LAYERS,
                 hidden: int = POCKET_HIDDEN, vocab: int = POCKET_VOCAB,
                 threads: int | None = None, forced: bool = False) -> PooledCandidate:
    """One build over this machine's RAM plus the helpers' memory."""
    why_not = None if forced else fit.eligibility(build, profile, lang, "llama.cpp")
    if build.format != "gguf":
        why_not = why_not or "MLX build: llama.cpp's RPC backend pools GGUF builds only"
    budgets = [fit.cpu_budget(profile)] + [budget(h) for h in helpers]
    ctx_steps = [n_ctx] if n_ctx else list(fit.CTX_STEPS)
    for ctx in ctx_steps:
        s = split(est.memory_need(build, ctx), n_layers, budgets)
        if s.fits:
            break
    speed = (pooled_tok_s(build, profile, helpers, s.layers, hidden=hidden, vocab=vocab, threads=threads)
             if s.fits else None)
    plan = None
    if s.fits and build.format == "gguf":
        base = fit.make_plan(build, fit.Fit("cpu", 0, False, sum(s.memory), True, ""), ctx, profile,
                             threads=threads)
        plan = pooled_plan(base, helpers, s.layers, n_layers)
    if not s.fits:
        reason = (f"needs {fmt_gb(est.memory_need(build, ctx).total)} at {ctx} context; the pool holds "
                  f"{fmt_gb(sum(budgets))} ({fmt_gb(budgets[0])} here + "
                  + " + ".join(fmt_gb(b) for b in budgets[1:]) + " on the helpers)")
    else:
        reason = (f"fits the pool: {fmt_gb(s.memory[0])} here + "
                  + " + ".join(fmt_gb(m) for m in s.memory[1:]) + f" on the helpers; ~{speed:.1f} tok/s (estimate)")
    score = build.quality.get(lang, 0.0)
    if speed is not None and speed < fit.USABLE_TOK_S:
        score -= fit.SLOW_PENALTY
        reason += "; too slow to chat comfortably"
    fits = s.fits and why_not is None and plan is not None
    return PooledCandidate(build, fits, plan, s, speed, why_not or reason, score, why_not is None)


@dataclass(frozen=True)
class PoolAdvice:
    """The best build alone and the best pooled, the verdict, and every pooled candidate."""

    helpers: tuple[Helper, ...]
    alone: Recommendation
    pooled: PooledCandidate | None
    candidates: tuple[PooledCandidate, ...]
    worth_it: bool
    verdict: str


def advise(profile: HardwareProfile, helpers: Sequence[Helper], builds: Iterable[Build], *,
           lang: str = "en", n_ctx: int | None = None, backend: str | None = None,
           threads: int | None = None,
           downloaded: frozenset[str] | set[str] = frozenset()) -> PoolAdvice:
    """What pooling with `helpers` buys over this machine alone, and whether it pays."""
    builds = list(builds)
    alone = fit.plan(profile, builds, lang=lang, n_ctx=n_ctx, backend=backend, threads=threads,
                     downloaded=downloaded)
    cands = [judge_pooled(b, profile, helpers, lang=lang, n_ctx=n_ctx, threads=threads) for b in builds
             if b.format == "gguf" and backend in (None, "llama.cpp")]
    usable = [c for c in cands if c.fits]
    best = max(usable, key=lambda c: (c.score, c.estimated_decode_tok_s or 0.0), default=None)
    worth, verdict = _verdict(alone, best, lang)
    ordered = sorted(cands, key=lambda c: (not c.eligible, not c.fits, -c.score))
    return PoolAdvice(tuple(helpers), alone, best, tuple(ordered), worth, verdict)


def _verdict(alone: Recommendation, pooled: PooledCandidate | None, lang: str) -> tuple[bool, str]:
    a = alone.recommended
    if pooled is None:
        return False, "nothing fits the pool: pooling does not help"
    p_speed = pooled.estimated_decode_tok_s or 0.0
    if a is None:
        return True, f"pooling makes {pooled.build.id} possible (~{p_speed:.1f} tok/s); nothing fits alone"
    a_speed = a.estimated_decode_tok_s or 0.0
    a_q, p_q = a.build.quality.get(lang, 0.0), pooled.build.quality.get(lang, 0.0)
    if p_q < a_q or (p_q == a_q and p_speed < a_speed * FASTER_ENOUGH):
        return False, (f"pooling does not pay: {a.build.id} already fits this machine alone "
                       f"(~{a_speed:.0f} tok/s); pooled, the best build is {pooled.build.id} at "
                       f"~{p_speed:.1f} tok/s")
    if p_speed < fit.USABLE_TOK_S:
        return False, (f"pooling does not pay: {pooled.build.id} over this link would run at "
                       f"~{p_speed:.1f} tok/s, too slow to chat; {a.build.id} alone runs at ~{a_speed:.0f}")
    if p_q > a_q:
        return True, (f"pooling pays: {pooled.build.id} (quality {p_q:.0f}) instead of "
                      f"{a.build.id} (quality {a_q:.0f}) alone, at ~{p_speed:.1f} vs ~{a_speed:.0f} tok/s")
    return True, f"pooling pays: {pooled.build.id} runs faster pooled (~{p_speed:.1f} vs ~{a_speed:.0f} tok/s)"


def plan_file_pooled(plan: LoadPlan, size_bytes: int, profile: HardwareProfile,
                     helpers: Sequence[Helper], *, n_layers: int) -> tuple[LoadPlan, Split]:
    """A local file's plan (`fit.plan_for_file`) split over the helpers in proportion to memory."""
    build = Build(id="file", repo_id="", filename=None, quant="?", format="gguf", size_bytes=size_bytes,
                  bits_per_weight=0.0, total_params=1.0, active_params=1.0, expert_fraction=0.0, n_experts=1)
    need = est.memory_need(build, plan.n_ctx)
    s = split(need, n_layers, [fit.cpu_budget(profile)] + [budget(h) for h in helpers])
    return pooled_plan(plan, helpers, s.layers, n_layers), s


def _link(h: Helper) -> str:
    rtt = f"{h.rtt_seconds * 1000:.2f} ms" if h.rtt_seconds is not None else "not measured"
    rate = f"{h.throughput_bytes_s / 1e6:.0f} MB/s" if h.throughput_bytes_s else "not measured"
    free = "all RAM reported free; 85% counted" if h.reports_total_as_free else f"{fmt_gb(h.free_bytes)} free"
    return (f"{h.endpoint}: {fmt_gb(h.total_bytes)} ({free}), {fmt_gb(budget(h))} usable; "
            f"round trip {rtt}, throughput {rate}")


def format_advice(adv: PoolAdvice) -> str:
    """What pooling buys, for `pocketchat --recommend --rpc`."""
    lines = ["Helpers:"] + [f"  {_link(h)}" for h in adv.helpers]
    a = adv.alone.recommended
    if a is not None and a.plan is not None:
        lines.append(f"Alone:  {a.build.id} ({fmt_gb(a.build.size_bytes)}), {a.plan.describe()}, "
                     f"~{a.estimated_decode_tok_s:.1f} tok/s (estimate)")
    else:
        lines.append("Alone:  nothing fits this machine")
    p = adv.pooled
    if p is not None and p.plan is not None:
        lines.append(f"Pooled: {p.build.id} ({fmt_gb(p.build.size_bytes)}), context {p.plan.n_ctx}, "
                     f"~{p.estimated_decode_tok_s:.1f} tok/s (estimate, with the links above)")
        lines.append(f"  split: {p.where(adv.helpers)}")
    else:
        lines.append("Pooled: nothing fits the pool")
    lines.append("  (a helper's memory bandwidth is taken to be this machine's)")
    lines.append(("Recommended: pool. " if adv.worth_it else "Recommended: do not pool. ") + adv.verdict)
    if p is not None and adv.worth_it:
        endpoints = ",".join(h.endpoint for h in adv.helpers)
        lines.append(f"  run:  pocketchat --model {p.build.id} --rpc {endpoints}")
    lines += ["", "Every build over the pool:"]
    rows = [("build", "size", "fits", "tok/s", "reason")]
    for c in adv.candidates:
        mark = "BEST" if p is not None and c.build.id == p.build.id else ("yes" if c.fits else "no")
        speed = f"~{c.estimated_decode_tok_s:.1f}" if c.estimated_decode_tok_s else "-"
        rows.append((c.build.id, fmt_gb(c.build.size_bytes), mark, speed, c.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    return "\n".join(lines)


def advice_json(adv: PoolAdvice) -> dict:
    def cand(c: PooledCandidate) -> dict:
        return {"build": c.build.id, "fits": c.fits, "eligible": c.eligible,
                "layers": list(c.split.layers), "memory_bytes": list(c.split.memory),
                "estimated_decode_tok_s": round(c.estimated_decode_tok_s, 2) if c.estimated_decode_tok_s else None,
                "reason": c.reason}

    return {"helpers": [h.to_json() | {"usable_bytes": budget(h)} for h in adv.helpers],
            "alone": adv.alone.to_json(), "pooled": cand(adv.pooled) if adv.pooled else None,
            "worth_it": adv.worth_it, "verdict": adv.verdict,
            "candidates": [cand(c) for c in adv.candidates]}
