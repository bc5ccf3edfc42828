"""The one token loop: every answer of every backend samples its tokens here.

A backend is a runtime (`Runtime`): it feeds tokens after what its state holds (sampling the
next token at the last one when asked) and says what a token's bytes are and which tokens
end the generation. The loop owns the rest, once:
- the first token's mark: what was fed before it is prompt processing, after it decoding
  (`Meter`, the one clock of every backend: tokens fed and seconds spent feeding);
- text: a token's bytes through an incremental UTF-8 decoder (a character split across
  tokens is never garbled);
- the ends: an end-of-generation token ("stop"), the length cap or a full context
  ("length"); the last sampled token is left unfed (`pending`), the engine feeds it after
  the answer when there is room (the next turn's prompt holds it anyway);
- the thought's budget: while the answer is inside its reasoning (`Thought`), the loop counts
  its tokens, and when the budget is reached, the user asks for the answer now, or the
  length cap would end inside the thought, it feeds the closing (`Thought.closing`: a short
  line and the end-of-thinking tag, as the template writes a closed thought) as if the model
  had written it, and the answer follows.
"""

from __future__ import annotations

import codecs
from collections import deque
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Sequence

from pocketchat.engines.types import ThinkingEnd, TokenLogprob

CLOSING_LINE = "Time is up, so I answer now."


class Cancelled(Exception):
    """Raised inside a backend's evaluation when cancel() was called."""

ANSWER_ROOM = 256  # at most this many tokens are kept for the answer when max_tokens is near


class Runtime(Protocol):
    """What the loop needs of a backend, for one sequence."""

    def feed(self, tokens: Sequence[int], *, sample: bool = False
             ) -> tuple[int, TokenLogprob | None] | None:
        """Evaluate `tokens` after the state; with `sample`, the next token (and its logprob
        when asked) from the last one's logits. Raises `Cancelled` on cancel."""
        ...

    def piece(self, token: int) -> bytes:
        """What `token` adds to the text."""
        ...

    def is_end(self, token: int) -> bool:
        """Whether `token` ends the generation."""
        ...

    def accept(self, tokens: Sequence[int]) -> None:
        """Tokens fed as if sampled (a forced closing): the answer's constraint sees them."""
        ...

    def advance(self, tokens: Sequence[int], limit: int) -> list[tuple[int, TokenLogprob | None]]:
        """Feed `tokens` and sample what follows: one token, or with up to `limit` drafted
        tokens verified in the same step, the accepted ones (fed) and one more (not fed)."""
        ...


@dataclass(frozen=True)
class Step:
    """One sampled token's text; `finish` set on the last one ("stop" or "length");
    `logprob` when the answer asked for logprobs."""

    text: str = ""
    finish: str | None = None
    logprob: TokenLogprob | None = None
    forced: bool = False  # the loop wrote it (a thought's closing), not the model
    tokens: int = 1  # the tokens whose text this is


@dataclass
class Meter:
    """One answer's clock: tokens fed and seconds spent feeding, split at the first token."""

    fed: int = 0
    seconds: float = 0.0
    mark: tuple[int, float] | None = None  # (fed, seconds) when the first token was sampled

    def add(self, n: int, seconds: float) -> None:
        self.fed += n
        self.seconds += seconds

    def first(self) -> None:
        if self.mark is None:
            self.mark = (self.fed, self.seconds)

    def split(self) -> tuple[int, float, int, float]:
        """(prompt tokens, prompt seconds, generated tokens, decode seconds)."""
        p_n, p_s = self.mark if self.mark is not None else (self.fed, self.seconds)
        return p_n, p_s, self.fed - p_n, self.seconds - p_s


@dataclass
class Thought:
    """The reasoning's budget and how it ended (see the module docstring)."""

    closing: list[int]  # the tokens that close a thought
    budget: int | None = None  # thought tokens before the loop closes it; None: no budget
    now: threading.Event = field(default_factory=threading.Event)  # the user's "answer now"
    tokens: int = 0  # tokens of the thought so far (its closing included)
    end: ThinkingEnd = ""

    def due(self, generated: int, max_new: int) -> ThinkingEnd:
        """Why the thought must close now ("" while it may go on, or when its closing and
        one answer token no longer fit: the length cap ends it then)."""
        if not self.closing or generated + len(self.closing) + 1 > max_new:
            return ""
        if self.now.is_set():
            return "user"
        if self.budget is not None and self.tokens >= self.budget:
            return "budget"
        room = max(1, min(ANSWER_ROOM, (max_new - len(self.closing)) // 4))
        if generated + len(self.closing) + room >= max_new:
            return "budget"  # the length cap would end inside the thought: the answer keeps room
        return ""

    def headroom(self, generated: int, max_new: int) -> int:
        """Tokens the thought may still take before it must close (drafts stay within it)."""
        if not self.closing:
            return max_new
        left = max_new - generated - len(self.closing) - 1
        left -= max(1, min(ANSWER_ROOM, (max_new - len(self.closing)) // 4))
        if self.budget is not None:
            left = min(left, self.budget - self.tokens - 1)
        return 0 if self.now.is_set() else max(0, left)


def steps(rt: Runtime, last: Sequence[int], *, max_new: int, room: Callable[[], int],
          meter: Meter, thought: Thought | None = None,
          in_thinking: Callable[[], bool] = lambda: False, pending: list[int] | None = None,
          ) -> Iterator[Step]:
    """The answer's steps: `last` (the prompt's last tokens) fed and the first token sampled,
    then each token's text until an end-of-generation token, `max_new` tokens, or no `room()`
    left in the context. `in_thinking()` says whether the answer is inside its reasoning after
    the text yielded so far; `pending[0]` is set to the last sampled token, which is not fed.
    An end of turn inside the thought closes the thought instead (the answer follows)."""
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = pending if pending is not None else [0]
    made = 0

    def close(why: ThinkingEnd) -> Step | None:
        """The closing as a step (fed with the next token), or None when it does not fit."""
        assert thought is not None
        closing = thought.closing
        if not closing or made + len(closing) + 1 > max_new or room() <= len(closing) + 1:
            return None
        rt.accept(closing)
        thought.tokens += len(closing)
        thought.end = why
        return Step(utf8.decode(b"".join(rt.piece(t) for t in closing)), None, None,
                    forced=True, tokens=len(closing))

    first = list(last)
    if thought is not None and in_thinking():  # no room for a thought at all: closed at once
        why = thought.due(0, max_new)
        forced = close(why) if why else None
        if forced is not None:
            made += forced.tokens
            first += thought.closing
            yield forced
    ready = deque([rt.feed(first, sample=True)])  # sampled tokens: all fed but the last
    meter.first()
    while True:
        tok, logprob = ready.popleft()
        made += 1
        pending[:] = [] if ready else [tok]
        thinking = thought is not None and in_thinking()
        if rt.is_end(tok):  # the model ends its turn inside the thought: closed for it
            forced = close("model") if thinking else None
            if forced is None:
                yield Step(utf8.decode(b"", final=True), "stop")
                return
            made += forced.tokens - 1  # the end token is not part of the answer
            yield forced
            pending[:] = []
            ready.append(rt.feed(thought.closing, sample=True))  # type: ignore[union-attr]
            continue
        text = utf8.decode(rt.piece(tok))
        if made >= max_new or room() <= 0:
            yield Step(text + utf8.decode(b"", final=True), "length", logprob)
            return
        yield Step(text, None, logprob)
        feed = [tok]
        forced = None
        if thinking and thought is not None:
            thought.tokens += 1
            if in_thinking():
                why = "" if ready else thought.due(made, max_new)
                forced = close(why) if why else None
                if forced is not None:
                    made += forced.tokens
                    feed += thought.closing
                    yield forced
            elif not thought.end:
                thought.end = "model"
        if ready:
            continue  # an accepted draft: already fed
        pending[:] = []
        if forced is not None:
            ready.append(rt.feed(feed, sample=True))
            continue
        limit = min(max_new - made - 1, room() - 2)
        if thought is not None and in_thinking():
            limit = min(limit, thought.headroom(made, max_new))
        ready.extend(rt.advance(feed, limit))
