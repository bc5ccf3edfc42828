"""Talking to the Hugging Face Hub through huggingface_hub: listings, file metadata, errors.

Endpoint and token come from `pocketchat.paths.settings()` and are passed to every call
explicitly: huggingface_hub reads its own constants once at import, and tests change the
environment per test.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from pocketchat.errors import (
    DownloadError,
    GatedRepo,
    HubUnreachable,
    ModelNotFound,
    PocketchatError,
    RepoNotFound,
)
from pocketchat.paths import settings
from pocketchat.store.types import RemoteFile

LISTING_TIMEOUT_S = 15.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Listing:
    """A repo at one commit: every file with its size and hash."""

    repo_id: str
    commit: str
    files: tuple[RemoteFile, ...]

    def get(self, path: str) -> RemoteFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


@dataclass(frozen=True)
class Location:
    """Where to GET a file's bytes and what the Hub says about it (from the HEAD on /resolve)."""

    url: str
    etag: str | None
    size: int | None
    commit: str | None
    headers: dict[str, str]


def list_repo(repo_id: str, revision: str = "main") -> Listing:
    """The repo's files with sizes and LFS SHA-256, and the commit `revision` points at."""
    from huggingface_hub import HfApi

    s = settings()
    try:
        info = HfApi(endpoint=s.hf_endpoint, token=s.hf_token).model_info(
            repo_id, revision=revision, files_metadata=True, timeout=LISTING_TIMEOUT_S
        )
    except Exception as exc:  # mapped to pocketchat's errors; anything unknown is re-raised
        raise translate(exc, repo_id) from exc
    files = tuple(
        RemoteFile(
            path=sib.rfilename,
            size=sib.lfs.size if sib.lfs else sib.size,
            sha256=sib.lfs.sha256 if sib.lfs else None,
            blob_id=sib.blob_id,
        )
        for sib in (info.siblings or [])
    )
    if not info.sha:
        raise not_the_hub(f"its listing of {repo_id} names no commit")
    return Listing(repo_id=repo_id, commit=info.sha, files=files)


def locate(repo_id: str, path: str, commit: str) -> Location:
    """HEAD the file's /resolve URL at a pinned commit: download URL (CDN or Hub), ETag, size."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    s = settings()
    url = hf_hub_url(repo_id, path, revision=commit, endpoint=s.hf_endpoint)
    try:
        meta = get_hf_file_metadata(
            url, token=s.hf_token, timeout=LISTING_TIMEOUT_S, endpoint=s.hf_endpoint, retry_on_errors=True
        )
    except Exception as exc:
        raise translate(exc, repo_id, path) from exc
    headers = build_hf_headers(token=s.hf_token)
    if _origin(meta.location) != _origin(s.hf_endpoint):
        headers.pop("authorization", None)  # a signed CDN URL: the token must not leave the Hub
    return Location(url=meta.location, etag=meta.etag, size=meta.size, commit=meta.commit_hash, headers=headers)


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlparse(url)
    return (u.scheme, (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme))


def is_unreachable(exc: BaseException) -> bool:
    """Whether an error means "no network / no Hub" rather than an answer from the Hub."""
    import httpx2
    from huggingface_hub.errors import OfflineModeIsEnabled

    return isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout,
                            OfflineModeIsEnabled, HubUnreachable))


NOT_THE_HUB_HINT = ("A captive portal (a Wi-Fi login page), a proxy or a wrong HF_ENDPOINT answers instead: "
                    "log in to the network or fix HF_ENDPOINT, or run with --offline to use only what is "
                    "on disk.")


def not_the_hub(detail: str) -> HubUnreachable:
    """The error for answers that do not come from the Hub (a captive portal, a proxy)."""
    return HubUnreachable(f"the Hub cannot be reached at {settings().hf_endpoint} (answers are not the "
                          f"Hub's: {detail})", hint=NOT_THE_HUB_HINT)


def from_the_hub(exc: BaseException) -> bool:
    """Whether an HTTP error response carries the Hub's own error headers (or JSON body)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    if any(k in headers for k in ("x-error-code", "x-error-message", "x-repo-commit", "x-request-id")):
        return True
    return "json" in str(headers.get("content-type", "")).lower()


def status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def translate(exc: BaseException, repo_id: str, path: str | None = None) -> BaseException:
    """One of pocketchat's errors for a huggingface_hub / httpx2 error; unknown ones unchanged."""
    import httpx2
    from huggingface_hub import errors as hf

    if isinstance(exc, PocketchatError):
        return exc
    s = settings()
    what = f"{repo_id}/{path}" if path else repo_id
    if is_unreachable(exc) or isinstance(exc, httpx2.TimeoutException):
        return HubUnreachable(f"cannot reach the Hugging Face Hub at {s.hf_endpoint} ({type(exc).__name__})")
    if isinstance(exc, httpx2.TransportError):
        return DownloadError(f"the connection to {s.hf_endpoint} failed while asking about {what}: {exc}")
    if isinstance(exc, ValueError) and not isinstance(exc, hf.HfHubHTTPError):  # JSONDecodeError
        return not_the_hub(f"an answer about {what} is not JSON")
    status = status_of(exc)
    if status in (401, 403, 404) and isinstance(exc, hf.HfHubHTTPError) and not from_the_hub(exc):
        return not_the_hub(f"HTTP {status} for {what} without the Hub's error headers")
    token_hint = (
        "Your HF_TOKEN has no access to it: accept the repo's terms on its page, or use another token."
        if s.hf_token
        else "Set HF_TOKEN to a Hugging Face token that has access (or run `hf auth login`)."
    )
    if isinstance(exc, hf.GatedRepoError):
        return GatedRepo(f"{repo_id} is gated: it needs a token of an account that accepted its terms",
                         hint=token_hint)
    if isinstance(exc, hf.RepositoryNotFoundError) or (isinstance(exc, hf.HfHubHTTPError) and status == 404
                                                       and path is None):
        if status in (401, 403):
            return GatedRepo(f"{repo_id} was not found, or it is private or gated (HTTP {status})",
                             hint=f"Check the name. {token_hint}")
        return RepoNotFound(f"no model repository {repo_id} on {s.hf_endpoint}",
                            hint="Check the name (OWNER/NAME, as on the model's Hub page).")
    if isinstance(exc, hf.RevisionNotFoundError):
        return ModelNotFound(f"{repo_id} has no such revision")
    if isinstance(exc, (hf.RemoteEntryNotFoundError, hf.EntryNotFoundError)) or (
        isinstance(exc, hf.HfHubHTTPError) and status == 404
    ):
        return ModelNotFound(f"{repo_id} has no file {path!r}" if path else f"{what} was not found",
                             hint=f"See the files with `pocketchat download {repo_id}` or on its Hub page.")
    if isinstance(exc, hf.HfHubHTTPError) and status in (401, 403):
        return GatedRepo(f"access to {what} was refused (HTTP {status}): it is gated or private",
                         hint=token_hint)
    if isinstance(exc, hf.HfHubHTTPError) and status in TRANSIENT_STATUS:
        return DownloadError(f"the Hub answered HTTP {status} for {what}; it may be busy or down",
                             hint="Try again in a few minutes.")
    if isinstance(exc, hf.HfHubHTTPError):
        return DownloadError(f"the Hub refused the request for {what}: HTTP {status}")
    return exc
