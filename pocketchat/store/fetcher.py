"""Downloading a resolved model: disk check, the user's go-ahead, each file, then the snapshot."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pocketchat.errors import DiskFull, DownloadDeclined
from pocketchat.paths import settings
from pocketchat.store import cache, download, inventory
from pocketchat.store.download import DownloadOptions
from pocketchat.store.ondisk import path_of, verify_present
from pocketchat.store.types import DownloadPlan, DownloadProgress, ResolvedModel, human_bytes
from pocketchat.types import GB, MiB

if TYPE_CHECKING:
    from pocketchat.modelfile.facts import ModelFacts

Progress = Callable[[DownloadProgress], None]
# What `progress` hears (phase "checking") before a download is asked for.
HEADER_STEP = "reading its header from the Hub"
VET_STEP = "checking that this llama.cpp can load it and that it fits this machine"
# Called with the model and its header's facts (read over HTTP Range) before any byte of the
# file is fetched; raises to refuse the download (unknown architecture, does not fit).
Vet = Callable[[ResolvedModel, "ModelFacts"], None]


def _partial_bytes(repo_id: str, etag: str | None, size: int | None) -> int:
    if not etag:
        return 0
    try:
        have = cache.partial_path(repo_id, etag).stat().st_size
    except OSError:
        return 0
    return min(have, size) if size is not None else have


def fetch_model(rm: ResolvedModel, *, confirm, progress, options: DownloadOptions,
                vet: Vet | None = None) -> Path:
    """Fetch the files of an online-resolved model that are not on disk; return its path.

    With `vet`, a GGUF's header is read first (a few MB) and `vet` may refuse the download."""
    repo, commit = rm.repo_id, rm.commit
    missing = [f for f in rm.files if not cache.pointer_path(repo, commit, f.path).is_file()]
    to_fetch = [f for f in missing if not (f.etag and cache.blob_path(repo, f.etag).exists())]
    total = sum(f.size or 0 for f in rm.files)
    if to_fetch and vet is not None:
        from pocketchat.store.header import remote_facts

        def checking(message: str, done: int = 0, want: int = 0) -> None:
            if progress is not None:  # the steps before the question are never silent
                progress(DownloadProgress(rm.name, rm.primary.path if rm.primary else rm.name,
                                          "checking", done, want, message=message))

        facts = remote_facts(rm, options=options,
                             progress=lambda done, want: checking(HEADER_STEP, done, want))
        if facts is not None:
            checking(VET_STEP)
            vet(rm, facts)
    if to_fetch:
        fetch_total = sum(f.size or 0 for f in to_fetch)
        need = fetch_total - sum(_partial_bytes(repo, f.etag, f.size) for f in to_fetch)
        free, free_after = check_disk(rm, need)
        plan = DownloadPlan(name=rm.name, repo_id=repo, files=tuple(to_fetch), total_bytes=fetch_total,
                            transfer_bytes=need, destination=cache.repo_dir(repo), free_bytes=free,
                            free_after_bytes=free_after)
        if confirm is not None and not confirm(plan):
            raise DownloadDeclined(f"Not downloading {rm.name} ({human_bytes(fetch_total)}); nothing was "
                                   "downloaded.", hint="Run again and answer yes, or pass --yes to download "
                                   "without asking.")
    meter = ProgressMeter(rm.name, total, progress, len(rm.files))
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
    verify_present(rm, progress)
    return path_of(rm)


def disk_margin(nbytes: int) -> int:
    """Free space to keep beyond a download: 5% of it, at least 64 MiB, at most 2 GB."""
    return int(max(64 * MiB, min(2 * GB, nbytes * 0.05)))


def check_disk(rm: ResolvedModel, need: int) -> tuple[int, int]:
    """(free bytes, free after) for a download of `need` bytes; DiskFull when it does not fit."""
    where = settings().hf_cache_dir
    free = cache.free_disk_bytes(where)
    margin = disk_margin(need)
    if free < need + margin:
        raise DiskFull(
            f"not enough free disk for {rm.name}: it needs {need / GB:.2f} GB plus a {margin / GB:.2f} GB "
            f"margin in {where}, and {free / GB:.2f} GB are free",
            hint=f"Free at least {(need + margin - free) / GB:.2f} GB, or set HF_HUB_CACHE to a folder "
            "on a larger disk.",
        )
    return free, free - need


class ProgressMeter:
    """Turns byte counts into DownloadProgress with speed (last ~5 s) and ETA."""

    def __init__(self, name: str, total: int, sink: Progress | None, file_count: int) -> None:
        self.name, self.total, self.sink, self.file_count = name, total, sink, file_count
        self.base = 0
        self._samples: deque[tuple[float, int]] = deque()

    def emit(self, filename: str, index: int, file_bytes: int, phase: str, message: str = "") -> None:
        if self.sink is None:
            return
        done = self.base + file_bytes
        now = time.monotonic()
        if phase == "downloading":
            self._samples.append((now, done))
            while len(self._samples) > 2 and now - self._samples[0][0] > 5.0:
                self._samples.popleft()
        speed = 0.0
        if len(self._samples) >= 2:
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
            speed = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
        eta = (self.total - done) / speed if speed > 0 else None
        self.sink(DownloadProgress(self.name, filename, phase, done, self.total, speed, eta,
                                   index, self.file_count, message))
