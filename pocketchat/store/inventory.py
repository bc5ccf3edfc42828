"""What is on disk: cached models, which catalog builds they are, removing them.

Reads the Hugging Face cache layout directly and never imports huggingface_hub, so
`downloaded_build_ids()` answers in milliseconds for `pocketchat --recommend`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from pocketchat.paths import settings
from pocketchat.store import cache, quant
from pocketchat.store.types import CachedModel
from pocketchat.types import Build


def _catalog() -> tuple[Build, ...]:
    from pocketchat.select import catalog

    return catalog.builds()


def build_for(repo_id: str, filename: str | None, fmt: str) -> Build | None:
    """The catalog build a file (or an MLX folder when filename is None) of a repo is, if any."""
    builds = [b for b in _catalog() if b.repo_id.lower() == repo_id.lower()]
    if fmt == "mlx":
        return next((b for b in builds if b.format == "mlx"), None)
    if not filename:
        return None
    base = filename.rsplit("/", 1)[-1].lower()
    gguf = [b for b in builds if b.format == "gguf"]
    for b in gguf:
        if b.filename and b.filename.lower() == base:
            return b
    for b in gguf:
        if b.id.lower() in base:
            return b
    by_quant = [b for b in gguf if quant.matches_quant(base, b.quant)]
    return by_quant[0] if len(by_quant) == 1 else None


def _repos() -> list[tuple[str, Path]]:
    root = settings().hf_cache_dir
    try:
        folders = sorted(d for d in root.iterdir() if d.is_dir() and d.name.startswith("models--"))
    except OSError:
        return []
    return [(rid, d) for d in folders if (rid := cache.repo_id_of(d))]


def _size(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def models_in_snapshot(repo_id: str, commit: str, folder: Path, *, check: bool = True) -> list[CachedModel]:
    """The complete GGUF models (split ones as one) and MLX folder a snapshot holds."""
    files = cache.snapshot_files(folder)
    out: list[CachedModel] = []
    groups = {k: v for k, v in quant.gguf_groups(files).items() if quant.split_complete(v)}
    for key, parts in groups.items():
        paths = [folder.joinpath(*p.split("/")) for p in parts]
        b = build_for(repo_id, key, "gguf")
        out.append(CachedModel(
            repo_id=repo_id, filename=parts[0], size_bytes=_size(paths), path=paths[0],
            verified=check and all(cache.is_verified(repo_id, cache.blob_of(p)) for p in paths),
            format="gguf", build_id=b.id if b else None, commit=commit, files=tuple(paths)))
    if not groups and any(f.endswith(".safetensors") for f in files):
        paths = [folder.joinpath(*p.split("/")) for p in files if quant.is_mlx_file(p)]
        b = build_for(repo_id, None, "mlx")
        out.append(CachedModel(
            repo_id=repo_id, filename="", size_bytes=_size(paths), path=folder,
            verified=check and all(cache.is_verified(repo_id, cache.blob_of(p)) for p in paths),
            format="mlx", build_id=b.id if b else None, commit=commit, files=tuple(paths)))
    return out


def list_models() -> list[CachedModel]:
    """Every model in the Hugging Face cache (newest snapshot of each file first)."""
    out: list[CachedModel] = []
    seen: set[tuple[str, str]] = set()
    for repo_id, _folder in _repos():
        for commit, snap in cache.snapshots(repo_id):
            for m in models_in_snapshot(repo_id, commit, snap):
                if (repo_id, m.filename) not in seen:
                    seen.add((repo_id, m.filename))
                    out.append(m)
    return out


def downloaded_build_ids() -> set[str]:
    """Ids of the catalog builds that are complete on disk (no hashing, no huggingface_hub)."""
    found: set[str] = set()
    for repo_id in {b.repo_id for b in _catalog()}:
        for commit, snap in cache.snapshots(repo_id):
            for m in models_in_snapshot(repo_id, commit, snap, check=False):
                if m.build_id:
                    found.add(m.build_id)
    return found


# --- partial downloads ----------------------------------------------------------------------


def _partial_note(repo_id: str, etag: str) -> Path:
    return settings().data_dir / "partials" / cache.repo_folder_name(repo_id) / f"{etag}.json"


def note_partial(repo_id: str, etag: str, path: str, size: int | None) -> None:
    """Remember which file a `blobs/<etag>.incomplete` is, so `models` can show and remove it."""
    note = _partial_note(repo_id, etag)
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(json.dumps({"repo_id": repo_id, "path": path, "size": size, "etag": etag}))


def forget_partial(repo_id: str, etag: str) -> None:
    try:
        _partial_note(repo_id, etag).unlink()
    except OSError:
        pass


def partials() -> list[dict]:
    """Kept partial downloads: repo_id, path, size, etag, bytes_done, file."""
    out = []
    root = settings().data_dir / "partials"
    for note in sorted(root.glob("*/*.json")) if root.is_dir() else []:
        try:
            info = json.loads(note.read_text())
        except (OSError, ValueError):
            continue
        part = cache.partial_path(info["repo_id"], info["etag"])
        if not part.exists():
            note.unlink(missing_ok=True)
            continue
        info["bytes_done"] = part.stat().st_size
        info["file"] = part
        out.append(info)
    return out


# --- removal --------------------------------------------------------------------------------


def _referenced(repo_id: str, blob: Path, skip: set[Path]) -> bool:
    for _commit, snap in cache.snapshots(repo_id):
        for dirpath, _d, names in os.walk(snap):
            for n in names:
                p = Path(dirpath) / n
                if p not in skip and p.is_symlink() and p.resolve() == blob:
                    return True
    return False


def remove_model(m: CachedModel) -> list[Path]:
    """Delete a model's snapshot entries and the blobs nothing else points at."""
    removed: list[Path] = []
    skip = set(m.files)
    for p in m.files:
        blob = cache.blob_of(p)
        p.unlink(missing_ok=True)
        removed.append(p)
        if blob != p and blob.exists() and not _referenced(m.repo_id, blob, skip):
            blob.unlink()
            removed.append(blob)
        cache.forget_verified(m.repo_id, blob.name)
    _prune(m.repo_id)
    return removed


def remove_partial(info: dict) -> list[Path]:
    info["file"].unlink(missing_ok=True)
    forget_partial(info["repo_id"], info["etag"])
    _prune(info["repo_id"])
    return [info["file"]]


def _prune(repo_id: str) -> None:
    """Drop empty snapshot folders, and the whole repo folder once it holds no file at all."""
    root = cache.repo_dir(repo_id)
    snaps = root / "snapshots"
    for dirpath, _dirs, _names in sorted(os.walk(snaps), key=lambda t: -len(t[0])) if snaps.is_dir() else []:
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
    blobs = root / "blobs"
    if not snaps.exists() and not (blobs.is_dir() and any(blobs.iterdir())):
        shutil.rmtree(root, ignore_errors=True)
