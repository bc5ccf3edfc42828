"""Text from a model, a file or a server, made safe to print: control characters shown, not obeyed.

A terminal obeys ESC sequences, carriage returns and the other C0/C1 control characters: a model's
answer (or a saved chat, a file name from a server, an error quoting either) holding
`\\x1b]0;TITLE\\x07` would retitle the window, `\\x1b[2J` would clear it. Everything pocketchat
prints passes through `visible()` first: each control character becomes its Unicode "control
picture" (ESC -> "␛", BEL -> "␇", DEL -> "␡") or, for the C1 range, a `\\x9b`-style escape. Newlines
and tabs stay; CRLF becomes a newline.
"""

from __future__ import annotations

import re

# C0 controls but \t and \n, DEL, the C1 controls, and the Unicode bidirectional overrides
# (which reorder what is shown without being visible).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _picture(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ .. ␟ (ESC -> ␛)
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character shown as a harmless picture; newlines and tabs kept."""
    if not text:
        return text
    text = text.replace("\r\n", "\n")
    return _UNSAFE.sub(_picture, text)


def one_line(text: str) -> str:
    """Like `visible`, and newlines and tabs too are shown as pictures (for one-line messages)."""
    if not text:
        return text
    return _UNSAFE_ONE_LINE.sub(_picture, text)


def pasted(text: str) -> str:
    """Pasted or typed-in text to keep: line ends made newlines, other control characters shown."""
    return visible(text.replace("\r\n", "\n").replace("\r", "\n"))


def is_safe(text: str) -> bool:
    """Whether `text` holds no character `visible()` would change (CRLF aside)."""
    return _UNSAFE.search(text.replace("\r\n", "\n")) is None
