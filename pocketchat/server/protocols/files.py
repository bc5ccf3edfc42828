"""Files a request carries, read into the user message's `attachments` the same way for every
protocol: OpenAI's `file` parts, Anthropic's `document` blocks, the Responses API's
`input_file` parts. Each protocol's requests.py reads its own part and calls `from_base64` or
`from_text`; documents/ does the reading (what is accepted, its limits) and the engine puts
the files in the prompt, so a file's tokens are the same whichever protocol sent it.

A part the server cannot take (base64 that is not, a type it does not read, an empty file, an
encrypted or image-only PDF, one over the limits) is one 400 naming the part
(`messages[0].content[1]`) with the reason from `DocumentRefused`. Files come inside the JSON
body, so the body limit (endpoint.py's MAX_BODY_BYTES) is the first limit they meet: its 413
says what it leaves for a file.

When the files did not fit the context and passages were retrieved for the question, the
answer says so in a top-level `pocketchat` object (`retrieval_field`): never a silent cut.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import unquote_to_bytes

from pocketchat.documents import Attachment, from_bytes
from pocketchat.documents.extract import ACCEPTED, MAX_FILE_BYTES
from pocketchat.engines.types import Stats
from pocketchat.errors import ApiError, DocumentRefused
from pocketchat.server.protocols.validate import bad

FILE_NOTE = (f"Files go in a user message; pocketchat reads {ACCEPTED}, up to "
             f"{MAX_FILE_BYTES // 2**20} MiB each (and within the request body's limit).")
RETRIEVAL = {
    "type": "object",
    "description": "pocketchat's own: present when the files did not fit the context and "
                   "only the passages that answer the question were put in the prompt.",
    "required": ["retrieval", "sources"],
    "properties": {"retrieval": {"type": "string", "description": "What was read, in a line."},
                   "sources": {"type": "array", "items": {"type": "string"},
                               "description": "Each passage's place: \"report.pdf, page 3\"."}},
}


def decoded(value: str, where: str) -> tuple[bytes, str | None]:
    """A file's bytes sent as base64 or as a data: URL (base64 or percent-encoded), and the
    media type the URL names (None for bare base64)."""
    media = None
    text = value
    if text[:5].lower() == "data:":
        head, comma, text = text[5:].partition(",")
        if not comma:
            raise bad(f"the file in '{where}' is a data: URL without its ',' before the data",
                      where, "invalid_value")
        params = [p.strip().lower() for p in head.split(";")]
        media = params[0] or None
        if "base64" not in params[1:]:
            return unquote_to_bytes(text), media
    compact = "".join(text.split())
    if len(compact) * 3 // 4 > MAX_FILE_BYTES + 3:
        raise bad(f"the file in '{where}' is about {len(compact) * 3 / 4 / 2**20:.0f} MiB; files "
                  f"up to {MAX_FILE_BYTES // 2**20} MiB can be attached", where, "invalid_value")
    try:
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True), media
    except (binascii.Error, ValueError):
        raise bad(f"the file in '{where}' is not valid base64: send the file's bytes "
                  "base64-encoded, or as a data: URL", where, "invalid_value") from None


def from_base64(value: str, name: str | None, media_type: str | None, where: str) -> Attachment:
    """The file sent base64-encoded (or as a data: URL) in the part `where`."""
    data, named = decoded(value, where)
    return read(data, name, media_type or named, where)


def from_text(text: str, name: str | None, media_type: str | None, where: str) -> Attachment:
    """A file sent as text in the part `where`."""
    return read(text.encode("utf-8", "surrogatepass"), name, media_type or "text/plain", where)


def read(data: bytes, name: str | None, media_type: str | None, where: str) -> Attachment:
    try:
        return from_bytes(data, name or "file", media_type)
    except DocumentRefused as exc:
        raise refused(exc, where) from None


def refused(exc: DocumentRefused, where: str) -> ApiError:
    """A file documents/ refused, as the 400 that names the request part carrying it."""
    exc.part = where
    why = exc.message.removeprefix(f"{exc.name}: ") if exc.name else exc.message
    named = f" ({exc.name})" if exc.name else ""
    return bad(f"the file in '{where}'{named} {why}", where, exc.code)


def not_here(where: str, kind: str) -> ApiError:
    """A file part in a turn other than the user's."""
    return bad(f"'{where}' is a {kind} in a turn that is not the user's: files go in a user "
               "message", where, "invalid_value")


def retrieval_field(stats: Stats | None) -> dict[str, Any]:
    """`{"pocketchat": {"retrieval", "sources"}}` for a response's top level when the
    answer's prompt held retrieved passages of its files, else nothing."""
    if stats is None or not stats.retrieval:
        return {}
    return {"pocketchat": {"retrieval": stats.retrieval, "sources": list(stats.sources)}}
