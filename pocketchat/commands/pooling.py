"""`--rpc HOST:PORT[,..]`: choosing and planning a model pooled with helper machines.

The helpers are asked over RPC for their memory (and the link is timed) once per command;
select/pool.py decides the build and the split; the plan carries the helpers' endpoints and
their layers to the engine (rpc/client.py, engines/pooled.py, engines/llamacpp/load.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pocketchat.commands.selection import STARTER, Selection
from pocketchat.errors import EngineError, ModelNotFound, ModelTooLarge, NothingFits
from pocketchat.types import Build, Helper, HardwareProfile, LoadPlan

# (name, path, plan, build): what commands/common.py wraps into its ModelChoice
Pooled = tuple[str, Path, LoadPlan, "Build | None"]


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
                       backend=sel.backend, threads=sel.threads, downloaded=downloaded)


def choose_pooled(sel: Selection, *, local: bool, confirm=None, progress=None) -> Pooled:
    """Like `common.choose_model` (`local`: --model names a file here), with the helpers'
    memory added and the layers split."""
    from pocketchat.select import catalog, pool

    helpers = helpers_for(sel)
    profile = sel.profile()
    spec, offline = sel.model, sel.offline
    if spec == STARTER:
        from pocketchat.store.starter import STARTER_NAME, starter_path

        return _file_choice(sel, profile, helpers, starter_path(), f"{STARTER_NAME} (starter)")
    if spec and local:
        path = Path(spec).expanduser().resolve()
        if not path.exists() or path.is_dir():
            raise ModelNotFound(f"no GGUF file at {path}",
                                hint="Pooling over RPC runs GGUF files: give the path of a .gguf file.")
        return _file_choice(sel, profile, helpers, path, path.name)

    from pocketchat.store import api as store

    build = None
    if spec:
        try:
            build = catalog.get(spec)
        except ModelNotFound:
            resolved = store.resolve(spec, offline=offline)
            path = store.ensure(resolved, offline=offline, confirm=confirm, progress=progress)
            return _file_choice(sel, profile, helpers, path, path.name)
    if build is not None:
        cand = pool.judge_pooled(build, profile, helpers, lang=sel.lang, n_ctx=sel.ctx,
                                 threads=sel.threads, forced=True)
        if not cand.fits or cand.plan is None:
            raise ModelTooLarge(f"{build.id} does not fit this machine and the helpers: {cand.reason}",
                                hint="Run `pocketchat --recommend --rpc ...` to see what the pool runs.")
    else:
        adv = advice(sel, profile, helpers)
        cand = adv.pooled
        if cand is None or cand.plan is None:
            raise NothingFits(f"nothing fits this machine and the helpers; {adv.verdict}",
                              hint="Use --model starter to chat with the small embedded model.")
        build = cand.build
    path = store.ensure(build, offline=offline, confirm=confirm, progress=progress)
    return build.id, path, cand.plan, build


def _file_choice(sel: Selection, profile: HardwareProfile, helpers: tuple[Helper, ...],
                 path: Path, name: str) -> Pooled:
    """A GGUF file split in proportion to each machine's memory (the pool's budget plans the context)."""
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.select import fit, pool
    from pocketchat.store.starter import STARTER_SAMPLING

    info = check_gguf(path)
    if not info.block_count:
        raise EngineError(f"{path.name} does not say how many layers it has; it cannot be split",
                          hint="Leave --rpc out to run it on this machine alone.")
    extra = sum(pool.budget(h) for h in helpers)
    pooled = replace(profile, ram_available_bytes=profile.ram_available_bytes + extra)
    starter = name.endswith("(starter)")
    plan = fit.plan_for_file(pooled, path.stat().st_size, n_ctx=sel.ctx, name=name,
                             max_ctx=info.context_length, threads=sel.threads,
                             sampling=STARTER_SAMPLING if starter else None)
    plan, _ = pool.plan_file_pooled(plan, path.stat().st_size, profile, helpers, n_layers=info.block_count)
    return name, path, plan, None


def alone_plan(sel: Selection, choice) -> LoadPlan:
    """The same model on this machine alone (after a helper went away); EngineError if it does not fit."""
    from pocketchat.select import fit

    plan = choice.plan
    try:
        alone = fit.plan_for_file(sel.profile(), choice.path.stat().st_size, n_ctx=plan.n_ctx,
                                  threads=sel.threads, name=choice.name, sampling=plan.sampling)
    except ModelTooLarge as exc:
        raise EngineError(
            f"the helper is gone and {choice.name} does not fit this machine alone: {exc.message}",
            hint="Start the helper again and press Ctrl+R, or quit and choose a smaller build.") from None
    return replace(alone, sampling=plan.sampling)
