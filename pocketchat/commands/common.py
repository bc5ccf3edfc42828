"""Choosing the model a command runs: one path from --model / the recommendation to a file."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from pocketchat.types import Build, LoadPlan, Recommendation


@dataclass(frozen=True)
class ModelChoice:
    """The model a command will load, where it is, and how to load it."""

    name: str
    path: Path
    plan: LoadPlan
    build: Build | None = None
    recommendation: Recommendation | None = None


STARTER = "starter"


def _is_local(spec: str) -> bool:
    p = Path(spec).expanduser()
    return p.exists() or spec.endswith(".gguf") or spec.startswith((".", "/", "~"))


def choose_model(args: argparse.Namespace, *, confirm=None, progress=None) -> ModelChoice:
    """The model `--model` names (or the recommended build), on disk, with its load plan.

    Downloads through the store when needed (asking `confirm`, reporting to `progress`).
    Raises OfflineError when the build is not on disk and the Hub cannot be reached.
    """
    from pocketchat.commands.recommend import profile_from_args, recommend
    from pocketchat.errors import ModelNotFound, ModelTooLarge, NothingFits
    from pocketchat.select import catalog, fit
    from pocketchat.select.report import nothing_fits_summary

    spec = getattr(args, "model", None)
    offline = bool(getattr(args, "offline", False))
    profile = profile_from_args(args)
    if spec == STARTER:
        from pocketchat.store.starter import STARTER_NAME, STARTER_SAMPLING, starter_path

        path = starter_path()
        plan = fit.plan_for_file(profile, path.stat().st_size, n_ctx=args.ctx, max_ctx=8192,
                                 sampling=STARTER_SAMPLING, name=STARTER_NAME)
        return ModelChoice(name=f"{STARTER_NAME} (starter)", path=path, plan=plan)
    if spec and _is_local(spec):
        path = Path(spec).expanduser().resolve()
        if not path.exists():
            raise ModelNotFound(f"no model file at {path}",
                                hint="Give the path of a .gguf file or an MLX model folder.")
        backend = "mlx" if path.is_dir() else "llama.cpp"
        plan = fit.plan_for_file(profile, model_size(path), n_ctx=args.ctx, backend=backend, name=path.name)
        return ModelChoice(name=path.name, path=path, plan=plan)

    from pocketchat.store import api as store

    if spec:
        try:
            build = catalog.get(spec)
        except ModelNotFound:
            build = None
        if build is None:  # REPO:QUANT or REPO/FILE
            resolved = store.resolve(spec, offline=offline)
            path = store.ensure(resolved, offline=offline, confirm=confirm, progress=progress)
            plan = fit.plan_for_file(profile, model_size(path), n_ctx=args.ctx, name=path.name)
            return ModelChoice(name=path.name, path=path, plan=plan)
        cand = fit.judge(build, profile, lang=args.lang, n_ctx=args.ctx, backend=args.backend,
                         downloaded=store.local_path(build) is not None, forced=True)
        if cand.plan is None:
            raise ModelTooLarge(f"{build.id} does not fit this machine: {cand.reason}",
                                hint="Run `pocketchat --recommend` to see the builds that fit.")
        path = store.ensure(build, offline=offline, confirm=confirm, progress=progress)
        return ModelChoice(name=build.id, path=path, plan=cand.plan, build=build)

    rec = recommend(args, profile)
    if rec.recommended is None or rec.recommended.plan is None:
        raise NothingFits(nothing_fits_summary(rec),
                          hint="Use --model starter to chat with the small embedded model.")
    build = rec.recommended.build
    path = store.ensure(build, offline=offline, confirm=confirm, progress=progress)
    return ModelChoice(name=build.id, path=path, plan=rec.recommended.plan, build=build, recommendation=rec)


def model_size(path: Path) -> int:
    """Bytes of a model file, or of every file in an MLX folder."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size
