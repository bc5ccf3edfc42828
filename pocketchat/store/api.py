"""The model store: name a model, get a verified local path; download it first if needed.

    resolve(spec)  -> ResolvedModel   what a build id / REPO:QUANT / REPO/FILE / path names
                                      (a string, or a spec `spec.parse_spec` classified)
    ensure(spec)   -> Path            the verified file (or MLX folder), downloaded if missing
    local_path(spec), list_models(), remove(name), downloaded_build_ids()   (no network)

Models live in the Hugging Face cache layout (see `cache.py`), so anything `hf download` fetched
is reused as is. `ensure` is local-first: a model on disk is used without any network call.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pocketchat.errors import (
    HubUnreachable,
    ModelNotFound,
    NotWritable,
    OfflineError,
    PocketchatError,
)
from pocketchat.paths import settings
from pocketchat.store import cache, fetcher, inventory, quant
from pocketchat.store.ondisk import path_of, verify_present
from pocketchat.store.spec import ModelSpec, parse_spec
from pocketchat.store.download import DownloadOptions
from pocketchat.store.inventory import downloaded_build_ids, list_models
from pocketchat.store.types import (
    CachedModel,
    DownloadPlan,
    DownloadProgress,
    RemoteFile,
    ResolvedModel,
)
from pocketchat.types import Build

__all__ = [
    "CachedModel", "DownloadOptions", "DownloadPlan", "DownloadProgress", "RemoteFile",
    "ResolvedModel", "downloaded_build_ids", "ensure", "list_models", "local_path", "remove",
    "resolve",
]

Confirm = Callable[[DownloadPlan], bool]
Progress = Callable[[DownloadProgress], None]


def _parse(spec: str | Build | ModelSpec | ResolvedModel) -> ModelSpec:
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, ResolvedModel):
        spec = spec.build or spec.spec or spec.name
    return parse_spec(spec)


def _select(s: ModelSpec, paths: list[str]) -> tuple[str, list[str]]:
    """Which of a repo's paths the spec names: (format, paths). Raises when none or several."""
    repo = s.repo_id or ""
    if s.kind == "build":
        b = s.build
        if b.format == "mlx":
            files = [p for p in paths if quant.is_mlx_file(p)]
            if not any(p.endswith(".safetensors") for p in files):
                raise ModelNotFound(f"{repo} holds no MLX weights (*.safetensors)")
            return "mlx", files
        if b.filename in paths:
            return "gguf", [b.filename]
        by_id = [k for k in quant.gguf_groups(paths) if b.id.lower() in k.lower()]
        if len(by_id) == 1:
            return "gguf", quant.gguf_groups(paths)[by_id[0]]
        return "gguf", quant.find_quant(paths, b.quant, repo_id=repo)
    if s.kind == "quant":
        return "gguf", quant.find_quant(paths, s.quant, repo_id=repo)
    if s.kind == "file":
        groups = quant.gguf_groups(paths)
        for parts in groups.values():
            if s.path in parts:
                return "gguf", parts
        if s.path in paths:
            return ("gguf" if quant.is_gguf(s.path) else "file"), [s.path]
        raise ModelNotFound(f"{repo} has no file {s.path!r}; its GGUF files: "
                            + (", ".join(groups) or "none"))
    return quant.single_model(paths, repo_id=repo)


def _build_of(s: ModelSpec, fmt: str, files: list[str]) -> Build | None:
    if s.build is not None:
        return s.build
    return inventory.build_for(s.repo_id, files[0] if fmt != "mlx" else None, fmt) if files else None


def _resolve_online(s: ModelSpec) -> ResolvedModel:
    from pocketchat.store import hub

    repo = s.build.repo_id if s.build else s.repo_id
    listing = hub.list_repo(repo)
    s = replace(s, repo_id=repo)
    fmt, chosen = _select(s, listing.paths)
    files = tuple(listing.get(p) for p in chosen)
    return ResolvedModel(name=s.build.id if s.build else s.text, format="mlx" if fmt == "mlx" else "gguf",
                         repo_id=repo, commit=listing.commit, files=files, build=_build_of(s, fmt, chosen),
                         spec=s.text)


def _resolve_on_disk(s: ModelSpec) -> ResolvedModel | None:
    """The spec resolved against the local snapshots only; None when it is not on disk."""
    if s.local is not None:  # a path here, or the starter
        fmt = "mlx" if s.local.is_dir() else "gguf"
        return ResolvedModel(name=str(s.local), format=fmt, local=s.local, offline=True, spec=s.text)
    repo = s.build.repo_id if s.build else s.repo_id
    s = replace(s, repo_id=repo)
    for commit, snap in cache.snapshots(repo):
        paths = cache.snapshot_files(snap)
        try:
            fmt, chosen = _select(s, paths)
        except (ModelNotFound, LookupError):  # not in this snapshot (the Hub may still have it)
            continue
        files = tuple(_local_file(repo, commit, p) for p in chosen)
        return ResolvedModel(name=s.build.id if s.build else s.text, format="mlx" if fmt == "mlx" else "gguf",
                             repo_id=repo, commit=commit, files=files, build=_build_of(s, fmt, chosen),
                             offline=True, spec=s.text)
    return None


def _local_file(repo: str, commit: str, path: str) -> RemoteFile:
    pointer = cache.pointer_path(repo, commit, path)
    blob = cache.blob_of(pointer)
    kind = cache.digest_kind(blob.name) if blob != pointer else None
    return RemoteFile(path=path, size=pointer.stat().st_size,
                      sha256=blob.name if kind == "sha256" else None,
                      blob_id=blob.name if kind == "git-sha1" else None)


def _resolve_fallback(s: ModelSpec) -> ResolvedModel:
    """Offline and not on disk: what the catalog (or the spec itself) says."""
    repo = s.build.repo_id if s.build else s.repo_id
    if s.build is not None:
        b = s.build
        files = (RemoteFile(b.filename, b.size_bytes),) if b.filename else ()
        return ResolvedModel(name=b.id, format=b.format, repo_id=repo, files=files, build=b, offline=True, spec=s.text)
    files = (RemoteFile(s.path),) if s.path else ()
    return ResolvedModel(name=s.text, format="gguf", repo_id=repo, files=files, offline=True, spec=s.text)


def resolve(spec: str | Build | ModelSpec, *, offline: bool = False) -> ResolvedModel:
    """What `spec` names. Online: the real file names, sizes and SHA-256 from the Hub's listing.
    Offline (or the Hub unreachable): the cache, then the catalog."""
    s = _parse(spec)
    if s.local is not None:
        return _resolve_on_disk(s)
    if not (offline or settings().offline):
        try:
            return _resolve_online(s)
        except HubUnreachable:
            pass
    return _resolve_on_disk(s) or _resolve_fallback(s)


def local_path(target: str | Build | ModelSpec | ResolvedModel) -> Path | None:
    """The model's path if it is complete on disk; never touches the network."""
    rm = _resolve_on_disk(_parse(target))
    return path_of(rm) if rm else None


def ensure(
    target: str | Build | ModelSpec | ResolvedModel,
    *,
    offline: bool = False,
    confirm: Confirm | None = None,
    progress: Progress | None = None,
    options: DownloadOptions | None = None,
    vet: fetcher.Vet | None = None,
) -> Path:
    """The local path of the verified model, downloading (with resume) what is missing.

    `vet(model, facts)` sees a GGUF's header (read over HTTP Range) before the download and may
    refuse it by raising.

    Offline (argument, settings, or the Hub unreachable) makes no network call and fails with
    OfflineError, listing what is on disk, when the model is not there."""
    offline = offline or settings().offline
    s = _parse(target)
    online_rm = target if isinstance(target, ResolvedModel) and target.commit and not target.offline else None
    on_disk = _resolve_on_disk(s) if online_rm is None else None
    if on_disk is not None:
        if on_disk.local is not None:
            return on_disk.local
        verify_present(on_disk, progress)
        return path_of(on_disk)
    if offline:
        raise _offline_error(s.text, "pocketchat is offline")
    try:
        rm = online_rm or _resolve_online(s)
    except HubUnreachable as exc:
        raise _offline_error(s.text, exc.message, hint=exc.hint if "answers are not" in exc.message else None) from None
    try:
        return fetcher.fetch_model(rm, confirm=confirm, progress=progress,
                                   options=options or DownloadOptions(), vet=vet)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or isinstance(exc, PocketchatError):
            raise
        where = settings().hf_cache_dir
        raise NotWritable(f"cannot write to the model cache {where}: {exc.strerror or exc}",
                          hint="Fix the folder's permissions, or set HF_HUB_CACHE to a folder you can "
                          "write to (on a disk with room for the model).") from None


def _offline_error(name: str, why: str, hint: str | None = None) -> OfflineError:
    have = [m.name for m in list_models()]
    listing = ", ".join(have) if have else "nothing yet"
    return OfflineError(
        f"{why}, and {name} is not on disk (on disk: {listing})",
        hint=hint or "Connect to the network and run `pocketchat download " + name + "`, or pick a model "
        "on disk with --model.",
    )


def remove(name: str) -> list[Path]:
    """Delete a model from disk (build id, REPO:QUANT, REPO/FILE, repo or listed path); return what went."""
    models = list_models()
    low = name.strip().lower()
    hits = [m for m in models if low in {(m.build_id or "").lower(), m.name.lower(), str(m.path).lower(),
                                         f"{m.repo_id}/{m.filename}".lower()}]
    if not hits:
        try:
            rm = _resolve_on_disk(_parse(name))
        except (ModelNotFound, LookupError):
            rm = None
        if rm is not None and rm.local is None:
            p = path_of(rm)
            hits = [m for m in models if m.path == p]
    removed: list[Path] = []
    for m in hits:
        removed += inventory.remove_model(m)
    for info in inventory.partials():
        b = inventory.build_for(info["repo_id"], info["path"], "gguf")
        if low in {(b.id.lower() if b else ""), f"{info['repo_id']}/{info['path']}".lower()}:
            removed += inventory.remove_partial(info)
    if not removed:
        have = ", ".join(m.name for m in models) or "nothing"
        raise ModelNotFound(f"no model {name!r} on disk (on disk: {have})",
                            hint="See what is on disk with `pocketchat models`.")
    return removed


