"""One answer's text as it streams: reasoning split off, tool calls parsed, logprobs matched.

`AnswerStream.feed(token_text, logprob)` takes one generated token and returns the `Piece` of
the answer it releases: answer text, thinking text, completed tool calls, and the logprobs of
the tokens whose text the released answer text is. The order of the stages is the contract's:
the think splitter first (reasoning is never parsed for calls), then the tool-call parser on
the answer text (text before a call stays text; a call's own text never does).

Logprobs follow the answer text: a token counts when it was generated outside the reasoning
(or ended it and brought answer text); its logprob waits until the text it belongs to is
released, and is dropped when that text turns out to be a tool call.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketchat.engines.constrain.toolcalls import ToolCallParser
from pocketchat.engines.answer.thinking import ThinkSplitter
from pocketchat.engines.types import TokenLogprob, ToolCall


@dataclass(frozen=True)
class Piece:
    text: str = ""
    thinking: str = ""
    calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.text or self.thinking or self.calls)

    def __add__(self, other: "Piece") -> "Piece":
        return Piece(self.text + other.text, self.thinking + other.thinking,
                     self.calls + other.calls, self.logprobs + other.logprobs)


class AnswerStream:
    """See the module docstring; `parser` is None when no tools are offered."""

    def __init__(self, *, in_thinking: bool, parser: ToolCallParser | None = None,
                 answer_started: bool = False) -> None:
        self.splitter = ThinkSplitter(in_thinking=in_thinking, answer_started=answer_started)
        self.parser = parser
        self.text: list[str] = []  # the answer's content so far (tool calls left out)
        self.thinking: list[str] = []  # its reasoning so far
        self.calls: list[ToolCall] = []
        self._waiting: list[TokenLogprob] = []

    @property
    def in_thinking(self) -> bool:
        return self.splitter.in_thinking

    def feed(self, text: str, logprob: TokenLogprob | None = None) -> Piece:
        was_thinking = self.splitter.in_thinking
        answer, thinking = self.splitter.feed(text)
        # A control token (end of turn) has no bytes; a token holding part of a character has
        # bytes but no text yet: its logprob waits for the text it belongs to.
        if (logprob is not None and (text or logprob.bytes) and not self.splitter.in_thinking
                and (not was_thinking or answer)):
            self._waiting.append(logprob)
        return self._parse(answer, thinking)

    def flush(self) -> Piece:
        answer, thinking = self.splitter.flush()
        piece = self._parse(answer, thinking)
        if self.parser is not None:
            tail, _ = self.parser.flush()
            piece = piece + self._release(tail, ())
        return piece

    def _parse(self, answer: str, thinking: str) -> Piece:
        calls: tuple[ToolCall, ...] = ()
        if self.parser is not None and answer:
            answer, calls = self.parser.feed(answer)
        if thinking:
            self.thinking.append(thinking)
        return Piece(thinking=thinking) + self._release(answer, calls)

    def _release(self, text: str, calls: tuple[ToolCall, ...]) -> Piece:
        logprobs: tuple[TokenLogprob, ...] = ()
        if text:
            logprobs, self._waiting = tuple(self._waiting), []
            self.text.append(text)
        elif calls:
            self._waiting = []  # the tokens were the call's text
        self.calls.extend(calls)
        return Piece(text=text, calls=calls, logprobs=logprobs)


class TextStream:
    """A raw continuation's text as it streams (`EngineBase.complete`): every token's text is
    answer text; no reasoning split, no tool calls. A token holding part of a character waits
    with its logprob for the text it belongs to; a control token (end of text) has none."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[ToolCall] = []  # always empty: a raw continuation calls no tools
        self._waiting: list[TokenLogprob] = []

    def feed(self, text: str, logprob: TokenLogprob | None = None) -> Piece:
        if logprob is not None and (text or logprob.bytes):
            self._waiting.append(logprob)
        if not text:
            return Piece()
        self.text.append(text)
        logprobs, self._waiting = tuple(self._waiting), []
        return Piece(text=text, logprobs=logprobs)

    def flush(self) -> Piece:
        return Piece()
