"""`--rpc HOST:PORT[,..]`: the helpers, what pooling with them buys, and a model alone again.

The helpers are asked over RPC for their memory (and the link is timed) once per command;
`choose/model.choose_model` chooses with their memory in the budget (the planner, select/fit.py,
splits the layers; select/pool.py says whether pooling pays); the plan carries the helpers'
endpoints and their layers to the engine (rpc/client.py, engines/worker/pooled.py, engines/llamacpp/load.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pocketchat.choose.selection import Selection
from pocketchat.errors import EngineError, ModelNotFound, ModelTooLarge
from pocketchat.types import Helper, HardwareProfile, LoadPlan


def helpers_for(sel: Selection) -> tuple[Helper, ...]:
    """Check this llama.cpp has the RPC backend, then ask every --rpc helper for its memory."""
    from pocketchat.rpc.client import probe_helpers
    from pocketchat.rpc.ggml import require_rpc

    require_rpc()
    return probe_helpers(sel.rpc)


def advice(sel: Selection, profile: HardwareProfile, helpers: tuple[Helper, ...]):
    """`pool.advise` for this machine and the helpers, knowing what is on disk."""
    from pocketchat.select import catalog, pool

    downloaded: set[str] = set()
    if sel.hardware is None:
        from pocketchat.store.inventory import downloaded_build_ids

        downloaded = set(downloaded_build_ids())
    return pool.advise(profile, helpers, catalog.builds(), lang=sel.lang, n_ctx=sel.ctx,
                       backend=sel.backend, threads=sel.threads, downloaded=downloaded,
                       draft=sel.drafts)


def check_splittable(path: Path, facts) -> None:
    """ModelNotFound unless `path` is a GGUF file, EngineError unless it says how many layers it
    has (`facts`: its header's, None when unreadable): what a split over helpers needs."""
    if path.is_dir() or facts is None:
        raise ModelNotFound(f"no GGUF file at {path}",
                            hint="Pooling over RPC runs GGUF files: give the path of a .gguf file.")
    if not facts.block_count:
        raise EngineError(f"{path.name} does not say how many layers it has; it cannot be split",
                          hint="Leave --rpc out to run it on this machine alone.")


def alone_plan(sel: Selection, choice) -> LoadPlan:
    """The same model on this machine alone (after a helper went away); EngineError if it does not fit."""
    from pocketchat.select import fit

    plan = choice.plan
    try:
        alone = fit.plan_for_file(sel.profile(), choice.path.stat().st_size, n_ctx=plan.n_ctx,
                                  threads=sel.threads, name=choice.name, draft=sel.drafts)
    except ModelTooLarge as exc:
        raise EngineError(
            f"the helper is gone and {choice.name} does not fit this machine alone: {exc.message}",
            hint="Start the helper again and press Ctrl+R, or quit and choose a smaller build.") from None
    return sel.applied(replace(alone, sampling=plan.sampling))
