"""One file from the Hub into the cache: resumable, retried, stall-proof, verified.

The bytes go to `blobs/<etag>.incomplete`, a name that is the same for every run, so a later run
(or the same one, after a dropped connection) continues with an HTTP Range request. The content
is hashed as it arrives; only a file whose hash equals the Hub's is renamed to `blobs/<etag>`.
A file lock (the one huggingface_hub takes too) keeps two processes off the same blob.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pocketchat.errors import (
    ChecksumMismatch,
    DownloadError,
    DownloadInterrupted,
)
from pocketchat.store import cache, hub
from pocketchat.store.sink import Sink
from pocketchat.store.types import RemoteFile

GB = 1000**3
SAME_END_LIMIT = 3  # bodies in a row that end at the same byte of the file: the file ends there
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class DownloadOptions:
    """Knobs of the transfer; the defaults suit a home connection."""

    stall_timeout_s: float = 30.0  # no byte for this long: drop the connection and reconnect
    connect_timeout_s: float = 15.0
    max_retries: int = 8  # consecutive failures without a byte of progress
    backoff_s: float = 1.0  # first wait; doubles each retry
    backoff_max_s: float = 30.0
    report_interval_s: float = 0.1
    header_timeout_s: float = 120.0  # the header read before a download, all of it (a few MB)


# Called with (bytes of this file on disk now, phase, message).
Report = Callable[[int, str, str], None]


class _Retry(Exception):
    """A transient failure worth another attempt (dropped connection, stall, 5xx)."""


def _open_partial(path: Path):
    """The partial file, opened for appending (a seam tests use to fake a full disk)."""
    return open(path, "ab", buffering=0)


def fetch(repo_id: str, commit: str, remote: RemoteFile, *, options: DownloadOptions, report: Report) -> Path:
    """Download `remote` at `commit` into the cache (unless its blob is there) and return the blob."""
    import filelock

    etag = remote.etag
    if etag is None:  # listing without hashes: ask the file itself
        etag = hub.locate(repo_id, remote.path, commit).etag or f"nohash-{commit}-{remote.path.replace('/', '_')}"
    blob = cache.blob_path(repo_id, etag)
    if blob.exists():
        return blob
    lock_file = cache.lock_path(repo_id, etag)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_file), mode=0o664)
    waited = False
    while True:
        try:
            lock.acquire(timeout=0.5)
            break
        except NotImplementedError:  # no flock on this filesystem (some network mounts)
            lock = filelock.SoftFileLock(str(lock_file))
        except filelock.Timeout:
            if not waited:
                report(_size(cache.partial_path(repo_id, etag)), "waiting",
                       "another process is downloading this file; waiting for it")
                waited = True
    try:
        if blob.exists():  # the other process finished it
            return blob
        _download_blob(repo_id, commit, remote, etag, blob, options, report)
        return blob
    finally:
        lock.release()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _download_blob(repo_id: str, commit: str, remote: RemoteFile, etag: str, blob: Path,
                   options: DownloadOptions, report: Report) -> None:
    loc = hub.locate(repo_id, remote.path, commit)
    size = remote.size if remote.size is not None else loc.size
    # The listing's LFS sha256, else its git blob id, else the ETag: what the Hub vouches for.
    expected = (remote.sha256 or remote.blob_id or loc.etag or "").lower()
    kind = cache.digest_kind(expected)
    partial = cache.partial_path(repo_id, etag)
    partial.parent.mkdir(parents=True, exist_ok=True)
    digest = cache.Digest(kind, size)
    have = _size(partial)
    if size is not None and have > size:  # longer than the file: not ours to trust
        partial.unlink()
        have = 0
    try:
        if have:
            report(0, "verifying", f"checking the {have / GB:.2f} GB already downloaded")
            cache.hash_file(partial, digest, limit=have)
        _transfer(loc, partial, size, digest, options, report, repo_id, remote.path, commit)
    except KeyboardInterrupt:
        done = _size(partial)
        pct = f" at {100 * done / size:.0f}%" if size else ""
        raise DownloadInterrupted(
            f"download of {remote.path} stopped{pct} ({done / GB:.2f} of {(size or 0) / GB:.2f} GB); "
            "the partial file is kept and the next run resumes from there",
            hint=f"Run the same command again to resume (partial: {partial}).",
        ) from None
    got = digest.hexdigest()
    if kind is not None and got != expected:
        partial.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{remote.path} from {repo_id} arrived corrupt: its {kind} is {got}, the Hub says {expected}; "
            "it was deleted and not used",
            hint="Run the command again to download it afresh; if it fails again the server or a proxy "
                 "is altering the file.",
        )
    with open(partial, "rb+") as f:
        os.fsync(f.fileno())
    os.chmod(partial, 0o644)
    os.replace(partial, blob)
    if kind is not None:
        cache.record_verified(repo_id, blob, kind)


def _transfer(loc: hub.Location, partial: Path, size: int | None, digest: cache.Digest,
              options: DownloadOptions, report: Report, repo_id: str, path: str, commit: str) -> None:
    """GET the bytes from where the partial stops to the end, reconnecting until done."""
    import httpx2
    from huggingface_hub.utils import get_session

    session = get_session()
    timeout = httpx2.Timeout(options.stall_timeout_s, connect=options.connect_timeout_s)
    with _open_partial(partial) as f:
        sink = Sink(f, digest, partial, size)
        try:
            _receive(session, loc, sink, size, digest, options, report, repo_id, path, commit, timeout)
        except ChecksumMismatch:
            sink.close(flush=False)
            f.close()
            partial.unlink(missing_ok=True)
            raise
        finally:
            sink.close()  # keeps every byte received, also on Ctrl-C
    report(sink.written, "downloading", "")


def _receive(session, loc, sink: Sink, size, digest, options, report, repo_id, path, commit, timeout) -> None:
    import httpx2

    failures = 0
    refreshed = False
    done = sink.written
    # Attempts in a row whose body, promised to run on, ended at the byte where `done` is now.
    # A network cuts at random places; a body that ends at the same byte of the file each time
    # is a host whose file is shorter than it says, and no retry or resume gets past it.
    ended_here = 0
    while size is None or done < size:
        headers = dict(loc.headers)
        headers["Accept-Encoding"] = "identity"
        if done:
            headers["Range"] = f"bytes={done}-"
        last_report = 0.0
        started, promised = done, False
        try:
            with session.stream("GET", loc.url, headers=headers, timeout=timeout) as r:
                status = r.status_code
                promised = status in (200, 206)
                served = _served_size(r)
                if size is not None and served is not None and served != size:
                    raise _size_lie(path, repo_id, size, served)
                if status == 416 and size is not None and done >= size:
                    break
                if status in hub.TRANSIENT_STATUS:
                    raise _Retry(f"the server answered HTTP {status}")
                if status in (401, 403, 404) and not refreshed and loc.url != _resolve_url(repo_id, path, commit):
                    # A signed CDN URL that expired: ask the Hub for a fresh one, once.
                    refreshed = True
                    loc = hub.locate(repo_id, path, commit)
                    continue
                if status >= 400:
                    r.read()
                    from huggingface_hub.utils import hf_raise_for_status

                    try:
                        hf_raise_for_status(r)
                    except Exception as exc:
                        raise hub.translate(exc, repo_id, path) from None
                if done and status == 200:  # the server ignored Range: start over
                    sink.restart()
                    done = 0
                elif done and status == 206:
                    m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
                    if not m or int(m.group(1)) != done:
                        raise DownloadError(f"the server sent range {r.headers.get('Content-Range')!r} "
                                            f"for a request from byte {done}")
                for chunk in r.iter_bytes():  # as it arrives: a drop loses nothing received
                    if size is not None and done + len(chunk) > size:
                        raise _size_lie(path, repo_id, size, None)
                    sink.add(chunk)
                    done += len(chunk)
                    failures = 0
                    now = time.monotonic()
                    if now - last_report >= options.report_interval_s:
                        report(done, "downloading", "")
                        last_report = now
                if size is None:
                    break
                if done < size and status == 200 and _framed(r):
                    # the whole file, delimited by the server itself, and shorter than listed
                    raise _size_lie(path, repo_id, size, done)
                if done < size:
                    raise _Retry("the connection closed early")
        except (_Retry, httpx2.TransportError) as exc:
            sink.drain()
            failures += 1
            reason = _reason(exc, options)
            if promised:
                ended_here = ended_here + 1 if done == started else 1
                if ended_here >= SAME_END_LIMIT and size is not None and done > 0:
                    raise _size_lie(path, repo_id, size, done, every_time=ended_here) from None
            if failures > options.max_retries:
                raise DownloadError(
                    f"download of {path} failed after {options.max_retries} retries ({reason}); "
                    f"{done / GB:.2f} GB are kept",
                ) from None
            wait = min(options.backoff_s * 2 ** (failures - 1), options.backoff_max_s)
            report(done, "retrying", f"{reason}; retrying in {wait:.3g} s ({failures}/{options.max_retries})")
            time.sleep(wait)


def _served_size(r) -> int | None:
    """The size of the whole file as this response states it (Content-Range's total; a full
    200's Content-Length); None when it does not say."""
    m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
    if m and m.group(3) != "*":
        return int(m.group(3))
    m = re.match(r"bytes\s+\*/(\d+)", r.headers.get("Content-Range", ""))
    if m:  # a 416's "bytes */SIZE"
        return int(m.group(1))
    length = r.headers.get("Content-Length", "")
    if r.status_code == 200 and length.isdigit() and not r.headers.get("Content-Encoding"):
        return int(length)
    return None


def _framed(r) -> bool:
    """Whether the server itself marks where the body ends (a length or chunks), so a body that
    ended cleanly was ended by the server, not cut by the network."""
    return ("Content-Length" in r.headers
            or "chunked" in r.headers.get("Transfer-Encoding", "").lower())


def _size_lie(path: str, repo_id: str, listed: int, served: int | None,
              every_time: int = 0) -> ChecksumMismatch:
    """A host serving a file of another size than the Hub lists: resuming cannot complete it
    (every retry meets the same file), so the download stops at once and keeps nothing."""
    what = f"a file of {served} bytes" if served is not None else "more bytes than that"
    if every_time:
        what = f"only its first {served} bytes ({every_time} times in a row it stopped at that byte)"
    return ChecksumMismatch(
        f"{path} from {repo_id}: the Hub lists it as {listed} bytes, but the server sends {what}; "
        "it is not the file the repository lists, so it cannot be completed or resumed. Nothing "
        "was kept",
        hint="Try again later (the repository may be being updated) or from another network (a "
             "proxy may be cutting or changing the file); the download then starts afresh. If it "
             "keeps happening, the repository's file is broken: tell its owner.")


def _resolve_url(repo_id: str, path: str, commit: str) -> str:
    from huggingface_hub import hf_hub_url

    from pocketchat.paths import settings

    return hf_hub_url(repo_id, path, revision=commit, endpoint=settings().hf_endpoint)


def _reason(exc: BaseException, options: DownloadOptions) -> str:
    import httpx2

    if isinstance(exc, httpx2.ReadTimeout):
        return f"stalled: no data for {options.stall_timeout_s:g} s"
    if isinstance(exc, httpx2.ConnectError):
        return "cannot connect"
    if isinstance(exc, _Retry):
        return str(exc)
    return f"connection lost ({type(exc).__name__})"
