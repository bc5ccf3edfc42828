"""The tables `bench` prints: Markdown, each column as wide as its widest cell (llama-bench's)."""

from __future__ import annotations

from typing import Sequence


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """`head` and `rows` (cells as text) as a Markdown table, the cells padded to their column."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep, *(line(r) for r in rows)])
