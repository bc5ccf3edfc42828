"""Schemathesis hooks for the server fuzz run (SCHEMATHESIS_HOOKS=support.fuzzhooks): every
generated answer is kept short (at most 4 tokens, 2 choices) so that the run fits its time on
a 2-core machine. Only values that are valid are lowered, and to values that are valid too, so
an invalid request stays invalid and a valid one valid."""

from __future__ import annotations

from typing import Any

import schemathesis

MAX_TOKENS = 4
MAX_CHOICES = 2


def _count(value: Any) -> bool:
    """A valid count: an integer >= 1 (JSON Schema counts 3.0 as an integer too)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1
            and float(value).is_integer())


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    for body in (case.body, kwargs.get("json")):
        if isinstance(body, dict):
            _shorten(body)


def _shorten(body: dict) -> None:
    for key in ("max_tokens", "max_completion_tokens"):
        if _count(body.get(key)) and body[key] > MAX_TOKENS:
            body[key] = MAX_TOKENS
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = MAX_TOKENS
    if _count(body.get("n")) and body["n"] > MAX_CHOICES:
        body["n"] = MAX_CHOICES
