"""Plain data the model store hands out: resolved models, download plans, progress, cache rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pocketchat.types import Build, Format

# "checking": the steps before a download is asked for (its header read over HTTP, the checks
# on it); `message` says which, the bytes count the header read.
Phase = Literal["checking", "downloading", "verifying", "waiting", "retrying", "done"]


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo: its path in the repo, size and the hash the Hub vouches for."""

    path: str
    size: int | None = None
    sha256: str | None = None  # LFS files: the SHA-256 of the content (also their ETag)
    blob_id: str | None = None  # git object id (SHA-1 of "blob <size>\\0" + content)

    @property
    def etag(self) -> str | None:
        """The name the Hugging Face cache gives this file's blob."""
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class ResolvedModel:
    """What a spec names: a repo, a commit and the files to fetch, or a local path."""

    name: str
    format: Format
    repo_id: str | None = None
    commit: str | None = None
    files: tuple[RemoteFile, ...] = ()
    build: Build | None = None
    local: Path | None = None
    offline: bool = False  # resolved without the Hub (catalog or cache): names may be guesses
    spec: str = ""  # what the user typed

    @property
    def size_bytes(self) -> int:
        if self.local is not None and self.local.is_file():
            return self.local.stat().st_size
        known = sum(f.size or 0 for f in self.files)
        if not known and self.build is not None:
            return self.build.size_bytes
        return known

    @property
    def primary(self) -> RemoteFile | None:
        """The file a backend opens (first shard of a split GGUF); None for an MLX folder."""
        if self.format == "mlx" or not self.files:
            return None
        return sorted(self.files, key=lambda f: f.path)[0]


@dataclass(frozen=True)
class DownloadPlan:
    """What `ensure` is about to download, shown to the user before it starts."""

    name: str
    repo_id: str
    files: tuple[RemoteFile, ...]
    total_bytes: int
    transfer_bytes: int  # total_bytes less what kept partial files already hold
    destination: Path
    free_bytes: int
    free_after_bytes: int

    @property
    def resumed_bytes(self) -> int:
        return self.total_bytes - self.transfer_bytes

    def question(self) -> str:
        """The question to ask before downloading: what, how big, where, free disk after."""
        what = f"{self.name} ({human_bytes(self.total_bytes)})"
        if self.resumed_bytes > 0:
            what += f", {human_bytes(self.transfer_bytes)} left to fetch"
        return f"Download {what} to {self.destination}? free disk after: {human_bytes(self.free_after_bytes)}"

    def __str__(self) -> str:
        return self.question()


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report; bytes are for the whole model (all its files)."""

    name: str
    filename: str
    phase: Phase
    bytes_done: int
    bytes_total: int
    speed_bps: float = 0.0
    eta_s: float | None = None
    file_index: int = 1
    file_count: int = 1
    message: str = ""

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 0.0

    @property
    def done(self) -> int:
        return self.bytes_done

    @property
    def total(self) -> int:
        return self.bytes_total


@dataclass(frozen=True)
class CachedModel:
    """One model on disk, as `pocketchat models` lists it."""

    repo_id: str
    filename: str  # the GGUF (first shard of a split one), or "" for an MLX folder
    size_bytes: int
    path: Path
    verified: bool
    format: Format = "gguf"
    build_id: str | None = None
    commit: str | None = None
    files: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        if self.build_id:
            return self.build_id
        return f"{self.repo_id}/{self.filename}" if self.filename else self.repo_id



_UNITS = (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000))


def human_bytes(n: float, *, like: float | None = None) -> str:
    """12.90 GB, 800.0 kB: decimal units, as disk and download sizes are quoted; with `like`, in
    the unit `like` would get (0.51 GB / 12.90 GB, never 512.0 MB / 12.90 GB on one line)."""
    scale = n if like is None else max(like, n)
    for unit, size in _UNITS:
        if scale >= size:
            return f"{n / size:.2f} {unit}" if unit == "GB" else f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
