"""Choosing the model a command runs: one path from the Selection to a file and its load plan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pocketchat.commands.selection import STARTER, Selection
from pocketchat.errors import UsageError
from pocketchat.types import Build, HardwareProfile, LoadPlan, Recommendation

__all__ = ["STARTER", "ModelChoice", "choose_model", "model_size", "recommend"]


@dataclass(frozen=True)
class ModelChoice:
    """The model a command will load, where it is, and how to load it."""

    name: str
    path: Path
    plan: LoadPlan
    build: Build | None = None
    recommendation: Recommendation | None = None


def _is_local(spec: str) -> bool:
    p = Path(spec).expanduser()
    return p.exists() or spec.endswith(".gguf") or spec.startswith((".", "/", "~"))


def recommend(sel: Selection, profile: HardwareProfile | None = None) -> Recommendation:
    """Rank the catalog for this machine (or the replayed one), knowing what is on disk."""
    from pocketchat.select import catalog, fit

    profile = profile or sel.profile()
    downloaded: set[str] = set()
    speeds = None
    if sel.hardware is None:  # this machine: what is on disk, what `pocketchat bench` measured
        from pocketchat.paths import settings
        from pocketchat.select import measured
        from pocketchat.store.inventory import downloaded_build_ids

        downloaded = set(downloaded_build_ids())
        speeds = measured.Calibration.of(measured.load(settings().cache_dir), measured.machine_key(profile))
    return fit.plan(profile, catalog.builds(), lang=sel.lang, n_ctx=sel.ctx, backend=sel.backend,
                    threads=sel.threads, downloaded=downloaded, speeds=speeds)


def _file_plan(sel: Selection, profile: HardwareProfile, path: Path, name: str, **kw) -> LoadPlan:
    """The plan for a model file outside the catalog, within the context it was trained for."""
    from pocketchat.select import fit

    backend = "mlx" if path.is_dir() else "llama.cpp"
    if sel.backend and sel.backend != backend:
        kind = "an MLX folder" if backend == "mlx" else "a GGUF file"
        raise UsageError(f"{name} is {kind}, which runs on {backend}, not on --backend {sel.backend}",
                     hint=f"Leave --backend out, or give a model made for {sel.backend}.")
    facts = gguf_facts(path) if backend == "llama.cpp" else None
    max_ctx = facts.context_length if facts is not None else trained_context(path)
    return fit.plan_for_file(profile, model_size(path), n_ctx=sel.ctx, backend=backend,
                             max_ctx=max_ctx, threads=sel.threads, name=name, facts=facts, **kw)


def gguf_facts(path: Path | None):
    """The memory plan's facts from a GGUF file's header (None: not a readable GGUF)."""
    from pocketchat.errors import PocketchatError
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf

    if path is None or not path.is_file():
        return None
    try:
        return facts_of(check_gguf(path))
    except PocketchatError:
        return None  # the engine's own check reports a broken file when it loads it


def download_vet(sel: Selection, profile: HardwareProfile | None = None):
    """What the store runs on a GGUF's header (read over HTTP Range) before downloading it:
    refuse an architecture this llama.cpp cannot load, or a model that cannot fit this machine
    (`profile`, else the selection's, probed only when a header is read)."""

    def vet(rm, facts) -> None:
        from pocketchat.engines.llamacpp.arch import knows_arch
        from pocketchat.errors import UnsupportedModel
        from pocketchat.select.header import check_fits

        if knows_arch(facts.arch) is False:
            raise UnsupportedModel(
                f"{rm.name} is a {facts.arch!r} model, an architecture the installed llama.cpp "
                f"cannot load; nothing was downloaded")
        check_fits(facts, profile or sel.profile(), rm.name)

    return vet


def trained_context(path: Path) -> int | None:
    """The context a model file was trained for, from its header or config (None: unknown)."""
    from pocketchat.errors import PocketchatError

    try:
        if path.is_dir():
            from pocketchat.engines.mlx.model import check_mlx_folder

            return check_mlx_folder(path).context_length
        from pocketchat.modelfile.gguf import check_gguf

        return check_gguf(path).context_length
    except PocketchatError:
        return None  # the engine's own check reports a broken file when it loads it


def choose_model(sel: Selection, *, confirm=None, progress=None) -> ModelChoice:
    """The model the selection names (or the recommended build), on disk, with its load plan.

    Downloads through the store when needed (asking `confirm`, reporting to `progress`).
    Raises OfflineError when the build is not on disk and the Hub cannot be reached.
    """
    from pocketchat.errors import ModelNotFound
    from pocketchat.select import catalog
    from pocketchat.select.report import nothing_fits

    if sel.rpc:  # pooled with helper machines: commands/pooling.py
        from pocketchat.commands.pooling import choose_pooled

        name, path, plan, build = choose_pooled(sel, local=bool(sel.model and _is_local(sel.model)),
                                                confirm=confirm, progress=progress)
        return ModelChoice(name=name, path=path, plan=plan, build=build)
    spec = sel.model
    profile = sel.profile()
    if spec == STARTER:
        from pocketchat.store.starter import STARTER_NAME, starter_path

        path = starter_path()
        plan = _file_plan(sel, profile, path, STARTER_NAME, starter=True)
        return ModelChoice(name=f"{STARTER_NAME} (starter)", path=path, plan=plan)
    if spec and _is_local(spec):
        path = Path(spec).expanduser().resolve()
        if not path.exists():
            raise ModelNotFound(f"no model file at {path}",
                                hint="Give the path of a .gguf file or an MLX model folder.")
        return ModelChoice(name=path.name, path=path, plan=_file_plan(sel, profile, path, path.name))

    from pocketchat.store import api as store

    if spec:
        try:
            build = catalog.get(spec)
        except ModelNotFound:
            build = None
        if build is not None:
            return _catalog_choice(sel, profile, build, confirm=confirm, progress=progress)
        resolved = store.resolve(spec, offline=sel.offline)  # REPO:QUANT or REPO/FILE
        path = store.ensure(resolved, offline=sel.offline, confirm=confirm, progress=progress,
                            vet=download_vet(sel, profile))
        return ModelChoice(name=path.name, path=path, plan=_file_plan(sel, profile, path, path.name))

    rec = recommend(sel, profile)
    if rec.recommended is None or rec.recommended.plan is None:
        raise nothing_fits(rec)
    build = rec.recommended.build
    path = store.ensure(build, offline=sel.offline, confirm=confirm, progress=progress,
                        vet=download_vet(sel, profile))
    return ModelChoice(name=build.id, path=path, plan=rec.recommended.plan, build=build, recommendation=rec)


def _catalog_choice(sel: Selection, profile, build, *, confirm=None, progress=None) -> ModelChoice:
    """A catalog build asked for by name: judged on this machine (from its own header when on
    disk), refused when it cannot fit, else fetched."""
    from pocketchat.errors import ModelTooLarge
    from pocketchat.select import fit
    from pocketchat.store import api as store

    local = store.local_path(build)
    facts = gguf_facts(local) if build.format == "gguf" else None
    if facts is not None:  # on disk: plan from its own header, not the catalog's figures
        build = replace(build, facts=facts)
    cand = fit.judge(build, profile, lang=sel.lang, n_ctx=sel.ctx, backend=sel.backend,
                     threads=sel.threads, downloaded=local is not None, forced=True)
    if cand.plan is None:
        raise ModelTooLarge(f"{build.id} does not fit this machine: {cand.reason}",
                            hint="Run `pocketchat --recommend` to see the builds that fit.")
    path = store.ensure(build, offline=sel.offline, confirm=confirm, progress=progress,
                        vet=download_vet(sel, profile))
    return ModelChoice(name=build.id, path=path, plan=cand.plan, build=build)


def model_size(path: Path) -> int:
    """Bytes of a model file, or of every file in an MLX folder."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size
