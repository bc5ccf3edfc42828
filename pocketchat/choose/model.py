"""Choosing the model a command runs: one path from the Selection to a file and its load plan.

`choose_model` classifies --model once (`store.spec.parse_spec`), then: the starter or a local
file is planned from its header; a catalog build is judged, checked and fetched; a Hub name is
checked before its download (its header over HTTP) and fetched; no --model takes the
recommendation. With --rpc the same path runs with the helpers' memory in the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pocketchat.choose.selection import STARTER, Selection
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
    starter: bool = False  # the embedded starter model

    @property
    def label(self) -> str:
        """The name shown to the user (the chat's header, bench, a saved chat's model)."""
        if self.starter:
            from pocketchat.store.starter import STARTER_LABEL

            return STARTER_LABEL
        return self.name


def recommend(sel: Selection, profile: HardwareProfile | None = None) -> Recommendation:
    """Rank the catalog for this machine (or the replayed one), knowing what is on disk."""
    from pocketchat.select import catalog, fit

    profile = profile or sel.profile(kernels=True)
    downloaded: set[str] = set()
    speeds = None
    if sel.hardware is None:  # this machine: what is on disk, what `pocketchat bench` measured
        from pocketchat.store.inventory import downloaded_build_ids

        downloaded = set(downloaded_build_ids())
        speeds = sel.calibration(profile)
    return fit.plan(profile, catalog.builds(), lang=sel.lang, n_ctx=sel.ctx, backend=sel.backend,
                    threads=sel.threads, downloaded=downloaded, speeds=speeds, draft=sel.drafts)


def _file_plan(sel: Selection, budget, path: Path, name: str, *, starter: bool = False) -> LoadPlan:
    """The plan for a model file outside the catalog, within the context it was trained for
    (`budget`: this machine, or it and the helpers)."""
    from pocketchat.select import fit

    backend = "mlx" if path.is_dir() else "llama.cpp"
    if sel.backend and sel.backend != backend:
        kind = "an MLX folder" if backend == "mlx" else "a GGUF file"
        raise UsageError(f"{name} is {kind}, which runs on {backend}, not on --backend {sel.backend}",
                         hint=f"Leave --backend out, or give a model made for {sel.backend}.")
    facts = gguf_facts(path) if backend == "llama.cpp" else None
    if budget.pooled:
        from pocketchat.choose.pooling import check_splittable

        check_splittable(path, facts)
    max_ctx = facts.context_length if facts is not None else trained_context(path)
    return fit.plan_for_file(budget, model_size(path), n_ctx=sel.ctx, backend=backend, max_ctx=max_ctx,
                             threads=sel.threads, name=name, facts=facts, starter=starter,
                             draft=sel.drafts)


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


def download_vet(sel: Selection, budget=None):
    """What the store runs on a GGUF's header (read over HTTP Range) before downloading it:
    refuse an architecture this llama.cpp cannot load, or a model that cannot fit this machine
    (`budget`: this machine or it and the helpers; else the selection's machine, probed only
    when a header is read)."""

    def vet(rm, facts) -> None:
        from pocketchat.engines.llamacpp.arch import knows_arch
        from pocketchat.errors import UnsupportedModel
        from pocketchat.select.header import check_fits

        if knows_arch(facts.arch) is False:
            raise UnsupportedModel(
                f"{rm.name} is a {facts.arch!r} model, an architecture the installed llama.cpp "
                f"cannot load; nothing was downloaded")
        check_fits(facts, budget or _fit_profile(sel), rm.name)

    return vet


def _fit_profile(sel: Selection) -> HardwareProfile:
    """The machine as the fit check needs it: memory and devices, not the memory bandwidth
    (a measurement of a second or two on a first run, with the download question waiting)."""
    if sel.hardware is not None:
        return sel.profile()
    from pocketchat.select.probe import detect

    return detect(measure_bandwidth=False)


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

    Downloads through the store when needed (asking `confirm`, reporting to `progress`), after
    the checks on the file's header (`download_vet`). With --rpc the helpers' memory joins the
    budget. Raises OfflineError when the model is not on disk and the Hub cannot be reached.
    The plan carries what the user fixed (`Selection.applied`: --threads pins the count).
    """
    choice = _choose(sel, confirm=confirm, progress=progress)
    return replace(choice, plan=sel.applied(choice.plan))


def _choose(sel: Selection, *, confirm=None, progress=None) -> ModelChoice:
    from pocketchat.select.budget import Budget
    from pocketchat.store import api as store
    from pocketchat.store.spec import parse_spec

    spec = parse_spec(sel.model) if sel.model else None
    helpers = ()
    if sel.rpc:  # pooled with helper machines: their memory is part of the budget
        from pocketchat.choose.pooling import helpers_for

        helpers = helpers_for(sel)
    if spec is not None and progress is not None and not sel.offline:
        _say_probe(spec, progress)
    # Ranking builds, or planning a catalog build's threads, needs this machine's kernel speeds
    # (measured once, cached); a given file's plan uses them only when already measured.
    budget = Budget(sel.profile(kernels=spec is None or spec.build is not None), helpers)
    if spec is None:
        return _recommended(sel, budget, confirm=confirm, progress=progress)
    if spec.build is not None:
        return _catalog_choice(sel, budget, spec.build, confirm=confirm, progress=progress)
    path = spec.local or store.ensure(spec, offline=sel.offline, confirm=confirm, progress=progress,
                                      vet=download_vet(sel, budget))
    if spec.starter:
        from pocketchat.store.starter import STARTER_NAME

        name = STARTER_NAME
    else:
        name = path.name
    return ModelChoice(name=name, path=path, plan=_file_plan(sel, budget, path, name, starter=spec.starter),
                       starter=spec.starter)


PROBE_STEP = "looking at this machine (memory, devices, speed) before checking the model"


def _say_probe(spec, progress) -> None:
    """Before the probe (a second or two on a first run): a step line when the model named
    is not on disk, so a download question follows the probe (the terminal is never blank
    before it)."""
    from pocketchat.store import api as store
    from pocketchat.store.types import DownloadProgress

    if spec.local is not None or store.local_path(spec) is not None:
        return
    progress(DownloadProgress(spec.text, spec.text, "checking", 0, 0, message=PROBE_STEP))


def _recommended(sel: Selection, budget, *, confirm=None, progress=None) -> ModelChoice:
    """The best build for the budget (alone: the recommendation; pooled: the pool's), fetched."""
    from pocketchat.errors import NothingFits
    from pocketchat.select.report import nothing_fits
    from pocketchat.store import api as store

    rec = None
    if budget.pooled:
        from pocketchat.choose.pooling import advice

        adv = advice(sel, budget.machine, budget.helpers)
        best = adv.pooled
        if best is None or best.plan is None:
            raise NothingFits(f"nothing fits this machine and the helpers; {adv.verdict}",
                              hint="Use --model starter to chat with the small embedded model.")
    else:
        rec = recommend(sel, budget.machine)
        best = rec.recommended
        if best is None or best.plan is None:
            raise nothing_fits(rec)
    path = store.ensure(best.build, offline=sel.offline, confirm=confirm, progress=progress,
                        vet=download_vet(sel, budget))
    return ModelChoice(name=best.build.id, path=path, plan=best.plan, build=best.build, recommendation=rec)


def _catalog_choice(sel: Selection, budget, build: Build, *, confirm=None, progress=None) -> ModelChoice:
    """A catalog build asked for by name: judged on the budget (from its own header when on
    disk), refused when it cannot fit, else fetched."""
    from pocketchat.errors import ModelTooLarge
    from pocketchat.select import fit
    from pocketchat.store import api as store

    local = store.local_path(build)
    facts = gguf_facts(local) if build.format == "gguf" else None
    if facts is not None:  # on disk: plan from its own header, not the catalog's figures
        build = replace(build, facts=facts)
    cand = fit.judge(build, budget, lang=sel.lang, n_ctx=sel.ctx, backend=sel.backend,
                     threads=sel.threads, downloaded=local is not None, forced=True,
                     draft=sel.drafts)
    if cand.plan is None:
        where = "this machine and the helpers" if budget.pooled else "this machine"
        run = "pocketchat --recommend --rpc ..." if budget.pooled else "pocketchat --recommend"
        raise ModelTooLarge(f"{build.id} does not fit {where}: {cand.reason}",
                            hint=f"Run `{run}` to see the builds that fit.")
    path = store.ensure(build, offline=sel.offline, confirm=confirm, progress=progress,
                        vet=download_vet(sel, budget))
    return ModelChoice(name=build.id, path=path, plan=cand.plan, build=build)


def model_size(path: Path) -> int:
    """Bytes of a model file, or of every file in an MLX folder."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size
