"""A resolved model on disk: where its file or folder is, and its one-time hash check."""

from __future__ import annotations

from collections.abc import Callable

from pathlib import Path

from pocketchat.errors import ChecksumMismatch
from pocketchat.store import cache
from pocketchat.store.types import DownloadProgress, ResolvedModel


def path_of(rm: ResolvedModel) -> Path:
    """The model file (or MLX snapshot folder) of a resolved model."""
    if rm.local is not None:
        return rm.local
    if rm.format == "mlx":
        return cache.snapshot_dir(rm.repo_id, rm.commit)
    return cache.pointer_path(rm.repo_id, rm.commit, rm.primary.path)



def verify_present(rm: ResolvedModel, progress: Callable[[DownloadProgress], None] | None) -> None:
    """Hash, once, files on disk that were never verified (e.g. fetched by `hf download`)."""
    todo = []
    for f in rm.files:
        pointer = cache.pointer_path(rm.repo_id, rm.commit, f.path)
        blob = cache.blob_of(pointer)
        expected = (f.sha256 or f.blob_id or "").lower()
        kind = cache.digest_kind(expected)
        if kind and not cache.is_verified(rm.repo_id, blob):
            todo.append((f, blob, expected, kind))
    total = sum(b.stat().st_size for _f, b, _e, _k in todo)
    done = 0
    for f, blob, expected, kind in todo:
        def tick(n: int, f=f) -> None:
            nonlocal done
            done += n
            if progress:
                progress(DownloadProgress(rm.name, f.path, "verifying", done, total))
        got = cache.hash_file(blob, cache.Digest(kind, blob.stat().st_size), on_bytes=tick).hexdigest()
        if got != expected:
            raise ChecksumMismatch(
                f"{f.path} of {rm.repo_id} on disk is corrupt: its {kind} is {got}, expected {expected}",
                hint=f"Remove it with `pocketchat models rm {rm.name}` and download it again.",
            )
        cache.record_verified(rm.repo_id, blob, kind)
