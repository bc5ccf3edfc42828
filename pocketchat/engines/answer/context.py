"""Fit a conversation into the context window: drop the oldest turns, say how many.

A turn is a user message and the replies after it. The system prompt stays, the newest turn
(the question being asked) stays, and whole turns go oldest first, so the roles still
alternate the way chat templates require. The number of dropped messages is reported in
`Stats.dropped_messages`; a question that alone exceeds the window raises `ContextOverflow`,
which the engine turns into a clear error chunk, never a crash or a silent cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pocketchat.errors import ContextOverflow
from pocketchat.engines.types import Message

DEFAULT_REPLY_RESERVE = 1024


@dataclass(frozen=True)
class Fitted:
    messages: tuple[Message, ...]
    dropped: int  # messages left out, oldest first
    tokens: int  # prompt tokens of what was kept
    whole: int = 0  # prompt tokens of the whole conversation (more than `tokens` when cut)


def reply_reserve(n_ctx: int, max_tokens: int | None) -> int:
    """Room kept free for the answer: the requested maximum, at most a quarter of the window."""
    wanted = max_tokens if max_tokens and max_tokens > 0 else DEFAULT_REPLY_RESERVE
    return max(1, min(wanted, n_ctx // 4))


def split_turns(messages: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """Leading system messages, then turns (each starts at a user message)."""
    system: list[Message] = []
    i = 0
    while i < len(messages) and messages[i].role == "system":
        system.append(messages[i])
        i += 1
    turns: list[list[Message]] = []
    for m in messages[i:]:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return system, turns


def fit_messages(
    messages: Sequence[Message], count: Callable[[Sequence[Message]], int], budget: int
) -> Fitted:
    """The newest suffix of whole turns (plus the system prompt) whose prompt fits `budget`.

    `count(messages)` is the prompt length in tokens for a list of messages. It is called
    O(log turns) times: the number of turns to drop is found by bisection (fewer turns never
    make a longer prompt).
    """
    messages = tuple(messages)
    total = count(messages)
    if total <= budget:
        return Fitted(messages, 0, total, total)
    system, turns = split_turns(messages)

    def keep_from(k: int, with_system: bool = True) -> tuple[Message, ...]:
        kept = [m for turn in turns[k:] for m in turn]
        return tuple((system if with_system else []) + kept)

    last = len(turns) - 1
    if last < 0:  # only system messages
        raise ContextOverflow(total, budget, whole=total)
    best_tokens = count(keep_from(last))
    if best_tokens > budget:
        alone = count(keep_from(last, with_system=False)) if system else best_tokens
        if alone > budget:
            raise ContextOverflow(alone, budget, whole=total)
        kept = keep_from(last, with_system=False)
        return Fitted(kept, len(messages) - len(kept), alone, total)
    lo, hi = 0, last  # count(keep_from(hi)) fits; find the smallest k that fits
    tokens_at = {last: best_tokens}
    while lo < hi:
        mid = (lo + hi) // 2
        n = count(keep_from(mid))
        if n <= budget:
            hi = mid
            tokens_at[mid] = n
        else:
            lo = mid + 1
    kept = keep_from(hi)
    return Fitted(kept, len(messages) - len(kept), tokens_at.get(hi) or count(kept), total)
