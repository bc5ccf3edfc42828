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
    while size is None or done < size:
        headers = dict(loc.headers)
        headers["Accept-Encoding"] = "identity"
        if done:
            headers["Range"] = f"bytes={done}-"
        last_report = 0.0
        try:
            with session.stream("GET", loc.url, headers=headers, timeout=timeout) as r:
                status = r.status_code
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
                        raise ChecksumMismatch(
                            f"the server sent more than the {size} bytes of {path}; nothing was kept",
                            hint="Run the command again; if it fails again the server is misbehaving.")
                    sink.add(chunk)
                    done += len(chunk)
                    failures = 0
                    now = time.monotonic()
                    if now - last_report >= options.report_interval_s:
                        report(done, "downloading", "")
                        last_report = now
                if size is None:
                    break
                if done < size:
                    raise _Retry("the connection closed early")
        except (_Retry, httpx2.TransportError) as exc:
            sink.drain()
            failures += 1
            reason = _reason(exc, options)
            if failures > options.max_retries:
                raise DownloadError(
                    f"download of {path} failed after {options.max_retries} retries ({reason}); "
                    f"{done / GB:.2f} GB are kept",
                ) from None
            wait = min(options.backoff_s * 2 ** (failures - 1), options.backoff_max_s)
            report(done, "retrying", f"{reason}; retrying in {wait:.3g} s ({failures}/{options.max_retries})")
            time.sleep(wait)


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
