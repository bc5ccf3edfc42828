"""The Hugging Face cache layout on disk, read and written without importing huggingface_hub.

    <hf_cache>/models--OWNER--NAME/refs/main                 commit id of main
    <hf_cache>/models--OWNER--NAME/blobs/<etag>              file content (etag = LFS sha256 or git sha1)
    <hf_cache>/models--OWNER--NAME/blobs/<etag>.incomplete   pocketchat's kept partial download
    <hf_cache>/models--OWNER--NAME/snapshots/<commit>/<path> relative symlink to ../../blobs/<etag>
    <hf_cache>/.locks/models--OWNER--NAME/<etag>.lock        the lock huggingface_hub takes too

This is the layout `hf download` and `hf_hub_download` write, so a file either of them fetched is
found here, and one pocketchat fetched is found by them. Verification records live in pocketchat's
data dir (`verified/<repo folder>/<etag>.json`), keyed by the blob's size and mtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from pocketchat.paths import settings

HASH_CHUNK = 8 * 1024 * 1024
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")


def repo_folder_name(repo_id: str) -> str:
    return "--".join(["models", *repo_id.split("/")])


def repo_dir(repo_id: str) -> Path:
    return settings().hf_cache_dir / repo_folder_name(repo_id)


def repo_id_of(folder: Path) -> str | None:
    """`models--a--b` -> `a/b`; None for datasets, spaces and anything else."""
    parts = folder.name.split("--")
    if len(parts) < 3 or parts[0] != "models":
        return None
    return "/".join(parts[1:])


def read_ref(repo_id: str, ref: str = "main") -> str | None:
    try:
        return (repo_dir(repo_id) / "refs" / ref).read_text().strip() or None
    except OSError:
        return None


def write_ref(repo_id: str, commit: str, ref: str = "main") -> None:
    """Point a ref at a commit, atomically (readers never see half a file)."""
    if ref == commit:
        return
    path = repo_dir(repo_id) / "refs" / ref
    if read_ref(repo_id, ref) == commit:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(commit)
    os.replace(tmp, path)


def snapshot_dir(repo_id: str, commit: str) -> Path:
    return repo_dir(repo_id) / "snapshots" / commit


def pointer_path(repo_id: str, commit: str, path: str) -> Path:
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"unsafe file name in repo {repo_id}: {path!r}")
    return snapshot_dir(repo_id, commit).joinpath(*parts)


def blob_path(repo_id: str, etag: str) -> Path:
    return repo_dir(repo_id) / "blobs" / etag


def partial_path(repo_id: str, etag: str) -> Path:
    return repo_dir(repo_id) / "blobs" / f"{etag}.incomplete"


def lock_path(repo_id: str, etag: str) -> Path:
    return settings().hf_cache_dir / ".locks" / repo_folder_name(repo_id) / f"{etag}.lock"


def snapshots(repo_id: str) -> list[tuple[str, Path]]:
    """Local snapshots of a repo, the one `refs/main` names first, then newest first."""
    root = repo_dir(repo_id) / "snapshots"
    try:
        dirs = [d for d in root.iterdir() if d.is_dir()]
    except OSError:
        return []
    main = read_ref(repo_id)
    dirs.sort(key=lambda d: (d.name != main, -_mtime(d)))
    return [(d.name, d) for d in dirs]


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def snapshot_files(folder: Path) -> list[str]:
    """Repo paths of the complete files in a snapshot (broken links skipped)."""
    out: list[str] = []
    for dirpath, _dirs, names in os.walk(folder):
        for n in names:
            full = Path(dirpath) / n
            if full.is_file():  # follows the symlink: a dangling pointer is not a file
                out.append(full.relative_to(folder).as_posix())
    return sorted(out)


def link_pointer(blob: Path, pointer: Path) -> None:
    """Make the snapshot entry for a blob: a relative symlink, else a hard link, else a copy."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        if pointer.resolve() == blob.resolve():
            return
        pointer.unlink()
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
        return
    except OSError:
        pass
    try:
        os.link(blob, pointer)
    except OSError:
        shutil.copyfile(blob, pointer)


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the volume that holds `path` (or its nearest existing parent)."""
    for p in [path, *path.parents]:
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return 0


# --- hashes ---------------------------------------------------------------------------------


def digest_kind(etag: str | None) -> str | None:
    """`sha256` for an LFS etag, `git-sha1` for a git blob id, None when it is neither."""
    if not etag:
        return None
    etag = etag.lower()
    if _SHA256.match(etag):
        return "sha256"
    if _SHA1.match(etag):
        return "git-sha1"
    return None


class Digest:
    """Incremental hash of a file's content in the form the Hub vouches for."""

    def __init__(self, kind: str | None, size: int | None) -> None:
        self.kind = kind
        self.size = size
        self.reset()

    def reset(self) -> None:
        if self.kind == "sha256":
            self._h = hashlib.sha256()
        elif self.kind == "git-sha1":
            self._h = hashlib.sha1()
            self._h.update(b"blob %d\0" % (self.size or 0))
        else:
            self._h = None

    def update(self, data: bytes | memoryview) -> None:
        if self._h is not None:
            self._h.update(data)

    def hexdigest(self) -> str | None:
        return self._h.hexdigest() if self._h is not None else None


def hash_file(
    path: Path, digest: Digest, *, on_bytes: Callable[[int], None] | None = None, limit: int | None = None
) -> Digest:
    """Feed a file (or its first `limit` bytes) into a digest, reporting bytes read."""
    remaining = limit
    with open(path, "rb") as f:
        while remaining is None or remaining > 0:
            want = HASH_CHUNK if remaining is None else min(HASH_CHUNK, remaining)
            chunk = f.read(want)
            if not chunk:
                break
            digest.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    return digest


# --- verification records -------------------------------------------------------------------


def _marker(repo_id: str, etag: str) -> Path:
    return settings().data_dir / "verified" / repo_folder_name(repo_id) / f"{etag}.json"


def _stamp(blob: Path) -> dict[str, int]:
    st = blob.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def is_verified(repo_id: str, blob: Path) -> bool:
    """Whether this blob was hashed and matched its name, and has not changed since."""
    try:
        record = json.loads(_marker(repo_id, blob.name).read_text())
        return record.get("stamp") == _stamp(blob) and record.get("digest") == blob.name
    except (OSError, ValueError, AttributeError):
        return False


def record_verified(repo_id: str, blob: Path, kind: str) -> None:
    marker = _marker(repo_id, blob.name)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"digest": blob.name, "kind": kind, "stamp": _stamp(blob),
                               "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    os.replace(tmp, marker)


def forget_verified(repo_id: str, etag: str) -> None:
    try:
        _marker(repo_id, etag).unlink()
    except OSError:
        pass


def blob_of(pointer: Path) -> Path:
    """The blob a snapshot entry points at (the entry itself when it is a plain copy)."""
    return pointer.resolve() if pointer.is_symlink() else pointer
