"""A thought carried by the client and back, opaque to it: Anthropic's thinking `signature`
and the Responses API's `encrypted_content`. The server keeps no state for it: the model's
reasoning is sealed into the token (compressed, base64, a version tag) and read back from it
on the next turn, so the template's history can hold it again. It is not encrypted: the
client can read its own model's reasoning anyway; the point is that the client treats it as
an opaque blob and sends it back unchanged."""

from __future__ import annotations

import base64
import binascii
import zlib

TAG = "pc1."


def seal(text: str) -> str:
    """`text` as an opaque token."""
    return TAG + base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")


def unseal(token: object) -> str | None:
    """The text a token from `seal` holds; None for any other value (another server's
    signature, a damaged token): such a thought is left out. The protocols refuse a damaged
    token of this server's (`damaged`), since the client changed what it should send back
    unchanged; another server's signature is no mistake (a client that changed servers)."""
    if not isinstance(token, str) or not token.startswith(TAG):
        return None
    try:
        return zlib.decompress(base64.urlsafe_b64decode(token[len(TAG):].encode("ascii")),
                               bufsize=1 << 16).decode("utf-8")
    except (binascii.Error, zlib.error, UnicodeError, ValueError):
        return None


def damaged(token: object) -> bool:
    """A token with this server's tag that does not read back (changed on the way)."""
    return isinstance(token, str) and token.startswith(TAG) and unseal(token) is None
