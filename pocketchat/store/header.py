"""A GGUF's header read from the Hub before the download: a few MB over HTTP Range, not the file.

The metadata and tensor infos sit at the start of a GGUF. `remote_facts` asks for the first
MiB, walks it, and asks for more only when the header runs on (a large vocabulary takes a few
MB), up to `MAX_HEADER_BYTES`. What comes back is the same `ModelFacts` a local file gives, so
the plan and the checks before a download use one estimate.
"""

from __future__ import annotations

from dataclasses import replace

from pocketchat.errors import CorruptModel, DownloadError
from pocketchat.modelfile.facts import ModelFacts, facts_of
from pocketchat.modelfile.gguf import HeaderShort, read_header
from pocketchat.store import hub
from pocketchat.store.types import ResolvedModel

FIRST_READ_BYTES = 1024 * 1024
# Under 16 MB in all: POCKET's header (248k tokens and merges) is about 10 MB.
MAX_HEADER_BYTES = 15 * 1024 * 1024
READ_TIMEOUT_S = 30.0
# A smaller file costs no more to fetch than its header: it is checked once on disk instead.
CHECK_MIN_FILE_BYTES = 16 * 1024 * 1024


def read_range(loc: hub.Location, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file at `loc` (fewer at the end of the file)."""
    import httpx2
    from huggingface_hub.utils import get_session

    headers = dict(loc.headers)
    headers["Accept-Encoding"] = "identity"
    headers["Range"] = f"bytes={start}-{end - 1}"
    try:
        with get_session().stream("GET", loc.url, headers=headers, timeout=READ_TIMEOUT_S) as r:
            if r.status_code == 416:
                return b""
            if r.status_code not in (200, 206):
                raise DownloadError(f"the Hub answered HTTP {r.status_code} to a range request for {loc.url}")
            out = bytearray()
            for chunk in r.iter_bytes():  # a server that ignores Range (200) is cut short here
                out += chunk
                if len(out) >= end - start:
                    break
            return bytes(out[: end - start]) if r.status_code == 200 and start == 0 else bytes(out)
    except httpx2.TransportError as exc:
        raise DownloadError(f"reading the model's header failed: {exc}") from None


def remote_facts(rm: ResolvedModel, *, min_file_bytes: int = CHECK_MIN_FILE_BYTES) -> ModelFacts | None:
    """The header facts of a resolved GGUF on the Hub; None for MLX folders, files smaller
    than `min_file_bytes`, or when unknown."""
    f = rm.primary
    if f is None or not rm.repo_id or not rm.commit or not f.path.lower().endswith(".gguf"):
        return None
    if sum(x.size or 0 for x in rm.files) < min_file_bytes:
        return None
    loc = hub.locate(rm.repo_id, f.path, rm.commit)
    size = f.size or loc.size
    if not size:
        return None
    data = b""
    want = FIRST_READ_BYTES
    while True:
        want = min(want, size, MAX_HEADER_BYTES)
        if want > len(data):
            data += read_range(loc, len(data), want)
        try:
            info = read_header(data, f.path, size)
            break
        except HeaderShort:
            if want >= min(size, MAX_HEADER_BYTES) or len(data) < want:
                raise CorruptModel(f"{f.path}: its header is larger than {MAX_HEADER_BYTES // 2**20} MiB "
                                   "or was cut short; not a model pocketchat can check before downloading")
            want *= 2
    facts = facts_of(info)
    total = sum(x.size or 0 for x in rm.files)
    if len(rm.files) > 1 and total > facts.file_bytes:  # a split GGUF: its first part names its own tensors
        scale = (total - facts.header_bytes) / max(facts.weight_bytes, 1)
        facts = replace(facts, file_bytes=total, weight_bytes=int(facts.weight_bytes * scale),
                        expert_layer_bytes=tuple((i, int(b * scale)) for i, b in facts.expert_layer_bytes))
    return facts
