"""Downloading a resolved model: disk check, the user's go-ahead, each file, then the snapshot."""

from __future__ import annotations

from pathlib import Path

from pocketchat.errors import DownloadDeclined
from pocketchat.runtime import cache, download, inventory
from pocketchat.runtime.download import DownloadOptions
from pocketchat.runtime.store_types import DownloadPlan, ResolvedModel, human_bytes


def _partial_bytes(repo_id: str, etag: str | None, size: int | None) -> int:
    if not etag:
        return 0
    try:
        have = cache.partial_path(repo_id, etag).stat().st_size
    except OSError:
        return 0
    return min(have, size) if size is not None else have


def fetch_model(rm: ResolvedModel, *, confirm, progress, options: DownloadOptions) -> Path:
    """Fetch the files of an online-resolved model that are not on disk; return its path."""
    from pocketchat.runtime import store

    repo, commit = rm.repo_id, rm.commit
    missing = [f for f in rm.files if not cache.pointer_path(repo, commit, f.path).is_file()]
    to_fetch = [f for f in missing if not (f.etag and cache.blob_path(repo, f.etag).exists())]
    total = sum(f.size or 0 for f in rm.files)
    if to_fetch:
        fetch_total = sum(f.size or 0 for f in to_fetch)
        need = fetch_total - sum(_partial_bytes(repo, f.etag, f.size) for f in to_fetch)
        free, free_after = store.check_disk(rm, need)
        plan = DownloadPlan(name=rm.name, repo_id=repo, files=tuple(to_fetch), total_bytes=fetch_total,
                            transfer_bytes=need, destination=cache.repo_dir(repo), free_bytes=free,
                            free_after_bytes=free_after)
        if confirm is not None and not confirm(plan):
            raise DownloadDeclined(f"nothing was downloaded: {rm.name} ({human_bytes(fetch_total)}) was not "
                                   "confirmed", hint="Pass --yes to download without asking.")
    meter = store.ProgressMeter(rm.name, total, progress, len(rm.files))
    present = [f for f in rm.files if f not in missing]
    meter.base = sum(f.size or 0 for f in present)
    for index, f in enumerate(missing, start=1):
        def report(nbytes: int, phase: str, message: str, f=f, index=index) -> None:
            meter.emit(f.path, index, nbytes, phase, message)

        if f.etag:
            inventory.note_partial(repo, f.etag, f.path, f.size)
        blob = download.fetch(repo, commit, f, options=options, report=report)
        if f.etag:
            inventory.forget_partial(repo, f.etag)
        cache.link_pointer(blob, cache.pointer_path(repo, commit, f.path))
        meter.base += f.size or blob.stat().st_size
        meter.emit(f.path, index, 0, "done")
    cache.write_ref(repo, commit)
    # Files already there (fetched by `hf download`, or another snapshot) are hashed once.
    store._verify_present(rm, progress)
    return store._path_of(rm)
