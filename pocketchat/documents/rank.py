"""Okapi BM25 over passages: the lexical ranker that finds the passages a question's words are
in, offline and with no model to download (an embedding model would be a second download and
a second model in memory beside a 35B one). Written here rather than taken from a package: it
is a few lines, and the packages that have it bring SciPy or an unmaintained release."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

K1, B = 1.5, 0.75
WORD = re.compile(r"\w+", re.UNICODE)
STOP = frozenset("a an and are as at be by do does for from how i in is it of on or that the "
                 "this to was what when where which who why with you your".split())


def terms(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if w not in STOP]


def scores(query: str, docs: Sequence[str]) -> list[float]:
    """Each of `docs`' BM25 score for `query` (0 for a passage with none of its words)."""
    bags = [Counter(terms(d)) for d in docs]
    if not bags:
        return []
    lengths = [sum(b.values()) for b in bags]
    mean = (sum(lengths) / len(lengths)) or 1.0
    n = len(bags)
    out = [0.0] * n
    for term in set(terms(query)):
        having = sum(1 for b in bags if term in b)
        if not having:
            continue
        idf = math.log(1 + (n - having + 0.5) / (having + 0.5))
        for i, bag in enumerate(bags):
            f = bag.get(term, 0)
            if f:
                out[i] += idf * f * (K1 + 1) / (f + K1 * (1 - B + B * lengths[i] / mean))
    return out


def ranked(query: str, docs: Sequence[str]) -> list[int]:
    """Indices of `docs`, best first; ties (and a query none of them matches) in their order."""
    s = scores(query, docs)
    return sorted(range(len(docs)), key=lambda i: (-s[i], i))
