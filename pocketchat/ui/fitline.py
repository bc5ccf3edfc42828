"""One line of parts fitted to a width (the status bar, the header): what goes first when the
terminal is narrow is decided by each part's `keep`, never by where the line gets cut.

A part has one or more forms, longest first, each with a `keep`: while the line is too wide,
the form with the lowest keep gives way, to the part's next (shorter) form or, when it has none,
the part leaves the line (among equal keeps, the later part first). What is left is in the
parts' own order; room left over takes back the longer forms, the most kept first. Only when the part kept longest is alone and still too wide is it cut, with
an ellipsis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.cells import cell_len, set_cell_size

ELLIPSIS = "…"


@dataclass(frozen=True)
class Part:
    """A piece of a line: its forms (text, keep), longest first, a style, and what goes before it."""

    forms: tuple[tuple[str, int], ...]
    style: str = ""
    sep: str = "  "  # written before the part unless it comes first

    @classmethod
    def of(cls, text: str, keep: int, style: str = "", *, shorter: Sequence[tuple[str, int]] = (),
           sep: str = "  ") -> Part:
        return cls(((text, keep), *shorter), style, sep)


def fit(parts: Sequence[Part], width: int) -> list[tuple[str, str, str]]:
    """The (separator, text, style) of each part shown within `width` cells, in order."""
    chosen = [0] * len(parts)  # the form each part shows; len(forms): left out

    def cells(choice: list[int]) -> int:
        shown = [(parts[i], c) for i, c in enumerate(choice) if c < len(parts[i].forms)]
        return sum(cell_len(part.forms[c][0]) + (cell_len(part.sep) if n else 0)
                   for n, (part, c) in enumerate(shown))

    def present() -> list[int]:
        return [i for i, c in enumerate(chosen) if c < len(parts[i].forms)]

    while len(present()) > 1 and cells(chosen) > width:
        # the lowest keep gives way; among equals, the later part
        i = min(reversed(present()), key=lambda k: parts[k].forms[chosen[k]][1])
        chosen[i] += 1
    while True:  # room left: the longer forms back, the most kept first, while they fit
        back = sorted((i for i, c in enumerate(chosen) if c > 0),
                      key=lambda k: -parts[k].forms[chosen[k] - 1][1])
        for i in back:
            trial = chosen[:i] + [chosen[i] - 1] + chosen[i + 1:]
            if cells(trial) <= width:
                chosen = trial
                break
        else:
            break
    shown = present()
    line = [(parts[i].sep if n else "", parts[i].forms[chosen[i]][0], parts[i].style)
            for n, i in enumerate(shown)]
    if line and cell_len(line[0][1]) > width:  # one part alone, too wide: cut it
        sep, text, style = line[0]
        line[0] = (sep, cut(text, width), style)
    return line


def cut(text: str, width: int) -> str:
    """`text` in at most `width` cells, ending with an ellipsis when it was longer."""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    return set_cell_size(text, width - 1).rstrip() + ELLIPSIS


def plain(line: Sequence[tuple[str, str, str]]) -> str:
    return "".join(sep + text for sep, text, _ in line)
