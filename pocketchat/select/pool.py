"""Pooling this machine with helpers over llama.cpp's RPC backend: is it worth it?

llama.cpp splits a model by layers: the first ones stay here (CPU), the last ones (and the
output layer, with the last helper) go to the helpers' devices, each with the KV cache of its
layers. The split and the judging are the planner's (`fit.judge` with a pooled `Budget`:
`place.pooled` splits the layers in proportion to each device's memory, `speed.pooled_tok_s`
prices the links); this module compares the best build alone with the best pooled:

- `advise(...)`: the best build alone vs the best pooled, with a verdict (`PoolAdvice`).
- `format_advice`, `advice_json`: the advice for `pocketchat --recommend --rpc`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from pocketchat.select import defaults, fit
from pocketchat.select import estimate as est
from pocketchat.select import speed as spd
from pocketchat.select.budget import Budget, Link
from pocketchat.select.budget import helper_budget as budget
from pocketchat.select.budget import reserve_of as helper_reserve
from pocketchat.select.estimate import fmt_gb
from pocketchat.select.place import split_layers as split
from pocketchat.types import Build, Candidate, Helper, HardwareProfile, Recommendation, Split

__all__ = ["PoolAdvice", "Split", "advise", "advice_json", "budget", "format_advice",
           "helper_reserve", "pooled_tok_s", "split"]

POCKET_LAYERS = est.POCKET_LAYERS
# Same build pooled: it must be this much faster than alone to be worth a second machine.
FASTER_ENOUGH = 1.10


def pooled_tok_s(build: Build, profile: HardwareProfile, helpers: Sequence[Helper], layers: Sequence[int],
                 *, threads: int | None = None, link: Link = Link()) -> float:
    """Estimated decode speed of `build` split `layers` over this machine and the helpers."""
    return spd.pooled_tok_s(build, profile.memory_bandwidth_gbps, helpers, layers,
                            threads=defaults.threads(profile, threads), link=link)


@dataclass(frozen=True)
class PoolAdvice:
    """The best build alone and the best pooled, the verdict, and every pooled candidate."""

    helpers: tuple[Helper, ...]
    alone: Recommendation
    pooled: Candidate | None
    candidates: tuple[Candidate, ...]
    worth_it: bool
    verdict: str


def advise(profile: HardwareProfile, helpers: Sequence[Helper], builds: Iterable[Build], *,
           lang: str = "en", n_ctx: int | None = None, backend: str | None = None,
           threads: int | None = None,
           downloaded: frozenset[str] | set[str] = frozenset(), draft: str = "off") -> PoolAdvice:
    """What pooling with `helpers` buys over this machine alone, and whether it pays."""
    builds = list(builds)
    alone = fit.plan(profile, builds, lang=lang, n_ctx=n_ctx, backend=backend, threads=threads,
                     downloaded=downloaded, draft=draft)
    ggufs = [b for b in builds if b.format == "gguf" and backend in (None, "llama.cpp")]
    pooled = fit.plan(Budget(profile, tuple(helpers)), ggufs, lang=lang, n_ctx=n_ctx, threads=threads,
                      downloaded=downloaded, draft=draft)
    worth, verdict = _verdict(alone, pooled.recommended, lang)
    return PoolAdvice(tuple(helpers), alone, pooled.recommended, pooled.candidates, worth, verdict)


def _verdict(alone: Recommendation, pooled: Candidate | None, lang: str) -> tuple[bool, str]:
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


def _where(c: Candidate, helpers: Sequence[Helper]) -> str:
    """The split in words: the layers and bytes on each machine."""
    s = c.split
    if s is None:
        return "-"
    parts = [f"{s.layers[0]} layers here ({fmt_gb(s.memory[0])})"]
    for h, n, m in zip(helpers, s.helper_layers, s.memory[1:], strict=False):
        parts.append(f"{n} on {h.endpoint} ({fmt_gb(m)})")
    return ", ".join(parts)


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
        lines.append(f"  split: {_where(p, adv.helpers)}")
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
        mark = "BEST" if p is not None and c.build.id == p.build.id else ("yes" if c.fits and c.eligible else "no")
        speed = f"~{c.estimated_decode_tok_s:.1f}" if c.estimated_decode_tok_s else "-"
        rows.append((c.build.id, fmt_gb(c.build.size_bytes), mark, speed, c.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    return "\n".join(lines)


def advice_json(adv: PoolAdvice) -> dict:
    def cand(c: Candidate) -> dict:
        return {"build": c.build.id, "fits": c.fits, "eligible": c.eligible,
                "layers": list(c.split.layers) if c.split else None,
                "memory_bytes": list(c.split.memory) if c.split else None,
                "gave_up": list(c.gave_up),
                "estimated_decode_tok_s": round(c.estimated_decode_tok_s, 2) if c.estimated_decode_tok_s else None,
                "reason": c.reason}

    return {"helpers": [h.to_json() | {"usable_bytes": budget(h)} for h in adv.helpers],
            "alone": adv.alone.to_json(), "pooled": cand(adv.pooled) if adv.pooled else None,
            "worth_it": adv.worth_it, "verdict": adv.verdict,
            "candidates": [cand(c) for c in adv.candidates]}
