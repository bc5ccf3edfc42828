"""Plans for a model known by its GGUF header (a local file, or a file read over HTTP Range).

`estimate.build_from_facts` makes the catalog-style `Build` the planner works on, carrying the
facts so every estimate uses them; `check_fits` refuses, with the figures, a model that fits no
placement of this machine even at the smallest context; `memory_table` is `pocketchat
inspect`'s table of memory per context size.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketchat.errors import ModelTooLarge
from pocketchat.modelfile.facts import ModelFacts
from pocketchat.select import estimate as est
from pocketchat.select import fit
from pocketchat.select.budget import Budget
from pocketchat.select.estimate import MemoryNeed, build_from_facts, fmt_gb
from pocketchat.select.repack import repacked_types
from pocketchat.types import HardwareProfile

TABLE_CTX = (2048, 8192, 32768, 131072)


def check_fits(facts: ModelFacts, profile: Budget | HardwareProfile, name: str,
               backend: str = "llama.cpp") -> fit.Fit:
    """The placement the planner would choose on this machine (or it and the helpers: a
    `Budget`), at any step of its ladder down to the smallest context with every optional byte
    given up; ModelTooLarge when none fits."""
    build = build_from_facts(facts, name)
    c = fit.choose(build, profile, backend)
    if c.fit is not None:
        return c.fit
    where = c.tried[-1].shortfall if c.tried else "no backend can run it here"
    need = c.tried[-1].memory if c.tried else est.memory_need(build, c.step.n_ctx).total
    raise ModelTooLarge(
        f"{name} does not fit this machine: it needs about {fmt_gb(need)} even at "
        f"{c.step.n_ctx} context ({fmt_gb(facts.weight_bytes)} of weights), and {where}; "
        "nothing was downloaded",
        hint="Pick a smaller quantization or model (`pocketchat --recommend` lists the builds that fit).",
    )


@dataclass(frozen=True)
class TableRow:
    n_ctx: int
    need: MemoryNeed
    placement: fit.Fit | None


def memory_table(facts: ModelFacts, profile: HardwareProfile, name: str,
                 sizes: tuple[int, ...] = TABLE_CTX) -> list[TableRow]:
    """Memory per context size (up to the trained context) on the CPU, with llama.cpp's repacked
    copy of weights as this machine's CPU makes it, and the placement that fits, if any."""
    build = build_from_facts(facts, name)
    limit = facts.context_length or max(sizes)
    ctxs = sorted({c for c in sizes if c <= limit} | ({limit} if limit < max(sizes) else set()))
    repack = repacked_types(profile)
    return [TableRow(c, est.memory_need(build, c, repack=repack), fit.choose_fit(build, profile, c, "llama.cpp"))
            for c in ctxs]
