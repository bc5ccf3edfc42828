"""One answer as the client sees it: stop sequences applied, thinking apart, the last stats.

The engines know nothing of `stop`: `Reply` watches the answer text as it streams, holds back
a tail that could be the start of a stop sequence (so a stop split across chunks is never
sent), and cuts the answer where one appears; the caller then cancels the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pocketchat.engines.answer.partial import partial_suffix
from pocketchat.engines.types import Chunk, Stats, TokenLogprob, ToolCall


class StopScanner:
    """Text in, text out, cut at the first stop sequence; a possible stop prefix is held back."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.held = ""
        self.hit = False
        self.matched: str | None = None  # the stop sequence that ended the text

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        if self.hit:
            return ""
        buf = self.held + text
        found = [(i, s) for i, s in ((buf.find(s), s) for s in self.stops) if i >= 0]
        if found:
            at, self.matched = min(found, key=lambda f: f[0])
            self.hit, self.held = True, ""
            return buf[:at]
        keep = partial_suffix(buf, self.stops)
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        out, self.held = ("" if self.hit else self.held), ""
        return out


@dataclass
class Delta:
    """What to send for one chunk: text, reasoning, finished tool calls, the text's logprobs."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    stats: Stats | None = None  # the figures so far (the prompt's are known from the first)


@dataclass
class Reply:
    """Accumulates one answer; `feed(chunk)` gives what to send now.

    A chunk's logprobs are sent with the last of its text: held back while the stop scanner
    holds part of that text, dropped with text cut by a stop sequence.
    """

    stops: Sequence[str] = ()
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        self._scanner = StopScanner(self.stops)
        self._fed = 0  # characters of answer text given to the scanner
        self._sent = 0  # characters of it sent on (a prefix of what was fed)
        self._pending: list[tuple[int, int, tuple[TokenLogprob, ...]]] = []  # (start, end, lps)

    @property
    def matched(self) -> str | None:
        """The stop sequence that ended the answer (None if none did)."""
        return self._scanner.matched

    @property
    def stopped(self) -> bool:
        """A stop sequence appeared: the rest of the engine's answer is not wanted."""
        return self._scanner.hit

    def feed(self, chunk: Chunk) -> Delta:
        self.stats = chunk.stats
        if self._scanner.hit:  # past a stop: the engine is being cancelled, nothing more is sent
            delta = Delta()
        else:
            if chunk.logprobs:
                self._pending.append((self._fed, self._fed + len(chunk.text), chunk.logprobs))
            self._fed += len(chunk.text)
            delta = Delta(reasoning=chunk.thinking, content=self._scanner.feed(chunk.text),
                          tool_calls=chunk.tool_calls)
        if chunk.finish_reason is not None:
            delta.content += self._scanner.flush()
            self.finish_reason = "stop" if self._scanner.hit else chunk.finish_reason
        self._sent += len(delta.content)
        delta.logprobs = self._release(final=chunk.finish_reason is not None or self._scanner.hit)
        self.content.append(delta.content)
        self.reasoning.append(delta.reasoning)
        self.tool_calls.extend(delta.tool_calls)
        self.logprobs.extend(delta.logprobs)
        delta.stats = chunk.stats
        return delta

    def _release(self, final: bool) -> tuple[TokenLogprob, ...]:
        """The logprobs of chunks whose text has been sent (at the end: those it began in)."""
        out: list[TokenLogprob] = []
        while self._pending:
            start, end, lps = self._pending[0]
            if end <= self._sent or (final and start < self._sent):
                out.extend(lps)
            elif not final:
                break
            self._pending.pop(0)
        return tuple(out)

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def thinking(self) -> str:
        return "".join(self.reasoning)
