"""A GGUF's header read from the Hub before the download: a few MB over HTTP Range, not the file.

The metadata and tensor infos sit at the start of a GGUF. `remote_facts` asks for the first
MiB, walks it, and asks for more only when the header runs on (a large vocabulary takes a few
MB), up to `MAX_HEADER_BYTES`. Each read is retried and resumed like a download's body, with
its stall timeout; the whole read has `header_timeout_s` (a header that trickles in is
stopped with the rate it came at) and reports its bytes as they arrive. What comes back is the
same `ModelFacts` a local file gives, so the plan and the checks before a download use one
estimate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from pocketchat.errors import CorruptModel, DownloadError
from pocketchat.modelfile.facts import ModelFacts, facts_of
from pocketchat.modelfile.gguf import HeaderShort, read_header
from pocketchat.store import hub
from pocketchat.store.download import DownloadOptions
from pocketchat.store.types import ResolvedModel

FIRST_READ_BYTES = 1024 * 1024
# Under 16 MB in all: POCKET's header (248k tokens and merges) is about 10 MB.
MAX_HEADER_BYTES = 15 * 1024 * 1024
# A smaller file costs no more to fetch than its header: it is checked once on disk instead.
CHECK_MIN_FILE_BYTES = 16 * 1024 * 1024
ALTERED_HINT = ("Nothing was downloaded. If the repository really holds a GGUF file there, the "
                "server or a proxy on the way may be altering the file: try again later or from "
                "another network.")


class _Transient(Exception):
    """A failure worth another request: a dropped connection, a stall, a 5xx."""


def read_range(loc: hub.Location, start: int, end: int, options: DownloadOptions | None = None,
               relocate: Callable[[], hub.Location] | None = None, *,
               on_bytes: Callable[[int], None] | None = None,
               deadline: Callable[[], None] | None = None) -> bytes:
    """Bytes [start, end) of the file at `loc` (fewer only at the end of the file).

    Retried like the body of a download (`options`: stall timeout, retries, backoff); a
    dropped or stalled connection resumes from the last byte received. `relocate` gives a
    fresh URL once when a signed one has expired (401/403/404). `on_bytes` hears the count
    received so far as it grows; `deadline` is called as bytes arrive and may raise."""
    import httpx2
    from huggingface_hub.utils import get_session

    options = options or DownloadOptions()
    timeout = httpx2.Timeout(options.stall_timeout_s, connect=options.connect_timeout_s)
    want = end - start
    out = bytearray()
    failures = 0
    while len(out) < want:
        if deadline is not None:
            deadline()
        at = start + len(out)
        headers = {**loc.headers, "Accept-Encoding": "identity", "Range": f"bytes={at}-{end - 1}"}
        before = len(out)
        try:
            with get_session().stream("GET", loc.url, headers=headers, timeout=timeout) as r:
                status = r.status_code
                if status == 416:  # nothing at or past `at`: the file ends there
                    break
                if status in hub.TRANSIENT_STATUS:
                    raise _Transient(f"the server answered HTTP {status}")
                if status in (401, 403, 404) and relocate is not None:
                    loc, relocate = relocate(), None
                    continue
                if status not in (200, 206):
                    raise DownloadError(f"the Hub answered HTTP {status} to a range request for {loc.url}")
                skip = at if status == 200 else 0  # a server that ignores Range sends from byte 0
                for chunk in r.iter_bytes():
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                    out += chunk[: want - len(out)]
                    failures = 0
                    if on_bytes is not None:
                        on_bytes(len(out))
                    if len(out) >= want:
                        break
                    if deadline is not None:
                        deadline()
            if len(out) == before:  # a complete answer with nothing new: the end of the file
                break
        except (_Transient, httpx2.TransportError) as exc:
            failures += 1
            reason = _reason(exc, options)
            if failures > options.max_retries:
                raise DownloadError(f"reading the model's header failed after {options.max_retries} "
                                    f"retries ({reason}); nothing was downloaded") from None
            time.sleep(min(options.backoff_s * 2 ** (failures - 1), options.backoff_max_s))
    return bytes(out)


def too_slow(rm: ResolvedModel, path: str, size: int, got: int, elapsed: float) -> DownloadError:
    """The error for a header that trickles in: what arrived, how fast, what the file would take."""
    rate = got / elapsed if elapsed > 0 else 0.0
    whole = f"; at that speed the {size / 1e9:.2f} GB file would take {_hours(size / rate)}" if rate else ""
    return DownloadError(
        f"reading the header of {path} from {rm.repo_id} took over {elapsed:.0f} s: "
        f"{got / 1e6:.2f} MB arrived ({rate / 1e3:.1f} kB/s){whole}. Nothing was downloaded",
        hint="Try again later or from a faster network. The header (a few MB) is read to check the "
             "model before any download.")


def _hours(seconds: float) -> str:
    if seconds >= 48 * 3600:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{seconds / 60:.0f} minutes"


def _reason(exc: BaseException, options: DownloadOptions) -> str:
    import httpx2

    if isinstance(exc, httpx2.TimeoutException) and not isinstance(exc, httpx2.ConnectTimeout):
        return f"stalled: no data for {options.stall_timeout_s:g} s"
    if isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout)):
        return "cannot connect"
    if isinstance(exc, _Transient):
        return str(exc)
    return f"connection lost ({type(exc).__name__})"


def remote_facts(rm: ResolvedModel, *, min_file_bytes: int = CHECK_MIN_FILE_BYTES,
                 options: DownloadOptions | None = None,
                 progress: Callable[[int, int], None] | None = None) -> ModelFacts | None:
    """The header facts of a resolved GGUF on the Hub; None for MLX folders, files smaller
    than `min_file_bytes`, or when unknown. `options`: the download's own (stall timeout,
    retries, `header_timeout_s` for the whole read: a DownloadError past it); `progress` hears
    (bytes read, bytes asked for so far) as they arrive; CorruptModel when what the server
    sends is not a GGUF header."""
    f = rm.primary
    if f is None or not rm.repo_id or not rm.commit or not f.path.lower().endswith(".gguf"):
        return None
    if sum(x.size or 0 for x in rm.files) < min_file_bytes:
        return None
    loc = hub.locate(rm.repo_id, f.path, rm.commit)
    size = f.size or loc.size
    if not size:
        return None

    def relocate() -> hub.Location:
        return hub.locate(rm.repo_id, f.path, rm.commit)

    options = options or DownloadOptions()
    started = time.monotonic()
    data = b""
    want = FIRST_READ_BYTES
    got = [0]  # bytes of the header received so far

    def deadline() -> None:
        elapsed = time.monotonic() - started
        if elapsed > options.header_timeout_s:
            raise too_slow(rm, f.path, size, got[0], elapsed)

    def heard(n: int, base: int) -> None:
        got[0] = base + n
        if progress is not None:
            progress(got[0], want)

    while True:
        want = min(want, size, MAX_HEADER_BYTES)
        if progress is not None:
            progress(len(data), want)
        if want > len(data):
            data += read_range(loc, len(data), want, options, relocate, deadline=deadline,
                               on_bytes=lambda n, base=len(data): heard(n, base))  # noqa: B008 - bound now
        try:
            info = read_header(data, f.path, size)
            break
        except HeaderShort:
            if want >= min(size, MAX_HEADER_BYTES) or len(data) < want:
                raise CorruptModel(f"{f.path} from {rm.repo_id}: its header is larger than "
                                   f"{MAX_HEADER_BYTES // 2**20} MiB or was cut short; not a model "
                                   "pocketchat can check before downloading", hint=ALTERED_HINT) from None
            want *= 2
        except CorruptModel as exc:  # not on disk: nothing to `models rm`
            raise CorruptModel(f"{f.path} from {rm.repo_id} is not a GGUF file as the server sends "
                               f"it: {exc.message}", hint=ALTERED_HINT) from None
    facts = facts_of(info)
    total = sum(x.size or 0 for x in rm.files)
    if len(rm.files) > 1 and total > facts.file_bytes:  # a split GGUF: its first part names its own tensors
        scale = (total - facts.header_bytes) / max(facts.weight_bytes, 1)
        facts = replace(facts, file_bytes=total, weight_bytes=int(facts.weight_bytes * scale),
                        expert_layer_bytes=tuple((i, int(b * scale)) for i, b in facts.expert_layer_bytes))
    return facts
