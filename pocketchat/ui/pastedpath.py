"""A paste that is only the paths of files: what a terminal types when a file is dropped on it.

Terminals paste a dropped file's path, quoted ('/a b.pdf' or "/a b.pdf"), with its spaces
escaped (/a\\ b.pdf), or as a `file://` URL; several files dropped at once come as several such
paths, separated by spaces or lines. `pasted_paths` tells such a paste from text: every piece
must be an absolute path (or ~/...) of a readable file, so a word that happens to name a file
in the current folder stays text.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from urllib.parse import unquote, urlparse

LONGEST = 4096  # a paste longer than this is text, whatever it holds
MOST_FILES = 8


def pasted_paths(text: str) -> list[Path]:
    """The readable files `text` names, when it names nothing else; [] for any other paste."""
    text = text.strip()
    if not text or len(text) > LONGEST:
        return []
    one = _file(_unquoted(text))  # a single path, its spaces not escaped
    if one is not None:
        return [one]
    found: list[Path | None] = []
    for line in filter(None, (line.strip() for line in text.splitlines())):
        whole = _file(_unquoted(line))  # one path a line, its spaces not escaped
        if whole is not None:
            found.append(whole)
            continue
        try:
            found += [_file(piece) for piece in shlex.split(line)]
        except ValueError:  # an unbalanced quote: text
            return []
    if not found or len(found) > MOST_FILES or any(path is None for path in found):
        return []
    return [path for path in found if path is not None]


def _unquoted(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _file(piece: str) -> Path | None:
    """The readable file `piece` names (a path or a file:// URL), else None."""
    if "\n" in piece or "\0" in piece:
        return None
    if piece.startswith("file://"):
        url = urlparse(piece)
        if url.netloc not in ("", "localhost"):
            return None
        piece = unquote(url.path)
    if not piece.startswith(("/", "~")):
        return None
    try:
        path = Path(piece).expanduser()
        if path.is_file() and os.access(path, os.R_OK):
            return path
    except (OSError, RuntimeError, ValueError):  # a name too long, no home folder
        return None
    return None


def typed_path(text: str) -> Path:
    """The file a path typed (or dropped) into the attach dialog names: quotes, an escaped
    space and a file:// URL read as a terminal writes them; a relative path is the current
    folder's. Not checked: `documents.read_path` says what is wrong with it."""
    found = pasted_paths(text)
    if found:
        return found[0]
    text = _unquoted(text.strip())
    if text.startswith("file://"):
        text = unquote(urlparse(text).path)
    elif "\\ " in text:
        text = text.replace("\\ ", " ")
    return Path(text).expanduser()
